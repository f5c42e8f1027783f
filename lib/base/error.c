/* error.c: message printing for the error convention of error.h. */
#include "base/error.h"

#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_world_rank = 0;
static char g_host[64] = "?";
static char g_last_message[2048];
/* the communication stream raises errors on its own thread */
static pthread_mutex_t g_last_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char t_thread_message[2048];

#define MAX_ABORT_HOOKS 8
typedef struct {
  FsdpAbortHook hook;
  void *ctx;
} AbortHook;
static AbortHook g_abort_hooks[MAX_ABORT_HOOKS];
static int g_nabort_hooks;
static pthread_mutex_t g_abort_lock = PTHREAD_MUTEX_INITIALIZER;

void FsdpErrorSetIdentity(int world_rank, const char *host)
{
  g_world_rank = world_rank;
  if (host) {
    strncpy(g_host, host, sizeof g_host - 1);
    g_host[sizeof g_host - 1] = '\0';
  }
}

int FsdpErrorWorldRank(void) { return g_world_rank; }

const char *FsdpErrorLastMessage(void) { return g_last_message; }

const char *FsdpErrorThreadMessage(void) { return t_thread_message; }

void FsdpErrorClearThreadMessage(void) { t_thread_message[0] = '\0'; }

const char *FsdpErrorName(int code)
{
  static const char *names[FSDP_ERR_NCODES] = {
      "success",     "usage error",      "out of memory",
      "MPI error",   "HDF5 error",       "I/O error",
      "CUDA error",  "NCCL error",       "state error",
      "internal error"};
  if (code < 0 || code >= FSDP_ERR_NCODES) return "unknown error";
  return names[code];
}

int FsdpExitStatus(int code)
{
  if (code == FSDP_SUCCESS) return 0;
  if (code == FSDP_ERR_USAGE) return 2;
  return 1;
}

int FsdpErrorRaise(const char *file, int line, const char *func, int code,
                   const char *fmt, ...)
{
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_last_lock);
  memcpy(g_last_message, msg, sizeof g_last_message);
  pthread_mutex_unlock(&g_last_lock);
  memcpy(t_thread_message, msg, sizeof t_thread_message);
  if (code == FSDP_ERR_USAGE) {
    /* [Note: usage errors] every rank detects it; one prints it. */
    if (g_world_rank == 0) fprintf(stderr, "fsdp: error: %s\n", msg);
  } else {
    fprintf(stderr, "[fsdp rank %d %s:%d] %s: %s\n    at %s() %s:%d\n",
            g_world_rank, g_host, (int)getpid(), FsdpErrorName(code), msg,
            func, file, line);
  }
  fflush(stderr);
  return code;
}

int FsdpErrorTrace(const char *file, int line, const char *func, int code)
{
  if (code != FSDP_ERR_USAGE) {
    fprintf(stderr, "[fsdp rank %d %s:%d]     from %s() %s:%d\n", g_world_rank,
            g_host, (int)getpid(), func, file, line);
    fflush(stderr);
  }
  return code;
}

void FsdpWarn(int only_rank0, const char *fmt, ...)
{
  if (only_rank0 && g_world_rank != 0) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (only_rank0)
    fprintf(stderr, "fsdp: warning: %s\n", msg);
  else
    fprintf(stderr, "[fsdp rank %d %s] warning: %s\n", g_world_rank, g_host,
            msg);
  fflush(stderr);
}

void FsdpMsgf(char *buf, size_t size, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
}

int FsdpErrorAddAbortHook(FsdpAbortHook hook, void *ctx)
{
  if (!hook) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpErrorAddAbortHook: NULL hook");
  pthread_mutex_lock(&g_abort_lock);
  if (g_nabort_hooks == MAX_ABORT_HOOKS) {
    pthread_mutex_unlock(&g_abort_lock);
    FSDP_ERROR(FSDP_ERR_INTERNAL, "more than %d abort hooks", MAX_ABORT_HOOKS);
  }
  g_abort_hooks[g_nabort_hooks].hook = hook;
  g_abort_hooks[g_nabort_hooks].ctx = ctx;
  g_nabort_hooks++;
  pthread_mutex_unlock(&g_abort_lock);
  return FSDP_SUCCESS;
}

void FsdpErrorRemoveAbortHook(FsdpAbortHook hook, void *ctx)
{
  pthread_mutex_lock(&g_abort_lock);
  for (int i = g_nabort_hooks - 1; i >= 0; i--)
    if (g_abort_hooks[i].hook == hook && g_abort_hooks[i].ctx == ctx) {
      memmove(&g_abort_hooks[i], &g_abort_hooks[i + 1],
              (size_t)(g_nabort_hooks - i - 1) * sizeof g_abort_hooks[0]);
      g_nabort_hooks--;
      break;
    }
  pthread_mutex_unlock(&g_abort_lock);
}

_Noreturn void FsdpErrorAbortJob(int code)
{
  static atomic_flag ending = ATOMIC_FLAG_INIT;
  int status = FsdpExitStatus(code);
  if (status == 0) status = 1; /* ending the job is never a success */
  if (atomic_flag_test_and_set(&ending)) {
    /* another thread of this rank is already ending the job */
    for (;;) {
      struct timespec ts = {1, 0};
      nanosleep(&ts, NULL);
    }
  }
  /* The hooks run on a copy, without the lock: one might add or remove. */
  pthread_mutex_lock(&g_abort_lock);
  int n = g_nabort_hooks;
  AbortHook hooks[MAX_ABORT_HOOKS];
  memcpy(hooks, g_abort_hooks, sizeof hooks);
  pthread_mutex_unlock(&g_abort_lock);
  for (int i = n - 1; i >= 0; i--) hooks[i].hook(hooks[i].ctx);
  fflush(stdout);
  fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, status);
  _exit(status);
}
