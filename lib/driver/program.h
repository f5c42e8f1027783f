/* program.h: the shared main of fsdp's programs (fsdp-train, fsdp-plan,
 * fsdp-probe, fsdp-sample, fsdp-ckpt).
 *
 * Every program starts and stops the same way: MPI up (FsdpInitialize),
 * the options database read in full before any work (so -help lists every
 * option and a typo is refused on every rank before anything is
 * allocated), the program's work, -options_left, then the teardown, and on
 * a failure the choice between finalizing and aborting the job.  That
 * sequence lives here once; a program's main() is its table:
 *
 *   static FsdpProgram kProgram = {.name = "fsdp-x", .help = kHelp,
 *                                  .read_options = ReadOptions, .run = Go};
 *   int main(int argc, char **argv) { return FsdpProgramMain(argc, argv, &kProgram); }
 */
#ifndef FSDP_PROGRAM_H
#define FSDP_PROGRAM_H

#include "base/opts.h"

/* What a failure other than a usage error means for the other ranks. */
typedef enum {
  /* A rank-local failure may leave the other ranks inside a collective
   * (training, sampling, probing): main aborts the job (FsdpAbort) after
   * the message was printed.  Usage errors are found alike on every rank
   * and end with MPI_Finalize. */
  FSDP_PROGRAM_ABORT_ON_FAILURE,
  /* Every failure is found alike on every rank, or the program is one
   * process (fsdp-plan, fsdp-ckpt): main finalizes. */
  FSDP_PROGRAM_FINALIZE_ON_FAILURE
} FsdpProgramFailure;

#define FSDP_PROGRAM_MAX_POSITIONAL 4

/* What main hands the program's run, and what run reports back. */
typedef struct {
  FsdpOpts db;  /* the options database (read_options has read it) */
  void *state;  /* FsdpProgram.state */
  /* The leading arguments that are not options (fsdp-ckpt's subcommand
   * and files): how many were given (possibly more than
   * max_positional) and the first max_positional of them. */
  int npositional;
  const char *positional[FSDP_PROGRAM_MAX_POSITIONAL];
  /* Set by run: the exit status then says so ([Note: preemption] in
   * driver/preempt.h: 75 after a successful run; [Note: finite
   * checkpoints] in io/ckpt.h: 65 with a usage error). */
  int preempted;
  int nonfinite;
} FsdpProgramRun;

typedef struct {
  const char *name;          /* "fsdp-train": warnings name it */
  const char *help;          /* printed by -help above the option list */
  int max_positional;        /* 0: every argument is an option */
  FsdpProgramFailure on_failure;
  int computes;              /* 1: warn about threads beyond the affinity mask */
  void *state;               /* the program's options and objects */
  /* Not collective.  Read every option the program knows into state
   * (FsdpOptsGet*): all of them, also after a bad value, so that -help
   * lists them all. */
  int (*read_options)(FsdpOpts db, void *state);
  /* Collective on MPI_COMM_WORLD.  The program's work, after the options
   * were read and checked; frees what it made.  (A run that may have left
   * NCCL collectives pending on a failure returns without tearing them
   * down: main aborts the job, [Note: aborting NCCL with the job] in
   * coll_nccl.c.) */
  int (*run)(FsdpProgramRun *r);
} FsdpProgram;

/* Collective on MPI_COMM_WORLD.  The whole program: returns its exit
 * status (0 done, 2 usage, 65 non-finite, 75 preempted, 1 other). */
int FsdpProgramMain(int argc, char **argv, const FsdpProgram *p);

#endif
