/* trace.h: a timeline of one run in the Chrome trace-event format (opens
 * in Perfetto or chrome://tracing).
 *
 * Per rank (pid = world rank) three tracks: tid 0 "compute" (unit forward /
 * backward, optimizer, and waits: time the compute thread was blocked on an
 * event), tid 1 the all-gather stream and tid 2 the reduce stream (each
 * task of a communication stream; for a
 * collective, args hold step, unit (index in forward order, root = 0),
 * kind (all_gather, reduce_scatter, all_reduce), phase, bytes and issue_ts, on the same clock as ts).  Times are
 * microseconds since a barrier at trace creation, on CLOCK_MONOTONIC.
 *
 * Recording is cheap (appends to arrays); the compute track is written by
 * the compute thread and the comm track's timings by the stream thread
 * (through FsdpTraceStreamRecorder), joined by sequence number only when
 * the stream is idle (FsdpTraceWrite).  Without -trace the runtime still
 * sums comm busy time and compute wait time for the summary.
 */
#ifndef FSDP_TRACE_H
#define FSDP_TRACE_H

#include <mpi.h>
#include <stdint.h>

#include "comm/coll.h"
#include "comm/stream.h"

typedef struct FsdpTrace_ *FsdpTrace;

/* Communication streams a trace tells apart: lane 0 the all-gather stream,
 * lane 1 the reduce stream (tids 1 and 2 of each rank). */
#define FSDP_TRACE_LANES 2

typedef enum { FSDP_PHASE_FORWARD, FSDP_PHASE_BACKWARD, FSDP_PHASE_OPTIM } FsdpPhase;
extern const char *const FsdpPhaseNames[3];

/* Collective on comm (a barrier fixes t0).  enabled = 0 keeps only the
 * totals (no per-event storage). */
int FsdpTraceCreate(MPI_Comm comm, int enabled, FsdpTrace *t);
int FsdpTraceDestroy(FsdpTrace *t);
int FsdpTraceEnabled(FsdpTrace t);

/* Microseconds since t0. */
double FsdpTraceNow(FsdpTrace t);

/* Compute track: a complete span [begin_us, end_us).  name is copied. */
int FsdpTraceCompute(FsdpTrace t, const char *name, const char *cat, int64_t step, int unit,
                     double begin_us, double end_us);
/* Compute track: time blocked waiting for an event (also summed). */
int FsdpTraceWait(FsdpTrace t, const char *what, int64_t step, int unit, double begin_us,
                  double end_us);

/* Comm track: metadata of a task issued with event seq on stream `lane`. */
int FsdpTraceIssue(FsdpTrace t, int lane, uint64_t seq, FsdpCollKind kind, FsdpPhase phase,
                   int64_t step, int unit, uint64_t bytes, double issue_us);

/* The recorder to install on a communication stream, with ctx =
 * FsdpTraceLane(t, lane); safe for several stream threads at once. */
void FsdpTraceStreamRecorder(void *ctx, const FsdpStreamTaskTime *tt, const void *arg);
void *FsdpTraceLane(FsdpTrace t, int lane);

/* Totals since creation: seconds the compute thread waited, seconds the
 * stream spent in collectives (busy). */
double FsdpTraceWaitSeconds(FsdpTrace t);
double FsdpTraceCommBusySeconds(FsdpTrace t);
/* Largest number of all-gathers issued but not yet waited for. */
void FsdpTraceNoteInFlight(FsdpTrace t, int gathers_in_flight);
int FsdpTraceMaxInFlight(FsdpTrace t);

/* Collective on comm, with the stream idle.  Rank 0 writes every rank's
 * events to path as one JSON object {"traceEvents": [...]}. */
int FsdpTraceWrite(FsdpTrace t, const char *path);

#endif
