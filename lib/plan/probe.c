/* probe.c: the machine measured for a profile (probe.h). */
#include "plan/probe.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"
#include "comm/coll.h"
#include "comm/stream.h"
#include "model/family.h"

static int CompareDouble(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double Median(double *x, int n)
{
  qsort(x, (size_t)n, sizeof *x, CompareDouble);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The slowest rank's value of a time (or smallest of a rate) over world. */
static int WorldMax(double *v)
{
  FSDP_CALL_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return FSDP_SUCCESS;
}

typedef enum {
  STAGE_MEDIAN, /* a stage's typical time: what the replay charges a stage */
  STAGE_MEAN    /* its time on average: what a run of many passes spends */
} StageStat;

/* Each stage's forward and backward: the median (or mean) over `reps`
 * passes in t (as ProbeStagesAt lays them out, rows `stride` apart), the
 * slowest rank's; t sorted in place. */
static int StageTimes(double *t, int stride, int ns, int reps, StageStat stat, double *fwd,
                      double *bwd)
{
  for (int i = 0; i < 2 * ns; i++) {
    double *row = &t[(size_t)i * stride], v = 0.0;
    if (stat == STAGE_MEDIAN) {
      v = Median(row, reps);
    } else {
      for (int r = 0; r < reps; r++) v += row[r];
      v /= reps;
    }
    FSDP_CALL(WorldMax(&v));
    if (i < ns) fwd[i] = v;
    else bwd[i - ns] = v;
  }
  return FSDP_SUCCESS;
}

static int StageMedians(double *t, int stride, int ns, int reps, double *fwd, double *bwd)
{
  return StageTimes(t, stride, ns, reps, STAGE_MEDIAN, fwd, bwd);
}

/* g: a duplicate of the world for a stream thread's collectives (its own
 * communicator, as the runtime's streams have; the compute thread's
 * barriers stay on the world).  Free g->comm unless it is MPI_COMM_NULL. */
static int WorldDup(FsdpGroup *g)
{
  *g = (FsdpGroup){MPI_COMM_NULL, 0, 0, 0, 0, "world"};
  FSDP_CALL_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &g->comm));
  FSDP_CALL_MPI(MPI_Comm_size(g->comm, &g->size));
  FSDP_CALL_MPI(MPI_Comm_rank(g->comm, &g->rank));
  return FSDP_SUCCESS;
}

/* ---- compute ---------------------------------------------------------- */

typedef struct {
  const FsdpKernelOps *k;
  float *a, *b, *c, *d, *e; /* scratch, each max_elems */
  size_t max_elems;
  FsdpAttention attention; /* -attention: the kernels the run would use */
} Scratch;

/* n floats in each of the first nbufs (2-5) of a..e: a and b inputs of
 * moderate size, so no kernel meets denormals or infinities, the rest
 * zeros.  ScratchFree also after a failure. */
static int ScratchCreate(Scratch *s, int nbufs, size_t n, FsdpAttention attention)
{
  *s = (Scratch){FsdpKernelsCpu(), NULL, NULL, NULL, NULL, NULL, n, attention};
  float **bufs[5] = {&s->a, &s->b, &s->c, &s->d, &s->e};
  for (int i = 0; i < nbufs; i++) {
    FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, n * sizeof(float), bufs[i]));
    for (size_t j = 0; j < n; j++) {
      float x = (float)((j * 2654435761u) % 1000) * 1e-3f - 0.5f;
      (*bufs[i])[j] = i == 0 ? x : i == 1 ? 0.5f * x : 0.0f;
    }
  }
  return FSDP_SUCCESS;
}

static void ScratchFree(Scratch *s)
{
  float **bufs[5] = {&s->a, &s->b, &s->c, &s->d, &s->e};
  for (int i = 0; i < 5; i++) FsdpFree(bufs[i]);
}

/* Median seconds of reps calls of fn(ctx) on every rank at once (a
 * barrier before each, so ranks contend as in a step), slowest rank. */
typedef void (*ComputeFn)(const Scratch *s, const int64_t *shape);

static int TimeCompute(const Scratch *s, ComputeFn fn, const int64_t *shape, int reps, double *sec)
{
  double *t = malloc((size_t)reps * sizeof *t);
  FSDP_CHECK_ALLOC(t, (size_t)reps * sizeof *t);
  fn(s, shape); /* warm-up: page faults, BLAS buffers */
  for (int r = 0; r < reps; r++) {
    FSDP_CALL_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = MPI_Wtime();
    fn(s, shape);
    t[r] = MPI_Wtime() - t0;
  }
  *sec = Median(t, reps);
  free(t);
  return WorldMax(sec);
}

static void GemmFwdBwd(const Scratch *s, const int64_t *sh)
{
  int N = (int)sh[0], C = (int)sh[1], OC = (int)sh[2];
  /* a: inp (N,C), b: weight (OC,C), c: out / dout (N,OC), d: dinp, e: dweight */
  s->k->matmul_forward(s->c, s->a, s->b, NULL, N, C, OC);
  s->k->matmul_backward(s->d, s->e, NULL, s->c, s->a, s->b, N, C, OC);
}

static void AttentionFwdBwd(const Scratch *s, const int64_t *sh)
{
  int B = (int)sh[0], T = (int)sh[1], C = (int)sh[2], NH = (int)sh[3];
  size_t att = (size_t)B * NH * T * T;
  float *qkv = s->a, *out = s->b, *preatt = s->c, *attn = s->c + att;
  float *dqkv = s->d, *dpre = s->e, *datt = s->e + att;
  if (s->attention == FSDP_ATTENTION_FLASH) { /* lse in c, the row sums in e */
    s->k->flash_attention_forward(out, preatt, qkv, B, T, C, NH);
    s->k->flash_attention_backward(dqkv, dpre, out, qkv, out, preatt, B, T, C, NH);
    return;
  }
  s->k->attention_forward(out, preatt, attn, qkv, B, T, C, NH);
  s->k->attention_backward(dqkv, dpre, datt, out, qkv, attn, B, T, C, NH);
}

static void Stream(const Scratch *s, const int64_t *sh)
{
  s->k->residual_forward(s->c, s->a, s->b, (size_t)sh[0]);
}

static void AdamW(const Scratch *s, const int64_t *sh)
{
  s->k->adamw_update(s->a, s->b, s->c, s->d, (size_t)sh[0], 1e-12f, 0.9f, 0.95f, 1e-8f, 0.0f,
                     1.0f, 1);
}

/* The matmul shapes of the model: every 2-D parameter (OC, C) of its first
 * non-root unit (one block: the same shapes repeat in every block), and the
 * root's largest 2-D parameter as the head (the tied embedding or the
 * untied lm head), all with N = B*T rows. */
static int ModelGemms(const FsdpProbeOptions *po, FsdpProfile *p)
{
  FsdpModel m = NULL;
  int B = po->batch_size, T = (int)FsdpModelDescInt(po->model, "seq_len");
  FSDP_CALL(FsdpModelCreate(po->model, 1, B, T, FsdpKernelsCpu(), (uint64_t)po->seed, &m));
  const FsdpModelTable *tb = FsdpModelGetTable(m);
  const FsdpParamSpec *head = NULL;
  const char *head_unit = "";
  int block = -1;
  for (int u = 0; u < tb->nunits; u++) {
    const FsdpModelUnit *un = &tb->units[u];
    if (!un->is_root && block < 0) block = u;
    if (!un->is_root) continue;
    for (int i = 0; i < un->nparams; i++)
      if (un->params[i].ndim == 2 && (!head || un->params[i].shape[0] > head->shape[0])) {
        head = &un->params[i];
        head_unit = un->name;
      }
  }
  p->ngemm = 0;
  for (int pass = 0; pass < 2; pass++) {
    const FsdpModelUnit *un = pass == 0 && block >= 0 ? &tb->units[block] : NULL;
    int n = pass == 0 ? (un ? un->nparams : 0) : (head ? 1 : 0);
    for (int i = 0; i < n && p->ngemm < FSDP_PROFILE_MAX_GEMMS; i++) {
      const FsdpParamSpec *sp = pass == 0 ? &un->params[i] : head;
      if (sp->ndim != 2) continue;
      FsdpProfileGemm *g = &p->gemm[p->ngemm++];
      FsdpMsgf(g->name, sizeof g->name, "%s/%s", pass == 0 ? un->name : head_unit, sp->name);
      g->N = (int64_t)B * T;
      g->OC = sp->shape[0];
      g->C = sp->shape[1];
    }
  }
  FSDP_CALL(FsdpModelDestroy(&m));
  return FSDP_SUCCESS;
}

/* -probe_max_bytes 0: the curves reach the largest message a step moves,
 * the gather or reduce-scatter of the model's largest unit in fp32 (the
 * bandwidth is fitted on the large messages: [Note: the large-message
 * regime] in plan/profile.c), rounded up to the doubling series from
 * -probe_min_bytes, at least 1 MiB. */
static int ProbeMaxBytes(FsdpProbeOptions *po)
{
  if (po->max_bytes > 0) return FSDP_SUCCESS;
  FsdpModel m = NULL;
  int B = po->batch_size, T = (int)FsdpModelDescInt(po->model, "seq_len");
  FSDP_CALL(FsdpModelCreate(po->model, po->wrap, B, T, FsdpKernelsCpu(),
                            (uint64_t)po->seed, &m));
  const FsdpModelTable *tb = FsdpModelGetTable(m);
  double largest = 0;
  for (int u = 0; u < tb->nunits; u++) {
    double numel = 0;
    for (int i = 0; i < tb->units[u].nparams; i++) {
      const FsdpParamSpec *sp = &tb->units[u].params[i];
      double e = 1;
      for (int d = 0; d < sp->ndim; d++) e *= (double)sp->shape[d];
      numel += e;
    }
    if (numel > largest) largest = numel;
  }
  FSDP_CALL(FsdpModelDestroy(&m));
  double want = fmax(4.0 * largest, (double)(1 << 20));
  po->max_bytes = po->min_bytes;
  while ((double)po->max_bytes < want && po->max_bytes < ((int64_t)1 << 40)) po->max_bytes *= 2;
  return FSDP_SUCCESS;
}

/* The last-level cache's bytes, shared by the node's ranks (0: unknown). */
static size_t LastLevelCacheBytes(void)
{
  long v = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
  v = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  if (v > 0) return (size_t)v;
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  unsigned long n = 0;
  char unit = 0;
  if (f) {
    if (fscanf(f, "%lu%c", &n, &unit) < 1) n = 0;
    fclose(f);
  }
  return (size_t)n * (unit == 'K' ? 1024 : unit == 'M' ? 1048576 : 1);
}

/* [Note: AdamW from memory] The optimizer reads and writes each shard
 * element's parameter, gradient and two moments once per step, after a
 * forward and backward that streamed far more than the last-level cache
 * through it: in the run those bytes come from memory.  Timed on buffers
 * that fit in the cache, AdamW ran at 2x the run's rate (260 MiB of L3 on
 * the 2-core VM: predicted 5.7 ms for F 2, measured 10-12 ms), so the
 * probe times it on a working set of twice the cache, split among the
 * node's ranks (they update at once, as in the run). */
static int ProbeAdamW(const FsdpProfile *p, size_t need, int reps, double *bytes_per_s)
{
  int rank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  size_t llc = LastLevelCacheBytes(), rpn = p->ranks_per_node > 0 ? (size_t)p->ranks_per_node : 1;
  size_t n = llc ? 2 * llc / (16 * rpn) + 1 : (size_t)1 << 24;
  if (n < need) n = need;
  if (n > (size_t)1 << 27) n = (size_t)1 << 27;
  Scratch s;
  int err = ScratchCreate(&s, 4, n, FSDP_ATTENTION_NAIVE); /* parameter, gradient, moments */
  int64_t len = (int64_t)n;
  double sec = 0;
  if (!err) err = TimeCompute(&s, AdamW, &len, reps, &sec);
  *bytes_per_s = sec > 0 ? 28.0 * (double)n / sec : 0;
  ScratchFree(&s);
  if (!err && rank == 0)
    printf("  AdamW timed over %zu MiB per rank (last-level cache %zu MiB, %zu ranks per node)\n",
           16 * n >> 20, llc >> 20, rpn);
  return err;
}

static int ProbeCompute(const FsdpProbeOptions *po, FsdpProfile *p)
{
  FSDP_CALL(ModelGemms(po, p));
  const FsdpModelDesc *c = po->model;
  int64_t B = po->batch_size, T = FsdpModelDescInt(c, "seq_len"), C = FsdpModelDescInt(c, "n_embd"),
          NH = FsdpModelDescInt(c, "n_head");
  size_t need = (size_t)1 << 22;
  for (int i = 0; i < p->ngemm; i++) {
    size_t a = (size_t)(p->gemm[i].N * p->gemm[i].C), b = (size_t)(p->gemm[i].OC * p->gemm[i].C),
           o = (size_t)(p->gemm[i].N * p->gemm[i].OC);
    if (a > need) need = a;
    if (b > need) need = b;
    if (o > need) need = o;
  }
  size_t att = (size_t)(2 * B * NH * T * T), qkv = (size_t)(3 * B * T * C);
  if (att > need) need = att;
  if (qkv > need) need = qkv;
  Scratch s;
  int err = ScratchCreate(&s, 5, need, po->attention);
  for (int i = 0; !err && i < p->ngemm; i++) {
    FsdpProfileGemm *g = &p->gemm[i];
    int64_t sh[3] = {g->N, g->C, g->OC};
    double sec = 0;
    err = TimeCompute(&s, GemmFwdBwd, sh, po->reps, &sec);
    g->flops_per_s = sec > 0 ? 6.0 * (double)g->N * (double)g->C * (double)g->OC / sec : 0;
  }
  if (!err) {
    int64_t sh[4] = {B, T, C, NH};
    double sec = 0;
    err = TimeCompute(&s, AttentionFwdBwd, sh, po->reps, &sec);
    p->attention_flops_per_s = sec > 0 ? 12.0 * (double)B * (double)T * (double)T * (double)C / sec : 0;
  }
  /* the rate of all matmuls together, for shapes not measured */
  double flop = 0, sec = 0;
  for (int i = 0; !err && i < p->ngemm; i++) {
    double f = 6.0 * (double)p->gemm[i].N * (double)p->gemm[i].C * (double)p->gemm[i].OC;
    if (p->gemm[i].flops_per_s > 0) {
      flop += f;
      sec += f / p->gemm[i].flops_per_s;
    }
  }
  p->gemm_flops_per_s = sec > 0 ? flop / sec : 0;
  if (!err) {
    int64_t n = (int64_t)need;
    double sec = 0;
    err = TimeCompute(&s, Stream, &n, po->reps, &sec);
    p->stream_bytes_per_s = sec > 0 ? 12.0 * (double)n / sec : 0;
  }
  ScratchFree(&s);
  if (!err) err = ProbeAdamW(p, need, po->reps, &p->adamw_bytes_per_s);
  return err;
}

/* [Note: stages measured] The rates above leave out what has no rate of
 * its own in the plan's compute model (LayerNorm, GELU, softmax, the loss,
 * the encoder), and the GEMMs of a stage do not run back to back as the
 * probe runs them: on this project's CPU machine the modelled compute came
 * out 10-15% short of fsdp-train's.  So the probe also runs its model: one
 * full copy on every rank at once (contending as in a run), each stage's
 * forward then each backward in reverse, timed one by one; the median of
 * -probe_reps passes, the slowest rank.  fsdp-plan takes these times when
 * it plans the same model and sequence length (scaled by its micro-batch).
 * Skipped when the copy (parameters, gradients, activations) would take
 * more than half a rank's available memory. */
/* [Note: contended compute] (plan/steptime.h): the collective beside
 * the stages, on a stream thread as in a run: world all-reduces of the
 * model's largest unit (at most 16 MiB), one after another, until a rank
 * asks to stop.  Element 0 carries the ask (the mean over ranks, > 0 once
 * any rank set it), so every rank leaves after the same call. */
typedef struct {
  FsdpColl coll;
  const FsdpGroup *g;
  float *buf;
  size_t elems;
  atomic_int *stop;
  double *seconds; /* the calls' time, summed (read after the stream is synchronized) */
  int *calls;
} Beside;

static int BesideLoop(void *arg)
{
  const Beside *b = arg;
  for (;;) {
    b->buf[0] = atomic_load(b->stop) ? 1.0f : 0.0f;
    double t0 = MPI_Wtime();
    FSDP_CALL(FsdpCollAllReduce(b->coll, b->g, b->buf, b->elems, FSDP_DTYPE_FP32,
                                1.0f / (float)b->g->size));
    if (b->buf[0] > 0.0f) return FSDP_SUCCESS; /* the last call: the stages had ended */
    *b->seconds += MPI_Wtime() - t0;
    (*b->calls)++;
  }
}

typedef struct {
  FsdpStream stream;
  FsdpColl coll;
  FsdpGroup g;
  float *buf;
  size_t elems;
  atomic_int stop;
  double seconds;
  int calls;
} BesideState;

/* Elements of the collective beside the stages and of the two at once:
 * the model's largest unit (-probe_max_bytes 0 sizes it), at most 16 MiB */
static size_t LargeCollElems(const FsdpProbeOptions *po)
{
  int64_t cap = (int64_t)16 << 20;
  return (size_t)(po->max_bytes < cap ? po->max_bytes : cap) / 4;
}

static int BesideStart(const FsdpProbeOptions *po, BesideState *bs)
{
  memset(bs, 0, sizeof *bs);
  atomic_store(&bs->stop, 0);
  size_t elems = LargeCollElems(po);
  if (elems < 1024) elems = 1024;
  FSDP_CALL(WorldDup(&bs->g));
  FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, elems * sizeof(float), &bs->buf));
  for (size_t i = 0; i < elems; i++) bs->buf[i] = 1.0f;
  FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &bs->coll));
  FSDP_CALL(FsdpStreamCreate("probe-beside", 4, &bs->stream));
  bs->elems = elems;
  Beside arg = {bs->coll, &bs->g, bs->buf, elems, &bs->stop, &bs->seconds, &bs->calls};
  return FsdpStreamEnqueue(bs->stream, "all_reduce", BesideLoop, &arg, sizeof arg, NULL);
}

static int BesideStop(BesideState *bs)
{
  atomic_store(&bs->stop, 1);
  int err = bs->stream ? FsdpStreamSynchronize(bs->stream) : FSDP_SUCCESS;
  int e2 = FsdpStreamDestroy(&bs->stream);
  if (bs->coll) FsdpCollDestroy(&bs->coll);
  FsdpFree(&bs->buf);
  if (bs->g.comm != MPI_COMM_NULL) MPI_Comm_free(&bs->g.comm);
  return err ? err : e2;
}

/* [Note: joining a collective] (plan/steptime.h): after each stage, a
 * one-element all-reduce of the world on a stream thread of its own (its
 * own communicator, as the runtime's streams have), the compute thread
 * waiting for it as for an on-demand gather.  The wait is the time until
 * the last rank has finished the same stage and issued it, plus the
 * stream thread's wake-up: what every collective of a run waits before it
 * moves bytes. */
typedef struct {
  FsdpColl coll;
  const FsdpGroup *g;
  float *x;
} JoinArg;

static int JoinOnce(void *arg)
{
  const JoinArg *a = arg;
  return FsdpCollAllReduce(a->coll, a->g, a->x, 1, FSDP_DTYPE_FP32, 1.0f);
}

typedef struct {
  FsdpStream stream;
  FsdpColl coll;
  FsdpGroup g;
  float x;
  double lockstep;      /* the timed stages and the joins after them, summed */
} JoinState;

static int JoinStart(JoinState *js)
{
  memset(js, 0, sizeof *js);
  FSDP_CALL(WorldDup(&js->g));
  FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &js->coll));
  return FsdpStreamCreate("probe-join", 4, &js->stream);
}

/* One join after a stage of `stage_s` seconds; timed when `timed` */
static int JoinWait(JoinState *js, int timed, double stage_s)
{
  JoinArg a = {js->coll, &js->g, &js->x};
  FsdpEvent ev;
  double t0 = MPI_Wtime();
  FSDP_CALL(FsdpStreamEnqueue(js->stream, "all_reduce", JoinOnce, &a, sizeof a, &ev));
  FSDP_CALL(FsdpEventWait(ev));
  if (timed) js->lockstep += stage_s + (MPI_Wtime() - t0);
  return FSDP_SUCCESS;
}

static int JoinStop(JoinState *js)
{
  int err = js->stream ? FsdpStreamSynchronize(js->stream) : FSDP_SUCCESS;
  int e2 = FsdpStreamDestroy(&js->stream);
  if (js->coll) FsdpCollDestroy(&js->coll);
  if (js->g.comm != MPI_COMM_NULL) MPI_Comm_free(&js->g.comm);
  return err ? err : e2;
}

/* [Note: joining a collective] What the joins cost beyond the stages the
 * profile keeps.  The profile's stage times are the slowest rank's, so
 * the replay already runs at the slowest rank's pace; a join adds only
 * what lockstep costs beyond that: a stage whose slowest rank changes
 * from pass to pass (drift, a hiccup on either core), and the join's own
 * hand-off.  So: the time this rank spent from the first timed stage to
 * the last join (its stages plus its waits: the same on every rank, the
 * ranks meeting after each stage) over the sum of the slowest rank's
 * stage times, less 1; the mean over the ranks, 0 at the least.
 * [Note: lockstep against mean stage times] The stage times this is
 * held against are the passes' means, not their medians: the lockstep
 * is a sum over the same passes, so a pass that ran long on every rank
 * (a core lent to another guest, a CPU quota's throttled stretch, both
 * of which stop a rank for milliseconds at a time) is in both and is not
 * a join.  Held against medians, which leave such passes out, a machine
 * whose vCPUs ran about half the time read 0.98 with the ranks alike
 * (an AMD EPYC guest, issue 29), and 1.0-1.3 on this project's AMD
 * machine under a CPU quota of one core for the two ranks; against
 * means, 0.08-0.21 in the same runs (what is left: a rank throttled
 * while the other runs, which is drift;
 * bench/results/2026-12-06-steptime-validation-amd.md).  The replay
 * charges the fraction on every collective, so 0.98 doubled each wait.
 * (The waits over the rank's own stages, the first measure, took a core
 * slower than the other for drift: on one node the fast rank waited
 * 0.27 of every stage and the slow one 0.002, and the replay, already at
 * the slow rank's pace, charged the difference twice.)  t: the passes as
 * ProbeStagesAt lays them out. */
static int JoinFraction(const JoinState *js, double *t, int stride, int col, int ns, int reps,
                        double *fraction)
{
  double fwd[FSDP_PROFILE_MAX_STAGES], bwd[FSDP_PROFILE_MAX_STAGES], stages = 0.0;
  FSDP_CALL(StageTimes(t + col, stride, ns, reps, STAGE_MEAN, fwd, bwd));
  for (int i = 0; i < ns; i++) stages += fwd[i] + bwd[i];
  double f[2] = {0.0, 1.0};
  if (stages > 0) f[0] = js->lockstep / (reps * stages) - 1.0;
  if (f[0] < 0) f[0] = 0.0;
  FSDP_CALL_MPI(MPI_Allreduce(MPI_IN_PLACE, f, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  *fraction = f[0] / f[1];
  return FSDP_SUCCESS;
}

typedef enum {
  STAGES_ALONE,  /* nothing beside the stages */
  STAGES_BESIDE, /* [Note: contended compute]: a collective looping on a stream thread */
  STAGES_JOINED  /* [Note: joining a collective]: a join after each stage */
} StagesMode;

/* Every unit's parameters (initialized) and gradients (zero), one full
 * copy of the model on this rank, as the stages take them.  StageTensorsFree
 * also after a failure. */
typedef struct {
  FsdpUnitTensors *ut;
  float ***pv, ***gv; /* [unit][param] */
} StageTensors;

static int StageTensorsCreate(const FsdpModelTable *tb, StageTensors *s)
{
  int nu = tb->nunits, err = FSDP_SUCCESS;
  s->ut = calloc((size_t)nu, sizeof *s->ut);
  float ***pv = s->pv = calloc((size_t)nu, sizeof *pv), ***gv = s->gv = calloc((size_t)nu, sizeof *gv);
  if (!s->ut || !pv || !gv)
    return FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory timing stages");
  for (int u = 0; !err && u < nu; u++) {
    const FsdpModelUnit *un = &tb->units[u];
    pv[u] = calloc((size_t)un->nparams + 1, sizeof **pv);
    gv[u] = calloc((size_t)un->nparams + 1, sizeof **gv);
    if (!pv[u] || !gv[u]) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory timing stages");
      break;
    }
    for (int i = 0; !err && i < un->nparams; i++) {
      int64_t n = 1;
      for (int d = 0; d < un->params[i].ndim; d++) n *= un->params[i].shape[d];
      err = FsdpMalloc(FSDP_MEM_OTHER, (size_t)n * sizeof(float), &pv[u][i]);
      if (!err) err = FsdpMalloc(FSDP_MEM_OTHER, (size_t)n * sizeof(float), &gv[u][i]);
      if (!err) err = tb->init(tb->ctx, &un->params[i], 0, n, pv[u][i]);
      if (!err) memset(gv[u][i], 0, (size_t)n * sizeof(float));
    }
    s->ut[u] = (FsdpUnitTensors){u, pv[u], gv[u]};
  }
  return err;
}

static void StageTensorsFree(const FsdpModelTable *tb, StageTensors *s)
{
  for (int u = 0; u < tb->nunits && s->pv && s->gv; u++) {
    for (int i = 0; i < tb->units[u].nparams; i++) {
      if (s->pv[u]) FsdpFree(&s->pv[u][i]);
      if (s->gv[u]) FsdpFree(&s->gv[u][i]);
    }
    free(s->pv[u]);
    free(s->gv[u]);
  }
  free(s->ut);
  free(s->pv);
  free(s->gv);
}

/* The model at micro-batch B, `reps` passes of its stages (after a
 * warm-up pass) timed into t: stage st's forward of pass r at
 * t[st * stride + col + r], its backward at t[(ns + st) * stride + col + r]
 * (this rank's seconds); *ns their number (0: more than the profile holds,
 * not timed).  STAGES_BESIDE: *beside_s the collective's mean time (the
 * slowest rank's), *beside_bytes its volume; STAGES_JOINED: *beside_s the
 * join fraction (JoinFraction). */
static int ProbeStagesAt(const FsdpProbeOptions *po, int B, StagesMode mode, int reps, double *t,
                         int stride, int col, int *ns_out, double *beside_s, double *beside_bytes)
{
  const FsdpModelDesc *desc = po->model;
  int T = (int)FsdpModelDescInt(desc, "seq_len");
  FsdpModel m = NULL;
  *ns_out = 0;
  /* -wrap 1: one stage per block, the finest split (fsdp-plan adds up
   * the blocks of a wider unit) */
  FSDP_CALL(FsdpModelCreate(desc, 1, B, T, FsdpKernelsCpu(), (uint64_t)po->seed, &m));
  const FsdpModelTable *tb = FsdpModelGetTable(m);
  int ns = tb->nstages, err = FSDP_SUCCESS;
  if (ns > FSDP_PROFILE_MAX_STAGES) return FsdpModelDestroy(&m);
  StageTensors tensors;
  err = StageTensorsCreate(tb, &tensors);
  FsdpUnitTensors *ut = tensors.ut;
  int *tokens = malloc((size_t)B * T * 2 * sizeof *tokens);
  if (!err && !tokens)
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory timing stages");
  int64_t V = FsdpModelDescInt(desc, "vocab_size");
  for (int i = 0; !err && i < 2 * B * T; i++)
    tokens[i] = (int)(((uint64_t)i * 2654435761u) % (uint64_t)V);
  /* [Note: flash attention] the stages are timed with the kernels the run uses */
  if (!err) err = FsdpModelSetAttention(m, po->attention);
  if (!err) err = FsdpModelSetUp(m);
  if (!err) err = FsdpModelSetBatch(m, tokens, tokens + B * T);
  if (!err) FsdpModelSetLossScale(m, 1.0f);
  int beside = mode == STAGES_BESIDE, joined = mode == STAGES_JOINED;
  BesideState bs;
  memset(&bs, 0, sizeof bs);
  bs.g.comm = MPI_COMM_NULL;
  if (!err && beside) err = BesideStart(po, &bs);
  JoinState js;
  memset(&js, 0, sizeof js);
  js.g.comm = MPI_COMM_NULL;
  if (!err && joined) err = JoinStart(&js);
  /* a warm-up pass (page faults, BLAS buffers), then the timed ones */
  for (int r = -1; !err && r < reps; r++) {
    int e = MPI_Barrier(MPI_COMM_WORLD);
    if (e != MPI_SUCCESS) FSDP_CALL_MPI(e);
    for (int pass = 0; !err && pass < 2; pass++)
      for (int k = 0; !err && k < ns; k++) {
        int st = pass == 0 ? k : ns - 1 - k;
        const FsdpModelStage *sg = &tb->stages[st];
        double t0 = MPI_Wtime();
        err = (pass == 0 ? sg->forward : sg->backward)(tb->ctx, st, &ut[sg->unit]);
        double dt = MPI_Wtime() - t0;
        if (r >= 0) t[(size_t)(pass * ns + st) * stride + col + r] = dt;
        if (!err && joined) err = JoinWait(&js, r >= 0, dt);
      }
  }
  if (joined) {
    int e = JoinStop(&js);
    if (!err) err = e;
    if (!err) err = JoinFraction(&js, t, stride, col, ns, reps, beside_s);
  }
  if (beside) {
    int e = BesideStop(&bs);
    if (!err) err = e;
    /* [Note: contended compute] the all-reduce beside the stages: its mean
     * time (the slowest rank's) and the volume a rank received */
    double mean = bs.calls > 0 ? bs.seconds / bs.calls : 0.0;
    if (!err) err = WorldMax(&mean);
    uint64_t vol = 0, intra = 0, inter = 0;
    FsdpCollVolume(FSDP_COLL_ALL_REDUCE, &bs.g, bs.elems, 4, &vol, &intra, &inter);
    *beside_s = mean;
    *beside_bytes = (double)vol;
  }
  if (!err) *ns_out = ns;
  StageTensorsFree(tb, &tensors);
  free(tokens);
  int derr = FsdpModelDestroy(&m);
  return err ? err : derr;
}

/* [Note: sustained speed] The profile's times are medians (a stage's
 * typical time), which a shared machine's hiccups do not move.  But a
 * machine can also stop a rank for tens of milliseconds at a time, again
 * and again: a CPU quota (a cgroup's cpu.max) throttles it once its share
 * of a period is spent, and a hypervisor takes a guest's vCPU away (steal
 * time).  Most stages then run at full speed and some wait out a whole
 * stretch: the medians show the full speed, while a run of many steps
 * goes at the average, all of its work alike (compute, collectives,
 * AdamW).  The probe measures the ratio on the model's passes at the
 * largest micro-batch: the slowest rank's mean over its median, summed
 * over the stages (0.96-1.08 on this project's machines unthrottled,
 * 1.19-2.02 under a quota of one core for two ranks: lower where the
 * stretches fell on most passes and the medians show them themselves);
 * fsdp-plan multiplies every time of the profile by it (at least 1), so
 * that a prediction is of the speed the machine sustains; the probe
 * says why where it is 1.2 or more.  It
 * is what the join fraction had taken in before the join was held
 * against means ([Note: lockstep against mean stage times]). */

/* [Note: stages measured] at the run's micro-batch B and its divisors
 * (largest first, at most FSDP_PROFILE_MAX_STAGE_BATCHES): -tune's
 * candidates split B into micro-batches, and a stage of B/4 sequences
 * takes more than a quarter of the time of B (smaller GEMMs).
 * [Note: micro-batches timed in turn] -tune's choice between B x 1 and
 * B/2 x 2 rests on the ratio of two rows of stage times that differ by a
 * few percent (B/2 x 2 ran 0-5% slower than B x 1 on this project's CPU
 * machine), while a shared machine drifts by 10-30% over seconds (two
 * probes back to back: 349 and 465 ms for the same stages).  Timed one
 * micro-batch after the other, a disturbance that hit B's passes and not
 * B/2's made B/2 x 2 look 9% faster than B x 1, and -tune picked it (the
 * "per-micro-step cost" of issue 16, which traces showed was not there:
 * the time outside the stages does not grow with the micro-steps;
 * bench/results/2026-12-01-steptime-validation.md, "The per-micro-step
 * cost, traced").  So the passes are taken in rounds, one pass at every
 * micro-batch per round, the order rotating, and each micro-batch keeps
 * the median of its rounds: a drift lands on all of them alike.  (Each
 * round builds the models again: one copy at a time in memory, as before.) */
static int ProbeStages(const FsdpProbeOptions *po, FsdpProfile *p)
{
  const FsdpModelDesc *desc = po->model;
  int B = po->batch_size, T = (int)FsdpModelDescInt(desc, "seq_len");
  double need = 8.0 * (double)FsdpModelDescParamCount(desc) +
                (double)FsdpModelDescActivationBytes(desc, 1, B, T, 0, po->attention);
  int skip = need > 0.5 * (double)p->mem_available;
  FSDP_CALL_MPI(MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  p->nstages = p->nstage_batches = p->stage_rounds = 0;
  if (skip) return FSDP_SUCCESS;
  int nb = 0, bs[FSDP_PROFILE_MAX_STAGE_BATCHES];
  for (int b = B; b >= 1 && nb < FSDP_PROFILE_MAX_STAGE_BATCHES; b--)
    if (B % b == 0) bs[nb++] = b;
  int reps = po->reps, err = FSDP_SUCCESS, ns = -1;
  size_t per = (size_t)2 * FSDP_PROFILE_MAX_STAGES * (size_t)reps;
  double *t = calloc((size_t)nb * per, sizeof *t); /* a pass not timed stays 0 */
  FSDP_CHECK_ALLOC(t, (size_t)nb * per * sizeof *t);
  for (int r = 0; !err && r < reps && ns != 0; r++)
    for (int j = 0; !err && j < nb && ns != 0; j++) {
      int k = (j + r) % nb, n = 0;
      err = ProbeStagesAt(po, bs[k], STAGES_ALONE, 1, t + (size_t)k * per, reps, r, &n, NULL,
                          NULL);
      ns = n; /* the same model at every micro-batch: one stage count */
    }
  /* [Note: sustained speed] the largest micro-batch's means, before its
   * medians sort the passes */
  double mf[FSDP_PROFILE_MAX_STAGES], mb[FSDP_PROFILE_MAX_STAGES];
  if (!err && ns > 0) err = StageTimes(t, reps, ns, reps, STAGE_MEAN, mf, mb);
  for (int k = 0; !err && ns > 0 && k < nb; k++)
    err = StageMedians(t + (size_t)k * per, reps, ns, reps, p->stage_fwd_s[k], p->stage_bwd_s[k]);
  free(t);
  if (!err && ns > 0) {
    double mean = 0.0, median = 0.0;
    for (int i = 0; i < ns; i++) {
      mean += mf[i] + mb[i];
      median += p->stage_fwd_s[0][i] + p->stage_bwd_s[0][i];
    }
    p->sustained_factor = median > 0 ? mean / median : 0.0;
  }
  FSDP_CALL(err);
  if (ns <= 0) return FSDP_SUCCESS; /* more stages than a profile holds */
  p->nstages = ns;
  p->nstage_batches = nb;
  p->stage_rounds = reps;
  for (int k = 0; k < nb; k++) p->stage_batch[k] = bs[k];
  p->stage_seq_len = T;
  p->stage_params = FsdpModelDescParamCount(desc);
  /* [Note: contended compute] the largest micro-batch again, beside a
   * collective: the ratio of the sums (the slowest rank's each) */
  static double cf[FSDP_PROFILE_MAX_STAGES], cb[FSDP_PROFILE_MAX_STAGES];
  int world = 1;
  FSDP_CALL_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  t = malloc(per * sizeof *t);
  FSDP_CHECK_ALLOC(t, per * sizeof *t);
  int n = 0;
  err = ProbeStagesAt(po, bs[0], STAGES_BESIDE, reps, t, reps, 0, &n, &p->contended_allreduce_s,
                      &p->contended_allreduce_bytes);
  if (!err && n == ns) err = StageMedians(t, reps, ns, reps, cf, cb);
  /* [Note: joining a collective]: and with a join after each stage (a
   * world of one rank has nothing to join) */
  if (!err && world > 1)
    err = ProbeStagesAt(po, bs[0], STAGES_JOINED, reps, t, reps, 0, &n, &p->join_fraction, NULL);
  free(t);
  FSDP_CALL(err);
  double alone = 0, beside = 0;
  for (int i = 0; i < n && n == ns; i++) {
    alone += p->stage_fwd_s[0][i] + p->stage_bwd_s[0][i];
    beside += cf[i] + cb[i];
  }
  p->contended_factor = alone > 0 ? beside / alone : 0.0;
  return FSDP_SUCCESS;
}

/* ---- collectives ------------------------------------------------------ */

/* One call of kind on g moving a buffer of `elems` fp32 elements in all
 * (all-gather: received; reduce-scatter: sent; all-reduce: the buffer). */
static int CollOnce(FsdpColl coll, const FsdpGroup *g, FsdpCollKind kind, float *a, float *b,
                    size_t elems)
{
  size_t count = elems / (size_t)g->size;
  switch (kind) {
  case FSDP_COLL_ALL_GATHER:
    return FsdpCollAllGather(coll, g, a, b, count, FSDP_DTYPE_FP32);
  case FSDP_COLL_REDUCE_SCATTER:
    return FsdpCollReduceScatter(coll, g, a, b, count, FSDP_DTYPE_FP32, 1.0f);
  default:
    return FsdpCollAllReduce(coll, g, a, elems, FSDP_DTYPE_FP32, 1.0f);
  }
}

/* Every rank of world calls it, each with its own group of the level (the
 * groups of a level run at once).  Curve points: received volume per rank
 * against the median over reps of the slowest rank's time. */
static int ProbeLevel(const FsdpProbeOptions *po, FsdpColl coll, const FsdpGroup *g, FsdpCollKind kind,
                      float *a, float *b, FsdpProfileCurve *c)
{
  double *t = malloc((size_t)po->reps * sizeof *t);
  FSDP_CHECK_ALLOC(t, (size_t)po->reps * sizeof *t);
  c->n = 0;
  int err = FSDP_SUCCESS;
  for (int64_t bytes = po->min_bytes; !err && bytes <= po->max_bytes && c->n < FSDP_PROFILE_MAX_SIZES;
       bytes *= 2) {
    /* a whole number of elements per rank */
    size_t elems = (size_t)bytes / 4 / (size_t)g->size * (size_t)g->size;
    if (elems == 0) elems = (size_t)g->size;
    err = CollOnce(coll, g, kind, a, b, elems); /* warm-up */
    for (int r = 0; !err && r < po->reps; r++) {
      int e = MPI_Barrier(MPI_COMM_WORLD);
      if (e != MPI_SUCCESS) FSDP_CALL_MPI(e);
      double t0 = MPI_Wtime();
      err = CollOnce(coll, g, kind, a, b, elems);
      t[r] = MPI_Wtime() - t0;
      if (!err) err = WorldMax(&t[r]);
    }
    if (err) break;
    uint64_t vol = 0, intra = 0, inter = 0;
    FsdpCollVolume(kind, g, elems, 4, &vol, &intra, &inter);
    c->bytes[c->n] = (double)vol;
    c->seconds[c->n] = Median(t, po->reps);
    c->n++;
  }
  free(t);
  if (!err) FsdpProfileFit(c);
  return err;
}

/* [Note: two collectives at once] (plan/steptime.h): world
 * all-gathers of `elems` received elements on two stream threads, each
 * over its own duplicate of the world (as the runtime's gather and reduce
 * streams), issued together, against one alone on its stream; the median
 * over reps of the slowest rank's time, both over alone in *factor. */
typedef struct {
  FsdpColl coll;
  const FsdpGroup *g;
  const float *send;
  float *recv;
  size_t count;
} TwinArg;

static int TwinGather(void *arg)
{
  const TwinArg *a = arg;
  return FsdpCollAllGather(a->coll, a->g, a->send, a->recv, a->count, FSDP_DTYPE_FP32);
}

static int ProbeConcurrent(const FsdpProbeOptions *po, FsdpColl coll, const float *send, float *recv0,
                           float *recv1, size_t elems, double *factor)
{
  FsdpGroup g[2];
  FsdpStream st[2] = {NULL, NULL};
  double *t = malloc((size_t)2 * (size_t)po->reps * sizeof *t);
  FSDP_CHECK_ALLOC(t, (size_t)2 * (size_t)po->reps * sizeof *t);
  int err = FSDP_SUCCESS;
  for (int k = 0; k < 2; k++) g[k].comm = MPI_COMM_NULL;
  for (int k = 0; !err && k < 2; k++) {
    err = WorldDup(&g[k]);
    if (!err) err = FsdpStreamCreate(k ? "probe-twin-1" : "probe-twin-0", 4, &st[k]);
  }
  size_t count = err ? 0 : elems / (size_t)g[0].size;
  float *recv[2] = {recv0, recv1};
  /* r = -1: a warm-up of each; then both modes in turn, a repetition each */
  for (int r = -1; !err && r < po->reps; r++)
    for (int both = 0; !err && both < 2; both++) {
      FsdpEvent ev[2] = {FSDP_EVENT_NULL, FSDP_EVENT_NULL};
      if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) {
        err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MPI, "MPI_Barrier failed");
        break;
      }
      double t0 = MPI_Wtime();
      for (int k = 0; !err && k <= both; k++) {
        TwinArg a = {coll, &g[k], send, recv[k], count};
        err = FsdpStreamEnqueue(st[k], "all_gather", TwinGather, &a, sizeof a, &ev[k]);
      }
      for (int k = 0; k <= both; k++) {
        int e = FsdpEventWait(ev[k]);
        if (!err) err = e;
      }
      double dt = MPI_Wtime() - t0;
      if (!err) err = WorldMax(&dt);
      if (r >= 0) t[both * po->reps + r] = dt;
    }
  for (int k = 0; k < 2; k++) {
    int e = st[k] ? FsdpStreamDestroy(&st[k]) : FSDP_SUCCESS;
    if (!err) err = e;
    if (g[k].comm != MPI_COMM_NULL) MPI_Comm_free(&g[k].comm);
  }
  if (!err) {
    double alone = Median(t, po->reps), two = Median(t + po->reps, po->reps);
    *factor = alone > 0 ? two / alone : 0.0;
  }
  free(t);
  return err;
}

/* Collective on g.  g's peers on my node and elsewhere, from where its
 * members are (the volume split of [Note: byte accounting] needs them). */
static int CountPeers(FsdpTopo topo, FsdpGroup *g)
{
  int me = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  int *ranks = malloc((size_t)g->size * sizeof *ranks);
  FSDP_CHECK_ALLOC(ranks, (size_t)g->size * sizeof *ranks);
  int e = MPI_Allgather(&me, 1, MPI_INT, ranks, 1, MPI_INT, g->comm);
  if (e != MPI_SUCCESS) free(ranks);
  FSDP_CALL_MPI(e);
  g->peers_intra = g->peers_inter = 0;
  for (int i = 0; i < g->size; i++)
    if (ranks[i] != me)
      FsdpTopoNodeOfRank(topo, ranks[i]) == FsdpTopoNodeOfRank(topo, me) ? g->peers_intra++
                                                                          : g->peers_inter++;
  free(ranks);
  return FSDP_SUCCESS;
}

static int ProbeCollectives(const FsdpProbeOptions *po, FsdpTopo topo, FsdpProfile *p)
{
  const FsdpGroup *world = FsdpTopoWorld(topo), *node = FsdpTopoNode(topo);
  int N = FsdpTopoNumNodes(topo);
  /* the cross-node group: the ranks with my position in their node */
  FsdpGroup cross = {MPI_COMM_NULL, 0, 0, 0, 0, "cross-node"};
  FSDP_CALL_MPI(MPI_Comm_split(world->comm, node->rank, FsdpTopoNodeIndex(topo), &cross.comm));
  FSDP_CALL_MPI(MPI_Comm_size(cross.comm, &cross.size));
  FSDP_CALL_MPI(MPI_Comm_rank(cross.comm, &cross.rank));
  FSDP_CALL(CountPeers(topo, &cross));
  const FsdpGroup *groups[FSDP_PROFILE_NLEVELS] = {node, &cross, world};
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++) {
    p->level_peers_intra[l] = groups[l]->peers_intra;
    p->level_peers_inter[l] = groups[l]->peers_inter;
  }
  /* a level of one rank moves nothing; cross-node groups exist only with
   * several nodes, and are all alike only when every node has G ranks */
  p->level_size[FSDP_PROFILE_NODE] = node->size > 1 ? node->size : 0;
  p->level_size[FSDP_PROFILE_CROSS] = N > 1 ? cross.size : 0;
  p->level_size[FSDP_PROFILE_WORLD] = world->size > 1 ? world->size : 0;
  FsdpColl coll = NULL;
  float *a = NULL, *b = NULL;
  size_t elems = (size_t)(po->max_bytes / 4) + (size_t)world->size;
  int err = FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll);
  if (!err) err = FsdpMalloc(FSDP_MEM_OTHER, elems * sizeof(float), &a);
  if (!err) err = FsdpMalloc(FSDP_MEM_OTHER, elems * sizeof(float), &b);
  for (size_t i = 0; !err && i < elems; i++) a[i] = b[i] = 1.0f;
  for (int l = 0; !err && l < FSDP_PROFILE_NLEVELS; l++)
    for (int k = 0; !err && p->level_size[l] > 0 && k < FSDP_COLL_NKINDS; k++)
      err = ProbeLevel(po, coll, groups[l], (FsdpCollKind)k, a, b, &p->coll[l][k]);
  /* [Note: two collectives at once]: at the size of the collective beside
   * the stages (the model's largest unit, at most 16 MiB) */
  float *c = NULL;
  size_t twin = LargeCollElems(po) / (size_t)world->size * (size_t)world->size;
  if (!err && world->size > 1 && twin > 0) {
    err = FsdpMalloc(FSDP_MEM_OTHER, twin * sizeof(float), &c);
    if (!err) err = ProbeConcurrent(po, coll, a, b, c, twin, &p->concurrent_factor);
  }
  FsdpFree(&c);
  FsdpFree(&a);
  FsdpFree(&b);
  if (coll) FsdpCollDestroy(&coll);
  MPI_Comm_free(&cross.comm);
  return err;
}

/* ---- memory and identity ---------------------------------------------- */

/* MemAvailable of /proc/meminfo shared by the host_ranks ranks of my
 * host ([Note: nodes sharing a host]; at least my node's); the smallest
 * over ranks. */
static int ProbeMemory(FsdpTopo topo, int host_ranks, FsdpProfile *p)
{
  double avail = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    int share = host_ranks > FsdpTopoNode(topo)->size ? host_ranks : FsdpTopoNode(topo)->size;
    avail = (double)kb * 1024.0 / share;
  }
  FSDP_CALL_MPI(MPI_Allreduce(MPI_IN_PLACE, &avail, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
  p->mem_available = (int64_t)avail;
  return FSDP_SUCCESS;
}

static void ProbeIdentity(const FsdpProbeOptions *po, FsdpTopo topo, FsdpProfile *p)
{
  gethostname(p->host, sizeof p->host - 1);
  snprintf(p->cpu, sizeof p->cpu, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      char *colon = strchr(line, ':');
      if (strncmp(line, "model name", 10) == 0 && colon) {
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(p->cpu, sizeof p->cpu, "%s", colon);
        break;
      }
    }
    fclose(f);
  }
  time_t now = time(NULL);
  strftime(p->date, sizeof p->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  snprintf(p->backend, sizeof p->backend, "mpi");
  snprintf(p->source, sizeof p->source, "measured");
  snprintf(p->blas_core, sizeof p->blas_core, "%s", FsdpKernelsCpuBlasCore());
  snprintf(p->model, sizeof p->model, "%s", po->model_name);
  p->world_size = FsdpTopoWorld(topo)->size;
  p->ranks_per_node = FsdpTopoRanksPerNode(topo);
  p->nodes = FsdpTopoNumNodes(topo);
  p->threads = omp_get_max_threads();
  /* [Note: contended compute] the CPUs a node's ranks share (not the
   * rank's affinity mask: a bound rank sees one core) */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  p->cores_per_node = cores > 0 ? (int)cores : 0;
}

/* [Note: nodes sharing a host] Nodes of the topology that are one
 * machine: network namespaces or containers on one host (the emulated
 * cluster of tests/cluster/netcluster.sh), a node split with
 * -ranks_per_node.  Their ranks share the host's cores and memory, which
 * each rank counted as its node's: a profile of 2 emulated nodes of 1
 * rank on a 2-core host said 2 cores per node where each node had 1, and
 * fsdp-plan, seeing an idle core per node, charged no contention
 * (predictions 0.80-1.00 of measured;
 * bench/results/2026-12-02-steptime-validation.md).  The kernel's
 * boot id names the host (the same in every namespace, a different one on
 * every machine; where it cannot be read, the rank's node stands for its
 * host); *nodes: how many of the topology's nodes run on my host (the
 * topology knows every rank's node, so only the ids travel), *ranks: how
 * many ranks. */
static int HostShare(FsdpTopo topo, int *nodes, int *ranks)
{
  enum { kIdLen = 40 };
  char me[kIdLen] = {0};
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f || !fgets(me, sizeof me, f)) snprintf(me, sizeof me, "node %d", FsdpTopoNodeIndex(topo));
  if (f) fclose(f);
  me[strcspn(me, "\n")] = '\0';
  const FsdpGroup *world = FsdpTopoWorld(topo);
  int nn = FsdpTopoNumNodes(topo);
  char *ids = calloc((size_t)world->size, kIdLen);
  char *on_host = calloc((size_t)nn, 1); /* node n has a rank on my host */
  if (!ids || !on_host) {
    free(ids);
    free(on_host);
    FSDP_CHECK_ALLOC(NULL, (size_t)world->size * kIdLen + (size_t)nn);
  }
  int e = MPI_Allgather(me, kIdLen, MPI_CHAR, ids, kIdLen, MPI_CHAR, world->comm);
  *nodes = *ranks = 0;
  for (int r = 0; e == MPI_SUCCESS && r < world->size; r++) {
    if (strcmp(ids + (size_t)r * kIdLen, me) != 0) continue;
    (*ranks)++;
    int n = FsdpTopoNodeOfRank(topo, r);
    *nodes += !on_host[n];
    on_host[n] = 1;
  }
  free(ids);
  free(on_host);
  FSDP_CALL_MPI(e);
  return FSDP_SUCCESS;
}

/* [Note: contended compute] the fewest cores any rank's node has: its
 * host's, divided among the p->nodes_per_host nodes on it ([Note: nodes
 * sharing a host]). */
static int ProbeCores(FsdpProfile *p)
{
  if (p->nodes_per_host > 1 && p->cores_per_node > 0) {
    p->cores_per_node /= p->nodes_per_host;
    if (p->cores_per_node < 1) p->cores_per_node = 1;
  }
  FSDP_CALL_MPI(MPI_Allreduce(MPI_IN_PLACE, &p->cores_per_node, 1, MPI_INT, MPI_MIN,
                              MPI_COMM_WORLD));
  return FSDP_SUCCESS;
}

int FsdpProbeMachine(const FsdpProbeOptions *o, FsdpTopo topo, FsdpProfile *p)
{
  FsdpProbeOptions po = *o; /* -probe_max_bytes 0 is sized below */
  ProbeIdentity(&po, topo, p);
  int host_ranks = 0;
  FSDP_CALL(HostShare(topo, &p->nodes_per_host, &host_ranks));
  FSDP_CALL(ProbeCores(p));
  FSDP_CALL(ProbeMemory(topo, host_ranks, p));
  if (po.compute) FSDP_CALL(ProbeCompute(&po, p));
  FSDP_CALL(ProbeMaxBytes(&po)); /* the stages' collective beside takes its size */
  if (po.compute) FSDP_CALL(ProbeStages(&po, p));
  FSDP_CALL(ProbeCollectives(&po, topo, p));
  p->peak_flops_per_s = po.peak_flops;
  return FSDP_SUCCESS;
}
