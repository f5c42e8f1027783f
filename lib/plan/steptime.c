/* steptime.c: [Note: the schedule replayed] in steptime.h.  Each function
 * below names the runtime function of fsdp.c it replays. */
#include "plan/steptime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

const char *const FsdpStepEventNames[4] = {"gather", "forward", "backward", "reduce"};

typedef enum { SHARDED, GATHERING, UNSHARDED } State;

typedef struct {
  State state;
  int gather_task;   /* its gather's task, -1 none (or done at issue) */
  int slot;          /* gather ring slot, -1 none */
  int ahead;         /* gathered for a stage not begun yet (counts against L) */
  int holds_grad;    /* has an unsharded gradient buffer */
  int grad_slot;     /* gradient ring slot (-2: the root's, -1: none) */
  int first_fwd, last_fwd; /* its first and last forward stage */
  int reduce_task;   /* its final reduction's task ([Note: the gradient tail]), -1 landed */
} SimUnit;

/* A collective (or a tail share on the reduce stream): seconds of work
 * left at its rate alone; a stream runs its tasks in issue order. */
typedef struct {
  double rem, start;
  double ready; /* [Note: joining a collective]: moves bytes from then on */
  int coll;     /* a collective (else a tail share: compute on the stream thread) */
  int done;
  int recorded; /* issued in the reported step: its busy time counts */
  int next;     /* the task behind it on its stream, -1 none */
} Task;

typedef struct {
  const FsdpStepTimeInput *in;
  Task *task;
  int ntask;
  size_t cap_task;
  int head[2], tail[2]; /* per stream: running task and last issued (-1 none) */
  SimUnit *u;
  int *gslot_owner;     /* [gather_slots] */
  int *rslot_task;      /* [grad_slots]: the slot's last reduction, -1 none */
  int root_rslot_task;
  int next_gslot, next_rslot;
  double tc;            /* now: the compute thread's clock, the streams run up to it */
  double compute, gbusy, rbusy, contention;
  int nahead, max_in_flight;
  int record;           /* recording events of the reported step */
  double t0;
  FsdpStepEvent *ev;
  int max_ev, nev;
  int micro;
  int *tail_q;          /* [Note: the gradient tail], poll: units not yet handed over */
  int tail_head, tail_n;
  double tail_done_s;   /* optimizer seconds run in the tail this step */
  double last_compute;  /* [Note: joining a collective]: the last compute since the last
                         * wait, its time alone (0: none) */
} Sim;

static int TaskDone(const Sim *s, int t) { return t < 0 || s->task[t].done; }

/* [Note: contended compute] The compute thread and the streams advance
 * together from now: the compute thread computing `work` seconds of its
 * time alone (work > 0), or waiting for task `wait` (work == 0; -1:
 * nothing).  While a stream is busy a stage runs at 1/contended of its
 * rate; while the compute thread computes a stream task runs at
 * 1/comm_contended of its rate, at full rate while it waits.  Event by
 * event: each interval ends when the work, or a stream's running task,
 * does.  Returns the seconds that passed. */
static double Advance(Sim *s, double work, int wait)
{
  const FsdpStepTimeInput *in = s->in;
  double fc = in->contended > 1.0 ? in->contended : 1.0;
  double fm = in->comm_contended > 1.0 ? in->comm_contended : 1.0;
  double fb = in->concurrent > 1.0 ? in->concurrent : 1.0;
  double t_begin = s->tc;
  for (;;) {
    int computing = work > 0;
    if (!computing && TaskDone(s, wait)) break;
    int busy = s->head[0] >= 0 || s->head[1] >= 0;
    /* [Note: joining a collective]: a head task still waiting for the
     * ranks moves nothing; [Note: two collectives at once]: two moving
     * tasks share */
    int moving[2], ncoll = 0;
    for (int k = 0; k < 2; k++) {
      moving[k] = s->head[k] >= 0 && s->task[s->head[k]].ready <= s->tc;
      ncoll += moving[k] && s->task[s->head[k]].coll;
    }
    double rc = busy ? 1.0 / fc : 1.0;
    double rm = (computing ? 1.0 / fm : 1.0) / (ncoll == 2 ? fb : 1.0);
    double dt = computing ? work / rc : HUGE_VAL;
    int ends = -1; /* -1: the work; else the stream whose task ends (or starts moving) first */
    for (int k = 0; k < 2; k++) {
      if (s->head[k] < 0) continue;
      const Task *x = &s->task[s->head[k]];
      double d = moving[k] ? x->rem / rm : x->ready - s->tc;
      if (d < dt) {
        dt = d;
        ends = k;
      }
    }
    if (dt == HUGE_VAL) { /* waiting on a task no stream holds: cannot happen */
      s->task[wait].done = 1;
      break;
    }
    s->tc += dt;
    if (computing) work = ends < 0 ? 0.0 : work - dt * rc;
    for (int k = 0; k < 2; k++) {
      int h = s->head[k];
      if (h < 0) continue;
      Task *x = &s->task[h];
      if (!moving[k]) {
        if (k == ends) x->ready = s->tc; /* joined: moves from now */
        continue;
      }
      x->rem = k == ends ? 0.0 : x->rem - dt * rm;
      if (x->rem > 1e-12) continue;
      x->rem = 0.0;
      x->done = 1;
      if (x->recorded) *(k == 0 ? &s->gbusy : &s->rbusy) += s->tc - x->start;
      s->head[k] = x->next;
      if (s->head[k] < 0) s->tail[k] = -1;
      else s->task[s->head[k]].start = s->tc;
    }
  }
  return s->tc - t_begin;
}

/* Compute `alone` seconds of the compute thread's work; returns the
 * seconds it took (longer beside a busy stream). */
static double Compute(Sim *s, double alone)
{
  if (alone <= 0) return 0.0;
  s->last_compute = alone;
  double took = Advance(s, alone, -1);
  /* alone when nothing ran beside it (took would carry rounding) */
  if (!(s->in->contended > 1.0) || fabs(took - alone) <= 1e-12 * alone) took = alone;
  if (s->record) {
    s->compute += took;
    s->contention += took - alone;
  }
  return took;
}

/* The compute thread blocks until task t ends: exposed time.  A real wait
 * ends when the collective does, on every rank of its group at once: the
 * ranks leave it together ([Note: joining a collective]: no drift yet). */
static void WaitTask(Sim *s, int t)
{
  if (TaskDone(s, t)) return;
  Advance(s, 0.0, t);
  s->last_compute = 0.0;
}

/* A task of `alone` seconds on stream k (0 gather, 1 reduce), issued now:
 * a collective (coll), moving bytes join_fraction x the last compute (0
 * right after a wait) later at the earliest ([Note: joining a
 * collective]), or a tail share (compute, at once); returns its index, -1
 * out of memory. */
static int Issue(Sim *s, int k, double alone, int coll)
{
  if (FsdpArrayReserve(&s->task, &s->cap_task, (size_t)s->ntask + 1, sizeof *s->task)) return -1;
  int i = s->ntask++;
  double join = coll && s->in->join_fraction > 0 ? s->in->join_fraction * s->last_compute : 0.0;
  s->task[i] = (Task){alone, s->tc, s->tc + join, coll, 0, s->record, -1};
  if (alone <= 0) { /* nothing to move */
    s->task[i].done = 1;
    return i;
  }
  if (s->tail[k] >= 0) s->task[s->tail[k]].next = i;
  else s->head[k] = i;
  s->tail[k] = i;
  return i;
}

/* The hook's seconds per unit as its reduction lands (TailQueue in
 * fsdp.c, FsdpOptimUnitLanded in optim.c): AdamW and the sum of squares
 * where AdamW may run early, else the sum of squares alone; NULL where
 * the runtime hands no units over (-optim_overlap none) or the input does
 * not model it. */
static const double *TailShares(const FsdpStepTimeInput *in)
{
  if (in->tail != FSDP_TAIL_POLL && in->tail != FSDP_TAIL_STREAM) return NULL;
  return in->tail_early ? in->optim_unit_s : in->check_unit_s;
}

/* TailPoll: hand landed units' shares to the compute thread; block: all. */
static void TailPoll(Sim *s, int block)
{
  while (s->tail_head < s->tail_n) {
    int u = s->tail_q[s->tail_head];
    if (!block && !TaskDone(s, s->u[u].reduce_task)) break;
    WaitTask(s, s->u[u].reduce_task);
    s->tail_head++;
    double share = TailShares(s->in)[u]; /* queued: TailQueue found shares */
    Compute(s, share);
    s->tail_done_s += share;
  }
}

static void Note(Sim *s, FsdpStepEventKind kind, int unit, double t)
{
  if (!s->record || !s->ev) return;
  if (s->nev < s->max_ev) s->ev[s->nev] = (FsdpStepEvent){kind, unit, s->micro, t - s->t0};
  s->nev++;
}

/* GradIsShard in fsdp.c: F = 1 with fp32 reductions, no per-micro-step sums. */
static int GradIsShard(const FsdpStepTimeInput *in)
{
  const FsdpRuntimeOptions *o = in->opt;
  return in->F == 1 && o->reduce_dtype == FSDP_DTYPE_FP32 &&
         (o->grad_accum <= 1 || !o->accum_comm);
}

/* UnitIssueGather */
static int IssueGather(Sim *s, int u)
{
  SimUnit *x = &s->u[u];
  x->state = GATHERING;
  x->gather_task = -1;
  if (s->in->F > 1) { /* F = 1: [Note: no sharding]: nothing moves */
    if (!s->in->unit_is_root[u]) {
      if (s->gslot_owner[s->next_gslot] >= 0)
        FSDP_ERROR(FSDP_ERR_INTERNAL, "step replay: unit %d needs gather slot %d, held by unit %d",
                   u, s->next_gslot, s->gslot_owner[s->next_gslot]);
      s->gslot_owner[s->next_gslot] = u;
      x->slot = s->next_gslot;
      s->next_gslot = (s->next_gslot + 1) % s->in->gather_slots;
    }
    x->gather_task = Issue(s, 0, s->in->gather_s[u], 1);
    if (x->gather_task < 0) FSDP_ERROR(FSDP_ERR_MEM, "out of memory replaying a step");
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
  WaitTask(s, s->u[u].gather_task);
  s->u[u].state = UNSHARDED;
}

/* UnitUnshard */
static int Unshard(Sim *s, int u)
{
  SimUnit *x = &s->u[u];
  if (x->state == SHARDED) FSDP_CALL(IssueGather(s, u));
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
    FSDP_CALL(IssueGather(s, v));
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

/* UnitAcquireGrad: the ring's slot is free once its last reduction ran;
 * the buffer is zeroed (a persistent one at micro-step 0 only) */
static void AcquireGrad(Sim *s, int u)
{
  SimUnit *x = &s->u[u];
  const FsdpRuntimeOptions *o = s->in->opt;
  if (x->holds_grad) return;
  x->holds_grad = 1;
  int persistent = o->grad_accum > 1 && !o->accum_comm && !GradIsShard(s->in);
  if (GradIsShard(s->in)) return; /* the shard, zeroed at the step's start (optimizer_s) */
  double zero = s->in->zero_unit_s ? s->in->zero_unit_s[u] : 0.0;
  if (persistent) {
    if (s->micro == 0) Compute(s, zero);
    return;
  }
  if (s->in->unit_is_root[u]) {
    WaitTask(s, s->root_rslot_task);
    x->grad_slot = -2;
  } else {
    WaitTask(s, s->rslot_task[s->next_rslot]);
    x->grad_slot = s->next_rslot;
    s->next_rslot = (s->next_rslot + 1) % s->in->grad_slots;
  }
  Compute(s, zero);
}

/* TailQueue in fsdp.c, for the last micro-step's reductions (task: the
 * unit's reduction, -1 landed already) */
static int TailQueue(Sim *s, int u, int micro, int nmicro, int task)
{
  const double *shares = TailShares(s->in);
  if (micro != nmicro - 1 || !shares) return FSDP_SUCCESS;
  double share = shares[u];
  s->u[u].reduce_task = task;
  if (s->in->tail == FSDP_TAIL_STREAM) { /* a task behind the reduction */
    if (Issue(s, 1, share, 0) < 0) FSDP_ERROR(FSDP_ERR_MEM, "out of memory replaying a step");
    s->tail_done_s += share;
    if (s->record) s->compute += share;
  } else {
    s->tail_q[s->tail_n++] = u;
  }
  return FSDP_SUCCESS;
}

/* UnitReduceGrad */
static int ReduceGrad(Sim *s, int u, int micro, int nmicro)
{
  SimUnit *x = &s->u[u];
  const FsdpRuntimeOptions *o = s->in->opt;
  x->holds_grad = 0;
  if (!o->accum_comm && micro != nmicro - 1) return FSDP_SUCCESS; /* accumulate locally */
  if (GradIsShard(s->in) && s->in->R == 1) /* nothing to reduce: the shard is the gradient */
    return TailQueue(s, u, micro, nmicro, -1);
  int t = Issue(s, 1, s->in->reduce_s[u], 1);
  if (t < 0) FSDP_ERROR(FSDP_ERR_MEM, "out of memory replaying a step");
  Note(s, FSDP_STEP_EV_REDUCE, u, s->tc);
  if (x->grad_slot == -2) s->root_rslot_task = t;
  else if (x->grad_slot >= 0) s->rslot_task[x->grad_slot] = t;
  x->grad_slot = -1;
  return TailQueue(s, u, micro, nmicro, t);
}

static void RunStage(Sim *s, int st, int backward)
{
  const FsdpStepTimeInput *in = s->in;
  Note(s, backward ? FSDP_STEP_EV_BACKWARD : FSDP_STEP_EV_FORWARD, in->stage_unit[st], s->tc);
  Compute(s, backward ? in->bwd_s[st] : in->fwd_s[st]);
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
      FSDP_CALL(ReduceGrad(s, u, micro, K));
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
  s.head[0] = s.head[1] = s.tail[0] = s.tail[1] = -1;
  s.root_rslot_task = -1;
  int gslots = in->gather_slots > 0 ? in->gather_slots : 1;
  int rslots = in->grad_slots > 0 ? in->grad_slots : 1;
  s.u = calloc((size_t)in->nunits, sizeof *s.u);
  s.gslot_owner = malloc((size_t)gslots * sizeof *s.gslot_owner);
  s.rslot_task = malloc((size_t)rslots * sizeof *s.rslot_task);
  s.tail_q = malloc((size_t)(in->nunits + 1) * sizeof *s.tail_q);
  int err = FSDP_SUCCESS;
  if (!s.u || !s.gslot_owner || !s.rslot_task || !s.tail_q) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM,
                         "out of memory replaying a step of %d units", in->nunits);
    goto done;
  }
  for (int i = 0; i < gslots; i++) s.gslot_owner[i] = -1;
  for (int i = 0; i < rslots; i++) s.rslot_task[i] = -1;
  for (int u = 0; u < in->nunits; u++) {
    s.u[u] = (SimUnit){SHARDED, -1, -1, 0, 0, -1, -1, -1, -1};
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
    if (err) break;
    /* FsdpRuntimeFinishGradients (the tail's remaining units), then the
     * optimizer: what the tail did not run */
    TailPoll(&s, 1);
    WaitTask(&s, s.tail[1]);
    double rest = in->optimizer_s - s.tail_done_s;
    Compute(&s, rest > 0 ? rest : 0.0);
    if (s.record) out->step_s = s.tc - s.t0;
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
  free(s.rslot_task);
  free(s.tail_q);
  free(s.task);
  return err;
}
