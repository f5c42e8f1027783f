/* preempt.h: graceful preemption -- on a chosen signal every rank finishes
 * the step it is in, the run writes a checkpoint and exits with
 * FSDP_EXIT_PREEMPTED (docs/design.md §7 "Preemption").
 *
 * [Note: preemption] A scheduler that wants the nodes back (Slurm's
 * --signal, scancel --signal, preemption with a grace time; mpirun
 * forwarding SIGUSR1/SIGUSR2) may signal one rank, all of them, or all of
 * them at slightly different steps.  The handler only records the signal
 * (async-signal-safe: one volatile sig_atomic_t) and is installed with
 * SA_RESTART, so no MPI, HDF5 or file call is interrupted.  At every step
 * boundary the trainer combines the ranks' records with one MPI_Allreduce
 * (MAX) of an int (FsdpPreemptAgree): the same call on every rank at the
 * same step, so all take the same decision there, save the usual atomic
 * checkpoint ([Note: atomic checkpoints] in ckpt.h) and return.  The
 * handlers stay installed until the process exits: a second signal, during
 * the save or after it, only sets the record again, so it neither kills
 * the rank mid-save nor turns the documented exit status into a death by
 * signal.  A SIGKILL (the scheduler's grace time ran out) during the save
 * leaves a *.tmp-* file and the previous checkpoints valid.  With no
 * signal chosen (the default) nothing is installed and no collective is
 * added to the step.
 */
#ifndef FSDP_PREEMPT_H
#define FSDP_PREEMPT_H

#include <mpi.h>

#include "base/opts.h"

/* Exit status of a preempted run: checkpoint written, resume it with
 * -resume auto.  EX_TEMPFAIL of sysexits.h ("try again later"). */
#define FSDP_EXIT_PREEMPTED 75

/* -preempt_signals LIST: a bit per signal of kPreemptSignals (preempt.c);
 * 0 = none. */
typedef struct {
  unsigned mask;
} FsdpPreemptOptions;

/* Not collective.  Reads -preempt_signals (group "Preemption"): "none" or
 * a comma-separated list of USR1, USR2, TERM, INT, HUP (a SIG prefix and
 * any case accepted); anything else is a usage error naming the value. */
int FsdpPreemptOptionsFromDb(FsdpOpts db, FsdpPreemptOptions *o);

/* Not collective.  Installs the recording handler for the chosen signals
 * (SA_RESTART); they stay installed until the process exits. */
int FsdpPreemptInstall(const FsdpPreemptOptions *o);

/* Collective on comm.  *signo gets the largest signal number any rank
 * recorded since FsdpPreemptInstall (0: none), the same on every rank. */
int FsdpPreemptAgree(MPI_Comm comm, int *signo);

/* "USR1" for SIGUSR1, ...; "?" for a signal not in the list. */
const char *FsdpPreemptSignalName(int signo);

#endif
