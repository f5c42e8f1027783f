/* steptime.h: the step's schedule replayed on a virtual clock, for
 * fsdp-plan's time prediction.
 *
 * [Note: the schedule replayed] FsdpStepTimeSimulate walks the same
 * program that FsdpRuntimeForwardBackward runs (fsdp.c: stages forward then
 * backward, on-demand and prefetched gathers under the limiter and the
 * gather ring, RAF/NRAF reshards, the gradient ring's waits and the zeroing
 * of each gradient buffer taken, reductions after each unit's last
 * backward stage, -grad_accum micro-steps with or without communication,
 * the gradient tail's per-unit work as reductions land (AdamW and the sum
 * of squares, or the sum of squares alone where clipping holds AdamW
 * back), then the wait for the last reductions and the rest of the
 * optimizer) on one virtual
 * clock shared by the compute thread and two streams (all-gather, reduce),
 * each stream running its tasks in issue order.  The compute thread issues
 * a task and goes on; when it waits on a gather or a gradient buffer
 * still in use, time advances to that task's end: those waits are the
 * exposed communication.  Casts and the loss/norm reductions are not
 * modelled.  The second of two simulated steps is reported (its first
 * gathers may wait for the streams still busy with the first step's work).
 * The replay is a second reading of fsdp.c's schedule, so it is held to
 * it: the event order it reports (FsdpStepEvent) must equal the order of
 * the same events in a -trace of fsdp-train with the same options
 * (tests/test_steptime.sh).  A change to the runtime's schedule changes
 * that order and fails the test until this file follows.
 *
 * [Note: contended compute] A stream thread in a blocking collective is
 * not idle: MPI polls, and the kernel moves the bytes.  Where the ranks'
 * compute threads already fill a node's cores (ranks per node x OpenMP
 * threads >= cores), that CPU comes from the compute thread: on 2 ranks
 * over 2 cores, micro-step 2 of -grad_accum 2 ran its stages 21-31% slower
 * while micro-step 1's all-reduce ran beside it
 * (bench/results/2026-12-01-steptime-validation.md).  The
 * probe times the model's stages with an all-reduce looping on a stream
 * thread beside them; their time over the time alone is `contended` here,
 * the all-reduce's time over its time alone `comm_contended`.  The replay
 * advances the compute thread and the streams together, event by event
 * (an interval ends when a stage or a stream's running task does): a stage
 * runs at 1/contended of its rate while either stream is busy, a stream
 * task at 1/comm_contended of its rate while the compute thread computes,
 * each at full rate otherwise.  Only what overlaps pays: a prefetched
 * gather that the compute thread ends up waiting for moves its last bytes
 * alone, as do an on-demand gather and the step's last reduction.
 * (Before, a task was timed once, when issued, at the contended rate if
 * compute was to go on beside it: a waited-for gather was charged in full,
 * and at 10 Gbit/s the wider wraps' predicted exposure came out 2.3x the
 * measured: bench/results/2026-12-01-steptime-validation.md.)
 *
 * [Note: joining a collective] A collective moves nothing until the last
 * rank of its group has issued it, and a rank's stream thread must wake
 * up to run it; on 4 ranks over 2 cores the ranks drift apart by
 * milliseconds within a stage.  In a 10 Gbit/s trace of -prefetch none
 * (bench/results/2026-12-02-steptime-validation.md), the last rank issued
 * a collective 6.9 ms after rank 0 on average, 138 ms a step over its 20
 * collectives, where the replay charged nothing.  The probe measures the
 * wait directly: a one-element world all-reduce issued on a stream thread
 * right after each stage and waited for, every rank at once; the ranks
 * drift apart in proportion to
 * the work between two meetings, so it keeps what that lockstep took
 * beyond the slowest rank's median stage times, over them
 * (`join_fraction`; the replay's stages already run at the slowest rank's
 * pace, so a core slower than the other for the whole probe is not
 * charged again: JoinFraction in plan/probe.c).  The replay holds each collective that fraction
 * of the compute that preceded its issue (the last stage, or the
 * optimizer at a step's start; nothing right after a wait for a
 * collective, which the ranks leave together) before it moves bytes (the
 * stream is busy meanwhile: its thread sits in the collective); behind a
 * running task the wait overlaps that task, as the other ranks' issues
 * do.  (A constant
 * wait per collective, the mean, put the exposed order of one node's and
 * the 1 Gbit/s sweep's settled pairs at 0.77 and 0.89 where the
 * proportional one gives 0.92 and 0.96: it charged the short forward
 * stages' gathers as much as the long backward ones.)
 *
 * [Note: two collectives at once] The gather stream and the reduce
 * stream share the link and the cores: in backward the next unit's gather
 * runs beside the last unit's reduce-scatter (207 ms a step of the same
 * trace, both streams busy).  The probe times two equal world all-gathers
 * at once on two stream threads against one alone (`concurrent`); while
 * both streams move bytes, each task runs at 1/concurrent of its rate
 * (times 1/comm_contended while the compute thread computes).
 */
#ifndef FSDP_STEPTIME_H
#define FSDP_STEPTIME_H

#include "runtime/fsdp.h"

typedef enum {
  FSDP_STEP_EV_GATHER,  /* an all-gather issued (on demand or prefetched) */
  FSDP_STEP_EV_FORWARD, /* a forward stage starts */
  FSDP_STEP_EV_BACKWARD,/* a backward stage starts */
  FSDP_STEP_EV_REDUCE   /* a unit's gradient reduction issued */
} FsdpStepEventKind;

typedef struct {
  FsdpStepEventKind kind;
  int unit;   /* runtime unit index */
  int micro;  /* micro-step */
  double t;   /* virtual seconds since the step began: issue or start time */
} FsdpStepEvent;

typedef struct {
  const FsdpRuntimeOptions *opt; /* prefetch, limiter, RAF, accumulation */
  int F, R;                      /* sharding factor, replicas */
  int nunits, nstages;
  const int *unit_is_root;       /* [nunits] */
  const int *stage_unit;         /* [nstages], forward order */
  const double *fwd_s, *bwd_s;   /* [nstages] compute seconds of each stage */
  const double *gather_s;        /* [nunits] one all-gather of the unit */
  const double *reduce_s;        /* [nunits] one reduction (reduce-scatter + all-reduce) */
  double optimizer_s;            /* clipping and AdamW on the shards */
  int gather_slots, grad_slots;  /* the rings (FsdpGatherRingPlan, [Note: gather memory]) */
  /* [Note: the gradient tail] (runtime/optim.c): where AdamW runs when it
   * may run per unit as reductions land (FsdpTailWhere: -optim_overlap;
   * tail_early: -grad_clip 0 and no fp16 scaler, else it stays after the
   * last reduction), and each unit's share of optimizer_s ([nunits]; NULL:
   * no tail).  poll: the compute thread runs a landed unit's share after
   * the backward stage in which it landed, and waits for the rest in
   * turn; stream: the share runs on the reduce stream right after the
   * unit's reduction, delaying the next one. */
  int tail, tail_early;
  const double *optim_unit_s;
  /* [Note: contended compute]: a stage's time over its time alone while
   * a stream is busy (<= 1: communication takes no compute CPU) */
  double contended;
  /* the other side: a collective's time beside compute over its time
   * alone (<= 1: as alone), while the compute thread computes */
  double comm_contended;
  /* [Note: joining a collective]: a collective moves bytes this fraction
   * of the compute before its issue after it (0: at once) */
  double join_fraction;
  /* [Note: two collectives at once]: a collective's time while the other
   * stream moves bytes too, over its time alone (<= 1: as alone) */
  double concurrent;
  /* [Note: the gradient tail] with AdamW gated (tail_early 0), the hook
   * still runs as each unit lands: its sum of squares (and the scaler's
   * inf/NaN check), each unit's seconds here ([nunits]; NULL: not
   * modelled); like optim_unit_s, a share of optimizer_s run early */
  const double *check_unit_s;
  /* UnitAcquireGrad: zeroing the unsharded gradient buffer a unit's
   * backward accumulates into (a ring slot every micro-step, a persistent
   * -accum_comm 0 buffer at micro-step 0; nothing where the gradient is
   * the shard), on the compute thread before its first backward stage
   * ([nunits]; NULL: not modelled) */
  const double *zero_unit_s;
} FsdpStepTimeInput;

typedef struct {
  double step_s;        /* one steady-state step */
  double compute_s;     /* stage compute + optimizer (contended stages at their longer time) */
  double contention_s;  /* of compute_s: the stages' time lost to streams beside them */
  double exposed_s;     /* compute thread waiting on communication */
  double gather_busy_s, reduce_busy_s; /* stream busy time in the step */
  int max_in_flight;    /* most gathers issued ahead of the unit computing at once */
} FsdpStepTimeResult;

/* Not collective, allocates only scratch.  events (may be NULL): the
 * reported step's events in program order, at most max_events, their
 * number in *nevents.  FSDP_ERR_INTERNAL if the replay takes a ring slot
 * that is still held (the runtime would fail the same way). */
int FsdpStepTimeSimulate(const FsdpStepTimeInput *in, FsdpStepTimeResult *out,
                         FsdpStepEvent *events, int max_events, int *nevents);

extern const char *const FsdpStepEventNames[4];

#endif
