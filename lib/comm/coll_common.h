/* coll_common.h: what coll.c and every collective back-end share (not
 * installed): the names of kinds and groups for messages, the split of a
 * reduction's scale, and how an MPI wait waits (coll_common.c).
 *
 * [Note: no calls back into coll.c] coll.c dispatches to the back-ends
 * through their tables (coll_backend.h); a back-end (coll_mpi.c,
 * coll_staged.c, coll_nccl.c) never calls coll.c.  What both sides need is
 * here, below both, so the files of comm/ depend on each other in one
 * direction only: coll.c -> back-ends -> coll_common.c
 * (tests/test_layers.sh fails on a cycle among the files of a layer).
 */
#ifndef FSDP_COLL_COMMON_H
#define FSDP_COLL_COMMON_H

#include <mpi.h>

#include "comm/coll.h"

/* Not collective.  g's name for messages ("unnamed" without one).
 * (FsdpCollKindNames, declared in coll.h, is defined in coll_common.c.) */
const char *FsdpCollGroupName(const FsdpGroup *g);

/* Not collective.  [Note: scaled reductions] (coll_common.c): the factor
 * applied to each input before the sum and the one applied to the sum
 * after it; pre * post == scale, both powers of two when scale is. */
void FsdpCollSplitScale(float scale, float *pre, float *post);

/* [Note: waiting for a collective] A collective on the communication
 * thread waits most of its time for the peers to enter it; the thread
 * shares its rank's cores with the compute thread.  How it waits
 * (FSDP_COMM_WAIT; the MPI back-end and the scalar reductions of coll.c
 * wait the same way):
 *   adaptive  (the default) the nonblocking call (MPI_Iallgather, ...),
 *          then MPI_Test in a loop -- polling as the blocking call does, so
 *          a collective keeps its latency -- for COLL_SPIN_S (1 s); a wait
 *          still going then is a peer far behind or a hang, and it goes on
 *          with nanosleep between tests, from 50 us doubling to 1 ms: a
 *          stopped rank costs its peers no core while the watchdog warns
 *          and times out ([Note: hang watchdog], flight.h; test_flight
 *          measures a waiting rank's CPU time), for at most 1 ms more
 *          latency on a wait that has taken a second already.
 *   block  the blocking MPI call (MPI_Allgather, ...).  Open MPI polls for
 *          the peers inside it without ever sleeping, so while a peer still
 *          computes, this thread takes a share of the core from this rank's
 *          compute thread -- and during a hang a whole core, until
 *          -coll_timeout (the default before adaptive).
 *   yield  the nonblocking call, then MPI_Test and sched_yield until it
 *          completes: the compute thread runs whenever it is ready, the
 *          collective progresses between its time slices.
 *   sleep  the nonblocking call, then MPI_Test with nanosleep between tests,
 *          from 2 us doubling to 256 us: the thread costs (almost) no cycles
 *          while it waits, at a latency of up to 256 us per step of the
 *          collective's algorithm.
 * Measured (bench/results/2026-12-01-commthreads.md): at W = 2 on one
 * node, one thread per rank, sleep made F = 2 steps a few percent faster
 * than block (within the noise of the loaded machine), but on an
 * oversubscribed, loaded machine every wake-up from nanosleep waits for a
 * time slice: test_chunked (thousands of small collectives) took 213 s
 * instead of 35 s.  adaptive sleeps only after a second of waiting, so
 * short collectives wait as under block; yield and sleep are there for
 * runs with a core to spare per rank and large collectives. */
typedef enum { COLL_WAIT_ADAPTIVE, COLL_WAIT_BLOCK, COLL_WAIT_YIELD, COLL_WAIT_SLEEP } CollWait;

/* Not collective.  The way FSDP_COMM_WAIT names (adaptive when unset); a
 * usage error naming the variable and its values when it names none. */
int FsdpCollWaitFromEnv(CollWait *out);
/* Not collective.  1 when FSDP_COMM_WAIT chooses adaptive (unset, or a
 * bad value: that is reported where the MPI back-end is created). */
int FsdpCollWaitIsAdaptive(void);
/* Completes *req the way `wait` says; returns an MPI error code.  Called
 * by the one thread that issued the request's collective. */
int FsdpCollWaitRequest(CollWait wait, MPI_Request *req);
/* Collective on comm.  MPI_Allreduce for the MPI back-end's and the scalar
 * reductions (coll.c): with adaptive the nonblocking call, waited for as
 * the Note says; else the blocking one.  Returns an MPI error code. */
int FsdpCollMpiAllreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                         MPI_Comm comm, int adaptive);

#endif
