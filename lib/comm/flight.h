/* flight.h: flight recorder and hang watchdog for collectives.
 *
 * Every collective issued through coll.c (all-gather, reduce-scatter,
 * all-reduce, scalar sum / max) gets a sequence number on its
 * communicator (1, 2, ... per communicator, in issue order: the order MPI
 * matches them in) and an entry in a per-rank ring of the last
 * FSDP_FLIGHT_RING calls: sequence, kind, communicator, unit, step, phase,
 * bytes, dtype, issue / start / end times and state (issued, running,
 * done, device = handed to NCCL).
 *
 * [Note: hang watchdog] A watchdog thread per rank ticks every 0.2 s.  It
 * publishes a heartbeat (the tick) next to the rank's per-communicator
 * progress (newest sequence issued and done, and the identity of the last
 * FSDP_FLIGHT_RECENT calls) in an MPI shared-memory window over the
 * ranks of its node (MPI_Win_allocate_shared on a MPI_COMM_TYPE_SHARED
 * split of world; readers use a version counter, no MPI call, so they
 * work while other threads are blocked inside MPI).  With -coll_timeout T
 * > 0, a collective that has been running for more than T s makes the
 * rank re-read its node peers' records every second until every peer's
 * tick has moved or T/4 s (bounded to 1..4 s) have passed -- a busy rank
 * on a loaded machine can miss ticks for more than a second -- and then
 * print one message that names the collective and
 *   - each member of its communicator whose heartbeat did not move (the
 *     process is stopped, swapped out or dead) or that has not issued
 *     that sequence number yet ("not arrived"; a rank waiting in an
 *     earlier collective of the same communicator is rightly one of
 *     these: gathers run ahead),
 *   - for each communicator, the first sequence number at which two ranks
 *     recorded different collectives (kind, unit, step or bytes): a rank
 *     issuing a different collective than its peers;
 * writes its ring to stderr (and to RUNFILE.flight-rank<R>.txt when a run
 * file is open) and ends the job (FsdpErrorAbortJob).  Long before that,
 * with -coll_warn W (default 60 s, 0 = off, below -coll_timeout), a
 * collective running for more than W s gets the same diagnosis once (its
 * window W/4 s, 1..4 s) as a warning on stderr -- the collective, its
 * unit, step and phase, and the ranks that have not arrived -- and the job
 * goes on: a stopped rank is named within a minute, not after the
 * timeout's ten.  The diagnosing thread goes on ticking through its
 * window, so ranks that diagnose the same hang at once do not name each
 * other.  Waiting costs no core meanwhile ([Note: waiting for a
 * collective], coll_mpi.c: after a second a wait sleeps between tests).  Ranks on other
 * nodes have no record in the window: they are reported as "on another
 * node" and the diagnosis is limited to this node (the timeout still ends
 * the job).  NCCL collectives complete on the device: they are recorded
 * (state "device") but not timed.
 *
 * SIGUSR2 on any rank makes every rank of its node (mpirun forwards the
 * signal to all ranks anyway) write its ring, without stopping the job:
 * the handler sets a flag, the watchdog thread dumps.
 *
 * The recorder is a process singleton (like the error identity): coll.c
 * records into it when one exists and does nothing otherwise (tools,
 * unit tests).
 */
#ifndef FSDP_FLIGHT_H
#define FSDP_FLIGHT_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "base/dtype.h"

#define FSDP_FLIGHT_RING 64
#define FSDP_FLIGHT_RECENT 32

/* Kinds: the FsdpCollKind values, then the scalar reductions. */
typedef enum {
  FSDP_FLIGHT_ALL_GATHER,
  FSDP_FLIGHT_REDUCE_SCATTER,
  FSDP_FLIGHT_ALL_REDUCE,
  FSDP_FLIGHT_SCALAR_SUM,
  FSDP_FLIGHT_SCALAR_MAX,
  FSDP_FLIGHT_NKINDS
} FsdpFlightKind;

/* Collective on world.  Starts the recorder and its watchdog thread and
 * installs the SIGUSR2 handler.  timeout_s: -coll_timeout (0: never time
 * out); warn_s: -coll_warn (0: no warning; below timeout_s).  run_file:
 * the -metrics path or NULL (dumps go next to it).  While a recorder
 * exists, further creates only count (the first one's settings stay: two
 * trainers in one process share it). */
int FsdpFlightCreate(MPI_Comm world, double timeout_s, double warn_s, const char *run_file);
/* Not collective.  A usage error naming -coll_warn unless warn_s is >= 0
 * and, with both on, below timeout_s. */
int FsdpFlightCheckWarn(double timeout_s, double warn_s);
/* Collective on world when it matches the first create (frees the window,
 * restores the SIGUSR2 disposition).  Accepts no recorder. */
int FsdpFlightDestroy(void);

/* Recording (coll.c; no-ops without a recorder).  Issue returns a handle
 * for Start/End (0: none).  comm_name names the communicator in
 * messages; comm identifies it. */
uint64_t FsdpFlightIssue(MPI_Comm comm, const char *comm_name, FsdpFlightKind kind, int unit,
                         uint64_t bytes, FsdpDtype dt);
void FsdpFlightStart(uint64_t h);
void FsdpFlightEnd(uint64_t h);
/* The call was handed to an asynchronous device back-end (NCCL). */
void FsdpFlightDevice(uint64_t h);

/* Context stamped on the calls issued next (compute thread): the step
 * (counted from 1 as in the progress log) and phase (FsdpPhase, trace.h). */
void FsdpFlightSetStep(int64_t step);
void FsdpFlightSetPhase(int phase);


#endif
