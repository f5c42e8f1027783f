/* dtype.h: element types on the wire and in buffers, and conversions.
 * bf16 is the upper half of an IEEE fp32 (round to nearest even); fp16 is
 * IEEE binary16.  Conversions are inline because kernels and collectives
 * call them per element. */
#ifndef FSDP_DTYPE_H
#define FSDP_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { FSDP_DTYPE_FP32, FSDP_DTYPE_BF16, FSDP_DTYPE_FP16, FSDP_NDTYPES } FsdpDtype;

/* Names as accepted by -param_dtype / -reduce_dtype, indexed by FsdpDtype. */
extern const char *const FsdpDtypeNames[FSDP_NDTYPES + 1];

static inline size_t FsdpDtypeSize(FsdpDtype dt) { return dt == FSDP_DTYPE_FP32 ? 4 : 2; }

/* 1 on a little-endian host (the byte order of llm.c files). */
static inline int FsdpHostIsLittleEndian(void)
{
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

static inline uint16_t FsdpFloatToBf16(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static inline float FsdpBf16ToFloat(uint16_t h)
{
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t FsdpFloatToFp16(float f)
{
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (absx < 0x38800000u) { /* subnormal or zero in fp16 */
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(absx >> 23); /* 14..24 */
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t e = (absx >> 23) - 112u;
  uint32_t m = absx & 0x7fffffu;
  uint32_t half = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
  return (uint16_t)(sign | half);
}

static inline float FsdpFp16ToFloat(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0) {
    if (m == 0) u = sign;
    else { /* subnormal: normalize */
      int k = 0;
      while (!(m & 0x400u)) { m <<= 1; k++; }
      m &= 0x3ffu;
      u = sign | ((uint32_t)(113 - k) << 23) | (m << 13);
    }
  } else if (e == 31) u = sign | 0x7f800000u | (m << 13);
  else u = sign | ((e + 112u) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Convert n elements between fp32 and dt (dt == FP32 copies). */
void FsdpDtypeFromFloat(FsdpDtype dt, const float *src, void *dst, size_t n);
void FsdpDtypeToFloat(FsdpDtype dt, const void *src, float *dst, size_t n);

#endif
