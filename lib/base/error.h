/* error.h: the one error convention of fsdp.
 *
 * Every library function returns an int error code (FSDP_SUCCESS == 0).
 * FSDP_ERROR(code, fmt, ...) prints the message once, where the failure is
 * detected, and returns the code; FSDP_CALL(expr) relays a failure upward and
 * adds one traceback line, so a failure reads like PETSc's traceback.
 * FSDP_CALL_MPI / FSDP_CALL_HDF5 / ... adapt a foreign library's status into
 * this convention with that library's own message.  Library code never calls
 * exit(); only main() turns a code into an exit status (FsdpExitStatus).
 *
 * [Note: usage errors] Errors the user caused (a bad option, a bad input
 * file, an impossible topology) are detected identically on every rank,
 * because every rank sees the same options and files.  They are printed by
 * world rank 0 only, without a traceback, and map to exit status 2.  Every
 * other error is printed by the rank that hit it, prefixed with rank, host
 * and pid so 512 ranks sharing one stderr stay readable.
 */
#ifndef FSDP_ERROR_H
#define FSDP_ERROR_H

#include <stddef.h>

typedef enum {
  FSDP_SUCCESS = 0,
  FSDP_ERR_USAGE,    /* bad option, value, input file or topology: exit 2 */
  FSDP_ERR_MEM,      /* allocation failed */
  FSDP_ERR_MPI,      /* an MPI call failed */
  FSDP_ERR_HDF5,     /* an HDF5 call failed */
  FSDP_ERR_IO,       /* a system I/O call failed */
  FSDP_ERR_CUDA,     /* a CUDA / cuBLAS call failed */
  FSDP_ERR_NCCL,     /* an NCCL call failed */
  FSDP_ERR_STATE,    /* illegal state transition or call order */
  FSDP_ERR_INTERNAL, /* a broken invariant: a bug */
  FSDP_ERR_NCODES
} FsdpErrorCode;

/* Name of a code, e.g. "usage error". */
const char *FsdpErrorName(int code);

/* Exit status main() should use for a code: 0, 2 for usage errors, else 1. */
int FsdpExitStatus(int code);

/* Print the message (see [Note: usage errors] for who prints) and return
 * code.  Use through FSDP_ERROR. */
int FsdpErrorRaise(const char *file, int line, const char *func, int code,
                   const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Add one traceback line and return code.  Use through FSDP_CALL. */
int FsdpErrorTrace(const char *file, int line, const char *func, int code);

/* Identity used in messages; set by FsdpInitialize (init.c). */
void FsdpErrorSetIdentity(int world_rank, const char *host);
int FsdpErrorWorldRank(void);

/* The message of the most recent FsdpErrorRaise on this rank (also for
 * errors this rank did not print), for tests that assert messages. */
const char *FsdpErrorLastMessage(void);

/* The message of the most recent FsdpErrorRaise on the calling thread, ""
 * if none since FsdpErrorClearThreadMessage (a stream thread quotes the
 * cause of a failed task with it). */
const char *FsdpErrorThreadMessage(void);
void FsdpErrorClearThreadMessage(void);

/* [Note: ending the job] A failure the other ranks cannot see -- a failed
 * task on a communication stream's thread (stream.h), or main() giving up
 * after an error that may have left a collective half done -- must end
 * every rank, or the others wait forever in their next collective.
 * FsdpErrorAbortJob is the one way to do that: print the message first
 * (FsdpErrorRaise), then call it.  It runs the abort hooks, newest first
 * (on the CUDA build the place to abort NCCL communicators, so no kernel
 * stays blocked on a dead peer), flushes stdio and calls MPI_Abort on
 * MPI_COMM_WORLD with FsdpExitStatus(code) (plain _exit without MPI).  Any
 * thread may call it; a second caller waits for the first to end the job. */
typedef void (*FsdpAbortHook)(void *ctx);
int FsdpErrorAddAbortHook(FsdpAbortHook hook, void *ctx);
/* Accepts a hook that was never added. */
void FsdpErrorRemoveAbortHook(FsdpAbortHook hook, void *ctx);
/* __attribute__ rather than _Noreturn: this header is also read by nvcc as C++ */
void FsdpErrorAbortJob(int code) __attribute__((noreturn));

/* Print a rank-prefixed warning (rank 0 only when only_rank0). */
void FsdpWarn(int only_rank0, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Format a message into buf[size], cut short if it does not fit (paths
 * make messages long; a cut message still names what failed): for code
 * that hands a message back to be raised, agreed on or printed later. */
void FsdpMsgf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define FSDP_ERROR(code, ...) \
  return FsdpErrorRaise(__FILE__, __LINE__, __func__, (code), __VA_ARGS__)

#define FSDP_CALL(expr)                                              \
  do {                                                               \
    int fsdp_call_err_ = (expr);                                     \
    if (fsdp_call_err_ != FSDP_SUCCESS)                              \
      return FsdpErrorTrace(__FILE__, __LINE__, __func__, fsdp_call_err_); \
  } while (0)

/* Check a condition that only a bug can break. */
#define FSDP_ASSERT(cond)                                                   \
  do {                                                                      \
    if (!(cond))                                                            \
      FSDP_ERROR(FSDP_ERR_INTERNAL, "internal check failed: %s", #cond);    \
  } while (0)

/* MPI adapter: needs MPI_ERRORS_RETURN on the communicators (init.c sets it
 * on MPI_COMM_WORLD; communicators derived from it inherit it). */
#define FSDP_CALL_MPI(expr)                                                 \
  do {                                                                      \
    int fsdp_mpi_err_ = (expr);                                             \
    if (fsdp_mpi_err_ != MPI_SUCCESS) {                                     \
      char fsdp_mpi_msg_[MPI_MAX_ERROR_STRING];                             \
      int fsdp_mpi_len_ = 0;                                                \
      MPI_Error_string(fsdp_mpi_err_, fsdp_mpi_msg_, &fsdp_mpi_len_);       \
      FSDP_ERROR(FSDP_ERR_MPI, "%s failed: %s", #expr, fsdp_mpi_msg_);      \
    }                                                                       \
  } while (0)

/* Allocation adapter for plain malloc/calloc results. */
#define FSDP_CHECK_ALLOC(ptr, bytes)                                        \
  do {                                                                      \
    if ((ptr) == NULL)                                                      \
      FSDP_ERROR(FSDP_ERR_MEM, "out of memory allocating %zu bytes",        \
                 (size_t)(bytes));                                          \
  } while (0)

#endif
