/* topo.c: the communicator hierarchy (see topo.h).
 *
 * Every rank computes the whole layout (node of every world rank, the
 * node-first rank order) from values all ranks share, then splits world by
 * it.  So every rank can answer questions about any other rank without
 * communication (FsdpTopoNodeOfRank, peers counts), and the layout printed
 * by FsdpTopoView is the one the communicators were built from. */
#include "comm/topo.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct FsdpTopo_ {
  int W, G, N, F, R;
  int emulated;                /* nodes from -ranks_per_node, not detected */
  FsdpRankPlacement placement; /* meaningful when emulated */
  int me;                      /* my world rank */
  int node_index, shard_index, shard_pos;
  int *node_of; /* [W] node index of each world rank */
  int *order;   /* [W] world ranks sorted by (node, world rank): node-first */
  int shard_within_node; /* every sharding group lies on one node */
  FsdpGroup world, node, shard, replica;
};

static const char *const placement_names[] = {"block", "cyclic", NULL};

int FsdpTopoOptionsFromDb(FsdpOpts db, FsdpTopoOptions *o)
{
  int64_t v = 0;
  int idx = 0, b = 0;
  FSDP_ASSERT(o != NULL);
  memset(o, 0, sizeof *o);
  FSDP_CALL(FsdpOptsGetInt(db, "Topology", "sharding_factor",
                           "ranks per sharding group F (divides the world "
                           "size; 0 = all ranks: full sharding; 1 = "
                           "replicate, as DDP)",
                           0, 0, INT_MAX, &v));
  o->sharding_factor = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, "Topology", "ranks_per_node",
                           "ranks per node G (0 = detect with "
                           "MPI_COMM_TYPE_SHARED; > 0 emulates nodes of G "
                           "ranks)",
                           0, 0, INT_MAX, &v));
  o->ranks_per_node = (int)v;
  FSDP_CALL(FsdpOptsGetEnum(db, "Topology", "rank_placement",
                            "how the emulated launcher placed ranks on nodes: "
                            "block (node = rank / G) or cyclic (round robin "
                            "over W/G nodes)",
                            placement_names, 0, &idx));
  o->placement = idx == 1 ? FSDP_PLACEMENT_CYCLIC : FSDP_PLACEMENT_BLOCK;
  FSDP_CALL(FsdpOptsGetBool(db, "Topology", "topology_view",
                            "print nodes, sharding and replica groups at "
                            "setup",
                            0, &b));
  o->view = b;
  return FSDP_SUCCESS;
}

/* "1 2 4" into buf: the divisors of n, for messages. */
static void topo_divisors(int n, char *buf, size_t size)
{
  size_t len = 0;
  buf[0] = '\0';
  for (int d = 1; d <= n && len + 16 < size; d++)
    if (n % d == 0) len += (size_t)snprintf(buf + len, size - len, "%s%d", len ? " " : "", d);
}

/* Usage checks of F and G, from values every rank holds (see
 * FsdpTopoCreate: they are made equal first), so every rank returns the
 * same error and none is left waiting in a split. */
int FsdpTopoCheckOptions(int W, const FsdpTopoOptions *o)
{
  int F = o->sharding_factor, G = o->ranks_per_node, placement = (int)o->placement;
  char div[512];
  topo_divisors(W, div, sizeof div);
  if (F < 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-sharding_factor %d is negative (choose a divisor of the "
               "world size %d: %s; 0 means %d)",
               F, W, div, W);
  if (F > W)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-sharding_factor %d is larger than the world size %d "
               "(choose a divisor of %d: %s)",
               F, W, W, div);
  if (F > 0 && W % F != 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-sharding_factor %d does not divide the world size %d "
               "(choose a divisor of %d: %s)",
               F, W, W, div);
  if (G < 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-ranks_per_node %d is negative (0 detects the nodes; or "
               "choose a divisor of the world size %d: %s)",
               G, W, div);
  if (G > W)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-ranks_per_node %d is larger than the world size %d (choose "
               "a divisor of %d: %s, or 0 to detect)",
               G, W, W, div);
  if (G > 0 && W % G != 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-ranks_per_node %d does not divide the world size %d (choose "
               "a divisor of %d: %s, or 0 to detect)",
               G, W, W, div);
  if (placement != FSDP_PLACEMENT_BLOCK && placement != FSDP_PLACEMENT_CYCLIC)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-rank_placement %d is not a placement (block or cyclic)",
               placement);
  return FSDP_SUCCESS;
}

/* Relabel nodes so that they are numbered by their smallest world rank:
 * label[r] is any value equal exactly for the ranks of one node; on return
 * node_of[r] is 0..N-1.  Returns N. */
static int topo_number_nodes(int W, const int *label, int *node_of)
{
  int N = 0;
  for (int r = 0; r < W; r++) node_of[r] = -1;
  for (int r = 0; r < W; r++) {
    if (node_of[r] >= 0) continue;
    /* r is the smallest rank of a node not yet seen */
    for (int s = r; s < W; s++)
      if (label[s] == label[r]) node_of[s] = N;
    N++;
  }
  return N;
}

/* Members of group g on my node, other than me, and elsewhere. */
static void topo_count_peers(struct FsdpTopo_ *t, FsdpGroup *g,
                             const int *members, int n)
{
  int intra = 0;
  for (int k = 0; k < n; k++)
    if (members[k] != t->me && t->node_of[members[k]] == t->node_index) intra++;
  g->peers_intra = intra;
  g->peers_inter = n - 1 - intra;
}

static int topo_group_finish(FsdpGroup *g, const char *name, int want_size)
{
  g->name = name;
  FSDP_CALL_MPI(MPI_Comm_size(g->comm, &g->size));
  FSDP_CALL_MPI(MPI_Comm_rank(g->comm, &g->rank));
  FSDP_ASSERT(g->size == want_size);
  return FSDP_SUCCESS;
}

static void topo_free(struct FsdpTopo_ *t)
{
  FsdpGroup *groups[4] = {&t->world, &t->node, &t->shard, &t->replica};
  for (int k = 0; k < 4; k++)
    if (groups[k]->comm != MPI_COMM_NULL) MPI_Comm_free(&groups[k]->comm);
  free(t->node_of);
  free(t->order);
  free(t);
}

static int topo_build(MPI_Comm world, const FsdpTopoOptions *o,
                      struct FsdpTopo_ *t)
{
  int W = 0, me = 0;
  FSDP_CALL_MPI(MPI_Comm_size(world, &W));
  FSDP_CALL_MPI(MPI_Comm_rank(world, &me));
  t->W = W;
  t->me = me;

  /* Options come from the same database on every rank, but a caller that
   * passed different values would otherwise hang in a split: agree first
   * (max of v and of -v gives max and min at once). */
  int mine[6] = {o->sharding_factor, -o->sharding_factor, o->ranks_per_node,
                 -o->ranks_per_node, (int)o->placement, -(int)o->placement};
  int all[6];
  FSDP_CALL_MPI(MPI_Allreduce(mine, all, 6, MPI_INT, MPI_MAX, world));
  if (all[0] != -all[1] || all[2] != -all[3] || all[4] != -all[5])
    FSDP_ERROR(FSDP_ERR_USAGE,
               "the ranks were given different topology options "
               "(-sharding_factor %d..%d, -ranks_per_node %d..%d, "
               "-rank_placement %d..%d); every rank needs the same",
               -all[1], all[0], -all[3], all[2], -all[5], all[4]);
  FSDP_CALL(FsdpTopoCheckOptions(W, o));
  int F = o->sharding_factor == 0 ? W : o->sharding_factor;
  t->F = F;
  t->R = W / F;
  t->emulated = o->ranks_per_node > 0;
  t->placement = o->placement;

  t->node_of = malloc((size_t)W * sizeof *t->node_of);
  t->order = malloc((size_t)W * sizeof *t->order);
  int *label = malloc((size_t)W * sizeof *label);
  if (!t->node_of || !t->order || !label) {
    free(label);
    FSDP_CHECK_ALLOC(NULL, 3 * (size_t)W * sizeof(int));
  }

  if (t->emulated) {
    int G = o->ranks_per_node, N = W / G;
    for (int r = 0; r < W; r++)
      label[r] = o->placement == FSDP_PLACEMENT_BLOCK ? r / G : r % N;
  } else {
    /* A node is the set of ranks sharing memory; its label is its smallest
     * world rank, which every rank learns for every rank. */
    int rc = MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, me,
                                 MPI_INFO_NULL, &t->node.comm);
    int leader = me;
    if (rc == MPI_SUCCESS)
      rc = MPI_Allreduce(&me, &leader, 1, MPI_INT, MPI_MIN, t->node.comm);
    if (rc == MPI_SUCCESS)
      rc = MPI_Allgather(&leader, 1, MPI_INT, label, 1, MPI_INT, world);
    if (rc != MPI_SUCCESS) {
      free(label);
      FSDP_CALL_MPI(rc);
    }
  }
  t->N = topo_number_nodes(W, label, t->node_of);
  free(label);

  /* Node sizes; detected nodes must be equal (emulated ones are by
   * construction).  Counting sort by node gives the node-first order. */
  int *start = calloc((size_t)t->N + 1, sizeof *start);
  FSDP_CHECK_ALLOC(start, ((size_t)t->N + 1) * sizeof(int));
  for (int r = 0; r < W; r++) start[t->node_of[r] + 1]++;
  int unequal = -1;
  for (int n = 1; n < t->N && unequal < 0; n++)
    if (start[n + 1] != start[1]) unequal = n;
  if (unequal >= 0) {
    int n0 = start[1], nk = start[unequal + 1], N = t->N;
    free(start);
    FSDP_ERROR(FSDP_ERR_USAGE,
               "the %d nodes hold different numbers of ranks (node 0: %d, "
               "node %d: %d); fsdp needs the same number of ranks on every "
               "node: launch with a fixed number of ranks per node (e.g. "
               "srun --ntasks-per-node, mpiexec --map-by ppr:G:node)",
               N, n0, unequal, nk);
  }
  t->G = start[1];
  for (int n = 0; n < t->N; n++) start[n + 1] += start[n];
  for (int r = 0; r < W; r++) t->order[start[t->node_of[r]]++] = r;
  free(start);

  t->node_index = t->node_of[me];
  int pos = -1;
  for (int p = 0; p < W; p++)
    if (t->order[p] == me) pos = p;
  FSDP_ASSERT(pos >= 0);
  t->shard_index = pos / F;
  t->shard_pos = pos % F;

  /* [Note: node-first sharding groups] in topo.h. */
  t->shard_within_node = 1;
  for (int p = 0; p < W; p++)
    if (t->node_of[t->order[p]] != t->node_of[t->order[p - p % F]])
      t->shard_within_node = 0;

  FSDP_CALL_MPI(MPI_Comm_dup(world, &t->world.comm));
  if (t->emulated)
    FSDP_CALL_MPI(MPI_Comm_split(world, t->node_index, me, &t->node.comm));
  FSDP_CALL_MPI(MPI_Comm_split(world, t->shard_index, t->shard_pos, &t->shard.comm));
  FSDP_CALL_MPI(MPI_Comm_split(world, t->shard_pos, t->shard_index, &t->replica.comm));
  FSDP_CALL(topo_group_finish(&t->world, "world", W));
  FSDP_CALL(topo_group_finish(&t->node, "node", t->G));
  FSDP_CALL(topo_group_finish(&t->shard, "sharding", F));
  FSDP_CALL(topo_group_finish(&t->replica, "replica", t->R));
  FSDP_ASSERT(t->shard.rank == t->shard_pos && t->replica.rank == t->shard_index);

  int *members = malloc((size_t)W * sizeof *members);
  FSDP_CHECK_ALLOC(members, (size_t)W * sizeof(int));
  for (int r = 0; r < W; r++) members[r] = r;
  topo_count_peers(t, &t->world, members, W);
  topo_count_peers(t, &t->node, t->order + t->node_index * t->G, t->G);
  topo_count_peers(t, &t->shard, t->order + t->shard_index * F, F);
  for (int j = 0; j < t->R; j++) members[j] = t->order[j * F + t->shard_pos];
  topo_count_peers(t, &t->replica, members, t->R);
  free(members);
  return FSDP_SUCCESS;
}

int FsdpTopoCreate(MPI_Comm world, const FsdpTopoOptions *o, FsdpTopo *out)
{
  FSDP_ASSERT(o != NULL && out != NULL);
  *out = NULL;
  struct FsdpTopo_ *t = calloc(1, sizeof *t);
  FSDP_CHECK_ALLOC(t, sizeof *t);
  t->world.comm = t->node.comm = t->shard.comm = t->replica.comm = MPI_COMM_NULL;
  int err = topo_build(world, o, t);
  if (err != FSDP_SUCCESS) {
    topo_free(t);
    FSDP_CALL(err);
  }
  *out = t;
  if (o->view) FSDP_CALL(FsdpTopoView(t, stdout));
  return FSDP_SUCCESS;
}

int FsdpTopoDestroy(FsdpTopo *t)
{
  if (!t || !*t) return FSDP_SUCCESS;
  topo_free(*t);
  *t = NULL;
  return FSDP_SUCCESS;
}

const FsdpGroup *FsdpTopoWorld(FsdpTopo t) { return &t->world; }
const FsdpGroup *FsdpTopoNode(FsdpTopo t) { return &t->node; }
const FsdpGroup *FsdpTopoShard(FsdpTopo t) { return &t->shard; }
const FsdpGroup *FsdpTopoReplica(FsdpTopo t) { return &t->replica; }
int FsdpTopoNumNodes(FsdpTopo t) { return t->N; }
int FsdpTopoNodeIndex(FsdpTopo t) { return t->node_index; }
int FsdpTopoRanksPerNode(FsdpTopo t) { return t->G; }
int FsdpTopoShardIndex(FsdpTopo t) { return t->shard_index; }
int FsdpTopoShardWithinNode(FsdpTopo t) { return t->shard_within_node; }

int FsdpTopoNodeOfRank(FsdpTopo t, int world_rank)
{
  if (world_rank < 0 || world_rank >= t->W) return -1;
  return t->node_of[world_rank];
}

int FsdpTopoSummary(FsdpTopo t, char *buf, size_t size)
{
  const char *mode = t->W == 1               ? "a single rank"
                     : t->F == t->W          ? "full sharding"
                     : t->F == 1             ? "full replication, as DDP"
                                             : "hybrid sharding";
  char nodes[96];
  if (t->emulated)
    snprintf(nodes, sizeof nodes, "emulated by -ranks_per_node, %s placement",
             placement_names[t->placement]);
  else
    snprintf(nodes, sizeof nodes, "detected");
  snprintf(buf, size,
           "W=%d ranks, %d node%s x G=%d ranks (%s), F=%d, R=%d (%s: %d "
           "sharding group%s of %d, %d replica group%s of %d); sharding "
           "groups inside nodes: %s",
           t->W, t->N, t->N == 1 ? "" : "s", t->G, nodes, t->F, t->R, mode,
           t->R, t->R == 1 ? "" : "s", t->F, t->F, t->F == 1 ? "" : "s", t->R,
           t->shard_within_node ? "yes" : "no");
  return FSDP_SUCCESS;
}

static void topo_print_ranks(FILE *out, const int *ranks, int n, int stride)
{
  for (int k = 0; k < n; k++) fprintf(out, " %d", ranks[(size_t)k * stride]);
  fputc('\n', out);
}

int FsdpTopoView(FsdpTopo t, FILE *out)
{
  if (!out) out = stdout;
  /* Host names of the node leaders tell a reader which machine is which. */
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  FSDP_CALL_MPI(MPI_Get_processor_name(host, &len));
  char *hosts = NULL;
  if (t->world.rank == 0) {
    hosts = calloc((size_t)t->W, MPI_MAX_PROCESSOR_NAME);
    FSDP_CHECK_ALLOC(hosts, (size_t)t->W * MPI_MAX_PROCESSOR_NAME);
  }
  int rc = MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts,
                      MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, t->world.comm);
  if (rc != MPI_SUCCESS) {
    free(hosts);
    FSDP_CALL_MPI(rc);
  }
  if (t->world.rank != 0) return FSDP_SUCCESS;

  char line[512];
  FsdpTopoSummary(t, line, sizeof line);
  fprintf(out, "topology: %s\n", line);
  fprintf(out, "  nodes (world ranks):\n");
  for (int n = 0; n < t->N; n++) {
    const int *members = t->order + (size_t)n * t->G;
    fprintf(out, "    node %d (%s):", n,
            hosts + (size_t)members[0] * MPI_MAX_PROCESSOR_NAME);
    topo_print_ranks(out, members, t->G, 1);
  }
  fprintf(out, "  sharding groups (world ranks, in shard-rank order):\n");
  for (int s = 0; s < t->R; s++) {
    fprintf(out, "    sharding group %d:", s);
    topo_print_ranks(out, t->order + (size_t)s * t->F, t->F, 1);
  }
  fprintf(out, "  replica groups (world ranks, in replica-rank order):\n");
  for (int j = 0; j < t->F; j++) {
    fprintf(out, "    replica group %d:", j);
    topo_print_ranks(out, t->order + j, t->R, t->F);
  }
  fflush(out);
  free(hosts);
  return FSDP_SUCCESS;
}
