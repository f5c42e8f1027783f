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
 * monotone because tasks finish in issue order.  The first failing task
 * records (error, error_seq); later tasks are skipped, and a wait on an
 * event with seq >= error_seq returns the error.
 *
 * Two condition variables: `work` wakes the thread (new task or stop),
 * `done` wakes waiters and blocked enqueuers (a task completed).  No
 * allocation happens after create, so the stream never touches the
 * (unlocked) tagged-memory counters from its thread.
 */
#include "stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"

typedef struct {
  FsdpStreamFn fn;
  const char *label;
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
  double wait_s;              /* time callers spent blocked */
  FsdpStreamRecorder rec;
  void *rec_ctx;
};

double FsdpWallTime(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *stream_main(void *p)
{
  FsdpStream s = (FsdpStream)p;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->completed == s->issued && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    if (s->completed == s->issued) break; /* stop requested and drained */
    uint64_t seq = s->completed + 1;
    StreamSlot *slot = &s->slots[(seq - 1) % (uint64_t)s->capacity];
    int skip = s->error != FSDP_SUCCESS;
    FsdpStreamRecorder rec = s->rec;
    void *rec_ctx = s->rec_ctx;
    pthread_mutex_unlock(&s->mu);

    /* The slot is ours until completed moves past seq (enqueue never
     * reuses it before), so the task runs without the lock. */
    int err = FSDP_SUCCESS;
    if (!skip) {
      double t0 = FsdpWallTime();
      err = slot->fn(slot->arg);
      double t1 = FsdpWallTime();
      if (rec) {
        FsdpStreamTaskTime t = {slot->label, slot->issue_s, t0, t1, seq};
        rec(rec_ctx, &t, slot->arg);
      }
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
  FsdpStream s = calloc(1, sizeof *s);
  FSDP_CHECK_ALLOC(s, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name ? name : "stream");
  s->capacity = capacity;
  s->slots = calloc((size_t)capacity, sizeof *s->slots);
  if (!s->slots) {
    free(s);
    FSDP_ERROR(FSDP_ERR_MEM, "stream '%s': out of memory for %d slots",
               name ? name : "?", capacity);
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  int rc = pthread_create(&s->thread, NULL, stream_main, s);
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
  slot->issue_s = issue;
  if (arg_bytes) memcpy(slot->arg, arg, arg_bytes);
  s->issued = seq;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  if (ev) *ev = (FsdpEvent){s, seq};
  return FSDP_SUCCESS;
}

/* Blocks until completed >= seq; returns the stream's error if it covers
 * seq.  Called with nothing locked. */
static int stream_wait(FsdpStream s, uint64_t seq)
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
  FSDP_CALL(stream_wait(ev.stream, ev.seq));
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
  FSDP_CALL(stream_wait(s, seq));
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
