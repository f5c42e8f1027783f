/* fsdp.c: the FSDP runtime (see fsdp.h for the notes this file cites). */
#include "fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mem.h"

const char *const FsdpUnitStateNames[FSDP_UNIT_NSTATES] = {"SHARDED", "GATHERING", "UNSHARDED"};
static const char *const kPrefetchNames[] = {"none", "backward", "both", NULL};

#define MAX_STAGES 4096
#define GRAD_SLOTS 2

typedef struct {
  char name[64];
  int is_root;
  FsdpParamSpec *specs;
  int nparams;
  FlatParam fp;
  int64_t P, shard_numel;
  float *shard, *grad_shard; /* P/F each; with F = 1 also the unsharded buffers */
  float *full, *full_grad;   /* current unsharded buffers or NULL */
  int slot, grad_slot;       /* ring slots in use, -1 none */
  FsdpUnitState state;
  FsdpEvent gather_ev;
  int last_fwd_stage, first_fwd_stage; /* stage indices */
  float **param_views, **grad_views;
} Unit;

typedef struct {
  int unit;
  FsdpStageFn forward, backward;
} Stage;

typedef struct {
  float *buf;
  int owner; /* unit index or -1 */
  FsdpEvent done; /* reduce-scatter that last read this gradient slot */
} Slot;

struct FsdpRuntime_ {
  FsdpTopo topo;
  FsdpColl coll;
  FsdpRuntimeOptions opt;
  FsdpStream stream;
  int F, R, W;
  Unit *units;
  int nunits, cap_units;
  Stage stages[MAX_STAGES];
  int nstages;
  int setup;
  int root;
  /* gather ring and gradient ring (see [Note: gather memory]) */
  float *root_full, *root_grad;
  Slot *gslots, *rslots;
  int ngslots, nrslots, next_gslot, next_rslot;
  int64_t slot_numel; /* largest non-root P */
  /* forward order of this step and of the previous one (forward prefetch) */
  int *order, *prev_order;
  int norder, have_prev_order;
  /* live unsharded bytes and their peaks */
  uint64_t live_params, live_grads, peak_params, peak_grads;
};

int FsdpRuntimeOptionsFromDb(FsdpOpts db, FsdpRuntimeOptions *o)
{
  int64_t v;
  int pf = 1;
  FSDP_CALL(FsdpOptsGetBool(db, "FSDP", "reshard_after_forward",
                            "free a unit's gathered parameters after its forward (1, RAF) or keep "
                            "them until its backward (0, NRAF)",
                            1, &o->reshard_after_forward));
  FSDP_CALL(FsdpOptsGetInt(db, "FSDP", "limit_all_gathers",
                           "at most L all-gathers in flight; sizes the gather buffer ring (0 = no "
                           "limit)",
                           2, 0, 1 << 20, &v));
  o->limit_all_gathers = (int)v;
  FSDP_CALL(FsdpOptsGetEnum(db, "FSDP", "prefetch",
                            "issue the next unit's all-gather early: none, backward, both",
                            kPrefetchNames, 1, &pf));
  o->prefetch = (FsdpPrefetch)pf;
  return FSDP_SUCCESS;
}

int FsdpRuntimeCreate(FsdpTopo topo, FsdpColl coll, const FsdpRuntimeOptions *o, FsdpRuntime *out)
{
  *out = NULL;
  FsdpRuntime rt = calloc(1, sizeof *rt);
  FSDP_CHECK_ALLOC(rt, sizeof *rt);
  rt->topo = topo;
  rt->coll = coll;
  rt->opt = *o;
  rt->root = -1;
  rt->F = FsdpTopoShard(topo)->size;
  rt->R = FsdpTopoReplica(topo)->size;
  rt->W = FsdpTopoWorld(topo)->size;
  *out = rt;
  return FSDP_SUCCESS;
}

int FsdpRuntimeDestroy(FsdpRuntime *prt)
{
  if (!prt || !*prt) return FSDP_SUCCESS;
  FsdpRuntime rt = *prt;
  int err = FsdpStreamDestroy(&rt->stream);
  for (int u = 0; u < rt->nunits; u++) {
    Unit *x = &rt->units[u];
    FSDP_CALL(FlatParamDestroy(&x->fp));
    FSDP_CALL(FsdpFree(&x->shard));
    FSDP_CALL(FsdpFree(&x->grad_shard));
    free(x->specs);
    free(x->param_views);
    free(x->grad_views);
  }
  for (int s = 0; s < rt->ngslots; s++) FSDP_CALL(FsdpFree(&rt->gslots[s].buf));
  for (int s = 0; s < rt->nrslots; s++) FSDP_CALL(FsdpFree(&rt->rslots[s].buf));
  FSDP_CALL(FsdpFree(&rt->root_full));
  FSDP_CALL(FsdpFree(&rt->root_grad));
  free(rt->gslots);
  free(rt->rslots);
  free(rt->units);
  free(rt->order);
  free(rt->prev_order);
  free(rt);
  *prt = NULL;
  return err;
}

int FsdpRuntimeAddUnit(FsdpRuntime rt, const char *name, int is_root, const FsdpParamSpec *specs,
                       int nparams, int *unit)
{
  if (rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "unit '%s' added after FsdpRuntimeSetUp", name);
  if (is_root && rt->root >= 0)
    FSDP_ERROR(FSDP_ERR_STATE, "unit '%s': a root unit ('%s') exists already", name,
               rt->units[rt->root].name);
  if (rt->nunits == rt->cap_units) {
    int cap = rt->cap_units ? 2 * rt->cap_units : 16;
    Unit *u = realloc(rt->units, (size_t)cap * sizeof *u);
    FSDP_CHECK_ALLOC(u, (size_t)cap * sizeof *u);
    rt->units = u;
    rt->cap_units = cap;
  }
  Unit *x = &rt->units[rt->nunits];
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", name);
  x->is_root = is_root;
  x->nparams = nparams;
  x->specs = malloc((size_t)nparams * sizeof *specs);
  FSDP_CHECK_ALLOC(x->specs, (size_t)nparams * sizeof *specs);
  memcpy(x->specs, specs, (size_t)nparams * sizeof *specs);
  x->slot = x->grad_slot = -1;
  x->first_fwd_stage = x->last_fwd_stage = -1;
  x->state = FSDP_UNIT_SHARDED;
  if (is_root) rt->root = rt->nunits;
  *unit = rt->nunits++;
  return FSDP_SUCCESS;
}

int FsdpRuntimeAddStage(FsdpRuntime rt, int unit, FsdpStageFn forward, FsdpStageFn backward)
{
  if (rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "stage added after FsdpRuntimeSetUp");
  if (unit < 0 || unit >= rt->nunits) FSDP_ERROR(FSDP_ERR_STATE, "stage for unknown unit %d", unit);
  if (rt->nstages == MAX_STAGES) FSDP_ERROR(FSDP_ERR_STATE, "more than %d stages", MAX_STAGES);
  Unit *x = &rt->units[unit];
  /* a non-root unit must run as one stage (or consecutive stages) so that
   * RAF can reshard it after its forward */
  if (!x->is_root && x->last_fwd_stage >= 0 && x->last_fwd_stage != rt->nstages - 1)
    FSDP_ERROR(FSDP_ERR_STATE,
               "unit '%s' has non-consecutive stages: only the root unit may appear twice",
               x->name);
  if (x->first_fwd_stage < 0) x->first_fwd_stage = rt->nstages;
  x->last_fwd_stage = rt->nstages;
  rt->stages[rt->nstages++] = (Stage){unit, forward, backward};
  return FSDP_SUCCESS;
}

int FsdpRuntimeSetUp(FsdpRuntime rt)
{
  if (rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeSetUp called twice");
  if (rt->nstages == 0) FSDP_ERROR(FSDP_ERR_STATE, "no stages registered");
  const FsdpGroup *shard = FsdpTopoShard(rt->topo);
  int nonroot = 0;
  rt->slot_numel = 0;
  for (int u = 0; u < rt->nunits; u++) {
    Unit *x = &rt->units[u];
    FSDP_CALL(FlatParamCreate(x->specs, x->nparams, rt->F, shard->rank, &x->fp));
    x->P = FlatParamPaddedNumel(x->fp);
    x->shard_numel = FlatParamShardNumel(x->fp);
    FSDP_CALL(FsdpMalloc(FSDP_MEM_PARAMS, (size_t)x->shard_numel * sizeof(float), &x->shard));
    FSDP_CALL(FsdpMalloc(FSDP_MEM_GRADS, (size_t)x->shard_numel * sizeof(float), &x->grad_shard));
    x->param_views = calloc((size_t)x->nparams, sizeof(float *));
    x->grad_views = calloc((size_t)x->nparams, sizeof(float *));
    FSDP_CHECK_ALLOC(x->param_views, sizeof(float *));
    FSDP_CHECK_ALLOC(x->grad_views, sizeof(float *));
    if (!x->is_root) {
      nonroot++;
      if (x->P > rt->slot_numel) rt->slot_numel = x->P;
    }
  }
  if (rt->F > 1) {
    /* [Note: gather memory] */
    int L = rt->opt.limit_all_gathers;
    rt->ngslots = (!rt->opt.reshard_after_forward || L == 0 || L + 1 > nonroot) ? nonroot : L + 1;
    rt->nrslots = nonroot < GRAD_SLOTS ? nonroot : GRAD_SLOTS;
    rt->gslots = calloc((size_t)rt->ngslots + 1, sizeof *rt->gslots);
    rt->rslots = calloc((size_t)rt->nrslots + 1, sizeof *rt->rslots);
    FSDP_CHECK_ALLOC(rt->gslots, sizeof *rt->gslots);
    FSDP_CHECK_ALLOC(rt->rslots, sizeof *rt->rslots);
    size_t slot_bytes = (size_t)rt->slot_numel * sizeof(float);
    for (int s = 0; s < rt->ngslots; s++) {
      FSDP_CALL(FsdpMalloc(FSDP_MEM_GATHER, slot_bytes, &rt->gslots[s].buf));
      rt->gslots[s].owner = -1;
    }
    for (int s = 0; s < rt->nrslots; s++) {
      FSDP_CALL(FsdpMalloc(FSDP_MEM_REDUCE, slot_bytes, &rt->rslots[s].buf));
      rt->rslots[s].owner = -1;
      rt->rslots[s].done = FSDP_EVENT_NULL;
    }
    if (rt->root >= 0) {
      size_t rb = (size_t)rt->units[rt->root].P * sizeof(float);
      FSDP_CALL(FsdpMalloc(FSDP_MEM_GATHER, rb, &rt->root_full));
      FSDP_CALL(FsdpMalloc(FSDP_MEM_REDUCE, rb, &rt->root_grad));
    }
  }
  rt->order = calloc((size_t)rt->nunits, sizeof *rt->order);
  rt->prev_order = calloc((size_t)rt->nunits, sizeof *rt->order);
  FSDP_CHECK_ALLOC(rt->order, sizeof *rt->order);
  FSDP_CHECK_ALLOC(rt->prev_order, sizeof *rt->order);
  FSDP_CALL(FsdpStreamCreate("comm", 256, &rt->stream));
  rt->setup = 1;
  return FSDP_SUCCESS;
}

int FsdpRuntimeInitShards(FsdpRuntime rt, FsdpInitFn init, void *model)
{
  if (!rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeInitShards before FsdpRuntimeSetUp");
  for (int u = 0; u < rt->nunits; u++) {
    Unit *x = &rt->units[u];
    const FlatParamPiece *pc;
    int np;
    FSDP_CALL(FlatParamShardPieces(x->fp, FlatParamShardRank(x->fp), &pc, &np));
    memset(x->shard, 0, (size_t)x->shard_numel * sizeof(float)); /* padding is 0 */
    for (int i = 0; i < np; i++)
      FSDP_CALL(init(model, FlatParamSpec(x->fp, pc[i].param), pc[i].param_offset, pc[i].count,
                     x->shard + pc[i].shard_offset));
  }
  return FSDP_SUCCESS;
}

/* ---- unit transitions ------------------------------------------------------ */

static int SetViews(Unit *x)
{
  for (int i = 0; i < x->nparams; i++) {
    x->param_views[i] = x->full ? FlatParamView(x->fp, x->full, sizeof(float), i) : NULL;
    x->grad_views[i] = x->full_grad ? FlatParamView(x->fp, x->full_grad, sizeof(float), i) : NULL;
  }
  return FSDP_SUCCESS;
}

static void TrackLive(uint64_t *live, uint64_t *peak, int64_t delta_elems)
{
  *live = (uint64_t)((int64_t)*live + delta_elems * (int64_t)sizeof(float));
  if (*live > *peak) *peak = *live;
}

/* SHARDED -> GATHERING: take a buffer and issue the all-gather. */
static int UnitIssueGather(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  if (x->state != FSDP_UNIT_SHARDED)
    FSDP_ERROR(FSDP_ERR_STATE, "unit %d (%s): gather requested in state %s", u, x->name,
               FsdpUnitStateNames[x->state]);
  if (rt->F == 1) { /* [Note: no sharding] */
    x->full = x->shard;
    x->gather_ev = FSDP_EVENT_NULL;
  } else {
    if (x->is_root) {
      x->full = rt->root_full;
    } else {
      Slot *s = &rt->gslots[rt->next_gslot];
      if (s->owner >= 0)
        FSDP_ERROR(FSDP_ERR_STATE,
                   "unit %d (%s): gather ring slot %d still held by unit %d (%s); the ring has %d "
                   "slots",
                   u, x->name, rt->next_gslot, s->owner, rt->units[s->owner].name, rt->ngslots);
      s->owner = u;
      x->slot = rt->next_gslot;
      x->full = s->buf;
      rt->next_gslot = (rt->next_gslot + 1) % rt->ngslots;
    }
    const FsdpGroup *g = FsdpTopoShard(rt->topo);
    FSDP_CALL(FsdpCollAllGatherAsync(rt->coll, g, x->shard, x->full, (size_t)x->shard_numel,
                                     FSDP_DTYPE_FP32, rt->stream, &x->gather_ev));
    TrackLive(&rt->live_params, &rt->peak_params, x->P);
  }
  x->state = FSDP_UNIT_GATHERING;
  return FSDP_SUCCESS;
}

/* GATHERING -> UNSHARDED: wait for the gather right before compute. */
static int UnitWaitGather(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  if (x->state != FSDP_UNIT_GATHERING)
    FSDP_ERROR(FSDP_ERR_STATE, "unit %d (%s): wait on gather in state %s", u, x->name,
               FsdpUnitStateNames[x->state]);
  int err = FsdpEventWait(x->gather_ev);
  if (err)
    FSDP_ERROR(err, "all-gather of unit %d (%s) on the sharding comm (%d ranks) failed", u, x->name,
               rt->F);
  x->state = FSDP_UNIT_UNSHARDED;
  FSDP_CALL(SetViews(x));
  return FSDP_SUCCESS;
}

static int UnitUnshard(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  if (x->state == FSDP_UNIT_UNSHARDED) return FSDP_SUCCESS;
  if (x->state == FSDP_UNIT_SHARDED) FSDP_CALL(UnitIssueGather(rt, u));
  FSDP_CALL(UnitWaitGather(rt, u));
  return FSDP_SUCCESS;
}

/* UNSHARDED -> SHARDED: give the gather buffer back. */
static int UnitReshard(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  if (x->state != FSDP_UNIT_UNSHARDED)
    FSDP_ERROR(FSDP_ERR_STATE, "unit %d (%s): reshard in state %s", u, x->name,
               FsdpUnitStateNames[x->state]);
  if (rt->F > 1) {
    if (x->slot >= 0) rt->gslots[x->slot].owner = -1;
    TrackLive(&rt->live_params, &rt->peak_params, -x->P);
  }
  x->slot = -1;
  x->full = NULL;
  x->state = FSDP_UNIT_SHARDED;
  return SetViews(x);
}

/* Give the unit an unsharded gradient buffer, zeroed (backward accumulates). */
static int UnitAcquireGrad(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  if (x->full_grad) return FSDP_SUCCESS;
  if (rt->F == 1) {
    x->full_grad = x->grad_shard; /* [Note: no sharding] zeroed per step */
  } else {
    if (x->is_root) {
      x->full_grad = rt->root_grad;
    } else {
      Slot *s = &rt->rslots[rt->next_rslot];
      /* the reduce-scatter that last read this slot must be done */
      int err = FsdpEventWait(s->done);
      if (err) FSDP_ERROR(err, "reduce-scatter of an earlier unit failed");
      s->owner = u;
      x->grad_slot = rt->next_rslot;
      x->full_grad = s->buf;
      rt->next_rslot = (rt->next_rslot + 1) % rt->nrslots;
    }
    memset(x->full_grad, 0, (size_t)x->P * sizeof(float));
    TrackLive(&rt->live_grads, &rt->peak_grads, x->P);
  }
  return SetViews(x);
}

/* After the unit's last backward stage: reduce-scatter its gradient into the
 * shard, all-reduce over replicas (hybrid / replicated), release the buffer
 * to the slot (the slot is reused only after the event). */
static int UnitReduceGrad(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  FsdpEvent ev = FSDP_EVENT_NULL;
  if (rt->F > 1) {
    FSDP_CALL(FsdpCollReduceScatterAsync(rt->coll, FsdpTopoShard(rt->topo), x->full_grad,
                                         x->grad_shard, (size_t)x->shard_numel, FSDP_DTYPE_FP32,
                                         1.0f / (float)rt->W, rt->stream, &ev));
    if (x->grad_slot >= 0) {
      rt->rslots[x->grad_slot].done = ev;
      rt->rslots[x->grad_slot].owner = -1;
    }
    TrackLive(&rt->live_grads, &rt->peak_grads, -x->P);
  }
  if (rt->R > 1) {
    /* F == 1: the gradient was summed locally only; the 1/W mean goes here */
    float scale = rt->F > 1 ? 1.0f : 1.0f / (float)rt->W;
    FSDP_CALL(FsdpCollAllReduceAsync(rt->coll, FsdpTopoReplica(rt->topo), x->grad_shard,
                                     (size_t)x->shard_numel, FSDP_DTYPE_FP32, scale, rt->stream,
                                     &ev));
  }
  x->grad_slot = -1;
  x->full_grad = NULL;
  return SetViews(x);
}

/* [Note: prefetch and the limiter] Prefetching issues a unit's all-gather
 * before the unit is needed, so it runs on the stream while the compute
 * thread works on the current unit.  Backward prefetch gathers the next unit
 * in reverse forward order before the current unit's backward (and so
 * before its reduce-scatter); forward prefetch gathers the next unit of the
 * previous step's forward order (static graphs), from the second step on.
 * A prefetch is skipped, never waited for, when the unit is not SHARDED,
 * when L gathers are already in flight (issued, not yet consumed), or when
 * the next ring slot is still held; the unit is then gathered on demand. */
static int InFlightGathers(FsdpRuntime rt)
{
  int n = 0;
  for (int u = 0; u < rt->nunits; u++) n += rt->units[u].state == FSDP_UNIT_GATHERING;
  return n;
}

static int UnitPrefetch(FsdpRuntime rt, int u)
{
  if (u < 0 || rt->F == 1) return FSDP_SUCCESS;
  Unit *x = &rt->units[u];
  if (x->state != FSDP_UNIT_SHARDED) return FSDP_SUCCESS;
  int L = rt->opt.limit_all_gathers;
  if (L > 0 && InFlightGathers(rt) >= L) return FSDP_SUCCESS;
  if (!x->is_root && rt->gslots[rt->next_gslot].owner >= 0) return FSDP_SUCCESS;
  return UnitIssueGather(rt, u);
}

/* ---- one step ------------------------------------------------------------- */

static int RunStage(FsdpRuntime rt, void *model, int s, int backward)
{
  Stage *st = &rt->stages[s];
  Unit *x = &rt->units[st->unit];
  FsdpUnitTensors t = {st->unit, x->param_views, x->grad_views};
  int err = backward ? st->backward(model, s, &t) : st->forward(model, s, &t);
  if (err)
    FSDP_ERROR(err, "%s of stage %d (unit %d, %s) failed", backward ? "backward" : "forward", s,
               st->unit, x->name);
  return FSDP_SUCCESS;
}

int FsdpRuntimeForwardBackward(FsdpRuntime rt, void *model)
{
  if (!rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeForwardBackward before FsdpRuntimeSetUp");
  int raf = rt->opt.reshard_after_forward;
  int fwd_prefetch = rt->opt.prefetch == FSDP_PREFETCH_BOTH && rt->have_prev_order;
  int bwd_prefetch = rt->opt.prefetch != FSDP_PREFETCH_NONE;
  int pos = 0; /* position in this step's forward order */
  /* forward: stages in order; record the order units are first used */
  for (int s = 0; s < rt->nstages; s++) {
    int u = rt->stages[s].unit;
    Unit *x = &rt->units[u];
    if (s == x->first_fwd_stage) rt->order[pos++] = u;
    FSDP_CALL(UnitUnshard(rt, u));
    /* [Note: prefetch and the limiter] forward: the previous step's order */
    if (fwd_prefetch && pos < rt->norder) FSDP_CALL(UnitPrefetch(rt, rt->prev_order[pos]));
    FSDP_CALL(RunStage(rt, model, s, 0));
    if (raf && !x->is_root && s == x->last_fwd_stage) FSDP_CALL(UnitReshard(rt, u));
  }
  rt->norder = pos;
  memcpy(rt->prev_order, rt->order, (size_t)pos * sizeof *rt->order);
  rt->have_prev_order = 1;
  /* backward: stages in reverse */
  for (int s = rt->nstages - 1; s >= 0; s--) {
    int u = rt->stages[s].unit;
    Unit *x = &rt->units[u];
    FSDP_CALL(UnitUnshard(rt, u));
    /* backward: the stage before s runs next (reverse forward order); gather
     * its unit now, before u's backward and reduce-scatter */
    if (bwd_prefetch && s > 0 && rt->stages[s - 1].unit != u)
      FSDP_CALL(UnitPrefetch(rt, rt->stages[s - 1].unit));
    FSDP_CALL(UnitAcquireGrad(rt, u));
    FSDP_CALL(RunStage(rt, model, s, 1));
    if (s == x->first_fwd_stage) { /* the unit's last backward stage */
      FSDP_CALL(UnitReduceGrad(rt, u));
      FSDP_CALL(UnitReshard(rt, u));
    }
  }
  return FSDP_SUCCESS;
}

int FsdpRuntimeFinishGradients(FsdpRuntime rt)
{
  int err = FsdpStreamSynchronize(rt->stream);
  if (err) FSDP_ERROR(err, "a gradient reduction on the communication stream failed");
  return FSDP_SUCCESS;
}

int FsdpRuntimeZeroGradShards(FsdpRuntime rt)
{
  for (int u = 0; u < rt->nunits; u++)
    memset(rt->units[u].grad_shard, 0, (size_t)rt->units[u].shard_numel * sizeof(float));
  return FSDP_SUCCESS;
}

/* ---- accessors -------------------------------------------------------------- */

int FsdpRuntimeNumUnits(FsdpRuntime rt) { return rt->nunits; }
const char *FsdpRuntimeUnitName(FsdpRuntime rt, int u) { return rt->units[u].name; }
int FsdpRuntimeUnitIsRoot(FsdpRuntime rt, int u) { return rt->units[u].is_root; }
FlatParam FsdpRuntimeUnitFlatParam(FsdpRuntime rt, int u) { return rt->units[u].fp; }
float *FsdpRuntimeUnitShard(FsdpRuntime rt, int u) { return rt->units[u].shard; }
float *FsdpRuntimeUnitGradShard(FsdpRuntime rt, int u) { return rt->units[u].grad_shard; }
FsdpUnitState FsdpRuntimeUnitState(FsdpRuntime rt, int u) { return rt->units[u].state; }
FsdpTopo FsdpRuntimeTopo(FsdpRuntime rt) { return rt->topo; }
FsdpColl FsdpRuntimeColl(FsdpRuntime rt) { return rt->coll; }
FsdpStream FsdpRuntimeStream(FsdpRuntime rt) { return rt->stream; }
const FsdpRuntimeOptions *FsdpRuntimeGetOptions(FsdpRuntime rt) { return &rt->opt; }

int FsdpRuntimeForwardOrder(FsdpRuntime rt, const int **order, int *n)
{
  *order = rt->order;
  *n = rt->norder;
  return FSDP_SUCCESS;
}

void FsdpRuntimeGetMemory(FsdpRuntime rt, FsdpRuntimeMemory *m)
{
  memset(m, 0, sizeof *m);
  for (int u = 0; u < rt->nunits; u++) {
    m->param_shard_bytes += (uint64_t)rt->units[u].shard_numel * sizeof(float);
  }
  m->grad_shard_bytes = m->param_shard_bytes;
  if (rt->F > 1) {
    uint64_t root = rt->root >= 0 ? (uint64_t)rt->units[rt->root].P * sizeof(float) : 0;
    uint64_t slot = (uint64_t)rt->slot_numel * sizeof(float);
    m->gather_buffer_bytes = root + (uint64_t)rt->ngslots * slot;
    m->grad_buffer_bytes = root + (uint64_t)rt->nrslots * slot;
  }
  m->gather_slots = rt->ngslots;
  m->grad_slots = rt->nrslots;
}

void FsdpRuntimePeakUnsharded(FsdpRuntime rt, uint64_t *params, uint64_t *grads)
{
  *params = rt->peak_params;
  *grads = rt->peak_grads;
}

int FsdpRuntimeGatherUnit(FsdpRuntime rt, int u, float *out)
{
  Unit *x = &rt->units[u];
  float *buf = NULL;
  FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, (size_t)x->P * sizeof(float), &buf));
  int err = FsdpCollAllGather(rt->coll, FsdpTopoShard(rt->topo), x->shard, buf,
                              (size_t)x->shard_numel, FSDP_DTYPE_FP32);
  if (!err) memcpy(out, buf, (size_t)FlatParamNumel(x->fp) * sizeof(float));
  FSDP_CALL(FsdpFree(&buf));
  return err;
}
