/* cuda_util.h: GPU detection and selection, streams, and tagged device
 * memory with the statistics the run reports (allocated, peak, reserved,
 * allocation retries and failures).
 *
 * The CUDA back-end's own interface (cuda_util.c, built by configure
 * --with-cuda).  A build without CUDA links cuda_none.c instead, which
 * keeps only what a caller needs to find out that no GPU is usable:
 * FsdpCudaBuilt (0), FsdpCudaDeviceCount (0 devices) and
 * FsdpCudaProbeMessage (why); shared code asks device.h
 * (FsdpDeviceKindAvailable) and needs none of it.  Handles are void
 * pointers (cudaStream_t, cudaEvent_t) so that this header needs no CUDA
 * header; the error adapters for CUDA / cuBLAS / NCCL status codes are in
 * cuda_call.h (not installed).
 *
 * [Note: one GPU per rank] is in gpu_select.h (the choice, plain C and
 * MPI so the CPU build tests it); FsdpCudaSelectDevice feeds it this
 * rank's devices and makes the chosen one current, on the calling thread
 * and (FsdpCudaBindThread) on every other thread that calls CUDA or NCCL:
 * a thread that never called cudaSetDevice works on device 0 and opens a
 * context there (0.5 GiB each, an error in exclusive-process mode).
 */
#ifndef FSDP_CUDA_UTIL_H
#define FSDP_CUDA_UTIL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/mem.h"
#include "device/device.h"

/* 1 if this build has the CUDA back-end (FsdpDeviceKindAvailable). */
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
 * of this rank among those it sees and the other ranks of its real node
 * see ([Note: one GPU per rank], gpu_select.h) and makes it current
 * (cudaSetDevice, context created).  When a node has more ranks than
 * distinct GPUs, or no GPU at all, every rank returns the same
 * FSDP_ERR_USAGE naming the first such node: "4 ranks on node gpu07 but
 * only 2 distinct GPUs visible to them: ...".  *device (may be NULL) gets
 * the CUDA device index. */
int FsdpCudaSelectDevice(MPI_Comm comm, int *device);
/* The same; with allow_share, ranks without a GPU of their own share one
 * (FsdpGpuSelectShared) and *shared (may be NULL) says whether any does. */
int FsdpCudaSelectDeviceShared(MPI_Comm comm, int allow_share, int *device, int *shared);
/* The device FsdpCudaSelectDevice chose (-1 before). */
int FsdpCudaCurrentDevice(void);
/* Makes the chosen device current on the calling thread (once per thread;
 * nothing before FsdpCudaSelectDevice).  Every thread other than the one
 * that selected calls it before its first CUDA or NCCL call. */
int FsdpCudaBindThread(void);

/* Not collective.  One line about a device for logs and run files:
 * "NVIDIA H200 (sm_90, 139.8 GiB, driver 13.0, runtime 13.0)". */
int FsdpCudaDeviceDescribe(int device, char *buf, size_t size);

/* ---- streams (cudaStream_t as void *) ------------------------------------- */

/* A non-blocking stream (no implicit sync with the legacy default stream);
 * high_priority for the communication stream, so collectives are scheduled
 * ahead of compute kernels that are ready at the same time. */
int FsdpCudaStreamCreate(int high_priority, void **stream);
int FsdpCudaStreamDestroy(void **stream); /* accepts NULL; sets it to NULL */
int FsdpCudaStreamSynchronize(void *stream);
/* (CUDA events that order streams are made where they are used: the NCCL
 * back-end's own, coll_nccl.c.) */

/* ---- device memory -------------------------------------------------------- */

/* Device memory statistics (device.h: FsdpDeviceMemStats). */
typedef FsdpDeviceMemStats FsdpCudaMemStats;

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
int FsdpCudaPoolDestroy(FsdpCudaPool *pool);

/* Statistics over FsdpCudaMalloc and the pools (pool blocks count as
 * allocated under their tag; the pool's whole size as reserved). */
void FsdpCudaMemGetStats(FsdpCudaMemStats *s);

#endif
