/* cuda_util.h: GPU detection and selection, error adapters for CUDA /
 * cuBLAS / NCCL, streams and events, and tagged device memory with the
 * statistics the run reports (allocated, peak, reserved, allocation
 * retries and failures).
 *
 * The functions exist in every build.  Without CUDA (configure without
 * --with-cuda) FsdpCudaDeviceCount reports 0 devices and every other
 * function is a usage error that says the build has no CUDA back-end, so
 * callers need no #ifdef.  Handles are void pointers (cudaStream_t,
 * cudaEvent_t) so that this header needs no CUDA header.
 *
 * [Note: one GPU per rank] Rank r of a node uses device r (its rank in the
 * node communicator).  More ranks on a node than GPUs is a usage error
 * (FsdpCudaSelectDevice), raised on every rank at once so the job stops
 * instead of hanging; sharing a GPU between ranks belongs to the MPI
 * backend with host staging, not to NCCL (one NCCL rank per device).
 */
#ifndef FSDP_CUDA_UTIL_H
#define FSDP_CUDA_UTIL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/mem.h"

#ifdef FSDP_HAVE_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

/* Adapters: relay a CUDA / cuBLAS / NCCL status as FSDP_ERR_CUDA /
 * FSDP_ERR_NCCL with the library's own message. */
#define FSDP_CALL_CUDA(expr)                                                    \
  do {                                                                          \
    cudaError_t fsdp_cuda_err_ = (expr);                                        \
    if (fsdp_cuda_err_ != cudaSuccess)                                          \
      FSDP_ERROR(FSDP_ERR_CUDA, "%s failed: %s (%s)", #expr,                    \
                 cudaGetErrorString(fsdp_cuda_err_),                            \
                 cudaGetErrorName(fsdp_cuda_err_));                             \
  } while (0)

#define FSDP_CALL_CUBLAS(expr)                                                  \
  do {                                                                          \
    cublasStatus_t fsdp_cublas_st_ = (expr);                                    \
    if (fsdp_cublas_st_ != CUBLAS_STATUS_SUCCESS)                               \
      FSDP_ERROR(FSDP_ERR_CUDA, "%s failed: %s", #expr,                         \
                 cublasGetStatusString(fsdp_cublas_st_));                       \
  } while (0)

#define FSDP_CALL_NCCL(expr)                                                    \
  do {                                                                          \
    ncclResult_t fsdp_nccl_res_ = (expr);                                       \
    if (fsdp_nccl_res_ != ncclSuccess)                                          \
      FSDP_ERROR(FSDP_ERR_NCCL, "%s failed: %s", #expr,                         \
                 ncclGetErrorString(fsdp_nccl_res_));                           \
  } while (0)
#endif /* FSDP_HAVE_CUDA */

/* 1 if this build has the CUDA back-end. */
int FsdpCudaBuilt(void);

/* ---- detection and selection --------------------------------------------- */

/* Not collective.  *count = number of usable CUDA devices; 0 (and
 * FSDP_SUCCESS) when the build has no CUDA, no driver is loaded, the driver
 * is older than the runtime, or no device is visible.  The reason for a 0
 * is kept for FsdpCudaProbeMessage. */
int FsdpCudaDeviceCount(int *count);

/* Why the last FsdpCudaDeviceCount found no device ("" after a success),
 * e.g. "CUDA driver version is insufficient for CUDA runtime version". */
const char *FsdpCudaProbeMessage(void);

/* Collective on comm (all ranks of the job, e.g. world).  Picks the device
 * of this rank, local_rank among ranks_on_node ranks of its node ([Note:
 * one GPU per rank]), and makes it current (cudaSetDevice).  When any node
 * has more ranks than GPUs, or no GPU at all, every rank returns the same
 * FSDP_ERR_USAGE naming the first such node: "4 ranks on node gpu07 but
 * only 2 GPUs: ...".  *device (may be NULL) gets the device index. */
int FsdpCudaSelectDevice(MPI_Comm comm, int local_rank, int ranks_on_node, int *device);

/* Not collective.  One line about a device for logs and run files:
 * "NVIDIA H200 (sm_90, 139.8 GiB, driver 13.0, runtime 13.0)". */
int FsdpCudaDeviceDescribe(int device, char *buf, size_t size);

/* ---- streams and events (cudaStream_t / cudaEvent_t as void *) ----------- */

/* A non-blocking stream (no implicit sync with the legacy default stream);
 * high_priority for the communication stream, so collectives are scheduled
 * ahead of compute kernels that are ready at the same time. */
int FsdpCudaStreamCreate(int high_priority, void **stream);
int FsdpCudaStreamDestroy(void **stream); /* accepts NULL; sets it to NULL */
int FsdpCudaStreamSynchronize(void *stream);
/* Events without timing (cheapest kind), for ordering streams. */
int FsdpCudaEventCreate(void **event);
int FsdpCudaEventDestroy(void **event);
int FsdpCudaEventRecord(void *event, void *stream);
/* stream waits on the device for event's last record (the host goes on). */
int FsdpCudaStreamWaitEvent(void *stream, void *event);
int FsdpCudaEventQuery(void *event, int *done);
int FsdpCudaEventSynchronize(void *event);

/* ---- device memory -------------------------------------------------------- */

/* Device memory statistics of this process, in bytes.  reserved is what
 * was obtained from the driver (cudaMalloc), allocated what is handed out
 * (the two differ inside pools); peak is the highest allocated.
 * alloc_retries counts allocations that failed once and succeeded after
 * the device was synchronized (freed memory returned); alloc_failures
 * those that failed for good.  [Note: device memory planned once]: both
 * stay 0 when every buffer is planned before step 1. */
typedef struct {
  size_t allocated, peak, reserved;
  size_t tag_allocated[FSDP_MEM_NTAGS], tag_peak[FSDP_MEM_NTAGS];
  uint64_t num_allocs, alloc_retries, alloc_failures;
} FsdpCudaMemStats;

/* Not collective.  bytes of device memory under tag, 256-byte aligned,
 * zeroed (complete on return, so any stream may use the block at once);
 * *(void **)ptr gets the block (NULL for bytes == 0).  On failure
 * (after one retry) FSDP_ERR_MEM naming the tag, the size and the free and
 * total device memory. */
int FsdpCudaMalloc(FsdpMemTag tag, size_t bytes, void *ptr);
/* Frees a block of FsdpCudaMalloc; takes &ptr, accepts NULL. */
int FsdpCudaFree(void *ptr);
/* Pinned host memory (for device <-> host staging: checkpoints, host
 * collectives); counted apart from device memory, freed with
 * FsdpCudaFreeHost. */
int FsdpCudaMallocHost(size_t bytes, void *ptr);
int FsdpCudaFreeHost(void *ptr);
/* Copies of any direction (unified addressing), ordered on stream. */
int FsdpCudaMemcpyAsync(void *dst, const void *src, size_t bytes, void *stream);
int FsdpCudaMemsetAsync(void *dst, int value, size_t bytes, void *stream);

/* [Note: device memory planned once] A pool is one cudaMalloc made at
 * setup, carved by bump allocation into the buffers the plan needs
 * (shards, the gathered-buffer ring, gradient buffers, activations); it
 * never frees single blocks, only everything at once (Reset), so it cannot
 * fragment and a step never calls cudaMalloc.  A request the pool cannot
 * satisfy is FSDP_ERR_MEM naming the tag, the request and the pool's
 * size: the plan was wrong, which is a bug to report, not to retry. */
typedef struct FsdpCudaPool_ *FsdpCudaPool;
int FsdpCudaPoolCreate(FsdpMemTag tag, size_t bytes, FsdpCudaPool *pool);
/* 256-byte aligned, not zeroed. */
int FsdpCudaPoolAlloc(FsdpCudaPool pool, FsdpMemTag tag, size_t bytes, void *ptr);
int FsdpCudaPoolReset(FsdpCudaPool pool); /* every block of the pool is free */
size_t FsdpCudaPoolUsed(FsdpCudaPool pool);
size_t FsdpCudaPoolSize(FsdpCudaPool pool);
int FsdpCudaPoolDestroy(FsdpCudaPool *pool);

/* Statistics over FsdpCudaMalloc and the pools (pool blocks count as
 * allocated under their tag; the pool's whole size as reserved). */
void FsdpCudaMemGetStats(FsdpCudaMemStats *s);
void FsdpCudaMemResetPeaks(void);

#endif
