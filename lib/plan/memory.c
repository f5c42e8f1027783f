/* memory.c: what a rank of the planned run holds (memory.h). */
#include "plan/memory.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "model/family.h"

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

/* The gather ring: the runtime's own sizing function, not a copy of it. */
static int PlanGatherRing(const FsdpPlanRun *run, const FsdpPlanUnits *units, FsdpGatherRing *ring)
{
  int nu = units->nu;
  int64_t *unitP = calloc((size_t)nu + 1, sizeof *unitP);
  int *unit_is_root = calloc((size_t)nu + 1, sizeof *unit_is_root);
  if (!unitP || !unit_is_root) {
    free(unitP);
    free(unit_is_root);
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory planning the gather ring of %d units", nu);
  }
  for (int i = 0; i < nu; i++) {
    unitP[i] = FlatParamPaddedNumel(units->u[i].fp);
    unit_is_root[i] = units->u[i].is_root;
  }
  FsdpGatherRingPlan(&run->fsdp, run->F, unitP, unit_is_root, nu, units->stage_unit,
                     units->nstages, ring);
  free(unitP);
  free(unit_is_root);
  return FSDP_SUCCESS;
}

/* gradients: the shard itself (F = 1, fp32, no per-micro-step sums), a
 * persistent fp32 buffer per unit (-accum_comm 0), or a ring of two
 * slots plus the root's, each an fp32 buffer with the reduce-dtype send
 * and receive buffers it needs.  slotP, rootP: the largest non-root
 * unit's and the root's padded elements; sumP: all units'. */
static void PlanGradBuffers(const FsdpPlanRun *run, int nonroot, uint64_t slotP, uint64_t rootP,
                            uint64_t sumP, FsdpPlanMemory *mem)
{
  const FsdpRuntimeOptions *fo = &run->fsdp;
  uint64_t kr = FsdpDtypeSize(fo->reduce_dtype);
  int lowred = fo->reduce_dtype != FSDP_DTYPE_FP32;
  int K = fo->grad_accum > 0 ? fo->grad_accum : 1;
  int grad_is_shard = run->F == 1 && !lowred && (K == 1 || !fo->accum_comm);
  int persistent = K > 1 && !fo->accum_comm && !grad_is_shard;
  int with_recv = run->F > 1 && (lowred || (K > 1 && fo->accum_comm));
  uint64_t F = (uint64_t)run->F;
  if (persistent) mem->grad_buffer = 4 * sumP;
  if (!grad_is_shard && !persistent) {
    mem->grad_slots = nonroot < 2 ? nonroot : 2;
    uint64_t per[2] = {slotP, rootP};
    for (int k = 0; k < 2; k++) {
      uint64_t P = per[k], n = k ? (rootP ? 1 : 0) : (uint64_t)mem->grad_slots;
      mem->grad_buffer += n * (4 * P + (lowred ? P * kr : 0) + (with_recv ? P / F * kr : 0));
    }
  } else if (persistent && lowred) {
    mem->grad_slots = nonroot < 2 ? nonroot : 2;
    mem->grad_buffer += (uint64_t)mem->grad_slots * (slotP * kr + (run->F > 1 ? slotP / F * kr : 0));
    if (rootP) mem->grad_buffer += rootP * kr + (run->F > 1 ? rootP / F * kr : 0);
  }
}

/* What the model's set-up allocates, from its family's own sizing
 * function (with recomputation: [Note: GPT recomputation] in gpt.c), what
 * -attention naive would keep ([Note: flash attention]: the reduction
 * flash buys, reported beside the plan) and the bf16 matmul scratch. */
static void PlanModelBuffers(const FsdpPlanRun *run, FsdpPlanMemory *mem)
{
  const FsdpRuntimeOptions *fo = &run->fsdp;
  int T = (int)FsdpModelDescInt(&run->model, "seq_len");
  mem->activations = FsdpModelDescActivationBytes(&run->model, run->wrap, run->batch_size, T,
                                                 fo->recompute, fo->attention);
  mem->naive_activations = FsdpModelDescActivationBytes(&run->model, run->wrap, run->batch_size,
                                                       T, fo->recompute, FSDP_ATTENTION_NAIVE);
  if (fo->compute_dtype == FSDP_DTYPE_BF16) {
    char lib[64], kernel[160];
    int two_bytes = run->device_cuda; /* CUDA: bf16 scratch always */
    if (!two_bytes) {
      FsdpKernelsCpuGemm(1, lib, sizeof lib, kernel, sizeof kernel);
      two_bytes = strncmp(lib, "oneDNN", 6) == 0;
    }
    mem->bf16_scratch = PlanBf16ScratchBytes(&run->model, run->batch_size, T, two_bytes);
  }
}

int FsdpPlanMemoryCompute(const FsdpPlanRun *run, const FsdpPlanUnits *units, FsdpPlanMemory *mem)
{
  const FsdpRuntimeOptions *fo = &run->fsdp;
  memset(mem, 0, sizeof *mem);
  uint64_t rootP = 0, slotP = 0, sumP = 0;
  int nonroot = 0;
  for (int i = 0; i < units->nu; i++) {
    const FsdpPlanUnit *u = &units->u[i];
    uint64_t P = (uint64_t)FlatParamPaddedNumel(u->fp);
    mem->param_shard += (uint64_t)FlatParamShardNumel(u->fp) * 4; /* fp32 master shards */
    sumP += P;
    if (u->is_root) rootP = P;
    else {
      nonroot++;
      if (P > slotP) slotP = P;
    }
  }
  uint64_t kp = FsdpDtypeSize(fo->param_dtype);
  int low = fo->param_dtype != FSDP_DTYPE_FP32;
  mem->grad_shard = mem->param_shard;
  mem->optim_state = 2 * mem->param_shard; /* AdamW exp_avg, exp_avg_sq */
  if (low) mem->low_shard = mem->param_shard / 4 * kp;
  FsdpGatherRing ring;
  FSDP_CALL(PlanGatherRing(run, units, &ring));
  mem->gather_slots = ring.slots;
  mem->gather_buffer = ring.bytes;
  mem->max_gathers_in_flight = ring.max_in_flight;
  if (low) mem->compute_buffer = 4 * (rootP + slotP);
  PlanGradBuffers(run, nonroot, slotP, rootP, sumP, mem);
  PlanModelBuffers(run, mem);
  mem->total = mem->param_shard + mem->grad_shard + mem->low_shard + mem->optim_state +
               mem->gather_buffer + mem->compute_buffer + mem->grad_buffer + mem->activations +
               mem->bf16_scratch;
  return FSDP_SUCCESS;
}
