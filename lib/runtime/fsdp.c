/* fsdp.c: the FSDP runtime (see fsdp.h for the notes this file cites). */
#include "runtime/fsdp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "base/error.h"
#include "base/mem.h"
#include "comm/flight.h"
#include "model/model.h"

const char *const FsdpUnitStateNames[FSDP_UNIT_NSTATES] = {"SHARDED", "GATHERING", "UNSHARDED"};
const char *const FsdpAttentionNames[FSDP_NATTENTION + 1] = {"flash", "naive", NULL};
const char *const FsdpPrefetchNames[FSDP_NPREFETCH + 1] = {"none", "backward", "both", NULL};
const char *const FsdpTailNames[FSDP_NTAIL + 1] = {"none", "poll", "stream", NULL};

#define MAX_STAGES FSDP_RUNTIME_MAX_STAGES
#define GRAD_SLOTS 2

/* A gradient buffer and what its reduction needs (see reduce path in
 * UnitReduceGrad).  Reused only after `done`, the last collective or task
 * that reads it. */
typedef struct {
  float *grad;   /* fp32 unsharded gradient, P */
  void *send;    /* reduce_dtype copy of grad, P (low-precision reduce only) */
  void *recv;    /* reduce_dtype shard result, P/F (when it cannot land directly) */
  int owner;     /* unit or -1 */
  FsdpEvent done;
} GradSlot;

typedef struct {
  char name[FSDP_UNIT_NAME_MAX];
  int is_root, index;
  FsdpParamSpec *specs;
  int nparams;
  FlatParam fp;
  int64_t P, shard_numel;
  float *shard, *grad_shard; /* fp32 master shard and gradient shard, P/F */
  void *low_shard;           /* param_dtype copy of the shard (low precision only) */
  float *acc_grad;           /* persistent unsharded gradient (-accum_comm 0, K > 1) */
  void *full;                /* gathered buffer (param_dtype) or NULL */
  float *compute;            /* fp32 parameters the stages read */
  float *full_grad;          /* fp32 unsharded gradient the stages write */
  int slot;                  /* gather ring slot, -1 none */
  int ahead;                 /* gathered for a stage not begun yet: counts against L */
  GradSlot *gslot;           /* gradient slot in use, NULL none */
  FsdpUnitState state;
  FsdpEvent gather_ev;
  FsdpEvent reduce_ev;       /* the last task of its final reduction ([Note: the gradient tail]) */
  int first_fwd_stage, last_fwd_stage;
  float **param_views, **grad_views;
} Unit;

typedef struct {
  int unit;
  FsdpStageFn forward, backward;
  FsdpStageFn recompute; /* [Note: activation recomputation]; NULL none */
} Stage;

typedef struct {
  void *buf;
  int owner;
} GatherSlot;

struct FsdpRuntime_ {
  FsdpTopo topo;
  FsdpColl coll;
  FsdpRuntimeOptions opt;
  FsdpStream stream;     /* reduce stream: reduce-scatters, all-reduces, casts, lands */
  FsdpStream gstream;    /* gather stream: parameter casts and all-gathers */
  FsdpGroup gather_group; /* the sharding group on a duplicated communicator */
  FsdpTrace trace;
  int64_t step;
  int F, R, W;
  size_t klow, kred; /* bytes per element: param_dtype, reduce_dtype */
  Unit *units;
  int nunits;
  size_t cap_units;
  Stage stages[MAX_STAGES];
  int nstages;
  int setup;
  int root;
  /* [Note: gather memory] */
  GatherSlot *gslots;
  int ngslots, next_gslot;
  void *root_full;          /* root's gathered buffer */
  float *root_compute;      /* root's fp32 compute buffer (low precision) */
  float *scratch;           /* shared fp32 compute buffer for non-root units */
  int scratch_owner;        /* unit whose parameters are in scratch, -1 */
  int root_compute_valid;
  GradSlot *rslots, root_rslot;
  int nrslots, next_rslot;
  int64_t slot_numel;       /* largest non-root P */
  FsdpGatherRing ring;      /* as planned by FsdpGatherRingPlan */
  /* units in the order of their first forward stage (static: the table's) */
  int *order;
  int norder;
  int nahead;               /* units with `ahead` set ([Note: prefetch and the limiter]) */
  /* live unsharded bytes and their peaks */
  uint64_t live_params, live_grads, peak_params, peak_grads;
  uint64_t grad_buffer_bytes; /* everything allocated under FSDP_MEM_REDUCE */
  FsdpPhase phase;
  /* [Note: the gradient tail] units whose final reduction is issued, in
   * issue order (= completion order: one FIFO stream); [tail_head, tail_n)
   * not yet handed to the hook */
  FsdpGradReadyFn ready_fn;
  void *ready_ctx;
  FsdpTailWhere ready_where;
  int *tail_q;
  int tail_head, tail_n;
};

int FsdpRuntimeWrapFromDb(FsdpOpts db, int *wrap)
{
  int64_t v = 1;
  char help[160];
  snprintf(help, sizeof help,
           "transformer blocks per FSDP unit, at most -n_layer (the model's stages, -n_layer / "
           "-wrap rounded up plus 2, at most %d)", MAX_STAGES);
  FSDP_CALL(FsdpOptsGetInt(db, "FSDP", "wrap", help, 1, 1, 1 << 20, &v));
  *wrap = (int)v;
  return FSDP_SUCCESS;
}

/* [Note: wrap and the stage limit] The runtime holds at most MAX_STAGES
 * stages (a fixed table: FsdpRuntimeAddStage), and a model cut into units
 * of -wrap blocks has ceil(n_layer / wrap) + 2 (FsdpModelDescNumStages).
 * Both are known when the options are read, so a model over the limit is
 * a usage error there, naming the limit and the options that fix it,
 * rather than a state error from deep inside the set-up.  A -wrap above
 * the model's blocks would quietly mean one unit of n_layer blocks (the
 * table clamps it): refused too, with the number of blocks. */
int FsdpRuntimeCheckWrap(const FsdpModelDesc *desc, int wrap)
{
  int64_t L = FsdpModelDescInt(desc, "n_layer");
  if (wrap < 1 || wrap > L)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -wrap %d: the model has %lld transformer blocks (-n_layer %lld); -wrap "
               "must be in [1, %lld]",
               wrap, (long long)L, (long long)L, (long long)L);
  int64_t stages = FsdpModelDescNumStages(desc, wrap);
  if (stages > MAX_STAGES) {
    int64_t most = (int64_t)(MAX_STAGES - 2) * wrap, least = (L + MAX_STAGES - 3) / (MAX_STAGES - 2);
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -n_layer %lld with -wrap %d makes %lld stages (%lld units of -wrap "
               "blocks, the embedding and the head), above the runtime's limit of %d stages; use "
               "-n_layer at most %lld, or -wrap at least %lld",
               (long long)L, wrap, (long long)stages, (long long)(stages - 2), MAX_STAGES,
               (long long)most, (long long)least);
  }
  return FSDP_SUCCESS;
}

int FsdpRuntimeOptionsFromDb(FsdpOpts db, FsdpRuntimeOptions *o)
{
  int64_t v;
  int idx = 1;
  memset(o, 0, sizeof *o);
  FSDP_CALL(FsdpOptsGetBool(db, "FSDP", "reshard_after_forward",
                            "free a unit's gathered parameters after its forward (1, RAF) or keep "
                            "them until its backward (0, NRAF)",
                            1, &o->reshard_after_forward));
  FSDP_CALL(FsdpOptsGetInt(db, "FSDP", "limit_all_gathers",
                           "prefetch up to L all-gathers ahead of the unit computing (each holds "
                           "its buffer until its unit is resharded); the gather ring has 1 + L "
                           "slots under RAF (0 = no limit)",
                           2, 0, 1 << 20, &v));
  o->limit_all_gathers = (int)v;
  FSDP_CALL(FsdpOptsGetEnum(db, "FSDP", "prefetch",
                            "issue the next units' all-gathers early: none, backward (in backward, "
                            "before the current unit's reduce-scatter), both (also in forward, "
                            "from the model's static stage order, from the first step)",
                            FsdpPrefetchNames, 1, &idx));
  o->prefetch = (FsdpPrefetch)idx;
  FSDP_CALL(FsdpOptsGetEnum(db, "FSDP", "param_dtype",
                            "type of gathered parameters (on the wire and in the gather buffers); "
                            "master shards stay fp32",
                            FsdpDtypeNames, 0, &idx));
  o->param_dtype = (FsdpDtype)idx;
  FSDP_CALL(FsdpOptsGetEnum(db, "FSDP", "reduce_dtype",
                            "type of gradient reduce-scatter and all-reduce (fp16 enables the "
                            "gradient scaler)",
                            FsdpDtypeNames, 0, &idx));
  o->reduce_dtype = (FsdpDtype)idx;
  /* [Note: bf16 compute]: the names' order is FsdpDtype's (fp32 0, bf16 1) */
  static const char *const compute_names[] = {"fp32", "bf16", NULL};
  FSDP_CALL(FsdpOptsGetEnum(db, "FSDP", "compute_dtype",
                            "type of the matmuls' operands: bf16 rounds them to bf16 with fp32 "
                            "accumulation (LayerNorm, softmax, loss and optimizer stay fp32); "
                            "default bf16 with -param_dtype bf16, else fp32",
                            compute_names, o->param_dtype == FSDP_DTYPE_BF16 ? 1 : 0, &idx));
  o->compute_dtype = idx == 1 ? FSDP_DTYPE_BF16 : FSDP_DTYPE_FP32;
  /* [Note: bf16 compute]: the driver applies it (FsdpDeviceSetTF32) */
  FSDP_CALL(FsdpOptsGetBool(db, "FSDP", "tf32",
                            "with -device cuda: fp32 matmuls on TF32 tensor cores (as PyTorch's "
                            "allow_tf32; about 1e-3 relative error); 0: exact fp32.  No effect "
                            "on the CPU or on bf16 matmuls",
                            1, &o->tf32));
  FSDP_CALL(FsdpOptsGetInt(db, "FSDP", "grad_accum", "micro-steps per optimizer step (K)", 1, 1,
                           1 << 20, &v));
  o->grad_accum = (int)v;
  FSDP_CALL(FsdpOptsGetBool(db, "FSDP", "accum_comm",
                            "with -grad_accum: reduce gradients every micro-step (1) or keep them "
                            "unsharded and reduce once (0: more memory, 1/K the communication)",
                            1, &o->accum_comm));
  FSDP_CALL(FsdpOptsGetBool(db, "FSDP", "recompute",
                            "activation recomputation: keep only each unit's input in forward "
                            "and compute its forward again inside its backward (less activation "
                            "memory, one more forward per step)",
                            0, &o->recompute));
  /* [Note: flash attention] (kernels/cpu/attention.c); names in
   * FsdpAttention's order */
  FSDP_CALL(FsdpOptsGetEnum(db, "FSDP", "attention",
                            "attention kernels: flash (tiled, online softmax; keeps a (B,NH,T) "
                            "log-sum-exp per layer) or naive (keeps the (B,NH,T,T) scores and "
                            "probabilities per layer)",
                            FsdpAttentionNames, 0, &idx));
  o->attention = (FsdpAttention)idx;
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
  if (rt->opt.grad_accum < 1) rt->opt.grad_accum = 1;
  rt->root = -1;
  rt->scratch_owner = -1;
  rt->gather_group.comm = MPI_COMM_NULL; /* duplicated at setup */
  rt->F = FsdpTopoShard(topo)->size;
  rt->R = FsdpTopoReplica(topo)->size;
  rt->W = FsdpTopoWorld(topo)->size;
  rt->klow = FsdpDtypeSize(o->param_dtype);
  rt->kred = FsdpDtypeSize(o->reduce_dtype);
  *out = rt;
  return FSDP_SUCCESS;
}

static int FreeGradSlot(GradSlot *g)
{
  FSDP_CALL(FsdpDeviceFree(&g->grad));
  FSDP_CALL(FsdpDeviceFree(&g->send));
  FSDP_CALL(FsdpDeviceFree(&g->recv));
  return FSDP_SUCCESS;
}

int FsdpRuntimeDestroy(FsdpRuntime *prt)
{
  if (!prt || !*prt) return FSDP_SUCCESS;
  FsdpRuntime rt = *prt;
  int err = FsdpStreamDestroy(&rt->stream);
  int gerr = FsdpStreamDestroy(&rt->gstream);
  if (!err) err = gerr;
  if (rt->gather_group.comm != MPI_COMM_NULL) {
    int merr = MPI_Comm_free(&rt->gather_group.comm);
    if (!err && merr != MPI_SUCCESS)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MPI,
                           "freeing the gather communicator failed");
  }
  for (int u = 0; u < rt->nunits; u++) {
    Unit *x = &rt->units[u];
    FSDP_CALL(FlatParamDestroy(&x->fp));
    FSDP_CALL(FsdpDeviceFree(&x->shard));
    FSDP_CALL(FsdpDeviceFree(&x->grad_shard));
    FSDP_CALL(FsdpDeviceFree(&x->low_shard));
    FSDP_CALL(FsdpDeviceFree(&x->acc_grad));
    free(x->specs);
    free(x->param_views);
    free(x->grad_views);
  }
  for (int s = 0; s < rt->ngslots; s++) FSDP_CALL(FsdpDeviceFree(&rt->gslots[s].buf));
  for (int s = 0; s < rt->nrslots; s++) FSDP_CALL(FreeGradSlot(&rt->rslots[s]));
  FSDP_CALL(FreeGradSlot(&rt->root_rslot));
  FSDP_CALL(FsdpDeviceFree(&rt->root_full));
  FSDP_CALL(FsdpDeviceFree(&rt->root_compute));
  FSDP_CALL(FsdpDeviceFree(&rt->scratch));
  free(rt->gslots);
  free(rt->rslots);
  free(rt->units);
  free(rt->order);
  free(rt->tail_q);
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
  if (FsdpArrayReserve(&rt->units, &rt->cap_units, (size_t)rt->nunits + 1, sizeof *rt->units))
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory adding unit '%s' (%d units)", name, rt->nunits + 1);
  Unit *x = &rt->units[rt->nunits];
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", name);
  x->is_root = is_root;
  x->index = rt->nunits;
  x->nparams = nparams;
  x->specs = malloc((size_t)nparams * sizeof *specs);
  FSDP_CHECK_ALLOC(x->specs, (size_t)nparams * sizeof *specs);
  memcpy(x->specs, specs, (size_t)nparams * sizeof *specs);
  x->slot = -1;
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
  /* a non-root unit must run as consecutive stages so that RAF can reshard
   * it after its forward */
  if (!x->is_root && x->last_fwd_stage >= 0 && x->last_fwd_stage != rt->nstages - 1)
    FSDP_ERROR(FSDP_ERR_STATE,
               "unit '%s' has non-consecutive stages: only the root unit may appear twice",
               x->name);
  if (x->first_fwd_stage < 0) x->first_fwd_stage = rt->nstages;
  x->last_fwd_stage = rt->nstages;
  rt->stages[rt->nstages++] = (Stage){unit, forward, backward, NULL};
  return FSDP_SUCCESS;
}

int FsdpRuntimeSetStageRecompute(FsdpRuntime rt, int stage, FsdpStageFn recompute)
{
  if (rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "stage recompute set after FsdpRuntimeSetUp");
  if (stage < 0 || stage >= rt->nstages)
    FSDP_ERROR(FSDP_ERR_STATE, "recompute for unknown stage %d (%d stages)", stage, rt->nstages);
  rt->stages[stage].recompute = recompute;
  return FSDP_SUCCESS;
}

int FsdpRuntimeAddModel(FsdpRuntime rt, const FsdpModelTable *table)
{
  /* the table's unit indices are the runtime's: checkpoints, the summary
   * and the optimizer name units by runtime index */
  if (rt->nunits != 0)
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeAddModel on a runtime that has %d units already",
               rt->nunits);
  for (int u = 0; u < table->nunits; u++) {
    const FsdpModelUnit *x = &table->units[u];
    int index = -1;
    FSDP_CALL(FsdpRuntimeAddUnit(rt, x->name, x->is_root, x->params, x->nparams, &index));
  }
  for (int s = 0; s < table->nstages; s++) {
    const FsdpModelStage *x = &table->stages[s];
    FSDP_CALL(FsdpRuntimeAddStage(rt, x->unit, x->forward, x->backward));
    if (x->recompute) FSDP_CALL(FsdpRuntimeSetStageRecompute(rt, s, x->recompute));
  }
  return FSDP_SUCCESS;
}

/* Whether a unit's gradient is the gradient shard itself (no copies): F = 1,
 * fp32 reduction, and the shard only ever receives one reduction per step. */
static int GradIsShard(FsdpRuntime rt)
{
  return rt->F == 1 && rt->opt.reduce_dtype == FSDP_DTYPE_FP32 &&
         (rt->opt.grad_accum == 1 || !rt->opt.accum_comm);
}

/* Unsharded gradient memory, counted per runtime for the summary. */
static int ReduceAlloc(FsdpRuntime rt, size_t bytes, void *ptr)
{
  rt->grad_buffer_bytes += bytes;
  return FsdpDeviceAlloc(FSDP_MEM_REDUCE, bytes, ptr);
}

static int AllocGradSlot(FsdpRuntime rt, GradSlot *g, int64_t P)
{
  g->owner = -1;
  g->done = FSDP_EVENT_NULL;
  FSDP_CALL(ReduceAlloc(rt, (size_t)P * sizeof(float), &g->grad));
  if (rt->opt.reduce_dtype != FSDP_DTYPE_FP32)
    FSDP_CALL(ReduceAlloc(rt, (size_t)P * rt->kred, &g->send));
  if (rt->F > 1 && (rt->opt.reduce_dtype != FSDP_DTYPE_FP32 ||
                    (rt->opt.grad_accum > 1 && rt->opt.accum_comm)))
    FSDP_CALL(ReduceAlloc(rt, (size_t)(P / rt->F) * rt->kred, &g->recv));
  return FSDP_SUCCESS;
}

void FsdpGatherRingPlan(const FsdpRuntimeOptions *o, int F, const int64_t *P, const int *is_root,
                        int nunits, const int *stage_unit, int nstages, FsdpGatherRing *ring)
{
  memset(ring, 0, sizeof *ring);
  int nonroot = 0, used = 0;
  for (int u = 0; u < nunits; u++) {
    if (is_root[u]) {
      ring->root_numel = P[u];
    } else {
      nonroot++;
      if (P[u] > ring->slot_numel) ring->slot_numel = P[u];
    }
  }
  /* units the stages use, each once: a flag per unit (fsdp-plan plans up
   * to FSDP_RUNTIME_MAX_STAGES stages, where comparing pairs was
   * quadratic); pairs only if the flags cannot be allocated */
  char *seen = calloc((size_t)(nunits > 0 ? nunits : 1), 1);
  for (int s = 0; s < nstages; s++) {
    int u = stage_unit[s], before = 0;
    if (seen && u >= 0 && u < nunits) {
      before = seen[u];
      seen[u] = 1;
    } else {
      for (int t = 0; t < s && !before; t++) before = stage_unit[t] == u;
    }
    used += !before;
  }
  free(seen);
  /* [Note: prefetch and the limiter] a phase's first stage tops up to L
   * gathers ahead of it (L = 0: every unit the phase still gathers), and
   * fewer remain to gather at every later stage, so the most in flight is
   * at a phase's start: forward (-prefetch both) gathers every unit the
   * stages use but the first stage's; backward (prefetching, RAF) gathers
   * every non-root unit again, the last forward stage's on demand when it
   * is not the root.  Without prefetching (or with F = 1, where nothing
   * is gathered) only the on-demand gather is ever in flight: 1. */
  int L = o->limit_all_gathers > 0 ? o->limit_all_gathers : nunits;
  int pf = F > 1 && o->prefetch != FSDP_PREFETCH_NONE;
  ring->max_in_flight = 1;
  if (pf && o->reshard_after_forward && nstages > 0) {
    int bwd = nonroot - !is_root[stage_unit[nstages - 1]];
    if (bwd > L) bwd = L;
    if (bwd > ring->max_in_flight) ring->max_in_flight = bwd;
  }
  if (pf && o->prefetch == FSDP_PREFETCH_BOTH) {
    int fwd = used - 1 < L ? used - 1 : L;
    if (fwd > ring->max_in_flight) ring->max_in_flight = fwd;
  }
  if (F == 1) return; /* [Note: no sharding] */
  /* RAF: the unit computing plus the L ahead of it; NRAF: every non-root
   * unit keeps its buffer through forward */
  int ahead = pf ? L : 0;
  ring->slots = (!o->reshard_after_forward || ahead >= nonroot) ? nonroot : 1 + ahead;
  if (ring->slots > nonroot) ring->slots = nonroot;
  ring->bytes = FsdpDtypeSize(o->param_dtype) *
                ((uint64_t)ring->root_numel + (uint64_t)ring->slots * (uint64_t)ring->slot_numel);
}

int FsdpRuntimeSetUp(FsdpRuntime rt)
{
  if (rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeSetUp called twice");
  if (rt->nstages == 0) FSDP_ERROR(FSDP_ERR_STATE, "no stages registered");
  const FsdpGroup *shard = FsdpTopoShard(rt->topo);
  int nonroot = 0, low = rt->opt.param_dtype != FSDP_DTYPE_FP32;
  int persistent = rt->opt.grad_accum > 1 && !rt->opt.accum_comm && !GradIsShard(rt);
  for (int u = 0; u < rt->nunits; u++) {
    Unit *x = &rt->units[u];
    FSDP_CALL(FlatParamCreate(x->specs, x->nparams, rt->F, shard->rank, &x->fp));
    x->P = FlatParamPaddedNumel(x->fp);
    x->shard_numel = FlatParamShardNumel(x->fp);
    FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_PARAMS, (size_t)x->shard_numel * sizeof(float), &x->shard));
    FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_GRADS, (size_t)x->shard_numel * sizeof(float), &x->grad_shard));
    if (low) FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_PARAMS, (size_t)x->shard_numel * rt->klow, &x->low_shard));
    if (persistent) FSDP_CALL(ReduceAlloc(rt, (size_t)x->P * sizeof(float), &x->acc_grad));
    x->param_views = calloc((size_t)x->nparams + 1, sizeof(float *));
    x->grad_views = calloc((size_t)x->nparams + 1, sizeof(float *));
    FSDP_CHECK_ALLOC(x->param_views, sizeof(float *));
    FSDP_CHECK_ALLOC(x->grad_views, sizeof(float *));
    nonroot += !x->is_root;
  }
  /* [Note: gather memory] */
  int64_t *unitP = calloc((size_t)rt->nunits + 1, sizeof *unitP);
  int *unit_is_root = calloc((size_t)rt->nunits + 1, sizeof *unit_is_root);
  if (!unitP || !unit_is_root) {
    free(unitP);
    free(unit_is_root);
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory planning the gather ring of %d units", rt->nunits);
  }
  for (int u = 0; u < rt->nunits; u++) {
    unitP[u] = rt->units[u].P;
    unit_is_root[u] = rt->units[u].is_root;
  }
  int stage_unit[MAX_STAGES];
  for (int s = 0; s < rt->nstages; s++) stage_unit[s] = rt->stages[s].unit;
  FsdpGatherRingPlan(&rt->opt, rt->F, unitP, unit_is_root, rt->nunits, stage_unit, rt->nstages,
                     &rt->ring);
  free(unitP);
  free(unit_is_root);
  rt->slot_numel = rt->ring.slot_numel;
  int64_t rootP = rt->ring.root_numel;
  if (rt->F > 1) {
    rt->ngslots = rt->ring.slots;
    rt->gslots = calloc((size_t)rt->ngslots + 1, sizeof *rt->gslots);
    FSDP_CHECK_ALLOC(rt->gslots, sizeof *rt->gslots);
    for (int s = 0; s < rt->ngslots; s++) {
      FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_GATHER, (size_t)rt->slot_numel * rt->klow, &rt->gslots[s].buf));
      rt->gslots[s].owner = -1;
    }
    if (rootP) FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_GATHER, (size_t)rootP * rt->klow, &rt->root_full));
  }
  if (low) { /* [Note: mixed precision] fp32 compute buffers */
    if (rootP) FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_GATHER, (size_t)rootP * sizeof(float), &rt->root_compute));
    if (rt->slot_numel)
      FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_GATHER, (size_t)rt->slot_numel * sizeof(float), &rt->scratch));
  }
  if (!GradIsShard(rt) && !persistent) {
    rt->nrslots = nonroot < GRAD_SLOTS ? nonroot : GRAD_SLOTS;
    rt->rslots = calloc((size_t)rt->nrslots + 1, sizeof *rt->rslots);
    FSDP_CHECK_ALLOC(rt->rslots, sizeof *rt->rslots);
    for (int s = 0; s < rt->nrslots; s++) FSDP_CALL(AllocGradSlot(rt, &rt->rslots[s], rt->slot_numel));
    if (rootP) FSDP_CALL(AllocGradSlot(rt, &rt->root_rslot, rootP));
  } else if (persistent && rt->opt.reduce_dtype != FSDP_DTYPE_FP32) {
    /* persistent fp32 gradients still need low-precision send/recv buffers */
    rt->nrslots = nonroot < GRAD_SLOTS ? nonroot : GRAD_SLOTS;
    rt->rslots = calloc((size_t)rt->nrslots + 1, sizeof *rt->rslots);
    FSDP_CHECK_ALLOC(rt->rslots, sizeof *rt->rslots);
    for (int s = 0; s < rt->nrslots; s++) {
      GradSlot *g = &rt->rslots[s];
      g->owner = -1;
      FSDP_CALL(ReduceAlloc(rt, (size_t)rt->slot_numel * rt->kred, &g->send));
      if (rt->F > 1)
        FSDP_CALL(ReduceAlloc(rt, (size_t)(rt->slot_numel / rt->F) * rt->kred, &g->recv));
    }
    if (rootP) {
      rt->root_rslot.owner = -1;
      FSDP_CALL(ReduceAlloc(rt, (size_t)rootP * rt->kred, &rt->root_rslot.send));
      if (rt->F > 1)
        FSDP_CALL(ReduceAlloc(rt, (size_t)(rootP / rt->F) * rt->kred, &rt->root_rslot.recv));
    }
  }
  rt->order = calloc((size_t)rt->nunits + 1, sizeof *rt->order);
  rt->tail_q = calloc((size_t)rt->nunits + 1, sizeof *rt->tail_q);
  FSDP_CHECK_ALLOC(rt->tail_q, sizeof *rt->tail_q);
  FSDP_CHECK_ALLOC(rt->order, sizeof *rt->order);
  for (int s = 0; s < rt->nstages; s++) /* the forward order: fixed by the table */
    if (rt->units[rt->stages[s].unit].first_fwd_stage == s) rt->order[rt->norder++] = rt->stages[s].unit;
  /* [Note: two communication streams] all-gathers run on a stream of their
   * own, over a duplicate of the sharding communicator, so that a prefetched
   * gather never queues behind a reduce-scatter on the other stream (a
   * single FIFO stream would make the next unit's parameters wait for the
   * previous unit's gradients).  Each stream is FIFO and every rank issues
   * the same sequence on each, so collectives match per communicator; MPI
   * runs with MPI_THREAD_MULTIPLE. */
  rt->gather_group = *shard;
  rt->gather_group.name = "sharding (gathers)";
  FSDP_CALL_MPI(MPI_Comm_dup(shard->comm, &rt->gather_group.comm));
  /* its NCCL twin too, now: no communicator is made inside a step */
  FSDP_CALL(FsdpCollAttach(rt->coll, &rt->gather_group));
  FSDP_CALL(FsdpStreamCreate("reduce", 256, &rt->stream));
  FSDP_CALL(FsdpStreamCreate("gather", 256, &rt->gstream));
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
    /* the rule fills host memory: the shard itself on the CPU, a staging
     * copy on a GPU */
    float *host = x->shard;
    if (FsdpDeviceGetKind() != FSDP_DEVICE_CPU)
      FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, (size_t)x->shard_numel * sizeof(float), &host));
    memset(host, 0, (size_t)x->shard_numel * sizeof(float)); /* padding is 0 */
    int err = FSDP_SUCCESS;
    for (int i = 0; i < np && !err; i++)
      err = init(model, FlatParamSpec(x->fp, pc[i].param), pc[i].param_offset, pc[i].count,
                 host + pc[i].shard_offset);
    if (host != x->shard) {
      if (!err) err = FsdpDeviceCopyFromHost(x->shard, host, (size_t)x->shard_numel * sizeof(float));
      FSDP_CALL(FsdpFree(&host));
    }
    FSDP_CALL(err);
  }
  return FSDP_SUCCESS;
}

int FsdpRuntimeSetTrace(FsdpRuntime rt, FsdpTrace trace)
{
  FSDP_CALL(FsdpStreamSynchronize(rt->stream));
  FSDP_CALL(FsdpStreamSynchronize(rt->gstream));
  rt->trace = trace;
  FSDP_CALL(FsdpStreamSetRecorder(rt->gstream, trace ? FsdpTraceStreamRecorder : NULL,
                                  trace ? FsdpTraceLane(trace, 0) : NULL));
  FSDP_CALL(FsdpStreamSetRecorder(rt->stream, trace ? FsdpTraceStreamRecorder : NULL,
                                  trace ? FsdpTraceLane(trace, 1) : NULL));
  return FSDP_SUCCESS;
}

void FsdpRuntimeSetStep(FsdpRuntime rt, int64_t step)
{
  rt->step = step;
  FsdpFlightSetStep(step + 1); /* counted from 1, as the stream tasks' identity */
}

/* ---- stream tasks: casts and landing reduced gradients ------------------- */

typedef struct {
  const void *src;
  void *dst;
  size_t n;
  FsdpDtype from, to;
  float scale;
  int add; /* dst (fp32) += src converted */
} CastTask;

/* [Note: mixed precision] conversions run on the stream, in order with the
 * collectives that produce or consume them. */
static int CastRun(void *arg)
{
  CastTask *t = arg;
  if (t->add) { /* land: fp32 shard += scale * convert(src) */
    float *d = t->dst;
    if (t->from == FSDP_DTYPE_FP32) {
      const float *s = t->src;
      for (size_t i = 0; i < t->n; i++) d[i] += t->scale * s[i];
    } else {
      const uint16_t *s = t->src;
      if (t->from == FSDP_DTYPE_BF16)
        for (size_t i = 0; i < t->n; i++) d[i] += t->scale * FsdpBf16ToFloat(s[i]);
      else
        for (size_t i = 0; i < t->n; i++) d[i] += t->scale * FsdpFp16ToFloat(s[i]);
    }
  } else {
    FsdpDtypeFromFloat(t->to, t->src, t->dst, t->n);
  }
  return FSDP_SUCCESS;
}

/* CPU: a task on the communication stream, in order with the collectives.
 * CUDA ([Note: CUDA streams in the runtime], device.h): a cast runs on the
 * compute stream (the next collective waits for it on the device); a land
 * first makes the compute stream wait for the collective `after`. */
static int IssueTask(FsdpRuntime rt, FsdpStream stream, const char *label, const CastTask *t,
                     FsdpEvent after, FsdpEvent *ev)
{
  if (FsdpDeviceGetKind() == FSDP_DEVICE_CPU)
    return FsdpStreamEnqueue(stream, label, CastRun, t, sizeof *t, ev);
  if (t->add) {
    FSDP_CALL(FsdpCollWaitDevice(rt->coll, after, FsdpDeviceComputeStream()));
    FSDP_CALL(FsdpDeviceAddScaled(t->dst, t->src, t->from, t->scale, t->n));
  } else {
    FSDP_CALL(FsdpDeviceCastFromFloat(t->to, t->src, t->dst, t->n));
  }
  *ev = after;
  return FSDP_SUCCESS;
}

/* Record a collective's metadata for the timeline. */
static void NoteIssue(FsdpRuntime rt, FsdpEvent ev, FsdpCollKind kind, int unit, uint64_t bytes)
{
  if (FsdpTraceEnabled(rt->trace))
    FsdpTraceIssue(rt->trace, ev.stream == rt->gstream ? 0 : 1, ev.seq, kind, rt->phase, rt->step,
                   rt->units[unit].index, bytes, FsdpTraceNow(rt->trace));
}

/* Stamp the unit and the step (counted from 1) on the tasks issued next on
 * stream, for the message that ends the job if one fails (stream.h). */
static void TagTasks(FsdpRuntime rt, FsdpStream stream, int u)
{
  FsdpStreamSetTaskIdentity(stream, u, rt->step + 1);
}

/* Wait on ev; the time blocked is exposed communication. */
static int TimedWait(FsdpRuntime rt, FsdpEvent ev, const char *what, int unit)
{
  int done = 1;
  FSDP_CALL(FsdpEventQuery(ev, &done));
  if (done) return FsdpEventWait(ev);
  double b = rt->trace ? FsdpTraceNow(rt->trace) : 0.0;
  int err = FsdpEventWait(ev);
  if (rt->trace) FsdpTraceWait(rt->trace, what, rt->step, unit, b, FsdpTraceNow(rt->trace));
  return err;
}

/* ---- unit transitions ------------------------------------------------------ */

static int SetViews(Unit *x)
{
  for (int i = 0; i < x->nparams; i++) {
    x->param_views[i] = x->compute ? FlatParamView(x->fp, x->compute, sizeof(float), i) : NULL;
    x->grad_views[i] = x->full_grad ? FlatParamView(x->fp, x->full_grad, sizeof(float), i) : NULL;
  }
  return FSDP_SUCCESS;
}

static void TrackLive(uint64_t *live, uint64_t *peak, int64_t delta_bytes)
{
  *live = (uint64_t)((int64_t)*live + delta_bytes);
  if (*live > *peak) *peak = *live;
}

/* [Note: unit life cycle]: the transition `action` of unit u needs state
 * `from`; any other is FSDP_ERR_STATE naming the unit and its state. */
static int UnitExpectState(FsdpRuntime rt, int u, FsdpUnitState from, const char *action)
{
  const Unit *x = &rt->units[u];
  if (x->state != from)
    FSDP_ERROR(FSDP_ERR_STATE, "unit %d (%s): %s in state %s", u, x->name, action,
               FsdpUnitStateNames[x->state]);
  return FSDP_SUCCESS;
}

/* SHARDED -> GATHERING: take a buffer, cast (low precision), all-gather. */
static int UnitIssueGather(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  int low = rt->opt.param_dtype != FSDP_DTYPE_FP32;
  FSDP_CALL(UnitExpectState(rt, u, FSDP_UNIT_SHARDED, "gather requested"));
  x->gather_ev = FSDP_EVENT_NULL;
  TagTasks(rt, rt->gstream, u);
  const void *send = x->shard;
  if (low) { /* cast once per gather, from the fp32 shard */
    CastTask t = {x->shard, x->low_shard, (size_t)x->shard_numel, FSDP_DTYPE_FP32,
                  rt->opt.param_dtype, 1.0f, 0};
    FSDP_CALL(IssueTask(rt, rt->gstream, "cast_params", &t, FSDP_EVENT_NULL, &x->gather_ev));
    send = x->low_shard;
  }
  if (rt->F == 1) { /* [Note: no sharding] */
    x->full = (void *)send;
  } else {
    if (x->is_root) {
      x->full = rt->root_full;
    } else {
      GatherSlot *s = &rt->gslots[rt->next_gslot];
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
    FSDP_CALL(FsdpCollAllGatherAsync(rt->coll, &rt->gather_group, send, x->full,
                                     (size_t)x->shard_numel, rt->opt.param_dtype, rt->gstream,
                                     &x->gather_ev));
    NoteIssue(rt, x->gather_ev, FSDP_COLL_ALL_GATHER, u,
              (uint64_t)(rt->F - 1) * (uint64_t)x->P * rt->klow / (uint64_t)rt->F);
    TrackLive(&rt->live_params, &rt->peak_params, x->P * (int64_t)rt->klow);
  }
  x->state = FSDP_UNIT_GATHERING;
  /* [Note: prefetch and the limiter] in flight until its own stage takes it */
  x->ahead = 1;
  rt->nahead++;
  if (rt->trace) FsdpTraceNoteInFlight(rt->trace, rt->nahead);
  return FSDP_SUCCESS;
}

/* GATHERING -> UNSHARDED: wait for the gather right before compute.  On a
 * GPU the compute stream waits for it on the device and the host goes on
 * launching ([Note: CUDA streams in the runtime], device.h). */
static int UnitWaitGather(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  FSDP_CALL(UnitExpectState(rt, u, FSDP_UNIT_GATHERING, "wait on gather"));
  int err = FsdpDeviceGetKind() != FSDP_DEVICE_CPU
                ? FsdpCollWaitDevice(rt->coll, x->gather_ev, FsdpDeviceComputeStream())
                : TimedWait(rt, x->gather_ev, "wait all_gather", x->index);
  if (err)
    FSDP_ERROR(err, "all-gather of unit %d (%s) on the sharding comm (%d ranks) failed", u, x->name,
               rt->F);
  x->state = FSDP_UNIT_UNSHARDED;
  return FSDP_SUCCESS;
}

/* Make u the unit computing: gather it on demand if nothing prefetched it,
 * wait for its gather; from here its gather no longer counts as ahead (its
 * buffer is the ring's "+1" until UnitReshard frees it). */
static int UnitUnshard(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  if (x->state == FSDP_UNIT_SHARDED) FSDP_CALL(UnitIssueGather(rt, u));
  if (x->state == FSDP_UNIT_GATHERING) FSDP_CALL(UnitWaitGather(rt, u));
  if (x->ahead) {
    x->ahead = 0;
    rt->nahead--;
  }
  return FSDP_SUCCESS;
}

/* Point the unit's parameter views at fp32 values: the gathered buffer
 * itself in fp32, else a conversion into the root's or the shared compute
 * buffer ([Note: mixed precision]). */
static int UnitPrepareCompute(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  FSDP_CALL(UnitExpectState(rt, u, FSDP_UNIT_UNSHARDED, "compute"));
  if (rt->opt.param_dtype == FSDP_DTYPE_FP32) {
    x->compute = x->full;
  } else if (x->is_root) {
    if (!rt->root_compute_valid) {
      FSDP_CALL(FsdpDeviceCastToFloat(rt->opt.param_dtype, x->full, rt->root_compute, (size_t)x->P));
      rt->root_compute_valid = 1;
    }
    x->compute = rt->root_compute;
  } else {
    if (rt->scratch_owner != u) {
      FSDP_CALL(FsdpDeviceCastToFloat(rt->opt.param_dtype, x->full, rt->scratch, (size_t)x->P));
      if (rt->scratch_owner >= 0) {
        rt->units[rt->scratch_owner].compute = NULL;
        SetViews(&rt->units[rt->scratch_owner]);
      }
      rt->scratch_owner = u;
    }
    x->compute = rt->scratch;
  }
  return SetViews(x);
}

/* UNSHARDED -> SHARDED: give the gather buffer back. */
static int UnitReshard(FsdpRuntime rt, int u)
{
  Unit *x = &rt->units[u];
  FSDP_CALL(UnitExpectState(rt, u, FSDP_UNIT_UNSHARDED, "reshard"));
  if (rt->F > 1) {
    if (x->slot >= 0) rt->gslots[x->slot].owner = -1;
    TrackLive(&rt->live_params, &rt->peak_params, -x->P * (int64_t)rt->klow);
  }
  if (rt->scratch_owner == u) rt->scratch_owner = -1;
  if (x->is_root) rt->root_compute_valid = 0;
  x->slot = -1;
  x->full = NULL;
  x->compute = NULL;
  x->state = FSDP_UNIT_SHARDED;
  return SetViews(x);
}

/* Give the unit an unsharded fp32 gradient buffer for micro-step `micro`. */
static int UnitAcquireGrad(FsdpRuntime rt, int u, int micro)
{
  Unit *x = &rt->units[u];
  if (x->full_grad) return FSDP_SUCCESS;
  if (GradIsShard(rt)) {
    x->full_grad = x->grad_shard; /* [Note: no sharding] zeroed per step */
  } else if (x->acc_grad) {
    /* [Note: gradient accumulation] persistent; starts from 0 each step */
    x->full_grad = x->acc_grad;
    if (micro == 0) FSDP_CALL(FsdpDeviceZero(x->acc_grad, (size_t)x->P * sizeof(float)));
  } else {
    GradSlot *s = x->is_root ? &rt->root_rslot : &rt->rslots[rt->next_rslot];
    int err = TimedWait(rt, s->done, "wait grad buffer", x->index);
    if (err) FSDP_ERROR(err, "a gradient reduction of an earlier unit failed");
    s->owner = u;
    x->gslot = s;
    x->full_grad = s->grad;
    if (!x->is_root) rt->next_rslot = (rt->next_rslot + 1) % rt->nrslots;
    FSDP_CALL(FsdpDeviceZero(x->full_grad, (size_t)x->P * sizeof(float)));
  }
  if (!GradIsShard(rt)) TrackLive(&rt->live_grads, &rt->peak_grads, x->P * (int64_t)sizeof(float));
  return SetViews(x);
}

/* [Note: the gradient tail] (optim.c) The runtime's part: after the last
 * micro-step's final reduction of a unit is issued, its last event is
 * queued; the compute thread hands each queued unit whose event completed
 * to the grad-ready hook -- without blocking after every backward stage
 * (the hook's work then overlaps the remaining backward and the
 * reductions in flight), and in FsdpRuntimeFinishGradients waiting for
 * each in turn (those waits are the "wait gradients" of the trace, one per
 * unit, shortened by the hook's work done between them).  The hook runs on
 * the compute thread, never beside a collective of its own (it uses no
 * communicator), and a landed unit's gradient shard, parameter shard and
 * moments are touched by nothing else until the next step: the unit's
 * stream work for this step ended with that event, and it is not gathered
 * again in this step's backward.  CPU only: on a GPU the driver installs
 * no hook. */
typedef struct {
  FsdpRuntime rt;
  int unit;
} TailTask;

/* FSDP_TAIL_STREAM: the hook on the reduce stream's thread; its writes
 * reach the compute thread through the stream's event (a mutex). */
static int TailTaskRun(void *arg)
{
  TailTask *t = arg;
  int updated = 0;
  return t->rt->ready_fn(t->rt->ready_ctx, t->unit, &updated);
}

static int TailQueue(FsdpRuntime rt, int u, FsdpEvent ev)
{
  if (!rt->ready_fn) return FSDP_SUCCESS;
  if (rt->ready_where == FSDP_TAIL_STREAM) {
    TailTask t = {rt, u};
    TagTasks(rt, rt->stream, u);
    return FsdpStreamEnqueue(rt->stream, "optim_tail", TailTaskRun, &t, sizeof t, NULL);
  }
  rt->units[u].reduce_ev = ev;
  rt->tail_q[rt->tail_n++] = u;
  return FSDP_SUCCESS;
}

/* Hand landed units to the hook; block: wait for every queued one. */
static int TailPoll(FsdpRuntime rt, int block)
{
  while (rt->tail_head < rt->tail_n) {
    int u = rt->tail_q[rt->tail_head];
    Unit *x = &rt->units[u];
    int done = 1;
    FSDP_CALL(FsdpEventQuery(x->reduce_ev, &done));
    if (!done && !block) break;
    int err = TimedWait(rt, x->reduce_ev, "wait gradients", x->index);
    if (err) FSDP_ERROR(err, "the gradient reduction of unit %d (%s) failed", u, x->name);
    rt->tail_head++;
    double b = rt->trace ? FsdpTraceNow(rt->trace) : 0.0;
    int updated = 0;
    FSDP_CALL(rt->ready_fn(rt->ready_ctx, u, &updated));
    if (FsdpTraceEnabled(rt->trace)) {
      char name[96];
      snprintf(name, sizeof name, "%s %s", updated ? "adamw" : "grad check", x->name);
      FsdpTraceCompute(rt->trace, name, "optim_tail", rt->step, x->index, b, FsdpTraceNow(rt->trace));
    }
  }
  return FSDP_SUCCESS;
}

int FsdpRuntimeSetGradReady(FsdpRuntime rt, FsdpGradReadyFn fn, void *ctx, FsdpTailWhere where)
{
  if (rt->tail_head < rt->tail_n)
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeSetGradReady inside a step (%d units not handed over)",
               rt->tail_n - rt->tail_head);
  if (where == FSDP_TAIL_NONE) fn = NULL;
  rt->ready_where = where;
  rt->ready_fn = fn;
  rt->ready_ctx = ctx;
  rt->tail_head = rt->tail_n = 0;
  return FSDP_SUCCESS;
}

/* After the unit's last backward stage: reduce its gradient into the
 * gradient shard (reduce-scatter over the sharding group, all-reduce over
 * the replica group, both means over the world: scale 1/W once), all on
 * the stream.  See [Note: mixed precision] and [Note: gradient
 * accumulation] for the buffers. */
static int UnitReduceGrad(FsdpRuntime rt, int u, int micro, int nmicro)
{
  Unit *x = &rt->units[u];
  int last = micro == nmicro - 1;
  if (!rt->opt.accum_comm && !last) { /* keep accumulating locally */
    if (!GradIsShard(rt)) TrackLive(&rt->live_grads, &rt->peak_grads, -x->P * (int64_t)sizeof(float));
    x->full_grad = NULL;
    return SetViews(x);
  }
  FsdpEvent ev = FSDP_EVENT_NULL;
  TagTasks(rt, rt->stream, u);
  const FsdpGroup *sg = FsdpTopoShard(rt->topo), *rg = FsdpTopoReplica(rt->topo);
  float mean = 1.0f / (float)rt->W;
  FsdpDtype rd = rt->opt.reduce_dtype;
  uint64_t PK = (uint64_t)x->P * rt->kred;
  if (GradIsShard(rt)) {
    /* F = 1 and fp32: the gradient is the shard; average over replicas */
    if (rt->R > 1) {
      FSDP_CALL(FsdpCollAllReduceAsync(rt->coll, rg, x->grad_shard, (size_t)x->shard_numel,
                                       FSDP_DTYPE_FP32, mean, rt->stream, &ev));
      NoteIssue(rt, ev, FSDP_COLL_ALL_REDUCE, u, 2 * (uint64_t)(rt->R - 1) * PK / (uint64_t)rt->R);
    }
    x->full_grad = NULL;
    if (last) FSDP_CALL(TailQueue(rt, u, ev));
    return SetViews(x);
  }
  GradSlot *s = x->gslot;
  if (!s && rd != FSDP_DTYPE_FP32) { /* persistent gradient, low-precision reduce: borrow buffers */
    s = x->is_root ? &rt->root_rslot : &rt->rslots[rt->next_rslot];
    if (!x->is_root) rt->next_rslot = (rt->next_rslot + 1) % rt->nrslots;
    int err = TimedWait(rt, s->done, "wait grad buffer", x->index);
    if (err) FSDP_ERROR(err, "a gradient reduction of an earlier unit failed");
  }
  void *send = x->full_grad; /* scratch: the reduction may pre-scale it (coll.h) */
  if (rd != FSDP_DTYPE_FP32) {
    CastTask t = {x->full_grad, s->send, (size_t)x->P, FSDP_DTYPE_FP32, rd, 1.0f, 0};
    FSDP_CALL(IssueTask(rt, rt->stream, "cast_grads", &t, ev, &ev));
    send = s->send;
  }
  /* where the reduced shard lands: straight into the gradient shard when it
   * is fp32 and the shard holds no earlier micro-step's sum */
  int direct = rd == FSDP_DTYPE_FP32 && (micro == 0 || !rt->opt.accum_comm);
  void *result;
  if (rt->F > 1) {
    result = direct ? (void *)x->grad_shard : s->recv;
    FSDP_CALL(FsdpCollReduceScatterAsync(rt->coll, sg, send, result, (size_t)x->shard_numel, rd,
                                         mean, rt->stream, &ev));
    NoteIssue(rt, ev, FSDP_COLL_REDUCE_SCATTER, u, (uint64_t)(rt->F - 1) * PK / (uint64_t)rt->F);
    if (rt->R > 1) {
      FSDP_CALL(FsdpCollAllReduceAsync(rt->coll, rg, result, (size_t)x->shard_numel, rd, 1.0f,
                                       rt->stream, &ev));
      NoteIssue(rt, ev, FSDP_COLL_ALL_REDUCE, u,
                2 * (uint64_t)(rt->R - 1) * (PK / (uint64_t)rt->F) / (uint64_t)rt->R);
    }
  } else { /* F = 1 with low precision or per-micro-step accumulation */
    result = (void *)send;
    direct = 0;
    if (rt->R > 1) {
      FSDP_CALL(FsdpCollAllReduceAsync(rt->coll, rg, result, (size_t)x->shard_numel, rd, mean,
                                       rt->stream, &ev));
      NoteIssue(rt, ev, FSDP_COLL_ALL_REDUCE, u, 2 * (uint64_t)(rt->R - 1) * PK / (uint64_t)rt->R);
    }
  }
  if (!direct) {
    CastTask t = {result, x->grad_shard, (size_t)x->shard_numel, rd, FSDP_DTYPE_FP32, 1.0f, 1};
    FSDP_CALL(IssueTask(rt, rt->stream, "land_grads", &t, ev, &ev));
  }
  if (s) { /* the slot's buffers are free once the last task ran */
    s->done = ev;
    s->owner = -1;
  }
  x->gslot = NULL;
  TrackLive(&rt->live_grads, &rt->peak_grads, -x->P * (int64_t)sizeof(float));
  x->full_grad = NULL;
  if (last) FSDP_CALL(TailQueue(rt, u, ev));
  return SetViews(x);
}

/* [Note: prefetch and the limiter] Prefetching issues the all-gathers of
 * the units the next stages need while the compute thread works on the
 * current one, from the static schedule: the stages run forward in table
 * order, then backward in reverse, the same every step, so forward
 * prefetch (-prefetch both) works from the first step on.  Before each
 * stage's compute, once its own unit is unsharded, TopUp walks the phase's
 * later stages in order and issues the gather of each unit still SHARDED,
 * until L gathers are ahead of the unit computing (L =
 * -limit_all_gathers; 0: no limit but the ring) -- in backward before the
 * current unit's backward and so before its reduce-scatter, the PyTorch
 * BACKWARD_PRE order.  A gather is ahead from its issue until its own
 * stage takes it (UnitUnshard); its ring slot stays taken until the unit
 * is resharded, so with RAF the ring is the unit computing plus L (1 + L
 * slots, [Note: gather memory]), and a gather can be issued only after the
 * reshard that freed its slot: no wait ever frees room.  The limiter
 * therefore never blocks here: what it counts is freed by this same
 * thread, so at L it holds the rest back and the next stage's TopUp, after
 * the reshard, issues the next one.  (PyTorch's limiter blocks the CPU on
 * a CUDA free event because its CPU runs ahead of the GPU; with CUDA here
 * the host runs ahead too, and each NCCL gather first waits on the device
 * for all compute launched before it ([Note: NCCL collectives and
 * streams], coll_nccl.c), which includes the last reader of the slot it
 * takes, since that unit's reshard preceded the gather's issue: the ring
 * bounds memory, the fence orders reuse, at any depth.)  TopUp stops at
 * a full ring, which a correct plan never reaches. */
static int TopUp(FsdpRuntime rt, int s, int dir)
{
  if (rt->F == 1) return FSDP_SUCCESS; /* [Note: no sharding]: nothing to gather */
  int L = rt->opt.limit_all_gathers;
  for (int t = s + dir; t >= 0 && t < rt->nstages; t += dir) {
    Unit *y = &rt->units[rt->stages[t].unit];
    if (y->state != FSDP_UNIT_SHARDED) continue; /* ahead already, computing, or kept */
    if (L > 0 && rt->nahead >= L) break;         /* the limiter: L ahead */
    if (!y->is_root && rt->gslots[rt->next_gslot].owner >= 0) break;
    FSDP_CALL(UnitIssueGather(rt, y->index));
  }
  return FSDP_SUCCESS;
}

/* ---- one step ------------------------------------------------------------- */

/* backward: 0 forward, 1 backward, RUN_RECOMPUTE the stage's recompute
 * callback ([Note: activation recomputation]) */
#define RUN_RECOMPUTE 2
static int RunStage(FsdpRuntime rt, void *model, int s, int backward)
{
  static const char *const kWhat[] = {"forward", "backward", "recompute"};
  Stage *st = &rt->stages[s];
  Unit *x = &rt->units[st->unit];
  FSDP_CALL(UnitPrepareCompute(rt, st->unit));
  FsdpUnitTensors t = {st->unit, x->param_views, x->grad_views};
  double b = rt->trace ? FsdpTraceNow(rt->trace) : 0.0;
  FsdpStageFn fn = backward == RUN_RECOMPUTE ? st->recompute : backward ? st->backward : st->forward;
  int err = fn(model, s, &t);
  if (!err) err = FsdpDeviceCheck(); /* asynchronous launches report here */
  if (err)
    FSDP_ERROR(err, "%s of stage %d (unit %d, %s) failed", kWhat[backward], s, st->unit, x->name);
  if (FsdpTraceEnabled(rt->trace)) {
    char name[96];
    snprintf(name, sizeof name, "%s %s", kWhat[backward], x->name);
    /* recomputation is backward work (its category) */
    FsdpTraceCompute(rt->trace, name, backward ? "backward" : "forward", rt->step, x->index, b,
                     FsdpTraceNow(rt->trace));
  }
  return FSDP_SUCCESS;
}

int FsdpRuntimeForwardBackward(FsdpRuntime rt, void *model, int micro, int nmicro)
{
  if (!rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeForwardBackward before FsdpRuntimeSetUp");
  if (nmicro != rt->opt.grad_accum || micro < 0 || micro >= nmicro)
    FSDP_ERROR(FSDP_ERR_STATE, "micro-step %d of %d, but the runtime was set up for -grad_accum %d",
               micro, nmicro, rt->opt.grad_accum);
  int raf = rt->opt.reshard_after_forward;
  int fwd_prefetch = rt->opt.prefetch == FSDP_PREFETCH_BOTH;
  int bwd_prefetch = rt->opt.prefetch != FSDP_PREFETCH_NONE;
  if (micro == 0) rt->tail_head = rt->tail_n = 0; /* [Note: the gradient tail] */
  /* forward: stages in order */
  rt->phase = FSDP_PHASE_FORWARD;
  FsdpFlightSetPhase(rt->phase);
  for (int s = 0; s < rt->nstages; s++) {
    int u = rt->stages[s].unit;
    Unit *x = &rt->units[u];
    FSDP_CALL(UnitUnshard(rt, u));
    /* [Note: prefetch and the limiter] the next units of the table's order */
    if (fwd_prefetch) FSDP_CALL(TopUp(rt, s, +1));
    FSDP_CALL(RunStage(rt, model, s, 0));
    if (raf && !x->is_root && s == x->last_fwd_stage) FSDP_CALL(UnitReshard(rt, u));
  }
  /* backward: stages in reverse */
  rt->phase = FSDP_PHASE_BACKWARD;
  FsdpFlightSetPhase(rt->phase);
  for (int s = rt->nstages - 1; s >= 0; s--) {
    int u = rt->stages[s].unit;
    Unit *x = &rt->units[u];
    FSDP_CALL(UnitUnshard(rt, u));
    /* backward: the stages before s run next; gather their units now,
     * before u's backward and reduce-scatter */
    if (bwd_prefetch) FSDP_CALL(TopUp(rt, s, -1));
    FSDP_CALL(UnitAcquireGrad(rt, u, micro));
    if (rt->opt.recompute && rt->stages[s].recompute) FSDP_CALL(RunStage(rt, model, s, RUN_RECOMPUTE));
    FSDP_CALL(RunStage(rt, model, s, 1));
    if (s == x->first_fwd_stage) { /* the unit's last backward stage */
      FSDP_CALL(UnitReduceGrad(rt, u, micro, nmicro));
      FSDP_CALL(UnitReshard(rt, u));
    }
    FSDP_CALL(TailPoll(rt, 0)); /* [Note: the gradient tail] what landed meanwhile */
  }
  return FSDP_SUCCESS;
}

/* [Note: forward only] Evaluation (validation loss, sampling) runs the
 * stages forward with the same unit machinery as training -- UnitUnshard
 * (gather, or wait for a prefetched one), forward prefetch (TopUp) under
 * -prefetch both, RunStage, UnitReshard -- but no
 * backward: every unit, the root included, is resharded after its last
 * forward stage whatever -reshard_after_forward says (nothing needs it
 * afterwards), no gradient buffer is taken and nothing is reduced.  So the
 * gather ring planned for training is enough and memory is the same
 * (the root is the only unit that stays unsharded across stages, and it has
 * its own buffer).  All ranks of
 * the sharding group must call it together (its gathers are collective);
 * ranks in different replica groups compute independently. */
int FsdpRuntimeForward(FsdpRuntime rt, void *model)
{
  if (!rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeForward before FsdpRuntimeSetUp");
  for (int u = 0; u < rt->nunits; u++)
    if (rt->units[u].state != FSDP_UNIT_SHARDED)
      FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeForward: unit %d (%s) is %s, not SHARDED (inside a step?)",
                 u, rt->units[u].name, FsdpUnitStateNames[rt->units[u].state]);
  int fwd_prefetch = rt->opt.prefetch == FSDP_PREFETCH_BOTH;
  rt->phase = FSDP_PHASE_FORWARD;
  for (int s = 0; s < rt->nstages; s++) {
    int u = rt->stages[s].unit;
    Unit *x = &rt->units[u];
    FSDP_CALL(UnitUnshard(rt, u));
    if (fwd_prefetch) FSDP_CALL(TopUp(rt, s, +1));
    FSDP_CALL(RunStage(rt, model, s, 0));
    if (s == x->last_fwd_stage) FSDP_CALL(UnitReshard(rt, u));
  }
  return FSDP_SUCCESS;
}

int FsdpRuntimeDrainStreams(FsdpRuntime rt)
{
  if (!rt->setup) return FSDP_SUCCESS;
  int err = FsdpStreamSynchronize(rt->stream);
  int gerr = FsdpStreamSynchronize(rt->gstream); /* nothing prefetched is left behind */
  FSDP_CALL(err ? err : gerr);
  return FSDP_SUCCESS;
}

int FsdpRuntimeFinishGradients(FsdpRuntime rt)
{
  if (rt->setup) {
    int terr = TailPoll(rt, 1); /* [Note: the gradient tail] */
    rt->tail_head = rt->tail_n = 0;
    FSDP_CALL(terr);
  }
  double b = rt->trace ? FsdpTraceNow(rt->trace) : 0.0;
  int err = FsdpRuntimeDrainStreams(rt);
  if (rt->trace) FsdpTraceWait(rt->trace, "wait gradients", rt->step, -1, b, FsdpTraceNow(rt->trace));
  if (err) FSDP_ERROR(err, "a gradient reduction on the communication stream failed");
  return FSDP_SUCCESS;
}

int FsdpRuntimeZeroGradShards(FsdpRuntime rt)
{
  for (int u = 0; u < rt->nunits; u++)
    FSDP_CALL(FsdpDeviceZero(rt->units[u].grad_shard, (size_t)rt->units[u].shard_numel * sizeof(float)));
  return FSDP_SUCCESS;
}

/* ---- accessors -------------------------------------------------------------- */

int FsdpRuntimeNumUnits(FsdpRuntime rt) { return rt->nunits; }

int FsdpRuntimeUnitSpecs(FsdpRuntime rt, int unit, const FsdpParamSpec **specs, int *nparams)
{
  if (unit < 0 || unit >= rt->nunits)
    FSDP_ERROR(FSDP_ERR_STATE, "unit %d out of range [0, %d)", unit, rt->nunits);
  *specs = rt->units[unit].specs;
  *nparams = rt->units[unit].nparams;
  return FSDP_SUCCESS;
}
const char *FsdpRuntimeUnitName(FsdpRuntime rt, int u) { return rt->units[u].name; }
int FsdpRuntimeUnitIsRoot(FsdpRuntime rt, int u) { return rt->units[u].is_root; }
FlatParam FsdpRuntimeUnitFlatParam(FsdpRuntime rt, int u) { return rt->units[u].fp; }
float *FsdpRuntimeUnitShard(FsdpRuntime rt, int u) { return rt->units[u].shard; }
float *FsdpRuntimeUnitGradShard(FsdpRuntime rt, int u) { return rt->units[u].grad_shard; }
FsdpTopo FsdpRuntimeTopo(FsdpRuntime rt) { return rt->topo; }
FsdpColl FsdpRuntimeColl(FsdpRuntime rt) { return rt->coll; }
FsdpStream FsdpRuntimeStream(FsdpRuntime rt) { return rt->stream; }
const FsdpRuntimeOptions *FsdpRuntimeGetOptions(FsdpRuntime rt) { return &rt->opt; }

void FsdpRuntimeGetMemory(FsdpRuntime rt, FsdpRuntimeMemory *m)
{
  memset(m, 0, sizeof *m);
  for (int u = 0; u < rt->nunits; u++)
    m->param_shard_bytes += (uint64_t)rt->units[u].shard_numel * sizeof(float);
  m->grad_shard_bytes = m->param_shard_bytes;
  if (rt->opt.param_dtype != FSDP_DTYPE_FP32)
    m->low_shard_bytes = m->param_shard_bytes / sizeof(float) * rt->klow;
  uint64_t rootP = (uint64_t)rt->ring.root_numel;
  uint64_t slotP = (uint64_t)rt->slot_numel;
  m->gather_buffer_bytes = rt->ring.bytes;
  if (rt->opt.param_dtype != FSDP_DTYPE_FP32) m->compute_buffer_bytes = (rootP + slotP) * sizeof(float);
  m->grad_buffer_bytes = rt->grad_buffer_bytes;
  m->gather_slots = rt->ngslots;
  m->grad_slots = rt->nrslots;
  m->gathers_in_flight = rt->ring.max_in_flight;
}

void FsdpRuntimePeakUnsharded(FsdpRuntime rt, uint64_t *params, uint64_t *grads)
{
  *params = rt->peak_params;
  *grads = rt->peak_grads;
}

int FsdpRuntimeGatherUnit(FsdpRuntime rt, int u, float *out)
{
  if (!rt->setup) FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeGatherUnit before FsdpRuntimeSetUp");
  if (u < 0 || u >= rt->nunits)
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpRuntimeGatherUnit: unit %d out of range [0, %d)", u, rt->nunits);
  /* The reduce stream's collectives use the same sharding communicator
   * ([Note: collectives and threads] in coll.h): nothing may be in flight
   * on it while this thread all-gathers. */
  FSDP_CALL(FsdpRuntimeDrainStreams(rt));
  Unit *x = &rt->units[u];
  float *buf = NULL;
  FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_OTHER, (size_t)x->P * sizeof(float), &buf));
  int err = FsdpCollAllGather(rt->coll, FsdpTopoShard(rt->topo), x->shard, buf,
                              (size_t)x->shard_numel, FSDP_DTYPE_FP32);
  if (!err) err = FsdpDeviceCopyToHost(out, buf, (size_t)FlatParamNumel(x->fp) * sizeof(float));
  FSDP_CALL(FsdpDeviceFree(&buf));
  return err;
}
