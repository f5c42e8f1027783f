/* device.c: the CPU and CUDA implementations of device.h. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "device/device.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#ifdef FSDP_HAVE_CUDA
#include "device/cuda_util.h"
#include "kernels/cuda/kernels_cuda.h"
#endif

static FsdpDeviceKind g_kind = FSDP_DEVICE_CPU;
static void *g_stream = NULL; /* CUDA compute stream */
#ifdef FSDP_HAVE_CUDA
static int g_gpu = -1;
static int *g_flag = NULL; /* device int of the overflow check, allocated once */
#endif

int FsdpDeviceSetUp(FsdpDeviceKind kind, FsdpTopo topo)
{
  if (kind == FSDP_DEVICE_CPU) {
    g_kind = kind;
    return FSDP_SUCCESS;
  }
#ifdef FSDP_HAVE_CUDA
  const FsdpGroup *node = FsdpTopoNode(topo);
  FSDP_CALL(FsdpCudaSelectDevice(FsdpTopoWorld(topo)->comm, node->rank, node->size, &g_gpu));
  FSDP_CALL(FsdpCudaStreamCreate(0, &g_stream));
  FSDP_CALL(FsdpKernelsCudaInit(g_gpu, g_stream));
  /* the kernel table's buffers (what a model allocates) are accounted here */
  FsdpKernelsCudaSetAllocator(FsdpCudaMalloc, FsdpCudaFree);
  /* allocated here, not per check: nothing is allocated after setup */
  FSDP_CALL(FsdpCudaMalloc(FSDP_MEM_OTHER, sizeof(int), &g_flag));
  g_kind = kind;
  return FSDP_SUCCESS;
#else
  (void)topo;
  FSDP_ERROR(FSDP_ERR_USAGE,
             "option -device cuda: this build has no CUDA back-end (configure --with-cuda); use "
             "-device cpu");
#endif
}

int FsdpDeviceFinalize(void)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) {
    FSDP_CALL(FsdpCudaFree(&g_flag));
    FsdpKernelsCudaFinalize();
    FSDP_CALL(FsdpCudaStreamDestroy(&g_stream));
  }
#endif
  g_kind = FSDP_DEVICE_CPU;
  return FSDP_SUCCESS;
}

FsdpDeviceKind FsdpDeviceGetKind(void) { return g_kind; }
void *FsdpDeviceComputeStream(void) { return g_stream; }

const FsdpKernelOps *FsdpDeviceKernels(void)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) return FsdpKernelsCuda();
#endif
  return FsdpKernelsCpu();
}

int FsdpDeviceDescribe(char *buf, size_t size)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) return FsdpCudaDeviceDescribe(g_gpu, buf, size);
#endif
  snprintf(buf, size, "cpu (OpenBLAS core %s)", FsdpKernelsCpuBlasCore());
  return FSDP_SUCCESS;
}

int FsdpDeviceAlloc(FsdpMemTag tag, size_t bytes, void *ptr)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) return FsdpCudaMalloc(tag, bytes, ptr);
#endif
  return FsdpMalloc(tag, bytes, ptr);
}

int FsdpDeviceFree(void *ptr)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) return FsdpCudaFree(ptr);
#endif
  return FsdpFree(ptr);
}

int FsdpDeviceZero(void *p, size_t bytes)
{
  if (!p || !bytes) return FSDP_SUCCESS;
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) return FsdpCudaMemsetAsync(p, 0, bytes, g_stream);
#endif
  memset(p, 0, bytes);
  return FSDP_SUCCESS;
}

/* Both directions: unified addressing lets one copy call serve; waiting
 * for the stream makes the host side usable (or reusable) on return. */
static int Copy(void *dst, const void *src, size_t bytes)
{
  if (!bytes) return FSDP_SUCCESS;
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) {
    FSDP_CALL(FsdpCudaMemcpyAsync(dst, src, bytes, g_stream));
    return FsdpCudaStreamSynchronize(g_stream);
  }
#endif
  if (dst != src) memcpy(dst, src, bytes);
  return FSDP_SUCCESS;
}

int FsdpDeviceCopyToHost(void *dst, const void *src, size_t bytes) { return Copy(dst, src, bytes); }
int FsdpDeviceCopyFromHost(void *dst, const void *src, size_t bytes) { return Copy(dst, src, bytes); }

int FsdpDeviceCastFromFloat(FsdpDtype to, const float *src, void *dst, size_t n)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) {
    cast_from_float_cuda(dst, to, src, n);
    return FSDP_SUCCESS;
  }
#endif
  FsdpDtypeFromFloat(to, src, dst, n);
  return FSDP_SUCCESS;
}

int FsdpDeviceCastToFloat(FsdpDtype from, const void *src, float *dst, size_t n)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) {
    cast_to_float_cuda(dst, src, from, n);
    return FSDP_SUCCESS;
  }
#endif
  FsdpDtypeToFloat(from, src, dst, n);
  return FSDP_SUCCESS;
}

int FsdpDeviceAddScaled(float *dst, const void *src, FsdpDtype dt, float scale, size_t n)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) {
    add_scaled_cuda(dst, src, dt, scale, n);
    return FSDP_SUCCESS;
  }
#endif
  if (dt == FSDP_DTYPE_FP32) {
    const float *s = src;
    for (size_t i = 0; i < n; i++) dst[i] += scale * s[i];
  } else {
    const uint16_t *s = src;
    if (dt == FSDP_DTYPE_BF16)
      for (size_t i = 0; i < n; i++) dst[i] += scale * FsdpBf16ToFloat(s[i]);
    else
      for (size_t i = 0; i < n; i++) dst[i] += scale * FsdpFp16ToFloat(s[i]);
  }
  return FSDP_SUCCESS;
}

int FsdpDeviceAnyNonFinite(const float *x, size_t n, int *bad)
{
  *bad = 0;
  if (!n) return FSDP_SUCCESS;
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) {
    int host = 0;
    FSDP_CALL(FsdpCudaMemsetAsync(g_flag, 0, sizeof(int), g_stream));
    nonfinite_check_cuda(g_flag, x, FSDP_DTYPE_FP32, n);
    FSDP_CALL(FsdpDeviceCopyToHost(&host, g_flag, sizeof host));
    *bad = host != 0;
    return FSDP_SUCCESS;
  }
#endif
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) {
      *bad = 1;
      break;
    }
  return FSDP_SUCCESS;
}

int FsdpDeviceCheck(void)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) return FsdpKernelsCudaCheck();
#endif
  return FSDP_SUCCESS;
}

int FsdpDeviceSynchronize(void)
{
#ifdef FSDP_HAVE_CUDA
  if (g_kind == FSDP_DEVICE_CUDA) return FsdpKernelsCudaSynchronize();
#endif
  return FSDP_SUCCESS;
}
