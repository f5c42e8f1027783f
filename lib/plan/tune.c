/* tune.c: the fastest options that fit (tune.h). */
#include "plan/tune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "model/family.h"

/* How far a candidate's options are from fsdp-train's defaults (-wrap 1,
 * -prefetch backward, RAF, -limit_all_gathers 2, no recomputation). */
static int DistanceFromDefaults(const FsdpTuneCandidate *c)
{
  return (c->wrap != 1) + (c->prefetch != FSDP_PREFETCH_BACKWARD) + !c->raf + (c->L != 2) + c->rc;
}

/* Most tokens/s first; among equal predictions (F = 1 gathers nothing, so
 * wrap, prefetch and L change nothing there) the least memory, then the
 * fewest micro-steps (a micro-step costs what the replay leaves out: data,
 * loss, accumulation), then the options nearest the defaults, then the
 * largest sharding factor: a total order, so the pick does not depend on
 * the sort's tie handling. */
static int CompareCandidates(const void *a, const void *b)
{
  const FsdpTuneCandidate *x = a, *y = b;
  if (x->o.tokens_per_s != y->o.tokens_per_s) return x->o.tokens_per_s < y->o.tokens_per_s ? 1 : -1;
  if (x->o.mem_total != y->o.mem_total) return x->o.mem_total > y->o.mem_total ? 1 : -1;
  if (x->K != y->K) return x->K > y->K ? 1 : -1;
  int dx = DistanceFromDefaults(x), dy = DistanceFromDefaults(y);
  if (dx != dy) return dx > dy ? 1 : -1;
  if (x->F != y->F) return x->F < y->F ? 1 : -1;
  if (x->wrap != y->wrap) return x->wrap > y->wrap ? 1 : -1;
  if (x->prefetch != y->prefetch) return x->prefetch > y->prefetch ? 1 : -1;
  if (x->L != y->L) return x->L > y->L ? 1 : -1;
  if (x->ac != y->ac) return x->ac < y->ac ? 1 : -1;
  return (x->raf < y->raf) - (x->raf > y->raf);
}

/* The run with candidate c's options, as fsdp-train would read them. */
static void ApplyCandidate(FsdpPlanRun *run, const FsdpTuneCandidate *c)
{
  run->topo.sharding_factor = c->F;
  run->wrap = c->wrap;
  run->fsdp.prefetch = (FsdpPrefetch)c->prefetch;
  run->fsdp.reshard_after_forward = c->raf;
  run->fsdp.recompute = c->rc;
  run->batch_size = c->B;
  run->fsdp.grad_accum = c->K;
  run->fsdp.accum_comm = c->ac;
  run->fsdp.limit_all_gathers = c->L;
}

/* The search's state: the candidates that fit, the smallest of all. */
typedef struct {
  const FsdpPlanRun *run;
  const FsdpPlanPredictOptions *o;
  const FsdpProfile *prof;
  FsdpPlanUnitsCache cache;
  FsdpTuneCandidate *c, smallest;
  size_t n, cap;
  int tried;
  double limit;
} Search;

/* Plans candidate x (its outcome into x->o), counts it, keeps the one
 * of least memory in s->smallest, and appends it to s->c when it fits. */
static int TryCandidate(Search *s, FsdpTuneCandidate *x)
{
  FsdpPlanRun run = *s->run;
  ApplyCandidate(&run, x);
  FsdpPlan plan;
  int err = FsdpPlanCompute(&run, s->o, s->prof, &s->cache, &plan);
  const FsdpStepTimeResult *sim = &plan.pred.profile.sim;
  x->o = (FsdpTuneOutcome){plan.mem.total, sim->step_s, sim->exposed_s, sim->compute_s,
                           FsdpPlanTokensPerSecond(&plan)};
  FsdpPlanFree(&plan);
  FSDP_CALL(err);
  s->tried++;
  if (x->o.mem_total < s->smallest.o.mem_total) s->smallest = *x;
  if ((double)x->o.mem_total > s->limit) return FSDP_SUCCESS;
  if (FsdpArrayReserve(&s->c, &s->cap, s->n + 1, sizeof *s->c))
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory allocating %zu bytes", 2 * s->cap * sizeof *s->c);
  s->c[s->n++] = *x;
  return FSDP_SUCCESS;
}

/* Every combination of [Note: the tuner] for the checked run r. */
static int SearchAll(Search *s, const FsdpPlanRun *r, int per_rank)
{
  static const int kLimits[] = {1, 2, 4};
  int nl = (int)FsdpModelDescInt(&r->model, "n_layer"), err = FSDP_SUCCESS;
  for (int F = 1; !err && F <= r->W; F++) {
    if (r->W % F || (r->G % F && F % r->G)) continue;
    for (int wrap = 1; !err && wrap <= (nl < 8 ? nl : 8); wrap++) {
      if (nl % wrap) continue;
      /* B and rc outside the rest: the units planned are kept while
       * they stay (the cache) */
      for (int B = 1; !err && B <= per_rank; B++)
        for (int rc = 0; !err && rc <= 1 && per_rank % B == 0; rc++)
          for (int pf = 0; !err && pf < FSDP_NPREFETCH; pf++)
            for (int raf = 1; !err && raf >= 0; raf--) {
              int K = per_rank / B, searchL = F > 1 && pf != FSDP_PREFETCH_NONE;
              for (int li = 0; !err && li < (searchL ? 3 : 1); li++)
                for (int ai = 0; !err && ai < (K > 1 ? 2 : 1); ai++) {
                  FsdpTuneCandidate x = {F, wrap, pf, raf, rc, B, K,
                                         K > 1 ? 1 - ai : r->fsdp.accum_comm,
                                         searchL ? kLimits[li] : r->fsdp.limit_all_gathers, {0}};
                  err = TryCandidate(s, &x);
                }
            }
    }
  }
  return err;
}

static int NoneFits(const Search *s)
{
  const FsdpTuneCandidate *m = &s->smallest;
  FSDP_ERROR(FSDP_ERR_USAGE,
             "-tune: none of %d configurations fits the memory limit of %.0f bytes "
             "(%.3f GiB) per rank; the smallest needs %llu bytes (%.3f GiB: "
             "-sharding_factor %d -wrap %d -prefetch %s -reshard_after_forward %d "
             "-recompute %d -batch_size %d -grad_accum %d -accum_comm %d "
             "-limit_all_gathers %d)",
             s->tried, s->limit, s->limit / 1073741824.0, (unsigned long long)m->o.mem_total,
             m->o.mem_total / 1073741824.0, m->F, m->wrap, FsdpPrefetchNames[m->prefetch], m->raf,
             m->rc, m->B, m->K, m->ac, m->L);
}

int FsdpTune(const FsdpPlanRun *run, const FsdpPlanPredictOptions *o, double memory_limit,
             FsdpTuneResult *result)
{
  memset(result, 0, sizeof *result);
  if (!o->profile || !o->profile[0])
    FSDP_ERROR(FSDP_ERR_USAGE, "-tune needs -profile FILE (a machine profile from fsdp-probe)");
  FsdpPlanRun *r = &result->run;
  *r = *run;
  FSDP_CALL(FsdpPlanRunCheck(r));
  FsdpProfile *prof = malloc(sizeof *prof);
  FSDP_CHECK_ALLOC(prof, sizeof *prof);
  int err = FsdpProfileRead(o->profile, prof);
  if (!err) err = FsdpPlanCheckProfile(r, o->profile, prof);
  Search s = {run, o, prof, {0}, NULL, {0}, 0, 4096, 0, 0};
  s.limit = memory_limit > 0 ? memory_limit : 0.9 * (double)prof->mem_available;
  s.smallest.o.mem_total = UINT64_MAX;
  result->per_rank = r->batch_size * (r->fsdp.grad_accum > 0 ? r->fsdp.grad_accum : 1);
  if (!err) {
    s.c = malloc(s.cap * sizeof *s.c);
    if (!s.c) err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
  }
  if (!err) err = SearchAll(&s, r, result->per_rank);
  if (!err && s.n == 0) err = NoneFits(&s);
  if (!err) {
    qsort(s.c, s.n, sizeof *s.c, CompareCandidates);
    snprintf(result->source, sizeof result->source, "%s", prof->source);
    result->contended = FsdpPlanContendedFactor(r, prof, &result->contended_why);
    result->contended_comm = FsdpPlanContendedCommFactor(r, prof);
  }
  FsdpPlanUnitsCacheClear(&s.cache);
  result->c = s.c;
  result->n = s.n;
  result->tried = s.tried;
  result->limit = s.limit;
  free(prof);
  return err;
}

void FsdpTuneResultFree(FsdpTuneResult *result)
{
  free(result->c);
  result->c = NULL;
  result->n = 0;
}

int FsdpTuneWriteOptions(const char *path, const FsdpTuneResult *result, const char *profile,
                         const FsdpTuneCandidate *c)
{
  const FsdpPlanRun *r = &result->run;
  FILE *f = fopen(path, "w");
  if (!f) FSDP_ERROR(FSDP_ERR_USAGE, "-tune_options_out %s: cannot write it: %s", path, strerror(errno));
  fprintf(f,
          "# fsdp-plan -tune: the fastest options predicted for %s on %d ranks (%d per node)\n"
          "# from the profile %s: step %.4g ms, exposed communication %.4g ms,\n"
          "# %.4g tokens/s, %.3f GiB per rank.  Use after the run's own options:\n"
          "#   fsdp-train -options_file run.opts -options_file %s\n"
          "-sharding_factor %d\n-wrap %d\n-prefetch %s\n-reshard_after_forward %d\n"
          "-recompute %d\n-batch_size %d\n-grad_accum %d\n-accum_comm %d\n"
          "-limit_all_gathers %d\n",
          r->model_name, r->W, r->G, profile, 1e3 * c->o.step_s, 1e3 * c->o.exposed_s,
          c->o.tokens_per_s, c->o.mem_total / 1073741824.0, path, c->F, c->wrap,
          FsdpPrefetchNames[c->prefetch], c->raf, c->rc, c->B, c->K, c->ac, c->L);
  if (fclose(f) != 0)
    FSDP_ERROR(FSDP_ERR_IO, "-tune_options_out %s: writing failed: %s", path, strerror(errno));
  return FSDP_SUCCESS;
}
