/* probe.h: the machine measured for a profile (fsdp-probe).
 *
 * With the project's own kernels and collectives, on the ranks and nodes
 * of the job ([Note: what a profile holds] in plan/profile.h):
 *   - every rank at once (so memory bandwidth is shared as in a run): the
 *     sgemm rate of each matmul shape of the model's first block unit and of
 *     the head (forward + backward, N = B*T rows), the causal-attention
 *     kernel, the streaming passes (residual add) and the AdamW update; the
 *     slowest rank's rate is kept, because a step waits for it;
 *   - the model's stages, one by one ([Note: stages measured] in probe.c),
 *     alone, with an all-reduce looping on a stream thread beside them
 *     ([Note: contended compute] in plan/steptime.h) and with a join after
 *     each ([Note: joining a collective]);
 *   - all-gather, reduce-scatter and all-reduce against size on the node
 *     group, the cross-node group (one rank per node, all such groups at
 *     once: the node's link is shared as in a run) and the world; each
 *     point is the median over -probe_reps of the slowest rank's time; and
 *     two world all-gathers at once against one ([Note: two collectives
 *     at once]);
 *   - the memory a rank can allocate, the cores of a node, and which
 *     nodes share a host ([Note: nodes sharing a host] in probe.c).
 */
#ifndef FSDP_PLAN_PROBE_H
#define FSDP_PLAN_PROBE_H

#include <stdint.h>

#include "comm/topo.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "plan/profile.h"

/* What to measure: the run's model and micro-batch (fsdp-train's options)
 * and the probe's own (-probe_*). */
typedef struct {
  const FsdpModelDesc *model;
  const char *model_name;    /* -model: the preset, recorded in the profile */
  int batch_size, wrap;      /* -batch_size, -wrap (the largest unit's size) */
  int64_t seed;
  FsdpAttention attention;   /* -attention: the kernels the run would use */
  int64_t min_bytes;         /* -probe_min_bytes: the smallest collective message */
  int64_t max_bytes;         /* -probe_max_bytes (0: the model's largest unit in fp32, >= 1 MiB) */
  int reps;                  /* -probe_reps: timed repetitions per point */
  int compute;               /* -probe_compute: the compute rates and the stages too */
  double peak_flops;         /* -probe_peak_flops: recorded for MFU (0: not known) */
} FsdpProbeOptions;

/* Collective on topo's world.  Measures this machine into p (zeroed by
 * the caller): identity, the hosts' cores and memory, with o->compute the
 * compute rates and the model's stages, then the collectives of every
 * level.  MPI on the CPU back-end only (fsdp-probe refuses -device cuda). */
int FsdpProbeMachine(const FsdpProbeOptions *o, FsdpTopo topo, FsdpProfile *p);

#endif
