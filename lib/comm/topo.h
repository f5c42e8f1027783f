/* topo.h: the communicator hierarchy (docs/design.md §5, "Topology").
 *
 * world (W ranks) -> nodes (G ranks each, detected with
 * MPI_COMM_TYPE_SHARED or emulated with -ranks_per_node) -> sharding
 * groups (F ranks) and replica groups (W/F ranks).
 *
 * [Note: node-first sharding groups] Ranks are ordered by (node index,
 * rank within node) and cut into consecutive runs of F: those are the
 * sharding groups.  So when F <= G and G % F == 0 a sharding group never
 * leaves a node, however the launcher placed ranks (block or round-robin).
 * A replica group holds the ranks with the same position in their
 * sharding group.  Nodes are numbered by their smallest world rank.
 */
#ifndef FSDP_TOPO_H
#define FSDP_TOPO_H

#include <mpi.h>
#include <stdio.h>

#include "base/opts.h"

/* One communicator with what the collectives need to count bytes. */
typedef struct {
  MPI_Comm comm;
  int size, rank;
  int peers_intra; /* other members of this group on my node */
  int peers_inter; /* members on other nodes; intra + inter = size - 1 */
  const char *name; /* "world", "node", "sharding", "replica" */
} FsdpGroup;

typedef enum { FSDP_PLACEMENT_BLOCK, FSDP_PLACEMENT_CYCLIC } FsdpRankPlacement;

typedef struct {
  int sharding_factor;  /* F; 0 = W (full sharding) */
  int ranks_per_node;   /* G; 0 = detect with MPI_COMM_TYPE_SHARED */
  FsdpRankPlacement placement; /* emulated placement when ranks_per_node > 0 */
  int view;             /* print the layout at setup (-topology_view) */
} FsdpTopoOptions;

typedef struct FsdpTopo_ *FsdpTopo;

/* Not collective.  Reads -sharding_factor, -ranks_per_node,
 * -rank_placement block|cyclic, -topology_view (group "Topology"). */
int FsdpTopoOptionsFromDb(FsdpOpts db, FsdpTopoOptions *o);

/* Not collective.  The usage checks FsdpTopoCreate makes of o for a world
 * of W ranks (F and G divide W, a known placement), with messages that
 * list the divisors of W; fsdp-plan checks a planned world with it. */
int FsdpTopoCheckOptions(int W, const FsdpTopoOptions *o);

/* Collective on world.  Builds node, sharding and replica communicators
 * (and a duplicate of world for FsdpTopoWorld).  F not dividing W, F > W,
 * G not dividing W, or detected nodes of unequal size are usage errors on
 * every rank (checked before any split, from values every rank agrees on:
 * no hang); so are options that differ between ranks.  On error *t is
 * NULL and nothing is left allocated.  With o->view, calls FsdpTopoView on
 * stdout. */
int FsdpTopoCreate(MPI_Comm world, const FsdpTopoOptions *o, FsdpTopo *t);

/* Collective on world.  Frees the communicators; accepts NULL. */
int FsdpTopoDestroy(FsdpTopo *t);

const FsdpGroup *FsdpTopoWorld(FsdpTopo t);
const FsdpGroup *FsdpTopoNode(FsdpTopo t);
const FsdpGroup *FsdpTopoShard(FsdpTopo t);
const FsdpGroup *FsdpTopoReplica(FsdpTopo t);
int FsdpTopoNumNodes(FsdpTopo t);
int FsdpTopoNodeIndex(FsdpTopo t);   /* my node */
int FsdpTopoRanksPerNode(FsdpTopo t); /* G */
int FsdpTopoShardIndex(FsdpTopo t);  /* which sharding group I am in */
/* Node index of any world rank (-1 out of range).  Not collective. */
int FsdpTopoNodeOfRank(FsdpTopo t, int world_rank);
/* 1 if every sharding group lies on one node (always when F <= G and
 * G % F == 0), so all-gather and reduce-scatter never leave a node. */
int FsdpTopoShardWithinNode(FsdpTopo t);

/* Not collective.  One line: W, G, nodes (detected or emulated with the
 * placement), F, R, the mode (full sharding, replication, hybrid) and
 * whether sharding groups stay inside nodes; for logs and run files. */
int FsdpTopoSummary(FsdpTopo t, char *buf, size_t size);

/* Collective on world.  Rank 0 prints the summary line, then nodes (with
 * the host of their first rank), sharding groups and replica groups as
 * lists of world ranks.  out NULL means stdout. */
int FsdpTopoView(FsdpTopo t, FILE *out);

#endif
