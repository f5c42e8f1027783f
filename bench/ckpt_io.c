/* ckpt_io: write and read throughput of lib/ckpt checkpoints at W ranks
 * (bench/ckpt_throughput.sh runs it; ISSUE 4 "Performance").
 *
 *   mpiexec -n W bench/ckpt_io -model gpt2 -seq_len 64 -file DIR/ckpt.h5 \
 *           [-repeats 3] [-cold 1] [fsdp-train's model/topology options]
 *
 * Builds the model exactly as fsdp-train does (same option readers, same
 * runtime, initialized shards, AdamW state), then per repeat:
 *   write      FsdpCkptSave (parameters + both moments; includes the
 *              temporary name, the fsync and the rename of [Note: atomic
 *              checkpoints]);
 *   read cold  FsdpCkptLoad after the page cache was dropped (rank 0 writes
 *              1 to /proc/sys/vm/drop_caches; root only -- otherwise the
 *              cold column says n/a);
 *   read warm  FsdpCkptLoad again with the file in the page cache.
 * Each time is the slowest rank's (barrier before start and stop), and GB/s
 * is the file's size / time (1 GB = 1e9 bytes).  The shards are checked to
 * hold the same values after every load (a sum taken before the first
 * save, compared bit for bit).  The file is deleted at the end.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libfsdp.h"
#include "lib/median.h" /* bench/lib/median.h */

static const char kHelp[] =
    "ckpt_io: checkpoint write and read throughput (GB/s) of fsdp's parallel HDF5\n"
    "checkpoints for fsdp-train's model and topology options.\n"
    "Usage: mpiexec -n W ckpt_io -file PATH [-repeats R] [-cold 0/1] [fsdp-train options]\n";

/* Rank 0 drops the page cache (so that the next read comes from disk);
 * 1 if it could.  Collective on comm. */
static int DropCaches(MPI_Comm comm)
{
  int rank, ok = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd >= 0) {
      ok = write(fd, "1", 1) == 1;
      close(fd);
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  return ok;
}

/* Sum of every parameter shard of this rank, reduced over the world: the
 * same value after a load means the load put the same bits back (the sum
 * is taken in the same order over the same shards). */
static int ShardSum(FsdpRuntime rt, MPI_Comm comm, double *sum)
{
  double s = 0.0;
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
    const float *x = FsdpRuntimeUnitShard(rt, u);
    int64_t n = FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u));
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)((i % 7) + 1);
  }
  FSDP_CALL_MPI(MPI_Allreduce(&s, sum, 1, MPI_DOUBLE, MPI_SUM, comm));
  return FSDP_SUCCESS;
}

static int Run(int argc, char **argv, int *help)
{
  FsdpOpts db = NULL;
  FsdpTrainOptions o;
  const char *file = NULL;
  int64_t repeats = 3;
  int cold = 1;
  *help = 0;
  FSDP_CALL(FsdpOptsCreate(MPI_COMM_WORLD, argc, argv, &db));
  int err = FsdpTrainOptionsFromDb(db, &o);
  if (!err) err = FsdpOptsGetString(db, "ckpt_io", "file", "checkpoint file to write, read and delete", NULL, &file);
  if (!err) err = FsdpOptsGetInt(db, "ckpt_io", "repeats", "timed save/load rounds", 3, 1, 100, &repeats);
  if (!err) err = FsdpOptsGetBool(db, "ckpt_io", "cold", "drop the page cache before the first read of each round", 1, &cold);
  if (FsdpOptsHelpRequested(db)) {
    FsdpOptsPrintHelp(db, stdout, kHelp);
    FsdpOptsDestroy(&db);
    *help = 1;
    return FSDP_SUCCESS;
  }
  if (!err) err = FsdpOptsCheckUnknown(db);
  if (!err && !file) err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE, "option -file is required");
  if (err) {
    FsdpOptsDestroy(&db);
    return err;
  }
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank, W;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  FSDP_CALL_MPI(MPI_Comm_size(comm, &W));
  FsdpTopo topo = NULL;
  FsdpColl coll = NULL;
  FsdpRuntime rt = NULL;
  FsdpModel model = NULL;
  FsdpOptim opt = NULL;
  const FsdpKernelOps *k = FsdpKernelsCpu();
  FSDP_CALL(FsdpTopoCreate(comm, &o.topo, &topo));
  FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll));
  FSDP_CALL(FsdpModelCreate(&o.model, o.wrap, o.batch_size,
                            (int)FsdpModelDescInt(&o.model, "seq_len"), k, (uint64_t)o.seed,
                            &model));
  /* the runtime and the optimizer see the model only through its table */
  const FsdpModelTable *table = FsdpModelGetTable(model);
  FSDP_CALL(FsdpRuntimeCreate(topo, coll, &o.fsdp, &rt));
  FSDP_CALL(FsdpRuntimeAddModel(rt, table));
  FSDP_CALL(FsdpRuntimeSetUp(rt));
  FSDP_CALL(FsdpRuntimeInitShards(rt, table->init, table->ctx));
  FSDP_CALL(FsdpOptimCreate(rt, table->kernels, &o.optim, table->decays, &opt));
  FsdpCkptMeta meta;
  memset(&meta, 0, sizeof meta);
  meta.step = 1;
  meta.data_position = 1; /* [Note: checkpoint attributes]: one micro-batch per step */
  meta.seed = o.seed;
  meta.global_batch = (int64_t)W * o.batch_size;
  meta.optim = o.optim;
  meta.model = o.model;
  double ref;
  FSDP_CALL(ShardSum(rt, comm, &ref));
  double *tw = calloc((size_t)repeats, sizeof *tw), *tc = calloc((size_t)repeats, sizeof *tc),
         *th = calloc((size_t)repeats, sizeof *th);
  if (!tw || !tc || !th) {
    free(tw);
    free(tc);
    free(th);
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory for %lld rounds", (long long)repeats);
  }
  int have_cold = cold;
  long long bytes = 0;
  if (rank == 0)
    printf("ckpt_io: %s, %lld parameters, W %d, F %d, %lld rounds\n"
           "round  write s  write GB/s  cold read s  cold GB/s  warm read s  warm GB/s\n",
           o.model_name, (long long)FsdpModelDescParamCount(&o.model), W,
           FsdpTopoShard(topo)->size, (long long)repeats);
  for (int r = 0; r < repeats; r++) {
    FSDP_CALL_MPI(MPI_Barrier(comm));
    double t0 = MPI_Wtime();
    FSDP_CALL(FsdpCkptSave(rt, opt, file, &meta));
    FSDP_CALL_MPI(MPI_Barrier(comm));
    tw[r] = MPI_Wtime() - t0;
    if (rank == 0) {
      struct stat st;
      bytes = stat(file, &st) == 0 ? (long long)st.st_size : 0;
    }
    FSDP_CALL_MPI(MPI_Bcast(&bytes, 1, MPI_LONG_LONG, 0, comm));
    for (int pass = 0; pass < 2; pass++) {
      if (pass == 0 && !(have_cold = cold && DropCaches(comm))) continue;
      FSDP_CALL_MPI(MPI_Barrier(comm));
      t0 = MPI_Wtime();
      FSDP_CALL(FsdpCkptLoad(rt, opt, file, &meta.model, NULL));
      FSDP_CALL_MPI(MPI_Barrier(comm));
      (pass == 0 ? tc : th)[r] = MPI_Wtime() - t0;
      double got;
      FSDP_CALL(ShardSum(rt, comm, &got));
      if (got != ref)
        FSDP_ERROR(FSDP_ERR_INTERNAL, "shards differ after loading %s (sum %.17g, saved %.17g)", file, got, ref);
    }
    double gb = bytes / 1e9;
    if (rank == 0) {
      char c1[32] = "n/a", c2[32] = "n/a";
      if (have_cold) {
        snprintf(c1, sizeof c1, "%.3f", tc[r]);
        snprintf(c2, sizeof c2, "%.3f", gb / tc[r]);
      }
      printf("%5d  %7.3f  %10.3f  %11s  %9s  %11.3f  %9.3f\n", r + 1, tw[r], gb / tw[r], c1, c2,
             th[r], gb / th[r]);
      fflush(stdout);
    }
  }
  if (rank == 0) {
    double gb = bytes / 1e9;
    double mw = BenchMedian(tw, (int)repeats), mh = BenchMedian(th, (int)repeats);
    double mc = have_cold ? BenchMedian(tc, (int)repeats) : 0.0;
    printf("RESULT model=%s W=%d F=%d bytes=%lld write_s=%.3f write_GBps=%.3f cold_read_s=%.3f "
           "cold_read_GBps=%.3f warm_read_s=%.3f warm_read_GBps=%.3f\n",
           o.model_name, W, FsdpTopoShard(topo)->size, bytes, mw, gb / mw, mc,
           have_cold ? gb / mc : 0.0, mh, gb / mh);
    unlink(file);
  }
  free(tw);
  free(tc);
  free(th);
  FSDP_CALL(FsdpOptimDestroy(&opt));
  FSDP_CALL(FsdpRuntimeDestroy(&rt));
  FSDP_CALL(FsdpModelDestroy(&model));
  FSDP_CALL(FsdpCollDestroy(&coll));
  FSDP_CALL(FsdpTopoDestroy(&topo));
  FsdpOptsDestroy(&db);
  return FSDP_SUCCESS;
}

int main(int argc, char **argv)
{
  int err = FsdpInitialize(&argc, &argv);
  int help = 0;
  if (!err) err = Run(argc, argv, &help);
  if (err && err != FSDP_ERR_USAGE) FsdpAbort(err);
  FsdpFinalize();
  return FsdpExitStatus(err);
}
