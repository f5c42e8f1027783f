/* steptime.h: the step's schedule replayed on a virtual clock, for
 * fsdp-plan's time prediction.
 *
 * [Note: the schedule replayed] FsdpStepTimeSimulate walks the same
 * program that FsdpRuntimeForwardBackward runs (fsdp.c: stages forward then
 * backward, on-demand and prefetched gathers under the limiter and the
 * gather ring, RAF/NRAF reshards, the gradient ring's waits, reductions
 * after each unit's last backward stage, -grad_accum micro-steps with or
 * without communication, then the wait for the last reductions and the
 * optimizer, per unit under the gradient tail when it may) with three clocks: the compute thread, the all-gather stream
 * and the reduce stream, each running its work in issue order.  A task
 * starts when it is issued and its stream is free; the compute thread
 * advances by each stage's compute time and, when it waits on a gather or
 * a gradient buffer still in use, to that event's end: those waits are the
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
 * while micro-step 1's all-reduce ran beside it (bench/README.md).  The
 * probe times the model's stages with an all-reduce looping on a stream
 * thread beside them; their time over the time alone is `contended` here.
 * The replay keeps each stream's busy intervals (a task runs from its
 * start to its end) and runs a stage at 1/contended of its rate while
 * either stream is busy, at full rate otherwise: only compute that
 * overlaps communication pays, and exposed waits are unchanged.  The
 * collective beside compute is slower too (the probe times the all-reduce
 * it ran beside the stages against its curve alone: comm_contended): a
 * task the compute thread does not wait for at once (a prefetched gather,
 * a reduction with backward stages after it) takes that much longer; an
 * on-demand gather and the step's last reduction run alone.  (A task is
 * timed when issued; a prefetched gather that is waited for after all is
 * charged in full: the replay does not share a core's time event by
 * event.)
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
   * alone (<= 1: as alone).  Charged to the tasks issued for the compute
   * thread to go on computing (prefetched gathers, reductions but the
   * step's last); an on-demand gather and the last reduction are waited
   * for, alone. */
  double comm_contended;
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
