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
 * run itself uses, not from a second copy of the formulas: the GPT model
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "driver/summary.h"
#include "driver/train.h"

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
static int PlanUnits(const PlanOptions *po, int shard_rank, PlanUnit **out, int *nout)
{
  *out = NULL;
  *nout = 0;
  /* a runtime on a one-rank topology only records the registration: no
   * setup, nothing allocated */
  FsdpTopoOptions to = {0, 0, FSDP_PLACEMENT_BLOCK, 0};
  FsdpTopo topo = NULL;
  FsdpColl coll = NULL;
  FsdpRuntime rt = NULL;
  GptModel m = NULL;
  FSDP_CALL(FsdpTopoCreate(MPI_COMM_SELF, &to, &topo));
  FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll));
  FSDP_CALL(FsdpRuntimeCreate(topo, coll, &po->t.fsdp, &rt));
  FSDP_CALL(GptModelCreate(&po->t.model, po->t.wrap, po->t.batch_size, po->t.model.seq_len,
                           FsdpKernelsCpu(), (uint64_t)po->t.seed, &m));
  FSDP_CALL(FsdpRuntimeAddModel(rt, GptModelTable(m)));
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
  FSDP_CALL(GptModelDestroy(&m));
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
      grad_buffer, activations;
  int gather_slots, grad_slots;
} PlanMemory;


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
  if (!err) err = PlanTopology(&po);
  if (err) {
    FsdpOptsDestroy(&db);
    return err;
  }
  FsdpGroup shard, replica;
  PlanUnit *u = NULL;
  int nu = 0;
  FSDP_CALL(PlanGroups(&po, &shard, &replica));
  FSDP_CALL(PlanUnits(&po, shard.rank, &u, &nu));

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
  FsdpGatherRingPlan(fo, po.F, unitP, unit_is_root, nu, &ring);
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
  /* the bytes GptModelSetUp allocates, from the model's own sizing
   * function ([Note: GPT recomputation] in gpt.c) */
  mem.activations = GptActivationBytes(&po.t.model, po.t.wrap, po.t.batch_size,
                                       po.t.model.seq_len, fo->recompute);
  uint64_t mem_total = mem.param_shard + mem.grad_shard + mem.low_shard + mem.optim_state +
                       mem.gather_buffer + mem.compute_buffer + mem.grad_buffer + mem.activations;

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
  const GptConfig *c = &po.t.model;
  double tokens = (double)po.t.batch_size * c->seq_len;
  double flop = tokens * (6.0 * (double)GptConfigParamCount(c) +
                          6.0 * c->n_layer * (double)c->seq_len * c->n_embd);
  /* -recompute 1 runs the blocks' forward (a third of their training
   * FLOP) once more ([Note: activation recomputation], fsdp.h) */
  if (fo->recompute)
    flop += tokens * (2.0 * c->n_layer * (12.0 * c->n_embd * c->n_embd + 13.0 * c->n_embd) +
                      2.0 * c->n_layer * (double)c->seq_len * c->n_embd);
  double t_comp = po.flops > 0 ? flop / po.flops : 0.0;
  double t_intra = po.intra_bw > 0 ? intra / po.intra_bw : 0.0;
  double t_inter = po.inter_bw > 0 ? (double)po.G * inter / po.inter_bw : 0.0;
  int predict = po.flops > 0 || po.intra_bw > 0 || po.inter_bw > 0;

  int rank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (rank == 0 && po.t.summary == FSDP_SUMMARY_JSON) {
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
    FsdpSummaryBeginPrecision(j, fo);
    FsdpJsonEndObject(j);
    if (predict) {
      FsdpJsonBeginObject(j, "prediction");
      FsdpJsonReal(j, "flop_per_step", flop);
      FsdpJsonReal(j, "compute_s", t_comp);
      FsdpJsonReal(j, "intra_comm_s", t_intra);
      FsdpJsonReal(j, "inter_comm_s", t_inter);
      FsdpJsonReal(j, "step_time_s_no_overlap", t_comp + t_intra + t_inter);
      FsdpJsonReal(j, "step_time_s_full_overlap",
                   t_comp > t_intra + t_inter ? t_comp : t_intra + t_inter);
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
           po.t.model_name, (long long)GptConfigParamCount(c), po.W, po.N, po.G, po.F, po.R,
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
           "grad buffers %.2f | activations %.2f%s | total %.2f\n",
           mem.param_shard / MiB, FsdpDtypeNames[po.param_dt], mem.low_shard / MiB,
           mem.grad_shard / MiB, mem.optim_state / MiB, mem.gather_buffer / MiB,
           mem.gather_slots, mem.compute_buffer / MiB, mem.grad_buffer / MiB,
           mem.activations / MiB, fo->recompute ? " (recomputed)" : "", mem_total / MiB);
    printf("%-15s %8s %16s %16s %16s\n", "per step", "calls", "bytes", "intra-node", "inter-node");
    for (int k = 0; k < FSDP_COLL_NKINDS; k++)
      printf("%-15s %8llu %16llu %16llu %16llu\n", FsdpCollKindNames[k],
             (unsigned long long)cm.calls[k], (unsigned long long)cm.bytes[k],
             (unsigned long long)cm.intra[k], (unsigned long long)cm.inter[k]);
    printf("%-15s %8s %16llu %16llu %16llu\n", "total", "", (unsigned long long)(intra + inter),
           (unsigned long long)intra, (unsigned long long)inter);
    if (predict)
      printf("predicted step: compute %.4g s + intra-node %.4g s + inter-node %.4g s = %.4g s "
             "without overlap, %.4g s with full overlap\n",
             t_comp, t_intra, t_inter, t_comp + t_intra + t_inter,
             t_comp > t_intra + t_inter ? t_comp : t_intra + t_inter);
  }
  fflush(stdout);
  PlanUnitsFree(u, nu);
  FsdpOptsDestroy(&db);
  return FSDP_SUCCESS;
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
