/* coll.c: collectives over a backend, with byte accounting (see coll.h).
 *
 * [Note: collective backends] The backend is one of the two truly
 * polymorphic parts of fsdp, so it gets a small ops table (CollOps): the
 * three blocking collectives on raw buffers.  Everything around them is
 * shared: argument checks, counting at issue ([Note: byte accounting] in
 * coll.h), and the async variants, which enqueue a task that runs the
 * blocking op on the stream thread.  The MPI host backend is always
 * built; the NCCL device backend (configure --with-cuda) adds a CollOps
 * whose entries call ncclAllGather / ncclReduceScatter / ncclAllReduce on
 * the group's ncclComm, and issues its async collectives differently
 * ([Note: NCCL collectives and streams]); the public functions do not
 * change.
 *
 * [Note: low-precision sums over MPI] MPI has no bf16/fp16 type, so both
 * travel as a committed 2-byte contiguous datatype and are summed by a
 * user-defined commutative MPI_Op that converts each pair of operands to
 * fp32, adds, and rounds the pair sum back (round to nearest even).  The
 * MPI library combines the n contributions pairwise, so a sum of n values
 * is rounded n - 1 times (each time to 8 (bf16) or 11 (fp16) significant
 * bits of a partial sum), in an order MPI picks.  The scale is applied in
 * two parts, to the inputs in place before and to the received result in
 * place after ([Note: scaled reductions]), element by element in fp32 (no
 * fp32 temporary buffer is needed).  With a power-of-two scale (1/W for W
 * a power of two) both roundings are exact barring underflow.  fp32 uses
 * MPI_FLOAT / MPI_SUM (our own fp32 op on chunks) and scales the same way.
 *
 * [Note: NCCL collectives and streams] With the NCCL backend the buffers
 * are device pointers and every collective runs on a CUDA communication
 * stream (the coll's own high-priority non-blocking stream, or one given
 * with FsdpCollSetCudaStreams).  At issue, the comm stream first waits (on
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
 * (FsdpCollNcclCommCreate), either at setup (FsdpCollAttach, collective)
 * or lazily at the first collective issued on a group (every rank issues
 * it in the same order, so the bootstrap broadcast is matched).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/coll.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_util.h"
#ifdef FSDP_HAVE_CUDA
#include "kernels/cuda/kernels_cuda.h"
#endif
#include "base/error.h"

const char *const FsdpCollKindNames[FSDP_COLL_NKINDS] = {"all-gather", "reduce-scatter",
                                                         "all-reduce"};

typedef struct {
  const char *name;
  int (*all_gather)(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                    size_t count, FsdpDtype dt);
  int (*reduce_scatter)(FsdpColl c, const FsdpGroup *g, void *send, void *recv,
                        size_t count, FsdpDtype dt, float scale);
  int (*all_reduce)(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                    FsdpDtype dt, float scale);
} CollOps;

#ifdef FSDP_HAVE_CUDA
#define COLL_NCCL_MAX_COMMS 16 /* MPI communicators with an NCCL twin */
#define COLL_NCCL_EVENTS 64    /* async collectives tracked for device waits */

typedef struct {
  MPI_Comm comm; /* the key: the group's MPI communicator */
  ncclComm_t nccl;
} CollNcclComm;

/* One async NCCL collective: its CUDA event and the FsdpEvent it got. */
typedef struct {
  cudaEvent_t done;
  FsdpEvent ev;
  int used;
} CollNcclSlot;
#endif

struct FsdpColl_ {
  FsdpCollBackend backend;
  const CollOps *ops;
  FsdpCommCounters counters; /* touched on the issuing thread only */
  /* MPI backend */
  MPI_Datatype half_type; /* 2 contiguous bytes: one bf16 or fp16 */
  MPI_Op sum_bf16, sum_fp16, sum_fp32; /* sum_fp32: chunked collectives only */
  size_t max_count; /* most elements per rank in one MPI call ([Note: chunked collectives]) */
#ifdef FSDP_HAVE_CUDA
  /* NCCL backend ([Note: NCCL collectives and streams]) */
  cudaStream_t comm_stream, own_stream, compute_stream;
  cudaEvent_t compute_ready; /* recorded on compute_stream at each issue */
  cudaEvent_t blocking_done; /* for the blocking variants */
  CollNcclComm comms[COLL_NCCL_MAX_COMMS];
  int ncomms;
  CollNcclSlot slots[COLL_NCCL_EVENTS];
  uint64_t nslots_used;
#endif
};

/* ---- shared helpers ------------------------------------------------------ */

static const char *group_name(const FsdpGroup *g)
{
  return (g && g->name) ? g->name : "unnamed";
}

/* Multiply count elements of dt in place by scale, in fp32 (one rounding
 * per element for bf16/fp16, see [Note: low-precision sums over MPI]). */
static void coll_scale_inplace(void *buf, size_t count, FsdpDtype dt, float scale)
{
  if (scale == 1.0f || count == 0) return;
  if (dt == FSDP_DTYPE_FP32) {
    float *x = (float *)buf;
#pragma omp parallel for schedule(static) if (count > 65536)
    for (size_t i = 0; i < count; i++) x[i] *= scale;
  } else if (dt == FSDP_DTYPE_BF16) {
    uint16_t *x = (uint16_t *)buf;
#pragma omp parallel for schedule(static) if (count > 65536)
    for (size_t i = 0; i < count; i++) x[i] = FsdpFloatToBf16(FsdpBf16ToFloat(x[i]) * scale);
  } else {
    uint16_t *x = (uint16_t *)buf;
#pragma omp parallel for schedule(static) if (count > 65536)
    for (size_t i = 0; i < count; i++) x[i] = FsdpFloatToFp16(FsdpFp16ToFloat(x[i]) * scale);
  }
}

/* [Note: scaled reductions] A reduction with scale s (1/W for a gradient
 * mean) multiplies every input by pre before the sum and the sum by
 * post = s / pre after it, with pre = 2^-ceil(log2(1/s) / 2), a power of
 * two near sqrt(s): for W a power of two exactly PyTorch's gradient pre-
 * and post-division factors (W = 8: 1/4 and 1/2).  Sum-then-divide
 * overflows once the sum of W gradients passes the dtype's range (65504
 * in fp16, whatever the mean), divide-then-sum underflows small gradients
 * by the full 1/W; the split halves both exponents' exposure.  Both
 * back-ends use the rule for every dtype: MPI scales the send buffer in
 * place before the collective (so reduce-scatter's send is scratch) and
 * the result after it; NCCL uses ncclPreMulSum(pre) and scales the result
 * on the communication stream.  Multiplying by powers of two is exact, so
 * the result equals sum-then-scale bit for bit wherever neither overflows
 * nor underflows. */
static void coll_split_scale(float scale, float *pre, float *post)
{
  *pre = 1.0f;
  *post = scale;
  if (!(scale > 0.0f && scale < 1.0f)) return; /* 1, >1, 0, negative, NaN: as given */
  int k = (int)ceil(-log2((double)scale) / 2.0);
  *pre = ldexpf(1.0f, -k);
  *post = ldexpf(scale, k); /* scale / pre, exact */
}

/* Checks every backend shares; done at issue so that a bad call fails on
 * the calling thread, before anything is counted or enqueued.  Every rank
 * of g passes the same count, dt and group, so a usage error here is
 * raised on all of them (no hang). */
static int coll_check(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g,
                      const void *a, const void *b, size_t count, FsdpDtype dt)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "%s: NULL FsdpColl", FsdpCollKindNames[kind]);
  if (!g || g->comm == MPI_COMM_NULL || g->size < 1)
    FSDP_ERROR(FSDP_ERR_STATE, "%s on the %s comm: the group has no communicator",
               FsdpCollKindNames[kind], group_name(g));
  if ((int)dt < 0 || dt >= FSDP_NDTYPES)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): bad dtype %d",
               FsdpCollKindNames[kind], group_name(g), g->size, (int)dt);
  /* Counts above INT_MAX are fine ([Note: chunked collectives]); only a
   * buffer larger than the address space is refused. */
  if (count > SIZE_MAX / FsdpDtypeSize(dt) / (size_t)g->size)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s on the %s comm (%d ranks): %zu elements per rank make a buffer "
               "larger than the address space",
               FsdpCollKindNames[kind], group_name(g), g->size, count);
  if (count > 0 && (!a || !b))
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): NULL buffer",
               FsdpCollKindNames[kind], group_name(g), g->size);
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

static void coll_count(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g,
                       size_t total_elems, FsdpDtype dt)
{
  uint64_t b = 0, bi = 0, be = 0;
  FsdpCollVolume(kind, g, total_elems, FsdpDtypeSize(dt), &b, &bi, &be);
  c->counters.calls[kind]++;
  c->counters.bytes[kind] += b;
  c->counters.intra_bytes += bi;
  c->counters.inter_bytes += be;
}

/* ---- MPI host backend ---------------------------------------------------- */

/* MPI failure inside a collective: name the collective and the group. */
#define COLL_CALL_MPI(kind, g, what, expr)                                          \
  do {                                                                             \
    int coll_mpi_err_ = (expr);                                                    \
    if (coll_mpi_err_ != MPI_SUCCESS) {                                            \
      char coll_mpi_msg_[MPI_MAX_ERROR_STRING];                                    \
      int coll_mpi_len_ = 0;                                                       \
      MPI_Error_string(coll_mpi_err_, coll_mpi_msg_, &coll_mpi_len_);              \
      FSDP_ERROR(FSDP_ERR_MPI, "%s on the %s comm (%d ranks): %s failed: %s",      \
                 FsdpCollKindNames[kind], group_name(g), (g)->size, what,          \
                 coll_mpi_msg_);                                                   \
    }                                                                              \
  } while (0)

/* [Note: chunked collectives] MPI counts are ints, and a unit can hold more
 * than INT_MAX elements per rank (gpt-175b with -wrap 2 at a small
 * sharding factor).  A collective whose per-rank count exceeds
 * c->max_count runs as a sequence of MPI calls on chunks of at most
 * max_count elements, in the same order on every rank.  max_count is
 * COLL_MPI_MAX_COUNT, or FSDP_COLL_MAX_COUNT from the environment (tests
 * set a few dozen to exercise this path with small buffers).  All-reduce chunks are plain sub-ranges of the buffer.
 * All-gather and reduce-scatter must keep the FlatParameter layout (rank
 * r's shard at r*count), so chunk [off, off+len) of every shard travels as
 * ONE element of a derived datatype: len contiguous elements, resized to an
 * extent of count elements.  A buffer pointer at off then reaches chunk
 * off of rank r's block at r * extent: MPI places (all-gather) or reads
 * (reduce-scatter) every rank's chunk where it belongs, with no copies.
 * Reductions on such a datatype use our own sum ops for every dtype
 * (fp32 too: MPI's predefined ops are only defined on predefined types),
 * which walk the datatype's elements by their extent. */

/* The 2-byte or 4-byte elements of one MPI element of a datatype built on
 * them, and its extent in bytes: a user op receives *len such elements. */
static void mpi_op_layout(MPI_Datatype type, size_t elem_size, size_t *per, size_t *stride)
{
  MPI_Count bytes = 0; /* a chunk of fp32 may pass 2^31 bytes */
  MPI_Aint lb = 0, extent = 0;
  MPI_Type_size_x(type, &bytes);
  MPI_Type_get_extent(type, &lb, &extent);
  *per = (size_t)bytes / elem_size;
  *stride = (size_t)extent;
}

/* User ops: inout[i] = round(in[i] + inout[i]) computed in fp32, over *len
 * elements of *type (a base element, or a chunk datatype). */
#define COLL_DEFINE_SUM_OP(fname, T, load, store)                                  \
  static void fname(void *in, void *inout, int *len, MPI_Datatype *type)           \
  {                                                                                \
    size_t per = 0, stride = 0;                                                    \
    mpi_op_layout(*type, sizeof(T), &per, &stride);                                \
    size_t blocks = (size_t)*len;                                                  \
    if (stride == per * sizeof(T)) { /* contiguous: one loop */                    \
      per *= blocks;                                                               \
      blocks = 1;                                                                  \
    }                                                                              \
    for (size_t j = 0; j < blocks; j++) {                                          \
      const T *a = (const T *)((const char *)in + j * stride);                     \
      T *b = (T *)((char *)inout + j * stride);                                    \
      for (size_t i = 0; i < per; i++) b[i] = store(load(a[i]) + load(b[i]));      \
    }                                                                              \
  }

static inline float coll_id(float x) { return x; }
COLL_DEFINE_SUM_OP(mpi_sum_fp32, float, coll_id, coll_id)
COLL_DEFINE_SUM_OP(mpi_sum_bf16, uint16_t, FsdpBf16ToFloat, FsdpFloatToBf16)
COLL_DEFINE_SUM_OP(mpi_sum_fp16, uint16_t, FsdpFp16ToFloat, FsdpFloatToFp16)

static MPI_Datatype mpi_type(FsdpColl c, FsdpDtype dt)
{
  return dt == FSDP_DTYPE_FP32 ? MPI_FLOAT : c->half_type;
}

/* chunked: a derived datatype is involved, so fp32 uses our own op too. */
static MPI_Op mpi_sum(FsdpColl c, FsdpDtype dt, int chunked)
{
  if (dt == FSDP_DTYPE_FP32) return chunked ? c->sum_fp32 : MPI_SUM;
  return dt == FSDP_DTYPE_BF16 ? c->sum_bf16 : c->sum_fp16;
}

/* The chunk datatype of [Note: chunked collectives]: len elements of dt,
 * extent count elements. */
static int mpi_chunk_type(FsdpColl c, FsdpDtype dt, size_t len, size_t count, MPI_Datatype *out)
{
  MPI_Datatype run = MPI_DATATYPE_NULL;
  size_t k = FsdpDtypeSize(dt);
  FSDP_CALL_MPI(MPI_Type_contiguous((int)len, mpi_type(c, dt), &run));
  int err = MPI_Type_create_resized(run, 0, (MPI_Aint)(count * k), out);
  MPI_Type_free(&run);
  FSDP_CALL_MPI(err);
  FSDP_CALL_MPI(MPI_Type_commit(out));
  return FSDP_SUCCESS;
}

static int mpi_all_gather(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                          size_t count, FsdpDtype dt)
{
  MPI_Datatype t = mpi_type(c, dt);
  size_t k = FsdpDtypeSize(dt);
  /* The FlatParameter's own shard already sits in the unsharded buffer. */
  int in_place = send == (const char *)recv + (size_t)g->rank * count * k;
  if (count <= c->max_count) {
    COLL_CALL_MPI(FSDP_COLL_ALL_GATHER, g, "MPI_Allgather",
                  MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)count, t, recv, (int)count,
                                t, g->comm));
    return FSDP_SUCCESS;
  }
  for (size_t off = 0; off < count; off += c->max_count) {
    size_t len = count - off < c->max_count ? count - off : c->max_count;
    MPI_Datatype chunk = MPI_DATATYPE_NULL;
    FSDP_CALL(mpi_chunk_type(c, dt, len, count, &chunk));
    int err = MPI_Allgather(in_place ? MPI_IN_PLACE : (const char *)send + off * k, (int)len, t,
                            (char *)recv + off * k, 1, chunk, g->comm);
    MPI_Type_free(&chunk);
    COLL_CALL_MPI(FSDP_COLL_ALL_GATHER, g, "MPI_Allgather (chunked)", err);
  }
  return FSDP_SUCCESS;
}

static int mpi_reduce_scatter(FsdpColl c, const FsdpGroup *g, void *send, void *recv,
                              size_t count, FsdpDtype dt, float scale)
{
  float pre = 1.0f, post = 1.0f;
  coll_split_scale(scale, &pre, &post);
  size_t k = FsdpDtypeSize(dt);
  coll_scale_inplace(send, (size_t)g->size * count, dt, pre);
  if (count <= c->max_count) {
    COLL_CALL_MPI(FSDP_COLL_REDUCE_SCATTER, g, "MPI_Reduce_scatter_block",
                  MPI_Reduce_scatter_block(send, recv, (int)count, mpi_type(c, dt),
                                           mpi_sum(c, dt, 0), g->comm));
  } else {
    for (size_t off = 0; off < count; off += c->max_count) {
      size_t len = count - off < c->max_count ? count - off : c->max_count;
      MPI_Datatype chunk = MPI_DATATYPE_NULL;
      FSDP_CALL(mpi_chunk_type(c, dt, len, count, &chunk));
      int err = MPI_Reduce_scatter_block((char *)send + off * k, (char *)recv + off * k, 1,
                                         chunk, mpi_sum(c, dt, 1), g->comm);
      MPI_Type_free(&chunk);
      COLL_CALL_MPI(FSDP_COLL_REDUCE_SCATTER, g, "MPI_Reduce_scatter_block (chunked)", err);
    }
  }
  coll_scale_inplace(recv, count, dt, post);
  return FSDP_SUCCESS;
}

static int mpi_all_reduce(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                          FsdpDtype dt, float scale)
{
  float pre = 1.0f, post = 1.0f;
  coll_split_scale(scale, &pre, &post);
  size_t k = FsdpDtypeSize(dt);
  coll_scale_inplace(buf, count, dt, pre);
  for (size_t off = 0; off < count; off += c->max_count) {
    size_t len = count - off < c->max_count ? count - off : c->max_count;
    COLL_CALL_MPI(FSDP_COLL_ALL_REDUCE, g, "MPI_Allreduce",
                  MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * k, (int)len, mpi_type(c, dt),
                                mpi_sum(c, dt, 0), g->comm));
  }
  coll_scale_inplace(buf, count, dt, post);
  return FSDP_SUCCESS;
}

static const CollOps coll_ops_mpi = {"MPI", mpi_all_gather, mpi_reduce_scatter,
                                     mpi_all_reduce};

/* The default per-call limit: 2^29 elements keeps every message and chunk
 * datatype at or below 2 GiB even in fp32, below the 2^31 bytes where MPI
 * libraries have kept int byte counts internally; a collective that large
 * takes seconds, so the extra calls cost nothing measurable. */
#define COLL_MPI_MAX_COUNT ((size_t)1 << 29)

/* FSDP_COLL_MAX_COUNT: see [Note: chunked collectives]. */
static int coll_max_count_from_env(size_t *out)
{
  *out = COLL_MPI_MAX_COUNT;
  const char *env = getenv("FSDP_COLL_MAX_COUNT");
  if (!env || !env[0]) return FSDP_SUCCESS;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(env, &end, 10);
  if (errno || end == env || *end != '\0' || v < 1 || v > INT_MAX)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "environment variable FSDP_COLL_MAX_COUNT: '%s' is not an integer in [1, %d] "
               "(the most elements per rank in one MPI call)",
               env, INT_MAX);
  *out = (size_t)v;
  return FSDP_SUCCESS;
}

static int mpi_setup(FsdpColl c)
{
  FSDP_CALL_MPI(MPI_Type_contiguous(2, MPI_BYTE, &c->half_type));
  FSDP_CALL_MPI(MPI_Type_commit(&c->half_type));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_bf16, 1, &c->sum_bf16));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_fp16, 1, &c->sum_fp16));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_fp32, 1, &c->sum_fp32));
  FSDP_CALL(coll_max_count_from_env(&c->max_count));
  return FSDP_SUCCESS;
}

static int mpi_teardown(FsdpColl c)
{
  if (c->sum_fp32 != MPI_OP_NULL) FSDP_CALL_MPI(MPI_Op_free(&c->sum_fp32));
  if (c->sum_fp16 != MPI_OP_NULL) FSDP_CALL_MPI(MPI_Op_free(&c->sum_fp16));
  if (c->sum_bf16 != MPI_OP_NULL) FSDP_CALL_MPI(MPI_Op_free(&c->sum_bf16));
  if (c->half_type != MPI_DATATYPE_NULL) FSDP_CALL_MPI(MPI_Type_free(&c->half_type));
  return FSDP_SUCCESS;
}

/* ---- NCCL device backend ------------------------------------------------- */

/* Standalone NCCL communicator for an MPI group (coll.h). */
int FsdpCollNcclCommCreate(const FsdpGroup *g, void **nccl_comm)
{
#ifdef FSDP_HAVE_CUDA
  if (!nccl_comm) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollNcclCommCreate: NULL output");
  *nccl_comm = NULL;
  if (!g || g->comm == MPI_COMM_NULL || g->size < 1)
    FSDP_ERROR(FSDP_ERR_STATE, "creating an NCCL communicator for the %s comm: the group has "
                               "no MPI communicator", group_name(g));
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
               group_name(g), g->size, ncclGetErrorString((ncclResult_t)msg.status));
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, g->size, msg.id, g->rank);
  int bad = r != ncclSuccess, any_bad = 0;
  FSDP_CALL_MPI(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, g->comm));
  if (bad)
    FSDP_ERROR(FSDP_ERR_NCCL, "creating the NCCL communicator of the %s comm (%d ranks): "
                              "ncclCommInitRank failed: %s",
               group_name(g), g->size, ncclGetErrorString(r));
  if (any_bad) {
    ncclCommDestroy(comm);
    FSDP_ERROR(FSDP_ERR_NCCL, "creating the NCCL communicator of the %s comm (%d ranks): "
                              "ncclCommInitRank failed on another rank",
               group_name(g), g->size);
  }
  *nccl_comm = comm;
  return FSDP_SUCCESS;
#else
  (void)g;
  if (nccl_comm) *nccl_comm = NULL;
  FSDP_ERROR(FSDP_ERR_USAGE, "NCCL communicators need fsdp built with CUDA (configure "
                             "--with-cuda); use -device cpu (MPI collectives)");
#endif
}

int FsdpCollNcclCommDestroy(void **nccl_comm)
{
  if (!nccl_comm || !*nccl_comm) return FSDP_SUCCESS;
#ifdef FSDP_HAVE_CUDA
  ncclComm_t comm = (ncclComm_t)*nccl_comm;
  *nccl_comm = NULL;
  FSDP_CALL_NCCL(ncclCommDestroy(comm));
#else
  *nccl_comm = NULL;
#endif
  return FSDP_SUCCESS;
}

#ifdef FSDP_HAVE_CUDA

/* The NCCL twin of g's MPI communicator, created on first use (collective
 * on g: see [Note: NCCL collectives and streams]). */
static int nccl_comm_of(FsdpColl c, const FsdpGroup *g, ncclComm_t *out)
{
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == g->comm) {
      *out = c->comms[i].nccl;
      return FSDP_SUCCESS;
    }
  if (c->ncomms == COLL_NCCL_MAX_COMMS)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "NCCL backend: more than %d communicators (the %s comm)",
               COLL_NCCL_MAX_COMMS, group_name(g));
  void *nc = NULL;
  FSDP_CALL(FsdpCollNcclCommCreate(g, &nc));
  c->comms[c->ncomms].comm = g->comm;
  c->comms[c->ncomms].nccl = (ncclComm_t)nc;
  c->ncomms++;
  *out = (ncclComm_t)nc;
  return FSDP_SUCCESS;
}

static ncclDataType_t nccl_type(FsdpDtype dt)
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
                 FsdpCollKindNames[kind], group_name(g), (g)->size, #expr,           \
                 ncclGetErrorString(coll_nccl_r_),                                   \
                 coll_nccl_last_ && coll_nccl_last_[0] ? ": " : "",                  \
                 coll_nccl_last_ ? coll_nccl_last_ : "");                           \
    }                                                                                \
  } while (0)

/* Launch one collective on the comm stream, after the compute stream's
 * work so far; returns at once.  *comm_out: the NCCL communicator used. */
static int nccl_launch(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                       void *recv, size_t count, FsdpDtype dt, float scale, ncclComm_t *comm_out)
{
  ncclComm_t comm = NULL;
  FSDP_CALL(nccl_comm_of(c, g, &comm));
  *comm_out = comm;
  FSDP_CALL_CUDA(cudaEventRecord(c->compute_ready, c->compute_stream));
  FSDP_CALL_CUDA(cudaStreamWaitEvent(c->comm_stream, c->compute_ready, 0));
  ncclDataType_t t = nccl_type(dt);
  if (kind == FSDP_COLL_ALL_GATHER) {
    /* In place when send is this rank's slot of recv: NCCL detects it. */
    COLL_CALL_NCCL(kind, g, comm, ncclAllGather(send, recv, count, t, comm, c->comm_stream));
    return FSDP_SUCCESS;
  }
  /* [Note: scaled reductions]: pre before the sum, post after it. */
  float pre = 1.0f, post = 1.0f;
  coll_split_scale(scale, &pre, &post);
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
    r = ncclReduceScatter(send, recv, count, t, op, comm, c->comm_stream);
  else
    r = ncclAllReduce(recv, recv, count, t, op, comm, c->comm_stream);
  /* An operator may be destroyed once the last call using it returned. */
  if (premul) ncclRedOpDestroy(op, comm);
  COLL_CALL_NCCL(kind, g, comm, r);
  if (post != 1.0f)
    FSDP_CALL(scale_inplace_on_stream_cuda(recv, dt, post, count, (void *)c->comm_stream));
  return FSDP_SUCCESS;
}

/* Wait (host) for a CUDA event, polling the communicator's async error so
 * that a failed peer or a broken link ends the wait with an error. */
static int nccl_wait(FsdpCollKind kind, const char *gname, int gsize, ncclComm_t comm,
                     cudaEvent_t ev)
{
  const struct timespec nap = {0, 20000}; /* 20 us */
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

static int nccl_blocking(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                         void *recv, size_t count, FsdpDtype dt, float scale)
{
  ncclComm_t comm = NULL;
  FSDP_CALL(nccl_launch(c, kind, g, send, recv, count, dt, scale, &comm));
  FSDP_CALL_CUDA(cudaEventRecord(c->blocking_done, c->comm_stream));
  FSDP_CALL(nccl_wait(kind, group_name(g), g->size, comm, c->blocking_done));
  return FSDP_SUCCESS;
}

static int nccl_all_gather(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                           size_t count, FsdpDtype dt)
{
  FSDP_CALL(nccl_blocking(c, FSDP_COLL_ALL_GATHER, g, send, recv, count, dt, 1.0f));
  return FSDP_SUCCESS;
}

static int nccl_reduce_scatter(FsdpColl c, const FsdpGroup *g, void *send, void *recv,
                               size_t count, FsdpDtype dt, float scale)
{
  FSDP_CALL(nccl_blocking(c, FSDP_COLL_REDUCE_SCATTER, g, send, recv, count, dt, scale));
  return FSDP_SUCCESS;
}

static int nccl_all_reduce(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                           FsdpDtype dt, float scale)
{
  FSDP_CALL(nccl_blocking(c, FSDP_COLL_ALL_REDUCE, g, buf, buf, count, dt, scale));
  return FSDP_SUCCESS;
}

static const CollOps coll_ops_nccl = {"NCCL", nccl_all_gather, nccl_reduce_scatter,
                                      nccl_all_reduce};

/* The CPU stream task of an async NCCL collective: wait for its event. */
typedef struct {
  ncclComm_t comm;
  cudaEvent_t done;
  FsdpCollKind kind;
  int gsize;
  const char *gname; /* static storage (group names are literals) */
} NcclWaitTask;

static int nccl_wait_task_run(void *arg)
{
  NcclWaitTask *t = (NcclWaitTask *)arg;
  FSDP_CALL(nccl_wait(t->kind, t->gname, t->gsize, t->comm, t->done));
  return FSDP_SUCCESS;
}

static int nccl_issue_async(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                            void *recv, size_t count, FsdpDtype dt, float scale, FsdpStream s,
                            FsdpEvent *ev)
{
  /* Reusing a slot (its collective was issued COLL_NCCL_EVENTS calls ago)
   * re-records its event: a wait task of the old collective still pending
   * then waits for the newer one, which finishes later on the same comm
   * stream -- later, never wrong -- and FsdpCollWaitDevice no longer finds
   * the old FsdpEvent, so it waits on the host instead. */
  CollNcclSlot *slot = &c->slots[c->nslots_used % COLL_NCCL_EVENTS];
  ncclComm_t comm = NULL;
  FSDP_CALL(nccl_launch(c, kind, g, send, recv, count, dt, scale, &comm));
  FSDP_CALL_CUDA(cudaEventRecord(slot->done, c->comm_stream));
  NcclWaitTask t = {comm, slot->done, kind, g->size, group_name(g)};
  FsdpEvent fev = FSDP_EVENT_NULL;
  FSDP_CALL(FsdpStreamEnqueue(s, FsdpCollKindNames[kind], nccl_wait_task_run, &t, sizeof t, &fev));
  slot->ev = fev;
  slot->used = 1;
  c->nslots_used++;
  if (ev) *ev = fev;
  return FSDP_SUCCESS;
}

static int nccl_setup(FsdpColl c)
{
  int gpus = 0;
  FSDP_CALL(FsdpCudaDeviceCount(&gpus));
  if (gpus == 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "the NCCL collective backend needs a GPU, and none is usable "
                               "(%s): use -device cpu (MPI collectives)",
               FsdpCudaProbeMessage());
  int lo = 0, hi = 0;
  FSDP_CALL_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  FSDP_CALL_CUDA(cudaStreamCreateWithPriority(&c->own_stream, cudaStreamNonBlocking, hi));
  c->comm_stream = c->own_stream;
  c->compute_stream = NULL; /* the legacy default stream until told */
  FSDP_CALL_CUDA(cudaEventCreateWithFlags(&c->compute_ready, cudaEventDisableTiming));
  FSDP_CALL_CUDA(cudaEventCreateWithFlags(&c->blocking_done, cudaEventDisableTiming));
  for (int i = 0; i < COLL_NCCL_EVENTS; i++)
    FSDP_CALL_CUDA(cudaEventCreateWithFlags(&c->slots[i].done, cudaEventDisableTiming));
  return FSDP_SUCCESS;
}

/* Best effort, every step attempted; the first failure is returned. */
static int nccl_teardown(FsdpColl c)
{
  int err = FSDP_SUCCESS;
  /* The FsdpStreams of async collectives were drained by the caller (the
   * FsdpColl outlives every collective issued with it, coll.h); the device
   * side finishes here. */
  if (c->comm_stream) cudaStreamSynchronize(c->comm_stream);
  for (int i = 0; i < c->ncomms; i++) {
    ncclResult_t r = ncclCommDestroy(c->comms[i].nccl);
    if (r != ncclSuccess && !err)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_NCCL,
                           "ncclCommDestroy failed: %s", ncclGetErrorString(r));
  }
  c->ncomms = 0;
  for (int i = 0; i < COLL_NCCL_EVENTS; i++)
    if (c->slots[i].done) cudaEventDestroy(c->slots[i].done);
  if (c->blocking_done) cudaEventDestroy(c->blocking_done);
  if (c->compute_ready) cudaEventDestroy(c->compute_ready);
  if (c->own_stream) cudaStreamDestroy(c->own_stream);
  return err;
}

#endif /* FSDP_HAVE_CUDA */

/* ---- lifecycle ----------------------------------------------------------- */

int FsdpCollCreate(FsdpCollBackend backend, FsdpColl *out)
{
  if (!out) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollCreate: NULL output handle");
  *out = NULL;
  switch (backend) {
  case FSDP_COLL_BACKEND_MPI: break;
  case FSDP_COLL_BACKEND_NCCL:
#ifdef FSDP_HAVE_CUDA
    break;
#else
    FSDP_ERROR(FSDP_ERR_USAGE, "the NCCL collective backend needs fsdp built with CUDA "
                               "(configure --with-cuda); this build has no CUDA support: "
                               "use -device cpu (MPI collectives)");
#endif
  default:
    FSDP_ERROR(FSDP_ERR_INTERNAL, "unknown collective backend %d", (int)backend);
  }
  FsdpColl c = calloc(1, sizeof *c);
  FSDP_CHECK_ALLOC(c, sizeof *c);
  c->backend = backend;
  c->ops = &coll_ops_mpi;
  c->half_type = MPI_DATATYPE_NULL;
  c->sum_bf16 = c->sum_fp16 = c->sum_fp32 = MPI_OP_NULL;
  int err = mpi_setup(c);
#ifdef FSDP_HAVE_CUDA
  if (!err && backend == FSDP_COLL_BACKEND_NCCL) {
    c->ops = &coll_ops_nccl;
    err = nccl_setup(c);
    if (err) nccl_teardown(c);
  }
#endif
  if (err) {
    mpi_teardown(c);
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
  int err = FSDP_SUCCESS;
#ifdef FSDP_HAVE_CUDA
  if (c->backend == FSDP_COLL_BACKEND_NCCL) err = nccl_teardown(c);
#endif
  int err2 = mpi_teardown(c);
  if (!err) err = err2;
  free(c);
  *pc = NULL;
  if (err) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  return FSDP_SUCCESS;
}

/* ---- blocking collectives ------------------------------------------------ */

int FsdpCollAllGather(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                      size_t count, FsdpDtype dt)
{
  FSDP_CALL(coll_check(c, FSDP_COLL_ALL_GATHER, g, send, recv, count, dt));
  coll_count(c, FSDP_COLL_ALL_GATHER, g, (size_t)g->size * count, dt);
  FSDP_CALL(c->ops->all_gather(c, g, send, recv, count, dt));
  return FSDP_SUCCESS;
}

int FsdpCollReduceScatter(FsdpColl c, const FsdpGroup *g, void *send, void *recv,
                          size_t count, FsdpDtype dt, float scale)
{
  FSDP_CALL(coll_check(c, FSDP_COLL_REDUCE_SCATTER, g, send, recv, count, dt));
  coll_count(c, FSDP_COLL_REDUCE_SCATTER, g, (size_t)g->size * count, dt);
  FSDP_CALL(c->ops->reduce_scatter(c, g, send, recv, count, dt, scale));
  return FSDP_SUCCESS;
}

int FsdpCollAllReduce(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                      FsdpDtype dt, float scale)
{
  FSDP_CALL(coll_check(c, FSDP_COLL_ALL_REDUCE, g, buf, buf, count, dt));
  coll_count(c, FSDP_COLL_ALL_REDUCE, g, count, dt);
  FSDP_CALL(c->ops->all_reduce(c, g, buf, count, dt, scale));
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
} CollTask;

_Static_assert(sizeof(CollTask) <= FSDP_STREAM_ARG_BYTES, "CollTask fits a stream slot");

static int coll_task_run(void *arg)
{
  CollTask *t = (CollTask *)arg;
  switch (t->kind) {
  case FSDP_COLL_ALL_GATHER:
    FSDP_CALL(t->c->ops->all_gather(t->c, &t->g, t->send, t->recv, t->count, t->dt));
    break;
  case FSDP_COLL_REDUCE_SCATTER:
    FSDP_CALL(t->c->ops->reduce_scatter(t->c, &t->g, t->send, t->recv, t->count, t->dt,
                                        t->scale));
    break;
  case FSDP_COLL_ALL_REDUCE:
    FSDP_CALL(t->c->ops->all_reduce(t->c, &t->g, t->recv, t->count, t->dt, t->scale));
    break;
  default: FSDP_ERROR(FSDP_ERR_INTERNAL, "bad collective kind %d", (int)t->kind);
  }
  return FSDP_SUCCESS;
}

static int coll_issue(FsdpColl c, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                      void *recv, size_t count, FsdpDtype dt, float scale, FsdpStream s,
                      FsdpEvent *ev)
{
  if (ev) *ev = FSDP_EVENT_NULL;
  FSDP_CALL(coll_check(c, kind, g, send, recv, count, dt));
  if (!s)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): NULL stream",
               FsdpCollKindNames[kind], group_name(g), g->size);
#ifdef FSDP_HAVE_CUDA
  if (c->backend == FSDP_COLL_BACKEND_NCCL) {
    FSDP_CALL(nccl_issue_async(c, kind, g, send, recv, count, dt, scale, s, ev));
    coll_count(c, kind, g, kind == FSDP_COLL_ALL_REDUCE ? count : (size_t)g->size * count, dt);
    return FSDP_SUCCESS;
  }
#endif
  CollTask t = {c, *g, kind, (void *)send, recv, count, dt, scale};
  FSDP_CALL(FsdpStreamEnqueue(s, FsdpCollKindNames[kind], coll_task_run, &t, sizeof t, ev));
  coll_count(c, kind, g, kind == FSDP_COLL_ALL_REDUCE ? count : (size_t)g->size * count, dt);
  return FSDP_SUCCESS;
}

int FsdpCollAllGatherAsync(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                           size_t count, FsdpDtype dt, FsdpStream s, FsdpEvent *ev)
{
  FSDP_CALL(coll_issue(c, FSDP_COLL_ALL_GATHER, g, send, recv, count, dt, 1.0f, s, ev));
  return FSDP_SUCCESS;
}

int FsdpCollReduceScatterAsync(FsdpColl c, const FsdpGroup *g, void *send, void *recv,
                               size_t count, FsdpDtype dt, float scale, FsdpStream s,
                               FsdpEvent *ev)
{
  FSDP_CALL(coll_issue(c, FSDP_COLL_REDUCE_SCATTER, g, send, recv, count, dt, scale, s, ev));
  return FSDP_SUCCESS;
}

int FsdpCollAllReduceAsync(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                           FsdpDtype dt, float scale, FsdpStream s, FsdpEvent *ev)
{
  FSDP_CALL(coll_issue(c, FSDP_COLL_ALL_REDUCE, g, buf, buf, count, dt, scale, s, ev));
  return FSDP_SUCCESS;
}

/* ---- NCCL: setup and device-side waits ----------------------------------- */

int FsdpCollSetCudaStreams(FsdpColl c, void *comm_stream, void *compute_stream)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollSetCudaStreams: NULL FsdpColl");
  if (c->backend != FSDP_COLL_BACKEND_NCCL) return FSDP_SUCCESS;
#ifdef FSDP_HAVE_CUDA
  c->comm_stream = comm_stream ? (cudaStream_t)comm_stream : c->own_stream;
  c->compute_stream = (cudaStream_t)compute_stream;
#else
  (void)comm_stream, (void)compute_stream;
#endif
  return FSDP_SUCCESS;
}

void *FsdpCollCudaStream(FsdpColl c)
{
#ifdef FSDP_HAVE_CUDA
  if (c && c->backend == FSDP_COLL_BACKEND_NCCL) return (void *)c->comm_stream;
#else
  (void)c;
#endif
  return NULL;
}

int FsdpCollAttach(FsdpColl c, const FsdpGroup *g)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollAttach: NULL FsdpColl");
  if (c->backend != FSDP_COLL_BACKEND_NCCL) return FSDP_SUCCESS;
#ifdef FSDP_HAVE_CUDA
  if (!g || g->comm == MPI_COMM_NULL)
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpCollAttach: the %s group has no communicator",
               group_name(g));
  ncclComm_t comm = NULL;
  FSDP_CALL(nccl_comm_of(c, g, &comm));
#else
  (void)g;
#endif
  return FSDP_SUCCESS;
}

int FsdpCollWaitDevice(FsdpColl c, FsdpEvent ev, void *cuda_stream)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollWaitDevice: NULL FsdpColl");
#ifdef FSDP_HAVE_CUDA
  if (c->backend == FSDP_COLL_BACKEND_NCCL && ev.stream) {
    for (int i = 0; i < COLL_NCCL_EVENTS; i++) {
      CollNcclSlot *slot = &c->slots[i];
      if (slot->used && slot->ev.stream == ev.stream && slot->ev.seq == ev.seq) {
        FSDP_CALL_CUDA(cudaStreamWaitEvent((cudaStream_t)cuda_stream, slot->done, 0));
        return FSDP_SUCCESS;
      }
    }
  }
#else
  (void)cuda_stream;
#endif
  /* MPI backend, or a collective too old to be tracked: wait on the host. */
  FSDP_CALL(FsdpEventWait(ev));
  return FSDP_SUCCESS;
}

/* ---- scalars and counters ------------------------------------------------ */

static int coll_scalar(FsdpColl c, const FsdpGroup *g, double *vals, int n, MPI_Op op,
                       const char *what)
{
  if (!c) FSDP_ERROR(FSDP_ERR_INTERNAL, "%s: NULL FsdpColl", what);
  if (!g || g->comm == MPI_COMM_NULL)
    FSDP_ERROR(FSDP_ERR_STATE, "%s on the %s comm: the group has no communicator", what,
               group_name(g));
  if (n < 0 || (n > 0 && !vals))
    FSDP_ERROR(FSDP_ERR_INTERNAL, "%s on the %s comm (%d ranks): bad arguments", what,
               group_name(g), g->size);
  c->counters.scalar_calls++;
  int err = MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE, op, g->comm);
  if (err != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    FSDP_ERROR(FSDP_ERR_MPI, "%s on the %s comm (%d ranks): MPI_Allreduce failed: %s", what,
               group_name(g), g->size, msg);
  }
  return FSDP_SUCCESS;
}

int FsdpCollScalarSum(FsdpColl c, const FsdpGroup *g, double *vals, int n)
{
  FSDP_CALL(coll_scalar(c, g, vals, n, MPI_SUM, "scalar sum"));
  return FSDP_SUCCESS;
}

int FsdpCollScalarMax(FsdpColl c, const FsdpGroup *g, double *vals, int n)
{
  FSDP_CALL(coll_scalar(c, g, vals, n, MPI_MAX, "scalar max"));
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
