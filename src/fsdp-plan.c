/* fsdp-plan: what an fsdp-train run will hold and move, computed, not run.
 *
 *   fsdp-plan -world_size 8 -ranks_per_node 4 -sharding_factor 4 -model gpt2
 *   fsdp-plan -world_size 512 -ranks_per_node 8 -model gpt-175b -summary json
 *   fsdp-plan -options_file run.opts -world_size 16 -inter_bw 12.5e9 -flops 1e14
 *
 * One process, no model allocated: it reads the same options as fsdp-train
 * (it calls the same option readers, so an options file of a run plans that
 * run), plus -world_size W and a few planning knobs, and prints per-rank
 * memory and per-step bytes of every collective split into intra- and
 * inter-node, with the same JSON keys as fsdp-train's -summary json where
 * they mean the same thing (written for both by driver/summary.c).
 *
 * [Note: planning from the library] The numbers come from the code that the
 * run itself uses, not from a second copy of the formulas: the model (any
 * family, model/family.h)
 * registers its units with an FSDP runtime exactly as in a run (names,
 * parameters, order); each unit's layout is a FlatParam built with the
 * run's F (so numel, padding and shard sizes are the run's); the bytes of
 * each collective are FsdpCollVolume of the same group shape the counters
 * use; the gather ring (slots, bytes, gathers in flight) is
 * FsdpGatherRingPlan, the function FsdpRuntimeSetUp sizes the ring with.
 * What the library does not expose as a pure function is re-stated
 * here and cited: the node-first rank order ([Note: node-first sharding
 * groups], topo.h), the gradient ring ([Note: gather memory], fsdp.h) and
 * which collectives a step issues ([Note: unit life cycle],
 * fsdp.h).  tests/test_plan.sh holds every number against the counters of
 * real fsdp-train runs, so a drift between the two is a test failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "driver/summary.h"
#include "driver/train.h"
#include "plan/steptime.h"

static const char kHelp[] =
    "fsdp-plan: per-rank memory and per-step collective bytes (intra/inter node) of\n"
    "an fsdp-train run, computed without running it (one process, nothing big\n"
    "allocated).  Takes fsdp-train's options plus -world_size W; with -flops and\n"
    "-intra_bw/-inter_bw it also predicts the step time.\n"
    "Usage: fsdp-plan -world_size W [-ranks_per_node G] [fsdp-train options]\n";

typedef struct {
  FsdpTrainOptions t;     /* everything fsdp-train reads */
  int W, G, F, R, N;      /* world, ranks per node, sharding, replicas, nodes */
  int rank;               /* the rank whose counters are planned */
  FsdpDtype param_dt, reduce_dt;
  double intra_bw, inter_bw, flops; /* bytes/s per rank, bytes/s per node, FLOP/s per rank */
  const char *profile;    /* -profile FILE: measured rates (fsdp-probe) */
  int schedule;           /* -plan_schedule: list the replayed step's events */
  int tune, tune_top;     /* -tune: search the options ([Note: the tuner]) */
  double memory_limit;    /* -memory_limit bytes per rank (0: 90% of the profile's) */
  const char *tune_options_out;/* -tune_options_out FILE: the winner as an options file */
} PlanOptions;

typedef struct {
  char name[64];
  int is_root;
  FsdpParamSpec *specs; /* owned */
  int nparams;
  FlatParam fp;
} PlanUnit;

/* Units of the model as the run registers them, each with a FlatParam for
 * the planned F (shard rank: my position in my sharding group). */
static int PlanUnits(const PlanOptions *po, int shard_rank, PlanUnit **out, int *nout,
                     int **stage_unit, int *nstages)
{
  *out = NULL;
  *nout = 0;
  *stage_unit = NULL;
  *nstages = 0;
  /* a runtime on a one-rank topology only records the registration: no
   * setup, nothing allocated */
  FsdpTopoOptions to = {0, 0, FSDP_PLACEMENT_BLOCK, 0};
  FsdpTopo topo = NULL;
  FsdpColl coll = NULL;
  FsdpRuntime rt = NULL;
  FsdpModel m = NULL;
  FSDP_CALL(FsdpTopoCreate(MPI_COMM_SELF, &to, &topo));
  FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll));
  FSDP_CALL(FsdpRuntimeCreate(topo, coll, &po->t.fsdp, &rt));
  FSDP_CALL(FsdpModelCreate(&po->t.model, po->t.wrap, po->t.batch_size,
                            (int)FsdpModelDescInt(&po->t.model, "seq_len"),
                           FsdpKernelsCpu(), (uint64_t)po->t.seed, &m));
  FSDP_CALL(FsdpRuntimeAddModel(rt, FsdpModelGetTable(m)));
  int n = FsdpRuntimeNumUnits(rt);
  PlanUnit *u = calloc((size_t)n, sizeof *u);
  FSDP_CHECK_ALLOC(u, (size_t)n * sizeof *u);
  for (int i = 0; i < n; i++) {
    PlanUnit *x = &u[i];
    snprintf(x->name, sizeof x->name, "%s", FsdpRuntimeUnitName(rt, i));
    x->is_root = FsdpRuntimeUnitIsRoot(rt, i);
    /* the specs the run registers, copied: the runtime goes below */
    const FsdpParamSpec *s = NULL;
    FSDP_CALL(FsdpRuntimeUnitSpecs(rt, i, &s, &x->nparams));
    x->specs = malloc((size_t)x->nparams * sizeof *x->specs + 1);
    FSDP_CHECK_ALLOC(x->specs, (size_t)x->nparams * sizeof *x->specs);
    memcpy(x->specs, s, (size_t)x->nparams * sizeof *x->specs);
    FSDP_CALL(FlatParamCreate(x->specs, x->nparams, po->F, shard_rank, &x->fp));
  }
  /* the stages in forward order, for the step replay (runtime/steptime.h) */
  const FsdpModelTable *tb = FsdpModelGetTable(m);
  *stage_unit = malloc((size_t)tb->nstages * sizeof **stage_unit + 1);
  FSDP_CHECK_ALLOC(*stage_unit, (size_t)tb->nstages * sizeof **stage_unit);
  for (int i = 0; i < tb->nstages; i++) (*stage_unit)[i] = tb->stages[i].unit;
  *nstages = tb->nstages;
  FSDP_CALL(FsdpModelDestroy(&m));
  FSDP_CALL(FsdpRuntimeDestroy(&rt));
  FSDP_CALL(FsdpCollDestroy(&coll));
  FSDP_CALL(FsdpTopoDestroy(&topo));
  *out = u;
  *nout = n;
  return FSDP_SUCCESS;
}

static void PlanUnitsFree(PlanUnit *u, int n)
{
  for (int i = 0; i < n; i++) {
    FlatParamDestroy(&u[i].fp);
    free(u[i].specs);
  }
  free(u);
}

/* -tune plans thousands of candidates, most of them the same units (the
 * model, -wrap and F decide them; building gpt-175b's table and its
 * FlatParams is most of a plan's time): while on, the last units planned
 * are kept for the next plan with the same key.  Only Tune turns it on. */
static struct {
  int on, valid, wrap, B, F, shard_rank, recompute;
  PlanUnit *u;
  int nu, nstages;
  int *stage_unit;
} gUnits;

static void UnitsCacheClear(void)
{
  if (gUnits.valid) {
    PlanUnitsFree(gUnits.u, gUnits.nu);
    free(gUnits.stage_unit);
  }
  gUnits.valid = 0;
}

/* PlanUnits through the cache; *owned: the caller frees them. */
static int PlanUnitsCached(const PlanOptions *po, int shard_rank, PlanUnit **u, int *nu,
                           int **stage_unit, int *nstages, int *owned)
{
  *owned = !gUnits.on;
  if (!gUnits.on) return PlanUnits(po, shard_rank, u, nu, stage_unit, nstages);
  if (!gUnits.valid || gUnits.wrap != po->t.wrap || gUnits.B != po->t.batch_size ||
      gUnits.F != po->F || gUnits.shard_rank != shard_rank ||
      gUnits.recompute != po->t.fsdp.recompute) {
    UnitsCacheClear();
    FSDP_CALL(PlanUnits(po, shard_rank, &gUnits.u, &gUnits.nu, &gUnits.stage_unit,
                        &gUnits.nstages));
    gUnits.valid = 1;
    gUnits.wrap = po->t.wrap;
    gUnits.B = po->t.batch_size;
    gUnits.F = po->F;
    gUnits.shard_rank = shard_rank;
    gUnits.recompute = po->t.fsdp.recompute;
  }
  *u = gUnits.u;
  *nu = gUnits.nu;
  *stage_unit = gUnits.stage_unit;
  *nstages = gUnits.nstages;
  return FSDP_SUCCESS;
}

/* My sharding and replica groups as FsdpGroup shapes (size, rank, peers on
 * my node and elsewhere): [Note: node-first sharding groups] in topo.h,
 * with nodes numbered by their smallest world rank. */
static int PlanGroups(const PlanOptions *po, FsdpGroup *shard, FsdpGroup *replica)
{
  int W = po->W, G = po->G, F = po->F, N = po->N;
  int *node_of = malloc((size_t)W * sizeof *node_of), *order = malloc((size_t)W * sizeof *order);
  if (!node_of || !order) {
    free(node_of);
    FSDP_CHECK_ALLOC(NULL, 2 * (size_t)W * sizeof(int));
  }
  for (int r = 0; r < W; r++)
    node_of[r] = po->t.topo.placement == FSDP_PLACEMENT_CYCLIC ? r % N : r / G;
  int k = 0;
  for (int n = 0; n < N; n++)
    for (int r = 0; r < W; r++)
      if (node_of[r] == n) order[k++] = r;
  int pos = 0;
  for (int p = 0; p < W; p++)
    if (order[p] == po->rank) pos = p;
  int me = po->rank, sidx = pos / F, spos = pos % F;
  memset(shard, 0, sizeof *shard);
  memset(replica, 0, sizeof *replica);
  shard->comm = replica->comm = MPI_COMM_NULL;
  shard->name = "sharding";
  replica->name = "replica";
  shard->size = F;
  shard->rank = spos;
  replica->size = po->R;
  replica->rank = sidx;
  for (int j = 0; j < F; j++) {
    int r = order[sidx * F + j];
    if (r != me) node_of[r] == node_of[me] ? shard->peers_intra++ : shard->peers_inter++;
  }
  for (int j = 0; j < po->R; j++) {
    int r = order[j * F + spos];
    if (r != me) node_of[r] == node_of[me] ? replica->peers_intra++ : replica->peers_inter++;
  }
  free(node_of);
  free(order);
  return FSDP_SUCCESS;
}

static int PlanOptionsFromDb(FsdpOpts db, PlanOptions *po)
{
  memset(po, 0, sizeof *po);
  int64_t v;
  const char *g = "Plan";
  FSDP_CALL(FsdpTrainOptionsFromDb(db, &po->t));
  FSDP_CALL(FsdpOptsGetInt(db, g, "world_size", "ranks W of the planned run", 4, 1, 1 << 24, &v));
  po->W = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, g, "plan_rank", "world rank whose counters are planned (they equal "
                           "every rank's when the groups are alike)", 0, 0, 1 << 24, &v));
  po->rank = (int)v;
  po->param_dt = po->t.fsdp.param_dtype;
  po->reduce_dt = po->t.fsdp.reduce_dtype;
  FSDP_CALL(FsdpOptsGetDouble(db, g, "intra_bw",
                              "bandwidth (bytes/s) at which a rank receives from peers on its node "
                              "(0 = no time prediction)",
                              0, 0, 1e18, &po->intra_bw));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "inter_bw", "bandwidth in bytes/s of a node's link to the "
                              "other nodes, shared by its G ranks (0 = no time prediction)", 0, 0,
                              1e18, &po->inter_bw));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "flops", "sustained compute rate of one rank in FLOP/s "
                              "(0 = no time prediction)", 0, 0, 1e21, &po->flops));
  FSDP_CALL(FsdpOptsGetString(db, g, "profile", "machine profile written by fsdp-probe "
                              "-profile_out: predict the step time from its measured rates "
                              "(instead of -flops, -intra_bw, -inter_bw)", "", &po->profile));
  FSDP_CALL(FsdpOptsGetBool(db, g, "plan_schedule", "with -profile and -summary json: list the "
                            "replayed step's events (gathers, stages, reductions) in order", 0,
                            &po->schedule));
  int64_t top = 5;
  FSDP_CALL(FsdpOptsGetBool(db, g, "tune", "with -profile: search sharding factor, -wrap, "
                            "-prefetch, RAF/NRAF, -recompute and micro-batch x accumulation for the most "
                            "predicted tokens/s within -memory_limit", 0, &po->tune));
  FSDP_CALL(FsdpOptsGetInt(db, g, "tune_top", "-tune: candidates to list", 5, 1, 1000000, &top));
  po->tune_top = (int)top;
  FSDP_CALL(FsdpOptsGetDouble(db, g, "memory_limit", "-tune: bytes a rank may use (0: 90% of the "
                              "profile's available memory)", 0, 0, 1e18, &po->memory_limit));
  FSDP_CALL(FsdpOptsGetString(db, g, "tune_options_out", "-tune: write the winning options to FILE "
                              "(an options file for fsdp-train -options_file)", "",
                              &po->tune_options_out));
  return FSDP_SUCCESS;
}

/* Check and complete the topology as FsdpTopoCreate would (its checks). */
static int PlanTopology(PlanOptions *po)
{
  int W = po->W;
  int F = po->t.topo.sharding_factor, G = po->t.topo.ranks_per_node;
  FSDP_CALL(FsdpTopoCheckOptions(W, &po->t.topo));
  if (po->rank >= W)
    FSDP_ERROR(FSDP_ERR_USAGE, "-plan_rank %d is not a rank of the world size %d", po->rank, W);
  po->F = F ? F : W;
  po->G = G ? G : W; /* nothing to detect: one node unless told */
  po->R = W / po->F;
  po->N = W / po->G;
  return FSDP_SUCCESS;
}

typedef struct {
  uint64_t bytes[FSDP_COLL_NKINDS], intra[FSDP_COLL_NKINDS], inter[FSDP_COLL_NKINDS];
  uint64_t calls[FSDP_COLL_NKINDS];
} PlanComm;

static void AddVolume(PlanComm *c, FsdpCollKind kind, const FsdpGroup *g, int64_t elems,
                      FsdpDtype dt, uint64_t times)
{
  uint64_t b = 0, i = 0, e = 0;
  FsdpCollVolume(kind, g, (size_t)elems, FsdpDtypeSize(dt), &b, &i, &e);
  c->bytes[kind] += times * b;
  c->intra[kind] += times * i;
  c->inter[kind] += times * e;
  c->calls[kind] += times;
}

typedef struct {
  uint64_t param_shard, grad_shard, low_shard, optim_state, gather_buffer, compute_buffer,
      grad_buffer, activations, bf16_scratch;
  int gather_slots, grad_slots;
} PlanMemory;

/* With -compute_dtype bf16 the matmuls keep their rounded operands in
 * three scratch buffers, each grown to its largest use ([Note: two bf16
 * GEMM paths] in kernels/cpu/matmul_bf16.c; the same three on CUDA,
 * kernels/cuda/matmul.cu): inp or dout, weight, inp again; 2 bytes an
 * element through oneDNN and on CUDA, 4 converting.  The model's matmul
 * shapes (in, out) come from its family. */
static uint64_t PlanBf16ScratchBytes(const FsdpModelDesc *d, int B, int T, int onednn)
{
  uint64_t N = (uint64_t)B * T;
  int64_t shape[FSDP_MODEL_MAX_MATMULS][2];
  int ns = FsdpModelDescMatmulShapes(d, shape, FSDP_MODEL_MAX_MATMULS);
  uint64_t slot[3] = {0, 0, 0};
  for (int k = 0; k < ns; k++) {
    uint64_t in = (uint64_t)shape[k][0], oc = (uint64_t)shape[k][1];
    uint64_t s0 = N * (in > oc ? in : oc);
    if (s0 > slot[0]) slot[0] = s0;
    if (oc * in > slot[1]) slot[1] = oc * in;
    if (N * in > slot[2]) slot[2] = N * in;
  }
  return (slot[0] + slot[1] + slot[2]) * (onednn ? 2 : 4);
}

/* ---- prediction from a measured profile (fsdp-probe) -------------------- */

/* A profile answers for this plan only if it was measured on the same
 * back-end, with the plan's ranks per node, and on at least as many nodes
 * (the cross-node curves of 2 nodes say nothing of 64). */
static int CheckProfile(const PlanOptions *po, const FsdpProfile *p)
{
  const char *want = po->t.device_cuda ? "nccl" : "mpi";
  if (strcmp(p->backend, want) != 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s was measured with the %s back-end but this plan "
               "runs on %s (-device %s): measure with fsdp-probe on the run's device",
               po->profile, p->backend, want, po->t.device_cuda ? "cuda" : "cpu");
  if (p->ranks_per_node != po->G)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s was measured with %d ranks per node but the plan has "
               "%d (-ranks_per_node): node-level rates depend on it; measure again", po->profile,
               p->ranks_per_node, po->G);
  if (p->nodes < po->N)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s was measured on %d node(s) but the plan spans %d: "
               "measure on at least as many nodes as the run uses", po->profile, p->nodes, po->N);
  return FSDP_SUCCESS;
}

/* The gemm rate measured for a (C, OC) weight, else the profile's rate
 * for all its matmuls (a shape the probe's model did not have, or a
 * described profile). */
static double GemmRate(const FsdpProfile *p, int64_t C, int64_t OC)
{
  for (int i = 0; i < p->ngemm; i++)
    if (p->gemm[i].C == C && p->gemm[i].OC == OC) return p->gemm[i].flops_per_s;
  return p->gemm_flops_per_s;
}

typedef struct {
  double compute_s, gemm_s, attention_s, memory_s, optimizer_s;
  double recompute_s; /* -recompute 1: the blocks' forward again, in backward */
  int stages_measured; /* stage times from the profile's run of this model */
  double coll_s[FSDP_COLL_NKINDS];
  FsdpStepTimeResult sim; /* the schedule replayed (runtime/steptime.h) */
  FsdpStepEvent *events;  /* its events, with -plan_schedule */
  int nevents;
  double peak;            /* the profile's peak FLOP/s of a rank (0: unknown) */
  double contended;       /* [Note: contended compute] factor charged (1: none) */
  double contended_comm;  /* and the collectives' beside compute */
  const char *contended_why; /* why that factor */
  double join_fraction;   /* [Note: joining a collective] charged */
  double sustained;       /* [Note: sustained speed] factor charged (1: none) */
  double concurrent;      /* [Note: two collectives at once] factor charged (1: none) */
} ProfilePrediction;

/* [Note: the optimizer's bytes] What a step does per shard element outside
 * the stages, at the profile's AdamW rate (measured from memory, [Note:
 * AdamW from memory] in fsdp-probe.c): AdamW reads the parameter, gradient
 * and both moments and writes three of them back (28 bytes); the gradient
 * norm reads the gradient again (4; every step, for -grad_clip and the
 * log); the step's start zeroes the gradient shard (a 4-byte store that
 * first reads its line: 8).  A unit's share in the gradient tail is its
 * AdamW and its part of the norm. */
static const double kCheckBytes = 4.0, kOptimizerBytes = 28.0 + kCheckBytes + 8.0,
                    kTailBytes = 28.0 + kCheckBytes;
/* UnitAcquireGrad zeroes each unit's unsharded gradient buffer before its
 * backward (fsdp.c; F > 1, or a persistent -accum_comm 0 buffer): 8 bytes
 * per element of the unit, as the shard's zeroing above */
static const double kZeroBytes = 8.0;

/* [Note: contended compute] (runtime/steptime.h): the profile's factor
 * where the plan's ranks fill a node's cores (G ranks x the profile's
 * threads per rank >= its cores per node), else 1; *why says which. */
static double ContendedFactor(const PlanOptions *po, const FsdpProfile *p, const char **why)
{
  if (!(p->contended_factor > 0)) {
    *why = "not in the profile (a described one, or from an fsdp-probe before it): 1";
    return 1.0;
  }
  int threads = p->threads > 0 ? p->threads : 1;
  if (p->cores_per_node <= 0 || (int64_t)po->G * threads < p->cores_per_node) {
    *why = "an idle core per node takes the communication threads: 1";
    return 1.0;
  }
  *why = "measured; the ranks' threads fill the node's cores";
  return p->contended_factor > 1.0 ? p->contended_factor : 1.0;
}

/* The other side (runtime/steptime.h): the all-reduce the probe ran beside
 * the stages against the world all-reduce curve alone, where
 * ContendedFactor applies (> 1); else 1. */
static double ContendedCommFactor(const PlanOptions *po, const FsdpProfile *p)
{
  const char *why;
  const FsdpProfileCurve *c = &p->coll[FSDP_PROFILE_WORLD][FSDP_COLL_ALL_REDUCE];
  if (ContendedFactor(po, p, &why) <= 1.0 || !(p->contended_allreduce_s > 0) ||
      p->level_size[FSDP_PROFILE_WORLD] == 0 || c->n == 0)
    return 1.0;
  double alone = FsdpProfileCurveSeconds(c, p->contended_allreduce_bytes);
  double f = alone > 0 ? p->contended_allreduce_s / alone : 1.0;
  return f > 1.0 ? f : 1.0;
}

/* Seconds of traffic on group g, split into the intra-node part
 * (intra-node bytes at the node level's bandwidth) and the inter-node part
 * (inter-node bytes at the cross-node level's, measured with the node's
 * link shared by its G ranks, as in a run); each call adds one latency,
 * the cross-node level's when g leaves the node (to the inter-node part),
 * else the node level's. */
static void CollSeconds(const FsdpProfile *p, FsdpCollKind k, const FsdpGroup *g, uint64_t calls,
                        uint64_t intra, uint64_t inter, double *t_intra, double *t_inter)
{
  const FsdpProfileCurve *node = &p->coll[FSDP_PROFILE_NODE][k];
  const FsdpProfileCurve *cross = &p->coll[FSDP_PROFILE_CROSS][k];
  *t_intra = intra && node->bandwidth > 0 ? (double)intra / node->bandwidth : 0.0;
  *t_inter = inter && cross->bandwidth > 0 ? (double)inter / cross->bandwidth : 0.0;
  if (g->peers_inter > 0) *t_inter += (double)calls * cross->latency_s;
  else *t_intra += (double)calls * node->latency_s;
}

/* Seconds of one call of kind on g over elems elements of dt.  A group
 * that is one of the profile's measured levels with members on several
 * nodes (the world, by size and by where its members are) takes that
 * level's curve for its whole volume: the curve is this very collective,
 * whatever algorithm it runs (a ring crosses the network on fewer edges
 * than the intra/inter split assumes: on 2 emulated nodes x 2 at 1 Gbit/s
 * the split put a world all-reduce at 2.2x its measured time); other
 * groups are split into their intra- and inter-node volumes
 * (CollSeconds). */
static double CallSeconds(const FsdpProfile *p, FsdpCollKind k, const FsdpGroup *g, int64_t elems,
                          FsdpDtype dt)
{
  if (g->size <= 1) return 0.0;
  uint64_t b = 0, i = 0, e = 0;
  FsdpCollVolume(k, g, (size_t)elems, FsdpDtypeSize(dt), &b, &i, &e);
  const int W = FSDP_PROFILE_WORLD;
  if (g->peers_inter > 0 && p->level_size[W] == g->size && p->level_peers_inter[W] == g->peers_inter &&
      p->level_peers_intra[W] == g->peers_intra && p->coll[W][k].n > 0)
    return FsdpProfileCurveSeconds(&p->coll[W][k], (double)b);
  double a = 0, x = 0;
  CollSeconds(p, k, g, 1, i, e, &a, &x);
  return a + x;
}

/* The step predicted from a profile.  Compute per unit and micro-step:
 * every 2-D parameter of a non-root unit is a matmul weight (6 N C OC FLOP
 * forward and backward, N = B T), the root's largest 2-D parameter is the
 * head; causal attention (12 B T^2 C per block) and the memory-bound
 * passes (the step's activations moved three times: written in forward,
 * read and their gradients written in backward, at the streaming rate) are
 * shared among the non-root units by size (exact for equal blocks).  A
 * unit's compute is split evenly over its stages (the root's all on its
 * last forward stage, the head), a third forward and two thirds backward.
 * AdamW moves 28 bytes per shard element.  Each unit's gather and
 * reduction take CallSeconds on the run's groups; FsdpStepTimeSimulate
 * replays the schedule over them. */
static int PredictFromProfile(const PlanOptions *po, const FsdpProfile *p, const PlanUnit *u, int nu,
                              const int *stage_unit, int nstages, const FsdpGroup *shard,
                              const FsdpGroup *replica, uint64_t activation_bytes,
                              uint64_t shard_elems, int gather_slots, int grad_slots,
                              int want_events, ProfilePrediction *out)
{
  const FsdpModelDesc *md = &po->t.model;
  double seq_len = (double)FsdpModelDescInt(md, "seq_len");
  double N = (double)po->t.batch_size * seq_len;
  int K = po->t.fsdp.grad_accum > 0 ? po->t.fsdp.grad_accum : 1;
  double *unit_s = calloc((size_t)nu, sizeof *unit_s), *gather_s = calloc((size_t)nu, sizeof *gather_s);
  double *reduce_s = calloc((size_t)nu, sizeof *reduce_s);
  double *optim_unit_s = calloc((size_t)nu, sizeof *optim_unit_s);
  double *check_unit_s = calloc((size_t)nu, sizeof *check_unit_s);
  double *zero_unit_s = calloc((size_t)nu, sizeof *zero_unit_s);
  double *fwd_s = calloc((size_t)nstages + 1, sizeof *fwd_s), *bwd_s = calloc((size_t)nstages + 1, sizeof *bwd_s);
  int *nst = calloc((size_t)nu, sizeof *nst), *last = calloc((size_t)nu, sizeof *last);
  int *is_root = calloc((size_t)nu, sizeof *is_root);
  int err = FSDP_SUCCESS;
  if (!unit_s || !gather_s || !reduce_s || !optim_unit_s || !check_unit_s || !zero_unit_s || !fwd_s ||
      !bwd_s || !nst || !last || !is_root) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory predicting a step");
    goto done;
  }
  double attention = p->attention_flops_per_s > 0
                         ? (double)FsdpModelDescInt(md, "n_layer") * 12.0 * N * seq_len *
                               (double)FsdpModelDescInt(md, "n_embd") / p->attention_flops_per_s
                         : 0.0;
  double memory = p->stream_bytes_per_s > 0 ? 3.0 * (double)activation_bytes / p->stream_bytes_per_s : 0.0;
  double nonroot_P = 0;
  for (int i = 0; i < nu; i++)
    if (!u[i].is_root) nonroot_P += (double)FlatParamNumel(u[i].fp);
  for (int i = 0; i < nu; i++) {
    const FsdpParamSpec *head = NULL;
    double gemm = 0;
    for (int j = 0; j < u[i].nparams; j++) {
      const FsdpParamSpec *sp = &u[i].specs[j];
      if (sp->ndim != 2) continue;
      if (u[i].is_root) {
        if (!head || sp->shape[0] > head->shape[0]) head = sp;
        continue;
      }
      double r = GemmRate(p, sp->shape[1], sp->shape[0]);
      if (r > 0) gemm += 6.0 * N * (double)sp->shape[0] * (double)sp->shape[1] / r;
    }
    if (head) {
      double r = GemmRate(p, head->shape[1], head->shape[0]);
      if (r > 0) gemm += 6.0 * N * (double)head->shape[0] * (double)head->shape[1] / r;
    }
    double share = !u[i].is_root && nonroot_P > 0 ? (double)FlatParamNumel(u[i].fp) / nonroot_P : 0;
    unit_s[i] = gemm + share * (attention + memory);
    out->gemm_s += gemm;
    is_root[i] = u[i].is_root;
    int64_t P = FlatParamPaddedNumel(u[i].fp), S = FlatParamShardNumel(u[i].fp);
    if (p->adamw_bytes_per_s > 0) {
      optim_unit_s[i] = kTailBytes * (double)S / p->adamw_bytes_per_s;
      check_unit_s[i] = kCheckBytes * (double)S / p->adamw_bytes_per_s;
      zero_unit_s[i] = kZeroBytes * (double)P / p->adamw_bytes_per_s;
    }
    if (po->F > 1) {
      gather_s[i] = CallSeconds(p, FSDP_COLL_ALL_GATHER, shard, P, po->param_dt);
      reduce_s[i] = CallSeconds(p, FSDP_COLL_REDUCE_SCATTER, shard, P, po->reduce_dt) +
                    CallSeconds(p, FSDP_COLL_ALL_REDUCE, replica, S, po->reduce_dt);
    } else {
      reduce_s[i] = CallSeconds(p, FSDP_COLL_ALL_REDUCE, replica, P, po->reduce_dt);
    }
  }
  out->attention_s = attention;
  out->memory_s = memory;
  for (int st = 0; st < nstages; st++) {
    nst[stage_unit[st]]++;
    last[stage_unit[st]] = st;
  }
  for (int st = 0; st < nstages; st++) {
    int i = stage_unit[st];
    double t = u[i].is_root ? (st == last[i] ? unit_s[i] : 0.0) : unit_s[i] / nst[i];
    fwd_s[st] = t / 3.0;
    bwd_s[st] = 2.0 * t / 3.0;
    /* [Note: activation recomputation] (fsdp.h): a non-root stage runs its
     * forward again right before its backward */
    if (po->t.fsdp.recompute && !u[i].is_root) {
      bwd_s[st] += fwd_s[st];
      out->recompute_s += fwd_s[st];
    }
  }
  /* [Note: stages measured] (fsdp-probe.c): the profile ran this model's
   * stages (same model, sequence length and stages); its times, scaled by
   * the micro-batch, replace the modelled ones */
  double measured_s = 0;
  /* the probe timed -wrap 1 (a stage per block); a plan stage of a unit of
   * w blocks is w consecutive measured ones, the root's stages map one to
   * one (at the front and the back) */
  int nroot = 0, first_block = -1;
  for (int st = 0; st < nstages; st++) {
    if (u[stage_unit[st]].is_root) nroot++;
    else if (first_block < 0) first_block = st;
  }
  int nblock_plan = nstages - nroot, nblock_meas = p->nstages - nroot;
  int w = nblock_plan > 0 && nblock_meas > 0 && nblock_meas % nblock_plan == 0
              ? nblock_meas / nblock_plan : 0;
  out->stages_measured = w > 0 && p->nstage_batches > 0 &&
                         strcmp(p->model, po->t.model_name) == 0 &&
                         p->stage_params == FsdpModelDescParamCount(md) &&
                         (double)p->stage_seq_len == seq_len;
  if (out->stages_measured) {
    /* the plan's micro-batch, else the nearest measured one scaled */
    int kb = 0;
    for (int k = 1; k < p->nstage_batches; k++)
      if (abs(p->stage_batch[k] - po->t.batch_size) < abs(p->stage_batch[kb] - po->t.batch_size))
        kb = k;
    double scale = (double)po->t.batch_size / (double)p->stage_batch[kb];
    out->recompute_s = 0;
    for (int st = 0, block = 0; st < nstages; st++) {
      int m0 = st, m1 = st + 1; /* measured stages [m0, m1) */
      if (!u[stage_unit[st]].is_root) {
        m0 = first_block + w * block++;
        m1 = m0 + w;
      } else if (st > first_block) {
        m0 = p->nstages - (nstages - st);
        m1 = m0 + 1;
      }
      fwd_s[st] = bwd_s[st] = 0;
      for (int m = m0; m < m1; m++) {
        fwd_s[st] += scale * p->stage_fwd_s[kb][m];
        bwd_s[st] += scale * p->stage_bwd_s[kb][m];
      }
      if (po->t.fsdp.recompute && !u[stage_unit[st]].is_root) {
        bwd_s[st] += fwd_s[st];
        out->recompute_s += fwd_s[st];
      }
      measured_s += fwd_s[st] + bwd_s[st];
    }
  }
  if (p->adamw_bytes_per_s > 0)
    out->optimizer_s = kOptimizerBytes * (double)shard_elems / p->adamw_bytes_per_s;
  out->gemm_s *= K;
  out->attention_s *= K;
  out->memory_s *= K;
  out->recompute_s *= K;
  out->compute_s = out->stages_measured
                       ? K * measured_s + out->optimizer_s
                       : out->gemm_s + out->attention_s + out->memory_s + out->optimizer_s +
                             out->recompute_s;
  FsdpStepTimeInput in = {&po->t.fsdp, po->F, po->R, nu, nstages, is_root, stage_unit, fwd_s,
                          bwd_s, gather_s, reduce_s, out->optimizer_s, gather_slots, grad_slots,
                          0, 0, NULL, 1.0, 1.0, 0.0, 1.0, NULL, NULL};
  out->contended = in.contended = ContendedFactor(po, p, &out->contended_why);
  out->contended_comm = in.comm_contended = ContendedCommFactor(po, p);
  /* [Note: joining a collective], [Note: two collectives at once]
   * (runtime/steptime.h): as measured (0 in a profile without them) */
  out->join_fraction = in.join_fraction = p->join_fraction;
  out->concurrent = in.concurrent = p->concurrent_factor > 1.0 ? p->concurrent_factor : 1.0;
  /* [Note: the gradient tail] (runtime/optim.c): AdamW per unit as the
   * reductions land when nothing gates it, in the unit's share of the
   * optimizer (its shard's elements) */
  in.tail = po->t.device_cuda ? FSDP_TAIL_NONE : po->t.optim_overlap; /* CPU only (train.c) */
  in.tail_early = !(po->t.optim.grad_clip > 0) && po->t.fsdp.param_dtype != FSDP_DTYPE_FP16 &&
                  po->t.fsdp.reduce_dtype != FSDP_DTYPE_FP16;
  in.optim_unit_s = optim_unit_s;
  in.check_unit_s = check_unit_s; /* the sums of squares, where AdamW waits for the last unit */
  in.zero_unit_s = zero_unit_s;
  int max_ev = want_events ? 8 * K * (nstages + nu) + 8 : 0;
  if (max_ev) {
    out->events = calloc((size_t)max_ev, sizeof *out->events);
    if (!out->events) max_ev = 0;
  }
  err = FsdpStepTimeSimulate(&in, &out->sim, out->events, max_ev, &out->nevents);
done:
  free(unit_s);
  free(gather_s);
  free(reduce_s);
  free(optim_unit_s);
  free(check_unit_s);
  free(zero_unit_s);
  free(fwd_s);
  free(bwd_s);
  free(nst);
  free(last);
  free(is_root);
  return err;
}

/* What -tune compares of one plan. */
typedef struct {
  uint64_t mem_total;
  double step_s, exposed_s, compute_s, tokens_per_s;
} PlanOutcome;

/* One plan of the options in db: printed (print), and its outcome (may be
 * NULL).  cached: the profile already read (NULL: read -profile). */
static int PlanOnce(FsdpOpts db, int print, const FsdpProfile *cached, PlanOutcome *outcome)
{
  PlanOptions po;
  FSDP_CALL(PlanOptionsFromDb(db, &po));
  FSDP_CALL(PlanTopology(&po));
  FsdpGroup shard, replica;
  PlanUnit *u = NULL;
  int nu = 0;
  FSDP_CALL(PlanGroups(&po, &shard, &replica));
  int *stage_unit = NULL, nstages = 0;
  int owned = 1;
  FSDP_CALL(PlanUnitsCached(&po, shard.rank, &u, &nu, &stage_unit, &nstages, &owned));

  /* memory: [Note: gather memory], [Note: mixed precision] and [Note:
   * gradient accumulation] in fsdp.h, as FsdpRuntimeSetUp allocates it */
  const FsdpRuntimeOptions *fo = &po.t.fsdp;
  PlanMemory mem;
  memset(&mem, 0, sizeof mem);
  uint64_t rootP = 0, slotP = 0, sumP = 0;
  int nonroot = 0;
  for (int i = 0; i < nu; i++) {
    uint64_t P = (uint64_t)FlatParamPaddedNumel(u[i].fp);
    mem.param_shard += (uint64_t)FlatParamShardNumel(u[i].fp) * 4; /* fp32 master shards */
    sumP += P;
    if (u[i].is_root) rootP = P;
    else {
      nonroot++;
      if (P > slotP) slotP = P;
    }
  }
  uint64_t kp = FsdpDtypeSize(po.param_dt), kr = FsdpDtypeSize(po.reduce_dt);
  int low = po.param_dt != FSDP_DTYPE_FP32, lowred = po.reduce_dt != FSDP_DTYPE_FP32;
  int K = fo->grad_accum > 0 ? fo->grad_accum : 1;
  mem.grad_shard = mem.param_shard;
  mem.optim_state = 2 * mem.param_shard; /* AdamW exp_avg, exp_avg_sq */
  if (low) mem.low_shard = mem.param_shard / 4 * kp;
  int raf = fo->reshard_after_forward, L = fo->limit_all_gathers;
  /* the gather ring: the runtime's own sizing function, not a copy of it */
  int64_t *unitP = calloc((size_t)nu + 1, sizeof *unitP);
  int *unit_is_root = calloc((size_t)nu + 1, sizeof *unit_is_root);
  if (!unitP || !unit_is_root) {
    free(unitP);
    free(unit_is_root);
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory planning the gather ring of %d units", nu);
  }
  for (int i = 0; i < nu; i++) {
    unitP[i] = FlatParamPaddedNumel(u[i].fp);
    unit_is_root[i] = u[i].is_root;
  }
  FsdpGatherRing ring;
  FsdpGatherRingPlan(fo, po.F, unitP, unit_is_root, nu, stage_unit, nstages, &ring);
  free(unitP);
  free(unit_is_root);
  mem.gather_slots = ring.slots;
  mem.gather_buffer = ring.bytes;
  if (low) mem.compute_buffer = 4 * (rootP + slotP);
  /* gradients: the shard itself (F = 1, fp32, no per-micro-step sums), a
   * persistent fp32 buffer per unit (-accum_comm 0), or a ring of two
   * slots plus the root's, each an fp32 buffer with the reduce-dtype send
   * and receive buffers it needs */
  int grad_is_shard = po.F == 1 && !lowred && (K == 1 || !fo->accum_comm);
  int persistent = K > 1 && !fo->accum_comm && !grad_is_shard;
  int with_recv = po.F > 1 && (lowred || (K > 1 && fo->accum_comm));
  uint64_t F = (uint64_t)po.F;
  if (persistent) mem.grad_buffer = 4 * sumP;
  if (!grad_is_shard && !persistent) {
    mem.grad_slots = nonroot < 2 ? nonroot : 2;
    uint64_t per[2] = {slotP, rootP};
    for (int k = 0; k < 2; k++) {
      uint64_t P = per[k], n = k ? (rootP ? 1 : 0) : (uint64_t)mem.grad_slots;
      mem.grad_buffer += n * (4 * P + (lowred ? P * kr : 0) + (with_recv ? P / F * kr : 0));
    }
  } else if (persistent && lowred) {
    mem.grad_slots = nonroot < 2 ? nonroot : 2;
    mem.grad_buffer += (uint64_t)mem.grad_slots * (slotP * kr + (po.F > 1 ? slotP / F * kr : 0));
    if (rootP) mem.grad_buffer += rootP * kr + (po.F > 1 ? rootP / F * kr : 0);
  }
  /* what the model's set-up allocates, from its family's own sizing
   * function (with recomputation: [Note: GPT recomputation] in gpt.c) */
  mem.activations = FsdpModelDescActivationBytes(&po.t.model, po.t.wrap, po.t.batch_size,
                                                (int)FsdpModelDescInt(&po.t.model, "seq_len"),
                                                fo->recompute, fo->attention);
  /* what -attention naive would keep ([Note: flash attention]): the
   * reduction flash buys, reported beside the plan */
  uint64_t act_naive = FsdpModelDescActivationBytes(
      &po.t.model, po.t.wrap, po.t.batch_size, (int)FsdpModelDescInt(&po.t.model, "seq_len"),
      fo->recompute, FSDP_ATTENTION_NAIVE);
  if (fo->compute_dtype == FSDP_DTYPE_BF16) {
    char lib[64], kernel[160];
    int two_bytes = po.t.device_cuda; /* CUDA: bf16 scratch always */
    if (!two_bytes) {
      FsdpKernelsCpuGemm(1, lib, sizeof lib, kernel, sizeof kernel);
      two_bytes = strncmp(lib, "oneDNN", 6) == 0;
    }
    mem.bf16_scratch = PlanBf16ScratchBytes(&po.t.model, po.t.batch_size,
                                            (int)FsdpModelDescInt(&po.t.model, "seq_len"),
                                            two_bytes);
  }
  uint64_t mem_total = mem.param_shard + mem.grad_shard + mem.low_shard + mem.optim_state +
                       mem.gather_buffer + mem.compute_buffer + mem.grad_buffer + mem.activations +
                       mem.bf16_scratch;

  /* per-step collectives: [Note: unit life cycle] in fsdp.h; a unit is
   * gathered before its first forward stage and, unless it is the root or
   * NRAF keeps it, again before its backward, in every micro-step; its
   * gradient is reduce-scattered and, with R > 1, its shard all-reduced
   * over the replica group, every micro-step (-accum_comm 1) or once
   * ([Note: gradient accumulation]).  F = 1 issues no gather or
   * reduce-scatter ([Note: no sharding]). */
  PlanComm cm;
  memset(&cm, 0, sizeof cm);
  uint64_t nred = fo->accum_comm ? (uint64_t)K : 1;
  for (int i = 0; i < nu; i++) {
    int64_t P = FlatParamPaddedNumel(u[i].fp), S = FlatParamShardNumel(u[i].fp);
    if (po.F > 1) {
      AddVolume(&cm, FSDP_COLL_ALL_GATHER, &shard, P, po.param_dt,
                (uint64_t)K * ((!u[i].is_root && raf) ? 2 : 1));
      AddVolume(&cm, FSDP_COLL_REDUCE_SCATTER, &shard, P, po.reduce_dt, nred);
    }
    if (po.R > 1) AddVolume(&cm, FSDP_COLL_ALL_REDUCE, &replica, S, po.reduce_dt, nred);
  }
  uint64_t intra = 0, inter = 0;
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
    intra += cm.intra[k];
    inter += cm.inter[k];
  }

  /* predicted step time (only with rates given): compute from the usual
   * 6 N + 6 L T C FLOP per token of training; communication from the bytes
   * this rank receives, the inter-node part sharing the node's link with
   * the other G - 1 ranks */
  const FsdpModelDesc *c = &po.t.model;
  double seq_len = (double)FsdpModelDescInt(c, "seq_len");
  double n_layer = (double)FsdpModelDescInt(c, "n_layer"), n_embd = (double)FsdpModelDescInt(c, "n_embd");
  double tokens = (double)po.t.batch_size * seq_len;
  double flop = tokens * (6.0 * (double)FsdpModelDescParamCount(c) + 6.0 * n_layer * seq_len * n_embd);
  /* -recompute 1 runs the blocks' forward (a third of their training
   * FLOP) once more ([Note: activation recomputation], fsdp.h): time, not
   * model FLOP (flop_per_step and MFU leave it out).  The blocks'
   * parameters are the non-root units' (GPT: 12 C^2 + 13 C a block). */
  double block_params = 0.0;
  for (int i = 0; i < nu; i++)
    if (!u[i].is_root) block_params += (double)FlatParamNumel(u[i].fp);
  double flop_recompute =
      fo->recompute ? tokens * (2.0 * block_params + 2.0 * n_layer * seq_len * n_embd) : 0.0;
  double t_comp = po.flops > 0 ? (flop + flop_recompute) / po.flops : 0.0;
  double t_intra = po.intra_bw > 0 ? intra / po.intra_bw : 0.0;
  double t_inter = po.inter_bw > 0 ? (double)po.G * inter / po.inter_bw : 0.0;
  int predict = po.flops > 0 || po.intra_bw > 0 || po.inter_bw > 0;
  ProfilePrediction pp;
  memset(&pp, 0, sizeof pp);
  int use_profile = po.profile[0] != '\0';
  if (use_profile) {
    FsdpProfile *prof = malloc(sizeof *prof);
    int perr = !prof ? FSDP_ERR_MEM : cached ? (*prof = *cached, FSDP_SUCCESS)
                                             : FsdpProfileRead(po.profile, prof);
    if (!perr) perr = CheckProfile(&po, prof);
    if (!perr) pp.peak = prof->peak_flops_per_s;
    /* [Note: sustained speed] (fsdp-probe.c): every time at the speed the
     * machine sustains (this copy only: -tune hands the same profile to
     * every candidate) */
    pp.sustained = !perr && prof->sustained_factor > 1.0 ? prof->sustained_factor : 1.0;
    if (!perr) FsdpProfileScaleTimes(prof, pp.sustained);
    if (!perr)
      perr = PredictFromProfile(&po, prof, u, nu, stage_unit, nstages, &shard, &replica,
                                /* the activations written and read, whether kept or
                                 * recomputed: the memory-bound passes' bytes */
                                FsdpModelDescActivationBytes(
                                    &po.t.model, po.t.wrap, po.t.batch_size,
                                    (int)FsdpModelDescInt(&po.t.model, "seq_len"), 0,
                                    fo->attention),
                                mem.param_shard / 4, mem.gather_slots,
                                mem.grad_slots, po.schedule, &pp);
    t_intra = t_inter = 0;
    for (int k = 0; !perr && k < FSDP_COLL_NKINDS; k++) {
      double a = 0, e = 0;
      CollSeconds(prof, (FsdpCollKind)k, k == FSDP_COLL_ALL_REDUCE ? &replica : &shard,
                  cm.calls[k], cm.intra[k], cm.inter[k], &a, &e);
      pp.coll_s[k] = a + e;
      t_intra += a;
      t_inter += e;
    }
    free(prof);
    if (perr) {
      free(pp.events);
      if (owned) {
        PlanUnitsFree(u, nu);
        free(stage_unit);
      }
      return FsdpErrorTrace(__FILE__, __LINE__, __func__, perr);
    }
    predict = 1;
    t_comp = pp.compute_s;
  }
  double tokens_per_step = (double)po.W * po.t.batch_size * seq_len * K;

  if (outcome) {
    outcome->mem_total = mem_total;
    outcome->step_s = pp.sim.step_s;
    outcome->exposed_s = pp.sim.exposed_s;
    outcome->compute_s = pp.sim.compute_s;
    outcome->tokens_per_s = pp.sim.step_s > 0 ? tokens_per_step / pp.sim.step_s : 0.0;
  }
  int rank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (!print) {
  } else if (rank == 0 && po.t.summary == FSDP_SUMMARY_JSON) {
    /* [Note: one writer for the shared keys] (driver/summary.h) */
    FsdpJson j = NULL;
    FSDP_CALL(FsdpJsonCreate(&j));
    FsdpJsonBeginObject(j, NULL);
    FsdpSummaryTopology topo = {po.W, po.F, po.R, po.G, po.N};
    FsdpSummaryRunMembers(j, &po.t, &topo);
    FsdpJsonInt(j, "plan_rank", po.rank);
    FsdpJsonBeginArray(j, "units");
    for (int i = 0; i < nu; i++) FsdpSummaryUnit(j, u[i].name, u[i].fp);
    FsdpJsonEndArray(j);
    FsdpSummaryMemory sm = {mem.param_shard,   mem.grad_shard,  mem.optim_state,
                            mem.gather_buffer, mem.grad_buffer, mem.compute_buffer,
                            mem.activations};
    FsdpSummaryBeginMemory(j, &sm);
    FsdpJsonUint(j, "low_shard_bytes", mem.low_shard);
    FsdpJsonInt(j, "gather_slots", mem.gather_slots);
    FsdpJsonInt(j, "grad_slots", mem.grad_slots);
    FsdpJsonUint(j, "bf16_matmul_scratch_bytes", mem.bf16_scratch);
    FsdpJsonUint(j, "naive_attention_activation_bytes", act_naive);
    FsdpJsonUint(j, "total_bytes", mem_total);
    FsdpJsonEndObject(j);
    FsdpCommCounters per_step;
    memset(&per_step, 0, sizeof per_step);
    memcpy(per_step.bytes, cm.bytes, sizeof cm.bytes);
    memcpy(per_step.calls, cm.calls, sizeof cm.calls);
    per_step.intra_bytes = intra;
    per_step.inter_bytes = inter;
    FsdpSummaryBeginComm(j, &per_step);
    static const char *const kKey[FSDP_COLL_NKINDS][2] = {
        {"all_gather_intra_node_bytes", "all_gather_inter_node_bytes"},
        {"reduce_scatter_intra_node_bytes", "reduce_scatter_inter_node_bytes"},
        {"all_reduce_intra_node_bytes", "all_reduce_inter_node_bytes"}};
    for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
      FsdpJsonUint(j, kKey[k][0], cm.intra[k]);
      FsdpJsonUint(j, kKey[k][1], cm.inter[k]);
    }
    FsdpJsonEndObject(j);
    FsdpSummaryBeginCommTime(j, ring.max_in_flight);
    FsdpJsonEndObject(j);
    FsdpSummaryBeginPrecision(j, fo, po.t.device_cuda);
    FsdpJsonEndObject(j);
    if (predict) {
      FsdpJsonBeginObject(j, "prediction");
      FsdpJsonReal(j, "flop_per_step", flop);
      if (fo->recompute) FsdpJsonReal(j, "recompute_flop_per_step", flop_recompute);
      FsdpJsonReal(j, "compute_s", t_comp);
      FsdpJsonReal(j, "intra_comm_s", t_intra);
      FsdpJsonReal(j, "inter_comm_s", t_inter);
      FsdpJsonReal(j, "step_time_s_no_overlap", t_comp + t_intra + t_inter);
      FsdpJsonReal(j, "step_time_s_full_overlap",
                   t_comp > t_intra + t_inter ? t_comp : t_intra + t_inter);
      if (use_profile) {
        FsdpJsonString(j, "profile", po.profile);
        FsdpJsonBool(j, "stages_measured", pp.stages_measured);
        FsdpJsonReal(j, "contended_factor", pp.contended);
        FsdpJsonString(j, "contended_factor_from", pp.contended_why);
        FsdpJsonReal(j, "contended_comm_factor", pp.contended_comm);
        FsdpJsonReal(j, "join_fraction", pp.join_fraction);
        FsdpJsonReal(j, "sustained_factor", pp.sustained);
        FsdpJsonReal(j, "concurrent_factor", pp.concurrent);
        FsdpJsonReal(j, "gemm_s", pp.gemm_s);
        FsdpJsonReal(j, "attention_s", pp.attention_s);
        FsdpJsonReal(j, "memory_bound_s", pp.memory_s);
        FsdpJsonReal(j, "optimizer_s", pp.optimizer_s);
        if (fo->recompute) FsdpJsonReal(j, "recompute_s", pp.recompute_s);
        static const char *const kCollKey[FSDP_COLL_NKINDS] = {"all_gather_s", "reduce_scatter_s",
                                                               "all_reduce_s"};
        for (int k = 0; k < FSDP_COLL_NKINDS; k++) FsdpJsonReal(j, kCollKey[k], pp.coll_s[k]);
      }
      FsdpJsonEndObject(j);
    }
    if (use_profile) {
      /* the step replayed over the profile's rates ([Note: the schedule
       * replayed] in runtime/steptime.h) */
      FsdpJsonBeginObject(j, "predicted");
      FsdpJsonReal(j, "step_time_ms", 1e3 * pp.sim.step_s);
      FsdpJsonReal(j, "exposed_comm_ms", 1e3 * pp.sim.exposed_s);
      FsdpJsonReal(j, "compute_ms", 1e3 * pp.sim.compute_s);
      FsdpJsonReal(j, "contention_ms", 1e3 * pp.sim.contention_s);
      FsdpJsonReal(j, "gather_stream_busy_ms", 1e3 * pp.sim.gather_busy_s);
      FsdpJsonReal(j, "reduce_stream_busy_ms", 1e3 * pp.sim.reduce_busy_s);
      FsdpJsonReal(j, "tokens_per_s", pp.sim.step_s > 0 ? tokens_per_step / pp.sim.step_s : 0.0);
      FsdpJsonInt(j, "max_gathers_in_flight", pp.sim.max_in_flight);
      /* model FLOP utilization: the step's training FLOP (flop_per_step
       * above, every micro-step) over the time and the ranks' peak */
      FsdpJsonReal(j, "mfu", pp.peak > 0 && pp.sim.step_s > 0
                                 ? flop * K / (pp.sim.step_s * pp.peak) : 0.0);
      if (po.schedule) {
        FsdpJsonBeginArray(j, "schedule");
        for (int e = 0; e < pp.nevents; e++) {
          FsdpJsonBeginObject(j, NULL);
          FsdpJsonString(j, "event", FsdpStepEventNames[pp.events[e].kind]);
          FsdpJsonInt(j, "unit", pp.events[e].unit);
          FsdpJsonInt(j, "micro", pp.events[e].micro);
          FsdpJsonReal(j, "t_ms", 1e3 * pp.events[e].t);
          FsdpJsonEndObject(j);
        }
        FsdpJsonEndArray(j);
      }
      FsdpJsonEndObject(j);
    }
    FsdpJsonEndObject(j);
    FSDP_CALL(FsdpSummaryPrint(&j, stdout));
  } else if (rank == 0) {
    const char *mode = po.W == 1      ? ""
                       : po.F == po.W ? "full sharding"
                       : po.F == 1    ? "replication"
                                      : "hybrid";
    printf("fsdp-plan: %s (%lld parameters) on %d ranks (%d nodes x %d), F %d, R %d%s%s, "
           "wrap %d, %s, limit %d, prefetch %s, params %s, reduce %s, grad_accum %d%s; rank %d\n",
           po.t.model_name, (long long)FsdpModelDescParamCount(c), po.W, po.N, po.G, po.F, po.R,
           mode[0] ? ": " : "", mode, po.t.wrap, raf ? "RAF" : "NRAF", L,
           FsdpPrefetchNames[fo->prefetch], FsdpDtypeNames[po.param_dt],
           FsdpDtypeNames[po.reduce_dt], K, K > 1 && !fo->accum_comm ? " (reduce once)" : "",
           po.rank);
    printf("%-10s %14s %14s %14s\n", "unit", "numel", "padded", "shard");
    for (int i = 0; i < nu; i++)
      printf("%-10s %14lld %14lld %14lld\n", u[i].name, (long long)FlatParamNumel(u[i].fp),
             (long long)FlatParamPaddedNumel(u[i].fp), (long long)FlatParamShardNumel(u[i].fp));
    const double MiB = 1048576.0;
    printf("memory per rank (MiB): param shards %.2f (+ %s copies %.2f) | grad shards %.2f | "
           "optimizer %.2f | gather ring %.2f (%d slots + root) | fp32 compute buffers %.2f | "
           "grad buffers %.2f | activations %.2f%s (%s attention; naive %.2f) | total %.2f\n",
           mem.param_shard / MiB, FsdpDtypeNames[po.param_dt], mem.low_shard / MiB,
           mem.grad_shard / MiB, mem.optim_state / MiB, mem.gather_buffer / MiB,
           mem.gather_slots, mem.compute_buffer / MiB, mem.grad_buffer / MiB,
           mem.activations / MiB, fo->recompute ? " (recomputed)" : "",
           FsdpAttentionNames[fo->attention], act_naive / MiB, mem_total / MiB);
    printf("%-15s %8s %16s %16s %16s\n", "per step", "calls", "bytes", "intra-node", "inter-node");
    for (int k = 0; k < FSDP_COLL_NKINDS; k++)
      printf("%-15s %8llu %16llu %16llu %16llu\n", FsdpCollKindNames[k],
             (unsigned long long)cm.calls[k], (unsigned long long)cm.bytes[k],
             (unsigned long long)cm.intra[k], (unsigned long long)cm.inter[k]);
    printf("%-15s %8s %16llu %16llu %16llu\n", "total", "", (unsigned long long)(intra + inter),
           (unsigned long long)intra, (unsigned long long)inter);
    if (use_profile)
      printf("predicted from %s (schedule replayed): step %.4g ms, exposed communication %.4g ms, "
             "compute %.4g ms, %.4g tokens/s, MFU %.1f%%\n",
             po.profile, 1e3 * pp.sim.step_s, 1e3 * pp.sim.exposed_s, 1e3 * pp.sim.compute_s,
             pp.sim.step_s > 0 ? tokens_per_step / pp.sim.step_s : 0.0,
             pp.peak > 0 && pp.sim.step_s > 0 ? 100.0 * flop * K / (pp.sim.step_s * pp.peak) : 0.0);
    if (use_profile)
      printf("compute beside communication: x%.3f (%s), %.4g ms of the step; communication "
             "beside compute: x%.3f\n", pp.contended, pp.contended_why, 1e3 * pp.sim.contention_s,
             pp.contended_comm);
    if (use_profile)
      printf("a collective waits %.3g of the compute before it for its group's ranks to join; "
             "two at once take x%.3f their time alone; the machine sustains 1/%.3f of its "
             "typical speed\n", pp.join_fraction, pp.concurrent, pp.sustained);
    if (predict)
      printf("predicted step: compute %.4g s + intra-node %.4g s + inter-node %.4g s = %.4g s "
             "without overlap, %.4g s with full overlap\n",
             t_comp, t_intra, t_inter, t_comp + t_intra + t_inter,
             t_comp > t_intra + t_inter ? t_comp : t_intra + t_inter);
  }
  fflush(stdout);
  free(pp.events);
  if (owned) {
    PlanUnitsFree(u, nu);
    free(stage_unit);
  }
  return FSDP_SUCCESS;
}

/* ---- -tune: the fastest options that fit -------------------------------- */

typedef struct {
  int F, wrap, prefetch, raf, rc, B, K, ac, L;
  PlanOutcome o;
} Candidate;

/* How far a candidate's options are from fsdp-train's defaults (-wrap 1,
 * -prefetch backward, RAF, -limit_all_gathers 2, no recomputation). */
static int DistanceFromDefaults(const Candidate *c)
{
  return (c->wrap != 1) + (c->prefetch != FSDP_PREFETCH_BACKWARD) + !c->raf + (c->L != 2) + c->rc;
}

/* Most tokens/s first; among equal predictions (F = 1 gathers nothing, so
 * wrap, prefetch and L change nothing there) the least memory, then the
 * fewest micro-steps (a micro-step costs what the replay leaves out: data,
 * loss, accumulation), then the options nearest the defaults, then the
 * largest sharding factor: a total order, so the pick does not depend on
 * the sort's tie handling. */
static int CompareCandidates(const void *a, const void *b)
{
  const Candidate *x = a, *y = b;
  if (x->o.tokens_per_s != y->o.tokens_per_s) return x->o.tokens_per_s < y->o.tokens_per_s ? 1 : -1;
  if (x->o.mem_total != y->o.mem_total) return x->o.mem_total > y->o.mem_total ? 1 : -1;
  if (x->K != y->K) return x->K > y->K ? 1 : -1;
  int dx = DistanceFromDefaults(x), dy = DistanceFromDefaults(y);
  if (dx != dy) return dx > dy ? 1 : -1;
  if (x->F != y->F) return x->F < y->F ? 1 : -1;
  if (x->wrap != y->wrap) return x->wrap > y->wrap ? 1 : -1;
  if (x->prefetch != y->prefetch) return x->prefetch > y->prefetch ? 1 : -1;
  if (x->L != y->L) return x->L > y->L ? 1 : -1;
  if (x->ac != y->ac) return x->ac < y->ac ? 1 : -1;
  return (x->raf < y->raf) - (x->raf > y->raf);
}

static int SetInt(FsdpOpts db, const char *name, long long v)
{
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", v);
  return FsdpOptsSetValue(db, name, buf);
}

static int SetCandidate(FsdpOpts db, const Candidate *c)
{
  FSDP_CALL(SetInt(db, "sharding_factor", c->F));
  FSDP_CALL(SetInt(db, "wrap", c->wrap));
  FSDP_CALL(FsdpOptsSetValue(db, "prefetch", FsdpPrefetchNames[c->prefetch]));
  FSDP_CALL(SetInt(db, "reshard_after_forward", c->raf));
  FSDP_CALL(SetInt(db, "recompute", c->rc));
  FSDP_CALL(SetInt(db, "batch_size", c->B));
  FSDP_CALL(SetInt(db, "grad_accum", c->K));
  FSDP_CALL(SetInt(db, "accum_comm", c->ac));
  FSDP_CALL(SetInt(db, "limit_all_gathers", c->L));
  return FSDP_SUCCESS;
}

/* Writes the winner as an options file fsdp-train takes (-options_file):
 * the options the search set, nothing else (the run's own options file
 * goes first on the command line, this one after it). */
static int WriteOptionsFile(const char *path, const PlanOptions *po, const Candidate *c)
{
  FILE *f = fopen(path, "w");
  if (!f) FSDP_ERROR(FSDP_ERR_USAGE, "-tune_options_out %s: cannot write it: %s", path, strerror(errno));
  fprintf(f,
          "# fsdp-plan -tune: the fastest options predicted for %s on %d ranks (%d per node)\n"
          "# from the profile %s: step %.4g ms, exposed communication %.4g ms,\n"
          "# %.4g tokens/s, %.3f GiB per rank.  Use after the run's own options:\n"
          "#   fsdp-train -options_file run.opts -options_file %s\n"
          "-sharding_factor %d\n-wrap %d\n-prefetch %s\n-reshard_after_forward %d\n"
          "-recompute %d\n-batch_size %d\n-grad_accum %d\n-accum_comm %d\n"
          "-limit_all_gathers %d\n",
          po->t.model_name, po->W, po->G, po->profile, 1e3 * c->o.step_s, 1e3 * c->o.exposed_s,
          c->o.tokens_per_s, c->o.mem_total / 1073741824.0, path, c->F, c->wrap,
          FsdpPrefetchNames[c->prefetch], c->raf, c->rc, c->B, c->K, c->ac, c->L);
  if (fclose(f) != 0)
    FSDP_ERROR(FSDP_ERR_IO, "-tune_options_out %s: writing failed: %s", path, strerror(errno));
  return FSDP_SUCCESS;
}

/* [Note: the tuner] (Its output option is -tune_options_out, not
 * -options_out: FSDP_OPTIONS is shared by every program, and -options_out
 * would be a near miss of every program's -options_left, an error there.)
 * Every combination of: F among the divisors of W whose
 * sharding groups keep to whole nodes or whole groups of nodes (F divides
 * G, or G divides F); -wrap among the divisors of n_layer up to 8; the
 * three prefetch modes; RAF and NRAF; activation recomputation off and
 * on; the micro-batch B among the divisors
 * of the sequences per rank per step (-batch_size x -grad_accum as given),
 * with K = that / B; where K > 1, -accum_comm 1 and 0 (reduce every
 * micro-step, under the next one's compute, or once: more memory, 1/K the
 * communication and none beside the compute of micro-steps 2..K, which
 * [Note: contended compute] charges where no core is idle); where a
 * prefetch issues gathers ahead (F > 1, -prefetch backward or both),
 * -limit_all_gathers 1, 2 and 4 (the ring's 1 + L gathered units under
 * RAF against the gathers' head start, [Note: prefetch and the limiter]
 * in fsdp.c; without prefetch or gathers L changes nothing but memory and
 * stays as given).  Each is planned exactly as fsdp-plan plans one run
 * and replayed on the profile; the fastest that fits the memory limit
 * wins, ties going to less memory. */
/* Plans candidate x (its outcome into x->o), counts it, keeps the one
 * of least memory in *smallest, and appends it to *c when it fits. */
static int TryCandidate(FsdpOpts db, const FsdpProfile *prof, double limit, Candidate *x,
                        Candidate **c, size_t *n, size_t *cap, Candidate *smallest, int *tried)
{
  FSDP_CALL(SetCandidate(db, x));
  FSDP_CALL(PlanOnce(db, 0, prof, &x->o));
  (*tried)++;
  if (x->o.mem_total < smallest->o.mem_total) *smallest = *x;
  if ((double)x->o.mem_total > limit) return FSDP_SUCCESS;
  if (*n == *cap) {
    Candidate *more = realloc(*c, 2 * *cap * sizeof **c);
    FSDP_CHECK_ALLOC(more, 2 * *cap * sizeof **c);
    *c = more;
    *cap *= 2;
  }
  (*c)[(*n)++] = *x;
  return FSDP_SUCCESS;
}

static int Tune(FsdpOpts db, const PlanOptions *po0)
{
  PlanOptions po = *po0;
  if (!po.profile[0])
    FSDP_ERROR(FSDP_ERR_USAGE, "-tune needs -profile FILE (a machine profile from fsdp-probe)");
  FSDP_CALL(PlanTopology(&po));
  FsdpProfile *prof = malloc(sizeof *prof);
  FSDP_CHECK_ALLOC(prof, sizeof *prof);
  int err = FsdpProfileRead(po.profile, prof);
  if (!err) err = CheckProfile(&po, prof);
  double limit = po.memory_limit > 0 ? po.memory_limit : 0.9 * (double)prof->mem_available;
  int per_rank = po.t.batch_size * (po.t.fsdp.grad_accum > 0 ? po.t.fsdp.grad_accum : 1);
  int nl = (int)FsdpModelDescInt(&po.t.model, "n_layer");
  size_t cap = 4096, n = 0;
  Candidate *c = err ? NULL : malloc(cap * sizeof *c);
  if (!err && !c) err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
  Candidate smallest = {0};
  smallest.o.mem_total = UINT64_MAX;
  int tried = 0;
  gUnits.on = 1;
  static const int kLimits[] = {1, 2, 4};
  for (int F = 1; !err && F <= po.W; F++) {
    if (po.W % F || (po.G % F && F % po.G)) continue;
    for (int wrap = 1; !err && wrap <= (nl < 8 ? nl : 8); wrap++) {
      if (nl % wrap) continue;
      /* B and rc outside the rest: the units planned are kept while
       * they stay (gUnits) */
      for (int B = 1; !err && B <= per_rank; B++)
        for (int rc = 0; !err && rc <= 1 && per_rank % B == 0; rc++)
          for (int pf = 0; !err && pf < FSDP_NPREFETCH; pf++)
            for (int raf = 1; !err && raf >= 0; raf--) {
              int K = per_rank / B, searchL = F > 1 && pf != FSDP_PREFETCH_NONE;
              for (int li = 0; !err && li < (searchL ? 3 : 1); li++)
                for (int ai = 0; !err && ai < (K > 1 ? 2 : 1); ai++) {
                  Candidate x = {F, wrap, pf, raf, rc, B, K, K > 1 ? 1 - ai : po.t.fsdp.accum_comm,
                                 searchL ? kLimits[li] : po.t.fsdp.limit_all_gathers, {0}};
                  err = TryCandidate(db, prof, limit, &x, &c, &n, &cap, &smallest, &tried);
                }
            }
    }
  }
  if (!err && n == 0)
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "-tune: none of %d configurations fits the memory limit of %.0f bytes "
                         "(%.3f GiB) per rank; the smallest needs %llu bytes (%.3f GiB: "
                         "-sharding_factor %d -wrap %d -prefetch %s -reshard_after_forward %d "
                         "-recompute %d -batch_size %d -grad_accum %d -accum_comm %d "
                         "-limit_all_gathers %d)",
                         tried, limit, limit / 1073741824.0,
                         (unsigned long long)smallest.o.mem_total,
                         smallest.o.mem_total / 1073741824.0, smallest.F, smallest.wrap,
                         FsdpPrefetchNames[smallest.prefetch], smallest.raf, smallest.rc, smallest.B,
                         smallest.K, smallest.ac, smallest.L);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!err) {
    qsort(c, n, sizeof *c, CompareCandidates);
    if (rank == 0) {
      int top = po.tune_top < (int)n ? po.tune_top : (int)n;
      printf("fsdp-plan -tune: %s on %d ranks (%d nodes x %d), %d sequences per rank per step, "
             "profile %s (%s); %d configurations, %zu fit %.3f GiB per rank\n",
             po.t.model_name, po.W, po.N, po.G, per_rank, po.profile, prof->source, tried, n,
             limit / 1073741824.0);
      const char *why = NULL;
      double f = ContendedFactor(&po, prof, &why);
      printf("fsdp-plan -tune: compute beside communication x%.3f (%s), communication beside "
             "compute x%.3f\n", f, why, ContendedCommFactor(&po, prof));
      printf("%4s %5s %4s %-8s %4s %4s %4s %4s %3s %3s %12s %12s %14s %10s\n", "rank", "F",
             "wrap", "prefetch", "RAF", "rc", "B", "K", "ac", "L", "step ms", "exposed ms",
             "tokens/s", "GiB/rank");
      for (int i = 0; i < top; i++)
        printf("%4d %5d %4d %-8s %4d %4d %4d %4d %3d %3d %12.4g %12.4g %14.6g %10.3f\n", i + 1,
               c[i].F, c[i].wrap, FsdpPrefetchNames[c[i].prefetch], c[i].raf, c[i].rc, c[i].B,
               c[i].K, c[i].ac, c[i].L,
               1e3 * c[i].o.step_s, 1e3 * c[i].o.exposed_s, c[i].o.tokens_per_s,
               c[i].o.mem_total / 1073741824.0);
      if (po.tune_options_out[0]) {
        err = WriteOptionsFile(po.tune_options_out, &po, &c[0]);
        if (!err) printf("fsdp-plan -tune: wrote the winner to %s\n", po.tune_options_out);
      }
      fflush(stdout);
    }
  }
  UnitsCacheClear();
  gUnits.on = 0;
  free(c);
  free(prof);
  return err;
}

static int Run(int argc, char **argv, int *handled_help)
{
  FsdpOpts db = NULL;
  PlanOptions po;
  *handled_help = 0;
  FSDP_CALL(FsdpOptsCreate(MPI_COMM_WORLD, argc, argv, &db));
  int err = PlanOptionsFromDb(db, &po);
  if (FsdpOptsHelpRequested(db)) {
    FsdpOptsPrintHelp(db, stdout, kHelp);
    *handled_help = 1;
    FsdpOptsDestroy(&db);
    return FSDP_SUCCESS;
  }
  if (!err) err = FsdpOptsCheckUnknown(db);
  if (!err) err = po.tune ? Tune(db, &po) : PlanOnce(db, 1, NULL, NULL);
  FsdpOptsDestroy(&db);
  return err;
}

int main(int argc, char **argv)
{
  int err = FsdpInitialize(&argc, &argv);
  if (err) {
    FsdpFinalize();
    return FsdpExitStatus(err);
  }
  int help = 0;
  err = Run(argc, argv, &help);
  FsdpFinalize();
  return FsdpExitStatus(err);
}
