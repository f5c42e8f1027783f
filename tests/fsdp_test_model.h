/* fsdp_test_model.h: build a GPT + FSDP runtime on a communicator without
 * the trainer, for tests that set weights themselves (oracle, gradient
 * checks).  Header-only so each test stays one program. */
#ifndef FSDP_TEST_MODEL_H
#define FSDP_TEST_MODEL_H

#include <stdio.h>
#include <string.h>

#include "libfsdp.h"
#include "testutil.h"

typedef struct {
  FsdpTopo topo;
  FsdpColl coll;
  FsdpRuntime rt;
  GptModel model;
} TestGpt;

/* Collective on comm.  The FSDP runtime of the tests, for any model's
 * table: sharding factor F (0 = size of comm), RAF or NRAF, limiter 2, no
 * prefetch, fp32, no accumulation; set up. */
static inline void test_runtime_create(MPI_Comm comm, const FsdpModelTable *t, int F, int raf,
                                       FsdpTopo *topo, FsdpColl *coll, FsdpRuntime *rt)
{
  FsdpTopoOptions to = {0};
  to.sharding_factor = F;
  FsdpRuntimeOptions ro = {0};
  ro.reshard_after_forward = raf;
  ro.limit_all_gathers = 2;
  ro.prefetch = FSDP_PREFETCH_NONE;
  ro.param_dtype = ro.reduce_dtype = FSDP_DTYPE_FP32;
  ro.grad_accum = 1;
  ro.accum_comm = 1;
  TCALL(FsdpTopoCreate(comm, &to, topo));
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, coll));
  TCALL(FsdpRuntimeCreate(*topo, *coll, &ro, rt));
  TCALL(FsdpRuntimeAddModel(*rt, t));
  TCALL(FsdpRuntimeSetUp(*rt));
}

/* Collective on comm.  F: sharding factor (0 = size of comm). */
static inline void test_gpt_create(MPI_Comm comm, const GptConfig *cfg, int B, int T, int F,
                                   int raf, TestGpt *g)
{
  memset(g, 0, sizeof *g);
  TCALL(GptModelCreate(cfg, 1, B, T, FsdpKernelsCpu(), 1234, &g->model));
  test_runtime_create(comm, GptModelTable(g->model), F, raf, &g->topo, &g->coll, &g->rt);
  TCALL(GptModelSetUp(g->model));
}

static inline void test_gpt_destroy(TestGpt *g)
{
  TCALL(FsdpRuntimeDestroy(&g->rt));
  TCALL(GptModelDestroy(&g->model));
  TCALL(FsdpCollDestroy(&g->coll));
  TCALL(FsdpTopoDestroy(&g->topo));
}

/* Visit every piece of my shards: fn(ctx, global flat index of the
 * parameter's first element in `full` (registration order over all units),
 * piece, pointer to the piece in shard buffer `which` (0 params, 1 grads)). */
typedef void (*TestPieceFn)(void *ctx, int64_t full_offset, const FlatParamPiece *pc, float *shard);

static inline void test_gpt_pieces(TestGpt *g, int which, TestPieceFn fn, void *ctx)
{
  int64_t base = 0;
  for (int u = 0; u < FsdpRuntimeNumUnits(g->rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(g->rt, u);
    float *buf = which ? FsdpRuntimeUnitGradShard(g->rt, u) : FsdpRuntimeUnitShard(g->rt, u);
    const FlatParamPiece *pc;
    int np;
    TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
    for (int i = 0; i < np; i++)
      fn(ctx, base + FlatParamOffset(fp, pc[i].param) + pc[i].param_offset, &pc[i],
         buf + pc[i].shard_offset);
    base += FlatParamNumel(fp);
  }
}

static inline void test_copy_in(void *ctx, int64_t off, const FlatParamPiece *pc, float *shard)
{
  memcpy(shard, (const float *)ctx + off, (size_t)pc->count * sizeof(float));
}

/* Load full flat parameters (all units concatenated, registration order,
 * unpadded) into my shards. */
static inline void test_gpt_load(TestGpt *g, const float *full)
{
  test_gpt_pieces(g, 0, test_copy_in, (void *)full);
}

/* Run one forward/backward on (inputs, targets); returns the local loss. */
static inline double test_gpt_step(TestGpt *g, const int *inputs, const int *targets)
{
  TCALL(GptModelSetBatch(g->model, inputs, targets));
  TCALL(FsdpRuntimeZeroGradShards(g->rt));
  TCALL(FsdpRuntimeForwardBackward(g->rt, g->model, 0, 1));
  TCALL(FsdpRuntimeFinishGradients(g->rt));
  return GptModelLoss(g->model);
}

/* Collective on comm.  A trainer built from an option string, as
 * fsdp-train builds it from argv (unknown options are an error). */
static inline FsdpTrainer test_make_trainer(MPI_Comm comm, const char *options, FsdpOpts *db_out)
{
  char buf[2048];
  snprintf(buf, sizeof buf, "test %s", options);
  char *argv[128];
  int argc = 0;
  for (char *t = strtok(buf, " "); t && argc < 127; t = strtok(NULL, " ")) argv[argc++] = t;
  FsdpOpts db = NULL;
  TCALL(FsdpOptsCreate(comm, argc, argv, &db));
  FsdpTrainOptions o;
  TCALL(FsdpTrainOptionsFromDb(db, &o));
  TCALL(FsdpOptsCheckUnknown(db));
  FsdpTrainer tr = NULL;
  TCALL(FsdpTrainerCreate(comm, &o, &tr));
  *db_out = db;
  return tr;
}

#endif
