/* optim.h: AdamW on fp32 shards, global-norm clipping, LR schedule.
 *
 * The optimizer sees only shards: for each unit it walks the pieces of its
 * shard (flatparam) and applies the per-parameter rule (weight decay or
 * not) to each piece.  Padding elements have zero gradient and stay zero.
 *
 * [Note: gradient norm over the sharding group] The squared norm is summed
 * over the local shard and then over the sharding comm only: after the
 * replica all-reduce every replica holds the same shard, so summing over
 * replicas too would count each element R times.
 */
#ifndef FSDP_OPTIM_H
#define FSDP_OPTIM_H

#include <stdint.h>

#include "runtime/fsdp.h"
#include "kernels/kernels.h"
#include "base/opts.h"

typedef struct {
  double lr, lr_min, weight_decay, beta1, beta2, eps, grad_clip;
  int64_t warmup, total_steps;
  int decay_embeddings;
} FsdpOptimOptions;

/* Not collective.  Reads -lr -lr_min -weight_decay -beta1 -beta2 -eps
 * -grad_clip -warmup -weight_decay_embeddings (group "Optimizer"); the
 * schedule length is set by the caller (total_steps). */
int FsdpOptimOptionsFromDb(FsdpOpts db, FsdpOptimOptions *o);

typedef struct FsdpOptim_ *FsdpOptim;

/* Not collective.  Allocates m and v for every shard (FSDP_MEM_OPTIM).
 * rule: the model's weight decay rule (FsdpModelTable.decays). */
int FsdpOptimCreate(FsdpRuntime rt, const FsdpKernelOps *k, const FsdpOptimOptions *o,
                    FsdpDecayRule rule, FsdpOptim *opt);
int FsdpOptimDestroy(FsdpOptim *opt);

/* Learning rate at step (0-based): linear warmup over `warmup` steps to
 * lr, then cosine decay to lr_min at total_steps. */
double FsdpOptimLearningRate(const FsdpOptimOptions *o, int64_t step);

/* Collective on the sharding comm.  Global gradient norm (before
 * clipping), see [Note: gradient norm over the sharding group].  Safe at
 * any point, mid-step included (every rank at the same point): it drains
 * the runtime's streams first (FsdpRuntimeDrainStreams), so it reads the
 * gradients reduced so far, whole, and its reduction never runs beside a
 * reduce-scatter on the sharding comm. */
int FsdpOptimGradNorm(FsdpOptim opt, double *norm);

/* Collective on the sharding comm.  One AdamW step at `step` (0-based):
 * computes the norm, clips to grad_clip (if > 0), updates every shard.
 * *grad_norm (may be NULL) gets the norm before clipping, *lr the rate. */
int FsdpOptimStep(FsdpOptim opt, int64_t step, double *grad_norm, double *lr);

/* Gradients in the shards are multiplied by `scale` (the fp16 loss
 * scale); the norm, clipping and update divide it out.  Default 1. */
void FsdpOptimSetGradScale(FsdpOptim opt, double scale);

/* Collective on the world group.  1 in *overflow when any rank's gradient
 * shard holds an inf or NaN (the sharded gradient scaler's check: every
 * rank gets the same answer, so every rank skips the same steps).  Drains
 * the runtime's streams first, like FsdpOptimGradNorm. */
int FsdpOptimCheckOverflow(FsdpOptim opt, int *overflow);

/* [Note: the gradient tail] (optim.c) -- the optimizer's per-unit work
 * as each unit's reduction lands.  Not collective.  Arm it before the last
 * micro-step's FsdpRuntimeForwardBackward of step `step` (scaler_on: the
 * fp16 gradient scaler will check this step for overflow), with
 * FsdpOptimUnitLanded installed as the runtime's grad-ready hook
 * (FsdpRuntimeSetGradReady, ctx = opt).  FsdpOptimCheckOverflow and
 * FsdpOptimStep then use what the hook computed; results are
 * bit-identical to the unarmed step.  A skipped step (overflow) disarms
 * it. */
int FsdpOptimBeginTail(FsdpOptim opt, int64_t step, int scaler_on);
/* The hook (FsdpGradReadyFn): unit u's gradient shard is final.  Sum of
 * squares, the inf/NaN check (scaler), and AdamW when nothing gates it
 * (-grad_clip 0, no scaler): then *updated = 1. */
int FsdpOptimUnitLanded(void *opt, int u, int *updated);

/* Bytes of optimizer state on this rank. */
uint64_t FsdpOptimStateBytes(FsdpOptim opt);
/* Moments of a unit's shard (for checkpoints). */
float *FsdpOptimExpAvg(FsdpOptim opt, int unit);
float *FsdpOptimExpAvgSq(FsdpOptim opt, int unit);
int64_t FsdpOptimStepCount(FsdpOptim opt);
void FsdpOptimSetStepCount(FsdpOptim opt, int64_t t);

#endif
