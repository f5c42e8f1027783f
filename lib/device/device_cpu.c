/* device_cpu.c: the CPU back-end of device.h -- buffers are host memory,
 * operations are plain loops, the kernels are kernels/cpu. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "device/device_backend.h"

static int CpuSetUp(MPI_Comm world, int allow_share, int *shared)
{
  (void)world, (void)allow_share;
  *shared = 0;
  return FSDP_SUCCESS;
}

static int CpuHostAlloc(size_t bytes, void *ptr) { return FsdpMalloc(FSDP_MEM_OTHER, bytes, ptr); }

static int CpuFinalize(void) { return FSDP_SUCCESS; }
static void *CpuComputeStream(void) { return NULL; }

static int CpuDescribe(char *buf, size_t size)
{
  snprintf(buf, size, "cpu (OpenBLAS core %s)", FsdpKernelsCpuBlasCore());
  return FSDP_SUCCESS;
}

static int CpuMemStats(FsdpDeviceMemStats *s)
{
  (void)s;
  return 0;
}

static int CpuZero(void *p, size_t bytes)
{
  memset(p, 0, bytes);
  return FSDP_SUCCESS;
}

static int CpuCopy(void *dst, const void *src, size_t bytes)
{
  if (dst != src) memcpy(dst, src, bytes);
  return FSDP_SUCCESS;
}

static int CpuCastFromFloat(FsdpDtype to, const float *src, void *dst, size_t n)
{
  FsdpDtypeFromFloat(to, src, dst, n);
  return FSDP_SUCCESS;
}

static int CpuCastToFloat(FsdpDtype from, const void *src, float *dst, size_t n)
{
  FsdpDtypeToFloat(from, src, dst, n);
  return FSDP_SUCCESS;
}

static int CpuAddScaled(float *dst, const void *src, FsdpDtype dt, float scale, size_t n)
{
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

static int CpuAnyNonFinite(const float *x, size_t n, int *bad)
{
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) {
      *bad = 1;
      break;
    }
  return FSDP_SUCCESS;
}

/* [Note: one readback per step]: nothing to read back on the CPU; the
 * same sums in the same order as the per-unit loop. */
static int CpuSumSquaresMany(const float *const *x, const size_t *n, int count, double *sq)
{
  const FsdpKernelOps *k = FsdpKernelsCpu();
  double s = 0.0;
  for (int i = 0; i < count; i++) s += k->sum_squares(x[i], n[i]);
  *sq = s;
  return FSDP_SUCCESS;
}

static int CpuAnyNonFiniteMany(const float *const *x, const size_t *n, int count, int *bad)
{
  for (int i = 0; i < count && !*bad; i++) FSDP_CALL(CpuAnyNonFinite(x[i], n[i], bad));
  return FSDP_SUCCESS;
}

/* Nothing is launched, so there is nothing to check or wait for. */
static int CpuNothingPending(void) { return FSDP_SUCCESS; }

static const FsdpDeviceBackend kCpuBackend = {
    .set_up = CpuSetUp,
    .finalize = CpuFinalize,
    .kernels = FsdpKernelsCpu,
    .compute_stream = CpuComputeStream,
    .describe = CpuDescribe,
    .alloc = FsdpMalloc,
    .free = FsdpFree,
    .zero = CpuZero,
    .copy = CpuCopy,
    .host_alloc = CpuHostAlloc,
    .host_free = FsdpFree,
    .cast_from_float = CpuCastFromFloat,
    .cast_to_float = CpuCastToFloat,
    .add_scaled = CpuAddScaled,
    .any_nonfinite = CpuAnyNonFinite,
    .check = CpuNothingPending,
    .mem_stats = CpuMemStats,
    .sum_squares_many = CpuSumSquaresMany,
    .any_nonfinite_many = CpuAnyNonFiniteMany,
};

const FsdpDeviceBackend *FsdpDeviceCpuBackend(void) { return &kCpuBackend; }
