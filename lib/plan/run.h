/* run.h: the run a plan is of: what fsdp-train would be given that
 * decides what a rank holds and moves, and the world it would run on.
 *
 * [Note: planning from the library] The numbers of a plan come from the
 * code that the run itself uses, not from a second copy of the formulas:
 * the model (any family, model/family.h) registers its units with an FSDP
 * runtime exactly as in a run (names, parameters, order: plan/units.h);
 * each unit's layout is a FlatParam built with the run's F (so numel,
 * padding and shard sizes are the run's); the bytes of each collective
 * are FsdpCollVolume of the same group shape the counters use
 * (plan/traffic.h); the gather ring (slots, bytes, gathers in flight) is
 * FsdpGatherRingPlan, the function FsdpRuntimeSetUp sizes the ring with
 * (plan/memory.h).  What the library does not expose as a pure function
 * is re-stated in this layer and cited: the node-first rank order ([Note:
 * node-first sharding groups], topo.h; FsdpPlanGroups below), the
 * gradient ring ([Note: gather memory], fsdp.h) and which collectives a
 * step issues ([Note: unit life cycle], fsdp.h).  tests/test_plan.sh
 * holds every number against the counters of real fsdp-train runs, so a
 * drift between the two is a test failure.
 */
#ifndef FSDP_PLAN_RUN_H
#define FSDP_PLAN_RUN_H

#include <stdint.h>

#include "comm/topo.h"
#include "model/model.h"
#include "runtime/fsdp.h"

typedef struct {
  /* fsdp-train's options (driver/train.h reads them) */
  FsdpModelDesc model;     /* family, preset and attributes (model/family.h) */
  char model_name[32];     /* -model: the preset */
  int wrap, batch_size;
  int64_t seed;
  FsdpTopoOptions topo;    /* -sharding_factor, -ranks_per_node, -placement */
  FsdpRuntimeOptions fsdp;
  double grad_clip;        /* -grad_clip ([Note: the gradient tail], runtime/optim.c) */
  int optim_overlap;       /* -optim_overlap (FsdpTailWhere) */
  int device_cuda;
  /* where: -world_size and -plan_rank (the rank whose counters are planned) */
  int W, rank;
  /* FsdpPlanRunCheck completes them: ranks per node, sharding factor,
   * replicas, nodes */
  int G, F, R, N;
} FsdpPlanRun;

/* Not collective.  Checks the topology as FsdpTopoCreate would (its
 * checks, usage errors naming the option) and completes G, F, R, N: F 0
 * is W; G 0 is W (nothing to detect: one node unless told). */
int FsdpPlanRunCheck(FsdpPlanRun *run);

/* Not collective.  The planned rank's sharding and replica groups as
 * FsdpGroup shapes (size, rank, peers on its node and elsewhere; comm
 * MPI_COMM_NULL): [Note: node-first sharding groups] in topo.h, with
 * nodes numbered by their smallest world rank.  After FsdpPlanRunCheck. */
int FsdpPlanGroups(const FsdpPlanRun *run, FsdpGroup *shard, FsdpGroup *replica);

#endif
