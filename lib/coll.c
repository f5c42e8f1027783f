/* coll.c: collectives over a backend, with byte accounting (see coll.h).
 *
 * [Note: collective backends] The backend is one of the two truly
 * polymorphic parts of fsdp, so it gets a small ops table (CollOps): the
 * three blocking collectives on raw buffers.  Everything around them is
 * shared: argument checks, counting at issue ([Note: byte accounting] in
 * coll.h), and the async variants, which enqueue a task that runs the
 * blocking op on the stream thread.  Only the MPI host backend exists
 * today.  An NCCL backend adds a CollOps whose entries call ncclAllGather /
 * ncclReduceScatter / ncclAllReduce on the group's ncclComm (and, for the
 * async path, issues on a CUDA stream instead of a CPU stream task); the
 * public functions do not change.
 *
 * [Note: low-precision sums over MPI] MPI has no bf16/fp16 type, so both
 * travel as a committed 2-byte contiguous datatype and are summed by a
 * user-defined commutative MPI_Op that converts each pair of operands to
 * fp32, adds, and rounds the pair sum back (round to nearest even).  The
 * MPI library combines the n contributions pairwise, so a sum of n values
 * is rounded n - 1 times (each time to 8 (bf16) or 11 (fp16) significant
 * bits of a partial sum), in an order MPI picks.  The scale is then applied
 * to the received result in place, element by element in fp32, with one
 * more rounding (no fp32 temporary buffer of the shard is needed).  With a
 * power-of-two scale (1/W for W a power of two) that last rounding is exact
 * barring underflow.  fp32 uses MPI_FLOAT / MPI_SUM and scales in place.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "coll.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

const char *const FsdpCollKindNames[FSDP_COLL_NKINDS] = {"all-gather", "reduce-scatter",
                                                         "all-reduce"};

typedef struct {
  const char *name;
  int (*all_gather)(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                    size_t count, FsdpDtype dt);
  int (*reduce_scatter)(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                        size_t count, FsdpDtype dt, float scale);
  int (*all_reduce)(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                    FsdpDtype dt, float scale);
} CollOps;

struct FsdpColl_ {
  FsdpCollBackend backend;
  const CollOps *ops;
  FsdpCommCounters counters; /* touched on the issuing thread only */
  /* MPI backend */
  MPI_Datatype half_type; /* 2 contiguous bytes: one bf16 or fp16 */
  MPI_Op sum_bf16, sum_fp16;
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
  if (count > (size_t)INT_MAX)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s on the %s comm (%d ranks): %zu elements per rank exceed the "
               "MPI count limit (%d); use a larger sharding factor or fewer "
               "blocks per unit (-wrap)",
               FsdpCollKindNames[kind], group_name(g), g->size, count, INT_MAX);
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

/* User ops: inout[i] = round(in[i] + inout[i]) computed in fp32. */
static void mpi_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
  (void)type;
  const uint16_t *a = (const uint16_t *)in;
  uint16_t *b = (uint16_t *)inout;
  for (int i = 0; i < *len; i++)
    b[i] = FsdpFloatToBf16(FsdpBf16ToFloat(a[i]) + FsdpBf16ToFloat(b[i]));
}

static void mpi_sum_fp16(void *in, void *inout, int *len, MPI_Datatype *type)
{
  (void)type;
  const uint16_t *a = (const uint16_t *)in;
  uint16_t *b = (uint16_t *)inout;
  for (int i = 0; i < *len; i++)
    b[i] = FsdpFloatToFp16(FsdpFp16ToFloat(a[i]) + FsdpFp16ToFloat(b[i]));
}

static MPI_Datatype mpi_type(FsdpColl c, FsdpDtype dt)
{
  return dt == FSDP_DTYPE_FP32 ? MPI_FLOAT : c->half_type;
}

static MPI_Op mpi_sum(FsdpColl c, FsdpDtype dt)
{
  return dt == FSDP_DTYPE_FP32 ? MPI_SUM : dt == FSDP_DTYPE_BF16 ? c->sum_bf16 : c->sum_fp16;
}

static int mpi_all_gather(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                          size_t count, FsdpDtype dt)
{
  MPI_Datatype t = mpi_type(c, dt);
  size_t k = FsdpDtypeSize(dt);
  /* The FlatParameter's own shard already sits in the unsharded buffer. */
  const void *sbuf = (send == (const char *)recv + (size_t)g->rank * count * k) ? MPI_IN_PLACE : send;
  COLL_CALL_MPI(FSDP_COLL_ALL_GATHER, g, "MPI_Allgather",
                MPI_Allgather(sbuf, (int)count, t, recv, (int)count, t, g->comm));
  return FSDP_SUCCESS;
}

static int mpi_reduce_scatter(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
                              size_t count, FsdpDtype dt, float scale)
{
  COLL_CALL_MPI(FSDP_COLL_REDUCE_SCATTER, g, "MPI_Reduce_scatter_block",
                MPI_Reduce_scatter_block(send, recv, (int)count, mpi_type(c, dt),
                                         mpi_sum(c, dt), g->comm));
  coll_scale_inplace(recv, count, dt, scale);
  return FSDP_SUCCESS;
}

static int mpi_all_reduce(FsdpColl c, const FsdpGroup *g, void *buf, size_t count,
                          FsdpDtype dt, float scale)
{
  COLL_CALL_MPI(FSDP_COLL_ALL_REDUCE, g, "MPI_Allreduce",
                MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(c, dt),
                              mpi_sum(c, dt), g->comm));
  coll_scale_inplace(buf, count, dt, scale);
  return FSDP_SUCCESS;
}

static const CollOps coll_ops_mpi = {"MPI", mpi_all_gather, mpi_reduce_scatter,
                                     mpi_all_reduce};

static int mpi_setup(FsdpColl c)
{
  FSDP_CALL_MPI(MPI_Type_contiguous(2, MPI_BYTE, &c->half_type));
  FSDP_CALL_MPI(MPI_Type_commit(&c->half_type));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_bf16, 1, &c->sum_bf16));
  FSDP_CALL_MPI(MPI_Op_create(mpi_sum_fp16, 1, &c->sum_fp16));
  return FSDP_SUCCESS;
}

static int mpi_teardown(FsdpColl c)
{
  if (c->sum_fp16 != MPI_OP_NULL) FSDP_CALL_MPI(MPI_Op_free(&c->sum_fp16));
  if (c->sum_bf16 != MPI_OP_NULL) FSDP_CALL_MPI(MPI_Op_free(&c->sum_bf16));
  if (c->half_type != MPI_DATATYPE_NULL) FSDP_CALL_MPI(MPI_Type_free(&c->half_type));
  return FSDP_SUCCESS;
}

/* ---- lifecycle ----------------------------------------------------------- */

int FsdpCollCreate(FsdpCollBackend backend, FsdpColl *out)
{
  if (!out) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCollCreate: NULL output handle");
  *out = NULL;
  switch (backend) {
  case FSDP_COLL_BACKEND_MPI: break;
  case FSDP_COLL_BACKEND_NCCL:
#ifdef FSDP_HAVE_CUDA
    FSDP_ERROR(FSDP_ERR_USAGE, "the NCCL collective backend is not implemented yet: "
                               "use -device cpu (MPI collectives)");
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
  c->sum_bf16 = c->sum_fp16 = MPI_OP_NULL;
  int err = mpi_setup(c);
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
  int err = mpi_teardown(c);
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

int FsdpCollReduceScatter(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
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
  const void *send;
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
  CollTask t = {c, *g, kind, send, recv, count, dt, scale};
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

int FsdpCollReduceScatterAsync(FsdpColl c, const FsdpGroup *g, const void *send, void *recv,
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
