/* test_scaler: the factors the trainer puts on the loss before backward.
 *
 *   - gradient accumulation: K micro-steps of B sequences give the gradient
 *     of one step of K*B, so the reported gradient norm (before clipping)
 *     equals it step by step (1e-5 relative), for -accum_comm 1 and 0.
 *     Losses alone cannot show a missing 1/K: clipping and AdamW's
 *     normalisation hide a gradient K times too large.
 *   - the fp16 loss scaler, replayed step by step from what it reports:
 *     an overflow skips the step and halves the scale, -scaler_growth_interval
 *     good steps in a row (counted from the last overflow or growth) double
 *     it; every rank agrees.  Overflows come by themselves when the scale
 *     has grown too far, and are also planted in the middle of a growth
 *     interval (a LayerNorm bias of 6e4 for one step: finite in fp16 and in
 *     the loss, its gradients times the scale are not), which is the only
 *     way to see whether an overflow restarts the count.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fsdp_test_model.h"
#include "libfsdp.h"
#include "testutil.h"

#define STEPS 6
#define FP16_STEPS 24

static FsdpTrainer make(const char *options, FsdpOpts *db)
{
  return test_make_trainer(MPI_COMM_WORLD, options, db);
}

static void check_accumulation(void)
{
  const char *base = "-model tiny -n_layer 2 -log_every 0 -lr 1e-2 -warmup 2 -seed 5";
  char opts[512];
  double ref[STEPS];
  FsdpOpts db;
  snprintf(opts, sizeof opts, "%s -steps %d -batch_size 4", base, STEPS);
  FsdpTrainer tr = make(opts, &db);
  for (int s = 0; s < STEPS; s++) {
    TCALL(FsdpTrainerStep(tr, NULL));
    ref[s] = FsdpTrainerLastGradNorm(tr);
  }
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
  CHECK(ref[0] > 1.0, "test setup: the first gradient norm %.4f must exceed the clip of 1", ref[0]);
  for (int comm = 1; comm >= 0; comm--) {
    snprintf(opts, sizeof opts, "%s -steps %d -batch_size 1 -grad_accum 4 -accum_comm %d", base,
             STEPS, comm);
    tr = make(opts, &db);
    for (int s = 0; s < STEPS; s++) {
      TCALL(FsdpTrainerStep(tr, NULL));
      double n = FsdpTrainerLastGradNorm(tr);
      CHECK(fabs(n - ref[s]) <= 1e-5 * ref[s],
            "-grad_accum 4 -accum_comm %d step %d: gradient norm %.8g, with -batch_size 4 %.8g",
            comm, s + 1, n, ref[s]);
    }
    TCALL(FsdpTrainerDestroy(&tr));
    FsdpOptsDestroy(&db);
  }
}

/* This rank's master-shard element idx of parameter `name`, or NULL when
 * another shard holds it. */
static float *shard_element(FsdpRuntime rt, const char *name, int64_t idx)
{
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(rt, u);
    int p = FlatParamFind(fp, name);
    if (p < 0) continue;
    const FlatParamPiece *pc;
    int np;
    TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
    for (int i = 0; i < np; i++)
      if (pc[i].param == p && idx >= pc[i].param_offset && idx < pc[i].param_offset + pc[i].count)
        return FsdpRuntimeUnitShard(rt, u) + pc[i].shard_offset + (idx - pc[i].param_offset);
  }
  return NULL;
}

static void check_scaler(void)
{
  /* 2^10 grows by 2 every 2 good steps until gradients overflow fp16 */
  const double start = 1024.0;
  const int interval = 2;
  char opts[512];
  snprintf(opts, sizeof opts,
           "-model tiny -n_layer 2 -log_every 0 -lr 1e-3 -seed 5 -batch_size 2 -steps %d "
           "-param_dtype fp16 -reduce_dtype fp16 -loss_scale %g -scaler_growth_interval %d",
           FP16_STEPS, start, interval);
  FsdpOpts db;
  FsdpTrainer tr = make(opts, &db);
  double expect = start, scale = 0.0;
  int64_t skipped = 0, prev_skipped = 0;
  int good = 0, grew = 0, halved = 0, planted = 0;
  float *bias = shard_element(FsdpTrainerRuntime(tr), "ln_f.bias", 0);
  CHECK(FsdpTrainerScaler(tr, &scale, &skipped) && scale == start,
        "fp16: scaler off or initial scale %g, expected %g", scale, start);
  for (int s = 0; s < FP16_STEPS; s++) {
    /* plant an overflow one good step into an interval (twice) */
    int plant = good == 1 && planted < 2;
    float saved = bias ? *bias : 0.0f;
    if (plant && bias) *bias = 6e4f;
    TCALL(FsdpTrainerStep(tr, NULL));
    if (plant && bias) *bias = saved; /* the step was skipped: nothing else moved */
    planted += plant;
    FsdpTrainerScaler(tr, &scale, &skipped);
    CHECK(!plant || skipped > prev_skipped, "step %d: the planted overflow was not detected", s + 1);
    if (skipped > prev_skipped) { /* overflow: skip, halve, count again from 0 */
      CHECK(skipped == prev_skipped + 1, "step %d: %lld steps skipped at once", s + 1,
            (long long)(skipped - prev_skipped));
      expect *= 0.5;
      good = 0;
      halved++;
    } else if (++good == interval) {
      expect *= 2.0;
      good = 0;
      grew++;
    }
    prev_skipped = skipped;
    CHECK(scale == expect, "step %d: loss scale %g, expected %g (%lld skipped so far)", s + 1, scale,
          expect, (long long)skipped);
    expect = scale; /* report each departure once */
    double v[2] = {scale, (double)skipped}, lo[2], hi[2];
    MPI_Allreduce(v, lo, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(v, hi, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo[0] == hi[0] && lo[1] == hi[1], "step %d: ranks disagree on the scale or skips", s + 1);
  }
  CHECK(grew >= 2 && halved > planted && planted == 2,
        "test setup: the scale grew %d and was halved %d times (%d planted) in %d steps (want "
        "growth, 2 planted overflows and one of its own)",
        grew, halved, planted, FP16_STEPS);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("fp16 scaler: %d growths, %d overflows (%d planted) in %d steps, scale %g\n", grew,
           halved, planted, FP16_STEPS, scale);
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  check_accumulation();
  check_scaler();
  int rc = test_finish("test_scaler");
  FsdpFinalize();
  return rc;
}
