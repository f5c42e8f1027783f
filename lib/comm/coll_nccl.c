/* coll_nccl.c: the NCCL collective back-end, on device buffers (built by
 * configure --with-cuda; [Note: collective backends] in coll_backend.h).
 *
 * [Note: NCCL collectives and streams] With the NCCL backend the buffers
 * are device pointers and every collective runs on a CUDA communication
 * stream (its communicator's own high-priority non-blocking stream, [Note:
 * one NCCL stream per communicator], or one given with
 * FsdpCollSetCudaStreams).  At issue, the comm stream first waits (on
 * the device) for everything already launched on the compute stream, so a
 * reduce-scatter reads a finished gradient and an all-gather never
 * overwrites a ring buffer that compute still reads -- the
 * `comm_stream.wait_stream(current_stream)` of PyTorch FSDP.  NCCL calls
 * are themselves asynchronous, so the async variants launch on the calling
 * thread (no CPU stream task runs NCCL), record a CUDA event, and enqueue
 * on the FsdpStream a task that waits for that event while polling
 * ncclCommGetAsyncError (a failed peer becomes an error, not a hang).  So
 * the FsdpEvent keeps its meaning (complete = the data is there) and the
 * CPU runtime works unchanged; FsdpCollWaitDevice makes a CUDA stream wait
 * for the same collective on the device instead, without blocking the
 * host (the paper's mechanism).  Blocking variants launch, then wait the
 * same way.  Sums: ncclSum; a scale other than 1 is split as on MPI
 * ([Note: scaled reductions]): ncclPreMulSum multiplies each input by the
 * pre factor (rounded to dt) before summing, and a kernel on the comm
 * stream multiplies the result by the post factor.  NCCL counts are
 * size_t, so NCCL collectives are never chunked.  NCCL communicators are
 * made per MPI communicator by broadcasting an ncclUniqueId over it
 * (NcclCommInit), at setup (FsdpCollAttach, collective: fsdp-train
 * attaches every group it uses, the runtime's gather duplicate included,
 * so no NCCL setup happens in the step loop) or lazily at the first
 * collective issued on a group (every rank issues it in the same order,
 * so the bootstrap broadcast is matched; said on stderr).  Threads other
 * than the one that selected the GPU (the stream threads that wait, the
 * thread that ends the job) bind the rank's device first
 * (FsdpCudaBindThread): CUDA would otherwise open a context on device 0.
 *
 * [Note: aborting NCCL with the job] A failure on one rank ends the job
 * (error.h, [Note: ending the job]); a kernel of a collective already
 * launched here would otherwise wait forever for the dead peer and keep
 * the process from exiting.  So the back-end registers an abort hook that
 * calls ncclCommAbort on each of its communicators (and one for those of
 * FsdpCollNcclCommCreate); error.c runs the hooks after the message is
 * printed and before MPI_Abort.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "comm/coll_backend.h"
#include "comm/coll_common.h"
#include "device/cuda_call.h"
#include "device/cuda_util.h"
#include "kernels/cuda/kernels_cuda.h"

#define COLL_NCCL_MAX_COMMS 16 /* MPI communicators with an NCCL twin */
#define COLL_NCCL_EVENTS 64    /* async collectives tracked for device waits */

/* One async NCCL collective: its CUDA event and the FsdpEvent it got. */
typedef struct {
  cudaEvent_t done;
  FsdpEvent ev;
  int used;
} CollNcclSlot;

typedef struct {
  MPI_Comm comm; /* the key: the group's MPI communicator */
  ncclComm_t nccl;
  /* [Note: one NCCL stream per communicator]: where its collectives run
   * (own, or the stream given by FsdpCollSetCudaStreams) */
  cudaStream_t stream, own;
  /* its async collectives, tracked for device waits: a slot is reused
   * on the same stream only (see NcclIssueAsync) */
  CollNcclSlot slots[COLL_NCCL_EVENTS];
  uint64_t nslots_used;
} CollNcclComm;

/* The back-end's state ([Note: NCCL collectives and streams]). */
typedef struct {
  cudaStream_t comm_stream, own_stream, compute_stream;
  cudaEvent_t compute_ready; /* recorded on compute_stream at each issue */
  cudaEvent_t blocking_done; /* for the blocking variants */
  CollNcclComm comms[COLL_NCCL_MAX_COMMS];
  /* Written by the compute thread after comms[ncomms] is filled; read by
   * the abort hook on any thread ([Note: aborting NCCL with the job]). */
  atomic_int ncomms;
  int hook_added;
  cudaStream_t given_stream; /* FsdpCollSetCudaStreams's comm_stream, or NULL */
  int issued;                /* a collective was issued: later comm creation is lazy */
} CollNccl;

/* [Note: aborting NCCL with the job] covers the communicators made by
 * FsdpCollNcclCommCreate too: they are listed here until destroyed. */
#define COLL_NCCL_MAX_STANDALONE 16
static ncclComm_t g_standalone[COLL_NCCL_MAX_STANDALONE];
static pthread_mutex_t g_standalone_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_standalone_hook;

static void NcclStandaloneAbortHook(void *ctx)
{
  (void)ctx;
  (void)FsdpCudaBindThread();
  /* no lock: the job is ending, and the thread that ends it may hold it */
  for (int i = 0; i < COLL_NCCL_MAX_STANDALONE; i++)
    if (g_standalone[i]) ncclCommAbort(g_standalone[i]);
}

static int StandaloneAdd(ncclComm_t comm)
{
  pthread_mutex_lock(&g_standalone_lock);
  int added = 0, err = FSDP_SUCCESS;
  if (!g_standalone_hook) {
    err = FsdpErrorAddAbortHook(NcclStandaloneAbortHook, NULL);
    g_standalone_hook = err == FSDP_SUCCESS;
  }
  for (int i = 0; i < COLL_NCCL_MAX_STANDALONE && !added && !err; i++)
    if (!g_standalone[i]) g_standalone[i] = comm, added = 1;
  pthread_mutex_unlock(&g_standalone_lock);
  if (err) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  if (!added)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "more than %d standalone NCCL communicators at once",
               COLL_NCCL_MAX_STANDALONE);
  return FSDP_SUCCESS;
}

static void StandaloneRemove(ncclComm_t comm)
{
  pthread_mutex_lock(&g_standalone_lock);
  for (int i = 0; i < COLL_NCCL_MAX_STANDALONE; i++)
    if (g_standalone[i] == comm) g_standalone[i] = NULL;
  pthread_mutex_unlock(&g_standalone_lock);
}

/* An NCCL communicator for an MPI group (collective on g). */
static int NcclCommInit(const FsdpGroup *g, void **nccl_comm)
{
  if (!nccl_comm) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollNcclCommCreate: NULL output");
  *nccl_comm = NULL;
  if (!g || g->comm == MPI_COMM_NULL || g->size < 1)
    FSDP_ERROR(FSDP_ERR_STATE, "creating an NCCL communicator for the %s comm: the group has "
                               "no MPI communicator", FsdpCollGroupName(g));
  /* Rank 0 sends its status with the id, so a failed ncclGetUniqueId
   * fails every rank instead of leaving them waiting in the bootstrap. */
  struct {
    int status;
    ncclUniqueId id;
  } msg;
  memset(&msg, 0, sizeof msg);
  if (g->rank == 0) msg.status = (int)ncclGetUniqueId(&msg.id);
  FSDP_CALL_MPI(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, g->comm));
  if (msg.status != (int)ncclSuccess)
    FSDP_ERROR(FSDP_ERR_NCCL, "creating the NCCL communicator of the %s comm (%d ranks): "
                              "ncclGetUniqueId failed on its rank 0: %s",
               FsdpCollGroupName(g), g->size, ncclGetErrorString((ncclResult_t)msg.status));
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, g->size, msg.id, g->rank);
  int bad = r != ncclSuccess, any_bad = 0;
  FSDP_CALL_MPI(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, g->comm));
  if (bad)
    FSDP_ERROR(FSDP_ERR_NCCL, "creating the NCCL communicator of the %s comm (%d ranks): "
                              "ncclCommInitRank failed: %s",
               FsdpCollGroupName(g), g->size, ncclGetErrorString(r));
  if (any_bad) {
    ncclCommDestroy(comm);
    FSDP_ERROR(FSDP_ERR_NCCL, "creating the NCCL communicator of the %s comm (%d ranks): "
                              "ncclCommInitRank failed on another rank",
               FsdpCollGroupName(g), g->size);
  }
  *nccl_comm = comm;
  return FSDP_SUCCESS;
}

/* Standalone NCCL communicator for an MPI group (coll.h:
 * FsdpCollNcclCommCreate), aborted with the job. */
static int NcclCommCreate(const FsdpGroup *g, void **nccl_comm)
{
  FSDP_CALL(NcclCommInit(g, nccl_comm));
  int err = StandaloneAdd((ncclComm_t)*nccl_comm);
  if (err) {
    ncclCommDestroy((ncclComm_t)*nccl_comm);
    *nccl_comm = NULL;
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  return FSDP_SUCCESS;
}

static int NcclCommDestroy(void **nccl_comm)
{
  if (!nccl_comm || !*nccl_comm) return FSDP_SUCCESS;
  ncclComm_t comm = (ncclComm_t)*nccl_comm;
  *nccl_comm = NULL;
  StandaloneRemove(comm);
  FSDP_CALL_NCCL(ncclCommDestroy(comm));
  return FSDP_SUCCESS;
}

/* [Note: one NCCL stream per communicator] Each NCCL communicator gets a
 * high-priority stream of its own, made with it: collectives of one
 * communicator are ordered anyway (NCCL requires it), those of different
 * ones may overlap.  The runtime gathers over a duplicate of the sharding
 * communicator ([Note: two communication streams] in fsdp.c), so its
 * all-gathers and reduce-scatters run on two CUDA streams and a prefetched
 * gather never queues behind a reduce-scatter -- the CPU runtime's two
 * FsdpStreams, on the device.  A comm stream given to
 * FsdpCollSetCudaStreams replaces them all (one stream). */

/* Frees a communicator's stream and events (not its NCCL communicator). */
static void CommStateFree(CollNccl *c, CollNcclComm *cc)
{
  for (int i = 0; i < COLL_NCCL_EVENTS; i++)
    if (cc->slots[i].done) cudaEventDestroy(cc->slots[i].done);
  if (cc->own && cc->own != c->own_stream) cudaStreamDestroy(cc->own);
  memset(cc, 0, sizeof *cc);
}

/* The NCCL twin of g's MPI communicator (and its stream), created on first
 * use (collective on g: see [Note: NCCL collectives and streams]).
 * Creation inside a collective (no FsdpCollAttach for g, and a collective
 * was already issued) is NCCL setup and allocation inside the step loop:
 * it works, and says so on stderr. */
static int NcclCommOf(CollNccl *c, const FsdpGroup *g, CollNcclComm **out)
{
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == g->comm) {
      *out = &c->comms[i];
      return FSDP_SUCCESS;
    }
  if (c->ncomms == COLL_NCCL_MAX_COMMS)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "NCCL backend: more than %d communicators (the %s comm)",
               COLL_NCCL_MAX_COMMS, FsdpCollGroupName(g));
  if (c->issued)
    fprintf(stderr, "fsdp: rank %d: the NCCL communicator of the %s comm is created inside a "
                    "collective, after the first one (attach it at setup: FsdpCollAttach)\n",
            FsdpErrorWorldRank(), FsdpCollGroupName(g));
  CollNcclComm *cc = &c->comms[c->ncomms];
  memset(cc, 0, sizeof *cc);
  /* the collective part first, so every rank of g takes part in it */
  void *nc = NULL;
  int err = NcclCommInit(g, &nc);
  /* the first communicator uses the coll's own stream */
  int lo = 0, hi = 0;
  if (!err && c->ncomms == 0) {
    cc->own = c->own_stream;
  } else if (!err && (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess ||
                      cudaStreamCreateWithPriority(&cc->own, cudaStreamNonBlocking, hi) !=
                          cudaSuccess)) {
    cc->own = NULL;
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_CUDA,
                         "creating the stream of the %s comm's collectives failed",
                         FsdpCollGroupName(g));
  }
  for (int i = 0; i < COLL_NCCL_EVENTS && !err; i++)
    if (cudaEventCreateWithFlags(&cc->slots[i].done, cudaEventDisableTiming) != cudaSuccess)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_CUDA,
                           "creating the events of the %s comm's collectives failed",
                           FsdpCollGroupName(g));
  if (err) {
    if (nc) ncclCommAbort((ncclComm_t)nc);
    CommStateFree(c, cc);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  cc->comm = g->comm;
  cc->nccl = (ncclComm_t)nc;
  cc->stream = c->given_stream ? c->given_stream : cc->own;
  atomic_store(&c->ncomms, c->ncomms + 1); /* published to the abort hook */
  *out = cc;
  return FSDP_SUCCESS;
}

static ncclDataType_t NcclType(FsdpDtype dt)
{
  return dt == FSDP_DTYPE_FP32 ? ncclFloat32 : dt == FSDP_DTYPE_BF16 ? ncclBfloat16 : ncclFloat16;
}

/* NCCL failure inside a collective: name the collective and the group. */
#define COLL_CALL_NCCL(kind, g, comm, expr)                                          \
  do {                                                                               \
    ncclResult_t coll_nccl_r_ = (expr);                                              \
    if (coll_nccl_r_ != ncclSuccess) {                                               \
      const char *coll_nccl_last_ = (comm) ? ncclGetLastError(comm) : NULL;          \
      FSDP_ERROR(FSDP_ERR_NCCL, "%s on the %s comm (%d ranks): %s failed: %s%s%s",   \
                 FsdpCollKindNames[kind], FsdpCollGroupName(g), (g)->size, #expr,           \
                 ncclGetErrorString(coll_nccl_r_),                                   \
                 coll_nccl_last_ && coll_nccl_last_[0] ? ": " : "",                  \
                 coll_nccl_last_ ? coll_nccl_last_ : "");                           \
    }                                                                                \
  } while (0)

/* Launch one collective on the comm stream, after the compute stream's
 * work so far; returns at once.  *comm_out: the NCCL communicator used. */
static int NcclLaunch(CollNccl *c, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                       void *recv, size_t count, FsdpDtype dt, float scale, ncclComm_t *comm_out,
                       cudaStream_t *stream_out, CollNcclComm **cc_out)
{
  CollNcclComm *cc = NULL;
  FSDP_CALL(NcclCommOf(c, g, &cc));
  if (cc_out) *cc_out = cc;
  c->issued = 1;
  ncclComm_t comm = cc->nccl;
  cudaStream_t stream = cc->stream;
  *comm_out = comm;
  *stream_out = stream;
  FSDP_CALL_CUDA(cudaEventRecord(c->compute_ready, c->compute_stream));
  FSDP_CALL_CUDA(cudaStreamWaitEvent(stream, c->compute_ready, 0));
  ncclDataType_t t = NcclType(dt);
  if (kind == FSDP_COLL_ALL_GATHER) {
    /* In place when send is this rank's slot of recv: NCCL detects it. */
    COLL_CALL_NCCL(kind, g, comm, ncclAllGather(send, recv, count, t, comm, stream));
    return FSDP_SUCCESS;
  }
  /* [Note: scaled reductions]: pre before the sum, post after it. */
  float pre = 1.0f, post = 1.0f;
  FsdpCollSplitScale(scale, &pre, &post);
  ncclRedOp_t op = ncclSum;
  int premul = pre != 1.0f;
  if (premul) {
    float f32 = pre;
    uint16_t h16 = dt == FSDP_DTYPE_BF16 ? FsdpFloatToBf16(pre) : FsdpFloatToFp16(pre);
    void *scalar = dt == FSDP_DTYPE_FP32 ? (void *)&f32 : (void *)&h16;
    COLL_CALL_NCCL(kind, g, comm,
                   ncclRedOpCreatePreMulSum(&op, scalar, t, ncclScalarHostImmediate, comm));
  }
  ncclResult_t r;
  if (kind == FSDP_COLL_REDUCE_SCATTER)
    r = ncclReduceScatter(send, recv, count, t, op, comm, stream);
  else
    r = ncclAllReduce(recv, recv, count, t, op, comm, stream);
  /* An operator may be destroyed once the last call using it returned. */
  if (premul) ncclRedOpDestroy(op, comm);
  COLL_CALL_NCCL(kind, g, comm, r);
  if (post != 1.0f)
    FSDP_CALL(scale_inplace_on_stream_cuda(recv, dt, post, count, (void *)stream));
  return FSDP_SUCCESS;
}

/* Wait (host) for a CUDA event, polling the communicator's async error so
 * that a failed peer or a broken link ends the wait with an error. */
static int NcclWait(FsdpCollKind kind, const char *gname, int gsize, ncclComm_t comm,
                     cudaEvent_t ev)
{
  const struct timespec nap = {0, 20000}; /* 20 us */
  /* a stream thread: on the rank's GPU, not device 0 ([Note: one GPU per
   * rank] in cuda_util.h) */
  FSDP_CALL(FsdpCudaBindThread());
  for (;;) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return FSDP_SUCCESS;
    if (e != cudaErrorNotReady)
      FSDP_ERROR(FSDP_ERR_CUDA, "%s on the %s comm (%d ranks): waiting for completion: %s",
                 FsdpCollKindNames[kind], gname, gsize, cudaGetErrorString(e));
    ncclResult_t ae = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &ae);
    if (r == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress) {
      const char *last = ncclGetLastError(comm);
      FSDP_ERROR(FSDP_ERR_NCCL, "%s on the %s comm (%d ranks): NCCL failed: %s%s%s",
                 FsdpCollKindNames[kind], gname, gsize, ncclGetErrorString(ae),
                 last && last[0] ? ": " : "", last ? last : "");
    }
    nanosleep(&nap, NULL);
  }
}

static int NcclBlocking(CollNccl *c, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                         void *recv, size_t count, FsdpDtype dt, float scale)
{
  ncclComm_t comm = NULL;
  cudaStream_t stream = NULL;
  FSDP_CALL(NcclLaunch(c, kind, g, send, recv, count, dt, scale, &comm, &stream, NULL));
  FSDP_CALL_CUDA(cudaEventRecord(c->blocking_done, stream));
  FSDP_CALL(NcclWait(kind, FsdpCollGroupName(g), g->size, comm, c->blocking_done));
  return FSDP_SUCCESS;
}

static int NcclAllGather(void *state, const FsdpGroup *g, const void *send, void *recv,
                           size_t count, FsdpDtype dt)
{
  CollNccl *c = state;
  FSDP_CALL(NcclBlocking(c, FSDP_COLL_ALL_GATHER, g, send, recv, count, dt, 1.0f));
  return FSDP_SUCCESS;
}

static int NcclReduceScatter(void *state, const FsdpGroup *g, void *send, void *recv,
                               size_t count, FsdpDtype dt, float scale)
{
  CollNccl *c = state;
  FSDP_CALL(NcclBlocking(c, FSDP_COLL_REDUCE_SCATTER, g, send, recv, count, dt, scale));
  return FSDP_SUCCESS;
}

static int NcclAllReduce(void *state, const FsdpGroup *g, void *buf, size_t count,
                           FsdpDtype dt, float scale)
{
  CollNccl *c = state;
  FSDP_CALL(NcclBlocking(c, FSDP_COLL_ALL_REDUCE, g, buf, buf, count, dt, scale));
  return FSDP_SUCCESS;
}

/* The CPU stream task of an async NCCL collective: wait for its event. */
typedef struct {
  ncclComm_t comm;
  cudaEvent_t done;
  FsdpCollKind kind;
  int gsize;
  const char *gname; /* static storage (group names are literals) */
} NcclWaitTask;

static int NcclWaitTaskRun(void *arg)
{
  NcclWaitTask *t = (NcclWaitTask *)arg;
  FSDP_CALL(NcclWait(t->kind, t->gname, t->gsize, t->comm, t->done));
  return FSDP_SUCCESS;
}

static int NcclIssueAsync(void *state, FsdpCollKind kind, const FsdpGroup *g,
                            const void *send, void *recv, size_t count, FsdpDtype dt, float scale,
                            FsdpStream s, FsdpEvent *ev)
{
  CollNccl *c = state;
  /* Reusing a slot (its collective was issued COLL_NCCL_EVENTS calls ago
   * on the same communicator, so on the same stream) re-records its
   * event: a wait task of the old collective still pending then waits for
   * the newer one, which finishes later on the same stream -- later,
   * never wrong -- and FsdpCollWaitDevice no longer finds the old
   * FsdpEvent, so it waits on the host instead. */
  ncclComm_t comm = NULL;
  cudaStream_t stream = NULL;
  CollNcclComm *cc = NULL;
  FSDP_CALL(NcclLaunch(c, kind, g, send, recv, count, dt, scale, &comm, &stream, &cc));
  CollNcclSlot *slot = &cc->slots[cc->nslots_used % COLL_NCCL_EVENTS];
  FSDP_CALL_CUDA(cudaEventRecord(slot->done, stream));
  NcclWaitTask t = {comm, slot->done, kind, g->size, FsdpCollGroupName(g)};
  FsdpEvent fev = FSDP_EVENT_NULL;
  FSDP_CALL(FsdpStreamEnqueue(s, FsdpCollKindNames[kind], NcclWaitTaskRun, &t, sizeof t, &fev));
  slot->ev = fev;
  slot->used = 1;
  cc->nslots_used++;
  if (ev) *ev = fev;
  return FSDP_SUCCESS;
}

static int NcclSetup(CollNccl *c)
{
  int gpus = 0;
  FSDP_CALL(FsdpCudaDeviceCount(&gpus));
  if (gpus == 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "the NCCL collective backend needs a GPU, and none is usable "
                               "(%s): use -device cpu (MPI collectives)",
               FsdpCudaProbeMessage());
  /* The NCCL loaded may not be the one built against (a pip wheel's, an
   * LD_LIBRARY_PATH): bf16 sums and ncclPreMulSum need 2.11 (configure
   * checks the headers). */
  int ver = 0;
  FSDP_CALL_NCCL(ncclGetVersion(&ver));
  if (ver < 21100) /* codes are MAJOR*10000 + MINOR*100 + PATCH since 2.9 */
    FSDP_ERROR(FSDP_ERR_USAGE, "the NCCL library loaded is version %d.%d (code %d), fsdp needs "
                               ">= 2.11 (bf16 reductions, ncclPreMulSum): put a newer libnccl.so.2 "
                               "first on LD_LIBRARY_PATH, or use -device cpu",
               ver >= 10000 ? ver / 10000 : ver / 1000, ver >= 10000 ? ver / 100 % 100 : ver / 100 % 10,
               ver);
  int lo = 0, hi = 0;
  FSDP_CALL_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  FSDP_CALL_CUDA(cudaStreamCreateWithPriority(&c->own_stream, cudaStreamNonBlocking, hi));
  c->comm_stream = c->own_stream;
  c->compute_stream = NULL; /* the legacy default stream until told */
  FSDP_CALL_CUDA(cudaEventCreateWithFlags(&c->compute_ready, cudaEventDisableTiming));
  FSDP_CALL_CUDA(cudaEventCreateWithFlags(&c->blocking_done, cudaEventDisableTiming));
  return FSDP_SUCCESS;
}

/* Best effort, every step attempted; the first failure is returned. */
static int NcclTeardown(CollNccl *c)
{
  int err = FSDP_SUCCESS;
  /* The FsdpStreams of async collectives were drained by the caller (the
   * FsdpColl outlives every collective issued with it, coll.h); the device
   * side finishes here. */
  if (c->comm_stream) cudaStreamSynchronize(c->comm_stream);
  for (int i = 0; i < c->ncomms; i++) {
    if (c->comms[i].stream) cudaStreamSynchronize(c->comms[i].stream);
    ncclResult_t r = ncclCommDestroy(c->comms[i].nccl);
    CommStateFree(c, &c->comms[i]);
    if (r != ncclSuccess && !err)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_NCCL,
                           "ncclCommDestroy failed: %s", ncclGetErrorString(r));
  }
  c->ncomms = 0;
  if (c->blocking_done) cudaEventDestroy(c->blocking_done);
  if (c->compute_ready) cudaEventDestroy(c->compute_ready);
  if (c->own_stream) cudaStreamDestroy(c->own_stream);
  return err;
}

/* [Note: aborting NCCL with the job]; runs on whichever thread ends the
 * job, so it reads only communicators already published (ncomms). */
static void NcclAbortHook(void *ctx)
{
  CollNccl *c = ctx;
  (void)FsdpCudaBindThread(); /* any thread may end the job */
  int n = atomic_load(&c->ncomms);
  for (int i = 0; i < n; i++) ncclCommAbort(c->comms[i].nccl);
}

static int NcclDestroy(void *state)
{
  CollNccl *c = state;
  if (!c) return FSDP_SUCCESS;
  if (c->hook_added) FsdpErrorRemoveAbortHook(NcclAbortHook, c);
  int err = NcclTeardown(c);
  free(c);
  if (err) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  return FSDP_SUCCESS;
}

static int NcclCreate(void **state)
{
  *state = NULL;
  CollNccl *c = calloc(1, sizeof *c);
  FSDP_CHECK_ALLOC(c, sizeof *c);
  int err = NcclSetup(c);
  if (!err) err = FsdpErrorAddAbortHook(NcclAbortHook, c);
  if (err) {
    NcclDestroy(c);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  c->hook_added = 1;
  *state = c;
  return FSDP_SUCCESS;
}

static int NcclSetCudaStreams(void *state, void *comm_stream, void *compute_stream)
{
  CollNccl *c = state;
  c->comm_stream = comm_stream ? (cudaStream_t)comm_stream : c->own_stream;
  c->given_stream = (cudaStream_t)comm_stream;
  for (int i = 0; i < c->ncomms; i++)
    c->comms[i].stream = comm_stream ? (cudaStream_t)comm_stream : c->comms[i].own;
  c->compute_stream = (cudaStream_t)compute_stream;
  return FSDP_SUCCESS;
}


static int NcclAttach(void *state, const FsdpGroup *g)
{
  if (!g || g->comm == MPI_COMM_NULL)
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpCollAttach: the %s group has no communicator",
               FsdpCollGroupName(g));
  CollNcclComm *cc = NULL;
  FSDP_CALL(NcclCommOf(state, g, &cc));
  return FSDP_SUCCESS;
}

/* Only the COLL_NCCL_EVENTS most recent async collectives of each
 * communicator have an event to wait for on the device; older ones are
 * left to the host. */
static int NcclWaitDevice(void *state, FsdpEvent ev, void *cuda_stream, int *handled)
{
  CollNccl *c = state;
  *handled = 0;
  if (!ev.stream) return FSDP_SUCCESS;
  for (int k = 0; k < c->ncomms; k++)
    for (int i = 0; i < COLL_NCCL_EVENTS; i++) {
      CollNcclSlot *slot = &c->comms[k].slots[i];
      if (slot->used && slot->ev.stream == ev.stream && slot->ev.seq == ev.seq) {
        FSDP_CALL_CUDA(cudaStreamWaitEvent((cudaStream_t)cuda_stream, slot->done, 0));
        *handled = 1;
        return FSDP_SUCCESS;
      }
    }
  return FSDP_SUCCESS;
}

static const CollBackendOps coll_ops_nccl = {
    .name = "NCCL",
    .create = NcclCreate,
    .destroy = NcclDestroy,
    .all_gather = NcclAllGather,
    .reduce_scatter = NcclReduceScatter,
    .all_reduce = NcclAllReduce,
    .issue_async = NcclIssueAsync,
    .set_cuda_streams = NcclSetCudaStreams,
    .attach = NcclAttach,
    .wait_device = NcclWaitDevice,
    .nccl_comm_create = NcclCommCreate,
    .nccl_comm_destroy = NcclCommDestroy,
};

/* the module's table (cuda_module_entry.c: [Note: the CUDA module]) */
const CollBackendOps *FsdpCudaNcclOps(void);
const CollBackendOps *FsdpCudaNcclOps(void) { return &coll_ops_nccl; }
