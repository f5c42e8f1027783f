/* coll.c: collectives over a backend, with byte accounting (see coll.h):
 * what every back-end shares -- argument checks, counting at issue, the
 * async variants, scalar reductions -- and the dispatch to the back-end's
 * file ([Note: collective backends] in coll_backend.h): coll_mpi.c,
 * coll_staged.c, coll_nccl.c.  The back-ends never call back here: what
 * they share with this file (the scale rule, names, MPI waits) is in
 * coll_common.c ([Note: no calls back into coll.c] in coll_common.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/coll.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "comm/coll_backend.h"
#include "comm/coll_common.h"
#include "comm/flight.h"
#include "device/device_backend.h"

struct FsdpColl_ {
  const CollBackendOps *ops;
  void *state; /* the back-end's own */
  FsdpCommCounters counters; /* touched on the issuing thread only */
  int scalar_adaptive; /* scalars wait as [Note: waiting for a collective] (coll_common.h) says */
};

/* Checks every backend shares; done at issue so that a bad call fails on
 * the calling thread, before anything is counted or enqueued.  Every rank
 * of g passes the same count, dt and group, so a usage error here is
 * raised on all of them (no hang). */
static int CollCheck(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g,
                      const void *a, const void *b, size_t count, FsdpDtype dt)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "%s: NULL FsdpColl", FsdpCollKindNames[kind]);
  if (!g || g->comm == MPI_COMM_NULL || g->size < 1)
    FSDP_ERROR(FSDP_ERR_STATE, "%s on the %s comm: the group has no communicator",
               FsdpCollKindNames[kind], FsdpCollGroupName(g));
  if ((int)dt < 0 || dt >= FSDP_NDTYPES)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): bad dtype %d",
               FsdpCollKindNames[kind], FsdpCollGroupName(g), g->size, (int)dt);
  /* Counts above INT_MAX are fine ([Note: chunked collectives] in
   * coll_mpi.c); only a
   * buffer larger than the address space is refused. */
  if (count > SIZE_MAX / FsdpDtypeSize(dt) / (size_t)g->size)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s on the %s comm (%d ranks): %zu elements per rank make a buffer "
               "larger than the address space",
               FsdpCollKindNames[kind], FsdpCollGroupName(g), g->size, count);
  if (count > 0 && (!a || !b))
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): NULL buffer",
               FsdpCollKindNames[kind], FsdpCollGroupName(g), g->size);
  return FSDP_SUCCESS;
}

void FsdpCollVolume(FsdpCollKind kind, const FsdpGroup *g, size_t total_elems,
                    size_t elem_size, uint64_t *bytes, uint64_t *intra, uint64_t *inter)
{
  uint64_t n = (uint64_t)(g && g->size > 0 ? g->size : 1);
  uint64_t pi = (uint64_t)(g && g->peers_intra > 0 ? g->peers_intra : 0);
  uint64_t pe = (uint64_t)(g && g->peers_inter > 0 ? g->peers_inter : 0);
  uint64_t vol = (uint64_t)total_elems * (uint64_t)elem_size; /* P*K or S*K */
  uint64_t f = kind == FSDP_COLL_ALL_REDUCE ? 2 : 1;
  /* Multiply before dividing: exact whenever n divides the product (always
   * for all-gather and reduce-scatter, where P = n * count).  For an
   * all-reduce whose S*K is not a multiple of n, intra + inter may then
   * differ from bytes by the truncation (< 2 bytes). */
  if (bytes) *bytes = f * (n - 1) * vol / n;
  if (intra) *intra = f * pi * vol / n;
  if (inter) *inter = f * pe * vol / n;
}

/* Counts one call; returns its volume in bytes (for the flight recorder). */
static uint64_t CollCount(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g,
                          size_t total_elems, FsdpDtype dt)
{
  uint64_t b = 0, bi = 0, be = 0;
  FsdpCollVolume(kind, g, total_elems, FsdpDtypeSize(dt), &b, &bi, &be);
  c->counters.calls[kind]++;
  c->counters.bytes[kind] += b;
  c->counters.intra_bytes += bi;
  c->counters.inter_bytes += be;
  return b;
}

/* A blocking call in the flight recorder (flight.h): it runs from issue. */
static uint64_t CollFlightBlocking(const FsdpGroup *g, FsdpCollKind kind, uint64_t bytes,
                                   FsdpDtype dt)
{
  uint64_t h = FsdpFlightIssue(g->comm, FsdpCollGroupName(g), (FsdpFlightKind)kind, -1, bytes, dt);
  FsdpFlightStart(h);
  return h;
}

/* ---- lifecycle ----------------------------------------------------------- */

/* The back-end of each FsdpCollBackend; NULL when this build has none. */
static const CollBackendOps *CollOpsOf(FsdpCollBackend backend)
{
  switch (backend) {
  case FSDP_COLL_BACKEND_MPI: return FsdpCollMpiOps();
  case FSDP_COLL_BACKEND_NCCL: return FsdpCollNcclOps();
  case FSDP_COLL_BACKEND_MPI_STAGED: return FsdpCollStagedOps();
  }
  return NULL;
}

int FsdpCollCreate(FsdpCollBackend backend, FsdpColl *out)
{
  if (!out) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollCreate: NULL output handle");
  *out = NULL;
  if (backend != FSDP_COLL_BACKEND_MPI && backend != FSDP_COLL_BACKEND_NCCL &&
      backend != FSDP_COLL_BACKEND_MPI_STAGED)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "unknown collective backend %d", (int)backend);
  const CollBackendOps *ops = CollOpsOf(backend);
  if (!ops) /* only NCCL can be left out of a build */
    FSDP_ERROR(FSDP_ERR_USAGE, "the NCCL collective backend: %s: use -device cpu (MPI "
                               "collectives)", FsdpDeviceCudaMissing());
  FsdpColl c = calloc(1, sizeof *c);
  FSDP_CHECK_ALLOC(c, sizeof *c);
  c->ops = ops;
  c->scalar_adaptive = FsdpCollWaitIsAdaptive();
  int err = ops->create(&c->state);
  if (err) {
    free(c);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  *out = c;
  return FSDP_SUCCESS;
}

int FsdpCollDestroy(FsdpColl *pc)
{
  if (!pc || !*pc) return FSDP_SUCCESS;
  FsdpColl c = *pc;
  int err = c->ops->destroy(c->state);
  free(c);
  *pc = NULL;
  if (err) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  return FSDP_SUCCESS;
}

/* ---- blocking collectives ------------------------------------------------ */

int FsdpCollAllGather(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                      size_t count, FsdpDtype dt)
{
  FSDP_CALL(CollCheck(c, FSDP_COLL_ALL_GATHER, g, send, recv, count, dt));
  uint64_t bytes = CollCount(c, FSDP_COLL_ALL_GATHER, g, (size_t)g->size * count, dt);
  uint64_t h = CollFlightBlocking(g, FSDP_COLL_ALL_GATHER, bytes, dt);
  FSDP_CALL(c->ops->all_gather(c->state, g, send, recv, count, dt));
  FsdpFlightEnd(h);
  return FSDP_SUCCESS;
}

int FsdpCollReduceScatter(FsdpColl c, const FsdpGroup *g, void *send, void *recv,
                          size_t count, FsdpDtype dt, float scale)
{
  FSDP_CALL(CollCheck(c, FSDP_COLL_REDUCE_SCATTER, g, send, recv, count, dt));
  uint64_t bytes = CollCount(c, FSDP_COLL_REDUCE_SCATTER, g, (size_t)g->size * count, dt);
  uint64_t h = CollFlightBlocking(g, FSDP_COLL_REDUCE_SCATTER, bytes, dt);
  FSDP_CALL(c->ops->reduce_scatter(c->state, g, send, recv, count, dt, scale));
  FsdpFlightEnd(h);
  return FSDP_SUCCESS;
}

int FsdpCollAllReduce(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                      FsdpDtype dt, float scale)
{
  FSDP_CALL(CollCheck(c, FSDP_COLL_ALL_REDUCE, g, buf, buf, count, dt));
  uint64_t bytes = CollCount(c, FSDP_COLL_ALL_REDUCE, g, count, dt);
  uint64_t h = CollFlightBlocking(g, FSDP_COLL_ALL_REDUCE, bytes, dt);
  FSDP_CALL(c->ops->all_reduce(c->state, g, buf, count, dt, scale));
  FsdpFlightEnd(h);
  return FSDP_SUCCESS;
}

/* ---- collectives issued on a stream -------------------------------------- */

/* The task argument: copied into the stream slot at enqueue, group
 * included, so neither the caller's struct nor its FsdpGroup need outlive
 * the call (the communicator and the buffers must). */
typedef struct {
  FsdpColl c;
  FsdpGroup g;
  FsdpCollKind kind;
  void *send; /* const for all-gather (never written); scratch for reduce-scatter */
  void *recv;
  size_t count;
  FsdpDtype dt;
  float scale;
  uint64_t flight; /* the flight recorder's handle */
} CollTask;

_Static_assert(sizeof(CollTask) <= FSDP_STREAM_ARG_BYTES, "CollTask fits a stream slot");

static int CollTaskRun(void *arg)
{
  CollTask *t = (CollTask *)arg;
  FsdpFlightStart(t->flight);
  switch (t->kind) {
  case FSDP_COLL_ALL_GATHER:
    FSDP_CALL(t->c->ops->all_gather(t->c->state, &t->g, t->send, t->recv, t->count, t->dt));
    break;
  case FSDP_COLL_REDUCE_SCATTER:
    FSDP_CALL(t->c->ops->reduce_scatter(t->c->state, &t->g, t->send, t->recv, t->count, t->dt,
                                        t->scale));
    break;
  case FSDP_COLL_ALL_REDUCE:
    FSDP_CALL(t->c->ops->all_reduce(t->c->state, &t->g, t->recv, t->count, t->dt, t->scale));
    break;
  default: FSDP_ERROR(FSDP_ERR_INTERNAL, "bad collective kind %d", (int)t->kind);
  }
  FsdpFlightEnd(t->flight);
  return FSDP_SUCCESS;
}

static int CollIssue(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                      void *recv, size_t count, FsdpDtype dt, float scale, FsdpStream s,
                      FsdpEvent *ev)
{
  if (ev) *ev = FSDP_EVENT_NULL;
  FSDP_CALL(CollCheck(c, kind, g, send, recv, count, dt));
  if (!s)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): NULL stream",
               FsdpCollKindNames[kind], FsdpCollGroupName(g), g->size);
  /* [Note: FSDP_FAULT] (stream.h), test only: this rank does not issue
   * the collective at all, as a rank with a diverging schedule would */
  if (FsdpStreamFaultSkip(s, FsdpCollKindNames[kind])) return FSDP_SUCCESS;
  int unit = -1;
  FsdpStreamTaskIdentity(s, &unit, NULL);
  size_t total = kind == FSDP_COLL_ALL_REDUCE ? count : (size_t)g->size * count;
  uint64_t bytes = CollCount(c, kind, g, total, dt);
  uint64_t h = FsdpFlightIssue(g->comm, FsdpCollGroupName(g), (FsdpFlightKind)kind, unit, bytes,
                               dt);
  if (c->ops->issue_async) {
    FSDP_CALL(c->ops->issue_async(c->state, kind, g, send, recv, count, dt, scale, s, ev));
    FsdpFlightDevice(h); /* completes on the device: recorded, not timed */
    return FSDP_SUCCESS;
  }
  CollTask t = {c, *g, kind, (void *)send, recv, count, dt, scale, h};
  FSDP_CALL(FsdpStreamEnqueue(s, FsdpCollKindNames[kind], CollTaskRun, &t, sizeof t, ev));
  return FSDP_SUCCESS;
}

int FsdpCollAllGatherAsync(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                           size_t count, FsdpDtype dt, FsdpStream s, FsdpEvent *ev)
{
  FSDP_CALL(CollIssue(c, FSDP_COLL_ALL_GATHER, g, send, recv, count, dt, 1.0f, s, ev));
  return FSDP_SUCCESS;
}

int FsdpCollReduceScatterAsync(FsdpColl c, const FsdpGroup *g, void *send, void *recv,
                               size_t count, FsdpDtype dt, float scale, FsdpStream s,
                               FsdpEvent *ev)
{
  FSDP_CALL(CollIssue(c, FSDP_COLL_REDUCE_SCATTER, g, send, recv, count, dt, scale, s, ev));
  return FSDP_SUCCESS;
}

int FsdpCollAllReduceAsync(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                           FsdpDtype dt, float scale, FsdpStream s, FsdpEvent *ev)
{
  FSDP_CALL(CollIssue(c, FSDP_COLL_ALL_REDUCE, g, buf, buf, count, dt, scale, s, ev));
  return FSDP_SUCCESS;
}

/* ---- device streams and NCCL communicators ------------------------------- */

int FsdpCollSetCudaStreams(FsdpColl c, void *comm_stream, void *compute_stream)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollSetCudaStreams: NULL FsdpColl");
  if (!c->ops->set_cuda_streams) return FSDP_SUCCESS;
  FSDP_CALL(c->ops->set_cuda_streams(c->state, comm_stream, compute_stream));
  return FSDP_SUCCESS;
}

int FsdpCollAttach(FsdpColl c, const FsdpGroup *g)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollAttach: NULL FsdpColl");
  if (!c->ops->attach) return FSDP_SUCCESS;
  FSDP_CALL(c->ops->attach(c->state, g));
  return FSDP_SUCCESS;
}

int FsdpCollWaitDevice(FsdpColl c, FsdpEvent ev, void *cuda_stream)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollWaitDevice: NULL FsdpColl");
  int handled = 0;
  if (c->ops->wait_device) FSDP_CALL(c->ops->wait_device(c->state, ev, cuda_stream, &handled));
  /* MPI backend, or a collective too old to be tracked: wait on the host. */
  if (!handled) FSDP_CALL(FsdpEventWait(ev));
  return FSDP_SUCCESS;
}

int FsdpCollNcclCommCreate(const FsdpGroup *g, void **nccl_comm)
{
  const CollBackendOps *nccl = FsdpCollNcclOps();
  if (!nccl) {
    if (nccl_comm) *nccl_comm = NULL;
    FSDP_ERROR(FSDP_ERR_USAGE, "NCCL communicators need fsdp built with CUDA (configure "
                               "--with-cuda); use -device cpu (MPI collectives)");
  }
  FSDP_CALL(nccl->nccl_comm_create(g, nccl_comm));
  return FSDP_SUCCESS;
}

int FsdpCollNcclCommDestroy(void **nccl_comm)
{
  if (!nccl_comm || !*nccl_comm) return FSDP_SUCCESS;
  const CollBackendOps *nccl = FsdpCollNcclOps();
  if (!nccl) { /* without NCCL no communicator was made: nothing to free */
    *nccl_comm = NULL;
    return FSDP_SUCCESS;
  }
  FSDP_CALL(nccl->nccl_comm_destroy(nccl_comm));
  return FSDP_SUCCESS;
}

/* ---- scalars and counters ------------------------------------------------ */

static int CollScalar(FsdpColl c, const FsdpGroup *g, double *vals, int n, MPI_Op op,
                       const char *what)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "%s: NULL FsdpColl", what);
  if (!g || g->comm == MPI_COMM_NULL)
    FSDP_ERROR(FSDP_ERR_STATE, "%s on the %s comm: the group has no communicator", what,
               FsdpCollGroupName(g));
  if (n < 0 || (n > 0 && !vals))
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): bad arguments", what,
               FsdpCollGroupName(g), g->size);
  c->counters.scalar_calls++;
  uint64_t h = FsdpFlightIssue(g->comm, FsdpCollGroupName(g),
                               op == MPI_MAX ? FSDP_FLIGHT_SCALAR_MAX : FSDP_FLIGHT_SCALAR_SUM, -1,
                               (uint64_t)n * sizeof(double), FSDP_NDTYPES);
  FsdpFlightStart(h);
  /* [Note: waiting for a collective]: a hung peer costs no core here either */
  int err = FsdpCollMpiAllreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE, op, g->comm, c->scalar_adaptive);
  FsdpFlightEnd(h);
  if (err != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    FSDP_ERROR(FSDP_ERR_MPI, "%s on the %s comm (%d ranks): MPI_Allreduce failed: %s", what,
               FsdpCollGroupName(g), g->size, msg);
  }
  return FSDP_SUCCESS;
}

int FsdpCollScalarSum(FsdpColl c, const FsdpGroup *g, double *vals, int n)
{
  FSDP_CALL(CollScalar(c, g, vals, n, MPI_SUM, "scalar sum"));
  return FSDP_SUCCESS;
}

int FsdpCollScalarMax(FsdpColl c, const FsdpGroup *g, double *vals, int n)
{
  FSDP_CALL(CollScalar(c, g, vals, n, MPI_MAX, "scalar max"));
  return FSDP_SUCCESS;
}

void FsdpCollGetCounters(FsdpColl c, FsdpCommCounters *out)
{
  if (!out) return;
  if (!c) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = c->counters;
}

void FsdpCollResetCounters(FsdpColl c)
{
  if (c) memset(&c->counters, 0, sizeof c->counters);
}
