/* tune.h: the fastest options that fit (fsdp-plan -tune).
 *
 * [Note: the tuner] (Its output option is -tune_options_out, not
 * -options_out: FSDP_OPTIONS is shared by every program, and -options_out
 * would be a near miss of every program's -options_left, an error there.)
 * Every combination of: F among the divisors of W whose sharding groups
 * keep to whole nodes or whole groups of nodes (F divides G, or G divides
 * F); -wrap among the divisors of n_layer up to 8; the three prefetch
 * modes; RAF and NRAF; activation recomputation off and on; the
 * micro-batch B among the divisors of the sequences per rank per step
 * (-batch_size x -grad_accum as given), with K = that / B; where K > 1,
 * -accum_comm 1 and 0 (reduce every micro-step, under the next one's
 * compute, or once: more memory, 1/K the communication and none beside
 * the compute of micro-steps 2..K, which [Note: contended compute]
 * charges where no core is idle); where a prefetch issues gathers ahead
 * (F > 1, -prefetch backward or both), -limit_all_gathers 1, 2 and 4 (the
 * ring's 1 + L gathered units under RAF against the gathers' head start,
 * [Note: prefetch and the limiter] in fsdp.c; without prefetch or gathers
 * L changes nothing but memory and stays as given).  Each is planned
 * exactly as fsdp-plan plans one run (plan/plan.h) and replayed on the
 * profile; the fastest that fits the memory limit wins, ties going to
 * less memory (FsdpTuneCandidate's order below).
 */
#ifndef FSDP_PLAN_TUNE_H
#define FSDP_PLAN_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"

/* What -tune compares of one plan. */
typedef struct {
  uint64_t mem_total;
  double step_s, exposed_s, compute_s, tokens_per_s;
} FsdpTuneOutcome;

/* One combination: -sharding_factor, -wrap, -prefetch (FsdpPrefetch),
 * -reshard_after_forward, -recompute, -batch_size, -grad_accum,
 * -accum_comm, -limit_all_gathers; and its plan's outcome. */
typedef struct {
  int F, wrap, prefetch, raf, rc, B, K, ac, L;
  FsdpTuneOutcome o;
} FsdpTuneCandidate;

typedef struct {
  FsdpTuneCandidate *c; /* the candidates that fit, best first (owned) */
  size_t n;
  int tried;            /* the configurations planned */
  double limit;         /* bytes a rank may use */
  int per_rank;         /* sequences per rank per step */
  FsdpPlanRun run;      /* the run searched, checked (FsdpPlanRunCheck) */
  char source[16];      /* the profile's "source" */
  double contended, contended_comm; /* the profile's factors for this run */
  const char *contended_why;
} FsdpTuneResult;

/* Not collective.  Searches the options of run ([Note: the tuner]) over
 * the profile o->profile (required: a usage error without it), within
 * memory_limit bytes per rank (0: 90% of the profile's available memory).
 * None fitting is a usage error naming the smallest.  FsdpTuneResultFree
 * after success and failure alike. */
int FsdpTune(const FsdpPlanRun *run, const FsdpPlanPredictOptions *o, double memory_limit,
             FsdpTuneResult *result);
void FsdpTuneResultFree(FsdpTuneResult *result);

/* Not collective.  Writes candidate c of result as an options file
 * fsdp-train takes (-options_file): the options the search set, nothing
 * else (the run's own options file goes first on the command line, this
 * one after it).  profile: the profile's path, for the comment. */
int FsdpTuneWriteOptions(const char *path, const FsdpTuneResult *result, const char *profile,
                         const FsdpTuneCandidate *c);

#endif
