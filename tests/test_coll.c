/* test_coll: collectives and their byte counters (lib/comm/coll.h).
 *
 * For every sharding factor F dividing W the test builds its own groups
 * with MPI_Comm_split (sharding group = consecutive runs of F world ranks,
 * replica group = the ranks with the same position), and fills peers_intra
 * / peers_inter from an emulated node of G = 2 ranks (node = rank / 2),
 * independently of lib/comm/topo.c.
 *
 * Inputs are chosen so that results are exact where the arithmetic allows:
 * integers and power-of-two multiples of small integers (exact in fp32,
 * bf16 and fp16), integer sums, power-of-two scales (W is 1, 2, 4 or 8).
 * The one inexact case, a bf16/fp16 reduce-scatter of arbitrary values,
 * is held to the rounding bound stated at check_rs_lowp_random.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "base/error.h"
#include "base/init.h"
#include "device/cuda_util.h"
#include "device/device.h"
#include "testutil.h"

static int g_wrank, g_wsize;

static int node_of(int world_rank) { return world_rank / 2; } /* emulated G = 2 */

typedef struct {
  int F;
  FsdpGroup shard, replica;
} Groups;

/* Fill a group from the list of its members' world ranks. */
static void group_fill(FsdpGroup *g, MPI_Comm comm, const char *name, const int *members,
                       int n, int my_pos)
{
  g->comm = comm;
  g->size = n;
  g->rank = my_pos;
  g->name = name;
  g->peers_intra = g->peers_inter = 0;
  for (int j = 0; j < n; j++) {
    if (members[j] == g_wrank) continue;
    if (node_of(members[j]) == node_of(g_wrank)) g->peers_intra++;
    else g->peers_inter++;
  }
  int size = -1, rank = -1;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  CHECK(size == n && rank == my_pos, "%s comm: size %d rank %d, expected %d %d", name, size,
        rank, n, my_pos);
}

static void groups_create(int F, Groups *gr)
{
  int W = g_wsize, r = g_wrank, R = W / F;
  gr->F = F;
  MPI_Comm sc, rc;
  TCALL(MPI_Comm_split(MPI_COMM_WORLD, r / F, r, &sc));
  TCALL(MPI_Comm_split(MPI_COMM_WORLD, r % F, r, &rc));
  int members[64];
  for (int j = 0; j < F; j++) members[j] = (r / F) * F + j;
  group_fill(&gr->shard, sc, "sharding", members, F, r % F);
  for (int j = 0; j < R; j++) members[j] = r % F + j * F;
  group_fill(&gr->replica, rc, "replica", members, R, r / F);
}

static void groups_destroy(Groups *gr)
{
  MPI_Comm_free(&gr->shard.comm);
  MPI_Comm_free(&gr->replica.comm);
}

/* ---- expected counters, computed here from the formulas ------------------ */

static void expect_add(FsdpCommCounters *e, FsdpCollKind kind, const FsdpGroup *g,
                       size_t count, size_t K)
{
  uint64_t n = (uint64_t)g->size, pi = (uint64_t)g->peers_intra,
           pe = (uint64_t)g->peers_inter, c = count, k = K;
  e->calls[kind]++;
  if (kind == FSDP_COLL_ALL_REDUCE) { /* 2(n-1)/n * S*K, S = count */
    e->bytes[kind] += 2 * (n - 1) * c * k / n;
    e->intra_bytes += 2 * pi * c * k / n;
    e->inter_bytes += 2 * pe * c * k / n;
  } else { /* (n-1)/n * P*K with P = n*count: each peer's count*K */
    e->bytes[kind] += (n - 1) * c * k;
    e->intra_bytes += pi * c * k;
    e->inter_bytes += pe * c * k;
  }
}

static void check_counters(FsdpColl c, const FsdpCommCounters *e, const char *when)
{
  FsdpCommCounters got;
  FsdpCollGetCounters(c, &got);
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
    CHECK(got.calls[k] == e->calls[k], "%s: %s calls %llu, expected %llu", when,
          FsdpCollKindNames[k], (unsigned long long)got.calls[k],
          (unsigned long long)e->calls[k]);
    CHECK(got.bytes[k] == e->bytes[k], "%s: %s bytes %llu, expected %llu", when,
          FsdpCollKindNames[k], (unsigned long long)got.bytes[k],
          (unsigned long long)e->bytes[k]);
  }
  CHECK(got.intra_bytes == e->intra_bytes, "%s: intra bytes %llu, expected %llu", when,
        (unsigned long long)got.intra_bytes, (unsigned long long)e->intra_bytes);
  CHECK(got.inter_bytes == e->inter_bytes, "%s: inter bytes %llu, expected %llu", when,
        (unsigned long long)got.inter_bytes, (unsigned long long)e->inter_bytes);
  CHECK(got.scalar_calls == e->scalar_calls, "%s: scalar calls %llu, expected %llu", when,
        (unsigned long long)got.scalar_calls, (unsigned long long)e->scalar_calls);
}

/* ---- value patterns --------------------------------------------------------- */

/* Exact in fp32, bf16 and fp16: an integer in [-127, 127] times 2^e, e in
 * [-3, 3]. */
static float pat_small(int p, size_t i, int salt)
{
  int v = (int)((p * 37 + (long)i * 11 + salt * 5) % 255) - 127;
  return ldexpf((float)v, (int)(i % 7) - 3);
}

/* Exact in fp32: distinct for every (p, i). */
static float pat_big(int p, size_t i, int salt) { return (float)(p * 100000 + (int)i + salt * 7); }

/* Integer in [-15, 15]: sums of up to 8 are exact even in bf16 partial sums. */
static float pat_int(int p, size_t j, int salt)
{
  return (float)((int)(((p + 1) * 13 + (long)j * 7 + salt * 3) % 31) - 15);
}

/* Pseudo-random in [-1, 1) (an integer hash, identical on every rank). */
static float pat_rand(int p, size_t j, int salt)
{
  uint64_t x = ((uint64_t)p << 40) ^ ((uint64_t)j << 8) ^ (uint64_t)salt;
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef float (*Pattern)(int p, size_t i, int salt);

static void fill(void *buf, FsdpDtype dt, size_t n, Pattern f, int p, size_t off, int salt)
{
  for (size_t i = 0; i < n; i++) {
    float v = f(p, off + i, salt);
    if (dt == FSDP_DTYPE_FP32) ((float *)buf)[i] = v;
    else if (dt == FSDP_DTYPE_BF16) ((uint16_t *)buf)[i] = FsdpFloatToBf16(v);
    else ((uint16_t *)buf)[i] = FsdpFloatToFp16(v);
  }
}

static float get(const void *buf, FsdpDtype dt, size_t i)
{
  if (dt == FSDP_DTYPE_FP32) return ((const float *)buf)[i];
  if (dt == FSDP_DTYPE_BF16) return FsdpBf16ToFloat(((const uint16_t *)buf)[i]);
  return FsdpFp16ToFloat(((const uint16_t *)buf)[i]);
}

/* Value as stored in dt (the rounding a fill of v applies). */
static float as_dt(float v, FsdpDtype dt)
{
  if (dt == FSDP_DTYPE_BF16) return FsdpBf16ToFloat(FsdpFloatToBf16(v));
  if (dt == FSDP_DTYPE_FP16) return FsdpFp16ToFloat(FsdpFloatToFp16(v));
  return v;
}

/* Compare got against want[] elementwise with |got - want| <= tol[i] (tol
 * NULL: exact); print the first wrong elements and the max difference. */
static int compare(const char *what, const void *got, FsdpDtype dt, const double *want,
                   const double *tol, size_t n)
{
  int bad = 0;
  double maxdiff = 0.0;
  for (size_t i = 0; i < n; i++) {
    double g = get(got, dt, i);
    double d = fabs(g - want[i]);
    if (!(d <= (tol ? tol[i] : 0.0))) { /* NaN counts as wrong */
      if (bad < 5)
        fprintf(stderr, "[rank %d] %s: element %zu = %.9g, expected %.9g (tol %.3g)\n", g_wrank,
                what, i, g, want[i], tol ? tol[i] : 0.0);
      bad++;
    }
    if (d > maxdiff || d != d) maxdiff = d;
  }
  CHECK(bad == 0, "%s: %d of %zu elements wrong, max |difference| %.3g", what, bad, n, maxdiff);
  return bad;
}

static void *xmalloc(size_t bytes)
{
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(p, 0xff, bytes); /* NaN in every dtype: untouched output shows */
  return p;
}

/* ---- blocking collectives --------------------------------------------------- */

static void check_all_gather(FsdpColl c, const FsdpGroup *g, FsdpDtype dt, Pattern f,
                             size_t count, int in_place, FsdpCommCounters *e)
{
  size_t K = FsdpDtypeSize(dt), n = (size_t)g->size, total = n * count;
  void *recv = xmalloc(total * K), *send = NULL;
  char *mine = (char *)recv + (size_t)g->rank * count * K;
  if (in_place) {
    fill(mine, dt, count, f, g->rank, 0, 1);
    send = mine;
  } else {
    send = xmalloc(count * K);
    fill(send, dt, count, f, g->rank, 0, 1);
  }
  TCALL(FsdpCollAllGather(c, g, send, recv, count, dt));
  expect_add(e, FSDP_COLL_ALL_GATHER, g, count, K);
  double *want = xmalloc(total * sizeof *want);
  for (size_t p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++) want[p * count + i] = as_dt(f((int)p, i, 1), dt);
  char what[128];
  snprintf(what, sizeof what, "all-gather %s%s F=%d count=%zu", FsdpDtypeNames[dt],
           in_place ? " in place" : "", g->size, count);
  compare(what, recv, dt, want, NULL, total);
  free(want);
  if (!in_place) free(send);
  free(recv);
}

/* The reduce-scatter the two checks below hold to their expectations:
 * rank p sends pattern f (salt) in dt, g->size * count elements; the
 * counters expect it.  Returns this rank's shard (count elements; the
 * caller frees it). */
static void *reduce_scatter_pattern(FsdpColl c, const FsdpGroup *g, FsdpDtype dt, Pattern f,
                                    int salt, size_t count, float scale, FsdpCommCounters *e)
{
  size_t K = FsdpDtypeSize(dt), total = (size_t)g->size * count;
  void *send = xmalloc(total * K), *recv = xmalloc(count * K);
  fill(send, dt, total, f, g->rank, 0, salt);
  TCALL(FsdpCollReduceScatter(c, g, send, recv, count, dt, scale));
  expect_add(e, FSDP_COLL_REDUCE_SCATTER, g, count, K);
  free(send);
  return recv;
}

/* Reduce-scatter with exact expectations: integer inputs, float scale. */
static void check_rs_exact(FsdpColl c, const FsdpGroup *g, FsdpDtype dt, size_t count,
                           float scale, FsdpCommCounters *e)
{
  size_t n = (size_t)g->size;
  void *recv = reduce_scatter_pattern(c, g, dt, pat_int, 2, count, scale, e);
  double *want = xmalloc(count * sizeof *want);
  for (size_t i = 0; i < count; i++) {
    float sum = 0.0f; /* integers: exact in any order */
    for (size_t p = 0; p < n; p++) sum += pat_int((int)p, (size_t)g->rank * count + i, 2);
    want[i] = as_dt(sum * scale, dt); /* one fp32 multiply, one rounding */
  }
  char what[128];
  snprintf(what, sizeof what, "reduce-scatter %s F=%d count=%zu scale=%g", FsdpDtypeNames[dt],
           g->size, count, (double)scale);
  compare(what, recv, dt, want, NULL, count);
  free(want);
  free(recv);
}

/* Low-precision reduce-scatter of arbitrary values.  Tolerance: each of
 * the n - 1 pairwise adds rounds a partial sum (|partial| <= sum_p |x_p|)
 * with relative error u (bf16 u = 2^-8, fp16 u = 2^-11), and the scale
 * rounds once more, so |got - scale * sum_p x_p| <= 1.01 * n * u * scale *
 * sum_p |x_p| (x_p: the inputs as stored in dt; reference in fp64).
 * With n == 2 there is exactly one add, so the result must equal
 * round_dt(x_0 + x_1) * scale bit for bit (scale a power of two): this
 * catches a sum op that truncates instead of rounding to nearest even. */
static void check_rs_lowp_random(FsdpColl c, const FsdpGroup *g, FsdpDtype dt, size_t count,
                                 float scale, FsdpCommCounters *e)
{
  size_t n = (size_t)g->size;
  void *recv = reduce_scatter_pattern(c, g, dt, pat_rand, 3, count, scale, e);
  double u = dt == FSDP_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
  double *want = xmalloc(count * sizeof *want), *tol = xmalloc(count * sizeof *tol);
  for (size_t i = 0; i < count; i++) {
    double sum = 0.0, sabs = 0.0;
    for (size_t p = 0; p < n; p++) {
      double x = as_dt(pat_rand((int)p, (size_t)g->rank * count + i, 3), dt);
      sum += x;
      sabs += fabs(x);
    }
    want[i] = sum * scale;
    tol[i] = 1.01 * (double)n * u * scale * sabs;
    if (n == 2) { /* fp32 add of two dt values is exact; one rounding to dt */
      want[i] = (double)as_dt((float)sum, dt) * scale;
      tol[i] = 0.0;
    }
  }
  char what[128];
  snprintf(what, sizeof what, "reduce-scatter %s random F=%d count=%zu", FsdpDtypeNames[dt],
           g->size, count);
  compare(what, recv, dt, want, tol, count);
  free(want);
  free(tol);
  free(recv);
}

/* [Note: scaled reductions] (coll_common.c) in fp16, on the reduce-scatter of the
 * sharding group and the all-reduce of the replica group, each with scale
 * 1/n (a gradient mean):
 * - big values, near 65504/4: the sum of 8 passes fp16's largest finite
 *   value, so sum-then-divide gives inf at n = 8.  The mean must be finite
 *   and equal the fp64 mean of the inputs within the bound of
 *   check_rs_lowp_random (1.01 n u scale sum|x|, u = 2^-11).
 * - tiny values k * 2^-22 (k = 1..7), fp16 subnormals: divide-first by the
 *   whole 1/8 rounds k * 2^-25 to the 2^-24 grid (k = 1 vanishes), while
 *   the split rule keeps every pre-divided input (k * 2^-24 for n = 8) and
 *   the sum exact, and rounds once at the end: within 2^-25 of the mean. */
static float pat_fp16_big(int p, size_t i, int salt)
{
  return (float)(16376 - 8 * (int)(((size_t)p * 7 + i * 3 + (size_t)salt) % 16));
}

static float pat_fp16_tiny(int p, size_t i, int salt)
{
  return ldexpf((float)(1 + (int)(((size_t)p * 5 + i + (size_t)salt) % 7)), -22);
}

static void check_fp16_mean(FsdpColl c, const FsdpGroup *g, FsdpCollKind kind, Pattern f,
                            size_t count, FsdpCommCounters *e)
{
  const FsdpDtype dt = FSDP_DTYPE_FP16;
  size_t K = 2, n = (size_t)g->size, nin = kind == FSDP_COLL_REDUCE_SCATTER ? n * count : count;
  float scale = 1.0f / (float)n;
  void *send = xmalloc(nin * K), *recv = kind == FSDP_COLL_REDUCE_SCATTER ? xmalloc(count * K) : send;
  fill(send, dt, nin, f, g->rank, 0, 6);
  if (kind == FSDP_COLL_REDUCE_SCATTER)
    TCALL(FsdpCollReduceScatter(c, g, send, recv, count, dt, scale));
  else
    TCALL(FsdpCollAllReduce(c, g, send, count, dt, scale));
  expect_add(e, kind, g, count, K);
  double *want = xmalloc(count * sizeof *want), *tol = xmalloc(count * sizeof *tol);
  int tiny = f == pat_fp16_tiny;
  for (size_t i = 0; i < count; i++) {
    size_t j = kind == FSDP_COLL_REDUCE_SCATTER ? (size_t)g->rank * count + i : i;
    double sum = 0.0, sabs = 0.0;
    for (size_t p = 0; p < n; p++) {
      double x = as_dt(f((int)p, j, 6), dt);
      sum += x;
      sabs += fabs(x);
    }
    want[i] = sum / (double)n;
    tol[i] = tiny ? ldexp(1.0, -25) : 1.01 * (double)n * ldexp(1.0, -11) * sabs / (double)n;
  }
  char what[128];
  snprintf(what, sizeof what, "fp16 %s mean of %s values on the %s group (%d)",
           FsdpCollKindNames[kind], tiny ? "subnormal" : "near 65504/4", g->name, g->size);
  compare(what, recv, dt, want, tol, count);
  free(want);
  free(tol);
  if (recv != send) free(recv);
  free(send);
}

static void check_all_reduce(FsdpColl c, const FsdpGroup *g, FsdpDtype dt, size_t count,
                             float scale, FsdpCommCounters *e)
{
  size_t K = FsdpDtypeSize(dt), n = (size_t)g->size;
  void *buf = xmalloc(count * K);
  fill(buf, dt, count, pat_int, g->rank, 0, 4);
  TCALL(FsdpCollAllReduce(c, g, buf, count, dt, scale));
  expect_add(e, FSDP_COLL_ALL_REDUCE, g, count, K);
  double *want = xmalloc(count * sizeof *want);
  for (size_t i = 0; i < count; i++) {
    float sum = 0.0f;
    for (size_t p = 0; p < n; p++) sum += pat_int((int)p, i, 4);
    want[i] = as_dt(sum * scale, dt);
  }
  char what[128];
  snprintf(what, sizeof what, "all-reduce %s on the %s group (%d) count=%zu scale=%g",
           FsdpDtypeNames[dt], g->name, g->size, count, (double)scale);
  compare(what, buf, dt, want, NULL, count);
  free(want);
  free(buf);
}

/* ---- collectives issued on a stream ----------------------------------------- */

typedef struct {
  FsdpCollKind kind;
  FsdpDtype dt;
  const FsdpGroup *g;
  size_t count;
  float scale;
  void *send, *recv;
  FsdpEvent ev;
} AsyncOp;

static void check_async(FsdpColl c, const Groups *gr, const FsdpGroup *world,
                        FsdpCommCounters *e)
{
  enum { NOPS = 50 };
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("comm", 8, &s)); /* fewer slots than ops: enqueue blocks */
  AsyncOp op[NOPS];
  for (int k = 0; k < NOPS; k++) {
    AsyncOp *o = &op[k];
    o->kind = (FsdpCollKind)(k % 3);
    o->dt = (k % 2) ? FSDP_DTYPE_BF16 : FSDP_DTYPE_FP32;
    o->g = o->kind == FSDP_COLL_ALL_REDUCE ? &gr->replica : &gr->shard;
    o->count = 40 + (size_t)k;
    o->scale = o->kind == FSDP_COLL_ALL_GATHER ? 1.0f : 1.0f / (float)o->g->size;
    size_t K = FsdpDtypeSize(o->dt), n = (size_t)o->g->size;
    switch (o->kind) {
    case FSDP_COLL_ALL_GATHER:
      o->send = xmalloc(o->count * K);
      o->recv = xmalloc(n * o->count * K);
      fill(o->send, o->dt, o->count, pat_small, o->g->rank, 0, k);
      TCALL(FsdpCollAllGatherAsync(c, o->g, o->send, o->recv, o->count, o->dt, s, &o->ev));
      break;
    case FSDP_COLL_REDUCE_SCATTER:
      o->send = xmalloc(n * o->count * K);
      o->recv = xmalloc(o->count * K);
      fill(o->send, o->dt, n * o->count, pat_int, o->g->rank, 0, k);
      TCALL(FsdpCollReduceScatterAsync(c, o->g, o->send, o->recv, o->count, o->dt, o->scale,
                                       s, &o->ev));
      break;
    default:
      o->send = NULL;
      o->recv = xmalloc(o->count * K);
      fill(o->recv, o->dt, o->count, pat_int, o->g->rank, 0, k);
      TCALL(FsdpCollAllReduceAsync(c, o->g, o->recv, o->count, o->dt, o->scale, s, &o->ev));
      break;
    }
    expect_add(e, o->kind, o->g, o->count, K);
    CHECK(o->ev.stream == s, "async op %d returned no event", k);
    if (k == NOPS / 2) {
      /* The compute thread reduces a scalar on another communicator while
       * the stream thread runs collectives (MPI_THREAD_MULTIPLE). */
      double v[2] = {1.0, (double)g_wrank};
      TCALL(FsdpCollScalarSum(c, world, v, 2));
      e->scalar_calls++;
      CHECK(v[0] == (double)g_wsize && v[1] == (double)g_wsize * (g_wsize - 1) / 2,
            "scalar sum during async collectives: %g %g", v[0], v[1]);
    }
  }
  /* Counting happened at issue, on this thread. */
  check_counters(c, e, "after issuing async collectives");
  /* Wait out of order (37 is prime to 50), then check every result. */
  for (int k = 0; k < NOPS; k++) TCALL(FsdpEventWait(op[(k * 37 + 11) % NOPS].ev));
  for (int k = 0; k < NOPS; k++) {
    AsyncOp *o = &op[k];
    size_t n = (size_t)o->g->size, nout = o->kind == FSDP_COLL_ALL_GATHER ? n * o->count : o->count;
    double *want = xmalloc(nout * sizeof *want);
    for (size_t i = 0; i < nout; i++) {
      if (o->kind == FSDP_COLL_ALL_GATHER) {
        want[i] = as_dt(pat_small((int)(i / o->count), i % o->count, k), o->dt);
      } else {
        size_t j = o->kind == FSDP_COLL_REDUCE_SCATTER ? (size_t)o->g->rank * o->count + i : i;
        float sum = 0.0f;
        for (size_t p = 0; p < n; p++) sum += pat_int((int)p, j, k);
        want[i] = as_dt(sum * o->scale, o->dt);
      }
    }
    char what[128];
    snprintf(what, sizeof what, "async op %d (%s %s count %zu)", k, FsdpCollKindNames[o->kind],
             FsdpDtypeNames[o->dt], o->count);
    compare(what, o->recv, o->dt, want, NULL, nout);
    free(want);
    free(o->send);
    free(o->recv);
  }
  TCALL(FsdpStreamDestroy(&s));
}

/* ---- errors ------------------------------------------------------------------ */

static void check_errors(FsdpColl c, const Groups *gr, FsdpCommCounters *e)
{
  /* More elements per rank than the address space holds: a usage error
   * naming the collective and the group, raised before anything is
   * counted.  (More than an MPI int is fine: chunks, run_chunked.) */
  float dummy[2] = {0, 0};
  size_t huge = SIZE_MAX / 2 + 1; /* times 2 bytes: past SIZE_MAX */
  int err = FsdpCollAllGather(c, &gr->shard, dummy, dummy, huge, FSDP_DTYPE_FP32);
  char want[128];
  snprintf(want, sizeof want, "all-gather on the sharding comm (%d ranks)", gr->shard.size);
  CHECK(err == FSDP_ERR_USAGE, "oversized all-gather returned %d", err);
  CHECK(strstr(FsdpErrorLastMessage(), want) != NULL, "message '%s' lacks '%s'",
        FsdpErrorLastMessage(), want);
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("err", 2, &s));
  FsdpEvent ev = {s, 99};
  err = FsdpCollReduceScatterAsync(c, &gr->shard, dummy, dummy, huge, FSDP_DTYPE_BF16, 1.0f, s,
                                   &ev);
  snprintf(want, sizeof want, "reduce-scatter on the sharding comm (%d ranks)", gr->shard.size);
  CHECK(err == FSDP_ERR_USAGE, "oversized async reduce-scatter returned %d", err);
  CHECK(ev.stream == NULL, "a refused async collective returned an event");
  CHECK(strstr(FsdpErrorLastMessage(), want) != NULL, "message '%s' lacks '%s'",
        FsdpErrorLastMessage(), want);
  err = FsdpCollAllReduce(c, &gr->replica, dummy, huge, FSDP_DTYPE_FP16, 1.0f);
  snprintf(want, sizeof want, "all-reduce on the replica comm (%d ranks)", gr->replica.size);
  CHECK(err == FSDP_ERR_USAGE, "oversized all-reduce returned %d", err);
  CHECK(strstr(FsdpErrorLastMessage(), want) != NULL, "message '%s' lacks '%s'",
        FsdpErrorLastMessage(), want);
  TCALL(FsdpStreamDestroy(&s));
  check_counters(c, e, "after refused collectives");
}

/* The formula on literal cases (n = 4 with 1 peer on my node and 2 off it;
 * n = 3 with an all-reduce volume n does not divide). */
/* [Note: one file per back-end] (device_backend.h): the build knows which
 * device back-ends it has, and -device cuda without one is the usage error
 * naming it, not a quiet fall-back to the CPU. */
static void check_device_backends(void)
{
  CHECK(FsdpDeviceKindAvailable(FSDP_DEVICE_CPU), "the CPU device back-end is always built");
  int cuda = FsdpDeviceKindAvailable(FSDP_DEVICE_CUDA);
  CHECK(cuda == FsdpCudaBuilt(), "CUDA device back-end available %d, FsdpCudaBuilt %d", cuda,
        FsdpCudaBuilt());
  if (cuda) return; /* set-up with CUDA needs a GPU: test_kernels_cuda, test_gpu_train */
  int err = FsdpDeviceSetUp(FSDP_DEVICE_CUDA, MPI_COMM_WORLD);
  CHECK(err == FSDP_ERR_USAGE &&
            strstr(FsdpErrorLastMessage(), "-device cuda: this build has no CUDA back-end"),
        "device set-up for CUDA without its back-end gave %d: '%s'", err, FsdpErrorLastMessage());
  CHECK(FsdpDeviceGetKind() == FSDP_DEVICE_CPU, "the device stays the CPU after a refused set-up");
  TCALL(FsdpDeviceFinalize());
}

static void check_volume_literals(void)
{
  FsdpGroup g4 = {MPI_COMM_NULL, 4, 0, 1, 2, "sharding"};
  FsdpGroup g3 = {MPI_COMM_NULL, 3, 0, 1, 1, "replica"};
  FsdpGroup g1 = {MPI_COMM_NULL, 1, 0, 0, 0, "sharding"};
  uint64_t b, i, o;
  FsdpCollVolume(FSDP_COLL_ALL_GATHER, &g4, 400, 2, &b, &i, &o);
  CHECK(b == 600 && i == 200 && o == 400, "all-gather P=400 K=2 n=4: %llu %llu %llu",
        (unsigned long long)b, (unsigned long long)i, (unsigned long long)o);
  FsdpCollVolume(FSDP_COLL_REDUCE_SCATTER, &g4, 1000, 4, &b, &i, &o);
  CHECK(b == 3000 && i == 1000 && o == 2000, "reduce-scatter P=1000 K=4 n=4: %llu %llu %llu",
        (unsigned long long)b, (unsigned long long)i, (unsigned long long)o);
  FsdpCollVolume(FSDP_COLL_ALL_REDUCE, &g4, 10, 4, &b, &i, &o);
  CHECK(b == 60 && i == 20 && o == 40, "all-reduce S=10 K=4 n=4: %llu %llu %llu",
        (unsigned long long)b, (unsigned long long)i, (unsigned long long)o);
  FsdpCollVolume(FSDP_COLL_ALL_REDUCE, &g3, 5, 2, &b, &i, &o);
  CHECK(b == 13 && i == 6 && o == 6, "all-reduce S=5 K=2 n=3: %llu %llu %llu",
        (unsigned long long)b, (unsigned long long)i, (unsigned long long)o);
  FsdpCollVolume(FSDP_COLL_ALL_GATHER, &g1, 1000, 4, &b, &i, &o);
  CHECK(b == 0 && i == 0 && o == 0, "all-gather on 1 rank moves %llu bytes",
        (unsigned long long)b);
}

static void run_factor(FsdpColl c, int F, const FsdpGroup *world)
{
  Groups gr;
  groups_create(F, &gr);
  /* The emulated node (2 ranks) against the groups: spot values. */
  if (F == 2 && g_wsize >= 2)
    CHECK(gr.shard.peers_intra == 1 && gr.shard.peers_inter == 0,
          "F=2: sharding peers %d/%d, expected 1/0", gr.shard.peers_intra, gr.shard.peers_inter);
  if (F == 4)
    CHECK(gr.shard.peers_intra == 1 && gr.shard.peers_inter == 2,
          "F=4: sharding peers %d/%d, expected 1/2", gr.shard.peers_intra, gr.shard.peers_inter);
  if (F == 1 && g_wsize >= 2)
    CHECK(gr.replica.peers_intra == 1 && gr.replica.peers_inter == g_wsize - 2,
          "F=1: replica peers %d/%d", gr.replica.peers_intra, gr.replica.peers_inter);

  FsdpCommCounters e;
  memset(&e, 0, sizeof e);
  FsdpCollResetCounters(c);
  check_counters(c, &e, "after reset");

  int n = gr.shard.size, R = gr.replica.size;
  size_t cnt = 1000 + 3 * (size_t)F;
  /* all-gather: fp32 exact, bf16/fp16 exact on representable values, in place */
  check_all_gather(c, &gr.shard, FSDP_DTYPE_FP32, pat_big, cnt, 0, &e);
  check_all_gather(c, &gr.shard, FSDP_DTYPE_BF16, pat_small, cnt, 0, &e);
  check_all_gather(c, &gr.shard, FSDP_DTYPE_FP16, pat_small, cnt + 1, 0, &e);
  check_all_gather(c, &gr.shard, FSDP_DTYPE_FP32, pat_big, cnt + 2, 1, &e);
  check_all_gather(c, &gr.shard, FSDP_DTYPE_BF16, pat_small, cnt + 3, 1, &e);
  check_all_gather(c, &gr.shard, FSDP_DTYPE_FP32, pat_big, 0, 0, &e); /* empty */
  /* reduce-scatter: integer sums exact, scales 1, 1/n (power of two), 0.1 */
  check_rs_exact(c, &gr.shard, FSDP_DTYPE_FP32, cnt, 1.0f, &e);
  check_rs_exact(c, &gr.shard, FSDP_DTYPE_FP32, cnt, 1.0f / (float)n, &e);
  check_rs_exact(c, &gr.shard, FSDP_DTYPE_FP32, cnt + 5, 0.1f, &e);
  check_rs_exact(c, &gr.shard, FSDP_DTYPE_BF16, cnt, 1.0f / (float)n, &e);
  check_rs_exact(c, &gr.shard, FSDP_DTYPE_FP16, cnt, 1.0f / (float)n, &e);
  check_rs_lowp_random(c, &gr.shard, FSDP_DTYPE_BF16, cnt, 1.0f / (float)n, &e);
  check_rs_lowp_random(c, &gr.shard, FSDP_DTYPE_FP16, cnt, 1.0f, &e);
  /* all-reduce on the replica group (777: a volume R need not divide) */
  check_all_reduce(c, &gr.replica, FSDP_DTYPE_FP32, 777, 1.0f, &e);
  check_all_reduce(c, &gr.replica, FSDP_DTYPE_FP32, 777, 1.0f / (float)R, &e);
  check_all_reduce(c, &gr.replica, FSDP_DTYPE_BF16, 513, 1.0f / (float)R, &e);
  check_all_reduce(c, &gr.shard, FSDP_DTYPE_FP16, 100, 1.0f, &e);
  /* fp16 means that neither overflow nor underflow */
  check_fp16_mean(c, &gr.shard, FSDP_COLL_REDUCE_SCATTER, pat_fp16_big, cnt, &e);
  check_fp16_mean(c, &gr.shard, FSDP_COLL_REDUCE_SCATTER, pat_fp16_tiny, cnt, &e);
  check_fp16_mean(c, &gr.replica, FSDP_COLL_ALL_REDUCE, pat_fp16_big, 301, &e);
  check_fp16_mean(c, &gr.replica, FSDP_COLL_ALL_REDUCE, pat_fp16_tiny, 301, &e);
  /* scalars: counted apart */
  double v[3] = {(double)g_wrank, 2.0, -(double)g_wrank};
  TCALL(FsdpCollScalarSum(c, &gr.shard, v, 3));
  e.scalar_calls++;
  int base = (g_wrank / F) * F;
  CHECK(v[0] == (double)(base * F + F * (F - 1) / 2) && v[1] == 2.0 * F,
        "scalar sum over the sharding group: %g %g", v[0], v[1]);
  double m = -(double)g_wrank;
  TCALL(FsdpCollScalarMax(c, &gr.shard, &m, 1));
  e.scalar_calls++;
  CHECK(m == -(double)base, "scalar max: %g, expected %d", m, -base);
  check_counters(c, &e, "after blocking collectives");

  check_async(c, &gr, world, &e);
  check_counters(c, &e, "after async collectives");
  check_errors(c, &gr, &e);
  groups_destroy(&gr);
}

/* [Note: chunked collectives] (coll_mpi.c): FSDP_COLL_MAX_COUNT (read at
 * create) makes every collective above 97 elements per rank run in chunks,
 * so all of run_factor -- all-gather, reduce-scatter, all-reduce, fp32,
 * bf16 and fp16, in place, async, every F including F = W and hybrid --
 * checks the chunked path against the same expectations.  97 is prime:
 * chunk boundaries fall inside the 32-element patterns and the last chunk
 * is short.  A bad value is a usage error naming the variable. */
static void run_chunked(const FsdpGroup *world)
{
  FsdpColl c = NULL;
  const char *bad[] = {"0", "-5", "12x", "3000000000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("FSDP_COLL_MAX_COUNT", bad[i], 1);
    int err = FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c);
    CHECK(err == FSDP_ERR_USAGE && c == NULL, "FSDP_COLL_MAX_COUNT=%s: create gave %d", bad[i],
          err);
    CHECK(strstr(FsdpErrorLastMessage(), "FSDP_COLL_MAX_COUNT") != NULL &&
              strstr(FsdpErrorLastMessage(), bad[i]) != NULL,
          "message '%s' names neither the variable nor '%s'", FsdpErrorLastMessage(), bad[i]);
  }
  setenv("FSDP_COLL_MAX_COUNT", "97", 1);
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c));
  unsetenv("FSDP_COLL_MAX_COUNT");
  for (int F = 1; F <= g_wsize; F++)
    if (g_wsize % F == 0) run_factor(c, F, world);
  TCALL(FsdpCollDestroy(&c));
}

/* [Note: waiting for a collective] (coll_common.h): FSDP_COMM_WAIT (read at
 * create) picks the nonblocking calls polled for a second, then with
 * nanosleep (adaptive, the default main's run used), the blocking calls
 * (block) or the nonblocking ones with MPI_Test and sched_yield (yield) or
 * nanosleep (sleep); each must give the same results (at F = W: every collective
 * kind and dtype).  Only at W <= 2: with more ranks than cores every
 * wake-up from a sleep or yield waits for a time slice, and the hundreds
 * of small collectives here took past the test's timeout at W = 4 on a
 * loaded 2-core machine.  A bad value is a usage
 * error naming the variable and the value. */
static void run_wait_modes(const FsdpGroup *world)
{
  FsdpColl c = NULL;
  const char *bad[] = {"spin", "Sleep", "block2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("FSDP_COMM_WAIT", bad[i], 1);
    int err = FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c);
    CHECK(err == FSDP_ERR_USAGE && c == NULL, "FSDP_COMM_WAIT=%s: create gave %d", bad[i], err);
    CHECK(strstr(FsdpErrorLastMessage(), "FSDP_COMM_WAIT") != NULL &&
              strstr(FsdpErrorLastMessage(), bad[i]) != NULL,
          "message '%s' names neither the variable nor '%s'", FsdpErrorLastMessage(), bad[i]);
  }
  const char *modes[] = {"block", "yield", "sleep"};
  for (size_t i = 0; g_wsize <= 2 && i < sizeof modes / sizeof modes[0]; i++) {
    setenv("FSDP_COMM_WAIT", modes[i], 1);
    TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c));
    run_factor(c, g_wsize, world);
    TCALL(FsdpCollDestroy(&c));
  }
  unsetenv("FSDP_COMM_WAIT");
}

/* [Note: ring reduce-scatter] (coll_mpi.c): FSDP_COLL_ALGO=ring runs every
 * reduce-scatter, all-reduce and all-gather of run_factor -- fp32 integer sums exact,
 * bf16 on 2 ranks bit for bit, fp16 means, async, hybrid -- through the
 * ring, alone and with FSDP_COLL_MAX_COUNT=97 (segments cut at 97
 * elements, so each step takes many exchanges and a short last one).
 * The same for all-reduces ([Note: ring all-reduce]): run_factor's
 * counts 777, 513, 301, 100 leave chunks short or empty.  The default
 * (auto) takes the ring from 256 KiB per rank: one exact reduce-scatter
 * above that size and one below checks both sides of the switch, two
 * large all-reduces the all-reduce ring, and FSDP_COLL_ALGO=mpi
 * the MPI calls at the same sizes; the same for all-gathers ([Note: ring
 * all-gather]), in place and not.  A bad value is a usage error naming the variable and the value. */
static void run_rs_modes(const FsdpGroup *world)
{
  FsdpColl c = NULL;
  const char *bad[] = {"Ring", "rings", "0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("FSDP_COLL_ALGO", bad[i], 1);
    int err = FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c);
    CHECK(err == FSDP_ERR_USAGE && c == NULL, "FSDP_COLL_ALGO=%s: create gave %d", bad[i],
          err);
    CHECK(strstr(FsdpErrorLastMessage(), "FSDP_COLL_ALGO") != NULL &&
              strstr(FsdpErrorLastMessage(), bad[i]) != NULL,
          "message '%s' names neither the variable nor '%s'", FsdpErrorLastMessage(), bad[i]);
  }
  setenv("FSDP_COLL_ALGO", "ring", 1);
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c));
  for (int F = 1; F <= g_wsize; F++)
    if (g_wsize % F == 0) run_factor(c, F, world);
  TCALL(FsdpCollDestroy(&c));
  setenv("FSDP_COLL_MAX_COUNT", "97", 1);
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c));
  unsetenv("FSDP_COLL_MAX_COUNT");
  run_factor(c, g_wsize, world);
  TCALL(FsdpCollDestroy(&c));
  const char *sized[] = {"auto", "mpi"};
  for (size_t i = 0; i < sizeof sized / sizeof sized[0]; i++) {
    setenv("FSDP_COLL_ALGO", sized[i], 1);
    TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c));
    Groups gr;
    groups_create(g_wsize, &gr);
    FsdpCommCounters e;
    memset(&e, 0, sizeof e);
    FsdpCollResetCounters(c);
    check_rs_exact(c, &gr.shard, FSDP_DTYPE_FP32, 70001, 1.0f / (float)g_wsize, &e); /* 280 KB */
    check_rs_exact(c, &gr.shard, FSDP_DTYPE_BF16, 140003, 1.0f, &e);                /* 280 KB */
    check_rs_exact(c, &gr.shard, FSDP_DTYPE_FP32, 60000, 1.0f, &e);                 /* 240 KB */
    /* all-reduces: the ring from W x 256 KiB, a count W need not divide */
    check_all_reduce(c, &gr.shard, FSDP_DTYPE_FP32, 70001 * (size_t)g_wsize + 3, 1.0f, &e);
    check_all_reduce(c, &gr.shard, FSDP_DTYPE_BF16, 140001 * (size_t)g_wsize, 0.5f, &e);
    check_all_gather(c, &gr.shard, FSDP_DTYPE_FP32, pat_big, 70001, 0, &e);
    check_all_gather(c, &gr.shard, FSDP_DTYPE_BF16, pat_small, 140003, 1, &e);
    check_counters(c, &e, "after large collectives");
    groups_destroy(&gr);
    TCALL(FsdpCollDestroy(&c));
  }
  unsetenv("FSDP_COLL_ALGO");
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &g_wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_wsize);
  FsdpGroup world;
  int members[64];
  for (int j = 0; j < g_wsize; j++) members[j] = j;
  group_fill(&world, MPI_COMM_WORLD, "world", members, g_wsize, g_wrank);

  check_volume_literals();
  check_device_backends();

  FsdpColl c = NULL;
  int gpus = 0;
  TCALL(FsdpCudaDeviceCount(&gpus));
  if (gpus == 0) { /* without a usable GPU (or CUDA build) NCCL is refused clearly */
    int err = FsdpCollCreate(FSDP_COLL_BACKEND_NCCL, &c);
    CHECK(err == FSDP_ERR_USAGE && c == NULL, "NCCL backend create gave %d", err);
    CHECK(strstr(FsdpErrorLastMessage(), "NCCL") != NULL, "message '%s'", FsdpErrorLastMessage());
  }

  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &c));
  for (int F = 1; F <= g_wsize; F++)
    if (g_wsize % F == 0) run_factor(c, F, &world);
  TCALL(FsdpCollDestroy(&c));
  CHECK(c == NULL, "destroy sets the handle to NULL");
  TCALL(FsdpCollDestroy(&c));

  run_chunked(&world);
  run_wait_modes(&world);
  run_rs_modes(&world);

  /* [Note: MPI staging of device buffers] (coll_staged.c): with the CPU
   * device the staged back-end copies through the device interface into
   * host staging buffers (one pair per issuing thread: the async checks
   * run two stream threads) and must give every value plain MPI gives. */
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI_STAGED, &c));
  for (int F = 1; F <= g_wsize; F++)
    if (g_wsize % F == 0) run_factor(c, F, &world);
  TCALL(FsdpCollDestroy(&c));

  int status = test_finish("test_coll");
  TCALL(FsdpFinalize());
  return status;
}
