/* memory.h: what a rank of the planned run holds, byte by byte, as
 * FsdpRuntimeSetUp and the model's set-up allocate it ([Note: gather
 * memory], [Note: mixed precision] and [Note: gradient accumulation] in
 * runtime/fsdp.h; [Note: planning from the library] in plan/run.h). */
#ifndef FSDP_PLAN_MEMORY_H
#define FSDP_PLAN_MEMORY_H

#include <stdint.h>

#include "plan/units.h"

typedef struct {
  uint64_t param_shard;    /* fp32 master shards */
  uint64_t grad_shard;
  uint64_t low_shard;      /* -param_dtype bf16/fp16 copies of the shards */
  uint64_t optim_state;    /* AdamW exp_avg, exp_avg_sq */
  uint64_t gather_buffer;  /* the gather ring (FsdpGatherRingPlan) */
  uint64_t compute_buffer; /* fp32 compute buffers of a low -param_dtype */
  uint64_t grad_buffer;    /* unsharded gradients and their send/receive buffers */
  uint64_t activations;    /* the model's set-up (its family's sizing function) */
  uint64_t bf16_scratch;   /* -compute_dtype bf16: the matmuls' rounded operands */
  uint64_t naive_activations; /* what -attention naive would keep, for comparison */
  uint64_t total;          /* the sum of all but naive_activations */
  int gather_slots, grad_slots;
  int max_gathers_in_flight; /* the ring's plan of gathers in flight */
} FsdpPlanMemory;

/* Not collective.  After FsdpPlanRunCheck. */
int FsdpPlanMemoryCompute(const FsdpPlanRun *run, const FsdpPlanUnits *units, FsdpPlanMemory *mem);

#endif
