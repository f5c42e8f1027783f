/* error.c: message printing for the error convention of error.h. */
#include "error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int g_world_rank = 0;
static char g_host[64] = "?";
static char g_last_message[2048];
/* the communication stream raises errors on its own thread */
static pthread_mutex_t g_last_lock = PTHREAD_MUTEX_INITIALIZER;

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
