/* test_stream: the ordered work queue and its events (lib/comm/stream.h).
 *
 * Every rank runs the same single-process checks (the stream is rank-local);
 * the world size only adds load.  Timing checks assert lower bounds only,
 * since ranks share oversubscribed cores. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/error.h"
#include "base/init.h"
#include "comm/stream.h"
#include "testutil.h"

static void sleep_s(double s)
{
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- a log written by tasks on the stream thread ------------------------ */

#define LOG_MAX 1024
typedef struct {
  int ids[LOG_MAX];
  int n;
} TaskLog;

typedef struct {
  TaskLog *log;
  int id;
  double sleep_s;   /* > 0: sleep before logging */
  int fail_code;    /* != 0: fail with this code instead of logging */
  /* ring test: what the task sees of the issuer */
  atomic_int *enqueued; /* tasks whose enqueue has returned */
  int capacity;
  int *overrun;     /* set if more than capacity tasks were outstanding */
  unsigned char pattern[120];
} LogArg;

static int task_log(void *p)
{
  LogArg *a = (LogArg *)p;
  if (a->sleep_s > 0) sleep_s(a->sleep_s);
  if (a->enqueued) {
    /* While task id runs, tasks 0..id-1 completed, so at most id + capacity
     * tasks can have been enqueued (the ring holds capacity). */
    int e = atomic_load(a->enqueued);
    if (e > a->id + a->capacity) *a->overrun = e;
  }
  for (int i = 0; i < (int)sizeof a->pattern; i++)
    if (a->pattern[i] != (unsigned char)(a->id * 7 + i)) return FSDP_ERR_INTERNAL;
  if (a->fail_code)
    FSDP_ERROR(a->fail_code, "task %d fails on purpose (expected by the test)", a->id);
  if (a->log->n < LOG_MAX) a->log->ids[a->log->n++] = a->id;
  return FSDP_SUCCESS;
}

static LogArg log_arg(TaskLog *log, int id)
{
  LogArg a;
  memset(&a, 0, sizeof a);
  a.log = log;
  a.id = id;
  for (int i = 0; i < (int)sizeof a.pattern; i++) a.pattern[i] = (unsigned char)(id * 7 + i);
  return a;
}

static int check_log_prefix(const TaskLog *log, int n, const char *what)
{
  int bad = 0;
  CHECK(log->n == n, "%s: %d tasks logged, expected %d", what, log->n, n);
  for (int i = 0; i < log->n && i < n; i++)
    if (log->ids[i] != i) {
      if (bad < 5) CHECK(log->ids[i] == i, "%s: log[%d] = %d, expected %d", what, i, log->ids[i], i);
      bad++;
    }
  return bad;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_order_and_monotone(void)
{
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("order", 16, &s));
  enum { N = 200 };
  static TaskLog log;
  memset(&log, 0, sizeof log);
  FsdpEvent ev[N];
  for (int i = 0; i < N; i++) {
    LogArg a = log_arg(&log, i);
    a.sleep_s = (i % 17 == 0) ? 2e-3 : 0.0;
    TCALL(FsdpStreamEnqueue(s, "log", task_log, &a, sizeof a, &ev[i]));
    CHECK(ev[i].stream == s && ev[i].seq == (uint64_t)(i + 1),
          "event %d = {%p, %llu}, expected seq %d", i, (void *)ev[i].stream,
          (unsigned long long)ev[i].seq, i + 1);
  }
  /* Completion is monotone: query later events first; an event found done
   * means every earlier one, queried afterwards, must be done too. */
  int violations = 0, rounds = 0, all_done = 0;
  while (!all_done && rounds < 100000) {
    rounds++;
    int seen_done = 0;
    all_done = 1;
    for (int i = N - 1; i >= 0; i--) {
      int d = -1;
      TCALL(FsdpEventQuery(ev[i], &d));
      if (d != 0 && d != 1) violations++;
      if (seen_done && !d) violations++;
      if (d) seen_done = 1;
      else all_done = 0;
    }
  }
  CHECK(violations == 0, "%d non-monotone event completions seen", violations);
  TCALL(FsdpEventWait(ev[N - 1]));
  check_log_prefix(&log, N, "issue order");
  /* Waiting again on old events is fine and returns at once. */
  CHECK(FsdpEventWait(ev[0]) == FSDP_SUCCESS, "re-wait on a completed event");
  TCALL(FsdpStreamDestroy(&s));
  CHECK(s == NULL, "destroy sets the handle to NULL");
  TCALL(FsdpStreamDestroy(&s)); /* accepts NULL */
}

/* A task that holds the stream until the main thread opens the gate (or a
 * 10 s safety timeout, so a broken query cannot hang the test forever). */
typedef struct {
  atomic_int *gate;
  atomic_int *ran;
} GateArg;

static int task_gate(void *p)
{
  GateArg *a = (GateArg *)p;
  double t0 = FsdpWallTime();
  while (!atomic_load(a->gate) && FsdpWallTime() - t0 < 10.0) sleep_s(1e-4);
  atomic_store(a->ran, 1);
  return FSDP_SUCCESS;
}

static void test_query_nonblocking(void)
{
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("query", 4, &s));
  atomic_int gate = 0, ran = 0;
  GateArg a = {&gate, &ran};
  FsdpEvent ev;
  TCALL(FsdpStreamEnqueue(s, "gate", task_gate, &a, sizeof a, &ev));
  double t0 = FsdpWallTime();
  int done = -1;
  TCALL(FsdpEventQuery(ev, &done));
  double dt = FsdpWallTime() - t0;
  CHECK(done == 0, "query of a task held at its gate says done = %d", done);
  CHECK(dt < 1.0, "query took %.3f s: it must not block", dt);
  CHECK(atomic_load(&ran) == 0, "gated task finished before the gate opened");
  atomic_store(&gate, 1);
  TCALL(FsdpEventWait(ev));
  TCALL(FsdpEventQuery(ev, &done));
  CHECK(done == 1, "query after wait says done = %d", done);
  CHECK(atomic_load(&ran) == 1, "wait returned before the task ran");
  /* The null event is always complete. */
  done = 0;
  TCALL(FsdpEventQuery(FSDP_EVENT_NULL, &done));
  CHECK(done == 1, "null event not complete");
  CHECK(FsdpEventWait(FSDP_EVENT_NULL) == FSDP_SUCCESS, "wait on the null event");
  TCALL(FsdpStreamDestroy(&s));
}

static void test_ring_wrap(void)
{
  enum { CAP = 4, N = 100 };
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("ring", CAP, &s));
  static TaskLog log;
  memset(&log, 0, sizeof log);
  atomic_int enqueued = 0;
  int overrun = 0;
  FsdpEvent ev[N];
  for (int i = 0; i < N; i++) {
    LogArg a = log_arg(&log, i);
    a.enqueued = &enqueued;
    a.capacity = CAP;
    a.overrun = &overrun;
    a.sleep_s = (i % 10 == 0) ? 5e-3 : 0.0; /* let the ring fill up */
    TCALL(FsdpStreamEnqueue(s, "ring", task_log, &a, sizeof a, &ev[i]));
    /* Scribble over the caller's copy: the slot must hold its own. */
    memset(&a, 0xab, sizeof a);
    atomic_fetch_add(&enqueued, 1);
  }
  /* Wait in a scrambled order: the result must not depend on it. */
  for (int k = 0; k < N; k++) TCALL(FsdpEventWait(ev[(k * 37) % N]));
  check_log_prefix(&log, N, "ring of 4, 100 tasks");
  CHECK(overrun == 0, "%d tasks were enqueued while only %d could be queued", overrun, CAP);
  /* Blocking on a full ring counts as waiting: ten 5 ms sleeps went by
   * with the issuer blocked behind 4 slots. */
  CHECK(FsdpStreamWaitSeconds(s) > 0.0, "blocked enqueues were not counted as waiting");
  TCALL(FsdpStreamDestroy(&s));
}

/* FSDP_STREAM_FAIL_RECORD: the failure stays on this rank (the default,
 * ending the job, is tested by test_stream_fault.sh). */
static void test_failure(void)
{
  enum { N = 10, FAIL = 5 };
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("fail", 4, &s));
  TCALL(FsdpStreamSetFailurePolicy(s, FSDP_STREAM_FAIL_RECORD));
  static TaskLog log;
  memset(&log, 0, sizeof log);
  FsdpEvent ev[N + 1];
  for (int i = 0; i < N; i++) {
    LogArg a = log_arg(&log, i);
    if (i == FAIL) a.fail_code = FSDP_ERR_IO;
    TCALL(FsdpStreamEnqueue(s, "maybe-fail", task_log, &a, sizeof a, &ev[i]));
  }
  /* Wait out of order: a later event first. */
  int e9 = FsdpEventWait(ev[N - 1]);
  CHECK(e9 == FSDP_ERR_IO, "wait on event %d after the failure returned %d, expected %d",
        N - 1, e9, FSDP_ERR_IO);
  CHECK(strstr(FsdpErrorLastMessage(), "task 5 fails on purpose") != NULL,
        "last message is '%s'", FsdpErrorLastMessage());
  for (int i = 0; i < N; i++) {
    int e = FsdpEventWait(ev[i]);
    int want = i < FAIL ? FSDP_SUCCESS : FSDP_ERR_IO;
    CHECK(e == want, "wait on event %d returned %d, expected %d", i, e, want);
  }
  /* Tasks after the failing one were skipped: only 0..FAIL-1 logged. */
  check_log_prefix(&log, FAIL, "skip after failure");
  /* The stream stays failed: new tasks are skipped, waits report it. */
  LogArg a = log_arg(&log, 99);
  TCALL(FsdpStreamEnqueue(s, "after", task_log, &a, sizeof a, &ev[N]));
  int e = FsdpEventWait(ev[N]);
  CHECK(e == FSDP_ERR_IO, "wait on a task issued after the failure returned %d", e);
  CHECK(FsdpStreamSynchronize(s) == FSDP_ERR_IO, "synchronize after a failure must fail");
  CHECK(log.n == FAIL, "task issued after the failure ran (log has %d)", log.n);
  TCALL(FsdpStreamDestroy(&s));
}

static void test_wait_seconds(void)
{
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("wait", 4, &s));
  static TaskLog log;
  memset(&log, 0, sizeof log);
  CHECK(FsdpStreamWaitSeconds(s) == 0.0, "fresh stream waited %g s", FsdpStreamWaitSeconds(s));
  const double nap = 0.2;
  LogArg a = log_arg(&log, 0);
  a.sleep_s = nap;
  FsdpEvent ev;
  TCALL(FsdpStreamEnqueue(s, "nap", task_log, &a, sizeof a, &ev));
  TCALL(FsdpEventWait(ev));
  double w1 = FsdpStreamWaitSeconds(s);
  /* Lower bound only: the caller entered the wait right after enqueue. */
  CHECK(w1 >= nap - 0.05, "waited %.3f s on a %.3f s task", w1, nap);
  /* Waiting on a completed event adds (almost) nothing. */
  TCALL(FsdpEventWait(ev));
  double w2 = FsdpStreamWaitSeconds(s);
  CHECK(w2 >= w1 && w2 - w1 < 0.05, "a completed wait added %.3f s", w2 - w1);
  /* Synchronize accumulates too. */
  a = log_arg(&log, 1);
  a.sleep_s = nap;
  TCALL(FsdpStreamEnqueue(s, "nap", task_log, &a, sizeof a, NULL));
  TCALL(FsdpStreamSynchronize(s));
  double w3 = FsdpStreamWaitSeconds(s);
  CHECK(w3 - w2 >= nap - 0.05, "synchronize waited %.3f s on a %.3f s task", w3 - w2, nap);
  check_log_prefix(&log, 2, "wait tasks");
  TCALL(FsdpStreamDestroy(&s));
}

typedef struct {
  int n;
  uint64_t seq[LOG_MAX];
  int id[LOG_MAX];
  int bad_label, bad_times;
} RecLog;

static void recorder(void *ctx, const FsdpStreamTaskTime *t, const void *arg)
{
  RecLog *r = (RecLog *)ctx;
  const LogArg *a = (const LogArg *)arg;
  if (r->n >= LOG_MAX) return;
  r->seq[r->n] = t->seq;
  r->id[r->n] = a->id;
  if (!t->label || strcmp(t->label, "rec") != 0) r->bad_label++;
  if (!(t->issue_s <= t->start_s && t->start_s <= t->end_s)) r->bad_times++;
  r->n++;
}

static void test_recorder(void)
{
  enum { N = 50 };
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("rec", 8, &s));
  static TaskLog log;
  static RecLog rec;
  memset(&log, 0, sizeof log);
  memset(&rec, 0, sizeof rec);
  TCALL(FsdpStreamSetRecorder(s, recorder, &rec));
  for (int i = 0; i < N; i++) {
    LogArg a = log_arg(&log, i);
    a.sleep_s = (i % 10 == 0) ? 1e-3 : 0.0;
    TCALL(FsdpStreamEnqueue(s, "rec", task_log, &a, sizeof a, NULL));
  }
  TCALL(FsdpStreamSynchronize(s));
  CHECK(rec.n == N, "recorder called %d times for %d tasks", rec.n, N);
  int bad = 0;
  for (int i = 0; i < rec.n; i++)
    if (rec.seq[i] != (uint64_t)(i + 1) || rec.id[i] != i) {
      if (bad++ < 5)
        CHECK(0, "recorder call %d: seq %llu id %d, expected seq %d id %d", i,
              (unsigned long long)rec.seq[i], rec.id[i], i + 1, i);
    }
  CHECK(rec.bad_label == 0, "%d records with a wrong label", rec.bad_label);
  CHECK(rec.bad_times == 0, "%d records with issue <= start <= end violated", rec.bad_times);
  /* Removing the recorder stops the calls. */
  TCALL(FsdpStreamSetRecorder(s, NULL, NULL));
  LogArg a = log_arg(&log, N);
  TCALL(FsdpStreamEnqueue(s, "rec", task_log, &a, sizeof a, NULL));
  TCALL(FsdpStreamSynchronize(s));
  CHECK(rec.n == N, "recorder called after removal (%d calls)", rec.n);
  TCALL(FsdpStreamDestroy(&s));
}

static void test_destroy_drains(void)
{
  enum { N = 20 };
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("drain", 32, &s));
  static TaskLog log;
  memset(&log, 0, sizeof log);
  for (int i = 0; i < N; i++) {
    LogArg a = log_arg(&log, i);
    a.sleep_s = 2e-3;
    TCALL(FsdpStreamEnqueue(s, "drain", task_log, &a, sizeof a, NULL));
  }
  TCALL(FsdpStreamDestroy(&s)); /* at once: the tasks are still pending */
  check_log_prefix(&log, N, "destroy drains");
}

static void test_bad_use(void)
{
  FsdpStream s = NULL;
  int e = FsdpStreamCreate("bad", 0, &s);
  CHECK(e == FSDP_ERR_USAGE && s == NULL, "capacity 0 gave %d", e);
  TCALL(FsdpStreamCreate("bad", 2, &s));
  unsigned char big[FSDP_STREAM_ARG_BYTES + 1] = {0};
  FsdpEvent ev = {s, 7};
  e = FsdpStreamEnqueue(s, "big", task_log, big, sizeof big, &ev);
  CHECK(e != FSDP_SUCCESS, "an argument of %zu bytes was accepted", sizeof big);
  CHECK(ev.stream == NULL, "failed enqueue left a non-null event");
  /* An event the stream never issued is a state error, not a hang. */
  e = FsdpEventWait((FsdpEvent){s, 3});
  CHECK(e == FSDP_ERR_STATE, "wait on an unissued event returned %d", e);
  CHECK(FsdpStreamSynchronize(s) == FSDP_SUCCESS, "synchronize of an empty stream");
  TCALL(FsdpStreamDestroy(&s));
}

/* ---- [Note: one thread per stream] (stream.c) ------------------------------ */

#ifdef _OPENMP
typedef struct {
  int max_threads; /* omp_get_max_threads() on the thread */
  int team;        /* the size of a team the thread opened */
} TeamSeen;

static void team_seen(TeamSeen *t)
{
  t->max_threads = omp_get_max_threads();
  int n = 0;
#pragma omp parallel
  {
#pragma omp single
    n = omp_get_num_threads();
  }
  t->team = n;
}

static void *plain_thread(void *p)
{
  team_seen((TeamSeen *)p);
  return NULL;
}

static int task_team(void *p)
{
  team_seen(*(TeamSeen **)p);
  return FSDP_SUCCESS;
}
#endif

/* A task on a stream opens teams of one thread, whatever OMP_NUM_THREADS
 * says; a plain thread of the same process gets OMP_NUM_THREADS.  Under
 * ctest's OMP_NUM_THREADS=1 that contrast is empty, so the test entry
 * stream_omp runs this program with OMP_NUM_THREADS=3 and
 * FSDP_TEST_EXPECT_OMP=3 (asserting that the plain thread does see 3). */
static void test_omp_team(void)
{
#ifdef _OPENMP
  TeamSeen plain = {0, 0}, task = {0, 0};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, plain_thread, &plain) == 0, "pthread_create");
  pthread_join(th, NULL);
  const char *expect = getenv("FSDP_TEST_EXPECT_OMP");
  if (expect && *expect)
    CHECK(plain.max_threads == atoi(expect) && plain.team == atoi(expect),
          "a plain thread sees %d threads (team of %d), FSDP_TEST_EXPECT_OMP=%s", plain.max_threads,
          plain.team, expect);
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("omp", 4, &s));
  TeamSeen *pt = &task;
  TCALL(FsdpStreamEnqueue(s, "team", task_team, &pt, sizeof pt, NULL));
  TCALL(FsdpStreamSynchronize(s));
  CHECK(task.max_threads == 1 && task.team == 1,
        "a stream task sees %d OpenMP threads and opened a team of %d (must be 1: the compute "
        "thread's teams use the cores; a plain thread sees %d)",
        task.max_threads, task.team, plain.max_threads);
  CHECK(FsdpStreamThreadTeamLimit(s) == 1, "stream team limit %d, expected 1",
        FsdpStreamThreadTeamLimit(s));
  TCALL(FsdpStreamDestroy(&s));
#endif
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  test_order_and_monotone();
  test_query_nonblocking();
  test_ring_wrap();
  test_failure();
  test_wait_seconds();
  test_recorder();
  test_destroy_drains();
  test_bad_use();
  test_omp_team();
  int status = test_finish("test_stream");
  TCALL(FsdpFinalize());
  return status;
}
