/* test_midstep: FsdpRuntimeGatherUnit and FsdpOptimGradNorm called in the
 * middle of a step, with reductions certainly in flight, return the values
 * a call after the step returns (they drain the streams first, fsdp.h and
 * optim.h).
 *
 * The model is a synthetic table registered with the runtime, so
 * every value has a closed form: parameters start from a pure function of
 * (name, index); rank r's backward adds (r + 1) * c(name, index) to each
 * gradient (c a multiple of 1/8: every sum below is exact in fp32), and
 * the root unit, which has two stages, adds it twice.  The reduced
 * gradient is therefore mult * (W + 1) / 2 * c.  "In flight" is made
 * certain rather than likely: the test queues a 1 s sleep on the reduce
 * stream ahead of the reductions, checks the sleep is still pending right
 * before a call, and that the call returned only after it (the drain).
 *
 * Stages [root, b1, b2, b3, root]; per step (backward runs stages 4..0):
 *   stage 4 backward: delay the reductions
 *   stage 2 backward: gather every unit  == init rule == reassembled shards
 *   stage 0 backward: grad norm          == closed form over b1..b3 (the
 *                                           root's reduction is not issued)
 *   after the step's backward, before FsdpRuntimeFinishGradients:
 *                     grad norm          == the norm after the step
 *                                        == closed form over every unit
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libfsdp.h"
#include "testutil.h"

#define NUNITS 4
#define NSTAGES 5
#define DELAY_S 1.0

static const char *const kUnitNames[NUNITS] = {"root", "b1", "b2", "b3"};

typedef struct {
  FsdpRuntime rt;
  FsdpOptim opt;
  int rank, W;
  FsdpEvent delay; /* the sleep queued ahead of the reductions */
  int gathers_checked, norms_checked;
} Model;

/* ---- closed forms --------------------------------------------------------- */

static unsigned name_hash(const char *s)
{
  unsigned h = 0;
  while (*s) h = h * 31u + (unsigned char)*s++;
  return h;
}

static float init_value(const char *name, int64_t i)
{
  return 0.01f * (float)((int64_t)((name_hash(name) + 7u * (unsigned)i) % 101u) - 50);
}

static float grad_unit(const char *name, int64_t i) /* c(name, i) */
{
  return 0.125f * (float)((int64_t)((name_hash(name) + 13u * (unsigned)i) % 21u) - 10);
}

static int64_t spec_numel(const FsdpParamSpec *s)
{
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
  return n;
}

/* Squared norm of the reduced gradients of units [first, last]. */
static double expected_norm_sq(Model *m, int first, int last)
{
  double sq = 0.0;
  for (int u = first; u <= last; u++) {
    const FsdpParamSpec *specs;
    int np;
    TCALL(FsdpRuntimeUnitSpecs(m->rt, u, &specs, &np));
    double mult = (u == 0 ? 2.0 : 1.0) * (m->W + 1) / 2.0;
    for (int p = 0; p < np; p++)
      for (int64_t i = 0; i < spec_numel(&specs[p]); i++) {
        double g = mult * grad_unit(specs[p].name, i);
        sq += g * g;
      }
  }
  return sq;
}

/* ---- the model ------------------------------------------------------------- */

static int init_rule(void *model, const FsdpParamSpec *spec, int64_t start, int64_t count,
                     float *out)
{
  (void)model;
  for (int64_t i = 0; i < count; i++) out[i] = init_value(spec->name, start + i);
  return FSDP_SUCCESS;
}

static int sleep_task(void *arg)
{
  double s = *(const double *)arg;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  return FSDP_SUCCESS;
}

/* Queue a sleep on the reduce stream: reductions issued after it wait. */
static void delay_reductions(Model *m)
{
  double s = DELAY_S;
  TCALL(FsdpStreamEnqueue(FsdpRuntimeStream(m->rt), "test-delay", sleep_task, &s, sizeof s,
                          &m->delay));
}

static int delay_done(Model *m)
{
  int done = 0;
  TCALL(FsdpEventQuery(m->delay, &done));
  return done;
}

/* Gather every unit now and compare with the init rule. */
static void check_gathers(Model *m, float **gathered)
{
  for (int u = 0; u < NUNITS; u++) {
    TCALL(FsdpRuntimeGatherUnit(m->rt, u, gathered[u]));
    const FsdpParamSpec *specs;
    int np, bad = 0;
    TCALL(FsdpRuntimeUnitSpecs(m->rt, u, &specs, &np));
    int64_t off = 0;
    for (int p = 0; p < np; p++)
      for (int64_t i = 0; i < spec_numel(&specs[p]); i++, off++)
        if (gathered[u][off] != init_value(specs[p].name, i) && bad++ < 3)
          CHECK(0, "mid-step gather of unit %s: %s[%lld] = %g, expected %g", kUnitNames[u],
                specs[p].name, (long long)i, gathered[u][off], init_value(specs[p].name, i));
  }
  m->gathers_checked++;
}

static void check_norm(Model *m, double got, double want_sq, const char *when)
{
  double want = sqrt(want_sq);
  CHECK(fabs(got - want) <= 1e-5 * want, "grad norm %s: %.9g, expected %.9g", when, got, want);
  m->norms_checked++;
}

static int forward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)model, (void)stage, (void)t;
  return FSDP_SUCCESS;
}

static float **g_gathered; /* [NUNITS], unpadded flat parameters */

static int backward(void *model, int stage, const FsdpUnitTensors *t)
{
  Model *m = model;
  const FsdpParamSpec *specs;
  int np;
  TCALL(FsdpRuntimeUnitSpecs(m->rt, t->unit, &specs, &np));
  for (int p = 0; p < np; p++)
    for (int64_t i = 0; i < spec_numel(&specs[p]); i++)
      t->grad[p][i] += (float)(m->rank + 1) * grad_unit(specs[p].name, i);

  if (stage == NSTAGES - 1) {
    delay_reductions(m);
  } else if (stage == 2) { /* b3's reduce-scatter waits behind the delay */
    CHECK(!delay_done(m), "stage 2: the delay ended before the mid-step gather (machine too busy?)");
    check_gathers(m, g_gathered);
    CHECK(delay_done(m), "FsdpRuntimeGatherUnit returned with a reduction still queued: no drain");
    delay_reductions(m);
  } else if (stage == 0) { /* b1's reduce-scatter waits; the root's is not issued */
    CHECK(!delay_done(m), "stage 0: the delay ended before the mid-step norm (machine too busy?)");
    double norm = 0.0;
    TCALL(FsdpOptimGradNorm(m->opt, &norm));
    CHECK(delay_done(m), "FsdpOptimGradNorm returned with a reduction still queued: no drain");
    check_norm(m, norm, expected_norm_sq(m, 1, NUNITS - 1), "at the root's last backward stage");
    delay_reductions(m);
  }
  return FSDP_SUCCESS;
}

static int decay_none(const char *name, int decay_embeddings)
{
  (void)name, (void)decay_embeddings;
  return 0;
}

/* One configuration: F-way sharding of the world, one step. */
static void run(int F, int W, int rank)
{
  FsdpTopoOptions to = {0};
  to.sharding_factor = F;
  FsdpRuntimeOptions ro = {0};
  ro.reshard_after_forward = 1;
  ro.limit_all_gathers = 2;
  ro.prefetch = FSDP_PREFETCH_BOTH;
  ro.param_dtype = ro.reduce_dtype = FSDP_DTYPE_FP32;
  ro.grad_accum = 1;
  ro.accum_comm = 1;
  FsdpTopo topo = NULL;
  FsdpColl coll = NULL;
  Model m = {0};
  m.rank = rank;
  m.W = W;
  TCALL(FsdpTopoCreate(MPI_COMM_WORLD, &to, &topo));
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll));
  TCALL(FsdpRuntimeCreate(topo, coll, &ro, &m.rt));
  /* sizes that no sharding factor divides: shards cut through parameters */
  FsdpParamSpec specs[NUNITS][2];
  FsdpModelUnit units[NUNITS];
  memset(specs, 0, sizeof specs);
  memset(units, 0, sizeof units);
  for (int u = 0; u < NUNITS; u++) {
    snprintf(specs[u][0].name, sizeof specs[u][0].name, "%s.w", kUnitNames[u]);
    specs[u][0].ndim = 2;
    specs[u][0].shape[0] = 13 + u;
    specs[u][0].shape[1] = 9;
    snprintf(specs[u][1].name, sizeof specs[u][1].name, "%s.b", kUnitNames[u]);
    specs[u][1].ndim = 1;
    specs[u][1].shape[0] = 41 + 2 * u;
    snprintf(units[u].name, sizeof units[u].name, "%s", kUnitNames[u]);
    units[u].is_root = u == 0;
    units[u].nparams = 2;
    units[u].params = specs[u];
  }
  const int stage_units[NSTAGES] = {0, 1, 2, 3, 0};
  FsdpModelStage stages[NSTAGES];
  for (int s = 0; s < NSTAGES; s++) stages[s] = (FsdpModelStage){stage_units[s], forward, backward, NULL};
  const FsdpModelTable table = {.ctx = &m, .nunits = NUNITS, .units = units,
                                .nstages = NSTAGES, .stages = stages, .init = init_rule,
                                .decays = decay_none, .kernels = FsdpKernelsCpu()};
  TCALL(FsdpRuntimeAddModel(m.rt, &table));
  CHECK(FsdpRuntimeNumUnits(m.rt) == NUNITS, "%d units registered, expected %d",
        FsdpRuntimeNumUnits(m.rt), NUNITS);
  for (int u = 0; u < NUNITS; u++)
    CHECK(strcmp(FsdpRuntimeUnitName(m.rt, u), kUnitNames[u]) == 0, "unit %d registered as %s",
          u, FsdpRuntimeUnitName(m.rt, u));
  TCALL(FsdpRuntimeSetUp(m.rt));
  TCALL(FsdpRuntimeInitShards(m.rt, table.init, table.ctx));
  FsdpOptimOptions oo = {0};
  oo.lr = 1e-3;
  oo.beta1 = 0.9;
  oo.beta2 = 0.95;
  oo.eps = 1e-8;
  oo.total_steps = 1;
  TCALL(FsdpOptimCreate(m.rt, table.kernels, &oo, table.decays, &m.opt));
  g_gathered = calloc(NUNITS, sizeof *g_gathered);
  for (int u = 0; u < NUNITS; u++)
    g_gathered[u] = calloc((size_t)FlatParamNumel(FsdpRuntimeUnitFlatParam(m.rt, u)), sizeof(float));

  FsdpRuntimeSetStep(m.rt, 0);
  TCALL(FsdpRuntimeZeroGradShards(m.rt));
  TCALL(FsdpRuntimeForwardBackward(m.rt, &m, 0, 1));
  /* b1's and the root's reductions wait behind the delay queued at stage 0 */
  CHECK(!delay_done(&m), "after the backward: the delay already ended (machine too busy?)");
  double mid = 0.0, after = 0.0;
  TCALL(FsdpOptimGradNorm(m.opt, &mid));
  CHECK(delay_done(&m), "FsdpOptimGradNorm returned with a reduction still queued: no drain");
  TCALL(FsdpRuntimeFinishGradients(m.rt));
  TCALL(FsdpOptimGradNorm(m.opt, &after));
  CHECK(mid == after, "F=%d: grad norm with reductions in flight %.9g, after the step %.9g", F, mid,
        after);
  check_norm(&m, after, expected_norm_sq(&m, 0, NUNITS - 1), "after the step");

  /* the gathers above against the shards reassembled directly */
  const FsdpGroup *shard = FsdpTopoShard(topo);
  for (int u = 0; u < NUNITS; u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(m.rt, u);
    int64_t sn = FlatParamShardNumel(fp), numel = FlatParamNumel(fp);
    float *full = calloc((size_t)(sn * shard->size), sizeof(float));
    MPI_Allgather(FsdpRuntimeUnitShard(m.rt, u), (int)sn, MPI_FLOAT, full, (int)sn, MPI_FLOAT,
                  shard->comm);
    CHECK(memcmp(full, g_gathered[u], (size_t)numel * sizeof(float)) == 0,
          "F=%d: mid-step gather of unit %s differs from its reassembled shards", F, kUnitNames[u]);
    free(full);
  }
  CHECK(m.gathers_checked == 1 && m.norms_checked == 2,
        "the mid-step calls did not all run (%d gathers, %d norms)", m.gathers_checked,
        m.norms_checked);
  if (rank == 0)
    printf("F=%d: mid-step gathers match the init rule and the shards; norm %.9g with reductions "
           "in flight = %.9g after\n",
           F, mid, after);

  for (int u = 0; u < NUNITS; u++) free(g_gathered[u]);
  free(g_gathered);
  g_gathered = NULL;
  TCALL(FsdpOptimDestroy(&m.opt));
  TCALL(FsdpRuntimeDestroy(&m.rt));
  TCALL(FsdpCollDestroy(&coll));
  TCALL(FsdpTopoDestroy(&topo));
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int rank, W;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  run(W, W, rank);                /* full sharding */
  if (W % 2 == 0 && W > 2) run(2, W, rank); /* hybrid: replicas all-reduce too */
  int status = test_finish("test_midstep");
  TCALL(FsdpFinalize());
  return status;
}
