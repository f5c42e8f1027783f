/* summary.h: the members of the -summary json object that fsdp-train (what
 * a run measured) and fsdp-plan (what it computes a run will do) share.
 *
 * [Note: one writer for the shared keys] tests/test_plan.sh holds a plan's
 * numbers against a run's under the same keys, and scripts read either.  So
 * the keys both write come from these functions only, and neither program
 * spells them: a key renamed here is renamed for both, a key one of them
 * drops fails the same test.  Each program adds its own members after the
 * shared ones: a Begin function opens the object with the shared members
 * and leaves it open for the caller's own, which ends it
 * (FsdpJsonEndObject).  The JSON contract (key names and meaning) is
 * docs/design.md §7 ("Summary") and §9; the writer is base/json.h.
 */
#ifndef FSDP_SUMMARY_H
#define FSDP_SUMMARY_H

#include <stdint.h>
#include <stdio.h>

#include "base/json.h"
#include "comm/coll.h"
#include "driver/train.h"
#include "runtime/flatparam.h"
#include "runtime/fsdp.h"

typedef struct {
  int world_size, sharding_factor, replica_size, ranks_per_node, nodes;
} FsdpSummaryTopology;

/* Per-rank bytes both know: the run from its allocations, the plan from
 * the same sizing rules. */
typedef struct {
  uint64_t param_shard, grad_shard, optim_state, gather_buffer, grad_buffer, compute_buffer;
  /* activations and backward scratch, all allocated at set-up, so also
   * their peak (GptActivationBytes, [Note: activation recomputation]) */
  uint64_t activations;
} FsdpSummaryMemory;

/* Into the open top-level object: world_size, sharding_factor,
 * replica_size, ranks_per_node, nodes, model {name, n_layer, n_embd,
 * n_head, vocab_size, seq_len, param_count}, batch_size, wrap,
 * reshard_after_forward, limit_all_gathers, grad_accum, accum_comm,
 * prefetch, recompute. */
void FsdpSummaryRunMembers(FsdpJson j, const FsdpTrainOptions *o, const FsdpSummaryTopology *t);

/* One element of the "units" array: {name, numel, padded_numel,
 * shard_numel} of the unit's FlatParam (shard_numel: this rank's). */
void FsdpSummaryUnit(FsdpJson j, const char *name, FlatParam fp);

/* Open "memory" with param_shard_bytes, grad_shard_bytes,
 * optim_state_bytes, gather_buffer_bytes, grad_buffer_bytes,
 * compute_buffer_bytes, activation_bytes. */
void FsdpSummaryBeginMemory(FsdpJson j, const FsdpSummaryMemory *m);

/* Open "comm_per_step" with {all_gather,reduce_scatter,all_reduce}_bytes,
 * the same three _calls, intra_node_bytes and inter_node_bytes of one
 * step (scalar_calls is the caller's: the plan does not count them). */
void FsdpSummaryBeginComm(FsdpJson j, const FsdpCommCounters *per_step);

/* Open "comm_time_per_step" with max_gathers_in_flight. */
void FsdpSummaryBeginCommTime(FsdpJson j, int max_gathers_in_flight);

/* Open "precision" with param_dtype, reduce_dtype, compute_dtype and
 * gemm {library, kernel}: the GEMM the matmuls run on (cuda: cuBLASLt;
 * cpu: kernels.h FsdpKernelsCpuGemm for compute_dtype). */
void FsdpSummaryBeginPrecision(FsdpJson j, const FsdpRuntimeOptions *o, int device_cuda);

/* "val_losses": [[step, loss], ...] of the run's validations ([] when it
 * validated none). */
void FsdpSummaryValLosses(FsdpJson j, const int64_t *steps, const double *losses, int n);

/* Print the finished document as one line of out (the summary is the last
 * line of stdout) and destroy it. */
int FsdpSummaryPrint(FsdpJson *j, FILE *out);

#endif
