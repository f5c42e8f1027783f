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

/* Not collective: the mixer family, then every option of the driver. */
static int ReadOptions(FsdpOpts db, void *state)
{
  /* before the options are read: -model and -family then know "mixer" */
  FSDP_CALL(FsdpModelFamilyRegister(&MixerFamily));
  /* this program's default model (the driver's is GPT's "small") */
  if (!FsdpOptsHas(db, "model")) FSDP_CALL(FsdpOptsSetValue(db, "model", "mixer-tiny"));
  return FsdpTrainOptionsFromDb(db, state);
}

/* Collective on MPI_COMM_WORLD: trainer, steps, summary. */
static int Train(FsdpProgramRun *r)
{
  FsdpTrainer tr = NULL;
  int err = FsdpTrainerCreate(MPI_COMM_WORLD, r->state, &tr);
  if (!err) err = FsdpTrainerRun(tr, stdout);
  if (!err) err = FsdpTrainerSummary(tr, stdout);
  if (!err) r->preempted = FsdpTrainerPreempted(tr) != 0;
  if (tr) r->nonfinite = FsdpTrainerNonFinite(tr);
  int destroy_err = FsdpTrainerDestroy(&tr);
  return err ? err : destroy_err;
}

static FsdpTrainOptions options;

/* libfsdp's shared main (driver/program.h): MPI, the options, -help, the
 * teardown and the exit statuses as fsdp-train has them. */
static const FsdpProgram kProgram = {.name = "train_mixer",
                                     .help = kHelp,
                                     .on_failure = FSDP_PROGRAM_ABORT_ON_FAILURE,
                                     .computes = 1,
                                     .state = &options,
                                     .read_options = ReadOptions,
                                     .run = Train};

int main(int argc, char **argv) { return FsdpProgramMain(argc, argv, &kProgram); }
