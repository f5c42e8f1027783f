/* dtype.c: bulk conversions between fp32 and low-precision types. */
#include "base/dtype.h"

const char *const FsdpDtypeNames[FSDP_NDTYPES + 1] = {"fp32", "bf16", "fp16", NULL};

void FsdpDtypeFromFloat(FsdpDtype dt, const float *src, void *dst, size_t n)
{
  uint16_t *d = (uint16_t *)dst;
  switch (dt) {
  case FSDP_DTYPE_FP32: if (n && (const void *)src != dst) memcpy(dst, src, n * 4); break;
  case FSDP_DTYPE_BF16:
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) d[i] = FsdpFloatToBf16(src[i]);
    break;
  case FSDP_DTYPE_FP16:
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) d[i] = FsdpFloatToFp16(src[i]);
    break;
  default: break;
  }
}

void FsdpDtypeToFloat(FsdpDtype dt, const void *src, float *dst, size_t n)
{
  const uint16_t *s = (const uint16_t *)src;
  switch (dt) {
  case FSDP_DTYPE_FP32: if (n && src != (const void *)dst) memcpy(dst, src, n * 4); break;
  case FSDP_DTYPE_BF16:
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = FsdpBf16ToFloat(s[i]);
    break;
  case FSDP_DTYPE_FP16:
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = FsdpFp16ToFloat(s[i]);
    break;
  default: break;
  }
}
