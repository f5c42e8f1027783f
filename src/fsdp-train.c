/* fsdp-train: train a GPT-2 or Llama 3 model with Fully Sharded Data Parallel over MPI.
 *
 *   mpiexec -n 4 fsdp-train                       # the built-in default
 *   mpiexec -n 8 fsdp-train -model gpt2 -sharding_factor 4 -data train.bin
 *   fsdp-train -help                              # every option
 */
#include <stdio.h>
#include <string.h>

#include "libfsdp.h"
#include "driver/program.h"
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

static int ReadOptions(FsdpOpts db, void *state) { return FsdpTrainOptionsFromDb(db, state); }

/* Training, after the options were read and checked; returns an error code. */
static int Train(FsdpProgramRun *r)
{
  FsdpOpts db = r->db;
  const FsdpTrainOptions *o = r->state;
  FsdpTrainer tr = NULL;
  int rank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  int err = FsdpTrainerCreate(MPI_COMM_WORLD, o, &tr);
  if (!err && rank == 0) {
    const char *core = FsdpKernelsCpuBlasCore();
    printf("fsdp-train: %s (%lld parameters) on %d ranks, sharding factor %d, BLAS core %s\n",
           o->model_name, (long long)FsdpModelDescParamCount(&o->model),
           FsdpTopoWorld(FsdpTrainerTopo(tr))->size, FsdpTopoShard(FsdpTrainerTopo(tr))->size, core);
    if (FsdpKernelsCpuBlasIsFallback())
      FsdpWarn(1, "OpenBLAS runs its generic '%s' kernel on a CPU that supports a faster one: "
                  "set OPENBLAS_CORETYPE (e.g. OPENBLAS_CORETYPE=SkylakeX or Haswell), see README",
               core);
    if (o->fsdp.compute_dtype == FSDP_DTYPE_BF16 && !o->device_cuda) {
      char lib[64], kernel[160];
      FsdpKernelsCpuGemm(1, lib, sizeof lib, kernel, sizeof kernel);
      printf("fsdp-train: bf16 compute: matmuls through %s (%s)\n", lib, kernel);
    }
    fflush(stdout);
  }
  if (!err && o->topo.view) err = FsdpTopoView(FsdpTrainerTopo(tr), stdout);
  if (!err) err = FsdpTrainerRun(tr, stdout);
  if (!err) err = FsdpTrainerSummary(tr, stdout);
  if (!err) r->preempted = FsdpTrainerPreempted(tr) != 0;
  if (tr) r->nonfinite = FsdpTrainerNonFinite(tr);
  /* -options_left on stderr, apart from the training log */
  if (!err && FsdpOptsHas(db, "options_left")) err = FsdpOptsReportLeft(db, stderr, NULL);
  if (err && err != FSDP_ERR_USAGE && o->device_cuda) {
    /* [Note: aborting NCCL with the job] (coll_nccl.c): tearing down now
     * would wait on the device for collectives a failed peer never joins
     * (and ncclCommDestroy with them); main aborts the NCCL communicators
     * and the job instead, the message already printed. */
    return err;
  }
  int derr = FsdpTrainerDestroy(&tr);
  return err ? err : derr;
}

static FsdpTrainOptions options;

static const FsdpProgram kProgram = {.name = "fsdp-train",
                                     .help = kHelp,
                                     .on_failure = FSDP_PROGRAM_ABORT_ON_FAILURE,
                                     .computes = 1,
                                     .state = &options,
                                     .read_options = ReadOptions,
                                     .run = Train};

int main(int argc, char **argv) { return FsdpProgramMain(argc, argv, &kProgram); }
