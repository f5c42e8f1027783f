/* preempt.c: graceful preemption (see preempt.h, [Note: preemption]). */
#include "driver/preempt.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"

static const struct {
  const char *name;
  int signo;
} kPreemptSignals[] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP},
};
enum { kNumSignals = (int)(sizeof kPreemptSignals / sizeof kPreemptSignals[0]) };

/* The signal recorded by the handler (0: none).  Only the handler writes
 * it; the trainer reads it at step boundaries. */
static volatile sig_atomic_t g_pending = 0;

static void OnSignal(int signo)
{
  /* async-signal-safe: one store; the first signal is the one reported */
  if (!g_pending) g_pending = signo;
}

int FsdpPreemptOptionsFromDb(FsdpOpts db, FsdpPreemptOptions *o)
{
  const char *v = NULL;
  o->mask = 0;
  FSDP_CALL(FsdpOptsGetString(db, "Preemption", "preempt_signals",
                              "signals that preempt the run: every rank finishes its step, a "
                              "checkpoint is written to -checkpoint_dir and fsdp-train exits with "
                              "status 75; comma-separated from USR1,USR2,TERM,INT,HUP, or none",
                              "none", &v));
  if (!v || !v[0] || strcasecmp(v, "none") == 0) return FSDP_SUCCESS;
  const char *p = v;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char word[16] = "";
    int found = -1;
    if (n < sizeof word) {
      memcpy(word, p, n);
      word[n] = '\0';
      const char *w = word;
      if (strncasecmp(w, "SIG", 3) == 0) w += 3;
      for (int i = 0; i < kNumSignals; i++)
        if (strcasecmp(w, kPreemptSignals[i].name) == 0) found = i;
    }
    if (found < 0)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "option -preempt_signals: '%.*s' in '%s' is no signal this option takes: expected "
                 "none or a comma-separated list of USR1, USR2, TERM, INT, HUP",
                 (int)n, p, v);
    o->mask |= 1u << found;
    p = end ? end + 1 : p + n;
  }
  return FSDP_SUCCESS;
}

int FsdpPreemptInstall(const FsdpPreemptOptions *o)
{
  for (int i = 0; i < kNumSignals; i++) {
    if (!(o->mask & (1u << i))) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    /* no EINTR inside MPI, HDF5 or the checkpoint's file calls */
    sa.sa_flags = SA_RESTART;
    if (sigaction(kPreemptSignals[i].signo, &sa, NULL) != 0)
      FSDP_ERROR(FSDP_ERR_IO, "installing the handler of SIG%s (-preempt_signals) failed: %s",
                 kPreemptSignals[i].name, strerror(errno));
  }
  return FSDP_SUCCESS;
}

int FsdpPreemptAgree(MPI_Comm comm, int *signo)
{
  int mine = (int)g_pending;
  FSDP_CALL_MPI(MPI_Allreduce(&mine, signo, 1, MPI_INT, MPI_MAX, comm));
  return FSDP_SUCCESS;
}

const char *FsdpPreemptSignalName(int signo)
{
  for (int i = 0; i < kNumSignals; i++)
    if (kPreemptSignals[i].signo == signo) return kPreemptSignals[i].name;
  return "?";
}
