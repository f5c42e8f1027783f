/* test_gradtail: the optimizer under the gradient tail ([Note: the
 * gradient tail] in runtime/optim.c) changes when the work runs, never
 * its result.  For each configuration -- full sharding, hybrid (F = 2),
 * no sharding (F = 1), gradient accumulation with and without per-micro-
 * step communication, low-precision reduction, bf16 parameters with the
 * fp16 gradient scaler (overflows included), clipping on and off -- the
 * same run with -optim_overlap none and poll (and stream for the three
 * configurations where it differs most: unclipped full and hybrid with
 * accumulation, and the scaler) must give, step by
 * step, bit-identical losses, gradient norms and loss scales, and at the
 * end bit-identical parameter shards, AdamW moments and step counts on
 * every rank.
 *
 * A wrapper around the runtime's grad-ready hook counts what the tail did:
 * every unit handed over once per step, AdamW run early exactly when
 * nothing gates it (-grad_clip 0 and no scaler) and never otherwise, so
 * the comparison is not between two unfused runs.  Clipping configurations
 * check that the norm exceeded the clip (the clip factor was in play).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp_test_model.h"
#include "libfsdp.h"
#include "testutil.h"

#define STEPS 3
#define MAXU 64

typedef struct {
  FsdpOptim opt;
  int calls, updated;
} Counter;

static int counting_hook(void *ctx, int u, int *updated)
{
  Counter *c = ctx;
  int err = FsdpOptimUnitLanded(c->opt, u, updated);
  c->calls++;
  c->updated += *updated;
  return err;
}

typedef struct {
  double loss[STEPS], norm[STEPS], scale[STEPS];
  int nunits;
  float *p[MAXU], *m[MAXU], *v[MAXU];
  int64_t n[MAXU], t;
  int64_t skipped;
} Result;

static void result_free(Result *r)
{
  for (int u = 0; u < r->nunits; u++) {
    free(r->p[u]);
    free(r->m[u]);
    free(r->v[u]);
  }
  memset(r, 0, sizeof *r);
}

static float *copy(const float *x, int64_t n)
{
  float *y = malloc((size_t)n * sizeof *y + 1);
  if (!y) MPI_Abort(MPI_COMM_WORLD, 1);
  memcpy(y, x, (size_t)n * sizeof *y);
  return y;
}

/* Run `options` with -optim_overlap `where`; fill r. */
static void run(const char *options, const char *where, int expect_early, Result *r)
{
  char opts[1024];
  snprintf(opts, sizeof opts,
           "-model tiny -n_layer 2 -log_every 0 -lr 1e-2 -warmup 2 -seed 7 -batch_size 2 -steps %d "
           "%s -optim_overlap %s",
           STEPS, options, where);
  FsdpOpts db;
  FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, opts, &db);
  FsdpRuntime rt = FsdpTrainerRuntime(tr);
  Counter c = {FsdpTrainerOptim(tr), 0, 0};
  int tail = strcmp(where, "none") != 0;
  if (tail)
    TCALL(FsdpRuntimeSetGradReady(rt, counting_hook, &c,
                                  strcmp(where, "poll") == 0 ? FSDP_TAIL_POLL : FSDP_TAIL_STREAM));
  memset(r, 0, sizeof *r);
  r->nunits = FsdpRuntimeNumUnits(rt);
  if (r->nunits > MAXU) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int s = 0; s < STEPS; s++) {
    TCALL(FsdpTrainerStep(tr, &r->loss[s]));
    r->norm[s] = FsdpTrainerLastGradNorm(tr);
    FsdpTrainerScaler(tr, &r->scale[s], &r->skipped);
  }
  TCALL(FsdpRuntimeFinishGradients(rt));
  if (tail) {
    CHECK(c.calls == STEPS * r->nunits, "%s -optim_overlap %s: %d units handed to the tail in %d steps, "
          "expected %d", options, where, c.calls, STEPS, STEPS * r->nunits);
    if (expect_early)
      CHECK(c.updated == c.calls, "%s -optim_overlap %s: AdamW ran early for %d of %d landed units",
            options, where, c.updated, c.calls);
    else
      CHECK(c.updated == 0, "%s -optim_overlap %s: AdamW ran early for %d units although clipping or "
            "the scaler needs every unit first", options, where, c.updated);
  }
  FsdpOptim opt = FsdpTrainerOptim(tr);
  for (int u = 0; u < r->nunits; u++) {
    r->n[u] = FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u));
    r->p[u] = copy(FsdpRuntimeUnitShard(rt, u), r->n[u]);
    r->m[u] = copy(FsdpOptimExpAvg(opt, u), r->n[u]);
    r->v[u] = copy(FsdpOptimExpAvgSq(opt, u), r->n[u]);
  }
  r->t = FsdpOptimStepCount(opt);
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
}

static void compare(const char *options, const char *where, const Result *a, const Result *b)
{
  for (int s = 0; s < STEPS; s++) {
    CHECK(memcmp(&a->loss[s], &b->loss[s], sizeof(double)) == 0,
          "%s: step %d loss %.17g with -optim_overlap %s, %.17g unfused", options, s + 1, b->loss[s],
          where, a->loss[s]);
    CHECK(memcmp(&a->norm[s], &b->norm[s], sizeof(double)) == 0 || (isnan(a->norm[s]) && isnan(b->norm[s])),
          "%s: step %d gradient norm %.17g with -optim_overlap %s, %.17g unfused", options, s + 1,
          b->norm[s], where, a->norm[s]);
    CHECK(a->scale[s] == b->scale[s], "%s: step %d loss scale %g with -optim_overlap %s, %g unfused",
          options, s + 1, b->scale[s], where, a->scale[s]);
  }
  CHECK(a->t == b->t && a->skipped == b->skipped,
        "%s: %lld AdamW steps, %lld skipped with -optim_overlap %s; %lld, %lld unfused", options,
        (long long)b->t, (long long)b->skipped, where, (long long)a->t, (long long)a->skipped);
  for (int u = 0; u < a->nunits; u++) {
    size_t bytes = (size_t)a->n[u] * sizeof(float);
    CHECK(memcmp(a->p[u], b->p[u], bytes) == 0, "%s: unit %d parameter shard differs with -optim_overlap %s",
          options, u, where);
    CHECK(memcmp(a->m[u], b->m[u], bytes) == 0, "%s: unit %d exp_avg differs with -optim_overlap %s",
          options, u, where);
    CHECK(memcmp(a->v[u], b->v[u], bytes) == 0, "%s: unit %d exp_avg_sq differs with -optim_overlap %s",
          options, u, where);
  }
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  /* options; AdamW early (clip off, no scaler); the clip must bite */
  /* stream: also -optim_overlap stream (poll always) */
  static const struct {
    const char *opts;
    int early, clips, overflows, stream;
  } cfg[] = {
      {"-grad_clip 0.5", 0, 1, 0, 0},
      {"-grad_clip 0", 1, 0, 0, 1},
      {"-sharding_factor 2 -grad_accum 2 -accum_comm 1 -grad_clip 0.5", 0, 1, 0, 0},
      {"-sharding_factor 2 -grad_accum 2 -accum_comm 0 -grad_clip 0 -reduce_dtype bf16", 1, 0, 0, 1},
      {"-sharding_factor 1 -grad_clip 0", 1, 0, 0, 0},
      /* bf16 parameters, fp16 reduction: the scaler; the scale doubles
       * after every good step until fp16 overflows and the step is
       * skipped (every unit, every rank) */
      {"-param_dtype bf16 -reduce_dtype fp16 -grad_clip 0 -loss_scale 65536 -scaler_growth_interval 1", 0, 0, 1, 1},
  };
  static const char *const where[] = {"poll", "stream"};
  for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
    Result ref, got;
    run(cfg[i].opts, "none", 0, &ref);
    if (cfg[i].clips)
      CHECK(ref.norm[0] > 0.5, "test setup: %s: step 1 gradient norm %.4f does not exceed the clip",
            cfg[i].opts, ref.norm[0]);
    if (cfg[i].overflows)
      CHECK(ref.skipped > 0 && ref.t > 0,
            "test setup: %s: %lld steps skipped, %lld taken (want both)", cfg[i].opts,
            (long long)ref.skipped, (long long)ref.t);
    for (int w = 0; w < 1 + cfg[i].stream; w++) {
      run(cfg[i].opts, where[w], cfg[i].early, &got);
      compare(cfg[i].opts, where[w], &ref, &got);
      result_free(&got);
    }
    result_free(&ref);
  }
  int rc = test_finish("test_gradtail");
  FsdpFinalize();
  return rc;
}
