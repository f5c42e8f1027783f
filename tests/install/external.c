/* external.c: a program outside the fsdp tree, built by tests/test_install.sh
 * against an installed libfsdp only (the headers under include/fsdp, the
 * shared library, fsdp.pc):
 *
 *   mpicc external.c $(pkg-config --cflags --libs fsdp) -o external
 *   mpiexec -n 2 ./external -model tiny -steps 2 -log_every 0
 *
 * It uses the public API as a program of its own would: start-up, the
 * options database, a topology and a collective, then a trainer running the
 * steps.  Rank 0 prints the lines the test checks:
 *   "ranks W sum S"     S = 1 + 2 + ... + W, summed by the MPI collective
 *   "step N loss L"     one per step, L printed as fsdp-train's JSON prints it
 */
#include <libfsdp.h>
#include <stdio.h>

/* A topology over all ranks and the MPI collective: sum rank + 1 over the
 * world group. */
static int SumRanks(const FsdpTopoOptions *to, int *world_size, double *sum)
{
  FsdpTopo topo = NULL;
  FsdpColl coll = NULL;
  FSDP_CALL(FsdpTopoCreate(MPI_COMM_WORLD, to, &topo));
  int err = FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll);
  if (!err) {
    const FsdpGroup *world = FsdpTopoWorld(topo);
    *world_size = world->size;
    *sum = world->rank + 1;
    err = FsdpCollScalarSum(coll, world, sum, 1);
  }
  int coll_err = FsdpCollDestroy(&coll);
  int topo_err = FsdpTopoDestroy(&topo);
  return err ? err : coll_err ? coll_err : topo_err;
}

/* A trainer built from the options; o->steps optimizer steps. */
static int Train(const FsdpTrainOptions *o, int rank)
{
  FsdpTrainer tr = NULL;
  FSDP_CALL(FsdpTrainerCreate(MPI_COMM_WORLD, o, &tr));
  int err = FSDP_SUCCESS;
  for (int64_t s = 1; s <= o->steps && !err; s++) {
    double loss = 0;
    err = FsdpTrainerStep(tr, &loss);
    if (!err && rank == 0) printf("step %lld loss %.9g\n", (long long)s, loss);
  }
  int destroy_err = FsdpTrainerDestroy(&tr);
  return err ? err : destroy_err;
}

static int Run(int argc, char **argv)
{
  FsdpOpts db = NULL;
  FsdpTrainOptions o;
  int rank = 0, world_size = 0;
  double sum = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  FSDP_CALL(FsdpOptsCreate(MPI_COMM_WORLD, argc, argv, &db));
  int err = FsdpTrainOptionsFromDb(db, &o);
  if (!err) err = FsdpOptsCheckUnknown(db);
  if (!err) err = SumRanks(&o.topo, &world_size, &sum);
  if (!err && rank == 0) printf("ranks %d sum %.17g\n", world_size, sum);
  if (!err) err = Train(&o, rank);
  int destroy_err = FsdpOptsDestroy(&db);
  return err ? err : destroy_err;
}

int main(int argc, char **argv)
{
  int err = FsdpInitialize(&argc, &argv);
  if (!err) err = Run(argc, argv);
  /* a rank-local failure may leave the other ranks inside a collective */
  if (err && err != FSDP_ERR_USAGE) FsdpAbort(err);
  FsdpFinalize();
  return FsdpExitStatus(err);
}
