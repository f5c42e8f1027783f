/* gelu.c: GELU, tanh approximation (CPU).  Elementwise, so out may alias
 * inp (no restrict on purpose).
 *
 * tanh(u) = 1 - 2 / (1 + e^(2u)) through expf_fast_cpu keeps the loop
 * vectorizable [Note: vectorizable inner loops]; its absolute error near
 * u = 0 (~1 ulp of 1) is harmless because GELU multiplies by 0.5 x and
 * adds 1 first.  It saturates to +-1 for large |u| without overflow. */
#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE 0.044715f
/* Elements per OpenMP task: a multiple of every vector width, large
 * enough that the clone dispatch is noise. */
#define GELU_CHUNK 8192

FSDP_CPU_CLONES
static void gelu_forward_span(float *out, const float *inp, int n)
{
  #pragma omp simd
  for (int i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    float th = 1.0f - 2.0f / (1.0f + expf_fast_cpu(2.0f * u));
    out[i] = 0.5f * x * (1.0f + th);
  }
}

FSDP_CPU_CLONES
static void gelu_backward_span(float *dinp, const float *inp,
                               const float *dout, int n)
{
  #pragma omp simd
  for (int i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    /* With e = e^(2u), d = 1/(1+e): tanh = 1 - 2d, sech^2 = 4 e d^2 (no
     * cancellation, unlike 1 - tanh^2). */
    float e = expf_fast_cpu(2.0f * u);
    float d = 1.0f / (1.0f + e);
    float th = 1.0f - 2.0f * d;
    float sech2 = 4.0f * (e * d) * d; /* e d <= 1: 4 e alone overflows */
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
  }
}

/* out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void gelu_forward_cpu(float *out, const float *inp, size_t N)
{
  size_t nchunk = (N + GELU_CHUNK - 1) / GELU_CHUNK;
  #pragma omp parallel for schedule(static)
  for (size_t k = 0; k < nchunk; k++) {
    size_t i0 = k * GELU_CHUNK;
    int n = N - i0 < GELU_CHUNK ? (int)(N - i0) : GELU_CHUNK;
    gelu_forward_span(out + i0, inp + i0, n);
  }
}

/* dinp (N) += dout * gelu'(inp). */
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t N)
{
  size_t nchunk = (N + GELU_CHUNK - 1) / GELU_CHUNK;
  #pragma omp parallel for schedule(static)
  for (size_t k = 0; k < nchunk; k++) {
    size_t i0 = k * GELU_CHUNK;
    int n = N - i0 < GELU_CHUNK ? (int)(N - i0) : GELU_CHUNK;
    gelu_backward_span(dinp + i0, inp + i0, dout + i0, n);
  }
}
