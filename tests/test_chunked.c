/* test_chunked: training through chunked collectives ([Note: chunked
 * collectives] in lib/comm/coll_mpi.c) gives the losses of unchunked collectives.
 *
 * Each configuration trains the tiny model twice on the world: once with
 * the default MPI count limit (INT_MAX: no chunks at this size) and once
 * with FSDP_COLL_MAX_COUNT=61, which splits every all-gather,
 * reduce-scatter and all-reduce of a unit (thousands of elements per
 * rank) into chunks.  The limit is read when the trainer creates its
 * FsdpColl, so setting the variable between the two runs is enough.
 * Configurations: full sharding (F = W) and hybrid (F = 2 within 2-rank
 * emulated nodes, all-reduce across them), fp32 and bf16 parameters and
 * reductions.  A chunk placed at the wrong offset or reduced with the wrong
 * ranks changes the gradient and the loss at once.  Summation order is the
 * only freedom: MPI picks its reduction algorithm, hence the order of the
 * n - 1 adds, by message size.  In fp32 that moves the loss by ulps (seen
 * 1e-8 relative at W = 4; bound 1e-6); in bf16 each add rounds to 8
 * significant bits, so another order moves the gradient by ~2^-8 and six
 * steps later the loss by up to 2e-4 relative at F = 4 (bound 1e-3).  With
 * 2 ranks per reduction (W = 2, hybrid F = 2) there is one add and no
 * order: the losses are identical there.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "fsdp_test_model.h"
#include "testutil.h"

#define STEPS 6
#define CHUNK "61" /* prime: chunk boundaries fall anywhere */

static void run(const char *opts, double *loss)
{
  FsdpOpts db = NULL;
  FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, opts, &db);
  for (int s = 0; s < STEPS; s++) TCALL(FsdpTrainerStep(tr, &loss[s]));
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int rank, W;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char *common = "-model tiny -lr 1e-2 -warmup 2 -log_every 0 -seed 7 -batch_size 2";
  struct {
    int F, G;
    const char *dtype;
  } cfgs[] = {{W, 0, "fp32"}, {W, 0, "bf16"}, {2, 2, "fp32"}, {2, 2, "bf16"}};
  int ncfg = W >= 4 ? 4 : 2; /* hybrid needs two emulated nodes of 2 ranks */
  for (int k = 0; k < ncfg; k++) {
    char opts[512];
    snprintf(opts, sizeof opts,
             "%s -steps %d -sharding_factor %d -ranks_per_node %d -param_dtype %s -reduce_dtype %s",
             common, STEPS, cfgs[k].F, cfgs[k].G, cfgs[k].dtype, cfgs[k].dtype);
    double whole[STEPS], chunked[STEPS];
    unsetenv("FSDP_COLL_MAX_COUNT");
    run(opts, whole);
    setenv("FSDP_COLL_MAX_COUNT", CHUNK, 1);
    run(opts, chunked);
    unsetenv("FSDP_COLL_MAX_COUNT");
    double worst = 0.0;
    for (int s = 0; s < STEPS; s++) {
      double rel = fabs(chunked[s] - whole[s]) / fabs(whole[s]);
      worst = fmax(worst, rel);
      double bound = strcmp(cfgs[k].dtype, "fp32") == 0 ? 1e-6 : 1e-3;
      CHECK(rel <= bound && isfinite(chunked[s]),
            "F=%d G=%d %s step %d: loss %.9f with chunks of " CHUNK ", %.9f without (rel %.2e)",
            cfgs[k].F, cfgs[k].G, cfgs[k].dtype, s + 1, chunked[s], whole[s], rel);
    }
    if (rank == 0)
      printf("W=%d F=%d G=%d %s: loss %.6f -> %.6f, chunked vs whole worst rel diff %.2e\n", W,
             cfgs[k].F, cfgs[k].G, cfgs[k].dtype, whole[0], whole[STEPS - 1], worst);
  }
  int status = test_finish("test_chunked");
  TCALL(FsdpFinalize());
  return status;
}
