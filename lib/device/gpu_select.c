/* gpu_select.c: which GPU each rank of a node uses ([Note: one GPU per
 * rank] in gpu_select.h).  Plain C and MPI: built with and without CUDA. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "device/gpu_select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* The node's distinct devices, and each rank's list as indices into them. */
typedef struct {
  int nranks, ndev;
  const FsdpGpuList *lists;
  int *dev;   /* dev[r * FSDP_GPU_MAX_VISIBLE + i]: distinct id of lists[r].uuid[i] */
  int *owner; /* owner[d]: rank holding distinct device d, -1 if free */
  int *seen;  /* visit marks of one augmenting search */
} Matching;

static int Visible(const FsdpGpuList *l)
{
  return l->n < 0 ? 0 : l->n > FSDP_GPU_MAX_VISIBLE ? FSDP_GPU_MAX_VISIBLE : l->n;
}

/* Kuhn's augmenting path: give rank r a device, moving earlier ranks to
 * another of theirs if needed.  Rank r tries its devices from position
 * r mod n on, so identical lists give rank i its i-th device. */
static int Augment(Matching *m, int r, int *pick)
{
  int n = Visible(&m->lists[r]);
  for (int k = 0; k < n; k++) {
    int i = (r + k) % n;
    int d = m->dev[r * FSDP_GPU_MAX_VISIBLE + i];
    if (m->seen[d]) continue;
    m->seen[d] = 1;
    if (m->owner[d] < 0 || Augment(m, m->owner[d], pick)) {
      m->owner[d] = r;
      pick[r] = i;
      return 1;
    }
  }
  return 0;
}

int FsdpGpuAssign(int nranks, const FsdpGpuList *lists, int *pick, int *ndistinct)
{
  if (ndistinct) *ndistinct = 0;
  if (nranks <= 0) return 0;
  int cap = nranks * FSDP_GPU_MAX_VISIBLE;
  Matching m = {nranks, 0, lists, malloc((size_t)cap * sizeof(int)),
                malloc((size_t)cap * sizeof(int)), malloc((size_t)cap * sizeof(int))};
  const unsigned char **uu = malloc((size_t)cap * sizeof *uu);
  if (!m.dev || !m.owner || !m.seen || !uu) {
    free(m.dev), free(m.owner), free(m.seen), free(uu);
    for (int r = 0; r < nranks; r++) pick[r] = -1;
    return nranks;
  }
  for (int r = 0; r < nranks; r++)
    for (int i = 0; i < Visible(&lists[r]); i++) {
      int d = 0;
      while (d < m.ndev && memcmp(uu[d], lists[r].uuid[i], FSDP_GPU_UUID_BYTES) != 0) d++;
      if (d == m.ndev) uu[m.ndev++] = lists[r].uuid[i];
      m.dev[r * FSDP_GPU_MAX_VISIBLE + i] = d;
    }
  for (int d = 0; d < m.ndev; d++) m.owner[d] = -1;
  int unplaced = 0;
  for (int r = 0; r < nranks; r++) {
    pick[r] = -1;
    memset(m.seen, 0, (size_t)m.ndev * sizeof(int));
    if (!Augment(&m, r, pick)) unplaced++;
  }
  /* a rank moved by a later augmenting path has its final pick already;
   * one left out keeps -1 */
  if (ndistinct) *ndistinct = m.ndev;
  free(m.dev), free(m.owner), free(m.seen), free(uu);
  return unplaced;
}

/* What the first failing node tells everyone (one broadcast). */
typedef struct {
  int ranks, ndistinct, unplaced, first_unplaced, too_many;
  char host[MPI_MAX_PROCESSOR_NAME];
  char probe[256];
} NodeReport;

int FsdpGpuSelect(MPI_Comm world, const FsdpGpuList *mine, const char *probe, int *pick,
                  int *node_rank, int *node_size)
{
  return FsdpGpuSelectShared(world, mine, probe, 0, pick, node_rank, node_size, NULL);
}

/* [Note: ranks sharing a GPU] Ranks the matching left without a device of
 * their own take, when sharing is allowed, the device at position
 * (node rank mod n) of their own list: with one GPU and 4 ranks, all four
 * use it; with 2 GPUs and 4 ranks, two each.  NCCL cannot run on such ranks
 * (it refuses two ranks on one device), so the caller moves device buffers
 * over MPI instead (coll_staged.c). */
static int ShareLeftOver(int nranks, const FsdpGpuList *lists, int *picks)
{
  int unplaced = 0;
  for (int r = 0; r < nranks; r++) {
    if (picks[r] >= 0) continue;
    int n = Visible(&lists[r]);
    if (n > 0)
      picks[r] = r % n;
    else
      unplaced++;
  }
  return unplaced;
}

int FsdpGpuSelectShared(MPI_Comm world, const FsdpGpuList *mine, const char *probe,
                        int allow_share, int *pick, int *node_rank, int *node_size, int *shared)
{
  *pick = -1;
  if (shared) *shared = 0;
  int shared_here = 0;
  int wrank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(world, &wrank));
  MPI_Comm node = MPI_COMM_NULL;
  FSDP_CALL_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, wrank, MPI_INFO_NULL, &node));
  int nr = 0, ns = 0;
  MPI_Comm_rank(node, &nr);
  MPI_Comm_size(node, &ns);
  if (node_rank) *node_rank = nr;
  if (node_size) *node_size = ns;
  NodeReport rep;
  memset(&rep, 0, sizeof rep);
  rep.ranks = ns;
  FsdpGpuList *all = NULL;
  int *picks = NULL;
  if (ns > FSDP_GPU_MAX_NODE_RANKS) {
    rep.too_many = 1;
  } else {
    all = malloc((size_t)ns * sizeof *all);
    picks = malloc((size_t)ns * sizeof *picks);
  }
  int ok_alloc = rep.too_many || (all && picks), all_alloc = 0;
  int err = MPI_Allreduce(&ok_alloc, &all_alloc, 1, MPI_INT, MPI_MIN, world);
  if (err == MPI_SUCCESS && !all_alloc) {
    free(all), free(picks);
    MPI_Comm_free(&node);
    FSDP_ERROR(FSDP_ERR_MEM, "selecting the GPUs: out of host memory for %d ranks' lists", ns);
  }
  if (err == MPI_SUCCESS && !rep.too_many)
    err = MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *all, MPI_BYTE, node);
  if (err == MPI_SUCCESS && !rep.too_many) {
    rep.unplaced = FsdpGpuAssign(ns, all, picks, &rep.ndistinct);
    if (rep.unplaced && allow_share) {
      shared_here = 1;
      rep.unplaced = ShareLeftOver(ns, all, picks);
    }
    *pick = picks[nr];
    rep.first_unplaced = -1;
    for (int r = 0; r < ns && rep.unplaced; r++)
      if (picks[r] < 0) {
        rep.first_unplaced = r;
        break;
      }
  }
  free(all), free(picks);
  MPI_Comm_free(&node);
  FSDP_CALL_MPI(err);
  /* Agree on the first failing node (the lowest world rank reporting):
   * every rank raises the same usage error ([Note: usage errors]). */
  int bad = rep.too_many || rep.unplaced > 0;
  int first = bad ? wrank : 0x7fffffff, first_all = 0;
  FSDP_CALL_MPI(MPI_Allreduce(&first, &first_all, 1, MPI_INT, MPI_MIN, world));
  if (first_all == 0x7fffffff) {
    /* every rank learns whether any node shares: the collective back-end
     * must be the same on all of them */
    int any_shared = 0;
    FSDP_CALL_MPI(MPI_Allreduce(&shared_here, &any_shared, 1, MPI_INT, MPI_MAX, world));
    if (shared) *shared = any_shared;
    return FSDP_SUCCESS;
  }
  if (wrank == first_all) {
    int len = 0;
    if (MPI_Get_processor_name(rep.host, &len) != MPI_SUCCESS) snprintf(rep.host, sizeof rep.host, "?");
    snprintf(rep.probe, sizeof rep.probe, "%s", probe ? probe : "");
  }
  FSDP_CALL_MPI(MPI_Bcast(&rep, (int)sizeof rep, MPI_BYTE, first_all, world));
  rep.host[sizeof rep.host - 1] = rep.probe[sizeof rep.probe - 1] = '\0';
  *pick = -1;
  if (rep.too_many)
    FSDP_ERROR(FSDP_ERR_USAGE, "-device cuda: %d ranks on node %s, more than the %d one node "
                               "can have (one GPU per rank): use -device cpu",
               rep.ranks, rep.host, FSDP_GPU_MAX_NODE_RANKS);
  if (rep.ndistinct == 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-device cuda: no usable GPU on node %s (%s): run on GPU nodes or use "
               "-device cpu",
               rep.host, rep.probe[0] ? rep.probe : "no device is visible");
  FSDP_ERROR(FSDP_ERR_USAGE,
             "%d ranks on node %s but only %d distinct GPUs visible to them (node rank %d "
             "has none left): -device cuda uses one GPU per rank; start at most %d ranks per "
             "node (e.g. mpirun --map-by ppr:%d:node), give each rank its own GPU "
             "(CUDA_VISIBLE_DEVICES, srun --gpus-per-task=1), or use -device cpu",
             rep.ranks, rep.host, rep.ndistinct, rep.first_unplaced, rep.ndistinct,
             rep.ndistinct > 0 ? rep.ndistinct : 1);
}
