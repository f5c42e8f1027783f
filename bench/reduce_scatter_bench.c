/* reduce_scatter_bench: the ways a large reduce-scatter can run on the
 * world, side by side ([Note: ring reduce-scatter], lib/comm/coll_mpi.c):
 * MPI_Allreduce of the whole buffer (moves twice the data: the yardstick),
 * MPI_Reduce_scatter_block, and FsdpCollReduceScatter with the ring
 * (FSDP_COLL_ALGO=ring) and with the MPI call (=mpi), and
 * FsdpCollAllReduce with the ring ([Note: ring all-reduce]), and
 * MPI_Allgather against our ring all-gather ([Note: ring all-gather]), each the
 * median of REPS calls, fp32, for a few buffer sizes (elements of the
 * whole buffer; the sizes of the benches' units).  make
 * bench/reduce_scatter_bench; run under the bench lock as
 *   mpiexec -n 2 --bind-to core bench/reduce_scatter_bench [REPS]
 * It checks every result (integer sums are exact in any order). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "lib/median.h" /* bench/lib/median.h */

static void Fill(float *x, size_t n, int rank)
{
  for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 7 + (size_t)rank * 13) % 31) - 15);
}

static int Check(const float *got, size_t count, size_t off, int W, const char *what)
{
  for (size_t i = 0; i < count; i++) {
    float want = 0.0f;
    for (int p = 0; p < W; p++) want += (float)((int)(((off + i) * 7 + (size_t)p * 13) % 31) - 15);
    if (got[i] != want) {
      fprintf(stderr, "reduce_scatter_bench: %s: element %zu is %g, expected %g\n", what, i,
              (double)got[i], (double)want);
      return 1;
    }
  }
  return 0;
}

/* an all-gather of Fill's values: chunk p holds rank p's pattern */
static int CheckGather(const float *got, size_t n, int W, const char *what)
{
  size_t count = n / (size_t)W;
  for (int p = 0; p < W; p++)
    for (size_t i = 0; i < count; i++) {
      size_t j = (size_t)p * count + i;
      float want = (float)((int)((j * 7 + (size_t)p * 13) % 31) - 15);
      if (got[j] != want) {
        fprintf(stderr, "reduce_scatter_bench: %s: element %zu is %g, expected %g\n", what, j,
                (double)got[j], (double)want);
        return 1;
      }
    }
  return 0;
}

#define BENCH_CALL(expr)                                                             \
  do {                                                                               \
    int bench_err_ = (expr);                                                         \
    if (bench_err_) {                                                                \
      fprintf(stderr, "reduce_scatter_bench: %s failed: %s\n", #expr, FsdpErrorLastMessage()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
    }                                                                                \
  } while (0)

int main(int argc, char **argv)
{
  BENCH_CALL(FsdpInitialize(&argc, &argv));
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  int rank = 0, W = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  if (reps < 1 || reps > 1000) {
    if (rank == 0) fprintf(stderr, "usage: reduce_scatter_bench [REPS 1..1000]\n");
    MPI_Finalize();
    return 2;
  }
  FsdpOpts db = NULL;
  FsdpTopoOptions to;
  FsdpTopo topo = NULL;
  BENCH_CALL(FsdpOptsCreate(MPI_COMM_WORLD, 0, NULL, &db));
  BENCH_CALL(FsdpTopoOptionsFromDb(db, &to));
  to.sharding_factor = W;
  BENCH_CALL(FsdpTopoCreate(MPI_COMM_WORLD, &to, &topo));
  const FsdpGroup *g = FsdpTopoShard(topo);
  FsdpColl ring = NULL, mpi = NULL;
  setenv("FSDP_COLL_ALGO", "ring", 1);
  BENCH_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &ring));
  setenv("FSDP_COLL_ALGO", "mpi", 1);
  BENCH_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &mpi));
  unsetenv("FSDP_COLL_ALGO");
  /* a GPT-2 block (7.1 M), GPT-2's root unit (39.4 M); the overlap
   * bench's block (1.77 M) and root (3.2 M) */
  const size_t sizes[] = {1769472, 3194880, 7087872, 39403008};
  if (rank == 0)
    printf("W %d, median of %d calls, fp32, ms\n%12s %12s %12s %12s %12s %10s %12s %10s %12s %12s %10s\n",
           W, reps, "elements", "allreduce", "MPI_RS_block", "fsdp ring", "fsdp mpi", "mpi/ring",
           "fsdp AR ring", "MPI/ring", "allgather", "fsdp AG ring", "MPI/ring");
  int bad = 0;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    size_t n = sizes[s] / (size_t)W * (size_t)W, count = n / (size_t)W;
    float *send = malloc(n * sizeof *send), *recv = malloc(count * sizeof *recv);
    if (!send || !recv) {
      fprintf(stderr, "reduce_scatter_bench: out of memory (%zu floats)\n", n);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double t[7][1000];
    for (int r = 0; r < reps; r++) {
      for (int way = 0; way < 7; way++) {
        Fill(send, n, g->rank);
        MPI_Barrier(g->comm);
        double t0 = MPI_Wtime();
        if (way == 0)
          MPI_Allreduce(MPI_IN_PLACE, send, (int)n, MPI_FLOAT, MPI_SUM, g->comm);
        else if (way == 1)
          MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, g->comm);
        else if (way < 4)
          BENCH_CALL(FsdpCollReduceScatter(way == 2 ? ring : mpi, g, send, recv, count,
                                           FSDP_DTYPE_FP32, 1.0f));
        else if (way == 4)
          BENCH_CALL(FsdpCollAllReduce(ring, g, send, n, FSDP_DTYPE_FP32, 1.0f));
        else if (way == 5)
          MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, send, (int)count, MPI_FLOAT, g->comm);
        else
          BENCH_CALL(FsdpCollAllGather(ring, g, send + (size_t)g->rank * count, send, count,
                                       FSDP_DTYPE_FP32));
        t[way][r] = (MPI_Wtime() - t0) * 1e3;
        if (way == 0 || way == 4)
          bad |= Check(send, n, 0, W, way == 0 ? "allreduce" : "ring allreduce");
        else if (way >= 5)
          bad |= CheckGather(send, n, W, way == 5 ? "allgather" : "ring allgather");
        else bad |= Check(recv, count, (size_t)g->rank * count, W, way == 1 ? "MPI_RS_block" : way == 2 ? "ring" : "mpi");
      }
    }
    double m[7];
    for (int way = 0; way < 7; way++) {
      MPI_Allreduce(MPI_IN_PLACE, t[way], reps, MPI_DOUBLE, MPI_MAX, g->comm); /* slowest rank */
      m[way] = BenchMedian(t[way], reps);
    }
    if (rank == 0)
      printf("%12zu %12.1f %12.1f %12.1f %12.1f %10.2f %12.1f %10.2f %12.1f %12.1f %10.2f\n", n, m[0],
             m[1], m[2], m[3], m[3] / m[2], m[4], m[0] / m[4], m[5], m[6], m[5] / m[6]);
    free(send);
    free(recv);
  }
  BENCH_CALL(FsdpCollDestroy(&ring));
  BENCH_CALL(FsdpCollDestroy(&mpi));
  BENCH_CALL(FsdpTopoDestroy(&topo));
  BENCH_CALL(FsdpOptsDestroy(&db));
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  FsdpFinalize();
  return bad;
}
