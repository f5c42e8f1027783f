/* predict.h: the step time of the planned run, predicted from given rates
 * (-flops, -intra_bw, -inter_bw: no overlap and full overlap) or from a
 * machine profile (-profile FILE, measured by fsdp-probe: the step's
 * schedule replayed over the profile's rates, plan/steptime.h). */
#ifndef FSDP_PLAN_PREDICT_H
#define FSDP_PLAN_PREDICT_H

#include "plan/memory.h"
#include "plan/profile.h"
#include "plan/steptime.h"
#include "plan/traffic.h"

typedef struct {
  double flops;        /* -flops: FLOP/s of a rank (0: not given) */
  double intra_bw;     /* -intra_bw: bytes/s a rank receives from its node */
  double inter_bw;     /* -inter_bw: bytes/s of a node's link, shared by its G ranks */
  const char *profile; /* -profile FILE (NULL or "": none) */
  int schedule;        /* -plan_schedule: keep the replayed step's events */
} FsdpPlanPredictOptions;

/* The step predicted from a profile. */
typedef struct {
  double compute_s, gemm_s, attention_s, memory_s, optimizer_s;
  double recompute_s;    /* -recompute 1: the blocks' forward again, in backward */
  int stages_measured;   /* stage times from the profile's run of this model */
  double coll_s[FSDP_COLL_NKINDS];
  FsdpStepTimeResult sim; /* the schedule replayed (plan/steptime.h) */
  FsdpStepEvent *events;  /* its events, with -plan_schedule (owned) */
  int nevents;
  double peak;            /* the profile's peak FLOP/s of a rank (0: unknown) */
  double contended;       /* [Note: contended compute] factor charged (1: none) */
  double contended_comm;  /* and the collectives' beside compute */
  const char *contended_why; /* why that factor */
  double join_fraction;   /* [Note: joining a collective] charged */
  double sustained;       /* [Note: sustained speed] factor charged (1: none) */
  double concurrent;      /* [Note: two collectives at once] factor charged (1: none) */
} FsdpPlanProfilePrediction;

typedef struct {
  /* training FLOP of a micro-step (6 N + 6 L T C per token) and what
   * -recompute adds (time, not model FLOP: MFU leaves it out) */
  double flop, flop_recompute;
  int on;                 /* rates or a profile given: the seconds below mean something */
  double compute_s, intra_s, inter_s; /* the step's compute and communication */
  int from_profile;       /* -profile: `profile` below */
  FsdpPlanProfilePrediction profile;
  double tokens_per_step; /* over the world and the micro-steps */
} FsdpPlanPrediction;

/* Not collective.  A profile answers for a plan only if it was measured on
 * the same back-end, with the plan's ranks per node, and on at least as
 * many nodes (the cross-node curves of 2 nodes say nothing of 64): usage
 * errors naming path and what to do. */
int FsdpPlanCheckProfile(const FsdpPlanRun *run, const char *path, const FsdpProfile *p);

/* Not collective.  [Note: contended compute] (plan/steptime.h): the
 * profile's factor where the plan's ranks fill a node's cores (G ranks x
 * the profile's threads per rank >= its cores per node), else 1; *why
 * says which.  FsdpPlanContendedCommFactor: the other side, the
 * all-reduce the probe ran beside the stages against the world all-reduce
 * curve alone, where the first applies (> 1); else 1. */
double FsdpPlanContendedFactor(const FsdpPlanRun *run, const FsdpProfile *p, const char **why);
double FsdpPlanContendedCommFactor(const FsdpPlanRun *run, const FsdpProfile *p);

/* Not collective.  The step of the planned run (units, memory, traffic and
 * groups of the same plan) predicted as o asks; cached: the profile of
 * o->profile already read and checked (NULL: read and check it here).
 * FsdpPlanPredictionFree frees the events. */
int FsdpPlanPredict(const FsdpPlanRun *run, const FsdpPlanUnits *units, const FsdpPlanMemory *mem,
                    const FsdpPlanTraffic *traffic, const FsdpGroup *shard,
                    const FsdpGroup *replica, const FsdpPlanPredictOptions *o,
                    const FsdpProfile *cached, FsdpPlanPrediction *out);
void FsdpPlanPredictionFree(FsdpPlanPrediction *p);

#endif
