/* crossentropy.c: fused softmax + cross-entropy over the vocabulary (CPU).
 * Row bodies are FSDP_CPU_CLONES functions [Note: ISA clones]. */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

/* One row: p = softmax(z); returns log(sum e^(z - max)) + max.  p may be z
 * (the fused classifier works in place: element v is read before it is
 * written, so no restrict; the simd pragmas vectorize without it). */
FSDP_CPU_CLONES
static float softmax_row(float *p, const float *z, int V)
{
  float mx = -INFINITY;
  #pragma omp simd reduction(max:mx)
  for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
  float sum = 0.0f;
  #pragma omp simd reduction(+:sum)
  for (int v = 0; v < V; v++) {
    float e = expf_fast_cpu(z[v] - mx);
    p[v] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
  #pragma omp simd
  for (int v = 0; v < V; v++) p[v] *= inv;
  return logf(sum) + mx;
}

/* probs (N,V) = softmax(logits (N,V)); losses (N) = -log probs[n, target].
 * The loss comes from the log-sum-exp, log(sum) + max - logit[target],
 * not from log(probs[target]), which would be -log(0) = inf once the
 * target's probability underflows. */
void crossentropy_forward_cpu(float *losses, float *probs,
                              const float *logits, const int *targets,
                              int N, int V)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *z = logits + (size_t)n * V;
    float lse = softmax_row(probs + (size_t)n * V, z, V);
    losses[n] = lse - z[targets[n]];
  }
}

FSDP_CPU_CLONES
static void softmax_backward_row(float *restrict dz, const float *restrict p,
                                 int target, float dloss, int V)
{
  #pragma omp simd
  for (int v = 0; v < V; v++) dz[v] += p[v] * dloss;
  dz[target] -= dloss;
}

/* dlogits (N,V) += (probs - onehot(targets)) * dloss. */
void crossentropy_softmax_backward_cpu(float *dlogits, const float *probs,
                                       const int *targets, float dloss,
                                       int N, int V)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    softmax_backward_row(dlogits + (size_t)n * V, probs + (size_t)n * V,
                         targets[n], dloss, V);
}

/* [Note: fused classifier] (kernels.h): one row in place, softmax_row's
 * arithmetic then softmax_backward_row's (dz = p dloss, the target's minus
 * dloss), so it matches the unfused pair up to the order of the
 * vectorized sums. */
FSDP_CPU_CLONES
static float fused_row(float *restrict z, int target, float dloss, int V, int Vp)
{
  float zt = z[target]; /* before it is overwritten */
  float lse = softmax_row(z, z, V);
  #pragma omp simd
  for (int v = 0; v < V; v++) z[v] *= dloss;
  z[target] -= dloss;
  for (int v = V; v < Vp; v++) z[v] = 0.0f; /* padding: nothing flows back */
  return lse - zt;
}

void crossentropy_fused_cpu(float *losses, float *logits, const int *targets, float dloss,
                            int N, int V, int Vp)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    losses[n] = fused_row(logits + (size_t)n * Vp, targets[n], dloss, V, Vp);
}
