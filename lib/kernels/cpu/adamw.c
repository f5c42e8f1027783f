/* adamw.c: AdamW step and the sum of squares for gradient clipping (CPU).
 * Loop bodies are FSDP_CPU_CLONES functions over fixed chunks [Note: ISA
 * clones].
 *
 * [Note: sqrtf and errno] Under the default -fmath-errno GCC must keep a
 * scalar sqrtf call for the errno of a negative argument, so the AdamW loop
 * does not vectorize (about 2x slower); building with -fno-math-errno
 * (nothing here reads errno) lets it. */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

/* Elements per OpenMP task. */
#define ADAMW_CHUNK ((size_t)16384)

FSDP_CPU_CLONES
static void adamw_span(float *restrict p, const float *restrict g,
                       float *restrict mm, float *restrict vv, size_t n,
                       float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, float inv_bc1,
                       float inv_bc2)
{
  const float one_b1 = 1.0f - beta1, one_b2 = 1.0f - beta2;
  #pragma omp simd
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    float mi = beta1 * mm[i] + one_b1 * gi;
    float vi = beta2 * vv[i] + one_b2 * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    float mhat = mi * inv_bc1;
    float vhat = vi * inv_bc2;
    p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p[i]);
  }
}

/* One AdamW step on n elements (kernels.h): g = grad * grad_scale;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * param -= lr (mhat / (sqrt(vhat) + eps) + wd param), mhat = m / (1-b1^t),
 * vhat = v / (1-b2^t).  The bias corrections are computed once, in double. */
void adamw_update_cpu(float *param, const float *grad, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale, int t)
{
  const float inv_bc1 = (float)(1.0 / (1.0 - pow((double)beta1, t)));
  const float inv_bc2 = (float)(1.0 / (1.0 - pow((double)beta2, t)));
  size_t nchunk = (n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
  #pragma omp parallel for schedule(static)
  for (size_t k = 0; k < nchunk; k++) {
    size_t i0 = k * ADAMW_CHUNK;
    size_t len = n - i0 < ADAMW_CHUNK ? n - i0 : ADAMW_CHUNK;
    adamw_span(param + i0, grad + i0, m + i0, v + i0, len, lr, beta1, beta2,
               eps, weight_decay, grad_scale, inv_bc1, inv_bc2);
  }
}

FSDP_CPU_CLONES
static double sum_squares_span(const float *restrict x, size_t n)
{
  double s = 0.0;
  #pragma omp simd reduction(+:s)
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

/* Sum of x[i]^2 in double.  The partition into chunks depends on n only,
 * never on the thread count, and the chunk sums are added in order, so the
 * result is the same bit for bit at any OMP_NUM_THREADS [Note:
 * deterministic CPU kernels].  At most SUMSQ_MAX_CHUNKS chunks (a stack
 * array), each at least SUMSQ_MIN_CHUNK elements. */
#define SUMSQ_MAX_CHUNKS 1024
#define SUMSQ_MIN_CHUNK ((size_t)16384)

double sum_squares_cpu(const float *x, size_t n)
{
  if (n == 0) return 0.0;
  size_t nchunk = (n + SUMSQ_MIN_CHUNK - 1) / SUMSQ_MIN_CHUNK;
  if (nchunk > SUMSQ_MAX_CHUNKS) nchunk = SUMSQ_MAX_CHUNKS;
  size_t len = (n + nchunk - 1) / nchunk;
  nchunk = (n + len - 1) / len;
  double part[SUMSQ_MAX_CHUNKS];
  #pragma omp parallel for schedule(static) if (nchunk > 1)
  for (size_t k = 0; k < nchunk; k++) {
    size_t i0 = k * len;
    part[k] = sum_squares_span(x + i0, n - i0 < len ? n - i0 : len);
  }
  double total = 0.0;
  for (size_t k = 0; k < nchunk; k++) total += part[k];
  return total;
}
