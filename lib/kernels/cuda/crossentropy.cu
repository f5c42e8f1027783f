/* crossentropy.cu: fused softmax + cross-entropy over the vocabulary (CUDA).
 * One block per row for the forward (max, sum of exponentials, then the
 * probabilities); the backward is elementwise. */
#include "common.cuh"

#define CE_BLOCK 512

/* ---- kernels ------------------------------------------------------------- */

/* probs[n] = softmax(logits[n]); losses[n] = log(sum e^(z - max)) + max -
 * z[target]: the log-sum-exp form stays finite when the target's
 * probability underflows (as in the CPU kernel). */
__global__ void crossentropy_forward_kernel(float *losses, float *probs,
                                            const float *__restrict__ logits,
                                            const int *__restrict__ targets, int V)
{
  __shared__ float shared[32];
  size_t n = blockIdx.x;
  const float *z = logits + n * V;
  float *p = probs + n * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_max(mx, shared);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float e = expf(z[v] - mx);
    p[v] = e;
    sum += e;
  }
  sum = block_sum(sum, shared);
  float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x) p[v] *= inv;
  if (threadIdx.x == 0) losses[n] = logf(sum) + mx - z[targets[n]];
}

/* dlogits += (probs - onehot(target)) * dloss. */
__global__ void crossentropy_softmax_backward_kernel(float *dlogits,
                                                     const float *__restrict__ probs,
                                                     const int *__restrict__ targets,
                                                     float dloss, int V, size_t total)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / V;
    int v = (int)(i % V);
    float g = probs[i] * dloss;
    if (v == targets[n]) g -= dloss;
    dlogits[i] += g;
  }
}

/* [Note: fused classifier] (kernels.h): one block per row of the (N, Vp)
 * logits; the loss, then the gradient over the logits (llm.c's
 * fused_classifier_kernel3, fp32).  z[target] is read before the gradient
 * pass writes the row: thread 0 reads it first, and the two block
 * reductions between its read and the first write synchronize the block. */
__global__ void crossentropy_fused_kernel(float *losses, float *logits,
                                          const int *__restrict__ targets, float dloss, int V,
                                          int Vp)
{
  __shared__ float shared[32];
  size_t n = blockIdx.x;
  float *z = logits + n * Vp;
  int target = targets[n];
  float zt = threadIdx.x == 0 ? z[target] : 0.0f;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = block_max(mx, shared);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
  sum = block_sum(sum, shared);
  float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
    float g = 0.0f; /* padding columns: nothing flows back */
    if (v < V) {
      g = (expf(z[v] - mx) * inv) * dloss; /* the unfused kernels' order */
      if (v == target) g -= dloss;
    }
    z[v] = g;
  }
  if (threadIdx.x == 0) losses[n] = logf(sum) + mx - zt;
}

/* ---- launchers ----------------------------------------------------------- */

extern "C" void crossentropy_forward_cuda(float *losses, float *probs, const float *logits,
                                          const int *targets, int N, int V)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && V > 0);
  if (N == 0) return;
  crossentropy_forward_kernel<<<N, CE_BLOCK, 0, cuda_state.stream>>>(losses, probs, logits,
                                                                     targets, V);
  CUDA_CHECK_LAUNCH();
}

extern "C" void crossentropy_softmax_backward_cuda(float *dlogits, const float *probs,
                                                   const int *targets, float dloss, int N,
                                                   int V)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && V > 0);
  size_t total = (size_t)N * V;
  if (total == 0) return;
  const int block = 256;
  crossentropy_softmax_backward_kernel<<<grid_stride_blocks(total, block), block, 0,
                                         cuda_state.stream>>>(dlogits, probs, targets, dloss, V,
                                                              total);
  CUDA_CHECK_LAUNCH();
}

extern "C" void crossentropy_fused_cuda(float *losses, float *logits, const int *targets,
                                        float dloss, int N, int V, int Vp)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && V > 0 && Vp >= V);
  if (N == 0) return;
  crossentropy_fused_kernel<<<N, CE_BLOCK, 0, cuda_state.stream>>>(losses, logits, targets,
                                                                   dloss, V, Vp);
  CUDA_CHECK_LAUNCH();
}
