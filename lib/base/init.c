/* init.c: MPI start-up with the thread level the communication stream
 * needs, and identity for error messages. */
#include "base/init.h"

#include <stdio.h>
#include <unistd.h>

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
