/* plan.h: the plan of one fsdp-train run, computed without running it:
 * per-rank memory (plan/memory.h), per-step collective bytes split into
 * intra- and inter-node (plan/traffic.h), and with rates or a machine
 * profile the step time (plan/predict.h).  fsdp-plan prints it; -tune
 * (plan/tune.h) plans many. */
#ifndef FSDP_PLAN_PLAN_H
#define FSDP_PLAN_PLAN_H

#include "plan/memory.h"
#include "plan/predict.h"
#include "plan/run.h"
#include "plan/traffic.h"
#include "plan/units.h"

typedef struct {
  FsdpPlanRun run;         /* the run, checked and completed (FsdpPlanRunCheck) */
  FsdpGroup shard, replica;
  const FsdpPlanUnits *units; /* the plan's own (owned_units) or a cache's */
  FsdpPlanUnits owned_units;
  FsdpPlanMemory mem;
  FsdpPlanTraffic traffic;
  FsdpPlanPrediction pred;
} FsdpPlan;

/* Not collective.  Plans run as o asks.  cached: the profile of o->profile
 * already read and checked (NULL: read it); cache: keep the units for the
 * next plan (-tune; NULL: plan them for this one).  FsdpPlanFree after
 * success and failure alike. */
int FsdpPlanCompute(const FsdpPlanRun *run, const FsdpPlanPredictOptions *o,
                    const FsdpProfile *cached, FsdpPlanUnitsCache *cache, FsdpPlan *plan);
void FsdpPlanFree(FsdpPlan *plan);

/* The replayed step's tokens per second (0: no profile prediction). */
double FsdpPlanTokensPerSecond(const FsdpPlan *plan);

#endif
