/* test_topo: the communicator hierarchy (topo.h).
 *
 * For every F dividing W, every G in {1, 2, 4, W} dividing W with block and
 * cyclic placement, and detected nodes (G = 0), the test computes node,
 * sharding and replica membership itself from the definition (docs/design.md §5,
 * topo.h) and compares with the communicators the library built (world
 * ranks of every member, in communicator-rank order), the peers counts,
 * the accessors and the printed view.  The test's own node-first order is
 * checked against hand-written tables first.  Bad options must give
 * FSDP_ERR_USAGE on every rank with a message naming the option, and the
 * next good call must still work (nobody was left in a split).
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/init.h"
#include "testutil.h"
#include "comm/topo.h"

static int W, me;

/* The layout as the test derives it. */
typedef struct {
  int N, G, F, R;
  int node[64];  /* node index of each world rank */
  int order[64]; /* world ranks ordered by (node, world rank) */
  int pos[64];   /* position of each rank in order */
} Layout;

/* label[r]: equal exactly for ranks of one node. */
static void layout_from_labels(Layout *L, const int *label, int F)
{
  /* Nodes numbered by their smallest world rank. */
  int first[64];
  for (int r = 0; r < W; r++) {
    first[r] = r;
    for (int s = 0; s < r; s++)
      if (label[s] == label[r]) {
        first[r] = s;
        break;
      }
  }
  L->N = 0;
  for (int r = 0; r < W; r++) {
    L->node[r] = 0;
    for (int s = 0; s < first[r]; s++)
      if (first[s] == s) L->node[r]++;
    if (first[r] == r) L->N++;
  }
  int k = 0;
  for (int n = 0; n < L->N; n++)
    for (int r = 0; r < W; r++)
      if (L->node[r] == n) L->order[k++] = r;
  for (int p = 0; p < W; p++) L->pos[L->order[p]] = p;
  L->G = W / L->N;
  L->F = F;
  L->R = W / F;
}

static void layout_emulated(Layout *L, int G, FsdpRankPlacement pl, int F)
{
  int label[64];
  for (int r = 0; r < W; r++)
    label[r] = pl == FSDP_PLACEMENT_BLOCK ? r / G : r % (W / G);
  layout_from_labels(L, label, F);
}

static void layout_detected(Layout *L, int F)
{
  MPI_Comm shm;
  int leader = me, label[64];
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
  MPI_Allreduce(&me, &leader, 1, MPI_INT, MPI_MIN, shm);
  MPI_Allgather(&leader, 1, MPI_INT, label, 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Comm_free(&shm);
  layout_from_labels(L, label, F);
}

/* Members of my sharding / replica group / node, in rank order. */
static int shard_members(const Layout *L, int r, int *m)
{
  int s = L->pos[r] / L->F;
  for (int k = 0; k < L->F; k++) m[k] = L->order[s * L->F + k];
  return L->F;
}
static int replica_members(const Layout *L, int r, int *m)
{
  int q = L->pos[r] % L->F;
  for (int j = 0; j < L->R; j++) m[j] = L->order[j * L->F + q];
  return L->R;
}
static int node_members(const Layout *L, int r, int *m)
{
  int n = 0;
  for (int s = 0; s < W; s++)
    if (L->node[s] == L->node[r]) m[n++] = s;
  return n;
}

static void fmt_ranks(char *buf, size_t size, const int *m, int n)
{
  size_t len = 0;
  buf[0] = '\0';
  for (int k = 0; k < n && len < size; k++)
    len += (size_t)snprintf(buf + len, size - len, " %d", m[k]);
}

static const char *cfg_name(int F, int G, FsdpRankPlacement pl)
{
  static char buf[96];
  snprintf(buf, sizeof buf, "W=%d F=%d G=%d %s", W, F, G,
           G == 0 ? "detected" : pl == FSDP_PLACEMENT_BLOCK ? "block" : "cyclic");
  return buf;
}

/* Compare a group with the expected members (world ranks in rank order). */
static void check_group(const char *cfg, const FsdpGroup *g, const char *name,
                        const Layout *L, const int *want, int n)
{
  int got[64], size = -1, rank = -1;
  CHECK(g->comm != MPI_COMM_NULL, "%s %s: no communicator", cfg, name);
  if (g->comm == MPI_COMM_NULL) return;
  MPI_Comm_size(g->comm, &size);
  MPI_Comm_rank(g->comm, &rank);
  CHECK(strcmp(g->name, name) == 0, "%s: group name %s, expected %s", cfg,
        g->name, name);
  CHECK(size == n && g->size == n, "%s %s: size %d (field %d), expected %d", cfg,
        name, size, g->size, n);
  CHECK(g->rank == rank, "%s %s: rank field %d, comm rank %d", cfg, name,
        g->rank, rank);
  if (size != n) return;
  MPI_Allgather(&me, 1, MPI_INT, got, 1, MPI_INT, g->comm);
  char sg[512], sw[512];
  fmt_ranks(sg, sizeof sg, got, n);
  fmt_ranks(sw, sizeof sw, want, n);
  CHECK(strcmp(sg, sw) == 0, "%s rank %d: %s group is [%s ], expected [%s ]", cfg,
        me, name, sg, sw);
  int intra = 0;
  for (int k = 0; k < n; k++)
    if (want[k] != me && L->node[want[k]] == L->node[me]) intra++;
  CHECK(g->peers_intra == intra && g->peers_inter == n - 1 - intra,
        "%s rank %d %s: peers intra %d inter %d, expected %d %d", cfg, me, name,
        g->peers_intra, g->peers_inter, intra, n - 1 - intra);
}

/* Read what rank 0 printed and look for the expected lines. */
static void check_view(const char *cfg, FsdpTopo t, const Layout *L, int within)
{
  FILE *f = tmpfile();
  TCALL(FsdpTopoView(t, f));
  if (me != 0) {
    fclose(f);
    return;
  }
  long size = ftell(f);
  char *text = calloc((size_t)size + 1, 1);
  rewind(f);
  CHECK(fread(text, 1, (size_t)size, f) == (size_t)size, "%s: reading view", cfg);
  fclose(f);
  char want[600], ranks[512];
  int m[64];
  snprintf(want, sizeof want, "F=%d, R=%d", L->F, L->R);
  CHECK(strstr(text, want) != NULL, "%s: view lacks '%s':\n%s", cfg, want, text);
  snprintf(want, sizeof want, "W=%d ranks, %d node%s x G=%d ranks", W, L->N,
           L->N == 1 ? "" : "s", L->G);
  CHECK(strstr(text, want) != NULL, "%s: view lacks '%s':\n%s", cfg, want, text);
  snprintf(want, sizeof want, "inside nodes: %s", within ? "yes" : "no");
  CHECK(strstr(text, want) != NULL, "%s: view lacks '%s':\n%s", cfg, want, text);
  for (int n = 0; n < L->N; n++) {
    node_members(L, L->order[n * L->G], m);
    fmt_ranks(ranks, sizeof ranks, m, L->G);
    snprintf(want, sizeof want, "node %d (", n);
    const char *line = strstr(text, want);
    snprintf(want, sizeof want, "):%s\n", ranks);
    CHECK(line && strstr(line, want) && strstr(line, want) < strchr(line, '\n') + 1,
          "%s: view lacks node %d with ranks%s:\n%s", cfg, n, ranks, text);
  }
  for (int s = 0; s < L->R; s++) {
    shard_members(L, L->order[s * L->F], m);
    fmt_ranks(ranks, sizeof ranks, m, L->F);
    snprintf(want, sizeof want, "sharding group %d:%s\n", s, ranks);
    CHECK(strstr(text, want) != NULL, "%s: view lacks '%s':\n%s", cfg, want, text);
  }
  for (int q = 0; q < L->F; q++) {
    replica_members(L, L->order[q], m);
    fmt_ranks(ranks, sizeof ranks, m, L->R);
    snprintf(want, sizeof want, "replica group %d:%s\n", q, ranks);
    CHECK(strstr(text, want) != NULL, "%s: view lacks '%s':\n%s", cfg, want, text);
  }
  free(text);
}

static void check_config(int F, int G, FsdpRankPlacement pl)
{
  const char *cfg = cfg_name(F, G, pl);
  char cfgcopy[96];
  snprintf(cfgcopy, sizeof cfgcopy, "%s", cfg);
  cfg = cfgcopy;
  Layout L;
  if (G > 0)
    layout_emulated(&L, G, pl, F);
  else
    layout_detected(&L, F);

  FsdpTopoOptions o = {.sharding_factor = F == W && pl == FSDP_PLACEMENT_CYCLIC ? 0 : F, /* 0 = W */
                       .ranks_per_node = G,
                       .placement = pl,
                       .view = 0};
  FsdpTopo t = NULL;
  TCALL(FsdpTopoCreate(MPI_COMM_WORLD, &o, &t));

  CHECK(FsdpTopoNumNodes(t) == L.N, "%s: %d nodes, expected %d", cfg,
        FsdpTopoNumNodes(t), L.N);
  CHECK(FsdpTopoRanksPerNode(t) == L.G, "%s: G %d, expected %d", cfg,
        FsdpTopoRanksPerNode(t), L.G);
  CHECK(FsdpTopoNodeIndex(t) == L.node[me], "%s rank %d: node %d, expected %d",
        cfg, me, FsdpTopoNodeIndex(t), L.node[me]);
  CHECK(FsdpTopoShardIndex(t) == L.pos[me] / F,
        "%s rank %d: sharding group %d, expected %d", cfg, me,
        FsdpTopoShardIndex(t), L.pos[me] / F);
  for (int r = 0; r < W; r++)
    CHECK(FsdpTopoNodeOfRank(t, r) == L.node[r], "%s: node of rank %d is %d, expected %d",
          cfg, r, FsdpTopoNodeOfRank(t, r), L.node[r]);
  CHECK(FsdpTopoNodeOfRank(t, W) == -1 && FsdpTopoNodeOfRank(t, -1) == -1,
        "%s: node of a rank out of range", cfg);

  int m[64], world[64];
  for (int r = 0; r < W; r++) world[r] = r;
  check_group(cfg, FsdpTopoWorld(t), "world", &L, world, W);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(FsdpTopoWorld(t)->comm, MPI_COMM_WORLD, &cmp);
  CHECK(cmp == MPI_CONGRUENT, "%s: world comm is not a duplicate of world (%d)",
        cfg, cmp);
  check_group(cfg, FsdpTopoNode(t), "node", &L, m, node_members(&L, me, m));
  check_group(cfg, FsdpTopoShard(t), "sharding", &L, m, shard_members(&L, me, m));
  check_group(cfg, FsdpTopoReplica(t), "replica", &L, m, replica_members(&L, me, m));

  /* [Note: node-first sharding groups]: F <= G, G % F == 0 keeps every
   * sharding group on one node, whatever the placement. */
  int within = 1;
  for (int p = 0; p < W; p++)
    if (L.node[L.order[p]] != L.node[L.order[p - p % F]]) within = 0;
  if (F <= L.G && L.G % F == 0) {
    CHECK(within, "%s: the test's own layout has a sharding group across nodes", cfg);
    int got[64];
    MPI_Allgather(&me, 1, MPI_INT, got, 1, MPI_INT, FsdpTopoShard(t)->comm);
    for (int k = 0; k < F; k++)
      CHECK(L.node[got[k]] == L.node[me],
            "%s: sharding group of rank %d crosses nodes (rank %d on node %d)", cfg,
            me, got[k], L.node[got[k]]);
    CHECK(FsdpTopoShard(t)->peers_inter == 0, "%s: sharding peers_inter %d", cfg,
          FsdpTopoShard(t)->peers_inter);
  }
  CHECK(FsdpTopoShardWithinNode(t) == within, "%s: within-node %d, expected %d",
        cfg, FsdpTopoShardWithinNode(t), within);
  char sum[512];
  TCALL(FsdpTopoSummary(t, sum, sizeof sum));
  CHECK(strstr(sum, G > 0 ? "emulated" : "detected") != NULL, "%s: summary '%s'",
        cfg, sum);
  check_view(cfg, t, &L, within);

  TCALL(FsdpTopoDestroy(&t));
  CHECK(t == NULL, "%s: destroy leaves the handle set", cfg);
}

/* The test's layout code against layouts worked out by hand. */
static void check_hand_layouts(void)
{
  static const struct {
    int W, G;
    FsdpRankPlacement pl;
    int order[8];
  } cases[] = {
      {8, 4, FSDP_PLACEMENT_CYCLIC, {0, 2, 4, 6, 1, 3, 5, 7}},
      {8, 2, FSDP_PLACEMENT_CYCLIC, {0, 4, 1, 5, 2, 6, 3, 7}},
      {8, 2, FSDP_PLACEMENT_BLOCK, {0, 1, 2, 3, 4, 5, 6, 7}},
      {8, 8, FSDP_PLACEMENT_CYCLIC, {0, 1, 2, 3, 4, 5, 6, 7}},
      {4, 2, FSDP_PLACEMENT_CYCLIC, {0, 2, 1, 3}},
      {4, 1, FSDP_PLACEMENT_CYCLIC, {0, 1, 2, 3}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    if (cases[c].W != W) continue;
    Layout L;
    layout_emulated(&L, cases[c].G, cases[c].pl, 1);
    for (int p = 0; p < W; p++)
      CHECK(L.order[p] == cases[c].order[p], "hand case %zu: order[%d] = %d, expected %d",
            c, p, L.order[p], cases[c].order[p]);
  }
  if (W == 8) {
    /* 8 ranks, 2 cyclic nodes of 4, F = 4: sharding {0 2 4 6} {1 3 5 7},
     * replicas {0 1} {2 3} {4 5} {6 7}. */
    Layout L;
    int m[8];
    layout_emulated(&L, 4, FSDP_PLACEMENT_CYCLIC, 4);
    shard_members(&L, 5, m);
    CHECK(m[0] == 1 && m[1] == 3 && m[2] == 5 && m[3] == 7, "hand shard of 5");
    replica_members(&L, 6, m);
    CHECK(m[0] == 6 && m[1] == 7, "hand replica of 6");
    CHECK(L.node[6] == 0 && L.node[7] == 1 && L.N == 2, "hand nodes");
  }
}

/* A usage error on every rank, naming the option and the values. */
static void check_bad(int F, int G, FsdpRankPlacement pl, const char *needle1,
                      const char *needle2, const char *what)
{
  FsdpTopoOptions o = {.sharding_factor = F, .ranks_per_node = G,
                       .placement = pl, .view = 0};
  FsdpTopo t = (FsdpTopo)&o; /* must come back NULL */
  int rc = FsdpTopoCreate(MPI_COMM_WORLD, &o, &t);
  int lo = 0, hi = 0;
  MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == FSDP_ERR_USAGE && hi == FSDP_ERR_USAGE,
        "W=%d %s: error codes %d..%d over the ranks, expected %d everywhere", W,
        what, lo, hi, FSDP_ERR_USAGE);
  CHECK(t == NULL, "W=%d %s: handle set after failure", W, what);
  const char *msg = FsdpErrorLastMessage();
  CHECK(strstr(msg, needle1) != NULL, "W=%d %s: message '%s' lacks '%s'", W, what,
        msg, needle1);
  if (needle2)
    CHECK(strstr(msg, needle2) != NULL, "W=%d %s: message '%s' lacks '%s'", W,
          what, msg, needle2);
  if (rc == FSDP_SUCCESS) FsdpTopoDestroy(&t);
}

static void check_bad_input(void)
{
  char n1[128], n2[64];
  /* F not dividing W (below W). */
  for (int F = 2; F < W; F++) {
    if (W % F == 0) continue;
    snprintf(n1, sizeof n1, "-sharding_factor %d does not divide the world size %d", F, W);
    snprintf(n2, sizeof n2, "divisor of %d: 1 2", W);
    check_bad(F, 0, FSDP_PLACEMENT_BLOCK, n1, n2, "F not dividing W");
    break; /* one is enough: 3 at W = 4 and 8 */
  }
  snprintf(n1, sizeof n1, "-sharding_factor %d is larger than the world size %d", 2 * W, W);
  check_bad(2 * W, 0, FSDP_PLACEMENT_BLOCK, n1, "divisor", "F > W");
  check_bad(-2, 0, FSDP_PLACEMENT_BLOCK, "-sharding_factor -2", NULL, "F < 0");
  /* G not dividing W: 3 at W = 4, 8; larger than W at W = 1, 2. */
  snprintf(n1, sizeof n1, "-ranks_per_node 3 ");
  snprintf(n2, sizeof n2, "world size %d", W);
  check_bad(0, 3, FSDP_PLACEMENT_BLOCK, n1, n2, "G = 3");
  check_bad(1, 2 * W, FSDP_PLACEMENT_CYCLIC, "-ranks_per_node", "larger", "G > W");
  check_bad(1, -1, FSDP_PLACEMENT_CYCLIC, "-ranks_per_node -1", NULL, "G < 0");
  check_bad(1, 1, (FsdpRankPlacement)7, "-rank_placement", NULL, "placement 7");
  if (W > 1) {
    /* Ranks disagreeing must not hang either. */
    FsdpTopoOptions o = {.sharding_factor = me == 0 ? 1 : W};
    FsdpTopo t = NULL;
    int rc = FsdpTopoCreate(MPI_COMM_WORLD, &o, &t), lo = 0;
    MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    CHECK(rc == FSDP_ERR_USAGE && lo == FSDP_ERR_USAGE && t == NULL,
          "W=%d disagreeing options: rc %d (min %d)", W, rc, lo);
    CHECK(strstr(FsdpErrorLastMessage(), "different") != NULL, "message '%s'",
          FsdpErrorLastMessage());
  }
  /* Nothing is left half built: a good topology works afterwards. */
  check_config(W, 0, FSDP_PLACEMENT_BLOCK);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (W > 64) {
    if (me == 0) fprintf(stderr, "test_topo: at most 64 ranks\n");
    FsdpFinalize();
    return 77;
  }
  check_hand_layouts();
  int configs = 0;
  for (int F = 1; F <= W; F++) {
    if (W % F) continue;
    const int Gs[4] = {1, 2, 4, W};
    for (int gi = 0; gi < 4; gi++) {
      int G = Gs[gi], seen = 0;
      for (int gj = 0; gj < gi; gj++) seen |= Gs[gj] == G;
      if (seen || W % G) continue;
      check_config(F, G, FSDP_PLACEMENT_BLOCK);
      check_config(F, G, FSDP_PLACEMENT_CYCLIC);
      configs += 2;
    }
    check_config(F, 0, FSDP_PLACEMENT_BLOCK); /* detected nodes */
    configs++;
  }
  check_bad_input();
  /* The option struct's view flag prints at create (smoke: no hang); a
   * hybrid layout on round-robin nodes shows the most. */
  FsdpTopoOptions o = {.sharding_factor = W >= 4 ? 2 : 1,
                       .ranks_per_node = W > 1 ? W / 2 : 1,
                       .placement = FSDP_PLACEMENT_CYCLIC, .view = 1};
  FsdpTopo t = NULL;
  TCALL(FsdpTopoCreate(MPI_COMM_WORLD, &o, &t));
  TCALL(FsdpTopoDestroy(&t));
  TCALL(FsdpTopoDestroy(&t)); /* NULL is fine */
  if (me == 0) printf("test_topo: %d configurations at W=%d\n", configs, W);
  int status = test_finish("test_topo");
  FsdpFinalize();
  return status;
}
