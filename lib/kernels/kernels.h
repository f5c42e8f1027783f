/* kernels.h: the compute kernels of a GPT and the buffers they work on, one
 * interface, one back-end per device (kernels/cpu: C + OpenMP + CBLAS;
 * kernels/cuda: CUDA + cuBLAS).
 *
 * llm.c conventions: free functions over raw fp32 pointers plus shape ints
 * with fixed letters -- B batch, T sequence, C channels, NH heads, V vocab,
 * N = rows (usually B*T), OC output channels.
 *
 * [Note: 64-bit element counts] Shape letters are ints: each is a small
 * dimension, and B*T (rows) must fit an int (GptModelCreate checks).  Their
 * products are not small: at gpt-175b, B*T*4C passes 2^31 with 43,691
 * tokens per rank, and B*T*V with 42,731.  So a kernel computes every
 * offset and element count in size_t ((size_t)n * C, never n * C), and the
 * elementwise kernels, whose length is such a product, take size_t n.
 * BLAS dimensions stay ints: each is one shape letter (or 3C, 4C), never a
 * product, so it fits.  Linear weights are
 * [out, in] (GPT-2 naming), so a linear layer is out = inp @ weight^T + bias.
 *
 * [Note: backward accumulates] Every backward kernel ADDS into its gradient
 * outputs (dinp, dweight, dbias, ...), never overwrites: the residual stream
 * and the tied embedding receive gradients from two places, and gradient
 * accumulation over micro-steps keeps summing.  Callers zero buffers when a
 * new sum starts.
 *
 * Activation buffers that backward needs (mean/rstd, preatt/att, probs) are
 * written by forward and read by backward, so a unit can later drop and
 * recompute them (activation recomputation) without changing kernels.
 */
#ifndef FSDP_KERNELS_H
#define FSDP_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/mem.h"

/* Which attention kernels a model calls (-attention; [Note: flash
 * attention] in kernels/cpu/attention.c).  Flash is 0, the default. */
typedef enum { FSDP_ATTENTION_FLASH, FSDP_ATTENTION_NAIVE, FSDP_NATTENTION } FsdpAttention;

typedef struct FsdpKernelOps {
  const char *name; /* "cpu", "cuda" */

  /* out (B,T,C) = wte[inp[b,t]] + wpe[t]; inp (B,T) token ids. */
  void (*encoder_forward)(float *out, const int *inp, const float *wte,
                          const float *wpe, int B, int T, int C);
  void (*encoder_backward)(float *dwte, float *dwpe, const float *dout,
                           const int *inp, int B, int T, int C);

  /* out (N,C) = (inp - mean) * rstd * weight + bias; eps 1e-5.
   * mean, rstd (N) saved for backward. */
  void (*layernorm_forward)(float *out, float *mean, float *rstd,
                            const float *inp, const float *weight,
                            const float *bias, int N, int C);
  void (*layernorm_backward)(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp,
                             const float *weight, const float *mean,
                             const float *rstd, int N, int C);

  /* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL. */
  void (*matmul_forward)(float *out, const float *inp, const float *weight,
                         const float *bias, int N, int C, int OC);
  /* dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp;
   * dbias (OC) += column sums of dout.  dinp or dbias may be NULL. */
  void (*matmul_backward)(float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp,
                          const float *weight, int N, int C, int OC);

  /* Causal multi-head self-attention.  qkv (B,T,3C) holds Q;K;V along the
   * last dim, head h uses channels [h*C/NH, (h+1)*C/NH) of each.
   * out (B,T,C); preatt, att (B,NH,T,T) saved for backward (scale
   * 1/sqrt(C/NH), masked positions of att are 0).  Backward: dqkv
   * accumulates; dpreatt and datt (B,NH,T,T) are scratch, overwritten on
   * every call (callers need not zero them). */
  void (*attention_forward)(float *out, float *preatt, float *att,
                            const float *qkv, int B, int T, int C, int NH);
  void (*attention_backward)(float *dqkv, float *dpreatt, float *datt,
                             const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);

  /* GELU, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))). */
  void (*gelu_forward)(float *out, const float *inp, size_t n);
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

  /* out = inp1 + inp2. */
  void (*residual_forward)(float *out, const float *inp1, const float *inp2, size_t n);
  void (*residual_backward)(float *dinp1, float *dinp2, const float *dout, size_t n);

  /* Softmax over V of logits (N,V) into probs (N,V) and
   * losses[n] = -log probs[n, targets[n]]. */
  void (*crossentropy_forward)(float *losses, float *probs,
                               const float *logits, const int *targets,
                               int N, int V);
  /* dlogits (N,V) += (probs - onehot(targets)) * dloss, where dloss is the
   * gradient of the total loss with respect to each position's loss
   * (1/N for a mean). */
  void (*crossentropy_softmax_backward)(float *dlogits, const float *probs,
                                        const int *targets, float dloss,
                                        int N, int V);

  /* AdamW step on n elements (decoupled weight decay, bias correction with
   * step t >= 1): g = grad * grad_scale; m = b1 m + (1-b1) g;
   * v = b2 v + (1-b2) g^2; param -= lr (mhat / (sqrt(vhat) + eps) + wd param). */
  void (*adamw_update)(float *param, const float *grad, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, int t);

  /* Sum of squares of n elements, accumulated in double. */
  double (*sum_squares)(const float *x, size_t n);

  /* ---- Llama (model/llama.c) ---- */
  /* RMSNorm: out (N,C) = inp * rstd * weight, rstd (N) = 1/sqrt(mean over
   * C of inp^2 + eps), saved for backward.  Backward: dinp, dweight += . */
  void (*rmsnorm_forward)(float *out, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps);
  void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight,
                           const float *rstd, int N, int C);
  /* Rotary position embedding as transformers' Llama applies it
   * (rotate-half): x (B,T,NH,HD) at position t, pair j < HD/2 with angle
   * a = t theta^(-2j/HD): out[j] = x[j] cos a - x[j+HD/2] sin a,
   * out[j+HD/2] = x[j+HD/2] cos a + x[j] sin a.  out must not alias inp.
   * Backward: dinp += the inverse rotation of dout. */
  void (*rope_forward)(float *out, const float *inp, int B, int T, int NH,
                       int HD, float theta);
  void (*rope_backward)(float *dinp, const float *dout, int B, int T, int NH,
                        int HD, float theta);
  /* SwiGLU: out (n) = silu(gate) * up, silu(g) = g / (1 + e^-g).
   * Backward: dgate, dup += . */
  void (*swiglu_forward)(float *out, const float *gate, const float *up,
                         size_t n);
  void (*swiglu_backward)(float *dgate, float *dup, const float *dout,
                          const float *gate, const float *up, size_t n);
  /* Grouped-query attention input: qkv (B,T,3C) with C = NH*HD as
   * attention_forward takes it, from q (B,T,NH*HD) and k, v
   * (B,T,KVH*HD), head h reading kv head h/(NH/KVH) (KVH divides NH).
   * Backward: dq, dk, dv += (dk, dv summed over the heads sharing them). */
  void (*gqa_pack_forward)(float *qkv, const float *q, const float *k,
                           const float *v, int B, int T, int NH, int KVH,
                           int HD);
  void (*gqa_pack_backward)(float *dq, float *dk, float *dv,
                            const float *dqkv, int B, int T, int NH, int KVH,
                            int HD);

  /* [Note: buffers from the kernel table] The memory the kernels above
   * read and write (host memory for cpu, device memory for cuda), so that
   * a model -- which may use only base and kernels -- can keep its
   * activations where its kernels run.  The cpu entries are plain tagged
   * memory (FsdpMalloc); the cuda ones allocate through the device layer's
   * accounted allocator (FsdpKernelsCudaSetAllocator) and zero and copy on
   * the compute stream.  Each returns FSDP_SUCCESS or an fsdp error code.
   *
   * alloc: zeroed block of bytes under tag into *(void **)ptr (NULL for 0
   * bytes); free: takes the address of the pointer, accepts NULL, sets it
   * to NULL.  zero: in compute-stream order.  copy_to_host and
   * copy_from_host wait, so the host side is usable (or reusable) on
   * return. */
  int (*alloc)(FsdpMemTag tag, size_t bytes, void *ptr);
  int (*free)(void *ptr);
  int (*zero)(void *p, size_t bytes);
  int (*copy_to_host)(void *host_dst, const void *src, size_t bytes);
  int (*copy_from_host)(void *dst, const void *host_src, size_t bytes);

  /* [Note: bf16 matmuls] The matmuls of -compute_dtype bf16 (PyTorch's
   * autocast, llm.c): same shapes, NULL rules and accumulation as
   * matmul_forward/matmul_backward, but every matrix operand (inp, weight,
   * dout) is rounded to bf16 (nearest even) at the matmul, the products are
   * summed in fp32 and the results (out, dinp, dweight) are fp32; bias and
   * dbias stay fp32.  With -param_dtype bf16 the weights are bf16 values
   * already, so their rounding is exact.  Optional: NULL where a back-end
   * has none (the driver then refuses -compute_dtype bf16).  Last in the
   * table, after the required entries, so that a positional initializer
   * (kernels/cuda/ops.cu) leaves them NULL. */
  void (*matmul_forward_bf16)(float *out, const float *inp, const float *weight,
                              const float *bias, int N, int C, int OC);
  void (*matmul_backward_bf16)(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp,
                               const float *weight, int N, int C, int OC);

  /* [Note: fused classifier] llm.c's fused_classifier: the loss and its
   * gradient in one pass over the logits, the gradient written over the
   * logits, so neither probs nor dlogits (each B*T*V floats, the largest
   * activations of a GPT) need memory, and the softmax is computed once.
   * logits is (N, Vp) with row stride Vp >= V ([Note: padded vocabulary]):
   * columns [0, V) are the real logits, columns [V, Vp) padding that is
   * never read.  losses[n] = log sum_v e^z[v] - z[target] (as
   * crossentropy_forward); then logits[n][v] = (softmax(z)[v] -
   * onehot(target)[v]) * dloss for v < V and 0 for v in [V, Vp), so a
   * matmul over the padded rows adds nothing for the padding.  Equal to
   * crossentropy_forward followed by crossentropy_softmax_backward into
   * zeroed dlogits (up to the order of the sums).  Optional (NULL: none). */
  void (*crossentropy_fused)(float *losses, float *logits, const int *targets,
                             float dloss, int N, int V, int Vp);

  /* [Note: fused residual and LayerNorm] res (N,C) = inp1 + inp2, then
   * out, mean, rstd = layernorm_forward(res): one pass over the rows
   * instead of a residual pass and a LayerNorm pass that reads res back
   * (on a GPU both are bound by memory bandwidth).  res may alias inp1 or
   * inp2.  Equal to residual_forward then layernorm_forward (the CPU: bit
   * for bit).  Optional (NULL: the model calls the two). */
  void (*residual_layernorm_forward)(float *res, float *out, float *mean, float *rstd,
                                     const float *inp1, const float *inp2,
                                     const float *weight, const float *bias, int N, int C);

  /* The same attention without a T x T matrix ([Note: flash attention],
   * kernels/cpu/attention.c): forward writes out (B,T,C) and keeps only
   * lse (B,NH,T), the log of each row's softmax denominator (scores
   * scaled, max included).  Backward recomputes the probabilities from
   * qkv, lse and the forward's out; dqkv accumulates; scratch (B,NH,T) is
   * overwritten.  Results equal attention_forward/backward's up to fp32
   * summation order.  Last in the table: a positional
   * initializer (kernels/cuda/ops.cu) lists them last. */
  void (*flash_attention_forward)(float *out, float *lse, const float *qkv,
                                  int B, int T, int C, int NH);
  void (*flash_attention_backward)(float *dqkv, float *scratch,
                                   const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B,
                                   int T, int C, int NH);
} FsdpKernelOps;

/* [Note: padded vocabulary] The LM head's row stride: V rounded up to a
 * multiple of 128 (llm.c: 50257 -> 50304), so each row of logits starts
 * 512-byte aligned and a GEMM over Vp columns tiles evenly on tensor
 * cores; the padded columns carry nothing (see crossentropy_fused). */
#define FSDP_VOCAB_PAD 128
static inline int fsdp_padded_vocab(int V)
{
  return V <= 0 ? V : (int)(((long long)V + FSDP_VOCAB_PAD - 1) / FSDP_VOCAB_PAD * FSDP_VOCAB_PAD);
}

/* The CPU back-end (kernels/cpu).  OpenMP threads every kernel, sgemm
 * included; a pthreads OpenBLAS is set to one thread on each call, so
 * OMP_NUM_THREADS alone sets a rank's threads (see [Note: one thread pool]
 * in kernels/cpu/matmul.c). */
const FsdpKernelOps *FsdpKernelsCpu(void);

/* Name of the BLAS core in use (OpenBLAS's openblas_get_corename) and
 * whether it is a generic fallback on a CPU that supports better. */
const char *FsdpKernelsCpuBlasCore(void);
int FsdpKernelsCpuBlasIsFallback(void);

/* The GEMM behind the CPU matmuls ([Note: bf16 matmuls]): library, e.g.
 * "OpenBLAS" or "oneDNN 2.6.3", and kernel: the BLAS core for fp32
 * ("SkylakeX sgemm"); for bf16 oneDNN's implementation
 * ("brg:avx512_core_bf16") or, without oneDNN or on a core without bf16
 * instructions, "<core> sgemm on bf16-rounded inputs" (same numerics, fp32
 * speed).  FSDP_GEMM_BF16=onednn|convert overrides the choice (tests). */
void FsdpKernelsCpuGemm(int bf16, char *library, size_t lsize, char *kernel, size_t ksize);

#ifdef __cplusplus
}
#endif

#endif
