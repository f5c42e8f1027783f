/* units.c: the model's units as the planned run registers them (units.h). */
#include "plan/units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "comm/coll.h"
#include "kernels/kernels.h"
#include "model/family.h"

/* The specs of runtime unit i, copied (the runtime goes before the plan),
 * and its FlatParam for F at shard position shard_rank. */
static int PlanUnit(FsdpRuntime rt, int i, int F, int shard_rank, FsdpPlanUnit *x)
{
  snprintf(x->name, sizeof x->name, "%s", FsdpRuntimeUnitName(rt, i));
  x->is_root = FsdpRuntimeUnitIsRoot(rt, i);
  const FsdpParamSpec *s = NULL;
  FSDP_CALL(FsdpRuntimeUnitSpecs(rt, i, &s, &x->nparams));
  x->specs = malloc((size_t)x->nparams * sizeof *x->specs + 1);
  FSDP_CHECK_ALLOC(x->specs, (size_t)x->nparams * sizeof *x->specs);
  memcpy(x->specs, s, (size_t)x->nparams * sizeof *x->specs);
  FSDP_CALL(FlatParamCreate(x->specs, x->nparams, F, shard_rank, &x->fp));
  return FSDP_SUCCESS;
}

int FsdpPlanUnitsCreate(const FsdpPlanRun *run, int shard_rank, FsdpPlanUnits *out)
{
  memset(out, 0, sizeof *out);
  /* a runtime on a one-rank topology only records the registration: no
   * setup, nothing allocated */
  FsdpTopoOptions to = {0, 0, FSDP_PLACEMENT_BLOCK, 0};
  FsdpTopo topo = NULL;
  FsdpColl coll = NULL;
  FsdpRuntime rt = NULL;
  FsdpModel m = NULL;
  FSDP_CALL(FsdpTopoCreate(MPI_COMM_SELF, &to, &topo));
  FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll));
  FSDP_CALL(FsdpRuntimeCreate(topo, coll, &run->fsdp, &rt));
  FSDP_CALL(FsdpModelCreate(&run->model, run->wrap, run->batch_size,
                            (int)FsdpModelDescInt(&run->model, "seq_len"),
                            FsdpKernelsCpu(), (uint64_t)run->seed, &m));
  FSDP_CALL(FsdpRuntimeAddModel(rt, FsdpModelGetTable(m)));
  int n = FsdpRuntimeNumUnits(rt);
  FsdpPlanUnit *u = calloc((size_t)n, sizeof *u);
  FSDP_CHECK_ALLOC(u, (size_t)n * sizeof *u);
  for (int i = 0; i < n; i++) FSDP_CALL(PlanUnit(rt, i, run->F, shard_rank, &u[i]));
  /* the stages in forward order, for the step replay (plan/steptime.h) */
  const FsdpModelTable *tb = FsdpModelGetTable(m);
  out->stage_unit = malloc((size_t)tb->nstages * sizeof *out->stage_unit + 1);
  FSDP_CHECK_ALLOC(out->stage_unit, (size_t)tb->nstages * sizeof *out->stage_unit);
  for (int i = 0; i < tb->nstages; i++) out->stage_unit[i] = tb->stages[i].unit;
  out->nstages = tb->nstages;
  FSDP_CALL(FsdpModelDestroy(&m));
  FSDP_CALL(FsdpRuntimeDestroy(&rt));
  FSDP_CALL(FsdpCollDestroy(&coll));
  FSDP_CALL(FsdpTopoDestroy(&topo));
  out->u = u;
  out->nu = n;
  return FSDP_SUCCESS;
}

void FsdpPlanUnitsFree(FsdpPlanUnits *units)
{
  for (int i = 0; i < units->nu; i++) {
    FlatParamDestroy(&units->u[i].fp);
    free(units->u[i].specs);
  }
  free(units->u);
  free(units->stage_unit);
  memset(units, 0, sizeof *units);
}

void FsdpPlanUnitsCacheClear(FsdpPlanUnitsCache *cache)
{
  if (cache->valid) FsdpPlanUnitsFree(&cache->units);
  cache->valid = 0;
}

int FsdpPlanUnitsCached(FsdpPlanUnitsCache *cache, const FsdpPlanRun *run, int shard_rank,
                        const FsdpPlanUnits **out)
{
  if (!cache->valid || cache->wrap != run->wrap || cache->B != run->batch_size ||
      cache->F != run->F || cache->shard_rank != shard_rank ||
      cache->recompute != run->fsdp.recompute) {
    FsdpPlanUnitsCacheClear(cache);
    FSDP_CALL(FsdpPlanUnitsCreate(run, shard_rank, &cache->units));
    cache->valid = 1;
    cache->wrap = run->wrap;
    cache->B = run->batch_size;
    cache->F = run->F;
    cache->shard_rank = shard_rank;
    cache->recompute = run->fsdp.recompute;
  }
  *out = &cache->units;
  return FSDP_SUCCESS;
}
