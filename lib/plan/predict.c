/* predict.c: the step time of the planned run (predict.h). */
#include "plan/predict.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/family.h"
#include "runtime/optim.h"

int FsdpPlanCheckProfile(const FsdpPlanRun *run, const char *path, const FsdpProfile *p)
{
  const char *want = run->device_cuda ? "nccl" : "mpi";
  if (strcmp(p->backend, want) != 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s was measured with the %s back-end but this plan "
               "runs on %s (-device %s): measure with fsdp-probe on the run's device",
               path, p->backend, want, run->device_cuda ? "cuda" : "cpu");
  if (p->ranks_per_node != run->G)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s was measured with %d ranks per node but the plan has "
               "%d (-ranks_per_node): node-level rates depend on it; measure again", path,
               p->ranks_per_node, run->G);
  if (p->nodes < run->N)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s was measured on %d node(s) but the plan spans %d: "
               "measure on at least as many nodes as the run uses", path, p->nodes, run->N);
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

/* [Note: the optimizer's bytes] What a step does per shard element outside
 * the stages, at the profile's AdamW rate (measured from memory, [Note:
 * AdamW from memory] in plan/probe.c): AdamW reads the parameter, gradient
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

double FsdpPlanContendedFactor(const FsdpPlanRun *run, const FsdpProfile *p, const char **why)
{
  if (!(p->contended_factor > 0)) {
    *why = "not in the profile (a described one, or from an fsdp-probe before it): 1";
    return 1.0;
  }
  int threads = p->threads > 0 ? p->threads : 1;
  if (p->cores_per_node <= 0 || (int64_t)run->G * threads < p->cores_per_node) {
    *why = "an idle core per node takes the communication threads: 1";
    return 1.0;
  }
  *why = "measured; the ranks' threads fill the node's cores";
  return p->contended_factor > 1.0 ? p->contended_factor : 1.0;
}

double FsdpPlanContendedCommFactor(const FsdpPlanRun *run, const FsdpProfile *p)
{
  const char *why;
  const FsdpProfileCurve *c = &p->coll[FSDP_PROFILE_WORLD][FSDP_COLL_ALL_REDUCE];
  if (FsdpPlanContendedFactor(run, p, &why) <= 1.0 || !(p->contended_allreduce_s > 0) ||
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

/* The per-unit and per-stage seconds the replay takes ([nunits] and
 * [nstages]), and the plan's shapes they come from. */
typedef struct {
  double *unit_s, *gather_s, *reduce_s, *optim_unit_s, *check_unit_s, *zero_unit_s;
  double *fwd_s, *bwd_s;
  int *nst, *last, *is_root; /* stages of a unit, its last stage, whether it is the root */
} StepTimes;

static void StepTimesFree(StepTimes *s)
{
  free(s->unit_s);
  free(s->gather_s);
  free(s->reduce_s);
  free(s->optim_unit_s);
  free(s->check_unit_s);
  free(s->zero_unit_s);
  free(s->fwd_s);
  free(s->bwd_s);
  free(s->nst);
  free(s->last);
  free(s->is_root);
}

static int StepTimesCreate(int nu, int nstages, StepTimes *s)
{
  s->unit_s = calloc((size_t)nu, sizeof *s->unit_s);
  s->gather_s = calloc((size_t)nu, sizeof *s->gather_s);
  s->reduce_s = calloc((size_t)nu, sizeof *s->reduce_s);
  s->optim_unit_s = calloc((size_t)nu, sizeof *s->optim_unit_s);
  s->check_unit_s = calloc((size_t)nu, sizeof *s->check_unit_s);
  s->zero_unit_s = calloc((size_t)nu, sizeof *s->zero_unit_s);
  s->fwd_s = calloc((size_t)nstages + 1, sizeof *s->fwd_s);
  s->bwd_s = calloc((size_t)nstages + 1, sizeof *s->bwd_s);
  s->nst = calloc((size_t)nu, sizeof *s->nst);
  s->last = calloc((size_t)nu, sizeof *s->last);
  s->is_root = calloc((size_t)nu, sizeof *s->is_root);
  if (!s->unit_s || !s->gather_s || !s->reduce_s || !s->optim_unit_s || !s->check_unit_s ||
      !s->zero_unit_s || !s->fwd_s || !s->bwd_s || !s->nst || !s->last || !s->is_root)
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory predicting a step");
  return FSDP_SUCCESS;
}

/* Compute per unit and micro-step: every 2-D parameter of a non-root unit
 * is a matmul weight (6 N C OC FLOP forward and backward, N = B T), the
 * root's largest 2-D parameter is the head; causal attention (12 B T^2 C
 * per block) and the memory-bound passes (the step's activations moved
 * three times: written in forward, read and their gradients written in
 * backward, at the streaming rate) are shared among the non-root units by
 * size (exact for equal blocks).  The unit's optimizer shares ([Note: the
 * optimizer's bytes]) and its gather and reduction (CallSeconds on the
 * run's groups) too. */
static void UnitTimes(const FsdpPlanRun *run, const FsdpProfile *p, const FsdpPlanUnits *units,
                      const FsdpGroup *shard, const FsdpGroup *replica,
                      uint64_t activation_bytes, StepTimes *s, FsdpPlanProfilePrediction *out)
{
  const FsdpModelDesc *md = &run->model;
  const FsdpPlanUnit *u = units->u;
  int nu = units->nu;
  double seq_len = (double)FsdpModelDescInt(md, "seq_len");
  double N = (double)run->batch_size * seq_len;
  FsdpDtype param_dt = run->fsdp.param_dtype, reduce_dt = run->fsdp.reduce_dtype;
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
    s->unit_s[i] = gemm + share * (attention + memory);
    out->gemm_s += gemm;
    s->is_root[i] = u[i].is_root;
    int64_t P = FlatParamPaddedNumel(u[i].fp), S = FlatParamShardNumel(u[i].fp);
    if (p->adamw_bytes_per_s > 0) {
      s->optim_unit_s[i] = kTailBytes * (double)S / p->adamw_bytes_per_s;
      s->check_unit_s[i] = kCheckBytes * (double)S / p->adamw_bytes_per_s;
      s->zero_unit_s[i] = kZeroBytes * (double)P / p->adamw_bytes_per_s;
    }
    if (run->F > 1) {
      s->gather_s[i] = CallSeconds(p, FSDP_COLL_ALL_GATHER, shard, P, param_dt);
      s->reduce_s[i] = CallSeconds(p, FSDP_COLL_REDUCE_SCATTER, shard, P, reduce_dt) +
                       CallSeconds(p, FSDP_COLL_ALL_REDUCE, replica, S, reduce_dt);
    } else {
      s->reduce_s[i] = CallSeconds(p, FSDP_COLL_ALL_REDUCE, replica, P, reduce_dt);
    }
  }
  out->attention_s = attention;
  out->memory_s = memory;
}

/* A unit's compute is split evenly over its stages (the root's all on its
 * last forward stage, the head), a third forward and two thirds
 * backward. */
static void ModelledStages(const FsdpPlanRun *run, const FsdpPlanUnits *units, StepTimes *s,
                           FsdpPlanProfilePrediction *out)
{
  const int *stage_unit = units->stage_unit;
  int nstages = units->nstages;
  for (int st = 0; st < nstages; st++) {
    s->nst[stage_unit[st]]++;
    s->last[stage_unit[st]] = st;
  }
  for (int st = 0; st < nstages; st++) {
    int i = stage_unit[st];
    double t = units->u[i].is_root ? (st == s->last[i] ? s->unit_s[i] : 0.0)
                                   : s->unit_s[i] / s->nst[i];
    s->fwd_s[st] = t / 3.0;
    s->bwd_s[st] = 2.0 * t / 3.0;
    /* [Note: activation recomputation] (fsdp.h): a non-root stage runs its
     * forward again right before its backward */
    if (run->fsdp.recompute && !units->u[i].is_root) {
      s->bwd_s[st] += s->fwd_s[st];
      out->recompute_s += s->fwd_s[st];
    }
  }
}

/* [Note: stages measured] (plan/probe.c): the profile ran this model's
 * stages (same model, sequence length and stages); its times, scaled by
 * the micro-batch, replace the modelled ones.  *measured_s: their sum
 * (out->stages_measured 0: not this model's, nothing replaced). */
static void MeasuredStages(const FsdpPlanRun *run, const FsdpProfile *p, const FsdpPlanUnits *units,
                           StepTimes *s, FsdpPlanProfilePrediction *out, double *measured_s)
{
  const FsdpPlanUnit *u = units->u;
  const int *stage_unit = units->stage_unit;
  int nstages = units->nstages;
  *measured_s = 0;
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
                         strcmp(p->model, run->model_name) == 0 &&
                         p->stage_params == FsdpModelDescParamCount(&run->model) &&
                         (double)p->stage_seq_len == (double)FsdpModelDescInt(&run->model, "seq_len");
  if (!out->stages_measured) return;
  /* the plan's micro-batch, else the nearest measured one scaled */
  int kb = 0;
  for (int k = 1; k < p->nstage_batches; k++)
    if (abs(p->stage_batch[k] - run->batch_size) < abs(p->stage_batch[kb] - run->batch_size))
      kb = k;
  double scale = (double)run->batch_size / (double)p->stage_batch[kb];
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
    s->fwd_s[st] = s->bwd_s[st] = 0;
    for (int m = m0; m < m1; m++) {
      s->fwd_s[st] += scale * p->stage_fwd_s[kb][m];
      s->bwd_s[st] += scale * p->stage_bwd_s[kb][m];
    }
    if (run->fsdp.recompute && !u[stage_unit[st]].is_root) {
      s->bwd_s[st] += s->fwd_s[st];
      out->recompute_s += s->fwd_s[st];
    }
    *measured_s += s->fwd_s[st] + s->bwd_s[st];
  }
}

/* The schedule replayed over the times (plan/steptime.h), with the
 * profile's factors for what runs beside what. */
static int Replay(const FsdpPlanRun *run, const FsdpProfile *p, const FsdpPlanUnits *units,
                  const StepTimes *s, int gather_slots, int grad_slots, int want_events,
                  FsdpPlanProfilePrediction *out)
{
  int K = run->fsdp.grad_accum > 0 ? run->fsdp.grad_accum : 1;
  int nu = units->nu, nstages = units->nstages;
  FsdpStepTimeInput in = {&run->fsdp, run->F, run->R, nu, nstages, s->is_root, units->stage_unit,
                          s->fwd_s, s->bwd_s, s->gather_s, s->reduce_s, out->optimizer_s,
                          gather_slots, grad_slots, 0, 0, NULL, 1.0, 1.0, 0.0, 1.0, NULL, NULL};
  out->contended = in.contended = FsdpPlanContendedFactor(run, p, &out->contended_why);
  out->contended_comm = in.comm_contended = FsdpPlanContendedCommFactor(run, p);
  /* [Note: joining a collective], [Note: two collectives at once]
   * (plan/steptime.h): as measured (0 in a profile without them) */
  out->join_fraction = in.join_fraction = p->join_fraction;
  out->concurrent = in.concurrent = p->concurrent_factor > 1.0 ? p->concurrent_factor : 1.0;
  /* [Note: the gradient tail] (runtime/optim.c): AdamW per unit as the
   * reductions land when nothing gates it, in the unit's share of the
   * optimizer (its shard's elements) */
  in.tail = run->device_cuda ? FSDP_TAIL_NONE : run->optim_overlap; /* CPU only (train.c) */
  in.tail_early = !(run->grad_clip > 0) && run->fsdp.param_dtype != FSDP_DTYPE_FP16 &&
                  run->fsdp.reduce_dtype != FSDP_DTYPE_FP16;
  in.optim_unit_s = s->optim_unit_s;
  in.check_unit_s = s->check_unit_s; /* the sums of squares, where AdamW waits for the last unit */
  in.zero_unit_s = s->zero_unit_s;
  int max_ev = want_events ? 8 * K * (nstages + nu) + 8 : 0;
  if (max_ev) {
    out->events = calloc((size_t)max_ev, sizeof *out->events);
    if (!out->events) max_ev = 0;
  }
  return FsdpStepTimeSimulate(&in, &out->sim, out->events, max_ev, &out->nevents);
}

/* The step predicted from a profile: the stages' compute modelled from
 * the profile's rates (UnitTimes, ModelledStages) or, for the model the
 * probe ran, its measured stage times (MeasuredStages); AdamW at 40 bytes
 * per shard element ([Note: the optimizer's bytes]); each unit's gather
 * and reduction on the run's groups; the schedule replayed over them
 * (Replay). */
static int PredictFromProfile(const FsdpPlanRun *run, const FsdpProfile *p,
                              const FsdpPlanUnits *units, const FsdpGroup *shard,
                              const FsdpGroup *replica, uint64_t activation_bytes,
                              uint64_t shard_elems, int gather_slots, int grad_slots,
                              int want_events, FsdpPlanProfilePrediction *out)
{
  int K = run->fsdp.grad_accum > 0 ? run->fsdp.grad_accum : 1;
  StepTimes s;
  memset(&s, 0, sizeof s);
  int err = StepTimesCreate(units->nu, units->nstages, &s);
  if (err) {
    StepTimesFree(&s);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  UnitTimes(run, p, units, shard, replica, activation_bytes, &s, out);
  ModelledStages(run, units, &s, out);
  double measured_s = 0;
  MeasuredStages(run, p, units, &s, out, &measured_s);
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
  err = Replay(run, p, units, &s, gather_slots, grad_slots, want_events, out);
  StepTimesFree(&s);
  return err;
}

/* Predicted step time from rates: compute from the usual 6 N + 6 L T C
 * FLOP per token of training; communication from the bytes this rank
 * receives, the inter-node part sharing the node's link with the other
 * G - 1 ranks. */
static void PredictFromRates(const FsdpPlanRun *run, const FsdpPlanUnits *units,
                             const FsdpPlanTraffic *traffic, const FsdpPlanPredictOptions *o,
                             FsdpPlanPrediction *out)
{
  const FsdpModelDesc *c = &run->model;
  double seq_len = (double)FsdpModelDescInt(c, "seq_len");
  double n_layer = (double)FsdpModelDescInt(c, "n_layer"), n_embd = (double)FsdpModelDescInt(c, "n_embd");
  double tokens = (double)run->batch_size * seq_len;
  out->flop = tokens * (6.0 * (double)FsdpModelDescParamCount(c) + 6.0 * n_layer * seq_len * n_embd);
  /* -recompute 1 runs the blocks' forward (a third of their training
   * FLOP) once more ([Note: activation recomputation], fsdp.h): time, not
   * model FLOP (flop_per_step and MFU leave it out).  The blocks'
   * parameters are the non-root units' (GPT: 12 C^2 + 13 C a block). */
  double block_params = 0.0;
  for (int i = 0; i < units->nu; i++)
    if (!units->u[i].is_root) block_params += (double)FlatParamNumel(units->u[i].fp);
  out->flop_recompute =
      run->fsdp.recompute ? tokens * (2.0 * block_params + 2.0 * n_layer * seq_len * n_embd) : 0.0;
  out->compute_s = o->flops > 0 ? (out->flop + out->flop_recompute) / o->flops : 0.0;
  out->intra_s = o->intra_bw > 0 ? traffic->intra_total / o->intra_bw : 0.0;
  out->inter_s = o->inter_bw > 0 ? (double)run->G * traffic->inter_total / o->inter_bw : 0.0;
  out->on = o->flops > 0 || o->intra_bw > 0 || o->inter_bw > 0;
  int K = run->fsdp.grad_accum > 0 ? run->fsdp.grad_accum : 1;
  out->tokens_per_step = (double)run->W * run->batch_size * seq_len * K;
}

/* The profile's prediction into out->profile, its compute and
 * communication seconds into out's. */
static int PredictWithProfile(const FsdpPlanRun *run, const FsdpPlanUnits *units,
                              const FsdpPlanMemory *mem, const FsdpPlanTraffic *traffic,
                              const FsdpGroup *shard, const FsdpGroup *replica,
                              const FsdpPlanPredictOptions *o, const FsdpProfile *cached,
                              FsdpPlanPrediction *out)
{
  FsdpPlanProfilePrediction *pp = &out->profile;
  FsdpProfile *prof = malloc(sizeof *prof);
  FSDP_CHECK_ALLOC(prof, sizeof *prof);
  int err = FSDP_SUCCESS;
  if (cached) *prof = *cached;
  else err = FsdpProfileRead(o->profile, prof);
  if (!err) err = FsdpPlanCheckProfile(run, o->profile, prof);
  if (!err) pp->peak = prof->peak_flops_per_s;
  /* [Note: sustained speed] (plan/probe.c): every time at the speed the
   * machine sustains (this copy only: -tune hands the same profile to
   * every candidate) */
  pp->sustained = !err && prof->sustained_factor > 1.0 ? prof->sustained_factor : 1.0;
  if (!err) FsdpProfileScaleTimes(prof, pp->sustained);
  if (!err)
    err = PredictFromProfile(run, prof, units, shard, replica,
                             /* the activations written and read, whether kept or
                              * recomputed: the memory-bound passes' bytes */
                             FsdpModelDescActivationBytes(
                                 &run->model, run->wrap, run->batch_size,
                                 (int)FsdpModelDescInt(&run->model, "seq_len"), 0,
                                 run->fsdp.attention),
                             mem->param_shard / 4, mem->gather_slots, mem->grad_slots,
                             o->schedule, pp);
  out->intra_s = out->inter_s = 0;
  for (int k = 0; !err && k < FSDP_COLL_NKINDS; k++) {
    double a = 0, e = 0;
    CollSeconds(prof, (FsdpCollKind)k, k == FSDP_COLL_ALL_REDUCE ? replica : shard,
                traffic->calls[k], traffic->intra[k], traffic->inter[k], &a, &e);
    pp->coll_s[k] = a + e;
    out->intra_s += a;
    out->inter_s += e;
  }
  free(prof);
  if (err) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  out->on = 1;
  out->compute_s = pp->compute_s;
  return FSDP_SUCCESS;
}

int FsdpPlanPredict(const FsdpPlanRun *run, const FsdpPlanUnits *units, const FsdpPlanMemory *mem,
                    const FsdpPlanTraffic *traffic, const FsdpGroup *shard,
                    const FsdpGroup *replica, const FsdpPlanPredictOptions *o,
                    const FsdpProfile *cached, FsdpPlanPrediction *out)
{
  memset(out, 0, sizeof *out);
  PredictFromRates(run, units, traffic, o, out);
  out->from_profile = o->profile && o->profile[0] != '\0';
  if (out->from_profile)
    FSDP_CALL(PredictWithProfile(run, units, mem, traffic, shard, replica, o, cached, out));
  return FSDP_SUCCESS;
}

void FsdpPlanPredictionFree(FsdpPlanPrediction *p)
{
  free(p->profile.events);
  p->profile.events = NULL;
}
