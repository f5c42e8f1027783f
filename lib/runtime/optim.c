/* optim.c: AdamW on shards (see optim.h). */
#include "runtime/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "base/error.h"
#include "base/mem.h"

struct FsdpOptim_ {
  FsdpRuntime rt;
  const FsdpKernelOps *k;
  FsdpOptimOptions o;
  FsdpDecayRule rule;
  int nunits;
  float **m, **v;
  /* [Note: one readback per step]: every unit's gradient shard and its
   * length, filled per call (the shards do not move, but this stays
   * correct if they did) */
  const float **gshard;
  size_t *gnumel;
  int64_t t; /* AdamW steps taken (bias correction) */
  double grad_scale; /* gradients in the shards are this times the true ones */
  uint64_t state_bytes;
  /* [Note: the gradient tail] per-unit work done as reductions land */
  int tail;           /* FsdpOptimBeginTail armed this step */
  int tail_early;     /* AdamW may run per unit before the last lands */
  int tail_scaler;    /* check each landed unit for inf/NaN */
  int64_t tail_step;  /* the step being prepared */
  double *sumsq;      /* [nunits] sum of squares of the landed gradient shard */
  int *nonfinite;     /* [nunits] 1: an inf or NaN in it (gradient scaler) */
  char *landed, *updated; /* [nunits] */
  int nlanded;
};

int FsdpOptimOptionsFromDb(FsdpOpts db, FsdpOptimOptions *o)
{
  memset(o, 0, sizeof *o);
  const char *g = "Optimizer";
  FSDP_CALL(FsdpOptsGetDouble(db, g, "lr", "peak learning rate", 3e-3, 0.0, 10.0, &o->lr));
  /* default: a tenth of the peak.  The schedule decays from -lr to
   * -lr_min, so one above -lr would raise the rate as it "decays" */
  FSDP_CALL(FsdpOptsGetDouble(db, g, "lr_min",
                              "final learning rate of the cosine decay (absolute), in [0, -lr]; "
                              "the default is a tenth of -lr",
                              0.1 * o->lr, 0.0, 10.0, &o->lr_min));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "weight_decay", "AdamW decoupled weight decay", 0.1, 0.0, 10.0,
                              &o->weight_decay));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "beta1", "AdamW beta1", 0.9, 0.0, 0.999999, &o->beta1));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "beta2", "AdamW beta2", 0.95, 0.0, 0.999999, &o->beta2));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "eps", "AdamW epsilon", 1e-8, 0.0, 1.0, &o->eps));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "grad_clip", "clip the global gradient norm to this (0 = off)",
                              1.0, 0.0, 1e30, &o->grad_clip));
  FSDP_CALL(FsdpOptsGetInt(db, g, "warmup", "linear warmup steps", 20, 0, INT64_MAX / 2, &o->warmup));
  FSDP_CALL(FsdpOptsGetBool(db, g, "weight_decay_embeddings",
                            "apply weight decay to the embeddings too (GPT: wte, wpe; Llama: "
                            "embed_tokens; biases and norms never)", 1,
                            &o->decay_embeddings));
  /* last: every option is read (-help lists them all) */
  if (o->lr_min > o->lr)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -lr_min %g is above -lr %g: the cosine schedule decays the rate from -lr "
               "down to -lr_min, so -lr_min must be in [0, %g]",
               o->lr_min, o->lr, o->lr);
  return FSDP_SUCCESS;
}

int FsdpOptimCreate(FsdpRuntime rt, const FsdpKernelOps *k, const FsdpOptimOptions *o,
                    FsdpDecayRule rule, FsdpOptim *out)
{
  *out = NULL;
  FsdpOptim opt = calloc(1, sizeof *opt);
  FSDP_CHECK_ALLOC(opt, sizeof *opt);
  opt->rt = rt;
  opt->k = k;
  opt->o = *o;
  opt->rule = rule;
  opt->nunits = FsdpRuntimeNumUnits(rt);
  opt->grad_scale = 1.0;
  opt->m = calloc((size_t)opt->nunits, sizeof(float *));
  opt->v = calloc((size_t)opt->nunits, sizeof(float *));
  FSDP_CHECK_ALLOC(opt->m, sizeof(float *));
  FSDP_CHECK_ALLOC(opt->v, sizeof(float *));
  opt->sumsq = calloc((size_t)opt->nunits + 1, sizeof *opt->sumsq);
  opt->nonfinite = calloc((size_t)opt->nunits + 1, sizeof *opt->nonfinite);
  opt->landed = calloc((size_t)opt->nunits + 1, 1);
  opt->updated = calloc((size_t)opt->nunits + 1, 1);
  if (!opt->sumsq || !opt->nonfinite || !opt->landed || !opt->updated) {
    FsdpOptimDestroy(&opt);
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory for the optimizer's per-unit state (%d units)", opt->nunits);
  }
  opt->gshard = calloc((size_t)opt->nunits + 1, sizeof(float *));
  opt->gnumel = calloc((size_t)opt->nunits + 1, sizeof(size_t));
  FSDP_CHECK_ALLOC(opt->gshard, sizeof(float *));
  FSDP_CHECK_ALLOC(opt->gnumel, sizeof(size_t));
  for (int u = 0; u < opt->nunits; u++) {
    size_t bytes = (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u)) * sizeof(float);
    FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_OPTIM, bytes, &opt->m[u]));
    FSDP_CALL(FsdpDeviceAlloc(FSDP_MEM_OPTIM, bytes, &opt->v[u]));
    opt->state_bytes += 2 * bytes;
  }
  *out = opt;
  return FSDP_SUCCESS;
}

int FsdpOptimDestroy(FsdpOptim *popt)
{
  if (!popt || !*popt) return FSDP_SUCCESS;
  FsdpOptim opt = *popt;
  for (int u = 0; u < opt->nunits; u++) {
    FSDP_CALL(FsdpDeviceFree(&opt->m[u]));
    FSDP_CALL(FsdpDeviceFree(&opt->v[u]));
  }
  free(opt->m);
  free(opt->v);
  free(opt->sumsq);
  free(opt->nonfinite);
  free(opt->landed);
  free(opt->updated);
  free(opt->gshard);
  free(opt->gnumel);
  free(opt);
  *popt = NULL;
  return FSDP_SUCCESS;
}

double FsdpOptimLearningRate(const FsdpOptimOptions *o, int64_t step)
{
  if (o->warmup > 0 && step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
  int64_t decay = o->total_steps - o->warmup;
  if (decay <= 1) return o->lr;
  double frac = (double)(step - o->warmup) / (double)(decay - 1);
  if (frac > 1.0) frac = 1.0;
  double c = 0.5 * (1.0 + cos(3.141592653589793 * frac));
  return o->lr_min + c * (o->lr - o->lr_min);
}

/* [Note: device errors before the norm] On a GPU, casts, gradient
 * landing, the sum of squares and AdamW are asynchronous launches: a
 * failed one leaves garbage that would come back as a NaN norm and the
 * misleading "loss became nan: lower -lr".  So the device is checked at
 * the end of the gradient phase, after the sum of squares (which waits
 * for the device, so faults of the kernels before it show here too) and
 * at the end of the optimizer step (CPU: nothing to check). */
static int OptimDeviceCheck(const char *where)
{
  int err = FsdpDeviceCheck();
  if (err) FSDP_ERROR(err, "device error at the end of %s", where);
  return FSDP_SUCCESS;
}

/* Every unit's gradient shard and length, for the batched readbacks. */
static const float *const *GradShards(FsdpOptim opt)
{
  for (int u = 0; u < opt->nunits; u++) {
    opt->gshard[u] = FsdpRuntimeUnitGradShard(opt->rt, u);
    opt->gnumel[u] = (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(opt->rt, u));
  }
  return opt->gshard;
}

/* Sum of squares of unit u's gradient shard, through the same device call
 * as the whole norm ([Note: one readback per step]): that call adds the
 * per-buffer sums in buffer order from 0, so adding these per-unit sums
 * in unit order gives the same double ([Note: the gradient tail]). */
static int UnitSumSquares(FsdpOptim opt, int u, double *sq)
{
  const float *x = FsdpRuntimeUnitGradShard(opt->rt, u);
  size_t n = (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(opt->rt, u));
  return FsdpDeviceSumSquaresMany(&x, &n, 1, sq);
}

/* The local squared norm summed over the sharding group. */
static int ReduceNorm(FsdpOptim opt, double sq, double *norm)
{
  /* [Note: gradient norm over the sharding group] */
  FSDP_CALL(FsdpCollScalarSum(FsdpRuntimeColl(opt->rt), FsdpTopoShard(FsdpRuntimeTopo(opt->rt)),
                              &sq, 1));
  *norm = sqrt(sq) / opt->grad_scale;
  return FSDP_SUCCESS;
}

int FsdpOptimGradNorm(FsdpOptim opt, double *norm)
{
  /* reductions still in flight write the shards and use the sharding comm */
  FSDP_CALL(FsdpRuntimeDrainStreams(opt->rt));
  /* [Note: device errors before the norm] */
  FSDP_CALL(OptimDeviceCheck("the gradient phase (casts, landing reduced gradients)"));
  /* [Note: one readback per step] (device.h): all units, one wait */
  double sq = 0.0;
  FSDP_CALL(FsdpDeviceSumSquaresMany(GradShards(opt), opt->gnumel, opt->nunits, &sq));
  FSDP_CALL(OptimDeviceCheck("the gradient norm (sum of squares)"));
  return ReduceNorm(opt, sq, norm);
}

void FsdpOptimSetGradScale(FsdpOptim opt, double scale) { opt->grad_scale = scale; }

static int UnitNonFinite(FsdpOptim opt, int u, int *bad)
{
  return FsdpDeviceAnyNonFinite(FsdpRuntimeUnitGradShard(opt->rt, u),
                                (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(opt->rt, u)), bad);
}

/* AdamW on unit u's shard with the step's rate, factor and count. */
static int UnitAdamW(FsdpOptim opt, int u, double lr, float scale, int64_t t)
{
  FlatParam fp = FsdpRuntimeUnitFlatParam(opt->rt, u);
  float *p = FsdpRuntimeUnitShard(opt->rt, u), *g = FsdpRuntimeUnitGradShard(opt->rt, u);
  const FlatParamPiece *pc;
  int np;
  FSDP_CALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
  /* each piece gets its parameter's weight-decay rule */
  for (int i = 0; i < np; i++) {
    const FsdpParamSpec *spec = FlatParamSpec(fp, pc[i].param);
    float wd = opt->rule(spec->name, opt->o.decay_embeddings) ? (float)opt->o.weight_decay : 0.0f;
    int64_t off = pc[i].shard_offset;
    opt->k->adamw_update(p + off, g + off, opt->m[u] + off, opt->v[u] + off, (size_t)pc[i].count,
                         (float)lr, (float)opt->o.beta1, (float)opt->o.beta2, (float)opt->o.eps,
                         wd, scale, (int)t);
  }
  return FSDP_SUCCESS;
}

/* Whether the tail saw every unit land (the armed step's last micro-step
 * ran and FsdpRuntimeFinishGradients handed every unit over). */
static int TailComplete(FsdpOptim opt) { return opt->tail && opt->nlanded == opt->nunits; }

int FsdpOptimCheckOverflow(FsdpOptim opt, int *overflow)
{
  FSDP_CALL(FsdpRuntimeDrainStreams(opt->rt)); /* the shards must be final */
  /* a failed launch is an error, not an overflow to skip the step for */
  FSDP_CALL(OptimDeviceCheck("the gradient phase (casts, landing reduced gradients)"));
  double bad = 0.0;
  if (TailComplete(opt) && opt->tail_scaler) { /* every unit was checked as it landed */
    for (int u = 0; u < opt->nunits && bad == 0.0; u++) bad = opt->nonfinite[u];
  } else {
    int b = 0; /* [Note: one readback per step] (device.h): all units, one wait */
    FSDP_CALL(FsdpDeviceAnyNonFiniteMany(GradShards(opt), opt->gnumel, opt->nunits, &b));
    bad = b;
  }
  FSDP_CALL(OptimDeviceCheck("the overflow check"));
  FSDP_CALL(FsdpCollScalarMax(FsdpRuntimeColl(opt->rt), FsdpTopoWorld(FsdpRuntimeTopo(opt->rt)),
                              &bad, 1));
  *overflow = bad > 0.0;
  if (*overflow) opt->tail = 0; /* the step is skipped (nothing was updated early: scaler) */
  return FSDP_SUCCESS;
}

/* [Note: the gradient tail] The update of a unit's shard depends on the
 * rest of the step only through one factor, scale = clip / grad_scale:
 * clip needs the global norm (every unit, every rank), and with the
 * gradient scaler an overflow in any unit skips every unit's update.  So
 * the exact schedule is: as each unit's reduction lands (the runtime's
 * FsdpRuntimeSetGradReady hook, on the compute thread between backward
 * stages and in FsdpRuntimeFinishGradients), compute its sum of squares
 * and its inf/NaN check; when the factor is known in advance -- no
 * clipping (-grad_clip 0) and no scaler -- also run its AdamW right there.
 * Otherwise AdamW waits for the last unit: FsdpOptimCheckOverflow only
 * combines the per-unit flags, FsdpOptimStep only adds the per-unit sums
 * (in unit order: the same double as the unfused sum), reduces the scalar
 * and updates.  Clipping keeps AdamW behind the last reduction: that is
 * the price of results bit-identical to the unfused step (clipping with
 * the previous step's norm would free it but change the trajectory; not
 * offered).  Each unit is updated with the unfused loop's lr, factor and
 * step count and touches only its own shard and moments, so the order of
 * units does not matter: parameters and moments are bit-identical. */
int FsdpOptimBeginTail(FsdpOptim opt, int64_t step, int scaler_on)
{
  opt->tail = 1;
  opt->tail_step = step;
  opt->tail_scaler = scaler_on;
  opt->tail_early = !scaler_on && !(opt->o.grad_clip > 0) && opt->grad_scale == 1.0;
  opt->nlanded = 0;
  memset(opt->landed, 0, (size_t)opt->nunits);
  memset(opt->updated, 0, (size_t)opt->nunits);
  memset(opt->nonfinite, 0, (size_t)opt->nunits * sizeof *opt->nonfinite);
  return FSDP_SUCCESS;
}

int FsdpOptimUnitLanded(void *ctx, int u, int *updated)
{
  FsdpOptim opt = ctx;
  *updated = 0;
  if (!opt->tail) return FSDP_SUCCESS;
  if (u < 0 || u >= opt->nunits || opt->landed[u])
    FSDP_ERROR(FSDP_ERR_STATE, "optimizer: unit %d handed over twice or out of range in step %lld",
               u, (long long)opt->tail_step + 1);
  FSDP_CALL(UnitSumSquares(opt, u, &opt->sumsq[u]));
  if (opt->tail_scaler) FSDP_CALL(UnitNonFinite(opt, u, &opt->nonfinite[u]));
  opt->landed[u] = 1;
  opt->nlanded++;
  if (opt->tail_early) {
    FSDP_CALL(UnitAdamW(opt, u, FsdpOptimLearningRate(&opt->o, opt->tail_step), 1.0f, opt->t + 1));
    opt->updated[u] = 1;
    *updated = 1;
  }
  return FSDP_SUCCESS;
}

int FsdpOptimStep(FsdpOptim opt, int64_t step, double *grad_norm, double *lr_out)
{
  double norm = 0.0;
  int tail = TailComplete(opt) && opt->tail_step == step;
  if (opt->tail && !tail && opt->nlanded > 0 && opt->tail_early)
    FSDP_ERROR(FSDP_ERR_STATE, "optimizer: step %lld with only %d of %d units landed, some updated",
               (long long)step + 1, opt->nlanded, opt->nunits);
  if (tail) { /* [Note: the gradient tail] the per-unit sums are in */
    FSDP_CALL(FsdpRuntimeDrainStreams(opt->rt));
    FSDP_CALL(OptimDeviceCheck("the gradient norm (sum of squares as reductions landed)"));
    double sq = 0.0;
    for (int u = 0; u < opt->nunits; u++) sq += opt->sumsq[u];
    FSDP_CALL(ReduceNorm(opt, sq, &norm));
  } else {
    FSDP_CALL(FsdpOptimGradNorm(opt, &norm));
  }
  double clip = 1.0;
  if (opt->o.grad_clip > 0 && norm > opt->o.grad_clip) clip = opt->o.grad_clip / (norm + 1e-6);
  float scale = (float)(clip / opt->grad_scale); /* unscale and clip in one factor */
  double lr = FsdpOptimLearningRate(&opt->o, step);
  opt->t++;
  for (int u = 0; u < opt->nunits; u++)
    if (!tail || !opt->updated[u]) FSDP_CALL(UnitAdamW(opt, u, lr, scale, opt->t));
  opt->tail = 0;
  FSDP_CALL(OptimDeviceCheck("the optimizer step (AdamW)"));
  if (grad_norm) *grad_norm = norm;
  if (lr_out) *lr_out = lr;
  return FSDP_SUCCESS;
}

uint64_t FsdpOptimStateBytes(FsdpOptim opt) { return opt->state_bytes; }
float *FsdpOptimExpAvg(FsdpOptim opt, int unit) { return opt->m[unit]; }
float *FsdpOptimExpAvgSq(FsdpOptim opt, int unit) { return opt->v[unit]; }
int64_t FsdpOptimStepCount(FsdpOptim opt) { return opt->t; }
void FsdpOptimSetStepCount(FsdpOptim opt, int64_t t) { opt->t = t; }
