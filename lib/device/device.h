/* device.h: where a rank's buffers live and the few buffer operations the
 * runtime, the model and the optimizer do outside the compute kernels
 * (zeroing, copies to and from the host, dtype casts, landing reduced
 * gradients, the overflow check).
 *
 * One device per process (one GPU per rank, or the CPU), chosen once by
 * FsdpDeviceSetUp: every FsdpDevice* call then acts on it.  With the CPU
 * these are plain memory operations; with CUDA they are launches on the
 * compute stream (asynchronous; copies to the host and the overflow check
 * wait for it).  The compute kernels come from FsdpDeviceKernels().
 * Each back-end is one file (device_cpu.c, device_cuda.c: [Note: one file
 * per back-end] in device_backend.h); which exist is configure's choice,
 * asked at run time with FsdpDeviceKindAvailable.
 *
 * [Note: CUDA streams in the runtime] With CUDA the runtime launches
 * everything from the compute thread: kernels and casts on the compute
 * stream, NCCL collectives on their communicator's stream (all-gathers and
 * reduce-scatters on two: [Note: one NCCL stream per communicator]), which
 * first waits on the device for the compute stream (coll_nccl.c, [Note: NCCL
 * collectives and streams]).  A reduced gradient that must be landed into
 * the fp32 shard (low-precision reduction, per-micro-step accumulation) is
 * landed on the compute stream after it waits, on the device, for the
 * collective; so is a gathered unit used: the compute stream waits for its
 * all-gather on the device and the host goes on launching (fsdp.c:
 * UnitWaitGather; the exposed-communication time the trace measures on the
 * host is then ~0 for gathers).  The compute thread waits on the host only
 * where the CPU runtime must (the -limit_all_gathers limiter, gradient slot
 * reused, end of backward), through the same FsdpEvents.
 */
#ifndef FSDP_DEVICE_H
#define FSDP_DEVICE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "kernels/kernels.h"
#include "base/mem.h"

typedef enum { FSDP_DEVICE_CPU, FSDP_DEVICE_CUDA } FsdpDeviceKind;

/* 1 if this build has the back-end of kind (the CPU always; CUDA with
 * configure --with-cuda), whether or not a device is usable here. */
int FsdpDeviceKindAvailable(FsdpDeviceKind kind);

/* Collective on world (every rank of the job).  CPU: nothing to do.
 * CUDA: picks the GPU from the rank's position in its node (a usage error
 * on every rank when a node has more ranks than GPUs, or no GPU, or the
 * build has no CUDA), creates the compute stream and initializes the
 * kernels.  The node is the real one, found from world (MPI_COMM_TYPE_SHARED,
 * [Note: one GPU per rank] in gpu_select.h), not the communicator topology's
 * node, which -ranks_per_node may emulate: so the device layer needs world
 * only, and no comm/ header. */
int FsdpDeviceSetUp(FsdpDeviceKind kind, MPI_Comm world);
/* The same; with allow_share, CUDA ranks of a node with fewer GPUs than
 * ranks share them instead of the usage error, and *shared (may be NULL)
 * is 1 on every rank when any rank shares (its collectives cannot be NCCL:
 * -device_coll).  CPU: *shared = 0. */
int FsdpDeviceSetUpShared(FsdpDeviceKind kind, MPI_Comm world, int allow_share, int *shared);
/* Not collective.  Releases what SetUp made; safe without SetUp. */
int FsdpDeviceFinalize(void);

FsdpDeviceKind FsdpDeviceGetKind(void);
const FsdpKernelOps *FsdpDeviceKernels(void);
/* CUDA: the compute stream (cudaStream_t); CPU: NULL. */
void *FsdpDeviceComputeStream(void);
/* One line describing the device ("cpu (OpenBLAS core SkylakeX)", GPU name). */
int FsdpDeviceDescribe(char *buf, size_t size);

/* Device memory statistics of this process, in bytes.  reserved is what
 * was obtained from the driver (cudaMalloc), allocated what is handed out
 * (the two differ inside pools); peak is the highest allocated.
 * alloc_retries counts allocations that failed once and succeeded after
 * the device was synchronized (freed memory returned); alloc_failures
 * those that failed for good.  [Note: device memory planned once]
 * (cuda_util.h): both stay 0 when every buffer is planned before step 1. */
typedef struct {
  size_t allocated, peak, reserved;
  size_t tag_allocated[FSDP_MEM_NTAGS], tag_peak[FSDP_MEM_NTAGS];
  uint64_t num_allocs, alloc_retries, alloc_failures;
} FsdpDeviceMemStats;

/* Not collective.  1 and *s filled when the device keeps memory statistics
 * of its own (CUDA); 0 and *s zeroed on the CPU, whose buffers are host
 * memory (FsdpMemGetStats). */
int FsdpDeviceGetMemStats(FsdpDeviceMemStats *s);

/* Zeroed allocation on the device (FsdpMalloc on the CPU); free takes the
 * address of the pointer and accepts NULL. */
int FsdpDeviceAlloc(FsdpMemTag tag, size_t bytes, void *ptr);
int FsdpDeviceFree(void *ptr);

/* Buffer operations on the device, in compute-stream order. */
int FsdpDeviceZero(void *p, size_t bytes);
int FsdpDeviceCopyToHost(void *host_dst, const void *dev_src, size_t bytes); /* waits */
int FsdpDeviceCopyFromHost(void *dev_dst, const void *host_src, size_t bytes);
/* Host memory for staging device buffers (CUDA: pinned, the fastest to
 * copy; CPU: FsdpMalloc), tagged other; free takes &ptr, accepts NULL. */
int FsdpDeviceHostAlloc(size_t bytes, void *ptr);
int FsdpDeviceHostFree(void *ptr);
int FsdpDeviceCastFromFloat(FsdpDtype to, const float *src, void *dst, size_t n);
int FsdpDeviceCastToFloat(FsdpDtype from, const void *src, float *dst, size_t n);
/* dst (fp32) += scale * src (dtype dt). */
int FsdpDeviceAddScaled(float *dst, const void *src, FsdpDtype dt, float scale, size_t n);
/* *bad = 1 if any of x[0..n) is inf or NaN (waits). */
int FsdpDeviceAnyNonFinite(const float *x, size_t n, int *bad);
/* Report kernel launch errors recorded since the last check, without
 * waiting (CPU: nothing). */
int FsdpDeviceCheck(void);
/* fp32 matmuls on TF32 tensor cores (on = 1: 10-bit mantissa products,
 * fp32 sums, as PyTorch's allow_tf32) or in true fp32 (0).  *applied = 1
 * where the back-end has the choice (CUDA), 0 where on means nothing (the
 * CPU).  bf16 matmuls are unaffected. */
int FsdpDeviceSetTF32(int on, int *applied);

/* [Note: one readback per step] The optimizer's gradient norm and the
 * scaler's overflow check cover every unit's gradient shard.  Asked unit
 * by unit, each answer is a device-to-host copy and a wait for the stream
 * (a bubble per unit and step); these take all the units' buffers at once,
 * launch every reduction, and read the results back once (CUDA: the
 * per-buffer sums land in a device array of FSDP_DEVICE_READBACK_MAX
 * doubles, copied back in one transfer per that many buffers, and are
 * added on the host in buffer order, so the norm is the sum the per-unit
 * loop gave, bit for bit).  Buffers with n[i] == 0 are skipped.
 * *sq = sum over i of sum_j x[i][j]^2 (double); *bad = 1 if any element
 * of any buffer is inf or NaN, else 0. */
#define FSDP_DEVICE_READBACK_MAX 1024
int FsdpDeviceSumSquaresMany(const float *const *x, const size_t *n, int count, double *sq);
int FsdpDeviceAnyNonFiniteMany(const float *const *x, const size_t *n, int count, int *bad);

#endif
