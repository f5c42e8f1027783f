/* units.h: the model's units as the planned run registers them, each
 * with its FlatParam for the run's F, and its stages in forward order
 * ([Note: planning from the library] in plan/run.h). */
#ifndef FSDP_PLAN_UNITS_H
#define FSDP_PLAN_UNITS_H

#include "plan/run.h"
#include "runtime/flatparam.h"

typedef struct {
  char name[64];
  int is_root;
  FsdpParamSpec *specs; /* owned: the specs the run registers */
  int nparams;
  FlatParam fp;         /* the layout at the run's F, my shard */
} FsdpPlanUnit;

typedef struct {
  FsdpPlanUnit *u;
  int nu;
  int *stage_unit; /* [nstages] each stage's unit, forward order (the step replay's) */
  int nstages;
} FsdpPlanUnits;

/* Not collective (a runtime on MPI_COMM_SELF only records the
 * registration: no set-up, nothing big allocated).  The units of run's
 * model, with FlatParams for run->F at shard position shard_rank (my
 * position in my sharding group).  After FsdpPlanRunCheck. */
int FsdpPlanUnitsCreate(const FsdpPlanRun *run, int shard_rank, FsdpPlanUnits *out);
void FsdpPlanUnitsFree(FsdpPlanUnits *units);

/* -tune plans thousands of candidates, most of them the same units (the
 * model, -wrap and F decide them; building gpt-175b's table and its
 * FlatParams is most of a plan's time): a cache keeps the last units
 * planned for the next plan with the same key (-wrap, -batch_size, F,
 * the shard position, -recompute; the model is the same in a search).
 * Zero-initialize; FsdpPlanUnitsCacheClear frees what it holds. */
typedef struct {
  int valid, wrap, B, F, shard_rank, recompute;
  FsdpPlanUnits units;
} FsdpPlanUnitsCache;

/* Not collective.  *out: the cache's units (owned by it, valid until the
 * next call or FsdpPlanUnitsCacheClear), planned anew when the key
 * changed. */
int FsdpPlanUnitsCached(FsdpPlanUnitsCache *cache, const FsdpPlanRun *run, int shard_rank,
                        const FsdpPlanUnits **out);
void FsdpPlanUnitsCacheClear(FsdpPlanUnitsCache *cache);

#endif
