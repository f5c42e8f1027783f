/* coll_mpi.c: the MPI collective back-end, on host buffers (always
 * built; [Note: collective backends] in coll_backend.h).
 *
 * [Note: low-precision sums over MPI] MPI has no bf16/fp16 type, so both
 * travel as a committed 2-byte contiguous datatype and are summed by a
 * user-defined commutative MPI_Op that converts each pair of operands to
 * fp32, adds, and rounds the pair sum back (round to nearest even).  The
 * MPI library combines the n contributions pairwise, so a sum of n values
 * is rounded n - 1 times (each time to 8 (bf16) or 11 (fp16) significant
 * bits of a partial sum), in an order MPI picks.  The scale is applied in
 * two parts, to the inputs in place before and to the received result in
 * place after ([Note: scaled reductions] in coll_common.c), element by element in fp32 (no
 * fp32 temporary buffer is needed).  With a power-of-two scale (1/W for W
 * a power of two) both roundings are exact barring underflow.  fp32 uses
 * MPI_FLOAT / MPI_SUM (our own fp32 op on chunks) and scales the same way.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "comm/coll_backend.h"
#include "comm/coll_common.h"

/* The back-end's state: the MPI objects for 2-byte sums, the chunk limit
 * and the way of waiting. */
typedef struct {
  MPI_Datatype half_type; /* 2 contiguous bytes: one bf16 or fp16 */
  MPI_Op sum_bf16, sum_fp16, sum_fp32; /* sum_fp32: chunked collectives only */
  size_t max_count; /* most elements per rank in one MPI call ([Note: chunked collectives]) */
  CollWait wait;    /* [Note: waiting for a collective] (coll_common.h) */
  int algo;         /* [Note: ring reduce-scatter]: RING_AUTO, RING_ALWAYS or RING_NEVER */
} CollMpi;

static int MpiWaitRequest(const CollMpi *m, MPI_Request *req) { return FsdpCollWaitRequest(m->wait, req); }

/* One collective call into err (an MPI error code): the blocking call
 * under FSDP_COMM_WAIT=block, else its nonblocking variant (the same
 * arguments and a request) completed by MpiWaitRequest. */
#define COLL_MPI_RUN(m, err, blocking, nonblocking, ...)                            \
  do {                                                                             \
    if ((m)->wait == COLL_WAIT_BLOCK) {                                            \
      (err) = blocking(__VA_ARGS__);                                               \
    } else {                                                                       \
      MPI_Request coll_req_ = MPI_REQUEST_NULL;                                    \
      (err) = nonblocking(__VA_ARGS__, &coll_req_);                                \
      if ((err) == MPI_SUCCESS) (err) = MpiWaitRequest((m), &coll_req_);           \
    }                                                                              \
  } while (0)

/* Multiply count elements of dt in place by scale, in fp32 (one rounding
 * per element for bf16/fp16, see [Note: low-precision sums over MPI]). */
static void CollScaleInplace(void *buf, size_t count, FsdpDtype dt, float scale)
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

/* MPI failure inside a collective: name the collective and the group. */
#define COLL_CALL_MPI(kind, g, what, expr)                                          \
  do {                                                                             \
    int coll_mpi_err_ = (expr);                                                    \
    if (coll_mpi_err_ != MPI_SUCCESS) {                                            \
      char coll_mpi_msg_[MPI_MAX_ERROR_STRING];                                    \
      int coll_mpi_len_ = 0;                                                       \
      MPI_Error_string(coll_mpi_err_, coll_mpi_msg_, &coll_mpi_len_);              \
      FSDP_ERROR(FSDP_ERR_MPI, "%s on the %s comm (%d ranks): %s failed: %s",      \
                 FsdpCollKindNames[kind], FsdpCollGroupName(g), (g)->size, what,          \
                 coll_mpi_msg_);                                                   \
    }                                                                              \
  } while (0)

/* [Note: chunked collectives] MPI counts are ints, and a unit can hold more
 * than INT_MAX elements per rank (gpt-175b with -wrap 2 at a small
 * sharding factor).  A collective whose per-rank count exceeds
 * m->max_count runs as a sequence of MPI calls on chunks of at most
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
static void MpiOpLayout(MPI_Datatype type, size_t elem_size, size_t *per, size_t *stride)
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
    MpiOpLayout(*type, sizeof(T), &per, &stride);                                \
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

static inline float CollId(float x) { return x; }
COLL_DEFINE_SUM_OP(mpi_sum_fp32, float, CollId, CollId)
COLL_DEFINE_SUM_OP(mpi_sum_bf16, uint16_t, FsdpBf16ToFloat, FsdpFloatToBf16)
COLL_DEFINE_SUM_OP(mpi_sum_fp16, uint16_t, FsdpFp16ToFloat, FsdpFloatToFp16)

static MPI_Datatype MpiType(const CollMpi *m, FsdpDtype dt)
{
  return dt == FSDP_DTYPE_FP32 ? MPI_FLOAT : m->half_type;
}

/* chunked: a derived datatype is involved, so fp32 uses our own op too. */
static MPI_Op MpiSum(const CollMpi *m, FsdpDtype dt, int chunked)
{
  if (dt == FSDP_DTYPE_FP32) return chunked ? m->sum_fp32 : MPI_SUM;
  return dt == FSDP_DTYPE_BF16 ? m->sum_bf16 : m->sum_fp16;
}

/* The chunk datatype of [Note: chunked collectives]: len elements of dt,
 * extent count elements. */
static int MpiChunkType(const CollMpi *m, FsdpDtype dt, size_t len, size_t count, MPI_Datatype *out)
{
  MPI_Datatype run = MPI_DATATYPE_NULL;
  size_t k = FsdpDtypeSize(dt);
  FSDP_CALL_MPI(MPI_Type_contiguous((int)len, MpiType(m, dt), &run));
  int err = MPI_Type_create_resized(run, 0, (MPI_Aint)(count * k), out);
  MPI_Type_free(&run);
  FSDP_CALL_MPI(err);
  FSDP_CALL_MPI(MPI_Type_commit(out));
  return FSDP_SUCCESS;
}

/* [Note: ring reduce-scatter] Open MPI 4.1's MPI_Reduce_scatter_block is
 * slow for the large buffers FSDP reduces: on 2 ranks of one node a
 * 158 MB fp32 buffer (GPT-2's root unit) took 135-160 ms, 1.6x a full
 * MPI_Allreduce of the same buffer (90-95 ms), which moves twice the data
 * (MPI_Reduce_scatter and MPI_Ireduce_scatter_block alike;
 * bench/results/2026-12-01-collective-rings.md).  So reductions of at
 * least RS_RING_MIN_BYTES per rank run as a ring, the bandwidth-optimal
 * schedule: W - 1 steps; at step s rank r sends its running sum of chunk
 * (r - s - 1) mod W to rank r + 1,
 * receives the running sum of chunk (r - s - 2) mod W from rank r - 1 into
 * recv and adds its own contribution; after the last step recv holds the
 * sum of chunk r.  Each rank sends (W - 1)/W of the buffer, the ring
 * crosses a node boundary only where consecutive ranks do, and nothing is
 * allocated: running sums build in place in send (scratch by contract,
 * coll.h) and recv is the landing buffer of every step.  Each chunk is
 * summed along one fixed path, ((x[c+1] + x[c+2]) + ...) + x[c], so the
 * result is the same on every run (on 2 ranks it is x[peer] + x[r], the
 * same bits as any order).  Steps move in segments of at most
 * RS_RING_SEGMENT elements (and m->max_count: [Note: chunked
 * collectives]), each summed while still in cache; the segments' transfers
 * wait the way FSDP_COMM_WAIT says.  Smaller reductions keep
 * MPI_Reduce_scatter_block: their cost is latency, where MPI's algorithms
 * take fewer steps.  FSDP_COLL_ALGO=auto (that, the default), ring (the
 * ring at every size: how test_coll checks it on small buffers) or mpi
 * (MPI_Reduce_scatter_block at every size); the same variable chooses for
 * all-reduces ([Note: ring all-reduce]) and all-gathers ([Note: ring
 * all-gather]). */
enum { RING_AUTO, RING_ALWAYS, RING_NEVER };
static const char *const coll_algo_names[] = {"auto", "ring", "mpi", NULL};
#define RS_RING_MIN_BYTES ((size_t)256 << 10)
#define RS_RING_SEGMENT ((size_t)1 << 18)

/* inout[i] = round(in[i] + inout[i]), computed in fp32 as the user ops do. */
static void CollAddInto(FsdpDtype dt, const void *in, void *inout, size_t n)
{
  if (dt == FSDP_DTYPE_FP32) {
    const float *a = in;
    float *b = inout;
    for (size_t i = 0; i < n; i++) b[i] = a[i] + b[i];
  } else if (dt == FSDP_DTYPE_BF16) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (size_t i = 0; i < n; i++) b[i] = FsdpFloatToBf16(FsdpBf16ToFloat(a[i]) + FsdpBf16ToFloat(b[i]));
  } else {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (size_t i = 0; i < n; i++) b[i] = FsdpFloatToFp16(FsdpFp16ToFloat(a[i]) + FsdpFp16ToFloat(b[i]));
  }
}

/* The elements one ring exchange moves at most ([Note: chunked
 * collectives] bounds it too). */
static size_t RingSegment(const CollMpi *m)
{
  return RS_RING_SEGMENT < m->max_count ? RS_RING_SEGMENT : m->max_count;
}

/* One segment's exchange: send nout elements to `to`, receive nin from
 * `from`, waiting the way m->wait says; returns an MPI error code. */
static int MpiRingExchange(const CollMpi *m, const FsdpGroup *g, const void *out, size_t nout,
                           void *in, size_t nin, FsdpDtype dt, int to, int from)
{
  MPI_Datatype t = MpiType(m, dt);
  if (m->wait == COLL_WAIT_BLOCK)
    return MPI_Sendrecv(out, (int)nout, t, to, 0, in, (int)nin, t, from, 0, g->comm,
                        MPI_STATUS_IGNORE);
  MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int err = MPI_Irecv(in, (int)nin, t, from, 0, g->comm, &rq[0]);
  if (err == MPI_SUCCESS) err = MPI_Isend(out, (int)nout, t, to, 0, g->comm, &rq[1]);
  for (int i = 0; i < 2; i++) {
    int e = rq[i] == MPI_REQUEST_NULL ? MPI_SUCCESS : MpiWaitRequest(m, &rq[i]);
    if (err == MPI_SUCCESS) err = e;
  }
  return err;
}

/* [Note: ring all-gather] All-gathers of RS_RING_MIN_BYTES per rank and
 * more run as a ring too: this rank's shard goes to its place in recv
 * (unless it is there already, in place), then W - 1 steps each send the
 * chunk received last (first our own) to rank r + 1 and receive the next
 * from rank r - 1 straight into its place, in segments as the
 * reduce-scatter ring.  Each rank sends (W - 1)/W of the buffer, and the
 * ring crosses a node boundary only where consecutive ranks do, while
 * Open MPI 4.1's MPI_Allgather across 2 emulated nodes (1 Gbit/s) took
 * 2.4-2.7x the ring's time, which fills the link.  Inside a node
 * MPI_Allgather (shared memory) is as fast or faster (W = 2: 0.97-1.14 of
 * the ring; W = 4 on 2 cores: 0.5-0.95), so under FSDP_COLL_ALGO=auto only
 * groups with peers on other nodes take the ring
 * (bench/results/2026-12-01-collective-rings.md). */
static int MpiAllGatherRing(const CollMpi *m, const FsdpGroup *g, const void *send, void *recv,
                            size_t count, FsdpDtype dt)
{
  const int W = g->size, r = g->rank, right = (r + 1) % W, left = (r + W - 1) % W;
  const size_t k = FsdpDtypeSize(dt);
  size_t seg = RingSegment(m);
  char *b = recv;
  if (send != b + (size_t)r * count * k) memcpy(b + (size_t)r * count * k, send, count * k);
  for (int step = 0; step < W - 1; step++) {
    size_t out_c = (size_t)((r - step + W) % W), in_c = (size_t)((r - step - 1 + 2 * W) % W);
    for (size_t off = 0; off < count; off += seg) {
      size_t n = count - off < seg ? count - off : seg;
      int err = MpiRingExchange(m, g, b + (out_c * count + off) * k, n, b + (in_c * count + off) * k,
                                n, dt, right, left);
      COLL_CALL_MPI(FSDP_COLL_ALL_GATHER, g, "MPI_Sendrecv (ring all-gather)", err);
    }
  }
  return FSDP_SUCCESS;
}

static int MpiAllGather(void *state, const FsdpGroup *g, const void *send, void *recv,
                          size_t count, FsdpDtype dt)
{
  const CollMpi *m = state;
  MPI_Datatype t = MpiType(m, dt);
  size_t k = FsdpDtypeSize(dt);
  /* The FlatParameter's own shard already sits in the unsharded buffer. */
  int in_place = send == (const char *)recv + (size_t)g->rank * count * k;
  int err = MPI_SUCCESS;
  if (g->size > 1 && count > 0 &&
      (m->algo == RING_ALWAYS ||
       (m->algo == RING_AUTO && g->peers_inter > 0 && count * k >= RS_RING_MIN_BYTES)))
    return MpiAllGatherRing(m, g, send, recv, count, dt);
  if (count <= m->max_count) {
    COLL_MPI_RUN(m, err, MPI_Allgather, MPI_Iallgather, in_place ? MPI_IN_PLACE : send,
                 (int)count, t, recv, (int)count, t, g->comm);
    COLL_CALL_MPI(FSDP_COLL_ALL_GATHER, g, "MPI_Allgather", err);
    return FSDP_SUCCESS;
  }
  for (size_t off = 0; off < count; off += m->max_count) {
    size_t len = count - off < m->max_count ? count - off : m->max_count;
    MPI_Datatype chunk = MPI_DATATYPE_NULL;
    FSDP_CALL(MpiChunkType(m, dt, len, count, &chunk));
    COLL_MPI_RUN(m, err, MPI_Allgather, MPI_Iallgather,
                 in_place ? MPI_IN_PLACE : (const char *)send + off * k, (int)len, t,
                 (char *)recv + off * k, 1, chunk, g->comm);
    MPI_Type_free(&chunk);
    COLL_CALL_MPI(FSDP_COLL_ALL_GATHER, g, "MPI_Allgather (chunked)", err);
  }
  return FSDP_SUCCESS;
}

static int MpiReduceScatterRing(const CollMpi *m, const FsdpGroup *g, void *send, void *recv,
                                size_t count, FsdpDtype dt)
{
  const int W = g->size, r = g->rank, right = (r + 1) % W, left = (r + W - 1) % W;
  const size_t k = FsdpDtypeSize(dt);
  size_t seg = RingSegment(m);
  char *acc = send;
  for (int step = 0; step < W - 1; step++) {
    size_t out_chunk = (size_t)((r - step - 1 + 2 * W) % W);
    size_t in_chunk = (size_t)((r - step - 2 + 2 * W) % W);
    for (size_t off = 0; off < count; off += seg) {
      size_t n = count - off < seg ? count - off : seg;
      char *landing = (char *)recv + off * k;
      int err = MpiRingExchange(m, g, acc + (out_chunk * count + off) * k, n, landing, n, dt, right,
                                left);
      COLL_CALL_MPI(FSDP_COLL_REDUCE_SCATTER, g, "MPI_Sendrecv (ring reduce-scatter)", err);
      /* the running sum goes on in send, except at the last step, where
       * the chunk is ours and lands in recv */
      if (step < W - 2)
        CollAddInto(dt, landing, acc + (in_chunk * count + off) * k, n);
      else
        CollAddInto(dt, acc + (in_chunk * count + off) * k, landing, n);
    }
  }
  return FSDP_SUCCESS;
}

static int MpiReduceScatter(void *state, const FsdpGroup *g, void *send, void *recv,
                              size_t count, FsdpDtype dt, float scale)
{
  const CollMpi *m = state;
  float pre = 1.0f, post = 1.0f;
  FsdpCollSplitScale(scale, &pre, &post);
  size_t k = FsdpDtypeSize(dt);
  CollScaleInplace(send, (size_t)g->size * count, dt, pre);
  int err = MPI_SUCCESS;
  int ring = m->algo == RING_ALWAYS || (m->algo == RING_AUTO && count * k >= RS_RING_MIN_BYTES);
  if (ring && g->size > 1) {
    FSDP_CALL(MpiReduceScatterRing(m, g, send, recv, count, dt));
  } else if (count <= m->max_count) {
    COLL_MPI_RUN(m, err, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, send, recv,
                 (int)count, MpiType(m, dt), MpiSum(m, dt, 0), g->comm);
    COLL_CALL_MPI(FSDP_COLL_REDUCE_SCATTER, g, "MPI_Reduce_scatter_block", err);
  } else {
    for (size_t off = 0; off < count; off += m->max_count) {
      size_t len = count - off < m->max_count ? count - off : m->max_count;
      MPI_Datatype chunk = MPI_DATATYPE_NULL;
      FSDP_CALL(MpiChunkType(m, dt, len, count, &chunk));
      COLL_MPI_RUN(m, err, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
                   (char *)send + off * k, (char *)recv + off * k, 1, chunk, MpiSum(m, dt, 1),
                   g->comm);
      MPI_Type_free(&chunk);
      COLL_CALL_MPI(FSDP_COLL_REDUCE_SCATTER, g, "MPI_Reduce_scatter_block (chunked)", err);
    }
  }
  CollScaleInplace(recv, count, dt, post);
  return FSDP_SUCCESS;
}

/* [Note: all-reduce blocks] All-reduces below the ring's size ([Note:
 * ring all-reduce]) keep the blocking MPI_Allreduce under FSDP_COMM_WAIT
 * block, yield and sleep (the ring's exchanges wait as it says); adaptive
 * (the default) issues MPI_Iallreduce and polls it as the blocking call
 * would for its first second ([Note: waiting for a collective] in
 * coll_common.h): a hung
 * peer must not cost a core in a small all-reduce either.  Open MPI
 * 4.1's MPI_Iallreduce (libnbc, whose default for an in-place sum on few
 * ranks is, as we read its selection, a binomial reduce and broadcast
 * rather than the blocking call's reduce-scatter + all-gather) measured
 * slower, and splitting it ourselves into MPI_Ireduce_scatter_block +
 * MPI_Iallgather chunks too (F = 1 at W = 2, where every gradient is
 * all-reduced: 1320 and 1365 ms a step against 1205 ms blocking,
 * bench/results/2026-12-01-commthreads.md). */
/* [Note: ring all-reduce] The same ring for an all-reduce ([Note: ring
 * reduce-scatter]): W - 1 steps reduce chunk c of ceil(count / W)
 * elements (the last chunk shorter or empty) along one path so that rank r
 * holds the sum of chunk r, then W - 1 steps pass the summed chunks around
 * (each lands in place in buf).  Every rank ends with the same bits: each
 * chunk was summed once and then copied.  A received running sum needs a
 * landing place that is not buf: one segment, allocated per call (plain
 * malloc, not the tagged planner: [Note: stream ring]).  Open MPI 4.1's
 * MPI_Allreduce measured slower than this on one node
 * (bench/results/2026-12-01-collective-rings.md); FSDP_COLL_ALGO chooses for
 * both. */
static size_t RingChunkLen(size_t count, size_t chunk, size_t c)
{
  size_t lo = c * chunk;
  if (lo >= count) return 0;
  return count - lo < chunk ? count - lo : chunk;
}

static int MpiAllReduceRing(const CollMpi *m, const FsdpGroup *g, void *buf, size_t count,
                            FsdpDtype dt)
{
  const int W = g->size, r = g->rank, right = (r + 1) % W, left = (r + W - 1) % W;
  const size_t k = FsdpDtypeSize(dt), chunk = (count + (size_t)W - 1) / (size_t)W;
  size_t seg = RingSegment(m);
  if (seg > chunk) seg = chunk;
  char *b = buf;
  char *landing = malloc(seg * k);
  if (!landing) FSDP_ERROR(FSDP_ERR_MEM, "ring all-reduce: out of memory for %zu bytes", seg * k);
  int err = MPI_SUCCESS;
  for (int phase = 0; phase < 2 && err == MPI_SUCCESS; phase++) {
    for (int step = 0; step < W - 1 && err == MPI_SUCCESS; step++) {
      /* reduce: send running sum of chunk r-step-1, receive chunk r-step-2;
       * gather: send summed chunk r-step, receive summed chunk r-step-1 */
      size_t out_c = (size_t)((r - step - (phase ? 0 : 1) + 2 * W) % W);
      size_t in_c = (size_t)((r - step - (phase ? 1 : 2) + 2 * W) % W);
      size_t out_len = RingChunkLen(count, chunk, out_c), in_len = RingChunkLen(count, chunk, in_c);
      for (size_t off = 0; off < chunk && err == MPI_SUCCESS; off += seg) {
        size_t ns = out_len > off ? (out_len - off < seg ? out_len - off : seg) : 0;
        size_t nr = in_len > off ? (in_len - off < seg ? in_len - off : seg) : 0;
        if (ns == 0 && nr == 0) break;
        char *into = phase ? b + (in_c * chunk + off) * k : landing;
        err = MpiRingExchange(m, g, b + (out_c * chunk + off) * k, ns, into, nr, dt, right, left);
        if (err == MPI_SUCCESS && !phase) CollAddInto(dt, landing, b + (in_c * chunk + off) * k, nr);
      }
    }
  }
  free(landing);
  COLL_CALL_MPI(FSDP_COLL_ALL_REDUCE, g, "MPI_Sendrecv (ring all-reduce)", err);
  return FSDP_SUCCESS;
}

static int MpiAllReduce(void *state, const FsdpGroup *g, void *buf, size_t count,
                          FsdpDtype dt, float scale)
{
  const CollMpi *m = state;
  float pre = 1.0f, post = 1.0f;
  FsdpCollSplitScale(scale, &pre, &post);
  size_t k = FsdpDtypeSize(dt);
  CollScaleInplace(buf, count, dt, pre);
  int ring = m->algo == RING_ALWAYS ||
             (m->algo == RING_AUTO && count * k >= (size_t)g->size * RS_RING_MIN_BYTES);
  if (ring && g->size > 1 && count > 0) {
    FSDP_CALL(MpiAllReduceRing(m, g, buf, count, dt));
    CollScaleInplace(buf, count, dt, post);
    return FSDP_SUCCESS;
  }
  for (size_t off = 0; off < count; off += m->max_count) { /* [Note: all-reduce blocks] */
    size_t len = count - off < m->max_count ? count - off : m->max_count;
    COLL_CALL_MPI(FSDP_COLL_ALL_REDUCE, g, "MPI_Allreduce",
                  FsdpCollMpiAllreduce(MPI_IN_PLACE, (char *)buf + off * k, (int)len,
                                       MpiType(m, dt), MpiSum(m, dt, 0), g->comm,
                                       m->wait == COLL_WAIT_ADAPTIVE));
  }
  CollScaleInplace(buf, count, dt, post);
  return FSDP_SUCCESS;
}

/* The default per-call limit: 2^29 elements keeps every message and chunk
 * datatype at or below 2 GiB even in fp32, below the 2^31 bytes where MPI
 * libraries have kept int byte counts internally; a collective that large
 * takes seconds, so the extra calls cost nothing measurable. */
#define COLL_MPI_MAX_COUNT ((size_t)1 << 29)

/* FSDP_COLL_MAX_COUNT: see [Note: chunked collectives]. */
static int CollMaxCountFromEnv(size_t *out)
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

/* FSDP_COLL_ALGO: see [Note: ring reduce-scatter]. */
static int CollAlgoFromEnv(int *algo)
{
  *algo = RING_AUTO;
  const char *env = getenv("FSDP_COLL_ALGO");
  if (!env || !env[0]) return FSDP_SUCCESS;
  for (int i = 0; coll_algo_names[i]; i++)
    if (strcmp(env, coll_algo_names[i]) == 0) {
      *algo = i;
      return FSDP_SUCCESS;
    }
  FSDP_ERROR(FSDP_ERR_USAGE,
             "environment variable FSDP_COLL_ALGO: '%s' is not auto, ring or mpi (how "
             "reduce-scatters, all-reduces and all-gathers run: auto = our ring of MPI_Sendrecv "
             "from 256 KiB per rank, the MPI collective below; default auto)",
             env);
}

/* Frees what MpiCreate made; every object is freed even after a
 * failure, the first failure is returned. */
static int MpiDestroy(void *state)
{
  CollMpi *m = state;
  if (!m) return FSDP_SUCCESS;
  int err = MPI_SUCCESS, e;
  if (m->sum_fp32 != MPI_OP_NULL && (e = MPI_Op_free(&m->sum_fp32)) != MPI_SUCCESS) err = e;
  if (m->sum_fp16 != MPI_OP_NULL && (e = MPI_Op_free(&m->sum_fp16)) != MPI_SUCCESS) err = e;
  if (m->sum_bf16 != MPI_OP_NULL && (e = MPI_Op_free(&m->sum_bf16)) != MPI_SUCCESS) err = e;
  if (m->half_type != MPI_DATATYPE_NULL && (e = MPI_Type_free(&m->half_type)) != MPI_SUCCESS)
    err = e;
  free(m);
  FSDP_CALL_MPI(err);
  return FSDP_SUCCESS;
}

static int MpiSetup(CollMpi *m)
{
  FSDP_CALL_MPI(MPI_Type_contiguous(2, MPI_BYTE, &m->half_type));
  FSDP_CALL_MPI(MPI_Type_commit(&m->half_type));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_bf16, 1, &m->sum_bf16));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_fp16, 1, &m->sum_fp16));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_fp32, 1, &m->sum_fp32));
  FSDP_CALL(CollMaxCountFromEnv(&m->max_count));
  FSDP_CALL(FsdpCollWaitFromEnv(&m->wait));
  FSDP_CALL(CollAlgoFromEnv(&m->algo));
  return FSDP_SUCCESS;
}

static int MpiCreate(void **state)
{
  *state = NULL;
  CollMpi *m = calloc(1, sizeof *m);
  FSDP_CHECK_ALLOC(m, sizeof *m);
  m->half_type = MPI_DATATYPE_NULL;
  m->sum_bf16 = m->sum_fp16 = m->sum_fp32 = MPI_OP_NULL;
  int err = MpiSetup(m);
  if (err) {
    MpiDestroy(m);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  *state = m;
  return FSDP_SUCCESS;
}

static const CollBackendOps coll_ops_mpi = {
    .name = "MPI",
    .create = MpiCreate,
    .destroy = MpiDestroy,
    .all_gather = MpiAllGather,
    .reduce_scatter = MpiReduceScatter,
    .all_reduce = MpiAllReduce,
};

const CollBackendOps *FsdpCollMpiOps(void) { return &coll_ops_mpi; }
