/* gpu_select.h: which GPU each rank of a node uses (not installed).
 *
 * [Note: one GPU per rank] Plain C and MPI, built in every configuration so
 * the CPU build tests it (tests/test_gpu_select.c); cuda_util.c only lists
 * the devices this rank sees (their UUIDs, in CUDA's order) and makes the
 * chosen one current.
 *
 * The node is the real one: the ranks that share memory
 * (MPI_COMM_TYPE_SHARED), not the -ranks_per_node emulation of topo.h, so
 * two emulated nodes on one machine never pick the same GPU.  Each rank
 * of a node sees its own list of devices (CUDA_VISIBLE_DEVICES, Slurm
 * --gpus-per-task, MIG): all 8 of the machine, or exactly its own one.
 * The lists of the node are gathered and every rank computes the same
 * assignment: a matching of ranks to distinct devices (by UUID) in which
 * each rank gets one it sees, preferring for rank i its i-th free device,
 * so 8 ranks seeing 8 GPUs get 0..7 and a rank that sees exactly one GPU
 * gets that one.  Two ranks on a node never share a device (NCCL refuses
 * "Duplicate GPU") unless the caller allows it (FsdpGpuSelectShared, for
 * collectives over MPI: -device_coll); when no such matching exists every rank of the job
 * returns the same FSDP_ERR_USAGE naming the node, its ranks and the
 * distinct devices they see. */
#ifndef FSDP_GPU_SELECT_H
#define FSDP_GPU_SELECT_H

#include <mpi.h>

#define FSDP_GPU_UUID_BYTES 16
#define FSDP_GPU_MAX_VISIBLE 32 /* devices listed per rank (more are ignored) */
#define FSDP_GPU_MAX_NODE_RANKS 256

/* The devices one rank sees, in its CUDA order (device index = position). */
typedef struct {
  int n;
  unsigned char uuid[FSDP_GPU_MAX_VISIBLE][FSDP_GPU_UUID_BYTES];
} FsdpGpuList;

/* Not collective, pure.  lists[r]: what node rank r sees (0 <= r <
 * nranks).  On success returns 0 and pick[r] = the index into lists[r] of
 * the device of rank r (all distinct by UUID).  Otherwise returns the
 * number of ranks left without a device (>= 1), *ndistinct = the number
 * of distinct devices the node's ranks see, and pick[r] = -1 for those
 * ranks. */
int FsdpGpuAssign(int nranks, const FsdpGpuList *lists, int *pick, int *ndistinct);

/* Collective on world (every rank of the job).  Splits world into real
 * nodes (MPI_COMM_TYPE_SHARED), gathers each node's lists, assigns
 * (FsdpGpuAssign).  *pick = the index into mine of this rank's device;
 * *node_rank, *node_size (may be NULL): this rank in its real node.
 * probe: why this rank sees no device ("" or NULL if it sees some), for
 * the message.  Failure anywhere: FSDP_ERR_USAGE on every rank, the same
 * message ("4 ranks on node gpu07 but only 2 distinct GPUs visible to
 * them: ..."). */
int FsdpGpuSelect(MPI_Comm world, const FsdpGpuList *mine, const char *probe, int *pick,
                  int *node_rank, int *node_size);
/* The same; with allow_share, ranks left without a device of their own
 * share one ([Note: ranks sharing a GPU] in gpu_select.c) instead of the
 * usage error, and *shared (may be NULL) = 1 on every rank of world when
 * any node shares.  Only a node with no device at all still fails. */
int FsdpGpuSelectShared(MPI_Comm world, const FsdpGpuList *mine, const char *probe,
                        int allow_share, int *pick, int *node_rank, int *node_size, int *shared);

#endif
