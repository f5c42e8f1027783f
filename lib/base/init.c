/* init.c: MPI start-up with the thread level the communication stream
 * needs, identity for error messages, and the thread / core check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "base/init.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/error.h"

static int g_we_initialized_mpi = 0;

int FsdpInitialize(int *argc, char ***argv)
{
  int initialized = 0, provided = 0;
  FSDP_CALL_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    FSDP_CALL_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    g_we_initialized_mpi = 1;
  } else {
    FSDP_CALL_MPI(MPI_Query_thread(&provided));
  }
  FSDP_CALL_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  FSDP_CALL_MPI(MPI_Get_processor_name(host, &len));
  FsdpErrorSetIdentity(rank, host);
  if (provided < MPI_THREAD_MULTIPLE)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "the MPI library provides thread level %d but fsdp needs "
               "MPI_THREAD_MULTIPLE (%d): the communication stream runs "
               "collectives on its own thread; use an MPI built with thread "
               "support (Debian's OpenMPI and MPICH are)",
               provided, MPI_THREAD_MULTIPLE);
  return FSDP_SUCCESS;
}

int FsdpFinalize(void)
{
  if (g_we_initialized_mpi) {
    int finalized = 0;
    FSDP_CALL_MPI(MPI_Finalized(&finalized));
    if (!finalized) FSDP_CALL_MPI(MPI_Finalize());
  }
  return FSDP_SUCCESS;
}

void FsdpAbort(int code) { FsdpErrorAbortJob(code); } /* [Note: ending the job] */

/* [Note: threads beyond the affinity mask] OpenMP takes its team size from
 * OMP_NUM_THREADS, not from the cores the process may use; an MPI launcher
 * that binds each rank to one core (Open MPI does for -n 1 and -n 2) then
 * leaves T threads taking turns on that core.  Nothing fails: every team
 * barrier waits for a thread the OS has not scheduled, and a step takes
 * up to T times as long (bench/results/2026-12-01-commthreads.md, "Threads
 * beyond the affinity mask").  So every
 * computing program checks it after start-up and names the fix. */
int FsdpThreadsBeyondAffinity(int *threads, int *cores)
{
  *threads = 1;
  *cores = 0;
#ifdef _OPENMP
  *threads = omp_get_max_threads();
#endif
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0; /* unknown: no claim */
  *cores = CPU_COUNT(&set);
  return *cores > 0 && *threads > *cores;
}

void FsdpWarnThreadAffinity(const char *prog)
{
  int threads = 1, cores = 0;
  if (!FsdpThreadsBeyondAffinity(&threads, &cores)) return;
  FsdpWarn(0,
           "%s: %d OpenMP threads (OMP_NUM_THREADS) but this process may run on only %d "
           "core%s (its CPU affinity mask, as the MPI launcher bound it): the threads take "
           "turns on it and every OpenMP team waits for the ones not running, so steps run "
           "up to %dx slower.  Start "
           "it with `mpiexec --bind-to none` or `mpiexec --map-by slot:PE=%d` (Open MPI: %d "
           "cores per rank), or set OMP_NUM_THREADS=%d",
           prog ? prog : "fsdp", threads, cores, cores == 1 ? "" : "s",
           (threads + cores - 1) / (cores > 0 ? cores : 1), threads, threads, cores);
}
