/* trace.c: timeline recording and Chrome trace-event output (see trace.h). */
#include "comm/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"

const char *const FsdpPhaseNames[3] = {"forward", "backward", "optimizer"};
static const char *const kKindNames[FSDP_COLL_NKINDS] = {"all_gather", "reduce_scatter", "all_reduce"};

typedef struct {
  char name[48];
  const char *cat;
  int64_t step;
  int unit;
  double b, e;
} Span;

typedef struct {
  int lane;
  uint64_t seq;
  const char *kind;
  FsdpPhase phase;
  int64_t step;
  int unit;
  uint64_t bytes;
  double issue;
} Issue;

typedef struct {
  int lane;
  uint64_t seq;
  const char *label;
  double issue, b, e; /* issue: when the compute thread enqueued it */
} Done;

/* A communication stream's identity for the recorder (its ctx). */
typedef struct {
  struct FsdpTrace_ *t;
  int lane;
} Lane;

struct FsdpTrace_ {
  MPI_Comm comm;
  int enabled, rank;
  double t0; /* FsdpWallTime at creation */
  Span *spans;
  size_t nspans, cspans;
  Issue *issues;
  size_t nissues, cissues;
  Done *done; /* written by the stream thread */
  size_t ndone, cdone;
  double wait_s, busy_s; /* busy_s written by the stream threads */
  int max_in_flight;
  Lane lanes[FSDP_TRACE_LANES];
  pthread_mutex_t mu; /* the stream threads record concurrently */
};

/* Room for one more element in a growing list of the trace. */
#define GROW(arr, n, cap)                                                  \
  do {                                                                     \
    if (FsdpArrayReserve(&(arr), &(cap), (n) + 1, sizeof *(arr)))          \
      FSDP_ERROR(FSDP_ERR_MEM, "out of memory growing the trace");         \
  } while (0)

int FsdpTraceCreate(MPI_Comm comm, int enabled, FsdpTrace *out)
{
  *out = NULL;
  FsdpTrace t = calloc(1, sizeof *t);
  FSDP_CHECK_ALLOC(t, sizeof *t);
  t->comm = comm;
  t->enabled = enabled;
  pthread_mutex_init(&t->mu, NULL);
  for (int l = 0; l < FSDP_TRACE_LANES; l++) t->lanes[l] = (Lane){t, l};
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &t->rank));
  FSDP_CALL_MPI(MPI_Barrier(comm));
  t->t0 = FsdpWallTime();
  *out = t;
  return FSDP_SUCCESS;
}

int FsdpTraceDestroy(FsdpTrace *pt)
{
  if (!pt || !*pt) return FSDP_SUCCESS;
  FsdpTrace t = *pt;
  pthread_mutex_destroy(&t->mu);
  free(t->spans);
  free(t->issues);
  free(t->done);
  free(t);
  *pt = NULL;
  return FSDP_SUCCESS;
}

int FsdpTraceEnabled(FsdpTrace t) { return t && t->enabled; }
double FsdpTraceNow(FsdpTrace t) { return (FsdpWallTime() - t->t0) * 1e6; }

int FsdpTraceCompute(FsdpTrace t, const char *name, const char *cat, int64_t step, int unit,
                     double b, double e)
{
  if (!t || !t->enabled) return FSDP_SUCCESS;
  GROW(t->spans, t->nspans, t->cspans);
  Span *s = &t->spans[t->nspans++];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->cat = cat;
  s->step = step;
  s->unit = unit;
  s->b = b;
  s->e = e;
  return FSDP_SUCCESS;
}

int FsdpTraceWait(FsdpTrace t, const char *what, int64_t step, int unit, double b, double e)
{
  if (!t) return FSDP_SUCCESS;
  t->wait_s += (e - b) * 1e-6;
  return FsdpTraceCompute(t, what, "wait", step, unit, b, e);
}

int FsdpTraceIssue(FsdpTrace t, int lane, uint64_t seq, FsdpCollKind kind, FsdpPhase phase,
                   int64_t step, int unit, uint64_t bytes, double issue_us)
{
  if (!t || !t->enabled) return FSDP_SUCCESS;
  GROW(t->issues, t->nissues, t->cissues);
  t->issues[t->nissues++] = (Issue){lane, seq, kKindNames[kind], phase, step, unit, bytes, issue_us};
  return FSDP_SUCCESS;
}

void *FsdpTraceLane(FsdpTrace t, int lane) { return &t->lanes[lane]; }

void FsdpTraceStreamRecorder(void *ctx, const FsdpStreamTaskTime *tt, const void *arg)
{
  (void)arg;
  Lane *ln = ctx;
  FsdpTrace t = ln->t;
  double b = (tt->start_s - t->t0) * 1e6, e = (tt->end_s - t->t0) * 1e6;
  pthread_mutex_lock(&t->mu);
  t->busy_s += tt->end_s - tt->start_s;
  if (t->enabled) {
    /* stream thread: cannot raise, drops the record on failure (the
     * reserve prints nothing) */
    if (!FsdpArrayReserve(&t->done, &t->cdone, t->ndone + 1, sizeof *t->done))
      t->done[t->ndone++] = (Done){ln->lane, tt->seq, tt->label, (tt->issue_s - t->t0) * 1e6, b, e};
  }
  pthread_mutex_unlock(&t->mu);
}

double FsdpTraceWaitSeconds(FsdpTrace t) { return t ? t->wait_s : 0.0; }
double FsdpTraceCommBusySeconds(FsdpTrace t)
{
  if (!t) return 0.0;
  pthread_mutex_lock(&t->mu);
  double b = t->busy_s;
  pthread_mutex_unlock(&t->mu);
  return b;
}
void FsdpTraceNoteInFlight(FsdpTrace t, int n)
{
  if (t && n > t->max_in_flight) t->max_in_flight = n;
}
int FsdpTraceMaxInFlight(FsdpTrace t) { return t ? t->max_in_flight : 0; }

/* Append printf output to a growing string. */
typedef struct {
  char *s;
  size_t n, cap;
  int failed;
} Buf;

static void BufPrintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void BufPrintf(Buf *b, const char *fmt, ...)
{
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { b->failed = 1; return; }
    if (b->s && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
    if (FsdpArrayReserve(&b->s, &b->cap, b->n + (size_t)k + 1, 1)) { b->failed = 1; return; }
  }
}

int FsdpTraceWrite(FsdpTrace t, const char *path)
{
  int W = 1;
  FSDP_CALL_MPI(MPI_Comm_size(t->comm, &W));
  Buf b = {0};
  int pid = t->rank;
  BufPrintf(&b, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n", pid, pid);
  BufPrintf(&b, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n", pid);
  static const char *const kLaneNames[FSDP_TRACE_LANES] = {"comm: all-gather stream",
                                                            "comm: reduce stream"};
  for (int l = 0; l < FSDP_TRACE_LANES; l++)
    BufPrintf(&b, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n",
              pid, 1 + l, kLaneNames[l]);
  for (size_t i = 0; i < t->nspans; i++) {
    Span *s = &t->spans[i];
    BufPrintf(&b, "{\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"name\":\"%s\",\"cat\":\"%s\",\"ts\":%.3f,"
                  "\"dur\":%.3f,\"args\":{\"step\":%lld,\"unit\":%d}},\n",
              pid, s->name, s->cat, s->b, s->e - s->b, (long long)s->step, s->unit);
  }
  /* join each stream's timings with their issue metadata by sequence number
   * (both in issue order within a stream) */
  for (int l = 0; l < FSDP_TRACE_LANES; l++) {
    size_t j = 0;
    for (size_t i = 0; i < t->ndone; i++) {
      Done *d = &t->done[i];
      if (d->lane != l) continue;
      while (j < t->nissues && (t->issues[j].lane != l || t->issues[j].seq < d->seq)) j++;
      if (j < t->nissues && t->issues[j].seq == d->seq) {
        Issue *is = &t->issues[j];
        BufPrintf(&b, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"cat\":\"comm\",\"ts\":%.3f,"
                      "\"dur\":%.3f,\"args\":{\"step\":%lld,\"unit\":%d,\"kind\":\"%s\",\"phase\":\"%s\","
                      "\"bytes\":%llu,\"issue_ts\":%.3f,\"seq\":%llu}},\n",
                  pid, 1 + l, is->kind, d->b, d->e - d->b, (long long)is->step, is->unit, is->kind,
                  FsdpPhaseNames[is->phase], (unsigned long long)is->bytes, d->issue,
                  (unsigned long long)d->seq);
      } else {
        BufPrintf(&b, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"cat\":\"stream\",\"ts\":%.3f,"
                      "\"dur\":%.3f,\"args\":{}},\n",
                  pid, 1 + l, d->label ? d->label : "task", d->b, d->e - d->b);
      }
    }
  }
  int bad = b.failed, anybad = 0;
  FSDP_CALL_MPI(MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, t->comm));
  if (anybad) {
    free(b.s);
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory formatting the trace");
  }
  int len = (int)b.n, *lens = NULL, *displs = NULL;
  char *all = NULL;
  if (t->rank == 0) {
    lens = calloc((size_t)W, sizeof *lens);
    displs = calloc((size_t)W, sizeof *displs);
  }
  FSDP_CALL_MPI(MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, t->comm));
  long long total = 0;
  if (t->rank == 0) {
    for (int r = 0; r < W; r++) { displs[r] = (int)total; total += lens[r]; }
    all = malloc((size_t)total + 1);
  }
  FSDP_CALL_MPI(MPI_Gatherv(b.s, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, t->comm));
  free(b.s);
  int err = FSDP_SUCCESS;
  if (t->rank == 0) {
    /* [Note: one job's files] (io/outputs.h): never over an existing file */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
      int e = errno;
      if (fd >= 0) close(fd);
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                           "option -trace: cannot create '%s': %s%s", path, strerror(e),
                           e == EEXIST ? " (refusing to overwrite it)" : "");
    } else {
      fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
      /* drop the trailing ",\n" of the last event */
      if (total >= 2) fwrite(all, 1, (size_t)total - 2, f);
      fputs("\n]}\n", f);
      if (fclose(f) != 0)
        err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "writing '%s' failed: %s",
                             path, strerror(errno));
    }
    free(all);
    free(lens);
    free(displs);
  }
  FSDP_CALL_MPI(MPI_Bcast(&err, 1, MPI_INT, 0, t->comm));
  return err;
}
