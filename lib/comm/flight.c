/* flight.c: flight recorder and hang watchdog (see flight.h).
 *
 * [Note: flight records] The ring (Entry) is this rank's own and lives in
 * ordinary memory; the published record (PubRank) lives in this rank's
 * segment of the node's shared window, or in a private allocation when
 * the window could not be made (the diagnosis then only knows this rank).
 * Writers -- the compute thread at issue, the stream threads at start and
 * end -- hold g->mu and bracket every change of the record with two
 * increments of its version (odd while writing); peers copy it and retry
 * until they read the same even version before and after (a seqlock), so
 * no reader ever waits on a writer that may be stopped.  The tick and the
 * dump request counter are separate atomics.  Ranks share memory only on
 * one node; see [Note: hang watchdog] in flight.h for what that means.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/flight.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "comm/stream.h"
#include "comm/trace.h"

#define FL_COMMS 8
#define FL_TICK_S 0.2

static const char *const kKindNames[FSDP_FLIGHT_NKINDS] = {
    "all-gather", "reduce-scatter", "all-reduce", "scalar-sum", "scalar-max"};
enum { ST_ISSUED, ST_RUNNING, ST_DONE, ST_DEVICE, ST_NSTATES };
static const char *const kStateNames[ST_NSTATES] = {"issued", "running", "done", "device"};

typedef struct {
  uint64_t pos; /* ring position of this entry (handle - 1) */
  uint64_t seq;
  int comm;
  FsdpFlightKind kind;
  int unit, phase;
  int64_t step;
  uint64_t bytes;
  FsdpDtype dt;
  double issue, start, end; /* FsdpWallTime */
  int state;
  int warned; /* the -coll_warn warning about it was printed */
} Entry;

/* What peers can read (fixed layout, same binary on every rank). */
typedef struct {
  uint64_t seq; /* 0: empty */
  int32_t kind, unit;
  int64_t step;
  uint64_t bytes;
  int32_t state, pad;
} PubCall;

typedef struct {
  char name[40];
  int32_t min_rank, size; /* with the name: the same communicator on every member */
  uint64_t issued, done;
  PubCall recent[FSDP_FLIGHT_RECENT]; /* call seq at [seq % FSDP_FLIGHT_RECENT] */
} PubComm;

typedef struct {
  uint64_t version; /* seqlock: odd while being written */
  uint64_t tick;    /* watchdog heartbeat */
  uint64_t dump_req; /* SIGUSR2s received by this rank */
  int32_t world_rank, ncomms;
  PubComm comm[FL_COMMS];
} PubRank;

typedef struct {
  pthread_mutex_t mu;
  Entry ring[FSDP_FLIGHT_RING];
  uint64_t npos;
  MPI_Comm comms[FL_COMMS];
  int *members[FL_COMMS]; /* world ranks of each communicator */
  int nmembers[FL_COMMS];
  PubRank *me; /* my segment of the window */
  MPI_Comm shm;
  MPI_Win win;
  int nnode, node_rank;
  PubRank **peers; /* [nnode], node-rank order; peers[node_rank] == me */
  double t0, timeout, warn; /* -coll_timeout, -coll_warn (0: off) */
  char dump_path[4096]; /* "" without a run file */
  int world_rank;
  int64_t step;
  int phase;
  pthread_t thread;
  pthread_mutex_t stop_mu;
  pthread_cond_t stop_cv;
  int stop;
  uint64_t seen_dumps;
  struct sigaction old_usr2;
  int refs; /* creates not yet matched by a destroy */
} Flight;

static Flight *g_fl;

/* The scalar reductions record FSDP_NDTYPES: they sum doubles. */
static const char *DtName(FsdpDtype dt)
{
  return (int)dt >= 0 && dt < FSDP_NDTYPES ? FsdpDtypeNames[dt] : "fp64";
}
static volatile sig_atomic_t g_usr2;

static void OnUsr2(int sig)
{
  (void)sig;
  g_usr2 = 1;
}

/* ---- the published record ------------------------------------------------ */

static void PubBegin(PubRank *p) { __atomic_add_fetch(&p->version, 1, __ATOMIC_ACQ_REL); }
static void PubEnd(PubRank *p) { __atomic_add_fetch(&p->version, 1, __ATOMIC_RELEASE); }

/* A consistent copy of a peer's record; 0 if it kept changing. */
static int PubRead(const PubRank *p, PubRank *out)
{
  for (int tries = 0; tries < 1000; tries++) {
    uint64_t v1 = __atomic_load_n(&p->version, __ATOMIC_ACQUIRE);
    if (v1 & 1) continue;
    memcpy(out, (const void *)p, sizeof *out);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&p->version, __ATOMIC_ACQUIRE) == v1) return 1;
  }
  return 0;
}

static void PubCallSet(Flight *fl, const Entry *e)
{
  if (e->comm < 0) return;
  PubComm *c = &fl->me->comm[e->comm];
  PubBegin(fl->me);
  PubCall *pc = &c->recent[e->seq % FSDP_FLIGHT_RECENT];
  *pc = (PubCall){e->seq, (int32_t)e->kind, e->unit, e->step, e->bytes, e->state, 0};
  if (e->seq > c->issued) c->issued = e->seq;
  if (e->state == ST_DONE && e->seq > c->done) c->done = e->seq;
  PubEnd(fl->me);
}

/* The index of comm in the table, registering it on first use (the compute
 * thread issues every collective, so registration needs no more than mu).
 * -1 when the table is full: such calls are recorded without a sequence. */
static int CommIndex(Flight *fl, MPI_Comm comm, const char *name)
{
  int n = fl->me->ncomms;
  for (int i = 0; i < n; i++)
    if (fl->comms[i] == comm) return i;
  if (n == FL_COMMS) return -1;
  int size = 0;
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  if (MPI_Comm_size(comm, &size) != MPI_SUCCESS || size < 1) return -1;
  int *in = malloc((size_t)size * sizeof *in), *out = malloc((size_t)size * sizeof *out);
  if (!in || !out) {
    free(in);
    free(out);
    return -1;
  }
  for (int r = 0; r < size; r++) in[r] = r;
  int ok = MPI_Comm_group(comm, &g) == MPI_SUCCESS &&
           MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS &&
           MPI_Group_translate_ranks(g, size, in, wg, out) == MPI_SUCCESS;
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  free(in);
  if (!ok) {
    free(out);
    return -1;
  }
  int lo = out[0];
  for (int r = 1; r < size; r++)
    if (out[r] < lo) lo = out[r];
  fl->comms[n] = comm;
  fl->members[n] = out;
  fl->nmembers[n] = size;
  PubBegin(fl->me);
  PubComm *c = &fl->me->comm[n];
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name ? name : "unnamed");
  c->min_rank = lo;
  c->size = size;
  fl->me->ncomms = n + 1;
  PubEnd(fl->me);
  return n;
}

/* ---- recording ------------------------------------------------------------ */

uint64_t FsdpFlightIssue(MPI_Comm comm, const char *comm_name, FsdpFlightKind kind, int unit,
                         uint64_t bytes, FsdpDtype dt)
{
  Flight *fl = g_fl;
  if (!fl) return 0;
  pthread_mutex_lock(&fl->mu);
  int ci = CommIndex(fl, comm, comm_name);
  uint64_t pos = fl->npos++;
  Entry *e = &fl->ring[pos % FSDP_FLIGHT_RING];
  *e = (Entry){pos, ci >= 0 ? fl->me->comm[ci].issued + 1 : 0, ci, kind, unit, fl->phase,
               fl->step, bytes, dt, FsdpWallTime(), 0.0, 0.0, ST_ISSUED, 0};
  PubCallSet(fl, e);
  pthread_mutex_unlock(&fl->mu);
  return pos + 1;
}

static void SetState(uint64_t h, int state)
{
  Flight *fl = g_fl;
  if (!fl || h == 0) return;
  pthread_mutex_lock(&fl->mu);
  Entry *e = &fl->ring[(h - 1) % FSDP_FLIGHT_RING];
  if (e->pos == h - 1) { /* not yet overwritten */
    e->state = state;
    if (state == ST_RUNNING) e->start = FsdpWallTime();
    if (state == ST_DONE) e->end = FsdpWallTime();
    PubCallSet(fl, e);
  }
  pthread_mutex_unlock(&fl->mu);
}

void FsdpFlightStart(uint64_t h) { SetState(h, ST_RUNNING); }
void FsdpFlightEnd(uint64_t h) { SetState(h, ST_DONE); }
void FsdpFlightDevice(uint64_t h) { SetState(h, ST_DEVICE); }

void FsdpFlightSetStep(int64_t step)
{
  if (g_fl) g_fl->step = step; /* read under mu by the same (compute) thread's issues */
}

void FsdpFlightSetPhase(int phase)
{
  if (g_fl) g_fl->phase = phase;
}

/* ---- dumps ---------------------------------------------------------------- */

static void DumpTo(Flight *fl, FILE *f, const char *why)
{
  /* copy under the lock, print without it: a slow stderr never holds up
   * the threads that record */
  Entry ring[FSDP_FLIGHT_RING];
  char names[FL_COMMS][40];
  pthread_mutex_lock(&fl->mu);
  uint64_t n = fl->npos, first = n > FSDP_FLIGHT_RING ? n - FSDP_FLIGHT_RING : 0;
  memcpy(ring, fl->ring, sizeof ring);
  for (int c = 0; c < FL_COMMS; c++) memcpy(names[c], fl->me->comm[c].name, sizeof names[c]);
  pthread_mutex_unlock(&fl->mu);
  double now = FsdpWallTime();
  fprintf(f, "[fsdp rank %d] flight recorder (%s): last %llu of %llu collectives, times in s "
             "since start, now %.3f\n",
          fl->world_rank, why, (unsigned long long)(n - first), (unsigned long long)n,
          now - fl->t0);
  for (uint64_t p = first; p < n; p++) {
    const Entry *e = &ring[p % FSDP_FLIGHT_RING];
    const char *cn = e->comm >= 0 ? names[e->comm] : "?";
    char st[32] = "-", en[32] = "-";
    if (e->state != ST_ISSUED && e->start > 0) snprintf(st, sizeof st, "%.3f", e->start - fl->t0);
    if (e->state == ST_DONE) snprintf(en, sizeof en, "%.3f", e->end - fl->t0);
    fprintf(f, "[fsdp rank %d] flight #%llu comm '%s' %s unit %d step %lld %s bytes %llu %s "
               "issue %.3f start %s end %s %s\n",
            fl->world_rank, (unsigned long long)e->seq, cn, kKindNames[e->kind], e->unit,
            (long long)e->step, e->phase >= 0 && e->phase < 3 ? FsdpPhaseNames[e->phase] : "-",
            (unsigned long long)e->bytes, DtName(e->dt), e->issue - fl->t0, st, en,
            kStateNames[e->state]);
  }
  fflush(f);
}

/* stderr, and the per-rank file next to the run file (appended: several
 * SIGUSR2 dumps accumulate). */
static void DumpAll(Flight *fl, const char *why)
{
  DumpTo(fl, stderr, why);
  if (!fl->dump_path[0]) return;
  FILE *f = fopen(fl->dump_path, "a");
  if (!f) {
    fprintf(stderr, "[fsdp rank %d] flight recorder: cannot write '%s': %s\n", fl->world_rank,
            fl->dump_path, strerror(errno));
    return;
  }
  DumpTo(fl, f, why);
  fclose(f);
}

/* ---- diagnosis of a hang ---------------------------------------------------- */

typedef struct {
  char *s;
  size_t n, cap;
} Msg;

static void Add(Msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void Add(Msg *m, const char *fmt, ...)
{
  if (m->n + 1 >= m->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(m->s + m->n, m->cap - m->n, fmt, ap);
  va_end(ap);
  if (k > 0) m->n = m->n + (size_t)k < m->cap ? m->n + (size_t)k : m->cap - 1;
}

static void SleepS(double s)
{
  struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The peer's communicator that is the same as mine (name and lowest
 * member), or NULL. */
static const PubComm *PeerComm(const PubRank *peer, const PubComm *mine)
{
  for (int k = 0; k < peer->ncomms && k < FL_COMMS; k++)
    if (strcmp(peer->comm[k].name, mine->name) == 0 && peer->comm[k].min_rank == mine->min_rank &&
        peer->comm[k].size == mine->size)
      return &peer->comm[k];
  return NULL;
}

static void AddCall(Msg *m, const PubCall *c)
{
  Add(m, "#%llu %s (unit %d, step %lld, %llu bytes, %s)", (unsigned long long)c->seq,
      c->kind >= 0 && c->kind < FSDP_FLIGHT_NKINDS ? kKindNames[c->kind] : "?", c->unit,
      (long long)c->step, (unsigned long long)c->bytes,
      c->state >= 0 && c->state < ST_NSTATES ? kStateNames[c->state] : "?");
}

/* The newest call of c, as "#n kind (...)", or "nothing". */
static void AddNewest(Msg *m, const PubComm *c)
{
  const PubCall *pc = c ? &c->recent[c->issued % FSDP_FLIGHT_RECENT] : NULL;
  if (!c || c->issued == 0 || pc->seq != c->issued)
    Add(m, "nothing");
  else
    AddCall(m, pc);
}

static int CallsDiffer(const PubCall *a, const PubCall *b)
{
  return a->kind != b->kind || a->unit != b->unit || a->step != b->step || a->bytes != b->bytes;
}

/* The heartbeat: the watchdog's tick, and the re-read window's (a rank
 * that diagnoses a hang goes on ticking, or its peers, diagnosing the same
 * hang at the same moment, would take it for stopped). */
static void Tick(Flight *fl) { __atomic_add_fetch(&fl->me->tick, 1, __ATOMIC_RELEASE); }

/* Collective e has been running for limit_s (-coll_warn or -coll_timeout):
 * find out from the node's records who has not arrived and where ranks
 * disagree, into buf[cap] (after the caller's head line).  0 when
 * out of memory (buf then holds only the head). */
static int DescribeHang(Flight *fl, const Entry *e, double limit_s, char *buf, size_t cap,
                        size_t head)
{
  int nn = fl->nnode;
  PubRank *snap = calloc((size_t)nn, sizeof *snap);
  uint64_t *tick0 = calloc((size_t)nn, sizeof *tick0);
  int *moved = calloc((size_t)nn, sizeof *moved);
  int ok = snap && tick0 && moved;
  if (ok) {
    /* [Note: hang watchdog]: re-read every second until every peer ticked
     * or the window (limit/4, 1..4 s) is over */
    double window = fmin(4.0, fmax(1.0, limit_s / 4.0)), waited = 0.0;
    for (int p = 0; p < nn; p++) tick0[p] = __atomic_load_n(&fl->peers[p]->tick, __ATOMIC_ACQUIRE);
    moved[fl->node_rank] = 1;
    for (;;) {
      for (int k = 0; k < 5; k++) {
        SleepS(FL_TICK_S);
        Tick(fl);
      }
      waited += 5 * FL_TICK_S;
      int all = 1;
      for (int p = 0; p < nn; p++) {
        if (__atomic_load_n(&fl->peers[p]->tick, __ATOMIC_ACQUIRE) != tick0[p]) moved[p] = 1;
        all &= moved[p];
      }
      if (all || waited >= window - 1e-9) break;
    }
    /* a record left mid-write (its rank stopped there) is taken as it is:
     * its world rank never changes, the rest is best effort */
    for (int p = 0; p < nn; p++)
      if (!PubRead(fl->peers[p], &snap[p]))
        memcpy(&snap[p], (const void *)fl->peers[p], sizeof *snap);
    pthread_mutex_lock(&fl->mu);
    PubRead(fl->me, &snap[fl->node_rank]);
    pthread_mutex_unlock(&fl->mu);

    Msg m = {buf, head, cap};
    const PubComm *mine = &snap[fl->node_rank].comm[e->comm];
    /* error.c keeps 2 KiB of a message: name at most 8 ranks one by one */
    int named = 0, elsewhere = 0, more = 0;
    for (int i = 0; i < fl->nmembers[e->comm]; i++) {
      int r = fl->members[e->comm][i];
      if (r == fl->world_rank) continue;
      int p = -1;
      for (int q = 0; q < nn; q++)
        if (snap[q].world_rank == r) p = q;
      if (p < 0) {
        elsewhere++;
        continue;
      }
      const PubComm *pc = PeerComm(&snap[p], mine);
      int stopped = !moved[p], behind = !pc || pc->issued < e->seq;
      if (!stopped && !behind) continue;
      if (named == 8) {
        more++;
        continue;
      }
      if (stopped)
        Add(&m, "; rank %d has not arrived: no heartbeat in the last %.0f s (the process is "
                "stopped or dead), its newest call on this comm: ",
            r, waited);
      else
        Add(&m, "; rank %d has not arrived: its newest call on this comm is ", r);
      AddNewest(&m, pc);
      named++;
    }
    if (more) Add(&m, "; %d more ranks have not arrived", more);
    if (elsewhere)
      Add(&m, "; %d members are on other nodes (their progress cannot be read here)", elsewhere);
    if (!named) Add(&m, "; every member on this node has issued #%llu", (unsigned long long)e->seq);
    /* the first sequence at which two ranks recorded different calls, per comm */
    const PubRank *me = &snap[fl->node_rank];
    for (int c = 0; c < me->ncomms && c < FL_COMMS; c++) {
      uint64_t first = 0;
      int who = -1;
      const PubCall *a = NULL, *b = NULL;
      for (int p = 0; p < nn; p++) {
        if (p == fl->node_rank) continue;
        const PubComm *pc = PeerComm(&snap[p], &me->comm[c]);
        if (!pc) continue;
        for (int i = 0; i < FSDP_FLIGHT_RECENT; i++) {
          const PubCall *x = &me->comm[c].recent[i], *y = &pc->recent[i];
          if (x->seq && x->seq == y->seq && CallsDiffer(x, y) && (!first || x->seq < first)) {
            first = x->seq;
            who = snap[p].world_rank;
            a = x;
            b = y;
          }
        }
      }
      if (first) {
        Add(&m, "; ranks disagree first at #%llu on the '%s' comm: rank %d issued ",
            (unsigned long long)first, me->comm[c].name, fl->world_rank);
        AddCall(&m, a);
        Add(&m, ", rank %d issued ", who);
        AddCall(&m, b);
      }
    }
  }
  free(snap);
  free(tick0);
  free(moved);
  return ok;
}

/* The head line of a hang message: e, its communicator, unit, step and
 * phase, and for how long it has been running. */
static size_t DescribeCall(Flight *fl, const Entry *e, const char *state, char *buf, size_t cap)
{
  Msg m = {buf, 0, cap};
  pthread_mutex_lock(&fl->mu);
  const PubComm *mine = &fl->me->comm[e->comm];
  char name[sizeof mine->name];
  memcpy(name, mine->name, sizeof name);
  int size = mine->size;
  pthread_mutex_unlock(&fl->mu);
  Add(&m, "rank %d: collective %s #%llu on the '%s' comm (%d ranks; unit %d, step %lld, %s, "
          "%llu bytes %s) %s after %.1f s",
      fl->world_rank, kKindNames[e->kind], (unsigned long long)e->seq, name, size, e->unit,
      (long long)e->step, e->phase >= 0 && e->phase < 3 ? FsdpPhaseNames[e->phase] : "-",
      (unsigned long long)e->bytes, DtName(e->dt), state, FsdpWallTime() - e->start);
  return m.n;
}

/* [Note: hang watchdog] -coll_warn: collective e has been running for
 * more than fl->warn seconds: print who has not arrived, once, and go on
 * (the job ends only at -coll_timeout). */
static void WarnHang(Flight *fl, const Entry *e)
{
  char *buf = malloc(16384);
  if (!buf) return;
  size_t n = DescribeCall(fl, e, "still running", buf, 16384);
  Msg m = {buf, n, 16384};
  Add(&m, " (-coll_warn %g)", fl->warn);
  DescribeHang(fl, e, fl->warn, buf, 16384, m.n);
  m.n = strlen(buf);
  if (fl->timeout > 0) Add(&m, "; the job ends if it is not complete after -coll_timeout %g s",
                           fl->timeout);
  else Add(&m, "; -coll_timeout 0: the job waits for it");
  FsdpWarn(0, "%s", buf);
  free(buf);
}

/* Collective e has been running for more than the timeout: diagnose,
 * print, dump and end the job.  Does not return. */
static _Noreturn void Diagnose(Flight *fl, const Entry *e)
{
  char *buf = malloc(16384);
  if (buf) {
    size_t n = DescribeCall(fl, e, "not complete", buf, 16384);
    Msg m = {buf, n, 16384};
    Add(&m, " (-coll_timeout %g)", fl->timeout);
    DescribeHang(fl, e, fl->timeout, buf, 16384, m.n);
    m.n = strlen(buf);
    Add(&m, "; ending the job");
    FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MPI, "%s", buf);
    free(buf);
  } else {
    FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MPI,
                   "rank %d: collective %s #%llu not complete after %.1f s (-coll_timeout %g); "
                   "ending the job",
                   fl->world_rank, kKindNames[e->kind], (unsigned long long)e->seq,
                   FsdpWallTime() - e->start, fl->timeout);
  }
  DumpAll(fl, "collective timeout");
  FsdpErrorAbortJob(FSDP_ERR_MPI);
}

/* ---- the watchdog thread ---------------------------------------------------- */

static void *WatchdogMain(void *arg)
{
  Flight *fl = arg;
  for (;;) {
    pthread_mutex_lock(&fl->stop_mu);
    if (!fl->stop) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += (long)(FL_TICK_S * 1e9);
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&fl->stop_cv, &fl->stop_mu, &ts);
    }
    int stop = fl->stop;
    pthread_mutex_unlock(&fl->stop_mu);
    if (stop) break;
    Tick(fl);
    if (g_usr2) {
      g_usr2 = 0;
      __atomic_add_fetch(&fl->me->dump_req, 1, __ATOMIC_RELEASE);
    }
    /* a SIGUSR2 on any rank of the node: every rank dumps */
    uint64_t req = 0;
    for (int p = 0; p < fl->nnode; p++)
      req += __atomic_load_n(&fl->peers[p]->dump_req, __ATOMIC_ACQUIRE);
    if (req != fl->seen_dumps) {
      fl->seen_dumps = req;
      DumpAll(fl, "SIGUSR2");
    }
    if (fl->timeout > 0 || fl->warn > 0) {
      Entry stuck, slow;
      int found = 0, warn = 0;
      double now = FsdpWallTime();
      pthread_mutex_lock(&fl->mu);
      uint64_t n = fl->npos, first = n > FSDP_FLIGHT_RING ? n - FSDP_FLIGHT_RING : 0;
      for (uint64_t p = first; p < n && !found; p++) {
        Entry *e = &fl->ring[p % FSDP_FLIGHT_RING];
        if (e->state != ST_RUNNING || e->comm < 0) continue;
        if (fl->timeout > 0 && now - e->start > fl->timeout) {
          stuck = *e;
          found = 1;
        } else if (fl->warn > 0 && !warn && !e->warned && now - e->start > fl->warn) {
          e->warned = 1; /* once per collective */
          slow = *e;
          warn = 1;
        }
      }
      pthread_mutex_unlock(&fl->mu);
      if (found) Diagnose(fl, &stuck);
      if (warn) WarnHang(fl, &slow);
    }
  }
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------- */

int FsdpFlightCheckWarn(double timeout_s, double warn_s)
{
  if (!(warn_s >= 0.0))
    FSDP_ERROR(FSDP_ERR_USAGE, "option -coll_warn: %g is not a number of seconds >= 0 "
                               "(0 = no warning)", warn_s);
  if (warn_s > 0 && timeout_s > 0 && warn_s >= timeout_s)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -coll_warn %g is not below -coll_timeout %g: the warning "
               "about a collective that has not completed comes before the timeout that ends "
               "the job (0 = no warning)", warn_s, timeout_s);
  return FSDP_SUCCESS;
}

int FsdpFlightCreate(MPI_Comm world, double timeout_s, double warn_s, const char *run_file)
{
  if (!(timeout_s >= 0.0))
    FSDP_ERROR(FSDP_ERR_USAGE, "option -coll_timeout: %g is not a number of seconds >= 0 "
                               "(0 = no timeout)", timeout_s);
  FSDP_CALL(FsdpFlightCheckWarn(timeout_s, warn_s));
  /* a second trainer in the same process (tests) shares the recorder */
  if (g_fl) {
    g_fl->refs++;
    return FSDP_SUCCESS;
  }
  Flight *fl = calloc(1, sizeof *fl);
  FSDP_CHECK_ALLOC(fl, sizeof *fl);
  pthread_mutex_init(&fl->mu, NULL);
  pthread_mutex_init(&fl->stop_mu, NULL);
  pthread_cond_init(&fl->stop_cv, NULL);
  fl->refs = 1;
  fl->t0 = FsdpWallTime();
  fl->timeout = timeout_s;
  fl->warn = warn_s;
  fl->phase = -1;
  fl->shm = MPI_COMM_NULL;
  fl->win = MPI_WIN_NULL;
  FSDP_CALL_MPI(MPI_Comm_rank(world, &fl->world_rank));
  if (run_file && run_file[0])
    FsdpMsgf(fl->dump_path, sizeof fl->dump_path, "%s.flight-rank%d.txt", run_file,
             fl->world_rank);
  /* the node's shared window: one PubRank per rank */
  FSDP_CALL_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, fl->world_rank, MPI_INFO_NULL,
                                    &fl->shm));
  FSDP_CALL_MPI(MPI_Comm_size(fl->shm, &fl->nnode));
  FSDP_CALL_MPI(MPI_Comm_rank(fl->shm, &fl->node_rank));
  void *base = NULL;
  FSDP_CALL_MPI(MPI_Win_allocate_shared((MPI_Aint)sizeof(PubRank), 1, MPI_INFO_NULL, fl->shm,
                                        &base, &fl->win));
  FSDP_CALL_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, fl->win));
  fl->peers = calloc((size_t)fl->nnode, sizeof *fl->peers);
  FSDP_CHECK_ALLOC(fl->peers, sizeof *fl->peers);
  for (int p = 0; p < fl->nnode; p++) {
    MPI_Aint sz = 0;
    int du = 0;
    void *ptr = NULL;
    FSDP_CALL_MPI(MPI_Win_shared_query(fl->win, p, &sz, &du, &ptr));
    fl->peers[p] = ptr;
  }
  fl->me = fl->peers[fl->node_rank];
  memset(fl->me, 0, sizeof *fl->me);
  fl->me->world_rank = fl->world_rank;
  /* every record is initialised before anyone reads a peer's */
  FSDP_CALL_MPI(MPI_Win_sync(fl->win));
  FSDP_CALL_MPI(MPI_Barrier(fl->shm));
  FSDP_CALL_MPI(MPI_Win_sync(fl->win));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnUsr2;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, &fl->old_usr2);
  g_fl = fl;
  int rc = pthread_create(&fl->thread, NULL, WatchdogMain, fl);
  if (rc != 0) {
    g_fl = NULL;
    FSDP_ERROR(FSDP_ERR_INTERNAL, "flight recorder: pthread_create failed: %s", strerror(rc));
  }
  return FSDP_SUCCESS;
}

int FsdpFlightDestroy(void)
{
  Flight *fl = g_fl;
  if (!fl || --fl->refs > 0) return FSDP_SUCCESS;
  pthread_mutex_lock(&fl->stop_mu);
  fl->stop = 1;
  pthread_cond_signal(&fl->stop_cv);
  pthread_mutex_unlock(&fl->stop_mu);
  pthread_join(fl->thread, NULL);
  sigaction(SIGUSR2, &fl->old_usr2, NULL);
  g_fl = NULL;
  int err = FSDP_SUCCESS;
  if (fl->win != MPI_WIN_NULL) {
    if (MPI_Win_unlock_all(fl->win) != MPI_SUCCESS) err = FSDP_ERR_MPI;
    if (MPI_Win_free(&fl->win) != MPI_SUCCESS) err = FSDP_ERR_MPI;
  }
  if (fl->shm != MPI_COMM_NULL) MPI_Comm_free(&fl->shm);
  for (int i = 0; i < FL_COMMS; i++) free(fl->members[i]);
  free(fl->peers);
  pthread_cond_destroy(&fl->stop_cv);
  pthread_mutex_destroy(&fl->stop_mu);
  pthread_mutex_destroy(&fl->mu);
  free(fl);
  if (err) FSDP_ERROR(err, "flight recorder: freeing the shared window failed");
  return FSDP_SUCCESS;
}
