/* kernels_cpu.h: the CPU back-end's kernels (C + OpenMP + CBLAS), internal.
 *
 * Shapes and semantics are those of kernels.h (the FsdpKernelOps members of
 * the same name); ops.c puts these functions in the table.  Everything
 * here follows [Note: backward accumulates].
 *
 * [Note: deterministic CPU kernels] A result never depends on the number of
 * OpenMP threads: loops are split over independent outputs (rows, heads,
 * column blocks), and every sum over a shared output (dweight, dbias,
 * dwte) runs in one fixed order inside one thread.  Only cblas_sgemm may
 * reassociate with its own thread count.
 *
 * [Note: vectorizable inner loops] The build uses -O2 without -march, so
 * inner loops carry `#pragma omp simd` (honoured under -fopenmp whatever
 * the cost model) and exponentials go through expf_fast_cpu below, a
 * branch-free expf that the compiler can vectorize (libm's expf is a call
 * it cannot).  See also [Note: ISA clones].
 */
#ifndef FSDP_KERNELS_CPU_H
#define FSDP_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* encoder.c */
void encoder_forward_cpu(float *out, const int *inp, const float *wte,
                         const float *wpe, int B, int T, int C);
void encoder_backward_cpu(float *dwte, float *dwpe, const float *dout,
                          const int *inp, int B, int T, int C);

/* layernorm.c */
void layernorm_forward_cpu(float *out, float *mean, float *rstd,
                           const float *inp, const float *weight,
                           const float *bias, int N, int C);
void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp,
                            const float *weight, const float *mean,
                            const float *rstd, int N, int C);

/* matmul.c */
void matmul_forward_cpu(float *out, const float *inp, const float *weight,
                        const float *bias, int N, int C, int OC);
void matmul_backward_cpu(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp,
                         const float *weight, int N, int C, int OC);

/* matmul_bf16.c ([Note: bf16 matmuls] in kernels.h) */
void residual_layernorm_forward_cpu(float *res, float *out, float *mean, float *rstd,
                                    const float *inp1, const float *inp2, const float *weight,
                                    const float *bias, int N, int C);
void crossentropy_fused_cpu(float *losses, float *logits, const int *targets, float dloss,
                            int N, int V, int Vp);
void matmul_forward_bf16_cpu(float *out, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC);
void matmul_backward_bf16_cpu(float *dinp, float *dweight, float *dbias,
                              const float *dout, const float *inp,
                              const float *weight, int N, int C, int OC);

/* attention.c */
void attention_forward_cpu(float *out, float *preatt, float *att,
                           const float *qkv, int B, int T, int C, int NH);
void attention_backward_cpu(float *dqkv, float *dpreatt, float *datt,
                            const float *dout, const float *qkv,
                            const float *att, int B, int T, int C, int NH);
void flash_attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C,
                                 int NH);
void flash_attention_backward_cpu(float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *out, const float *lse, int B,
                                  int T, int C, int NH);

/* gelu.c */
void gelu_forward_cpu(float *out, const float *inp, size_t N);
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t N);

/* residual.c */
void residual_forward_cpu(float *out, const float *inp1, const float *inp2,
                          size_t N);
void residual_backward_cpu(float *dinp1, float *dinp2, const float *dout,
                           size_t N);

/* crossentropy.c */
void crossentropy_forward_cpu(float *losses, float *probs,
                              const float *logits, const int *targets,
                              int N, int V);
void crossentropy_softmax_backward_cpu(float *dlogits, const float *probs,
                                       const int *targets, float dloss,
                                       int N, int V);

/* adamw.c */
void adamw_update_cpu(float *param, const float *grad, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale, int t);
double sum_squares_cpu(const float *x, size_t n);

/* llama.c */
void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int N,
                         int C, float eps);
void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, const float *rstd, int N, int C);
void rope_forward_cpu(float *out, const float *inp, int B, int T, int NH, int HD, float theta);
void rope_backward_cpu(float *dinp, const float *dout, int B, int T, int NH, int HD, float theta);
void swiglu_forward_cpu(float *out, const float *gate, const float *up, size_t n);
void swiglu_backward_cpu(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n);
void gqa_pack_forward_cpu(float *qkv, const float *q, const float *k, const float *v, int B,
                          int T, int NH, int KVH, int HD);
void gqa_pack_backward_cpu(float *dq, float *dk, float *dv, const float *dqkv, int B, int T,
                           int NH, int KVH, int HD);

/* [Note: ISA clones] The library is built for the baseline x86-64 (SSE2,
 * 4 floats a vector) so that one binary runs on every node.  The kernels
 * whose inner loops are compute-bound (GELU, softmax, attention, layernorm)
 * keep their loop bodies in FSDP_CPU_CLONES functions: GCC compiles them
 * also for x86-64-v3 (AVX2) and x86-64-v4 (AVX-512) and picks one per CPU
 * at load time (ifunc).  The OpenMP loop stays outside (outlined OpenMP
 * bodies are not cloned).  The build's -std=c11 keeps -ffp-contract=off, so
 * the clones do the same roundings; only the grouping of the vector
 * reductions follows the vector width. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && \
    defined(__x86_64__) && defined(__linux__)
#define FSDP_CPU_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define FSDP_CPU_CLONES
#endif

/* Column blocks for loops that sum over rows into a shared vector (dbias,
 * dweight of layernorm, dwte): one block per task, rows in order inside.
 * 64 floats = 4 cache lines, long enough for the vector loop. */
#define FSDP_CPU_COLBLOCK 64

/* e^x in fp32 for vector loops (Cephes expf: range reduction by ln 2, a
 * degree-5 polynomial, 2^n built in the exponent bits); within 2 ulp of
 * expf on [-87, 88].  Inputs are clamped to that range, so e^x underflows
 * to 1.6e-38 rather than 0 and never overflows; NaN propagates (the clamps
 * are comparisons, false for NaN).  Branch-free, so loops that call it
 * vectorize. */
static inline float expf_fast_cpu(float x)
{
  /* Clamp by bit masks: `x > hi ? hi : x` followed by arithmetic is not
   * if-converted under GCC's default -ftrapping-math, so the loop would
   * stay scalar. */
  const float hi = 88.0f, lo = -87.0f;
  int32_t xb, hb, lb;
  memcpy(&xb, &x, sizeof xb);
  memcpy(&hb, &hi, sizeof hb);
  memcpy(&lb, &lo, sizeof lb);
  int32_t above = -(int32_t)(x > hi), below = -(int32_t)(x < lo);
  xb = (xb & ~above) | (hb & above);
  xb = (xb & ~below) | (lb & below);
  memcpy(&x, &xb, sizeof x);
  /* n = round(x / ln 2) by the 1.5*2^23 trick (no libm call). */
  const float magic = 12582912.0f;
  float fn = (x * 1.44269504088896341f + magic) - magic;
  float r = x - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  /* fn is NaN when x is: convert 0 instead (NaN to int is undefined
   * behaviour, and gave a negative left shift); p already carries the NaN. */
  int32_t fnb, is_num = -(int32_t)(fn == fn);
  memcpy(&fnb, &fn, sizeof fnb);
  fnb &= is_num;
  memcpy(&fn, &fnb, sizeof fn);
  int32_t bits = ((int32_t)fn + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#endif
