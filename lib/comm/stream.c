/* stream.c: ordered work queue with events (see stream.h).
 *
 * [Note: stream ring] A stream is a fixed ring of `capacity` slots and one
 * thread.  Sequence numbers start at 1 (0 is "nothing", so the null event
 * and an event taken before any task are complete).  Task seq lives in slot
 * (seq - 1) % capacity.  Two counters, both under the mutex, describe the
 * whole state: issued (last seq enqueued) and completed (last seq that has
 * run or been skipped).  The thread runs completed + 1 while
 * completed < issued; a slot is free again only once its task *completed*
 * (not merely started), so the running task's argument bytes stay put while
 * it runs; enqueue therefore blocks while issued - completed == capacity.
 * An event {stream, seq} is complete when completed >= seq: completion is
 * monotone because tasks finish in issue order.  A failing task ends the
 * job from the stream thread ([Note: a failed task ends the job] in
 * stream.h), except under FSDP_STREAM_FAIL_RECORD: there the first failing
 * task records (error, error_seq); later tasks are skipped, and a wait on
 * an event with seq >= error_seq returns the error.
 *
 * Two condition variables: `work` wakes the thread (new task or stop),
 * `done` wakes waiters and blocked enqueuers (a task completed).  No
 * allocation happens after create, so the stream never touches the
 * (unlocked) tagged-memory counters from its thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
  FsdpStreamFn fn;
  const char *label; /* the task's kind in failure messages */
  int unit;          /* identity: see FsdpStreamSetTaskIdentity */
  int64_t step;
  double issue_s;
  /* Aligned so that a task may cast its argument to any struct type. */
  alignas(max_align_t) unsigned char arg[FSDP_STREAM_ARG_BYTES];
} StreamSlot;

struct FsdpStream_ {
  char name[64];
  int capacity;
  StreamSlot *slots; /* [capacity] */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  uint64_t issued, completed; /* see [Note: stream ring] */
  int error;                  /* first failure; FSDP_SUCCESS if none */
  uint64_t error_seq;
  int stop;
  FsdpStreamFailurePolicy on_failure;
  int tag_unit;               /* identity of the next tasks (issuing thread) */
  int64_t tag_step;
  double wait_s;              /* time callers spent blocked */
  atomic_int omp_threads;     /* [Note: one thread per stream]: the thread's team limit */
  FsdpStreamRecorder rec;
  void *rec_ctx;
};

double FsdpWallTime(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- [Note: FSDP_FAULT] (test only) ---------------------------------------- */

typedef struct {
  int armed; /* a stream: entry was given */
  int rank;
  int64_t step;
  int unit;  /* -1: any */
  char kind[32]; /* "": any */
  char text[128];
} StreamFault;

/* Parsed once (pthread_once) and read-only afterwards, so stream threads
 * may read it while another stream is being created. */
static StreamFault g_fault;
static StreamFault g_skip; /* the skip: entry (collectives not issued) */
static atomic_int g_skip_fired;
static char g_fault_bad[128]; /* the malformed entry, "" if none */
static pthread_once_t g_fault_once = PTHREAD_ONCE_INIT;
static atomic_int g_fault_fired;

static void FaultParseOnce(void)
{
  const char *env = getenv("FSDP_FAULT");
  if (!env || !*env) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", env);
  char *save = NULL;
  for (char *entry = strtok_r(buf, ",", &save); entry; entry = strtok_r(NULL, ",", &save)) {
    /* stream: fail a task; skip: do not issue a collective (coll.c) */
    int skip = strncmp(entry, "skip:", 5) == 0;
    if (!skip && strncmp(entry, "stream:", 7) != 0) continue; /* another fault site */
    StreamFault f = {1, -1, -1, -1, "", ""};
    snprintf(f.text, sizeof f.text, "%s", entry);
    char *save2 = NULL;
    int bad = 0;
    for (char *kv = strtok_r(entry + (skip ? 5 : 7), ":", &save2); kv && !bad;
         kv = strtok_r(NULL, ":", &save2)) {
      char *end = NULL;
      if (strncmp(kv, "rank=", 5) == 0) {
        long v = strtol(kv + 5, &end, 10);
        bad = end == kv + 5 || *end || v < 0;
        f.rank = (int)v;
      } else if (strncmp(kv, "step=", 5) == 0) {
        long long v = strtoll(kv + 5, &end, 10);
        bad = end == kv + 5 || *end || v < 1;
        f.step = v;
      } else if (strncmp(kv, "unit=", 5) == 0) {
        long v = strtol(kv + 5, &end, 10);
        bad = end == kv + 5 || *end || v < 0;
        f.unit = (int)v;
      } else if (strncmp(kv, "kind=", 5) == 0 && kv[5] && strlen(kv + 5) < sizeof f.kind) {
        snprintf(f.kind, sizeof f.kind, "%s", kv + 5);
      } else {
        bad = 1;
      }
    }
    if (bad || f.rank < 0 || f.step < 1) {
      snprintf(g_fault_bad, sizeof g_fault_bad, "%s", f.text);
      return;
    }
    if (skip)
      g_skip = f;
    else
      g_fault = f;
  }
}

/* Every stream checks FSDP_FAULT at create, so a malformed entry stops
 * the run at setup on every rank. */
static int FaultCheck(void)
{
  pthread_once(&g_fault_once, FaultParseOnce);
  if (g_fault_bad[0])
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FSDP_FAULT entry '%s' (a test-only variable): expected "
               "stream:rank=R:step=S[:kind=K][:unit=U] or skip:rank=R:step=S[:kind=K][:unit=U] "
               "with R >= 0 and S >= 1",
               g_fault_bad);
  return FSDP_SUCCESS;
}

/* Whether the task in slot is the one FSDP_FAULT asks to fail (once). */
static int FaultHits(const StreamSlot *slot)
{
  if (!g_fault.armed || slot->step != g_fault.step || FsdpErrorWorldRank() != g_fault.rank)
    return 0;
  if (g_fault.unit >= 0 && slot->unit != g_fault.unit) return 0;
  if (g_fault.kind[0] && strcmp(slot->label, g_fault.kind) != 0) return 0;
  return atomic_exchange(&g_fault_fired, 1) == 0;
}

static int FaultRaise(const StreamSlot *slot)
{
  FSDP_ERROR(FSDP_ERR_INTERNAL, "fault injected by FSDP_FAULT=%s (test only): task '%s' did not run",
             g_fault.text, slot->label);
}

/* [Note: a failed task ends the job] Called on the stream thread, nothing
 * locked; does not return. */
static _Noreturn void StreamEndJob(FsdpStream s, const StreamSlot *slot, int err)
{
  char unit[32] = "no unit", step[32] = "no step";
  if (slot->unit >= 0) snprintf(unit, sizeof unit, "unit %d", slot->unit);
  if (slot->step > 0) snprintf(step, sizeof step, "step %lld", (long long)slot->step);
  const char *cause = FsdpErrorThreadMessage();
  FsdpErrorRaise(__FILE__, __LINE__, __func__, err,
                 "rank %d: task %s (%s, %s) on the '%s' communication stream failed: %s: %s; "
                 "ending the job, since the other ranks would wait for it forever",
                 FsdpErrorWorldRank(), slot->label, unit, step, s->name, FsdpErrorName(err),
                 cause[0] ? cause : "(the task gave no message)");
  FsdpErrorAbortJob(err);
}

/* [Note: one thread per stream] A stream's tasks run beside the compute
 * thread's OpenMP teams, which already use every core of the rank: a task
 * that opened its own team (the casts of dtype.c, the scaling of
 * coll_mpi.c: `omp parallel for` above 64 Ki elements) would put up to
 * OMP_NUM_THREADS more busy threads on those cores, each team member then
 * waiting for the slowest one the OS preempted.  So the stream thread
 * limits its own teams to one thread (nthreads-var is per thread: the
 * compute thread's teams are untouched); every task runs single-threaded.
 * The limit is read back into omp_threads for the test that checks it. */
static void StreamLimitTeams(FsdpStream s)
{
#ifdef _OPENMP
  omp_set_num_threads(1);
  atomic_store(&s->omp_threads, omp_get_max_threads());
#else
  atomic_store(&s->omp_threads, 1);
#endif
}

int FsdpStreamThreadTeamLimit(FsdpStream s)
{
  return s ? atomic_load(&s->omp_threads) : 0;
}

static void *StreamMain(void *p)
{
  FsdpStream s = (FsdpStream)p;
  StreamLimitTeams(s);
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->completed == s->issued && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    if (s->completed == s->issued) break; /* stop requested and drained */
    uint64_t seq = s->completed + 1;
    StreamSlot *slot = &s->slots[(seq - 1) % (uint64_t)s->capacity];
    int skip = s->error != FSDP_SUCCESS;
    FsdpStreamRecorder rec = s->rec;
    void *rec_ctx = s->rec_ctx;
    FsdpStreamFailurePolicy on_failure = s->on_failure;
    pthread_mutex_unlock(&s->mu);

    /* The slot is ours until completed moves past seq (enqueue never
     * reuses it before), so the task runs without the lock. */
    int err = FSDP_SUCCESS;
    if (!skip) {
      FsdpErrorClearThreadMessage();
      double t0 = FsdpWallTime();
      err = FaultHits(slot) ? FaultRaise(slot) : slot->fn(slot->arg);
      double t1 = FsdpWallTime();
      if (rec) {
        FsdpStreamTaskTime t = {slot->label, slot->issue_s, t0, t1, seq};
        rec(rec_ctx, &t, slot->arg);
      }
      if (err != FSDP_SUCCESS && on_failure == FSDP_STREAM_FAIL_ABORT_JOB)
        StreamEndJob(s, slot, err);
    }

    pthread_mutex_lock(&s->mu);
    if (err != FSDP_SUCCESS && s->error == FSDP_SUCCESS) {
      s->error = err;
      s->error_seq = seq;
    }
    s->completed = seq;
    pthread_cond_broadcast(&s->done);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int FsdpStreamCreate(const char *name, int capacity, FsdpStream *out)
{
  if (!out) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpStreamCreate: NULL output handle");
  *out = NULL;
  if (capacity < 1)
    FSDP_ERROR(FSDP_ERR_USAGE, "stream '%s': capacity must be at least 1 (got %d)",
               name ? name : "?", capacity);
  FSDP_CALL(FaultCheck());
  FsdpStream s = calloc(1, sizeof *s);
  FSDP_CHECK_ALLOC(s, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name ? name : "stream");
  s->capacity = capacity;
  s->on_failure = FSDP_STREAM_FAIL_ABORT_JOB;
  s->tag_unit = -1;
  s->slots = calloc((size_t)capacity, sizeof *s->slots);
  if (!s->slots) {
    free(s);
    FSDP_ERROR(FSDP_ERR_MEM, "stream '%s': out of memory for %d slots",
               name ? name : "?", capacity);
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  int rc = pthread_create(&s->thread, NULL, StreamMain, s);
  if (rc != 0) {
    pthread_cond_destroy(&s->done);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s->slots);
    free(s);
    FSDP_ERROR(FSDP_ERR_INTERNAL, "stream '%s': pthread_create failed: %s",
               name ? name : "?", strerror(rc));
  }
  *out = s;
  return FSDP_SUCCESS;
}

int FsdpStreamDestroy(FsdpStream *ps)
{
  if (!ps || !*ps) return FSDP_SUCCESS;
  FsdpStream s = *ps;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  /* The thread leaves only once completed == issued: pending tasks run. */
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->done);
  pthread_cond_destroy(&s->work);
  pthread_mutex_destroy(&s->mu);
  free(s->slots);
  free(s);
  *ps = NULL;
  return FSDP_SUCCESS;
}

int FsdpStreamEnqueue(FsdpStream s, const char *label, FsdpStreamFn fn,
                      const void *arg, size_t arg_bytes, FsdpEvent *ev)
{
  if (ev) *ev = FSDP_EVENT_NULL;
  if (!s || !fn) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpStreamEnqueue: NULL stream or task");
  if (arg_bytes > FSDP_STREAM_ARG_BYTES || (arg_bytes && !arg))
    FSDP_ERROR(FSDP_ERR_INTERNAL,
               "stream '%s': task '%s' argument of %zu bytes (at most %d)",
               s->name, label ? label : "?", arg_bytes, FSDP_STREAM_ARG_BYTES);
  double issue = FsdpWallTime();
  pthread_mutex_lock(&s->mu);
  if (s->stop) {
    pthread_mutex_unlock(&s->mu);
    FSDP_ERROR(FSDP_ERR_STATE, "stream '%s': enqueue after destroy began", s->name);
  }
  if (s->issued - s->completed >= (uint64_t)s->capacity) {
    /* Ring full: the caller is blocked like a waiter (exposed time). */
    while (s->issued - s->completed >= (uint64_t)s->capacity)
      pthread_cond_wait(&s->done, &s->mu);
    s->wait_s += FsdpWallTime() - issue;
  }
  uint64_t seq = s->issued + 1;
  StreamSlot *slot = &s->slots[(seq - 1) % (uint64_t)s->capacity];
  slot->fn = fn;
  slot->label = label ? label : "task";
  slot->unit = s->tag_unit;
  slot->step = s->tag_step;
  slot->issue_s = issue;
  if (arg_bytes) memcpy(slot->arg, arg, arg_bytes);
  s->issued = seq;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  if (ev) *ev = (FsdpEvent){s, seq};
  return FSDP_SUCCESS;
}

int FsdpStreamFaultSkip(FsdpStream s, const char *label)
{
  if (!g_skip.armed || !s || s->tag_step != g_skip.step || FsdpErrorWorldRank() != g_skip.rank)
    return 0;
  if (g_skip.unit >= 0 && s->tag_unit != g_skip.unit) return 0;
  if (g_skip.kind[0] && (!label || strcmp(label, g_skip.kind) != 0)) return 0;
  if (atomic_exchange(&g_skip_fired, 1) != 0) return 0;
  fprintf(stderr, "[fsdp rank %d] FSDP_FAULT=%s (test only): %s of unit %d, step %lld not issued\n",
          g_skip.rank, g_skip.text, label ? label : "task", s->tag_unit, (long long)s->tag_step);
  return 1;
}

void FsdpStreamTaskIdentity(FsdpStream s, int *unit, int64_t *step)
{
  if (unit) *unit = s ? s->tag_unit : -1;
  if (step) *step = s ? s->tag_step : 0;
}

void FsdpStreamSetTaskIdentity(FsdpStream s, int unit, int64_t step)
{
  if (!s) return;
  s->tag_unit = unit;
  s->tag_step = step;
}

int FsdpStreamSetFailurePolicy(FsdpStream s, FsdpStreamFailurePolicy policy)
{
  if (!s) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpStreamSetFailurePolicy: NULL stream");
  pthread_mutex_lock(&s->mu);
  s->on_failure = policy;
  pthread_mutex_unlock(&s->mu);
  return FSDP_SUCCESS;
}

/* Blocks until completed >= seq; returns the stream's error if it covers
 * seq.  Called with nothing locked. */
static int StreamWait(FsdpStream s, uint64_t seq)
{
  pthread_mutex_lock(&s->mu);
  if (seq > s->issued) {
    uint64_t issued = s->issued;
    pthread_mutex_unlock(&s->mu);
    FSDP_ERROR(FSDP_ERR_STATE, "stream '%s': wait on event %llu, but only %llu tasks were issued",
               s->name, (unsigned long long)seq, (unsigned long long)issued);
  }
  if (s->completed < seq) {
    double t0 = FsdpWallTime();
    while (s->completed < seq) pthread_cond_wait(&s->done, &s->mu);
    s->wait_s += FsdpWallTime() - t0;
  }
  int err = (s->error != FSDP_SUCCESS && s->error_seq <= seq) ? s->error : FSDP_SUCCESS;
  pthread_mutex_unlock(&s->mu);
  /* The failing task printed its own message (on the stream thread); here
   * we only add the waiter's line to the traceback. */
  if (err != FSDP_SUCCESS) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  return FSDP_SUCCESS;
}

int FsdpEventWait(FsdpEvent ev)
{
  if (!ev.stream || ev.seq == 0) return FSDP_SUCCESS;
  FSDP_CALL(StreamWait(ev.stream, ev.seq));
  return FSDP_SUCCESS;
}

int FsdpEventQuery(FsdpEvent ev, int *done)
{
  if (!done) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpEventQuery: NULL output");
  *done = 1;
  if (!ev.stream || ev.seq == 0) return FSDP_SUCCESS;
  FsdpStream s = ev.stream;
  pthread_mutex_lock(&s->mu);
  *done = s->completed >= ev.seq;
  pthread_mutex_unlock(&s->mu);
  return FSDP_SUCCESS;
}

int FsdpStreamSynchronize(FsdpStream s)
{
  if (!s) return FSDP_SUCCESS;
  pthread_mutex_lock(&s->mu);
  uint64_t seq = s->issued;
  pthread_mutex_unlock(&s->mu);
  if (seq == 0) return FSDP_SUCCESS;
  FSDP_CALL(StreamWait(s, seq));
  return FSDP_SUCCESS;
}

double FsdpStreamWaitSeconds(FsdpStream s)
{
  if (!s) return 0.0;
  pthread_mutex_lock(&s->mu);
  double w = s->wait_s;
  pthread_mutex_unlock(&s->mu);
  return w;
}

int FsdpStreamSetRecorder(FsdpStream s, FsdpStreamRecorder rec, void *ctx)
{
  if (!s) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpStreamSetRecorder: NULL stream");
  pthread_mutex_lock(&s->mu);
  s->rec = rec;
  s->rec_ctx = ctx;
  pthread_mutex_unlock(&s->mu);
  return FSDP_SUCCESS;
}
