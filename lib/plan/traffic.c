/* traffic.c: what a step of the planned run moves (traffic.h). */
#include "plan/traffic.h"

#include <string.h>

static void AddVolume(FsdpPlanTraffic *c, FsdpCollKind kind, const FsdpGroup *g, int64_t elems,
                      FsdpDtype dt, uint64_t times)
{
  uint64_t b = 0, i = 0, e = 0;
  FsdpCollVolume(kind, g, (size_t)elems, FsdpDtypeSize(dt), &b, &i, &e);
  c->bytes[kind] += times * b;
  c->intra[kind] += times * i;
  c->inter[kind] += times * e;
  c->calls[kind] += times;
}

void FsdpPlanTrafficCompute(const FsdpPlanRun *run, const FsdpPlanUnits *units,
                            const FsdpGroup *shard, const FsdpGroup *replica, FsdpPlanTraffic *t)
{
  const FsdpRuntimeOptions *fo = &run->fsdp;
  memset(t, 0, sizeof *t);
  int K = fo->grad_accum > 0 ? fo->grad_accum : 1, raf = fo->reshard_after_forward;
  uint64_t nred = fo->accum_comm ? (uint64_t)K : 1;
  for (int i = 0; i < units->nu; i++) {
    const FsdpPlanUnit *u = &units->u[i];
    int64_t P = FlatParamPaddedNumel(u->fp), S = FlatParamShardNumel(u->fp);
    if (run->F > 1) {
      AddVolume(t, FSDP_COLL_ALL_GATHER, shard, P, fo->param_dtype,
                (uint64_t)K * ((!u->is_root && raf) ? 2 : 1));
      AddVolume(t, FSDP_COLL_REDUCE_SCATTER, shard, P, fo->reduce_dtype, nred);
    }
    if (run->R > 1) AddVolume(t, FSDP_COLL_ALL_REDUCE, replica, S, fo->reduce_dtype, nred);
  }
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
    t->intra_total += t->intra[k];
    t->inter_total += t->inter[k];
  }
}
