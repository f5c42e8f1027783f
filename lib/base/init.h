/* init.h: start and stop the fsdp runtime around MPI. */
#ifndef FSDP_INIT_H
#define FSDP_INIT_H

#include <mpi.h>

/* Collective on MPI_COMM_WORLD.  Initializes MPI with MPI_THREAD_MULTIPLE
 * (the communication stream runs collectives on its own thread while the
 * compute thread may issue scalar reductions) and refuses, on every rank,
 * when the MPI library provides less.  Sets MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD so FSDP_CALL_MPI sees failures, and records rank and
 * hostname for error messages. */
int FsdpInitialize(int *argc, char ***argv);

/* Collective on MPI_COMM_WORLD.  Finalizes MPI (if FsdpInitialize
 * initialized it). */
int FsdpFinalize(void);

/* Abort every rank after a failure that may have left a collective phase
 * half done (other ranks would otherwise hang).  Called by main() only. */
void FsdpAbort(int code);

/* [Note: threads beyond the affinity mask] (init.c): 1 when OpenMP will
 * run more threads (*threads, omp_get_max_threads()) than the cores in
 * this process's affinity mask (*cores, sched_getaffinity); else 0. */
int FsdpThreadsBeyondAffinity(int *threads, int *cores);

/* Print one warning from this rank (named by its rank prefix) when
 * FsdpThreadsBeyondAffinity holds, naming prog and the fix (mpiexec
 * --bind-to none or --map-by slot:PE=T).  Every process that computes
 * calls it once after FsdpInitialize. */
void FsdpWarnThreadAffinity(const char *prog);

#endif
