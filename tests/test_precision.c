/* test_precision: low-precision gradient reduction, checked on the
 * gradients themselves, not through losses (AdamW's update hardly changes
 * when every gradient is scaled by one constant, so a loss tolerance lets a
 * lost unscale or a wrongly scaled reduction through).
 *
 * For full sharding (F = W) and hybrid sharding (F = 2 on 2 emulated nodes
 * of 2, W = 4), one step from the same initial model and batch with
 * -reduce_dtype fp32 (the reference), bf16, fp16 with loss scale 1 and fp16
 * with loss scale 1024.  Then on every rank and for every unit:
 *   - the reduced gradient shard divided by the loss scale equals the fp32
 *     one within the reduce type's precision;
 *   - the gradient norm the optimizer reports (unscaled) equals fp32's;
 *   - the optimizer's first moment after one step, (1 - beta1) times the
 *     unscaled, clipped gradient the update used, equals fp32's.
 * Tolerances are norm-wise relative errors: a gradient is rounded to the
 * reduce type once per rank and again by the reduction (a few roundings of
 * 2^-9 for bf16, 2^-12 for fp16), so 1e-2 for bf16 and 2e-3 for fp16; a
 * gradient scaled by a wrong constant c is off by |1 - c|.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "fsdp_test_model.h"
#include "testutil.h"

#define MAXUNITS 16

/* What one step leaves behind on this rank, per unit: the gradient shard
 * (divided by the loss scale) and AdamW's first moment. */
typedef struct {
  int nunits;
  int64_t numel[MAXUNITS];
  float *grad[MAXUNITS], *exp_avg[MAXUNITS];
  double norm, scale;
  int64_t skipped;
} StepResult;

static void one_step(const char *options, StepResult *r)
{
  FsdpOpts db = NULL;
  FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, options, &db);
  TCALL(FsdpTrainerStep(tr, NULL));
  FsdpRuntime rt = FsdpTrainerRuntime(tr);
  memset(r, 0, sizeof *r);
  r->scale = 1.0;
  FsdpTrainerScaler(tr, &r->scale, &r->skipped);
  r->norm = FsdpTrainerLastGradNorm(tr);
  r->nunits = FsdpRuntimeNumUnits(rt);
  if (r->nunits > MAXUNITS) {
    fprintf(stderr, "test_precision: %d units, at most %d\n", r->nunits, MAXUNITS);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int u = 0; u < r->nunits; u++) {
    int64_t n = FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u));
    r->numel[u] = n;
    r->grad[u] = malloc((size_t)n * sizeof(float));
    r->exp_avg[u] = malloc((size_t)n * sizeof(float));
    if (!r->grad[u] || !r->exp_avg[u]) MPI_Abort(MPI_COMM_WORLD, 1);
    TCALL(FsdpDeviceCopyToHost(r->grad[u], FsdpRuntimeUnitGradShard(rt, u), (size_t)n * sizeof(float)));
    TCALL(FsdpDeviceCopyToHost(r->exp_avg[u], FsdpOptimExpAvg(FsdpTrainerOptim(tr), u),
                               (size_t)n * sizeof(float)));
    for (int64_t i = 0; i < n; i++) r->grad[u][i] = (float)(r->grad[u][i] / r->scale);
  }
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
}

static void free_result(StepResult *r)
{
  for (int u = 0; u < r->nunits; u++) {
    free(r->grad[u]);
    free(r->exp_avg[u]);
  }
}

/* ||a - b|| / ||b|| over every rank's shard of a unit (replicas hold equal
 * shards: they count R times in both sums, which leaves the ratio alone). */
static double rel_diff(const float *a, const float *b, int64_t n)
{
  double s[2] = {0.0, 0.0};
  for (int64_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)b[i];
    s[0] += d * d;
    s[1] += (double)b[i] * (double)b[i];
  }
  MPI_Allreduce(MPI_IN_PLACE, s, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s[1] > 0 ? sqrt(s[0] / s[1]) : sqrt(s[0]);
}

static void compare(const char *what, const StepResult *ref, const StepResult *r, double tol)
{
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK(r->skipped == 0, "%s: the step was skipped for an overflow", what);
  CHECK(r->nunits == ref->nunits, "%s: %d units, fp32 had %d", what, r->nunits, ref->nunits);
  double worst_g = 0.0, worst_m = 0.0;
  for (int u = 0; u < r->nunits && u < ref->nunits; u++) {
    CHECK(r->numel[u] == ref->numel[u], "%s unit %d: shard of %lld elements, fp32 %lld", what, u,
          (long long)r->numel[u], (long long)ref->numel[u]);
    double g = rel_diff(r->grad[u], ref->grad[u], r->numel[u]);
    double m = rel_diff(r->exp_avg[u], ref->exp_avg[u], r->numel[u]);
    CHECK(g <= tol, "%s unit %d: reduced gradient / loss scale differs from fp32's by %.3e "
          "(tolerance %.0e)", what, u, g, tol);
    CHECK(m <= tol, "%s unit %d: AdamW first moment after one step differs from fp32's by %.3e "
          "(tolerance %.0e): the update did not use the unscaled gradient", what, u, m, tol);
    worst_g = fmax(worst_g, g);
    worst_m = fmax(worst_m, m);
  }
  double dn = fabs(r->norm - ref->norm) / ref->norm;
  CHECK(dn <= tol, "%s: gradient norm %.7g, fp32 %.7g (rel %.3e, tolerance %.0e)", what, r->norm,
        ref->norm, dn, tol);
  if (rank == 0)
    printf("%s: scale %g, worst rel diff to fp32: gradient %.2e, first moment %.2e, norm %.2e\n",
           what, r->scale, worst_g, worst_m, dn);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int W;
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char *base = "-model tiny -n_layer 2 -steps 1 -batch_size 2 -log_every 0 -lr 1e-2 -seed 5 "
                     "-scaler_growth_interval 1000";
  char topo[2][64];
  int ntopo = 0;
  snprintf(topo[ntopo++], sizeof topo[0], "-sharding_factor %d", W);
  if (W == 4) snprintf(topo[ntopo++], sizeof topo[0], "-sharding_factor 2 -ranks_per_node 2");
  static const struct {
    const char *opts;
    double tol;
  } variants[] = {
      {"-reduce_dtype bf16", 1e-2},
      {"-reduce_dtype fp16 -loss_scale 1", 2e-3},
      {"-reduce_dtype fp16 -loss_scale 1024", 2e-3},
  };
  for (int t = 0; t < ntopo; t++) {
    char opts[512], what[256];
    StepResult ref, r;
    snprintf(opts, sizeof opts, "%s %s", base, topo[t]);
    one_step(opts, &ref);
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
      snprintf(opts, sizeof opts, "%s %s %s", base, topo[t], variants[v].opts);
      snprintf(what, sizeof what, "W=%d %s %s", W, topo[t], variants[v].opts);
      one_step(opts, &r);
      compare(what, &ref, &r, variants[v].tol);
      free_result(&r);
    }
    free_result(&ref);
  }
  int rc = test_finish("test_precision");
  FsdpFinalize();
  return rc;
}
