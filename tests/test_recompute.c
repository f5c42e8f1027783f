/* test_recompute: activation recomputation (-recompute 1, [Note: activation
 * recomputation] in lib/runtime/fsdp.h).
 *
 *   - bit-identical: at the same W and F, every step's loss and gradient
 *     norm, the gradient shards of the last step and the final parameter
 *     shards of a -recompute 1 run equal the -recompute 0 run's byte for
 *     byte: full sharding RAF and NRAF, hybrid (2 emulated nodes), no
 *     sharding, -wrap 2 over 3 blocks (a working set of 2 blocks, a last
 *     unit of 1), gradient accumulation, bf16 parameters, prefetch both;
 *   - memory: the activation bytes the model allocated (its counter, and
 *     the FSDP_MEM_ACTS tag of the allocator) equal GptActivationBytes,
 *     the plan, and recomputation keeps less;
 *   - a model set up for recomputation on a runtime without -recompute 1
 *     refuses its backward (FSDP_ERR_STATE) instead of reading another
 *     unit's activations;
 *   - -attention flash against naive ([Note: flash attention]): GPT and
 *     Llama (grouped-query) at T = 130 (three query tiles, two key tiles,
 *     remainders) train to the same losses and gradient norms within
 *     1e-5 relative over 3 steps, keep fewer activation bytes, and each
 *     allocates what its plan says (the exact saving: test_plan.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "fsdp_test_model.h"
#include "testutil.h"

#define STEPS 3

typedef struct {
  double loss[STEPS], norm[STEPS];
  float *grads, *params; /* my shards, all units concatenated */
  size_t n;
  uint64_t act_bytes, act_tag_bytes, planned;
} RunResult;

static void run(const char *opts, int recompute, RunResult *r)
{
  char buf[1024];
  snprintf(buf, sizeof buf, "%s -recompute %d", opts, recompute);
  memset(r, 0, sizeof *r);
  size_t before = FsdpMemCurrent(FSDP_MEM_ACTS);
  FsdpOpts db = NULL;
  FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, buf, &db);
  GptModel m = (GptModel)FsdpModelImpl(FsdpTrainerModel(tr)); /* a GPT run: its own object */
  r->act_bytes = GptModelActivationBytes(m);
  r->act_tag_bytes = FsdpMemCurrent(FSDP_MEM_ACTS) - before;
  int B = 0, T = 0;
  TCALL(GptModelBatch(m, &B, &T));
  int wrap = strstr(opts, "-wrap 2") ? 2 : 1;
  FsdpAttention attn = strstr(opts, "-attention naive") ? FSDP_ATTENTION_NAIVE : FSDP_ATTENTION_FLASH;
  r->planned = GptActivationBytes(GptModelConfig(m), wrap, B, T, recompute, attn);
  for (int s = 0; s < STEPS; s++) {
    TCALL(FsdpTrainerStep(tr, &r->loss[s]));
    r->norm[s] = FsdpTrainerLastGradNorm(tr);
  }
  FsdpRuntime rt = FsdpTrainerRuntime(tr);
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++)
    r->n += (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u));
  r->grads = malloc(r->n * sizeof(float));
  r->params = malloc(r->n * sizeof(float));
  size_t off = 0;
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
    size_t k = (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u));
    memcpy(r->grads + off, FsdpRuntimeUnitGradShard(rt, u), k * sizeof(float));
    memcpy(r->params + off, FsdpRuntimeUnitShard(rt, u), k * sizeof(float));
    off += k;
  }
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
}

static void test_identical(void)
{
  int rank, W;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char *common = "-model tiny -n_layer 3 -lr 1e-2 -warmup 1 -log_every 0 -seed 5 -batch_size 2";
  char hybrid[128];
  snprintf(hybrid, sizeof hybrid, "-sharding_factor 2 -ranks_per_node 2");
  const char *cfgs[][2] = {
      {"full RAF", "-reshard_after_forward 1"},
      {"full NRAF", "-reshard_after_forward 0"},
      {"hybrid F=2 RAF", W >= 4 ? hybrid : NULL},
      {"hybrid F=2 NRAF", W >= 4 ? "-sharding_factor 2 -ranks_per_node 2 -reshard_after_forward 0" : NULL},
      {"no sharding", W >= 2 ? "-sharding_factor 1" : NULL},
      {"wrap 2 over 3 blocks", "-wrap 2"},
      {"grad_accum 2, reduce once", "-grad_accum 2 -accum_comm 0"},
      {"bf16 params, prefetch both", "-param_dtype bf16 -prefetch both -limit_all_gathers 0"},
      {"naive attention", "-attention naive"},
  };
  for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
    if (!cfgs[k][1]) continue;
    char opts[512];
    snprintf(opts, sizeof opts, "%s %s", common, cfgs[k][1]);
    RunResult a, b;
    run(opts, 0, &a);
    run(opts, 1, &b);
    const char *name = cfgs[k][0];
    CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0,
          "%s W=%d: losses differ with -recompute 1: %.9g %.9g %.9g vs %.9g %.9g %.9g", name, W,
          a.loss[0], a.loss[1], a.loss[2], b.loss[0], b.loss[1], b.loss[2]);
    CHECK(memcmp(a.norm, b.norm, sizeof a.norm) == 0,
          "%s W=%d: gradient norms differ with -recompute 1 (last %.9g vs %.9g)", name, W,
          a.norm[STEPS - 1], b.norm[STEPS - 1]);
    CHECK(a.n == b.n && memcmp(a.grads, b.grads, a.n * sizeof(float)) == 0,
          "%s W=%d: the last step's gradient shards differ with -recompute 1", name, W);
    CHECK(a.n == b.n && memcmp(a.params, b.params, a.n * sizeof(float)) == 0,
          "%s W=%d: the final parameter shards differ with -recompute 1", name, W);
    CHECK(isfinite(a.loss[STEPS - 1]) && a.loss[STEPS - 1] != a.loss[0],
          "%s W=%d: loss %.6f -> %.6f: no training happened (the comparison would be vacuous)", name, W,
          a.loss[0], a.loss[STEPS - 1]);
    /* memory: measured (the model's counter and the allocator's tag) ==
     * planned, both modes; recomputation keeps less */
    RunResult *rr[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
      CHECK(rr[i]->act_bytes == rr[i]->planned,
            "%s recompute %d: the model allocated %llu activation bytes, planned %llu", name, i,
            (unsigned long long)rr[i]->act_bytes, (unsigned long long)rr[i]->planned);
      CHECK(rr[i]->act_tag_bytes == rr[i]->planned,
            "%s recompute %d: the allocator counted %llu activation bytes, planned %llu", name, i,
            (unsigned long long)rr[i]->act_tag_bytes, (unsigned long long)rr[i]->planned);
    }
    CHECK(b.act_bytes < a.act_bytes, "%s: -recompute 1 keeps %llu activation bytes, not fewer than %llu",
          name, (unsigned long long)b.act_bytes, (unsigned long long)a.act_bytes);
    if (rank == 0)
      printf("%-28s W=%d: losses and shards identical: %s; activations %llu -> %llu bytes\n", name, W,
             a.n == b.n && !memcmp(a.loss, b.loss, sizeof a.loss) && !memcmp(a.grads, b.grads, a.n * 4) &&
                     !memcmp(a.params, b.params, a.n * 4)
                 ? "yes"
                 : "NO",
             (unsigned long long)a.act_bytes, (unsigned long long)b.act_bytes);
    free(a.grads);
    free(a.params);
    free(b.grads);
    free(b.params);
  }
}

/* The plan's arithmetic on one hand-worked case: tiny (L 2, C 32, NH 4,
 * V 64), B 2, T 16, wrap 1: BT = 32, att = 2*4*16*16 = 2048; a block's
 * res3 is BT C = 1024 floats and the rest 15 BT C + 4 BT + 2 att = 19584;
 * shared 16 BT C + 3 BT + BT V + 2 att = 22624 (no probs or dlogits: the
 * fused classifier, [Note: fused classifier] in kernels.h) with
 * -attention naive.  Flash keeps lse = B NH T = 128 floats instead of the
 * two att: rest 15616, shared 18656. */
static void test_plan_numbers(void)
{
  GptConfig c = {2, 32, 4, 64, 16};
  uint64_t flash = 4 * (2 * (1024 + 15616) + 18656ull);
  uint64_t flash_rec = 4 * (2 * 1024 + 1 * 15616 + 18656ull);
  CHECK(GptActivationBytes(&c, 1, 2, 16, 0, FSDP_ATTENTION_FLASH) == flash,
        "tiny flash attention: %llu, expected %llu",
        (unsigned long long)GptActivationBytes(&c, 1, 2, 16, 0, FSDP_ATTENTION_FLASH),
        (unsigned long long)flash);
  CHECK(GptActivationBytes(&c, 1, 2, 16, 1, FSDP_ATTENTION_FLASH) == flash_rec,
        "tiny flash attention with recomputation: %llu, expected %llu",
        (unsigned long long)GptActivationBytes(&c, 1, 2, 16, 1, FSDP_ATTENTION_FLASH),
        (unsigned long long)flash_rec);
#define GptActivationBytes(c, w, B, T, r) GptActivationBytes(c, w, B, T, r, FSDP_ATTENTION_NAIVE)
  uint64_t full = 4 * (2 * (1024 + 19584) + 22624ull);
  uint64_t rec = 4 * (2 * 1024 + 1 * 19584 + 22624ull);
  CHECK(GptActivationBytes(&c, 1, 2, 16, 0) == full, "tiny without recomputation: %llu, expected %llu",
        (unsigned long long)GptActivationBytes(&c, 1, 2, 16, 0), (unsigned long long)full);
  CHECK(GptActivationBytes(&c, 1, 2, 16, 1) == rec, "tiny with recomputation: %llu, expected %llu",
        (unsigned long long)GptActivationBytes(&c, 1, 2, 16, 1), (unsigned long long)rec);
  /* wrap 2 puts both blocks in one unit: the working set is both blocks */
  uint64_t rec2 = 4 * (2 * 1024 + 2 * 19584 + 22624ull);
  CHECK(GptActivationBytes(&c, 2, 2, 16, 1) == rec2, "tiny wrap 2 with recomputation: %llu, expected %llu",
        (unsigned long long)GptActivationBytes(&c, 2, 2, 16, 1), (unsigned long long)rec2);
#undef GptActivationBytes
}

/* A model set up for recomputation whose runtime does not recompute: the
 * second block's backward would read the first block's working set. */
static void test_mismatch(void)
{
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  GptConfig cfg = {2, 32, 4, 64, 16};
  FsdpTopoOptions to = {0};
  FsdpRuntimeOptions ro = {0};
  ro.reshard_after_forward = 1;
  ro.limit_all_gathers = 2;
  ro.prefetch = FSDP_PREFETCH_NONE;
  ro.param_dtype = ro.reduce_dtype = FSDP_DTYPE_FP32;
  ro.grad_accum = 1;
  ro.accum_comm = 1;
  ro.recompute = 0;
  FsdpTopo topo = NULL;
  FsdpColl coll = NULL;
  FsdpRuntime rt = NULL;
  GptModel m = NULL;
  TCALL(FsdpTopoCreate(MPI_COMM_SELF, &to, &topo));
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll));
  TCALL(GptModelCreate(&cfg, 1, 2, 16, FsdpKernelsCpu(), 1, &m));
  TCALL(GptModelSetRecompute(m, 1));
  TCALL(FsdpRuntimeCreate(topo, coll, &ro, &rt));
  TCALL(FsdpRuntimeAddModel(rt, GptModelTable(m)));
  TCALL(FsdpRuntimeSetUp(rt));
  TCALL(FsdpRuntimeInitShards(rt, GptModelTable(m)->init, m));
  TCALL(GptModelSetUp(m));
  CHECK(GptModelSetRecompute(m, 0) == FSDP_ERR_STATE, "GptModelSetRecompute after set-up is accepted");
  int in[32], tg[32];
  for (int i = 0; i < 32; i++) in[i] = tg[i] = i % 64;
  TCALL(GptModelSetBatch(m, in, tg));
  fprintf(stderr, "(an error about a backward without recomputation is expected next)\n");
  int err = FsdpRuntimeForwardBackward(rt, m, 0, 1);
  CHECK(err == FSDP_ERR_STATE, "a backward without recomputation returned %d, not FSDP_ERR_STATE", err);
  FsdpRuntimeDrainStreams(rt);
  TCALL(FsdpRuntimeDestroy(&rt));
  TCALL(GptModelDestroy(&m));
  TCALL(FsdpCollDestroy(&coll));
  TCALL(FsdpTopoDestroy(&topo));
}

static void test_flash_vs_naive(void)
{
  int rank, W;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char *models[][2] = {
      {"gpt2", "-model tiny -n_layer 2 -seq_len 130"},
      {"llama GQA", "-model llama-tiny -seq_len 130 -n_head 4 -n_kv_head 2"},
  };
  for (int k = 0; k < 2; k++) {
    double loss[2][STEPS], norm[2][STEPS];
    uint64_t bytes[2], planned[2];
    for (int a = 0; a < 2; a++) {
      char buf[512];
      snprintf(buf, sizeof buf,
               "%s -batch_size 2 -lr 1e-2 -warmup 1 -log_every 0 -seed 3 -attention %s",
               models[k][1], a ? "naive" : "flash");
      FsdpOpts db = NULL;
      size_t before = FsdpMemCurrent(FSDP_MEM_ACTS);
      FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, buf, &db);
      FsdpModel m = FsdpTrainerModel(tr);
      bytes[a] = FsdpModelActivationBytes(m);
      /* GPT counts exactly the FSDP_MEM_ACTS allocations (Llama adds its
       * token ids, tagged as data) */
      CHECK(k != 0 || FsdpMemCurrent(FSDP_MEM_ACTS) - before == bytes[a],
            "%s: the allocator counted %llu activation bytes, the model %llu", models[k][0],
            (unsigned long long)(FsdpMemCurrent(FSDP_MEM_ACTS) - before),
            (unsigned long long)bytes[a]);
      FsdpModelDesc d;
      TCALL(FsdpModelOptionsFromDb(db, &d));
      planned[a] = FsdpModelDescActivationBytes(&d, 1, 2, 130, 0,
                                                a ? FSDP_ATTENTION_NAIVE : FSDP_ATTENTION_FLASH);
      CHECK(bytes[a] == planned[a], "%s -attention %s: allocated %llu activation bytes, planned %llu",
            models[k][0], a ? "naive" : "flash", (unsigned long long)bytes[a],
            (unsigned long long)planned[a]);
      for (int s = 0; s < STEPS; s++) {
        TCALL(FsdpTrainerStep(tr, &loss[a][s]));
        norm[a][s] = FsdpTrainerLastGradNorm(tr);
      }
      TCALL(FsdpTrainerDestroy(&tr));
      FsdpOptsDestroy(&db);
    }
    for (int s = 0; s < STEPS; s++) {
      CHECK(fabs(loss[0][s] - loss[1][s]) <= 1e-5 * fabs(loss[1][s]) && isfinite(loss[0][s]),
            "%s step %d: loss %.9g with flash attention, %.9g naive", models[k][0], s, loss[0][s],
            loss[1][s]);
      CHECK(fabs(norm[0][s] - norm[1][s]) <= 1e-5 * fabs(norm[1][s]) && norm[1][s] > 0,
            "%s step %d: gradient norm %.9g with flash attention, %.9g naive", models[k][0], s,
            norm[0][s], norm[1][s]);
    }
    CHECK(loss[1][STEPS - 1] != loss[1][0], "%s: no training happened", models[k][0]);
    if (rank == 0)
      printf("%-10s W=%d: flash vs naive losses %.9g / %.9g after %d steps; activations %llu -> %llu "
             "bytes\n",
             models[k][0], W, loss[0][STEPS - 1], loss[1][STEPS - 1], STEPS,
             (unsigned long long)bytes[1], (unsigned long long)bytes[0]);
    CHECK(bytes[0] < bytes[1], "%s: flash keeps %llu activation bytes, not fewer than naive's %llu",
          models[k][0], (unsigned long long)bytes[0], (unsigned long long)bytes[1]);
  }
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  test_plan_numbers();
  test_identical();
  test_mismatch();
  test_flash_vs_naive();
  int rc = test_finish("test_recompute");
  FsdpFinalize();
  return rc;
}
