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
 * they mean the same thing (written for both by driver/summary.c).  The
 * numbers come from the plan layer (plan/plan.h; [Note: planning from the
 * library] in plan/run.h), -tune's search too (plan/tune.h): this program
 * reads the options, calls it, and prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "base/json.h"
#include "driver/summary.h"
#include "driver/train.h"
#include "plan/plan.h"
#include "plan/tune.h"

static const char kHelp[] =
    "fsdp-plan: per-rank memory and per-step collective bytes (intra/inter node) of\n"
    "an fsdp-train run, computed without running it (one process, nothing big\n"
    "allocated).  Takes fsdp-train's options plus -world_size W; with -flops and\n"
    "-intra_bw/-inter_bw it also predicts the step time.\n"
    "Usage: fsdp-plan -world_size W [-ranks_per_node G] [fsdp-train options]\n";

typedef struct {
  FsdpTrainOptions t;     /* everything fsdp-train reads */
  int W;                  /* -world_size */
  int rank;               /* the rank whose counters are planned */
  double intra_bw, inter_bw, flops; /* bytes/s per rank, bytes/s per node, FLOP/s per rank */
  const char *profile;    /* -profile FILE: measured rates (fsdp-probe) */
  int schedule;           /* -plan_schedule: list the replayed step's events */
  int tune, tune_top;     /* -tune: search the options ([Note: the tuner] in plan/tune.h) */
  double memory_limit;    /* -memory_limit bytes per rank (0: 90% of the profile's) */
  const char *tune_options_out;/* -tune_options_out FILE: the winner as an options file */
} PlanOptions;

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

/* The run the plan layer plans, from fsdp-train's options. */
static void PlanRunFromOptions(const PlanOptions *po, FsdpPlanRun *run)
{
  memset(run, 0, sizeof *run);
  run->model = po->t.model;
  snprintf(run->model_name, sizeof run->model_name, "%s", po->t.model_name);
  run->wrap = po->t.wrap;
  run->batch_size = po->t.batch_size;
  run->seed = po->t.seed;
  run->topo = po->t.topo;
  run->fsdp = po->t.fsdp;
  run->grad_clip = po->t.optim.grad_clip;
  run->optim_overlap = po->t.optim_overlap;
  run->device_cuda = po->t.device_cuda;
  run->W = po->W;
  run->rank = po->rank;
}

static FsdpPlanPredictOptions PredictOptions(const PlanOptions *po)
{
  FsdpPlanPredictOptions o = {po->flops, po->intra_bw, po->inter_bw, po->profile, po->schedule};
  return o;
}

/* -summary json: memory, per-step collectives and precision, with the
 * same keys as fsdp-train's where they mean the same thing ([Note: one
 * writer for the shared keys] in driver/summary.h). */
static void PrintJsonRun(FsdpJson j, const PlanOptions *po, const FsdpPlan *pl)
{
  const FsdpPlanRun *r = &pl->run;
  const FsdpPlanMemory *mem = &pl->mem;
  const FsdpPlanTraffic *cm = &pl->traffic;
  FsdpSummaryTopology topo = {r->W, r->F, r->R, r->G, r->N};
  FsdpSummaryRunMembers(j, &po->t, &topo);
  FsdpJsonInt(j, "plan_rank", r->rank);
  FsdpJsonBeginArray(j, "units");
  for (int i = 0; i < pl->units->nu; i++)
    FsdpSummaryUnit(j, pl->units->u[i].name, pl->units->u[i].fp);
  FsdpJsonEndArray(j);
  FsdpSummaryMemory sm = {mem->param_shard,   mem->grad_shard,  mem->optim_state,
                          mem->gather_buffer, mem->grad_buffer, mem->compute_buffer,
                          mem->activations};
  FsdpSummaryBeginMemory(j, &sm);
  FsdpJsonUint(j, "low_shard_bytes", mem->low_shard);
  FsdpJsonInt(j, "gather_slots", mem->gather_slots);
  FsdpJsonInt(j, "grad_slots", mem->grad_slots);
  FsdpJsonUint(j, "bf16_matmul_scratch_bytes", mem->bf16_scratch);
  FsdpJsonUint(j, "naive_attention_activation_bytes", mem->naive_activations);
  FsdpJsonUint(j, "total_bytes", mem->total);
  FsdpJsonEndObject(j);
  FsdpCommCounters per_step;
  memset(&per_step, 0, sizeof per_step);
  memcpy(per_step.bytes, cm->bytes, sizeof cm->bytes);
  memcpy(per_step.calls, cm->calls, sizeof cm->calls);
  per_step.intra_bytes = cm->intra_total;
  per_step.inter_bytes = cm->inter_total;
  FsdpSummaryBeginComm(j, &per_step);
  static const char *const kKey[FSDP_COLL_NKINDS][2] = {
      {"all_gather_intra_node_bytes", "all_gather_inter_node_bytes"},
      {"reduce_scatter_intra_node_bytes", "reduce_scatter_inter_node_bytes"},
      {"all_reduce_intra_node_bytes", "all_reduce_inter_node_bytes"}};
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
    FsdpJsonUint(j, kKey[k][0], cm->intra[k]);
    FsdpJsonUint(j, kKey[k][1], cm->inter[k]);
  }
  FsdpJsonEndObject(j);
  FsdpSummaryBeginCommTime(j, mem->max_gathers_in_flight);
  FsdpJsonEndObject(j);
  FsdpSummaryBeginPrecision(j, &r->fsdp, r->device_cuda);
  FsdpJsonEndObject(j);
}

/* -summary json: "prediction" (rates or a profile) */
static void PrintJsonPrediction(FsdpJson j, const PlanOptions *po, const FsdpPlan *pl)
{
  const FsdpPlanPrediction *pr = &pl->pred;
  const FsdpPlanProfilePrediction *pp = &pr->profile;
  double t_comp = pr->compute_s, t_intra = pr->intra_s, t_inter = pr->inter_s;
  FsdpJsonBeginObject(j, "prediction");
  FsdpJsonReal(j, "flop_per_step", pr->flop);
  if (pl->run.fsdp.recompute) FsdpJsonReal(j, "recompute_flop_per_step", pr->flop_recompute);
  FsdpJsonReal(j, "compute_s", t_comp);
  FsdpJsonReal(j, "intra_comm_s", t_intra);
  FsdpJsonReal(j, "inter_comm_s", t_inter);
  FsdpJsonReal(j, "step_time_s_no_overlap", t_comp + t_intra + t_inter);
  FsdpJsonReal(j, "step_time_s_full_overlap",
               t_comp > t_intra + t_inter ? t_comp : t_intra + t_inter);
  if (pr->from_profile) {
    FsdpJsonString(j, "profile", po->profile);
    FsdpJsonBool(j, "stages_measured", pp->stages_measured);
    FsdpJsonReal(j, "contended_factor", pp->contended);
    FsdpJsonString(j, "contended_factor_from", pp->contended_why);
    FsdpJsonReal(j, "contended_comm_factor", pp->contended_comm);
    FsdpJsonReal(j, "join_fraction", pp->join_fraction);
    FsdpJsonReal(j, "sustained_factor", pp->sustained);
    FsdpJsonReal(j, "concurrent_factor", pp->concurrent);
    FsdpJsonReal(j, "gemm_s", pp->gemm_s);
    FsdpJsonReal(j, "attention_s", pp->attention_s);
    FsdpJsonReal(j, "memory_bound_s", pp->memory_s);
    FsdpJsonReal(j, "optimizer_s", pp->optimizer_s);
    if (pl->run.fsdp.recompute) FsdpJsonReal(j, "recompute_s", pp->recompute_s);
    static const char *const kCollKey[FSDP_COLL_NKINDS] = {"all_gather_s", "reduce_scatter_s",
                                                           "all_reduce_s"};
    for (int k = 0; k < FSDP_COLL_NKINDS; k++) FsdpJsonReal(j, kCollKey[k], pp->coll_s[k]);
  }
  FsdpJsonEndObject(j);
}

/* -summary json: "predicted", the step replayed over the profile's rates
 * ([Note: the schedule replayed] in plan/steptime.h) */
static void PrintJsonPredicted(FsdpJson j, const PlanOptions *po, const FsdpPlan *pl)
{
  const FsdpPlanProfilePrediction *pp = &pl->pred.profile;
  int K = pl->run.fsdp.grad_accum > 0 ? pl->run.fsdp.grad_accum : 1;
  FsdpJsonBeginObject(j, "predicted");
  FsdpJsonReal(j, "step_time_ms", 1e3 * pp->sim.step_s);
  FsdpJsonReal(j, "exposed_comm_ms", 1e3 * pp->sim.exposed_s);
  FsdpJsonReal(j, "compute_ms", 1e3 * pp->sim.compute_s);
  FsdpJsonReal(j, "contention_ms", 1e3 * pp->sim.contention_s);
  FsdpJsonReal(j, "gather_stream_busy_ms", 1e3 * pp->sim.gather_busy_s);
  FsdpJsonReal(j, "reduce_stream_busy_ms", 1e3 * pp->sim.reduce_busy_s);
  FsdpJsonReal(j, "tokens_per_s", FsdpPlanTokensPerSecond(pl));
  FsdpJsonInt(j, "max_gathers_in_flight", pp->sim.max_in_flight);
  /* model FLOP utilization: the step's training FLOP (flop_per_step
   * above, every micro-step) over the time and the ranks' peak */
  FsdpJsonReal(j, "mfu", pp->peak > 0 && pp->sim.step_s > 0
                             ? pl->pred.flop * K / (pp->sim.step_s * pp->peak) : 0.0);
  if (po->schedule) {
    FsdpJsonBeginArray(j, "schedule");
    for (int e = 0; e < pp->nevents; e++) {
      FsdpJsonBeginObject(j, NULL);
      FsdpJsonString(j, "event", FsdpStepEventNames[pp->events[e].kind]);
      FsdpJsonInt(j, "unit", pp->events[e].unit);
      FsdpJsonInt(j, "micro", pp->events[e].micro);
      FsdpJsonReal(j, "t_ms", 1e3 * pp->events[e].t);
      FsdpJsonEndObject(j);
    }
    FsdpJsonEndArray(j);
  }
  FsdpJsonEndObject(j);
}

static int PrintJson(const PlanOptions *po, const FsdpPlan *pl)
{
  FsdpJson j = NULL;
  FSDP_CALL(FsdpJsonCreate(&j));
  FsdpJsonBeginObject(j, NULL);
  PrintJsonRun(j, po, pl);
  if (pl->pred.on) PrintJsonPrediction(j, po, pl);
  if (pl->pred.from_profile) PrintJsonPredicted(j, po, pl);
  FsdpJsonEndObject(j);
  FSDP_CALL(FsdpSummaryPrint(&j, stdout));
  return FSDP_SUCCESS;
}

/* The text report: the run, its units, memory, per-step collectives and
 * the predictions. */
static void PrintText(const PlanOptions *po, const FsdpPlan *pl)
{
  const FsdpPlanRun *r = &pl->run;
  const FsdpRuntimeOptions *fo = &r->fsdp;
  const FsdpPlanMemory *mem = &pl->mem;
  const FsdpPlanTraffic *cm = &pl->traffic;
  const FsdpPlanPrediction *pr = &pl->pred;
  const FsdpPlanProfilePrediction *pp = &pr->profile;
  int K = fo->grad_accum > 0 ? fo->grad_accum : 1, raf = fo->reshard_after_forward;
  const char *mode = r->W == 1      ? ""
                     : r->F == r->W ? "full sharding"
                     : r->F == 1    ? "replication"
                                    : "hybrid";
  printf("fsdp-plan: %s (%lld parameters) on %d ranks (%d nodes x %d), F %d, R %d%s%s, "
         "wrap %d, %s, limit %d, prefetch %s, params %s, reduce %s, grad_accum %d%s; rank %d\n",
         r->model_name, (long long)FsdpModelDescParamCount(&r->model), r->W, r->N, r->G, r->F,
         r->R, mode[0] ? ": " : "", mode, r->wrap, raf ? "RAF" : "NRAF", fo->limit_all_gathers,
         FsdpPrefetchNames[fo->prefetch], FsdpDtypeNames[fo->param_dtype],
         FsdpDtypeNames[fo->reduce_dtype], K, K > 1 && !fo->accum_comm ? " (reduce once)" : "",
         r->rank);
  printf("%-10s %14s %14s %14s\n", "unit", "numel", "padded", "shard");
  for (int i = 0; i < pl->units->nu; i++) {
    const FsdpPlanUnit *u = &pl->units->u[i];
    printf("%-10s %14lld %14lld %14lld\n", u->name, (long long)FlatParamNumel(u->fp),
           (long long)FlatParamPaddedNumel(u->fp), (long long)FlatParamShardNumel(u->fp));
  }
  const double MiB = 1048576.0;
  printf("memory per rank (MiB): param shards %.2f (+ %s copies %.2f) | grad shards %.2f | "
         "optimizer %.2f | gather ring %.2f (%d slots + root) | fp32 compute buffers %.2f | "
         "grad buffers %.2f | activations %.2f%s (%s attention; naive %.2f) | total %.2f\n",
         mem->param_shard / MiB, FsdpDtypeNames[fo->param_dtype], mem->low_shard / MiB,
         mem->grad_shard / MiB, mem->optim_state / MiB, mem->gather_buffer / MiB,
         mem->gather_slots, mem->compute_buffer / MiB, mem->grad_buffer / MiB,
         mem->activations / MiB, fo->recompute ? " (recomputed)" : "",
         FsdpAttentionNames[fo->attention], mem->naive_activations / MiB, mem->total / MiB);
  printf("%-15s %8s %16s %16s %16s\n", "per step", "calls", "bytes", "intra-node", "inter-node");
  for (int k = 0; k < FSDP_COLL_NKINDS; k++)
    printf("%-15s %8llu %16llu %16llu %16llu\n", FsdpCollKindNames[k],
           (unsigned long long)cm->calls[k], (unsigned long long)cm->bytes[k],
           (unsigned long long)cm->intra[k], (unsigned long long)cm->inter[k]);
  printf("%-15s %8s %16llu %16llu %16llu\n", "total", "",
         (unsigned long long)(cm->intra_total + cm->inter_total),
         (unsigned long long)cm->intra_total, (unsigned long long)cm->inter_total);
  if (pr->from_profile) {
    printf("predicted from %s (schedule replayed): step %.4g ms, exposed communication %.4g ms, "
           "compute %.4g ms, %.4g tokens/s, MFU %.1f%%\n",
           po->profile, 1e3 * pp->sim.step_s, 1e3 * pp->sim.exposed_s, 1e3 * pp->sim.compute_s,
           FsdpPlanTokensPerSecond(pl),
           pp->peak > 0 && pp->sim.step_s > 0 ? 100.0 * pr->flop * K / (pp->sim.step_s * pp->peak)
                                              : 0.0);
    printf("compute beside communication: x%.3f (%s), %.4g ms of the step; communication "
           "beside compute: x%.3f\n", pp->contended, pp->contended_why,
           1e3 * pp->sim.contention_s, pp->contended_comm);
    printf("a collective waits %.3g of the compute before it for its group's ranks to join; "
           "two at once take x%.3f their time alone; the machine sustains 1/%.3f of its "
           "typical speed\n", pp->join_fraction, pp->concurrent, pp->sustained);
  }
  if (pr->on)
    printf("predicted step: compute %.4g s + intra-node %.4g s + inter-node %.4g s = %.4g s "
           "without overlap, %.4g s with full overlap\n",
           pr->compute_s, pr->intra_s, pr->inter_s, pr->compute_s + pr->intra_s + pr->inter_s,
           pr->compute_s > pr->intra_s + pr->inter_s ? pr->compute_s : pr->intra_s + pr->inter_s);
}

/* One plan of the options read, printed on rank 0. */
static int PlanOnce(const PlanOptions *po)
{
  FsdpPlanRun run;
  PlanRunFromOptions(po, &run);
  FsdpPlanPredictOptions o = PredictOptions(po);
  FsdpPlan plan;
  int err = FsdpPlanCompute(&run, &o, NULL, NULL, &plan);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!err && rank == 0 && po->t.summary == FSDP_SUMMARY_JSON) err = PrintJson(po, &plan);
  else if (!err && rank == 0) PrintText(po, &plan);
  fflush(stdout);
  FsdpPlanFree(&plan);
  return err;
}

/* -tune: the search, its best candidates printed on rank 0, the winner
 * written with -tune_options_out. */
static int Tune(const PlanOptions *po)
{
  FsdpPlanRun run;
  PlanRunFromOptions(po, &run);
  FsdpPlanPredictOptions o = PredictOptions(po);
  FsdpTuneResult res;
  int err = FsdpTune(&run, &o, po->memory_limit, &res);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!err && rank == 0) {
    const FsdpPlanRun *r = &res.run;
    const FsdpTuneCandidate *c = res.c;
    int top = po->tune_top < (int)res.n ? po->tune_top : (int)res.n;
    printf("fsdp-plan -tune: %s on %d ranks (%d nodes x %d), %d sequences per rank per step, "
           "profile %s (%s); %d configurations, %zu fit %.3f GiB per rank\n",
           r->model_name, r->W, r->N, r->G, res.per_rank, po->profile, res.source, res.tried,
           res.n, res.limit / 1073741824.0);
    printf("fsdp-plan -tune: compute beside communication x%.3f (%s), communication beside "
           "compute x%.3f\n", res.contended, res.contended_why, res.contended_comm);
    printf("%4s %5s %4s %-8s %4s %4s %4s %4s %3s %3s %12s %12s %14s %10s\n", "rank", "F",
           "wrap", "prefetch", "RAF", "rc", "B", "K", "ac", "L", "step ms", "exposed ms",
           "tokens/s", "GiB/rank");
    for (int i = 0; i < top; i++)
      printf("%4d %5d %4d %-8s %4d %4d %4d %4d %3d %3d %12.4g %12.4g %14.6g %10.3f\n", i + 1,
             c[i].F, c[i].wrap, FsdpPrefetchNames[c[i].prefetch], c[i].raf, c[i].rc, c[i].B,
             c[i].K, c[i].ac, c[i].L,
             1e3 * c[i].o.step_s, 1e3 * c[i].o.exposed_s, c[i].o.tokens_per_s,
             c[i].o.mem_total / 1073741824.0);
    if (po->tune_options_out[0]) {
      err = FsdpTuneWriteOptions(po->tune_options_out, &res, po->profile, &c[0]);
      if (!err) printf("fsdp-plan -tune: wrote the winner to %s\n", po->tune_options_out);
    }
    fflush(stdout);
  }
  FsdpTuneResultFree(&res);
  return err;
}

static int ReadOptions(FsdpOpts db, void *state) { return PlanOptionsFromDb(db, state); }

/* Not collective in effect (every rank plans alike, rank 0 prints). */
static int Plan(FsdpProgramRun *r)
{
  PlanOptions *po = r->state;
  return po->tune ? Tune(po) : PlanOnce(po);
}

static PlanOptions options;

/* Every failure of a plan is found alike on every rank: main finalizes. */
static const FsdpProgram kProgram = {.name = "fsdp-plan",
                                     .help = kHelp,
                                     .on_failure = FSDP_PROGRAM_FINALIZE_ON_FAILURE,
                                     .state = &options,
                                     .read_options = ReadOptions,
                                     .run = Plan};

int main(int argc, char **argv) { return FsdpProgramMain(argc, argv, &kProgram); }
