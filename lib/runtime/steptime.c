/* steptime.c: [Note: the schedule replayed] in steptime.h.  Each function
 * below names the runtime function of fsdp.c it replays. */
#include "runtime/steptime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

const char *const FsdpStepEventNames[4] = {"gather", "forward", "backward", "reduce"};

typedef enum { SHARDED, GATHERING, UNSHARDED } State;

typedef struct {
  State state;
  double gather_end; /* when its gather finishes */
  int slot;          /* gather ring slot, -1 none */
  int ahead;         /* gathered for a stage not begun yet (counts against L) */
  int holds_grad;    /* has an unsharded gradient buffer */
  int grad_slot;     /* gradient ring slot (-2: the root's, -1: none) */
  int first_fwd, last_fwd; /* its first and last forward stage */
  double reduce_end; /* when its final reduction ends ([Note: the gradient tail]) */
} SimUnit;

/* A stream's busy intervals, in start order, not overlapping ([Note:
 * contended compute] in steptime.h); those before head ended before the
 * compute clock (which never goes back). */
typedef struct {
  double *start, *end;
  int head, n, cap;
} Busy;

typedef struct {
  const FsdpStepTimeInput *in;
  Busy busy[2];         /* gather stream, reduce stream (contended only) */
  SimUnit *u;
  int *gslot_owner;     /* [gather_slots] */
  double *rslot_done;   /* [grad_slots]: when the slot's last reduction ends */
  double root_rslot_done;
  int next_gslot, next_rslot;
  double tc, tg, tr;    /* compute thread, gather stream, reduce stream */
  double exposed, compute, gbusy, rbusy, contention;
  int nahead, max_in_flight;
  int record;           /* recording events of the reported step */
  double t0;
  FsdpStepEvent *ev;
  int max_ev, nev;
  int micro;
  int *tail_q;          /* [Note: the gradient tail], poll: units not yet handed over */
  int tail_head, tail_n;
  double tail_done_s;   /* optimizer seconds run in the tail this step */
} Sim;

/* Whether AdamW runs per unit in the tail (TailQueue in fsdp.c). */
static int TailEarly(const FsdpStepTimeInput *in)
{
  return in->optim_unit_s && in->tail_early &&
         (in->tail == FSDP_TAIL_POLL || in->tail == FSDP_TAIL_STREAM);
}

/* TailPoll: hand landed units' shares to the compute thread; block: all. */
static void TailPoll(Sim *s, int block)
{
  while (s->tail_head < s->tail_n) {
    int u = s->tail_q[s->tail_head];
    if (!block && s->u[u].reduce_end > s->tc) break;
    if (s->u[u].reduce_end > s->tc) {
      s->exposed += s->u[u].reduce_end - s->tc;
      s->tc = s->u[u].reduce_end;
    }
    s->tail_head++;
    s->tc += s->in->optim_unit_s[u];
    s->tail_done_s += s->in->optim_unit_s[u];
    if (s->record) s->compute += s->in->optim_unit_s[u];
  }
}

static void Note(Sim *s, FsdpStepEventKind kind, int unit, double t)
{
  if (!s->record || !s->ev) return;
  if (s->nev < s->max_ev) s->ev[s->nev] = (FsdpStepEvent){kind, unit, s->micro, t - s->t0};
  s->nev++;
}

/* The compute thread blocks until t (an event's end): exposed time. */
static void WaitUntil(Sim *s, double t)
{
  if (t > s->tc) {
    s->exposed += t - s->tc;
    s->tc = t;
  }
}

static int Contended(const FsdpStepTimeInput *in) { return in->contended > 1.0; }

/* A task on stream k (0 gather, 1 reduce) busy over [a, b). */
static void BusyAdd(Sim *s, int k, double a, double b)
{
  Busy *q = &s->busy[k];
  if (!Contended(s->in) || b <= a) return;
  if (q->n > q->head && a <= q->end[q->n - 1]) { /* back to back: one interval */
    if (b > q->end[q->n - 1]) q->end[q->n - 1] = b;
    return;
  }
  if (q->n == q->cap) { /* drop what ended: slide down */
    memmove(q->start, q->start + q->head, (size_t)(q->n - q->head) * sizeof *q->start);
    memmove(q->end, q->end + q->head, (size_t)(q->n - q->head) * sizeof *q->end);
    q->n -= q->head;
    q->head = 0;
    if (q->n == q->cap) return; /* cannot happen: cap bounds a step's tasks */
  }
  q->start[q->n] = a;
  q->end[q->n++] = b;
}

/* Whether a stream is busy at t, and the next time that may change
 * (HUGE_VAL: never). */
static int BusyAt(Sim *s, double t, double *next)
{
  int busy = 0;
  *next = HUGE_VAL;
  for (int k = 0; k < 2; k++) {
    Busy *q = &s->busy[k];
    while (q->head < q->n && q->end[q->head] <= s->tc) q->head++;
    for (int i = q->head; i < q->n; i++) {
      if (q->end[i] <= t) continue;
      if (q->start[i] <= t) {
        busy = 1;
        if (q->end[i] < *next) *next = q->end[i];
      } else if (q->start[i] < *next) {
        *next = q->start[i];
      }
      break;
    }
  }
  return busy;
}

/* Seconds a stage of `alone` seconds takes from the compute clock on,
 * at 1/contended of its rate while a stream is busy. */
static double ContendedSeconds(Sim *s, double alone)
{
  double t = s->tc, rem = alone, f = s->in->contended;
  int slowed = 0;
  while (rem > 0) {
    double next;
    int busy = BusyAt(s, t, &next);
    double rate = busy ? 1.0 / f : 1.0;
    slowed |= busy;
    if (next == HUGE_VAL || (next - t) * rate >= rem) {
      t += rem / rate;
      break;
    }
    rem -= (next - t) * rate;
    t = next;
  }
  /* alone when nothing ran beside it (t - tc would carry rounding) */
  return slowed ? t - s->tc : alone;
}

/* GradIsShard in fsdp.c: F = 1 with fp32 reductions, no per-micro-step sums. */
static int GradIsShard(const FsdpStepTimeInput *in)
{
  const FsdpRuntimeOptions *o = in->opt;
  return in->F == 1 && o->reduce_dtype == FSDP_DTYPE_FP32 &&
         (o->grad_accum <= 1 || !o->accum_comm);
}

/* [Note: contended compute] a stream task's seconds: beside compute (the
 * compute thread goes on), at the contended rate */
static double TaskSeconds(const Sim *s, double alone, int beside)
{
  return beside && s->in->comm_contended > 1.0 ? alone * s->in->comm_contended : alone;
}

/* UnitIssueGather; beside: prefetched (compute goes on) */
static int IssueGather(Sim *s, int u, int beside)
{
  SimUnit *x = &s->u[u];
  x->state = GATHERING;
  if (s->in->F == 1) { /* [Note: no sharding]: nothing moves */
    x->gather_end = s->tc;
  } else {
    if (!s->in->unit_is_root[u]) {
      if (s->gslot_owner[s->next_gslot] >= 0)
        FSDP_ERROR(FSDP_ERR_INTERNAL, "step replay: unit %d needs gather slot %d, held by unit %d",
                   u, s->next_gslot, s->gslot_owner[s->next_gslot]);
      s->gslot_owner[s->next_gslot] = u;
      x->slot = s->next_gslot;
      s->next_gslot = (s->next_gslot + 1) % s->in->gather_slots;
    }
    double start = s->tc > s->tg ? s->tc : s->tg, d = TaskSeconds(s, s->in->gather_s[u], beside);
    x->gather_end = start + d;
    s->tg = x->gather_end;
    BusyAdd(s, 0, start, x->gather_end);
    if (s->record) s->gbusy += d;
    Note(s, FSDP_STEP_EV_GATHER, u, s->tc);
  }
  x->ahead = 1;
  s->nahead++;
  if (s->nahead > s->max_in_flight) s->max_in_flight = s->nahead;
  return FSDP_SUCCESS;
}

/* UnitWaitGather */
static void WaitGather(Sim *s, int u)
{
  WaitUntil(s, s->u[u].gather_end);
  s->u[u].state = UNSHARDED;
}

/* UnitUnshard */
static int Unshard(Sim *s, int u)
{
  SimUnit *x = &s->u[u];
  if (x->state == SHARDED) FSDP_CALL(IssueGather(s, u, 0));
  if (x->state == GATHERING) WaitGather(s, u);
  if (x->ahead) {
    x->ahead = 0;
    s->nahead--;
  }
  return FSDP_SUCCESS;
}

/* TopUp: the phase's next units from stage st on, in direction dir, up to
 * L ahead ([Note: prefetch and the limiter] in fsdp.c) */
static int TopUp(Sim *s, int st, int dir)
{
  const FsdpStepTimeInput *in = s->in;
  if (in->F == 1) return FSDP_SUCCESS;
  int L = in->opt->limit_all_gathers;
  for (int t = st + dir; t >= 0 && t < in->nstages; t += dir) {
    int v = in->stage_unit[t];
    if (s->u[v].state != SHARDED) continue;
    if (L > 0 && s->nahead >= L) break;
    if (!in->unit_is_root[v] && s->gslot_owner[s->next_gslot] >= 0) break;
    FSDP_CALL(IssueGather(s, v, 1));
  }
  return FSDP_SUCCESS;
}

/* UnitReshard */
static void Reshard(Sim *s, int u)
{
  SimUnit *x = &s->u[u];
  if (x->slot >= 0) s->gslot_owner[x->slot] = -1;
  x->slot = -1;
  x->state = SHARDED;
}

/* UnitAcquireGrad: the ring's slot is free once its last reduction ran */
static void AcquireGrad(Sim *s, int u)
{
  SimUnit *x = &s->u[u];
  const FsdpRuntimeOptions *o = s->in->opt;
  if (x->holds_grad) return;
  x->holds_grad = 1;
  int persistent = o->grad_accum > 1 && !o->accum_comm && !GradIsShard(s->in);
  if (GradIsShard(s->in) || persistent) return;
  if (s->in->unit_is_root[u]) {
    WaitUntil(s, s->root_rslot_done);
    x->grad_slot = -2;
  } else {
    WaitUntil(s, s->rslot_done[s->next_rslot]);
    x->grad_slot = s->next_rslot;
    s->next_rslot = (s->next_rslot + 1) % s->in->grad_slots;
  }
}

/* TailQueue in fsdp.c, for the last micro-step's reductions */
static void TailQueue(Sim *s, int u, int micro, int nmicro, double landed)
{
  if (micro != nmicro - 1 || !TailEarly(s->in)) return;
  s->u[u].reduce_end = landed;
  if (s->in->tail == FSDP_TAIL_STREAM) { /* a task behind the reduction */
    double start = s->tr > landed ? s->tr : landed;
    s->tr = start + s->in->optim_unit_s[u];
    BusyAdd(s, 1, start, s->tr);
    s->tail_done_s += s->in->optim_unit_s[u];
    if (s->record) s->compute += s->in->optim_unit_s[u];
  } else {
    s->tail_q[s->tail_n++] = u;
  }
}

/* UnitReduceGrad; beside: backward stages follow in the step */
static void ReduceGrad(Sim *s, int u, int micro, int nmicro, int beside)
{
  SimUnit *x = &s->u[u];
  const FsdpRuntimeOptions *o = s->in->opt;
  x->holds_grad = 0;
  if (!o->accum_comm && micro != nmicro - 1) return; /* accumulate locally */
  if (GradIsShard(s->in) && s->in->R == 1) { /* nothing to reduce */
    TailQueue(s, u, micro, nmicro, s->tc); /* the shard is the gradient: landed now */
    return;
  }
  double start = s->tc > s->tr ? s->tc : s->tr, d = TaskSeconds(s, s->in->reduce_s[u], beside);
  s->tr = start + d;
  BusyAdd(s, 1, start, s->tr);
  if (s->record) s->rbusy += d;
  Note(s, FSDP_STEP_EV_REDUCE, u, s->tc);
  if (x->grad_slot == -2) s->root_rslot_done = s->tr;
  else if (x->grad_slot >= 0) s->rslot_done[x->grad_slot] = s->tr;
  x->grad_slot = -1;
  TailQueue(s, u, micro, nmicro, s->tr);
}

static void RunStage(Sim *s, int st, int backward)
{
  const FsdpStepTimeInput *in = s->in;
  Note(s, backward ? FSDP_STEP_EV_BACKWARD : FSDP_STEP_EV_FORWARD, in->stage_unit[st], s->tc);
  double t = backward ? in->bwd_s[st] : in->fwd_s[st];
  if (Contended(in)) { /* [Note: contended compute] */
    double c = ContendedSeconds(s, t);
    if (s->record) s->contention += c - t;
    t = c;
  }
  s->tc += t;
  if (s->record) s->compute += t;
}

/* FsdpRuntimeForwardBackward */
static int ForwardBackward(Sim *s, int micro)
{
  const FsdpStepTimeInput *in = s->in;
  int raf = in->opt->reshard_after_forward;
  int fwd_prefetch = in->opt->prefetch == FSDP_PREFETCH_BOTH;
  int bwd_prefetch = in->opt->prefetch != FSDP_PREFETCH_NONE;
  s->micro = micro;
  for (int st = 0; st < in->nstages; st++) {
    int u = in->stage_unit[st];
    FSDP_CALL(Unshard(s, u));
    if (fwd_prefetch) FSDP_CALL(TopUp(s, st, +1));
    RunStage(s, st, 0);
    if (raf && !in->unit_is_root[u] && st == s->u[u].last_fwd) Reshard(s, u);
  }
  for (int st = in->nstages - 1; st >= 0; st--) {
    int u = in->stage_unit[st];
    FSDP_CALL(Unshard(s, u));
    if (bwd_prefetch) FSDP_CALL(TopUp(s, st, -1));
    AcquireGrad(s, u);
    RunStage(s, st, 1);
    if (st == s->u[u].first_fwd) {
      int K = in->opt->grad_accum > 0 ? in->opt->grad_accum : 1;
      ReduceGrad(s, u, micro, K, st > 0 || micro < K - 1);
      Reshard(s, u);
    }
    TailPoll(s, 0);
  }
  return FSDP_SUCCESS;
}

int FsdpStepTimeSimulate(const FsdpStepTimeInput *in, FsdpStepTimeResult *out,
                         FsdpStepEvent *events, int max_events, int *nevents)
{
  memset(out, 0, sizeof *out);
  if (nevents) *nevents = 0;
  Sim s;
  memset(&s, 0, sizeof s);
  s.in = in;
  s.ev = events;
  s.max_ev = max_events;
  int gslots = in->gather_slots > 0 ? in->gather_slots : 1;
  int rslots = in->grad_slots > 0 ? in->grad_slots : 1;
  s.u = calloc((size_t)in->nunits, sizeof *s.u);
  s.gslot_owner = malloc((size_t)gslots * sizeof *s.gslot_owner);
  s.rslot_done = calloc((size_t)rslots, sizeof *s.rslot_done);
  s.tail_q = malloc((size_t)(in->nunits + 1) * sizeof *s.tail_q);
  int err = FSDP_SUCCESS, nomem = 0;
  if (Contended(in)) {
    /* a micro-step issues at most 2 gathers and 1 reduction (+ a tail
     * task) per unit; two steps' worth, so that sliding always frees room */
    int K = in->opt->grad_accum > 0 ? in->opt->grad_accum : 1;
    int cap = 2 * (K * 3 * in->nunits + in->nunits) + 8;
    for (int k = 0; k < 2; k++) {
      s.busy[k].cap = cap;
      s.busy[k].start = malloc((size_t)cap * sizeof(double));
      s.busy[k].end = malloc((size_t)cap * sizeof(double));
      nomem |= !s.busy[k].start || !s.busy[k].end;
    }
  }
  if (nomem || !s.u || !s.gslot_owner || !s.rslot_done || !s.tail_q) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM,
                         "out of memory replaying a step of %d units", in->nunits);
    goto done;
  }
  for (int i = 0; i < gslots; i++) s.gslot_owner[i] = -1;
  for (int u = 0; u < in->nunits; u++) {
    s.u[u] = (SimUnit){SHARDED, 0.0, -1, 0, 0, -1, -1, -1, 0.0};
  }
  for (int st = 0; st < in->nstages; st++) {
    SimUnit *x = &s.u[in->stage_unit[st]];
    if (x->first_fwd < 0) x->first_fwd = st;
    x->last_fwd = st;
  }
  int K = in->opt->grad_accum > 0 ? in->opt->grad_accum : 1;
  for (int step = 0; step < 2 && !err; step++) {
    s.record = step == 1;
    s.t0 = s.tc;
    if (s.record) s.max_in_flight = 0;
    s.tail_head = s.tail_n = 0;
    s.tail_done_s = 0.0;
    for (int m = 0; m < K && !err; m++) err = ForwardBackward(&s, m);
    /* FsdpRuntimeFinishGradients (the tail's remaining units), then the
     * optimizer: what the tail did not run */
    TailPoll(&s, 1);
    WaitUntil(&s, s.tr);
    double rest = in->optimizer_s - s.tail_done_s;
    if (rest < 0) rest = 0;
    s.tc += rest;
    if (s.record) {
      s.compute += rest;
      out->step_s = s.tc - s.t0;
    }
  }
  out->compute_s = s.compute;
  out->contention_s = s.contention;
  out->exposed_s = out->step_s - s.compute;
  out->gather_busy_s = s.gbusy;
  out->reduce_busy_s = s.rbusy;
  out->max_in_flight = s.max_in_flight;
  if (nevents) *nevents = s.nev < max_events ? s.nev : max_events;
done:
  free(s.u);
  free(s.gslot_owner);
  free(s.rslot_done);
  free(s.tail_q);
  for (int k = 0; k < 2; k++) {
    free(s.busy[k].start);
    free(s.busy[k].end);
  }
  return err;
}
