/* test_train: training with FSDP against one rank, and the formulas of
 * [Note: gather memory] (fsdp.h) and [Note: byte accounting] (coll.h),
 * docs/design.md §4-5, against measured memory and communication.
 *
 *   test_train            sharded init, trajectory equivalence, gradient
 *                         norms, formulas (needs 4 ranks; 2 also works)
 *   test_train learning   the demo's defaults learn: final loss < half the
 *                         first
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "fsdp_test_model.h"
#include "testutil.h"

#define STEPS 20


static int64_t padded(int64_t numel, int F)
{
  int64_t q = (int64_t)F * FSDP_FLAT_ALIGN;
  return (numel + q - 1) / q * q;
}

typedef struct {
  int F, G, raf, n_layer;
  int slots;       /* gather ring slots, written by hand from the rule at each config */
} Config;

/* Independent arithmetic of those formulas for the tiny model family. */
static void check_formulas(FsdpTrainer tr, const Config *c, int W, int steps)
{
  const GptConfig *g = GptModelConfig((GptModel)FsdpModelImpl(FsdpTrainerModel(tr)));
  int64_t C = g->n_embd, V = g->vocab_size, T = g->seq_len;
  int F = c->F, R = W / F, nb = c->n_layer;
  int64_t Proot = padded(V * C + T * C + 2 * C, F), Pb = padded(12 * C * C + 13 * C, F);
  /* members of my sharding / replica group on my node vs elsewhere */
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int G = c->G ? c->G : W; /* one real node here */
  int node = rank / G, spos = rank % F, sgrp = rank / F;
  int s_in = 0, s_out = 0, r_in = 0, r_out = 0;
  for (int q = 0; q < W; q++) {
    if (q == rank) continue;
    if (q / F == sgrp) (q / G == node ? s_in++ : s_out++);
    if (q % F == spos) (q / G == node ? r_in++ : r_out++);
  }
  uint64_t ag_calls = 0, rs_calls = 0, ar_calls = 0, ag_b = 0, rs_b = 0, ar_b = 0, in_b = 0, out_b = 0;
  int64_t units[64];
  int nu = 0;
  units[nu++] = Proot;
  for (int i = 0; i < nb; i++) units[nu++] = Pb;
  for (int u = 0; u < nu; u++) {
    int gathers = F == 1 ? 0 : (u == 0 ? 1 : (c->raf ? 2 : 1));
    uint64_t PK = (uint64_t)units[u] * 4;
    ag_calls += gathers;
    ag_b += gathers * ((uint64_t)(F - 1) * PK / F);
    in_b += gathers * ((uint64_t)s_in * PK / F);
    out_b += gathers * ((uint64_t)s_out * PK / F);
    if (F > 1) {
      rs_calls++;
      rs_b += (uint64_t)(F - 1) * PK / F;
      in_b += (uint64_t)s_in * PK / F;
      out_b += (uint64_t)s_out * PK / F;
    }
    if (R > 1) {
      uint64_t SK = PK / F;
      ar_calls++;
      ar_b += 2 * (uint64_t)(R - 1) * SK / R;
      in_b += 2 * (uint64_t)r_in * SK / R;
      out_b += 2 * (uint64_t)r_out * SK / R;
    }
  }
  FsdpCommCounters ct;
  FsdpTrainerCommTotals(tr, &ct);
  uint64_t s = (uint64_t)steps;
  const char *tag = "formula";
  CHECK(ct.calls[FSDP_COLL_ALL_GATHER] == ag_calls * s, "%s F=%d G=%d raf=%d: all-gather calls %llu, expected %llu", tag, F, c->G, c->raf, (unsigned long long)ct.calls[0], (unsigned long long)(ag_calls * s));
  CHECK(ct.calls[FSDP_COLL_REDUCE_SCATTER] == rs_calls * s, "%s F=%d: reduce-scatter calls %llu, expected %llu", tag, F, (unsigned long long)ct.calls[1], (unsigned long long)(rs_calls * s));
  CHECK(ct.calls[FSDP_COLL_ALL_REDUCE] == ar_calls * s, "%s F=%d: all-reduce calls %llu, expected %llu", tag, F, (unsigned long long)ct.calls[2], (unsigned long long)(ar_calls * s));
  CHECK(ct.bytes[FSDP_COLL_ALL_GATHER] == ag_b * s, "%s F=%d raf=%d: all-gather bytes %llu, expected %llu", tag, F, c->raf, (unsigned long long)ct.bytes[0], (unsigned long long)(ag_b * s));
  CHECK(ct.bytes[FSDP_COLL_REDUCE_SCATTER] == rs_b * s, "%s F=%d: reduce-scatter bytes %llu, expected %llu", tag, F, (unsigned long long)ct.bytes[1], (unsigned long long)(rs_b * s));
  CHECK(ct.bytes[FSDP_COLL_ALL_REDUCE] == ar_b * s, "%s F=%d: all-reduce bytes %llu, expected %llu", tag, F, (unsigned long long)ct.bytes[2], (unsigned long long)(ar_b * s));
  CHECK(ct.intra_bytes == in_b * s && ct.inter_bytes == out_b * s, "%s F=%d G=%d: intra/inter %llu/%llu, expected %llu/%llu", tag, F, c->G, (unsigned long long)ct.intra_bytes, (unsigned long long)ct.inter_bytes, (unsigned long long)(in_b * s), (unsigned long long)(out_b * s));
  CHECK(ct.scalar_calls == 2 * s, "scalar calls %llu, expected %llu (grad norm + loss per step)", (unsigned long long)ct.scalar_calls, (unsigned long long)(2 * s));

  FsdpRuntimeMemory m;
  FsdpRuntimeGetMemory(FsdpTrainerRuntime(tr), &m);
  uint64_t shard = 4 * (uint64_t)(Proot + nb * Pb) / F;
  CHECK(m.param_shard_bytes == shard && m.grad_shard_bytes == shard, "%s F=%d: shard bytes %llu, expected %llu", tag, F, (unsigned long long)m.param_shard_bytes, (unsigned long long)shard);
  CHECK(FsdpOptimStateBytes(FsdpTrainerOptim(tr)) == 2 * shard, "optimizer state %llu, expected %llu", (unsigned long long)FsdpOptimStateBytes(FsdpTrainerOptim(tr)), (unsigned long long)(2 * shard));
  /* [Note: gather memory]: the root plus the blocks live at once (all blocks are the
   * same size here, so "the largest P_i" are all Pb); the ring is used up
   * to its last slot, so the peak equals it */
  int slots = F == 1 ? 0 : c->slots;
  uint64_t gather = F == 1 ? 0 : 4 * (uint64_t)(Proot + slots * Pb);
  uint64_t peak_p = gather;
  uint64_t peak_g = F == 1 ? 0 : 4 * (uint64_t)(Proot + Pb);
  uint64_t pp, pg;
  FsdpRuntimePeakUnsharded(FsdpTrainerRuntime(tr), &pp, &pg);
  CHECK(m.gather_slots == slots, "%s F=%d raf=%d: %d gather slots, expected %d", tag, F, c->raf, m.gather_slots, slots);
  CHECK(m.gather_buffer_bytes == gather, "%s F=%d raf=%d: gather buffers %llu, expected %llu", tag, F, c->raf, (unsigned long long)m.gather_buffer_bytes, (unsigned long long)gather);
  CHECK(pp == peak_p, "%s F=%d raf=%d: peak unsharded params %llu, expected %llu", tag, F, c->raf, (unsigned long long)pp, (unsigned long long)peak_p);
  CHECK(pg == peak_g, "%s F=%d raf=%d: peak unsharded grads %llu, expected %llu", tag, F, c->raf, (unsigned long long)pg, (unsigned long long)peak_g);
}

/* FsdpGatherRingPlan, the one sizing of the gather ring (runtime and
 * fsdp-plan), against values written by hand from [Note: gather
 * memory] / [Note: prefetch and the limiter]: the root is live
 * throughout; with RAF the unit computing plus the L gathers ahead of it
 * are live (L = 0: no limit), none ahead without prefetch, and with NRAF
 * every non-root unit; never more slots than non-root units.  Slots are
 * all the size of the largest non-root unit, since any unit may land in
 * any slot.  In flight: at a phase's start, min(L, the units the phase
 * gathers ahead of its first stage); 1 (the on-demand gather) without
 * prefetch. */
static void test_gather_ring(void)
{
  enum { N = 7 };
  static const struct {
    const char *what;
    int F, raf, L;
    FsdpPrefetch pf;
    FsdpDtype dt;
    int n;
    int64_t P[N];
    int root[N];
    int nst;
    int stage[N + 1];
    int slots;
    int64_t slot_numel, root_numel;
    int in_flight;
    uint64_t bytes;
  } cases[] = {
    {"RAF, backward, L=2", 4, 1, 2, FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_FP32, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 3, 40, 100, 2, 4 * (100 + 3 * 40)},
    {"RAF, no prefetch", 4, 1, 2, FSDP_PREFETCH_NONE, FSDP_DTYPE_FP32, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 1, 40, 100, 1, 4 * (100 + 40)},
    {"RAF, backward, L=4: every block", 4, 1, 4, FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_FP32, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 4, 40, 100, 4, 4 * (100 + 4 * 40)},
    {"RAF, both, L=1", 4, 1, 1, FSDP_PREFETCH_BOTH, FSDP_DTYPE_FP32, 7,
     {100, 40, 40, 40, 40, 40, 40}, {1}, 8, {0, 1, 2, 3, 4, 5, 6, 0}, 2, 40, 100, 1,
     4 * (100 + 2 * 40)},
    {"RAF, both, L=2", 4, 1, 2, FSDP_PREFETCH_BOTH, FSDP_DTYPE_FP32, 7,
     {100, 40, 40, 40, 40, 40, 40}, {1}, 8, {0, 1, 2, 3, 4, 5, 6, 0}, 3, 40, 100, 2,
     4 * (100 + 3 * 40)},
    {"RAF, both, L=3", 4, 1, 3, FSDP_PREFETCH_BOTH, FSDP_DTYPE_FP32, 7,
     {100, 40, 40, 40, 40, 40, 40}, {1}, 8, {0, 1, 2, 3, 4, 5, 6, 0}, 4, 40, 100, 3,
     4 * (100 + 4 * 40)},
    /* NRAF: backward gathers nothing (every unit kept), forward on demand */
    {"NRAF, backward", 4, 0, 2, FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_FP32, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 4, 40, 100, 1, 4 * (100 + 4 * 40)},
    {"NRAF, both, L=3: forward prefetch only", 4, 0, 3, FSDP_PREFETCH_BOTH, FSDP_DTYPE_FP32, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 4, 40, 100, 3, 4 * (100 + 4 * 40)},
    {"NRAF, no prefetch", 2, 0, 1, FSDP_PREFETCH_NONE, FSDP_DTYPE_FP32, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 4, 40, 100, 1, 4 * (100 + 4 * 40)},
    {"RAF, both, no limit, bf16", 8, 1, 0, FSDP_PREFETCH_BOTH, FSDP_DTYPE_BF16, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 4, 40, 100, 4, 2 * (100 + 4 * 40)},
    /* the root only last: backward starts with it, all 3 blocks ahead */
    {"RAF, backward, L=1, fp16, root last, a smaller last unit", 2, 1, 1,
     FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_FP16, 4, {48, 48, 16, 64}, {0, 0, 0, 1}, 4, {0, 1, 2, 3},
     2, 48, 64, 1, 2 * (64 + 48 + 48)},
    /* two units live of sizes 48 and 16 need 64, but either may land in
     * either slot: the ring holds 2 x 48 */
    {"RAF, backward, units of unequal size", 2, 1, 2, FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_FP32, 3,
     {64, 48, 16}, {1}, 4, {0, 1, 2, 0}, 2, 48, 64, 2, 4 * (64 + 48 + 48)},
    {"RAF, backward, one non-root unit", 4, 1, 2, FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_FP32, 2,
     {100, 40}, {1}, 3, {0, 1, 0}, 1, 40, 100, 1, 4 * (100 + 40)},
    /* no root: backward's first unit is gathered on demand, 2 remain */
    {"RAF, backward, no root", 4, 1, 3, FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_FP32, 3,
     {16, 16, 16}, {0}, 3, {0, 1, 2}, 3, 16, 0, 2, 4 * (3 * 16)},
    {"NRAF, only a root", 4, 0, 2, FSDP_PREFETCH_BACKWARD, FSDP_DTYPE_BF16, 1, {100}, {1}, 1, {0},
     0, 0, 100, 1, 2 * 100},
    {"F=1: no ring, nothing gathered", 1, 1, 2, FSDP_PREFETCH_BOTH, FSDP_DTYPE_FP32, 5,
     {100, 40, 40, 40, 40}, {1}, 6, {0, 1, 2, 3, 4, 0}, 0, 40, 100, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FsdpRuntimeOptions o = {0};
    o.reshard_after_forward = cases[i].raf;
    o.limit_all_gathers = cases[i].L;
    o.prefetch = cases[i].pf;
    o.param_dtype = cases[i].dt;
    o.reduce_dtype = FSDP_DTYPE_FP32;
    o.grad_accum = 1;
    o.accum_comm = 1;
    FsdpGatherRing r;
    FsdpGatherRingPlan(&o, cases[i].F, cases[i].P, cases[i].root, cases[i].n, cases[i].stage,
                       cases[i].nst, &r);
    CHECK(r.slots == cases[i].slots && r.slot_numel == cases[i].slot_numel &&
              r.root_numel == cases[i].root_numel && r.bytes == cases[i].bytes &&
              r.max_in_flight == cases[i].in_flight,
          "gather ring, %s: slots %d x %lld + root %lld = %llu bytes, %d in flight; expected "
          "%d x %lld + %lld = %llu bytes, %d in flight",
          cases[i].what, r.slots, (long long)r.slot_numel, (long long)r.root_numel,
          (unsigned long long)r.bytes, r.max_in_flight, cases[i].slots,
          (long long)cases[i].slot_numel, (long long)cases[i].root_numel,
          (unsigned long long)cases[i].bytes, cases[i].in_flight);
  }
}

static int test_equivalence(void)
{
  int rank, W;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char *common = "-model tiny -steps 20 -lr 1e-2 -warmup 2 -log_every 0 -seed 7";
  char opts[512];

  /* one-rank reference with the same global batch (rank 0 only) */
  double ref_loss[STEPS], ref_norm[STEPS];
  FsdpOpts db = NULL;
  if (rank == 0) {
    snprintf(opts, sizeof opts, "%s -batch_size %d", common, 2 * W);
    FsdpTrainer tr = test_make_trainer(MPI_COMM_SELF, opts, &db);
    for (int s = 0; s < STEPS; s++) {
      TCALL(FsdpTrainerStep(tr, &ref_loss[s]));
      ref_norm[s] = FsdpTrainerLastGradNorm(tr);
    }
    TCALL(FsdpTrainerDestroy(&tr));
    FsdpOptsDestroy(&db);
    printf("reference W=1 B=%d: loss %.6f -> %.6f\n", 2 * W, ref_loss[0], ref_loss[STEPS - 1]);
  }
  MPI_Bcast(ref_loss, STEPS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Bcast(ref_norm, STEPS, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  /* sharded init: every unit gathered at W ranks equals the one-rank model bitwise */
  {
    snprintf(opts, sizeof opts, "%s -batch_size 2", common);
    FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, opts, &db);
    FsdpTrainer ref = NULL;
    FsdpOpts dbr = NULL;
    if (rank == 0) {
      snprintf(opts, sizeof opts, "%s -batch_size 2", common);
      ref = test_make_trainer(MPI_COMM_SELF, opts, &dbr);
    }
    FsdpRuntime rt = FsdpTrainerRuntime(tr);
    for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
      int64_t n = FlatParamNumel(FsdpRuntimeUnitFlatParam(rt, u));
      float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
      TCALL(FsdpRuntimeGatherUnit(rt, u, a));
      if (rank == 0) {
        TCALL(FsdpRuntimeGatherUnit(FsdpTrainerRuntime(ref), u, b));
        CHECK(memcmp(a, b, (size_t)n * sizeof *a) == 0, "unit %s: W=%d init differs from W=1", FsdpRuntimeUnitName(rt, u), W);
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += fabs(a[i]);
        CHECK(sum > 0, "unit %s is all zero", FsdpRuntimeUnitName(rt, u));
      }
      free(a);
      free(b);
    }
    if (rank == 0) { TCALL(FsdpTrainerDestroy(&ref)); FsdpOptsDestroy(&dbr); }
    TCALL(FsdpTrainerDestroy(&tr));
    FsdpOptsDestroy(&db);
  }

  /* trajectories: full, hybrid (2 ranks per emulated node), replicated; RAF and NRAF */
  Config cfgs[8];
  int nc = 0;
  int Fs[3] = {W, W >= 4 ? 2 : 1, 1};
  int Gs[3] = {0, W >= 4 ? 2 : 0, 0};
  for (int i = 0; i < 3; i++)
    /* 2 blocks, prefetch backward, L = 2: RAF holds the block computing and
     * the one prefetched (2); NRAF holds both blocks (2) */
    for (int raf = 1; raf >= 0; raf--) cfgs[nc++] = (Config){Fs[i], Gs[i], raf, 2, 2};
  if (W >= 4) cfgs[nc++] = (Config){W, 2, 1, 2, 2}; /* full sharding across two emulated nodes */
  for (int k = 0; k < nc; k++) {
    Config *c = &cfgs[k];
    snprintf(opts, sizeof opts, "%s -batch_size 2 -sharding_factor %d -ranks_per_node %d -reshard_after_forward %d",
             common, c->F, c->G, c->raf);
    FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, opts, &db);
    double worst = 0.0, worst_norm = 0.0;
    for (int s = 0; s < STEPS; s++) {
      double loss;
      TCALL(FsdpTrainerStep(tr, &loss));
      double rel = fabs(loss - ref_loss[s]) / fabs(ref_loss[s]);
      double reln = fabs(FsdpTrainerLastGradNorm(tr) - ref_norm[s]) / ref_norm[s];
      worst = fmax(worst, rel);
      worst_norm = fmax(worst_norm, reln);
      CHECK(rel <= 1e-4, "F=%d G=%d raf=%d step %d: loss %.7f vs one rank %.7f (rel %.2e)", c->F, c->G, c->raf, s + 1, loss, ref_loss[s], rel);
      CHECK(reln <= 1e-4, "F=%d G=%d raf=%d step %d: grad norm %.7f vs one rank %.7f", c->F, c->G, c->raf, s + 1, FsdpTrainerLastGradNorm(tr), ref_norm[s]);
    }
    check_formulas(tr, c, W, STEPS);
    if (rank == 0)
      printf("W=%d F=%d G=%d raf=%d: worst loss rel diff %.2e, grad norm %.2e\n", W, c->F, c->G, c->raf, worst, worst_norm);
    TCALL(FsdpTrainerDestroy(&tr));
    FsdpOptsDestroy(&db);
  }
  /* prefetch changes when gathers are issued, never what is computed or moved */
  const char *pf[3] = {"none", "backward", "both"};
  for (int k = 0; k < 3; k++) {
    /* none: only the block computing (1); backward L=2, both L=3: it and
     * the one prefetched (2) */
    Config c = {W, 0, 1, 2, k == 0 ? 1 : 2};
    snprintf(opts, sizeof opts, "%s -batch_size 2 -prefetch %s -limit_all_gathers %d", common, pf[k], k + 1);
    FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, opts, &db);
    for (int s = 0; s < STEPS; s++) {
      double loss;
      TCALL(FsdpTrainerStep(tr, &loss));
      CHECK(fabs(loss - ref_loss[s]) <= 1e-4 * fabs(ref_loss[s]), "-prefetch %s step %d: loss %.7f vs %.7f", pf[k], s + 1, loss, ref_loss[s]);
    }
    check_formulas(tr, &c, W, STEPS);
    TCALL(FsdpTrainerDestroy(&tr));
    FsdpOptsDestroy(&db);
  }
  /* more blocks than gather slots: the ring size differs between RAF and NRAF */
  for (int raf = 0; raf <= 1; raf++) {
    /* 5 blocks, prefetch backward, L = 2: NRAF keeps all 5 through forward;
     * RAF holds the block computing and the two prefetched ahead of it (3) */
    Config c = {W, 0, raf, 5, raf ? 3 : 5};
    snprintf(opts, sizeof opts, "-model tiny -n_layer 5 -steps 2 -log_every 0 -batch_size 1 -reshard_after_forward %d", raf);
    FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, opts, &db);
    for (int s = 0; s < 2; s++) TCALL(FsdpTrainerStep(tr, NULL));
    check_formulas(tr, &c, W, 2);
    TCALL(FsdpTrainerDestroy(&tr));
    FsdpOptsDestroy(&db);
  }
  return 0;
}

static int test_learning(void)
{
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  FsdpOpts db = NULL;
  FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, "-log_every 0", &db); /* the demo's defaults */
  TCALL(FsdpTrainerRun(tr, stdout));
  int64_t n = FsdpTrainerStepsDone(tr);
  const double *l = FsdpTrainerLosses(tr);
  CHECK(l[n - 1] < 0.5 * l[0], "after %lld steps loss %.4f is not below half of the first %.4f", (long long)n, l[n - 1], l[0]);
  if (rank == 0) printf("learning: %lld steps, loss %.4f -> %.4f\n", (long long)n, l[0], l[n - 1]);
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
  return 0;
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int learning = argc > 1 && strcmp(argv[1], "learning") == 0;
  if (learning) test_learning();
  else {
    test_gather_ring();
    test_equivalence();
  }
  int rc = test_finish(learning ? "test_train learning" : "test_train");
  FsdpFinalize();
  return rc;
}
