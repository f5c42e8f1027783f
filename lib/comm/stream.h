/* stream.h: ordered work queue with events -- the CPU analog of a CUDA
 * stream.
 *
 * A stream owns one thread that runs enqueued tasks strictly in issue
 * order.  Enqueue returns at once with an event: a recorded point on the
 * stream, complete when every task up to and including this one has run.
 * The compute thread waits on an event only when it needs the result
 * (FsdpEventWait), which is what lets collectives overlap compute.
 * Events are values (stream + sequence number), cost nothing to create and
 * need no release, like cudaEventRecord on a stream.
 *
 * A task's argument bytes are copied into the queue slot at enqueue, so the
 * caller's argument struct may live on its stack; buffers it points to must
 * stay valid until the event completes.
 *
 * [Note: a failed task ends the job] Stream tasks are mostly collectives:
 * the peers of a rank whose task failed are inside (or about to enter) the
 * same collective and would wait for it forever, and this rank's compute
 * thread may not look at the stream again for a long time.  So by default
 * (FSDP_STREAM_FAIL_ABORT_JOB) the stream thread itself ends the whole job
 * at the first failure: it prints one message naming the rank, the stream,
 * the task (kind = its label, unit, step; see FsdpStreamSetTaskIdentity)
 * and the cause, then calls FsdpErrorAbortJob (error.h: abort hooks, then
 * MPI_Abort on the world).  A stream whose tasks involve no other rank may
 * choose FSDP_STREAM_FAIL_RECORD instead: the first failing task stops the
 * stream, later tasks are skipped, and every wait on an event at or after
 * it returns that task's error code.
 *
 * [Note: FSDP_FAULT] TEST ONLY.  The environment variable
 *   FSDP_FAULT=stream:rank=R:step=S[:kind=K][:unit=U]
 * makes the first task on world rank R whose identity matches (step S;
 * label K, e.g. reduce-scatter, all-gather, cast_grads; unit U) fail
 * without running, as if its collective had failed; it fires once per
 * process.  Entries are separated by commas; entries that do not start
 * with "stream:" belong to other fault sites and are ignored here.  A
 * malformed stream entry makes FsdpStreamCreate fail with a usage error.
 * An entry skip:rank=R:step=S[:kind=K][:unit=U] (same keys) makes rank R
 * not issue the first matching collective at all (FsdpStreamFaultSkip,
 * asked by coll.c before it issues on a stream): the rank's schedule
 * diverges from its peers', which the hang watchdog must diagnose
 * ([Note: hang watchdog] in flight.h).
 * Unset (normal runs) it costs one branch per task and changes nothing.
 *
 * Streams are used by one issuing thread (the compute thread).
 */
#ifndef FSDP_STREAM_H
#define FSDP_STREAM_H

#include <stddef.h>
#include <stdint.h>

typedef struct FsdpStream_ *FsdpStream;

typedef struct {
  FsdpStream stream; /* NULL: the null event, always complete */
  uint64_t seq;
} FsdpEvent;

#define FSDP_EVENT_NULL ((FsdpEvent){NULL, 0})

/* Task body: runs on the stream's thread; returns an error code. */
typedef int (*FsdpStreamFn)(void *arg);

/* Largest argument a task may carry (bytes copied at enqueue). */
#define FSDP_STREAM_ARG_BYTES 192

/* Task timing record, filled by the stream thread when a recorder is set. */
typedef struct {
  const char *label; /* the label given at enqueue (static storage) */
  double issue_s, start_s, end_s; /* FsdpWallTime() seconds */
  uint64_t seq;
} FsdpStreamTaskTime;
typedef void (*FsdpStreamRecorder)(void *ctx, const FsdpStreamTaskTime *t, const void *arg);

/* Create a stream and start its thread.  capacity: queue slots (enqueue
 * blocks while the queue is full). */
int FsdpStreamCreate(const char *name, int capacity, FsdpStream *s);

/* Drain the queue, stop and join the thread, free; accepts NULL. */
int FsdpStreamDestroy(FsdpStream *s);

/* Enqueue fn(copy of arg[0..arg_bytes)).  label is a static string used by
 * the recorder and, as the task's kind, by failure messages.  *ev (may be
 * NULL) receives the task's event. */
int FsdpStreamEnqueue(FsdpStream s, const char *label, FsdpStreamFn fn,
                      const void *arg, size_t arg_bytes, FsdpEvent *ev);

/* Identity stamped on the tasks enqueued on s from now on, for failure
 * messages and FSDP_FAULT: unit (-1: none) and step (the optimizer step,
 * counted from 1 as in the progress log; 0: none).  Issuing thread only. */
void FsdpStreamSetTaskIdentity(FsdpStream s, int unit, int64_t step);

/* The identity FsdpStreamSetTaskIdentity set last (unit -1 / step 0: none). */
void FsdpStreamTaskIdentity(FsdpStream s, int *unit, int64_t *step);

/* TEST ONLY ([Note: FSDP_FAULT]): 1 once, for the first collective the
 * skip: entry matches (its label = kind, and s's current identity), after
 * printing a line; the caller then does not issue it. */
int FsdpStreamFaultSkip(FsdpStream s, const char *label);

/* What a failing task does ([Note: a failed task ends the job]). */
typedef enum {
  FSDP_STREAM_FAIL_ABORT_JOB, /* default: message, then end every rank */
  FSDP_STREAM_FAIL_RECORD     /* stop the stream; waits return the error */
} FsdpStreamFailurePolicy;
/* Set while the stream is idle (e.g. right after create). */
int FsdpStreamSetFailurePolicy(FsdpStream s, FsdpStreamFailurePolicy policy);

/* Block until ev is complete; returns the stream's error if a task at or
 * before ev failed. */
int FsdpEventWait(FsdpEvent ev);

/* *done = 1 if ev is complete (never blocks). */
int FsdpEventQuery(FsdpEvent ev, int *done);

/* Wait for everything enqueued so far. */
int FsdpStreamSynchronize(FsdpStream s);

/* Seconds spent by callers blocked in FsdpEventWait/Synchronize on this
 * stream, or in FsdpStreamEnqueue on a full queue, since creation (exposed
 * communication time). */
double FsdpStreamWaitSeconds(FsdpStream s);

/* Install a recorder called on the stream thread after each task that ran
 * (not for tasks skipped after a failure), in issue order; arg is the
 * task's argument copy.  NULL removes it.  Set it while the stream is idle. */
int FsdpStreamSetRecorder(FsdpStream s, FsdpStreamRecorder rec, void *ctx);

/* The OpenMP team size a task on s's thread gets (omp_get_max_threads()
 * there; 1 by [Note: one thread per stream] in stream.c), or 0 before the
 * thread has started.  For tests. */
int FsdpStreamThreadTeamLimit(FsdpStream s);

/* Monotonic wall clock in seconds. */
double FsdpWallTime(void);

#endif
