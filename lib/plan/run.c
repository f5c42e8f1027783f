/* run.c: the run a plan is of (run.h). */
#include "plan/run.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int FsdpPlanRunCheck(FsdpPlanRun *run)
{
  int W = run->W;
  int F = run->topo.sharding_factor, G = run->topo.ranks_per_node;
  FSDP_CALL(FsdpTopoCheckOptions(W, &run->topo));
  if (run->rank >= W)
    FSDP_ERROR(FSDP_ERR_USAGE, "-plan_rank %d is not a rank of the world size %d", run->rank, W);
  run->F = F ? F : W;
  run->G = G ? G : W; /* nothing to detect: one node unless told */
  run->R = W / run->F;
  run->N = W / run->G;
  return FSDP_SUCCESS;
}

int FsdpPlanGroups(const FsdpPlanRun *run, FsdpGroup *shard, FsdpGroup *replica)
{
  int W = run->W, G = run->G, F = run->F, N = run->N;
  int *node_of = malloc((size_t)W * sizeof *node_of), *order = malloc((size_t)W * sizeof *order);
  if (!node_of || !order) {
    free(node_of);
    FSDP_CHECK_ALLOC(NULL, 2 * (size_t)W * sizeof(int));
  }
  for (int r = 0; r < W; r++)
    node_of[r] = run->topo.placement == FSDP_PLACEMENT_CYCLIC ? r % N : r / G;
  int k = 0;
  for (int n = 0; n < N; n++)
    for (int r = 0; r < W; r++)
      if (node_of[r] == n) order[k++] = r;
  int pos = 0;
  for (int p = 0; p < W; p++)
    if (order[p] == run->rank) pos = p;
  int me = run->rank, sidx = pos / F, spos = pos % F;
  memset(shard, 0, sizeof *shard);
  memset(replica, 0, sizeof *replica);
  shard->comm = replica->comm = MPI_COMM_NULL;
  shard->name = "sharding";
  replica->name = "replica";
  shard->size = F;
  shard->rank = spos;
  replica->size = run->R;
  replica->rank = sidx;
  for (int j = 0; j < F; j++) {
    int r = order[sidx * F + j];
    if (r != me) node_of[r] == node_of[me] ? shard->peers_intra++ : shard->peers_inter++;
  }
  for (int j = 0; j < run->R; j++) {
    int r = order[j * F + spos];
    if (r != me) node_of[r] == node_of[me] ? replica->peers_intra++ : replica->peers_inter++;
  }
  free(node_of);
  free(order);
  return FSDP_SUCCESS;
}
