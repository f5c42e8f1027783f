/* fsdp.h: the FSDP runtime -- units, their FlatParameters, and when their
 * unsharded parameters and gradients exist (docs/design.md §3, §4).
 *
 * A model is described to the runtime by its table (model/model.h):
 *   - units: a name and a list of parameters (name, shape), one of them
 *     possibly the root (embeddings, final norm, tied head), and
 *   - stages: in forward order, each a (unit, forward, backward) triple.
 * GPT has stages [root:embed, h.0, ..., h.L-1, root:head]: the root unit
 * appears twice, which is why stages and units are separate.  The runtime
 * runs stages forward in order and backward in reverse; before a stage runs
 * its unit is unsharded (all-gather), and the stage callback gets pointers
 * to the unit's unsharded parameters and gradients, nothing else: the model
 * never sees a shard and never calls MPI.
 *
 * [Note: unit life cycle] SHARDED -> GATHERING (all-gather issued on the
 * communication stream) -> UNSHARDED (event waited, compute may read) ->
 * SHARDED again (reshard: the gather buffer goes back to the ring).  A
 * non-root unit is resharded after its last forward stage when
 * reshard_after_forward is set (RAF), and after its backward otherwise
 * (NRAF); it is gathered again in backward if it was resharded.  The root
 * unit stays unsharded from its first forward stage to the end of backward.
 * After a unit's last backward stage its unsharded gradient is
 * reduce-scattered into the gradient shard (scaled by 1/W: gradients are
 * means over the global batch), then, with hybrid sharding, all-reduced
 * over the replica group; both are issued on the stream and waited for only
 * in FsdpRuntimeFinishGradients.  An illegal transition is FSDP_ERR_STATE.
 *
 * [Note: gather memory] Unsharded parameter buffers of non-root units come
 * from a ring of fixed slots allocated at setup, each of the largest
 * non-root P, exactly as many as can be live at once: with RAF, the unit
 * computing plus the L gathers -limit_all_gathers lets run ahead of it
 * ([Note: prefetch and the limiter] in fsdp.c) -- so 1 slot with -prefetch
 * none and 1 + L with prefetching (L = 0: no limit, one slot per unit),
 * never more than the non-root units; with NRAF every non-root unit keeps
 * its buffer through forward, so one slot per unit.  The peak of unsharded
 * parameters then equals the planned ring (FsdpGatherRingPlan computes it,
 * for the runtime and for fsdp-plan).  The root has its own
 * buffer.  Unsharded gradient buffers: one for the root plus a ring of two
 * slots (the unit computing its backward, the unit whose reduce-scatter is
 * in flight).  Nothing is allocated after setup, so memory never grows or
 * fragments during training.
 *
 * [Note: mixed precision] With -param_dtype bf16/fp16 each gather first
 * casts the fp32 shard to a low-precision shard copy (once per gather, on
 * the stream), all-gathers that (K_low bytes per element on the wire and in
 * the ring), and the unit's stage converts the gathered buffer to an fp32
 * compute buffer on entry (the kernels take fp32 pointers; one buffer for
 * the root, one shared scratch for the unit computing); the matmuls then
 * round their operands back to bf16 under [Note: bf16 compute].  Gradients are computed
 * in fp32; with -reduce_dtype bf16/fp16 they are cast to a send buffer, and
 * reduce-scatter and all-reduce run in that type, then land in the fp32
 * gradient shard.  fp16 needs the sharded gradient scaler (optim.h).
 *
 * [Note: bf16 compute] -param_dtype bf16 means bf16 compute, as in
 * PyTorch's autocast and llm.c: -compute_dtype (default bf16 with
 * -param_dtype bf16, else fp32) bf16 runs every matmul (the four linear
 * layers of a block and the LM head) through the kernel table's bf16
 * entries -- operands rounded to bf16, fp32 accumulation, fp32 outputs --
 * while LayerNorm, attention's softmax, GELU, the loss, gradients and
 * AdamW's fp32 master weights and moments stay fp32.  The driver swaps the
 * bf16 entries into the table it hands the model (FsdpComputeKernels in
 * driver/train.h, for fsdp-train and fsdp-sample), so a model
 * needs no change.  The gathered bf16 parameters still become an fp32
 * compute buffer (bf16 -> fp32 is exact, so the matmul's rounding of a
 * weight is too); -compute_dtype bf16 with -param_dtype fp32 rounds fp32
 * weights at each matmul (autocast over fp32 parameters).  The GEMM in use
 * is the summary's precision.gemm (kernels.h FsdpKernelsCpuGemm).
 *
 * [Note: gradient accumulation] With -grad_accum K one optimizer step is K
 * micro-steps.  -accum_comm 1 reduces every micro-step and adds the result
 * to the gradient shard; -accum_comm 0 keeps each unit's unsharded fp32
 * gradient in a persistent buffer of its own (memory grows by sum P_i * 4)
 * and reduces once, on the last micro-step (communication falls by K).
 *
 * [Note: no sharding] With F = 1 a unit's shard is the whole padded flat
 * parameter: the unsharded buffer and gradient ARE the shard buffers, and
 * no all-gather or reduce-scatter is issued (0 calls, 0 bytes); gradients
 * are only all-reduced over the replica group (plain DDP).
 *
 * [Note: activation recomputation] With -recompute 1 the runtime calls a
 * stage's recompute callback (FsdpModelStage) in backward, right before
 * its backward callback, with the same unsharded parameters: the unit is
 * unsharded then anyway (gathered again under RAF, kept under NRAF), so
 * recomputation costs one more forward and no communication.  The model
 * keeps only each stage's input through forward and the full activations
 * of one stage as a working set shared by all stages (FsdpModelSetRecompute
 * before FsdpModelSetUp, model/family.h; FsdpModelDescActivationBytes
 * plans the bytes).  The same kernels on the same inputs give the same
 * activations, so losses and gradients are bit-identical to -recompute 0.  Stages without the
 * callback (GPT's root stages) are not recomputed.
 */
#ifndef FSDP_RUNTIME_H
#define FSDP_RUNTIME_H

#include <stdint.h>

#include "comm/coll.h"
#include "model/model.h"
#include "runtime/flatparam.h"
#include "base/opts.h"
#include "comm/stream.h"
#include "comm/topo.h"
#include "comm/trace.h"

typedef struct FsdpRuntime_ *FsdpRuntime;

typedef enum {
  FSDP_UNIT_SHARDED,
  FSDP_UNIT_GATHERING,
  FSDP_UNIT_UNSHARDED,
  FSDP_UNIT_NSTATES
} FsdpUnitState;
extern const char *const FsdpUnitStateNames[FSDP_UNIT_NSTATES];

typedef enum { FSDP_PREFETCH_NONE, FSDP_PREFETCH_BACKWARD, FSDP_PREFETCH_BOTH, FSDP_NPREFETCH } FsdpPrefetch;
/* Names as accepted by -prefetch and written in summaries, indexed by
 * FsdpPrefetch, NULL-terminated. */
extern const char *const FsdpPrefetchNames[FSDP_NPREFETCH + 1];
/* -attention's names, indexed by FsdpAttention (kernels.h), NULL-terminated. */
extern const char *const FsdpAttentionNames[FSDP_NATTENTION + 1];

typedef struct {
  int reshard_after_forward; /* -reshard_after_forward 0/1 (default 1) */
  int limit_all_gathers;     /* -limit_all_gathers L: gathers prefetched ahead of the unit
                                computing (default 2; 0 = no limit) */
  FsdpPrefetch prefetch;     /* -prefetch none/backward/both (from the static stage order) */
  FsdpDtype param_dtype;     /* -param_dtype: gathered parameters and their wire type */
  FsdpDtype reduce_dtype;    /* -reduce_dtype: reduce-scatter / all-reduce type */
  FsdpDtype compute_dtype;   /* -compute_dtype: matmul operands ([Note: bf16 compute]) */
  int tf32;                  /* -tf32 1: fp32 matmuls on TF32 tensor cores (CUDA only) */
  int grad_accum;            /* -grad_accum K micro-steps per optimizer step */
  int accum_comm;            /* -accum_comm 1: reduce every micro-step; 0: once */
  int recompute;             /* -recompute 1: stages recompute their forward in backward */
  FsdpAttention attention;   /* -attention flash|naive: the model's attention kernels */
} FsdpRuntimeOptions;

/* Not collective.  Reads the options above (group "FSDP"). */
int FsdpRuntimeOptionsFromDb(FsdpOpts db, FsdpRuntimeOptions *o);

/* The most stages a runtime holds (FsdpRuntimeAddStage). */
#define FSDP_RUNTIME_MAX_STAGES 4096

/* Not collective.  Reads -wrap (transformer blocks per unit, group
 * "FSDP"); FsdpRuntimeCheckWrap holds it against the model. */
int FsdpRuntimeWrapFromDb(FsdpOpts db, int *wrap);
/* Not collective.  [Note: wrap and the stage limit] (fsdp.c): a usage
 * error naming the options and values when the model of desc cut into
 * units of wrap blocks is not one the runtime runs: -wrap above its
 * -n_layer, or more stages than FSDP_RUNTIME_MAX_STAGES.  Every program
 * that reads -wrap calls it once the model is known (fsdp-train, -plan
 * and -probe in FsdpTrainOptionsFromDb; fsdp-sample after the
 * checkpoint's description). */
int FsdpRuntimeCheckWrap(const FsdpModelDesc *desc, int wrap);

/* Not collective; allocates nothing big.  Keeps topo and coll (not owned). */
int FsdpRuntimeCreate(FsdpTopo topo, FsdpColl coll,
                      const FsdpRuntimeOptions *o, FsdpRuntime *rt);
/* Frees everything; accepts NULL. */
int FsdpRuntimeDestroy(FsdpRuntime *rt);

/* Not collective.  Register a model (before setup, on a runtime with no
 * units yet): every unit and stage of the table ([Note: the model table]
 * in model.h), unit i of the table becoming unit i of the runtime.  The
 * specs are copied; the callbacks get the model's ctx through
 * FsdpRuntimeForwardBackward.  A bad unit index or a second root is
 * FSDP_ERR_STATE naming the unit. */
int FsdpRuntimeAddModel(FsdpRuntime rt, const FsdpModelTable *table);

/* The steps of FsdpRuntimeAddModel, for synthetic models in tests.
 * Not collective.  Register a unit (before setup).  *unit gets its index. */
int FsdpRuntimeAddUnit(FsdpRuntime rt, const char *name, int is_root,
                       const FsdpParamSpec *specs, int nparams, int *unit);
/* Not collective.  Append a stage in forward order. */
int FsdpRuntimeAddStage(FsdpRuntime rt, int unit, FsdpStageFn forward,
                        FsdpStageFn backward);
/* Not collective.  Give stage `stage` (an index FsdpRuntimeAddStage
 * assigned, before setup) a recompute callback ([Note: activation
 * recomputation]); FsdpRuntimeAddModel sets the table's. */
int FsdpRuntimeSetStageRecompute(FsdpRuntime rt, int stage, FsdpStageFn recompute);

/* Collective on the world (every rank must register the same units).
 * Builds FlatParameters, allocates shards, gradient shards, the gather ring
 * and gradient buffers, starts the communication stream. */
int FsdpRuntimeSetUp(FsdpRuntime rt);

/* Not collective.  Fill my parameter shards from init (each rank fills only
 * its own shard; padding is 0). */
int FsdpRuntimeInitShards(FsdpRuntime rt, FsdpInitFn init, void *model);

/* Collective on the world.  One forward + backward over all stages for the
 * current micro-batch (the model holds it): micro-step `micro` of `nmicro`
 * of one optimizer step.  Gradients reduced in this call are ADDED to the
 * gradient shards (see [Note: gradient accumulation]); call
 * FsdpRuntimeZeroGradShards before micro-step 0. */
int FsdpRuntimeForwardBackward(FsdpRuntime rt, void *model, int micro, int nmicro);

/* Collective on the world.  Forward only over all stages for the current
 * batch (the model holds it): every unit is gathered as in training,
 * runs its forward stages and is resharded after its last one; no
 * backward, no gradients, no reductions ([Note: forward only] in fsdp.c).
 * Between optimizer steps (every unit SHARDED), e.g. for validation or
 * sampling; the model's output (its loss, logits) is then the model's. */
int FsdpRuntimeForward(FsdpRuntime rt, void *model);

/* Record the timeline into trace (NULL: stop); step labels events. */
int FsdpRuntimeSetTrace(FsdpRuntime rt, FsdpTrace trace);
void FsdpRuntimeSetStep(FsdpRuntime rt, int64_t step);

/* Wait for every issued reduction (before the optimizer reads shards). */
int FsdpRuntimeFinishGradients(FsdpRuntime rt);

/* Not collective.  Wait for everything issued so far on the runtime's
 * streams (gathers and reductions), recording nothing in the trace.  After
 * it the compute thread may use the sharding communicator and read the
 * gradient shards, at any point, mid-step included: every rank issued the
 * same stream collectives, so the wait always ends. */
int FsdpRuntimeDrainStreams(FsdpRuntime rt);

/* [Note: the gradient tail] (fsdp.c, optim.c) A hook called on the
 * compute thread once per optimizer step for each unit, as soon as the
 * last micro-step's reduction of its gradient has landed in the gradient
 * shard (between backward stages, or inside FsdpRuntimeFinishGradients,
 * which returns after every unit was handed over).  It may read the
 * unit's gradient shard and write its parameter shard (nothing else uses
 * them until the next step); it must not communicate.  *updated = 1: it
 * updated the parameters (the trace names the span "adamw UNIT", else
 * "grad check UNIT", category optim_tail).  A non-zero return fails the
 * step. */
typedef int (*FsdpGradReadyFn)(void *ctx, int unit, int *updated);
/* Where the hook runs: FSDP_TAIL_POLL on the compute thread, which polls
 * the landed reductions between backward stages and waits for the rest in
 * FsdpRuntimeFinishGradients; FSDP_TAIL_STREAM as a task ("optim_tail") on
 * the reduce stream right after the unit's reduction, in FIFO order with
 * the reductions (the next unit's reduction starts after it). */
typedef enum { FSDP_TAIL_NONE, FSDP_TAIL_POLL, FSDP_TAIL_STREAM, FSDP_NTAIL } FsdpTailWhere;
/* -optim_overlap's names, indexed by FsdpTailWhere, NULL-terminated. */
extern const char *const FsdpTailNames[FSDP_NTAIL + 1];
/* Not collective.  Install (fn NULL or FSDP_TAIL_NONE: remove) the hook;
 * between steps. */
int FsdpRuntimeSetGradReady(FsdpRuntime rt, FsdpGradReadyFn fn, void *ctx, FsdpTailWhere where);

/* Zero the gradient shards (start of an optimizer step). */
int FsdpRuntimeZeroGradShards(FsdpRuntime rt);

/* Accessors. */
int FsdpRuntimeNumUnits(FsdpRuntime rt);
/* Not collective.  A unit's parameter list, valid from AddUnit on (before
 * setup too: planning tools use it without allocating anything). */
int FsdpRuntimeUnitSpecs(FsdpRuntime rt, int unit, const FsdpParamSpec **specs, int *nparams);
const char *FsdpRuntimeUnitName(FsdpRuntime rt, int unit);
int FsdpRuntimeUnitIsRoot(FsdpRuntime rt, int unit);
FlatParam FsdpRuntimeUnitFlatParam(FsdpRuntime rt, int unit);
float *FsdpRuntimeUnitShard(FsdpRuntime rt, int unit);
float *FsdpRuntimeUnitGradShard(FsdpRuntime rt, int unit);
FsdpTopo FsdpRuntimeTopo(FsdpRuntime rt);
FsdpColl FsdpRuntimeColl(FsdpRuntime rt);
FsdpStream FsdpRuntimeStream(FsdpRuntime rt);
const FsdpRuntimeOptions *FsdpRuntimeGetOptions(FsdpRuntime rt);

/* [Note: gather memory] as a pure function of the unit sizes, the stage
 * table and the options: the ring FsdpRuntimeSetUp allocates and fsdp-plan
 * reports are this one computation, so the plan equals the run by
 * construction.  F = 1 ([Note: no sharding]) has no ring and no root
 * buffer. */
typedef struct {
  int slots;           /* ring slots for non-root units (0 when F = 1) */
  int64_t slot_numel;  /* elements per slot: the largest non-root P (also with F = 1) */
  int64_t root_numel;  /* the root unit's P, 0 without a root */
  int max_in_flight;   /* most gathers issued and not yet taken by their stage at once
                          ([Note: prefetch and the limiter]): min(L, what a phase gathers) */
  uint64_t bytes;      /* K_low * (root P + slots * slot_numel); 0 when F = 1 */
} FsdpGatherRing;
/* Not collective, allocates nothing.  P[u], is_root[u]: padded numel and
 * root flag of each of the nunits units; stage_unit[s]: the unit of each of
 * the nstages stages in forward order; F the sharding factor. */
void FsdpGatherRingPlan(const FsdpRuntimeOptions *o, int F, const int64_t *P, const int *is_root,
                        int nunits, const int *stage_unit, int nstages, FsdpGatherRing *ring);

/* Planned memory (bytes), equal to [Note: gather memory]. */
typedef struct {
  uint64_t param_shard_bytes;   /* sum P_i / F * 4 (fp32 master shards) */
  uint64_t grad_shard_bytes;    /* same */
  uint64_t low_shard_bytes;     /* sum P_i / F * K_low (param_dtype copies; 0 for fp32) */
  uint64_t gather_buffer_bytes; /* (root P + slots * max non-root P) * K_low */
  uint64_t compute_buffer_bytes;/* (root P + max non-root P) * 4 when K_low < 4, else 0 */
  uint64_t grad_buffer_bytes;   /* unsharded gradient buffers and their reduce buffers */
  int gather_slots, grad_slots;
  int gathers_in_flight;        /* planned most gathers in flight (FsdpGatherRing) */
} FsdpRuntimeMemory;
void FsdpRuntimeGetMemory(FsdpRuntime rt, FsdpRuntimeMemory *m);
/* Peak number of bytes of unsharded parameters / gradients that were held
 * by units at once since setup (<= the planned buffers). */
void FsdpRuntimePeakUnsharded(FsdpRuntime rt, uint64_t *params, uint64_t *grads);

/* Collective on the sharding group.  Gather unit's full (unpadded) flat
 * parameters into out (numel floats): for tests and export only.  Safe at
 * any point, mid-step included (every rank at the same point): it drains
 * the streams first (FsdpRuntimeDrainStreams), so its all-gather never
 * runs beside a stream collective on the sharding communicator. */
int FsdpRuntimeGatherUnit(FsdpRuntime rt, int unit, float *out);

#endif
