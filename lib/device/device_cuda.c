/* device_cuda.c: the CUDA back-end of device.h (configure --with-cuda):
 * one GPU per rank (cuda_util.c), operations as launches on the compute
 * stream, the kernels of kernels/cuda. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "base/error.h"
#include "device/cuda_util.h"
#include "device/device_backend.h"
#include "kernels/cuda/kernels_cuda.h"

static int g_gpu = -1;
static void *g_stream = NULL; /* compute stream (cudaStream_t) */
static int *g_flag = NULL;    /* device int of the overflow check, allocated once */
static double *g_sums = NULL; /* FSDP_DEVICE_READBACK_MAX device doubles, allocated once */

static int CudaSetUp(MPI_Comm world, int allow_share, int *shared)
{
  /* the real node, found from world: gpu_select.h */
  FSDP_CALL(FsdpCudaSelectDeviceShared(world, allow_share, &g_gpu, shared));
  FSDP_CALL(FsdpCudaStreamCreate(0, &g_stream));
  FSDP_CALL(FsdpKernelsCudaInit(g_gpu, g_stream));
  /* the kernel table's buffers (what a model allocates) are accounted here */
  FsdpKernelsCudaSetAllocator(FsdpCudaMalloc, FsdpCudaFree);
  /* allocated here, not per check: nothing is allocated after setup */
  FSDP_CALL(FsdpCudaMalloc(FSDP_MEM_OTHER, sizeof(int), &g_flag));
  FSDP_CALL(FsdpCudaMalloc(FSDP_MEM_OTHER, FSDP_DEVICE_READBACK_MAX * sizeof(double), &g_sums));
  return FSDP_SUCCESS;
}

static int CudaFinalize(void)
{
  FSDP_CALL(FsdpCudaFree(&g_flag));
  FSDP_CALL(FsdpCudaFree(&g_sums));
  FsdpKernelsCudaFinalize();
  FSDP_CALL(FsdpCudaStreamDestroy(&g_stream));
  return FSDP_SUCCESS;
}

static void *CudaComputeStream(void) { return g_stream; }
static int CudaDescribe(char *buf, size_t size) { return FsdpCudaDeviceDescribe(g_gpu, buf, size); }

static int CudaMemStats(FsdpDeviceMemStats *s)
{
  FsdpCudaMemGetStats(s);
  return 1;
}

static int CudaSetTF32(int on)
{
  FsdpKernelsCudaSetTF32(on);
  return FsdpKernelsCudaCheck(); /* a failed cublasSetMathMode is recorded there */
}

static int CudaZero(void *p, size_t bytes) { return FsdpCudaMemsetAsync(p, 0, bytes, g_stream); }

/* Waiting for the stream makes the host side usable (or reusable) on return.
 * Any thread may copy (the MPI staging of coll_staged.c runs on the stream
 * threads): it is bound to this rank's GPU first. */
static int CudaCopy(void *dst, const void *src, size_t bytes)
{
  FSDP_CALL(FsdpCudaBindThread());
  FSDP_CALL(FsdpCudaMemcpyAsync(dst, src, bytes, g_stream));
  return FsdpCudaStreamSynchronize(g_stream);
}

static int CudaCastFromFloat(FsdpDtype to, const float *src, void *dst, size_t n)
{
  cast_from_float_cuda(dst, to, src, n);
  return FSDP_SUCCESS;
}

static int CudaCastToFloat(FsdpDtype from, const void *src, float *dst, size_t n)
{
  cast_to_float_cuda(dst, src, from, n);
  return FSDP_SUCCESS;
}

static int CudaAddScaled(float *dst, const void *src, FsdpDtype dt, float scale, size_t n)
{
  add_scaled_cuda(dst, src, dt, scale, n);
  return FSDP_SUCCESS;
}

static int CudaAnyNonFinite(const float *x, size_t n, int *bad)
{
  int host = 0;
  FSDP_CALL(FsdpCudaMemsetAsync(g_flag, 0, sizeof(int), g_stream));
  nonfinite_check_cuda(g_flag, x, FSDP_DTYPE_FP32, n);
  FSDP_CALL(CudaCopy(&host, g_flag, sizeof host));
  *bad = host != 0;
  return FSDP_SUCCESS;
}

/* [Note: one readback per step] (device.h): one launch sequence, one copy. */
static int CudaSumSquaresMany(const float *const *x, const size_t *n, int count, double *sq)
{
  static double host[FSDP_DEVICE_READBACK_MAX];
  for (int i = 0; i < count; i++) sum_squares_device_cuda(g_sums + i, x[i], n[i]);
  FSDP_CALL(FsdpKernelsCudaCheck()); /* a failed launch: not a garbage norm */
  FSDP_CALL(CudaCopy(host, g_sums, (size_t)count * sizeof(double)));
  double s = 0.0;
  for (int i = 0; i < count; i++) s += host[i]; /* buffer order, as the per-unit loop */
  *sq = s;
  return FSDP_SUCCESS;
}

static int CudaAnyNonFiniteMany(const float *const *x, const size_t *n, int count, int *bad)
{
  int host = 0;
  FSDP_CALL(FsdpCudaMemsetAsync(g_flag, 0, sizeof(int), g_stream));
  for (int i = 0; i < count; i++) nonfinite_check_cuda(g_flag, x[i], FSDP_DTYPE_FP32, n[i]);
  FSDP_CALL(FsdpKernelsCudaCheck());
  FSDP_CALL(CudaCopy(&host, g_flag, sizeof host));
  *bad = host != 0;
  return FSDP_SUCCESS;
}

static const FsdpDeviceBackend kCudaBackend = {
    .set_up = CudaSetUp,
    .finalize = CudaFinalize,
    .kernels = FsdpKernelsCuda,
    .compute_stream = CudaComputeStream,
    .describe = CudaDescribe,
    .alloc = FsdpCudaMalloc,
    .free = FsdpCudaFree,
    .zero = CudaZero,
    .copy = CudaCopy,
    .host_alloc = FsdpCudaMallocHost,
    .host_free = FsdpCudaFreeHost,
    .cast_from_float = CudaCastFromFloat,
    .cast_to_float = CudaCastToFloat,
    .add_scaled = CudaAddScaled,
    .any_nonfinite = CudaAnyNonFinite,
    .check = FsdpKernelsCudaCheck,
    .mem_stats = CudaMemStats,
    .set_tf32 = CudaSetTF32,
    .sum_squares_many = CudaSumSquaresMany,
    .any_nonfinite_many = CudaAnyNonFiniteMany,
};

/* the module's table (cuda_module_entry.c: [Note: the CUDA module]) */
const FsdpDeviceBackend *FsdpCudaDeviceBackend(void);
const FsdpDeviceBackend *FsdpCudaDeviceBackend(void) { return &kCudaBackend; }
