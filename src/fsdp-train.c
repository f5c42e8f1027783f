/* fsdp-train: train a GPT-2 or Llama 3 model with Fully Sharded Data Parallel over MPI.
 *
 *   mpiexec -n 4 fsdp-train                       # the built-in default
 *   mpiexec -n 8 fsdp-train -model gpt2 -sharding_factor 4 -data train.bin
 *   fsdp-train -help                              # every option
 */
#include <stdio.h>
#include <string.h>

#include "libfsdp.h"
#include "driver/train.h"

static const char kHelp[] =
    "fsdp-train: train a GPT-2 or Llama 3 style transformer with parameters, gradients and\n"
    "optimizer state sharded across MPI ranks (Fully Sharded Data Parallel).\n"
    "Usage: mpiexec -n W fsdp-train [-option value ...]\n"
    "Options come from FSDP_OPTIONS, then the command line left to right, where\n"
    "-options_file FILE inserts FILE's options; a later value wins.\n"
    "Exit status: 0 done, 2 bad usage or input, 75 preempted (-preempt_signals: a\n"
    "checkpoint was written, continue with -resume auto), 65 the training state became\n"
    "non-finite (a NaN/Inf loss, or a checkpoint save refused; the newest good\n"
    "checkpoint is kept), 1 other failures.\n";

/* Everything up to the end of training; returns an error code. */
static int Run(int argc, char **argv, int *handled_help, int *preempted, int *nonfinite)
{
  FsdpOpts db = NULL;
  FsdpTrainOptions o;
  FsdpTrainer tr = NULL;
  *handled_help = 0;
  *preempted = 0;
  *nonfinite = 0;
  FSDP_CALL(FsdpOptsCreate(MPI_COMM_WORLD, argc, argv, &db));
  /* read every option first: -help lists them all and a typo is an error
   * before any MPI work or allocation */
  int err = FsdpTrainOptionsFromDb(db, &o);
  if (FsdpOptsHelpRequested(db)) {
    FsdpOptsPrintHelp(db, stdout, kHelp);
    *handled_help = 1;
    FsdpOptsDestroy(&db);
    return FSDP_SUCCESS;
  }
  if (!err) err = FsdpOptsCheckUnknown(db);
  if (err) {
    FsdpOptsDestroy(&db);
    return err;
  }
  /* [Note: threads beyond the affinity mask] (base/init.c) */
  FsdpWarnThreadAffinity("fsdp-train");
  int rank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  err = FsdpTrainerCreate(MPI_COMM_WORLD, &o, &tr);
  if (!err && rank == 0) {
    const char *core = FsdpKernelsCpuBlasCore();
    printf("fsdp-train: %s (%lld parameters) on %d ranks, sharding factor %d, BLAS core %s\n",
           o.model_name, (long long)FsdpModelDescParamCount(&o.model),
           FsdpTopoWorld(FsdpTrainerTopo(tr))->size, FsdpTopoShard(FsdpTrainerTopo(tr))->size, core);
    if (FsdpKernelsCpuBlasIsFallback())
      FsdpWarn(1, "OpenBLAS runs its generic '%s' kernel on a CPU that supports a faster one: "
                  "set OPENBLAS_CORETYPE (e.g. OPENBLAS_CORETYPE=SkylakeX or Haswell), see README",
               core);
    if (o.fsdp.compute_dtype == FSDP_DTYPE_BF16 && !o.device_cuda) {
      char lib[64], kernel[160];
      FsdpKernelsCpuGemm(1, lib, sizeof lib, kernel, sizeof kernel);
      printf("fsdp-train: bf16 compute: matmuls through %s (%s)\n", lib, kernel);
    }
    fflush(stdout);
  }
  if (!err && o.topo.view) err = FsdpTopoView(FsdpTrainerTopo(tr), stdout);
  if (!err) err = FsdpTrainerRun(tr, stdout);
  if (!err) err = FsdpTrainerSummary(tr, stdout);
  if (!err) *preempted = FsdpTrainerPreempted(tr) != 0;
  if (tr) *nonfinite = FsdpTrainerNonFinite(tr);
  if (!err) {
    int nleft = 0;
    if (FsdpOptsHas(db, "options_left")) err = FsdpOptsReportLeft(db, stderr, &nleft);
  }
  if (err && err != FSDP_ERR_USAGE && o.device_cuda) {
    /* [Note: aborting NCCL with the job] (coll_nccl.c): tearing down now
     * would wait on the device for collectives a failed peer never joins
     * (and ncclCommDestroy with them); main aborts the NCCL communicators
     * and the job instead, the message already printed. */
    FsdpOptsDestroy(&db);
    return err;
  }
  int derr = FsdpTrainerDestroy(&tr);
  FsdpOptsDestroy(&db);
  return err ? err : derr;
}

int main(int argc, char **argv)
{
  int err = FsdpInitialize(&argc, &argv);
  if (err) {
    FsdpFinalize();
    return FsdpExitStatus(err);
  }
  int help = 0, preempted = 0, nonfinite = 0;
  err = Run(argc, argv, &help, &preempted, &nonfinite);
  if (err && err != FSDP_ERR_USAGE) {
    /* a rank-local failure may leave other ranks inside a collective */
    FsdpAbort(err);
  }
  FsdpFinalize();
  /* [Note: preemption] (driver/preempt.h): a checkpoint was written; the
   * job script requeues the run on this status */
  if (!err && preempted) return FSDP_EXIT_PREEMPTED;
  /* [Note: finite checkpoints] (io/ckpt.h): every rank stopped with one message */
  if (err == FSDP_ERR_USAGE && nonfinite) return FSDP_EXIT_NONFINITE;
  return FsdpExitStatus(err);
}
