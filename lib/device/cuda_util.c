/* cuda_util.c: GPU detection and selection, streams and events, tagged
 * device memory and pools (see cuda_util.h).  Built with configure
 * --with-cuda only; cuda_none.c stands in for it otherwise. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "device/cuda_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_call.h"
#include "device/gpu_select.h"

static char g_probe_msg[256];

const char *FsdpCudaProbeMessage(void) { return g_probe_msg; }


/* ---- detection and selection --------------------------------------------- */

int FsdpCudaDeviceCount(int *count)
{
  if (!count) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaDeviceCount: NULL count");
  *count = 0;
  g_probe_msg[0] = '\0';
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* No driver, an old driver, no device, a device in a bad state: all
     * mean "no usable GPU here", which is an answer, not an error. */
    snprintf(g_probe_msg, sizeof g_probe_msg, "%s", cudaGetErrorString(e));
    (void)cudaGetLastError(); /* reset the runtime's last-error slot */
    return FSDP_SUCCESS;
  }
  if (n == 0) snprintf(g_probe_msg, sizeof g_probe_msg, "no CUDA device is visible");
  *count = n;
  return FSDP_SUCCESS;
}

int FsdpCudaDeviceDescribe(int device, char *buf, size_t size)
{
  if (!buf || size == 0) return FSDP_SUCCESS;
  struct cudaDeviceProp p;
  FSDP_CALL_CUDA(cudaGetDeviceProperties(&p, device));
  int drv = 0, rt = 0;
  FSDP_CALL_CUDA(cudaDriverGetVersion(&drv));
  FSDP_CALL_CUDA(cudaRuntimeGetVersion(&rt));
  snprintf(buf, size, "%s (sm_%d%d, %.1f GiB, driver %d.%d, runtime %d.%d)", p.name, p.major,
           p.minor, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), drv / 1000,
           (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
  return FSDP_SUCCESS;
}


/* The device of this process, made current on every thread that touches
 * CUDA (FsdpCudaBindThread); -1 before FsdpCudaSelectDevice. */
static int g_device = -1;
static _Thread_local int tl_bound = -1;

int FsdpCudaSelectDevice(MPI_Comm comm, int *device)
{
  return FsdpCudaSelectDeviceShared(comm, 0, device, NULL);
}

int FsdpCudaSelectDeviceShared(MPI_Comm comm, int allow_share, int *device, int *shared)
{
  if (device) *device = -1;
  if (shared) *shared = 0;
  /* [Note: one GPU per rank] (gpu_select.h): list what this rank sees,
   * by UUID, and let the real node agree on who takes which. */
  FsdpGpuList mine;
  memset(&mine, 0, sizeof mine);
  int gpus = 0;
  FSDP_CALL(FsdpCudaDeviceCount(&gpus));
  int cuda_index[FSDP_GPU_MAX_VISIBLE]; /* list position -> CUDA device */
  char why[256];
  snprintf(why, sizeof why, "%s", g_probe_msg);
  for (int d = 0; d < gpus && d < FSDP_GPU_MAX_VISIBLE; d++) {
    /* properties only: no context is created on devices not chosen */
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e != cudaSuccess) {
      snprintf(why, sizeof why, "device %d: %s", d, cudaGetErrorString(e));
      (void)cudaGetLastError();
      continue;
    }
    memcpy(mine.uuid[mine.n], p.uuid.bytes, FSDP_GPU_UUID_BYTES);
    /* an all-zero UUID (never seen, but not promised): the PCI location */
    static const unsigned char zero[FSDP_GPU_UUID_BYTES];
    if (!memcmp(mine.uuid[mine.n], zero, FSDP_GPU_UUID_BYTES))
      snprintf((char *)mine.uuid[mine.n], FSDP_GPU_UUID_BYTES, "%x:%x:%x", p.pciDomainID,
               p.pciBusID, p.pciDeviceID);
    cuda_index[mine.n++] = d;
  }
  int pick = -1, node_rank = 0, node_size = 1;
  FSDP_CALL(FsdpGpuSelectShared(comm, &mine, why, allow_share, &pick, &node_rank, &node_size,
                                shared));
  /* A device that is there but cannot be made current (exclusive mode,
   * in use, broken) fails on its rank; the others learn it here instead of
   * hanging in the next collective. */
  int dev = cuda_index[pick];
  cudaError_t e = cudaSetDevice(dev);
  if (e == cudaSuccess) e = cudaFree(NULL); /* create the context now */
  int bad = e != cudaSuccess, any_bad = 0;
  FSDP_CALL_MPI(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm));
  if (bad)
    FSDP_ERROR(FSDP_ERR_CUDA, "selecting GPU %d of the %d this rank sees (node rank %d of %d): %s",
               dev, gpus, node_rank, node_size, cudaGetErrorString(e));
  if (any_bad)
    FSDP_ERROR(FSDP_ERR_CUDA, "GPU selection failed on another rank (see its message)");
  g_device = dev;
  tl_bound = dev;
  if (device) *device = dev;
  return FSDP_SUCCESS;
}

int FsdpCudaCurrentDevice(void) { return g_device; }

int FsdpCudaBindThread(void)
{
  if (g_device < 0 || tl_bound == g_device) return FSDP_SUCCESS;
  FSDP_CALL_CUDA(cudaSetDevice(g_device));
  tl_bound = g_device;
  return FSDP_SUCCESS;
}

/* ---- streams and events --------------------------------------------------- */

int FsdpCudaStreamCreate(int high_priority, void **stream)
{
  if (!stream) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaStreamCreate: NULL stream");
  *stream = NULL;
  int lo = 0, hi = 0;
  FSDP_CALL_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t s;
  FSDP_CALL_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? hi : lo));
  *stream = (void *)s;
  return FSDP_SUCCESS;
}

int FsdpCudaStreamDestroy(void **stream)
{
  if (!stream || !*stream) return FSDP_SUCCESS;
  cudaStream_t s = (cudaStream_t)*stream;
  *stream = NULL;
  FSDP_CALL_CUDA(cudaStreamDestroy(s));
  return FSDP_SUCCESS;
}

int FsdpCudaStreamSynchronize(void *stream)
{
  FSDP_CALL_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
  return FSDP_SUCCESS;
}

/* ---- device memory -------------------------------------------------------- */

/* Blocks of FsdpCudaMalloc, for the size and tag at free.  Allocation is
 * rare (setup) and happens on the compute thread only, like FsdpMalloc. */
typedef struct {
  void *ptr;
  size_t bytes;
  FsdpMemTag tag;
} DevBlock;

static DevBlock *g_blocks;
static size_t g_nblocks, g_capblocks;
static FsdpCudaMemStats g_stats;

static void StatsAdd(FsdpMemTag tag, size_t bytes)
{
  g_stats.allocated += bytes;
  if (g_stats.allocated > g_stats.peak) g_stats.peak = g_stats.allocated;
  g_stats.tag_allocated[tag] += bytes;
  if (g_stats.tag_allocated[tag] > g_stats.tag_peak[tag])
    g_stats.tag_peak[tag] = g_stats.tag_allocated[tag];
  g_stats.num_allocs++;
}

static void StatsSub(FsdpMemTag tag, size_t bytes)
{
  g_stats.allocated -= bytes;
  g_stats.tag_allocated[tag] -= bytes;
}

/* cudaMalloc with one retry after synchronizing the device, counted. */
static int DevMalloc(FsdpMemTag tag, size_t bytes, void **out)
{
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    g_stats.alloc_retries++;
    cudaDeviceSynchronize();
    e = cudaMalloc(&p, bytes);
  }
  if (e != cudaSuccess && e != cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    FSDP_ERROR(FSDP_ERR_CUDA, "allocating %zu device bytes for %s: %s", bytes,
               FsdpMemTagName(tag), cudaGetErrorString(e));
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    g_stats.alloc_failures++;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    FSDP_ERROR(FSDP_ERR_MEM,
               "out of device memory allocating %zu bytes for %s: %s (device: %zu of %zu bytes "
               "free; this process holds %zu)",
               bytes, FsdpMemTagName(tag), cudaGetErrorString(e), free_b, total_b,
               g_stats.reserved);
  }
  g_stats.reserved += bytes;
  *out = p;
  return FSDP_SUCCESS;
}

int FsdpCudaMalloc(FsdpMemTag tag, size_t bytes, void *ptr)
{
  if (!ptr || (int)tag < 0 || tag >= FSDP_MEM_NTAGS)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaMalloc: bad arguments");
  *(void **)ptr = NULL;
  if (bytes == 0) return FSDP_SUCCESS;
  if (FsdpArrayReserve(&g_blocks, &g_capblocks, g_nblocks + 1, sizeof *g_blocks))
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory allocating %zu bytes",
               (g_capblocks ? 2 * g_capblocks : 16) * sizeof *g_blocks);
  void *p = NULL;
  FSDP_CALL(DevMalloc(tag, bytes, &p));
  /* Zeroed before return: the caller may fill it from any stream next. */
  cudaError_t e = cudaMemsetAsync(p, 0, bytes, 0);
  if (e == cudaSuccess) e = cudaStreamSynchronize(0);
  if (e != cudaSuccess) {
    cudaFree(p);
    g_stats.reserved -= bytes;
    FSDP_ERROR(FSDP_ERR_CUDA, "zeroing %zu device bytes for %s: %s", bytes, FsdpMemTagName(tag),
               cudaGetErrorString(e));
  }
  g_blocks[g_nblocks++] = (DevBlock){p, bytes, tag};
  StatsAdd(tag, bytes);
  *(void **)ptr = p;
  return FSDP_SUCCESS;
}

int FsdpCudaFree(void *ptr)
{
  if (!ptr || !*(void **)ptr) return FSDP_SUCCESS;
  void *p = *(void **)ptr;
  *(void **)ptr = NULL;
  size_t i = 0;
  while (i < g_nblocks && g_blocks[i].ptr != p) i++;
  if (i == g_nblocks)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaFree: %p was not allocated by FsdpCudaMalloc", p);
  DevBlock b = g_blocks[i];
  g_blocks[i] = g_blocks[--g_nblocks];
  StatsSub(b.tag, b.bytes);
  g_stats.reserved -= b.bytes;
  FSDP_CALL_CUDA(cudaFree(p));
  if (g_nblocks == 0) {
    free(g_blocks);
    g_blocks = NULL;
    g_capblocks = 0;
  }
  return FSDP_SUCCESS;
}

int FsdpCudaMallocHost(size_t bytes, void *ptr)
{
  if (!ptr) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaMallocHost: NULL ptr");
  *(void **)ptr = NULL;
  if (bytes == 0) return FSDP_SUCCESS;
  void *p = NULL;
  cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess)
    FSDP_ERROR(FSDP_ERR_MEM, "out of pinned host memory allocating %zu bytes: %s", bytes,
               cudaGetErrorString(e));
  memset(p, 0, bytes);
  *(void **)ptr = p;
  return FSDP_SUCCESS;
}

int FsdpCudaFreeHost(void *ptr)
{
  if (!ptr || !*(void **)ptr) return FSDP_SUCCESS;
  void *p = *(void **)ptr;
  *(void **)ptr = NULL;
  FSDP_CALL_CUDA(cudaFreeHost(p));
  return FSDP_SUCCESS;
}

int FsdpCudaMemcpyAsync(void *dst, const void *src, size_t bytes, void *stream)
{
  if (bytes == 0) return FSDP_SUCCESS;
  FSDP_CALL_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
  return FSDP_SUCCESS;
}

int FsdpCudaMemsetAsync(void *dst, int value, size_t bytes, void *stream)
{
  if (bytes == 0) return FSDP_SUCCESS;
  FSDP_CALL_CUDA(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream));
  return FSDP_SUCCESS;
}

/* ---- pools ------------------------------------------------------------------ */

#define POOL_ALIGN ((size_t)256)

struct FsdpCudaPool_ {
  char *base;
  size_t size, used;
  FsdpMemTag tag; /* of the reservation */
  size_t tag_used[FSDP_MEM_NTAGS];
};

int FsdpCudaPoolCreate(FsdpMemTag tag, size_t bytes, FsdpCudaPool *out)
{
  if (!out || (int)tag < 0 || tag >= FSDP_MEM_NTAGS)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaPoolCreate: bad arguments");
  *out = NULL;
  FsdpCudaPool p = calloc(1, sizeof *p);
  FSDP_CHECK_ALLOC(p, sizeof *p);
  p->tag = tag;
  p->size = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  if (p->size) {
    int err = DevMalloc(tag, p->size, (void **)&p->base);
    if (err) {
      free(p);
      return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
    }
  }
  *out = p;
  return FSDP_SUCCESS;
}

int FsdpCudaPoolAlloc(FsdpCudaPool p, FsdpMemTag tag, size_t bytes, void *ptr)
{
  if (!p || !ptr || (int)tag < 0 || tag >= FSDP_MEM_NTAGS)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaPoolAlloc: bad arguments");
  *(void **)ptr = NULL;
  if (bytes == 0) return FSDP_SUCCESS;
  size_t need = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  if (need > p->size - p->used) {
    g_stats.alloc_failures++;
    FSDP_ERROR(FSDP_ERR_MEM,
               "device pool (%s, %zu bytes) cannot hold %zu more bytes for %s (%zu in use): "
               "the memory plan is wrong",
               FsdpMemTagName(p->tag), p->size, bytes, FsdpMemTagName(tag), p->used);
  }
  *(void **)ptr = p->base + p->used;
  p->used += need;
  p->tag_used[tag] += need;
  StatsAdd(tag, need);
  return FSDP_SUCCESS;
}

int FsdpCudaPoolReset(FsdpCudaPool p)
{
  if (!p) return FSDP_SUCCESS;
  for (int t = 0; t < FSDP_MEM_NTAGS; t++) {
    StatsSub((FsdpMemTag)t, p->tag_used[t]);
    p->tag_used[t] = 0;
  }
  p->used = 0;
  return FSDP_SUCCESS;
}

int FsdpCudaPoolDestroy(FsdpCudaPool *pp)
{
  if (!pp || !*pp) return FSDP_SUCCESS;
  FsdpCudaPool p = *pp;
  *pp = NULL;
  FsdpCudaPoolReset(p);
  g_stats.reserved -= p->size;
  cudaError_t e = p->base ? cudaFree(p->base) : cudaSuccess;
  free(p);
  FSDP_CALL_CUDA(e);
  return FSDP_SUCCESS;
}

void FsdpCudaMemGetStats(FsdpCudaMemStats *s)
{
  if (s) *s = g_stats;
}
