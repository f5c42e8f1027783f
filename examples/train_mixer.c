/* train_mixer.c: train the MLP-mixer of mixer.c with libfsdp's driver --
 * sharded over the MPI ranks, with checkpoints, resume and the run file --
 * as fsdp-train trains GPT-2 and Llama.  Built against the installed
 * library only (Makefile: pkg-config fsdp).
 *
 *   mpiexec -n 2 ./train_mixer -steps 20 -metrics run.h5 \
 *       -checkpoint_dir ckpt -checkpoint_every 10
 *   mpiexec -n 2 ./train_mixer -steps 40 -metrics run.h5 \
 *       -checkpoint_dir ckpt -checkpoint_every 10 -resume auto
 *   ./train_mixer -help                    # every option of the driver
 */
#include <libfsdp.h>
#include <stdio.h>

#include "mixer.h"

static const char kHelp[] =
    "train_mixer: train a causal MLP-mixer language model (examples/mixer.c, a model family\n"
    "registered from outside libfsdp) with Fully Sharded Data Parallel over MPI.\n"
    "Usage: mpiexec -n W ./train_mixer [-option value ...]; -model mixer-tiny (the default),\n"
    "mixer-small, or custom -family mixer with -n_layer -n_embd -vocab_size -seq_len.\n"
    "Exit status: 0 done, 2 bad usage or input, 75 preempted, 65 non-finite, 1 other.\n";

/* Options, trainer, steps; returns an error code. */
static int Run(int argc, char **argv, int *preempted, int *nonfinite)
{
  FsdpOpts db = NULL;
  FsdpTrainOptions o;
  FsdpTrainer tr = NULL;
  /* before the options are read: -model and -family then know "mixer" */
  FSDP_CALL(FsdpModelFamilyRegister(&MixerFamily));
  FSDP_CALL(FsdpOptsCreate(MPI_COMM_WORLD, argc, argv, &db));
  /* this program's default model (the driver's is GPT's "small") */
  int err = FsdpOptsHas(db, "model") ? FSDP_SUCCESS : FsdpOptsSetValue(db, "model", "mixer-tiny");
  if (!err) err = FsdpTrainOptionsFromDb(db, &o);
  if (FsdpOptsHelpRequested(db)) {
    FsdpOptsPrintHelp(db, stdout, kHelp);
    FsdpOptsDestroy(&db);
    return FSDP_SUCCESS;
  }
  if (!err) err = FsdpOptsCheckUnknown(db);
  if (!err) err = FsdpTrainerCreate(MPI_COMM_WORLD, &o, &tr);
  if (!err) err = FsdpTrainerRun(tr, stdout);
  if (!err) err = FsdpTrainerSummary(tr, stdout);
  if (!err) *preempted = FsdpTrainerPreempted(tr) != 0;
  if (tr) *nonfinite = FsdpTrainerNonFinite(tr);
  int destroy_err = FsdpTrainerDestroy(&tr);
  FsdpOptsDestroy(&db);
  return err ? err : destroy_err;
}

int main(int argc, char **argv)
{
  int preempted = 0, nonfinite = 0;
  int err = FsdpInitialize(&argc, &argv);
  if (!err) err = Run(argc, argv, &preempted, &nonfinite);
  /* a rank-local failure may leave the other ranks inside a collective */
  if (err && err != FSDP_ERR_USAGE) FsdpAbort(err);
  FsdpFinalize();
  if (!err && preempted) return FSDP_EXIT_PREEMPTED; /* a checkpoint was written */
  if (err == FSDP_ERR_USAGE && nonfinite) return FSDP_EXIT_NONFINITE;
  return FsdpExitStatus(err);
}
