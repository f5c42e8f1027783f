/* describe.h: the profile of a cluster on paper (fsdp-probe -describe):
 * every rate given, nothing measured; the profile's "source" says
 * "described". */
#ifndef FSDP_PLAN_DESCRIBE_H
#define FSDP_PLAN_DESCRIBE_H

#include <stdint.h>

#include "plan/profile.h"

/* The -describe_* options. */
typedef struct {
  int64_t nodes, ranks_per_node;
  const char *backend, *host, *device;
  double gemm_flops, attention_flops, stream_bw, adamw_bw, mem;
  double node_latency, node_bw, net_latency, net_bw_per_node;
  double contended; /* [Note: contended compute] (plan/steptime.h) */
  int64_t cores;
  double join;       /* [Note: joining a collective], a fraction */
  double concurrent; /* [Note: two collectives at once] */
  double sustained;  /* [Note: sustained speed] (plan/probe.c) */
} FsdpProfileDescription;

/* Not collective.  The profile of the described cluster into p, for the
 * model model_name (the stages are not described: fsdp-plan models them)
 * and the device's peak FLOP/s (0: not known).  Node level: G ranks at the
 * node bandwidth; cross-node level: one rank per node, G such groups
 * sharing each node's links (net_bw_per_node / G each); world: the slower
 * of the two, with the network's latency. */
void FsdpProfileDescribe(const FsdpProfileDescription *d, const char *model_name,
                         double peak_flops, FsdpProfile *p);

#endif
