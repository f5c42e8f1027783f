/* rope.h: the arithmetic of the rotary position embedding (rotate-half),
 * written once for the CPU kernels (cpu/llama.c) and the CUDA kernels
 * (cuda/llama.cu): each back-end keeps only its loop over the pairs.  Not
 * installed.  Semantics of the kernels: rope_forward in kernels.h.
 *
 * FSDP_HD marks a function both back-ends compile: __host__ __device__
 * under nvcc, nothing in C. */
#ifndef FSDP_KERNELS_ROPE_H
#define FSDP_KERNELS_ROPE_H

#include <math.h>
#include <stddef.h>

#ifndef FSDP_HD
#ifdef __CUDACC__
#define FSDP_HD __host__ __device__
#else
#define FSDP_HD
#endif
#endif

/* The rotation of pair j (of HD/2) at position t: angle t * theta^(-2j/HD),
 * computed in double so that positions up to 2^20 keep fp32 accuracy;
 * *s carries sign (+1 forward, -1 the inverse rotation: backward). */
static inline FSDP_HD void FsdpRopeCosSin(int t, int j, int HD, float theta, float sign, float *c,
                                          float *s)
{
  double a = (double)t * pow((double)theta, -2.0 * j / HD);
  *c = (float)cos(a);
  *s = sign * (float)sin(a);
}

/* Rotates the pair (j, j + half) of the head vector at x + o by (c, s)
 * into out + o: out = the rotation, or += it when acc. */
static inline FSDP_HD void FsdpRopeRotatePair(float *out, const float *x, size_t o, int j, int half,
                                              float c, float s, int acc)
{
  float x1 = x[o + j], x2 = x[o + j + half];
  float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
  if (acc) {
    out[o + j] += y1;
    out[o + j + half] += y2;
  } else {
    out[o + j] = y1;
    out[o + j + half] = y2;
  }
}

#endif
