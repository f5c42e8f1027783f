/* coll.h: collectives over a backend, with byte accounting (docs/design.md
 * §5, "Collectives").
 *
 * all-gather and reduce-scatter run on a sharding group, all-reduce on a
 * replica group; each exists blocking and issued on a stream (returns an
 * event at once).  Two backends: MPI on host buffers, and NCCL on device
 * buffers (builds with --with-cuda; see [Note: NCCL collectives and
 * streams] in coll_nccl.c for streams, events and communicators).  One
 * file per back-end ([Note: collective backends] in coll_backend.h).
 *
 * Buffers follow the FlatParameter layout: all-gather receives into the
 * unsharded buffer of n*count elements (rank r's shard lands at r*count),
 * reduce-scatter reads the unsharded gradient of n*count elements and
 * writes this rank's count-element shard.  No copies before or after.
 *
 * bf16/fp16 travel as 2-byte elements; their sums use a user-defined MPI_Op
 * that converts each pair of operands to fp32, adds, and rounds once.
 * Reductions with a scale (1/W for a gradient mean; 1 for a plain sum)
 * divide before and after the sum, by a power of two near sqrt(1/scale)
 * and the rest, on both back-ends and for every dtype ([Note: scaled
 * reductions] in coll_common.c): the sum of W fp16 gradients neither
 * overflows as sum-then-divide would nor underflows as divide-then-sum
 * would.
 *
 * [Note: byte accounting] Counters use the algorithm-independent volume
 * received per rank: all-gather and reduce-scatter (n-1)/n * P * K,
 * all-reduce 2(n-1)/n * S * K, for a group of n, total elements P (S for
 * all-reduce) of K bytes.  The volume is split into intra- and inter-node
 * bytes in proportion to the group peers on my node versus elsewhere
 * (FsdpGroup.peers_intra / peers_inter), i.e. each peer is charged the
 * 1/n * P * K it contributes.  Counting happens at issue, on the issuing
 * thread, so counters never race with the stream.  Multiplying before
 * dividing keeps this exact whenever n divides the product, which always
 * holds for all-gather and reduce-scatter (P = n * count); for an
 * all-reduce with S*K not a multiple of n, intra + inter can differ from
 * bytes by the truncation.
 *
 * [Note: collectives and threads] An async collective runs on the stream's
 * thread.  MPI requires collectives on one communicator to be called in the
 * same order on every rank, so while async collectives on a communicator
 * are in flight the compute thread must not call a blocking collective or
 * scalar reduction on that same communicator (wait on the event first, or
 * use another communicator: e.g. world for the loss).  Collectives on
 * different communicators may overlap freely (MPI_THREAD_MULTIPLE).  The
 * FsdpColl must outlive every collective issued with it.
 *
 * Per-rank counts are size_t.  MPI counts are ints, so the MPI backend
 * splits a collective of more than 2^29 elements per rank into chunks
 * that keep the layout ([Note: chunked collectives] in coll_mpi.c); the
 * environment variable FSDP_COLL_MAX_COUNT sets that limit instead (up to
 * INT_MAX; tests use a few dozen to run the chunked path on small
 * buffers).  NCCL counts are size_t: no chunks.
 * Errors name the collective and the group: "reduce-scatter on the
 * sharding comm (4 ranks): MPI_Reduce_scatter_block failed: ...".
 */
#ifndef FSDP_COLL_H
#define FSDP_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "comm/stream.h"
#include "comm/topo.h"

typedef enum {
  FSDP_COLL_ALL_GATHER,
  FSDP_COLL_REDUCE_SCATTER,
  FSDP_COLL_ALL_REDUCE,
  FSDP_COLL_NKINDS
} FsdpCollKind;

extern const char *const FsdpCollKindNames[FSDP_COLL_NKINDS];

/* MPI_STAGED: MPI on device buffers through host staging buffers, for
 * ranks that share a GPU ([Note: MPI staging of device buffers] in
 * coll_staged.c); with -device cpu the same path over memcpy. */
typedef enum {
  FSDP_COLL_BACKEND_MPI,
  FSDP_COLL_BACKEND_NCCL,
  FSDP_COLL_BACKEND_MPI_STAGED
} FsdpCollBackend;

typedef struct {
  uint64_t calls[FSDP_COLL_NKINDS];
  uint64_t bytes[FSDP_COLL_NKINDS]; /* received volume, see [Note: byte accounting] */
  uint64_t intra_bytes, inter_bytes;
  uint64_t scalar_calls; /* small reductions (loss, norms, flags): counted apart */
} FsdpCommCounters;

typedef struct FsdpColl_ *FsdpColl;

/* Not collective.  Creates the MPI ops for bf16/fp16 sums.  NCCL: needs
 * the device selected first (FsdpCudaSelectDevice); creates the
 * communication stream and events; NCCL communicators come later (per
 * group, FsdpCollAttach or at first use).  Asking for NCCL in a build
 * without CUDA, or where no GPU is usable, is a usage error naming NCCL. */
int FsdpCollCreate(FsdpCollBackend backend, FsdpColl *c);
/* Not collective, but with NCCL it waits for the collectives in flight and
 * destroys the NCCL communicators (call it at the same point on every
 * rank). */
int FsdpCollDestroy(FsdpColl *c);

/* Collective on g.  recv holds g->size*count elements of dt; send is this
 * rank's count elements (may be recv + g->rank*count: then in place). */
int FsdpCollAllGather(FsdpColl c, const FsdpGroup *g, const void *send,
                      void *recv, size_t count, FsdpDtype dt);
/* Collective on g.  send holds g->size*count elements; recv gets this
 * rank's count summed elements times scale.  send and recv must not
 * overlap.  send is scratch: the MPI backend pre-scales it in place
 * ([Note: scaled reductions] in coll_common.c), so its contents afterwards
 * are unspecified.  bf16/fp16: see [Note: low-precision sums over MPI] in
 * coll_mpi.c (each pairwise add rounds; the scales round exactly when they
 * are powers of two, barring underflow). */
int FsdpCollReduceScatter(FsdpColl c, const FsdpGroup *g, void *send,
                          void *recv, size_t count, FsdpDtype dt, float scale);
/* Collective on g.  In place sum of count elements, times scale. */
int FsdpCollAllReduce(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                      FsdpDtype dt, float scale);

/* The same, issued on stream s: return at once, *ev completes when the
 * collective has finished.  Buffers must stay valid until then.  A failure
 * inside the collective is returned by FsdpEventWait. */
int FsdpCollAllGatherAsync(FsdpColl c, const FsdpGroup *g, const void *send,
                           void *recv, size_t count, FsdpDtype dt,
                           FsdpStream s, FsdpEvent *ev);
int FsdpCollReduceScatterAsync(FsdpColl c, const FsdpGroup *g,
                               void *send, void *recv, size_t count,
                               FsdpDtype dt, float scale, FsdpStream s,
                               FsdpEvent *ev);
int FsdpCollAllReduceAsync(FsdpColl c, const FsdpGroup *g, void *buf,
                           size_t count, FsdpDtype dt, float scale,
                           FsdpStream s, FsdpEvent *ev);

/* ---- NCCL backend (no-ops or host waits with the MPI backend) ----------
 * Buffers are device pointers.  Streams and events are cudaStream_t /
 * cudaEvent_t passed as void *. */

/* Not collective.  Collectives run on comm_stream (NULL: each NCCL
 * communicator's own high-priority non-blocking stream, so collectives of
 * different groups may overlap) and, at issue, first wait on the
 * device for the work launched so far on compute_stream (NULL: the legacy
 * default stream).  Call it before the first collective or between
 * collectives, never while one is being issued. */
int FsdpCollSetCudaStreams(FsdpColl c, void *comm_stream, void *compute_stream);
/* Collective on g.  Creates g's NCCL communicator now (bootstrap by an
 * ncclUniqueId broadcast over g->comm) instead of at its first
 * collective; call it at setup for the sharding and replica groups. */
int FsdpCollAttach(FsdpColl c, const FsdpGroup *g);
/* Not collective.  Makes cuda_stream wait ON THE DEVICE for the async
 * collective that returned ev (the host does not block): the compute
 * stream can then use the gathered parameters.  MPI backend (or an event
 * older than the 64 most recent async collectives): FsdpEventWait(ev). */
int FsdpCollWaitDevice(FsdpColl c, FsdpEvent ev, void *cuda_stream);

/* Collective on g.  An NCCL communicator (ncclComm_t) over g's ranks,
 * bootstrapped by broadcasting an ncclUniqueId over g->comm; for callers
 * that drive NCCL themselves.  The device must be selected first.  In a
 * build without CUDA: a usage error. */
int FsdpCollNcclCommCreate(const FsdpGroup *g, void **nccl_comm);
/* Not collective.  Accepts NULL; sets *nccl_comm to NULL. */
int FsdpCollNcclCommDestroy(void **nccl_comm);

/* Collective on g.  Blocking fp64 sum (or max) of a few scalars (loss, norm
 * squares, overflow flags): counted in scalar_calls only. */
int FsdpCollScalarSum(FsdpColl c, const FsdpGroup *g, double *vals, int n);
int FsdpCollScalarMax(FsdpColl c, const FsdpGroup *g, double *vals, int n);

/* Counters since creation or the last reset. */
void FsdpCollGetCounters(FsdpColl c, FsdpCommCounters *out);
void FsdpCollResetCounters(FsdpColl c);

/* The volume formula of [Note: byte accounting] for one call, split into
 * intra/inter for group g (used by the counters, tests and fsdp-plan). */
void FsdpCollVolume(FsdpCollKind kind, const FsdpGroup *g, size_t total_elems,
                    size_t elem_size, uint64_t *bytes, uint64_t *intra,
                    uint64_t *inter);

#endif
