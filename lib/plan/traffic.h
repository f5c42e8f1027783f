/* traffic.h: what a step of the planned run moves, per collective kind,
 * split into intra- and inter-node bytes as the run's counters count them
 * ([Note: byte accounting] in comm/coll.h; [Note: unit life cycle] in
 * runtime/fsdp.h). */
#ifndef FSDP_PLAN_TRAFFIC_H
#define FSDP_PLAN_TRAFFIC_H

#include <stdint.h>

#include "comm/coll.h"
#include "plan/units.h"

typedef struct {
  uint64_t bytes[FSDP_COLL_NKINDS], intra[FSDP_COLL_NKINDS], inter[FSDP_COLL_NKINDS];
  uint64_t calls[FSDP_COLL_NKINDS];
  uint64_t intra_total, inter_total; /* over the kinds */
} FsdpPlanTraffic;

/* Not collective.  A unit is gathered before its first forward stage and,
 * unless it is the root or NRAF keeps it, again before its backward, in
 * every micro-step; its gradient is reduce-scattered and, with R > 1, its
 * shard all-reduced over the replica group, every micro-step
 * (-accum_comm 1) or once ([Note: gradient accumulation]).  F = 1 issues
 * no gather or reduce-scatter ([Note: no sharding]).  shard, replica:
 * FsdpPlanGroups. */
void FsdpPlanTrafficCompute(const FsdpPlanRun *run, const FsdpPlanUnits *units,
                            const FsdpGroup *shard, const FsdpGroup *replica, FsdpPlanTraffic *t);

#endif
