/* ops.c: the CPU back-end's FsdpKernelOps table (its BLAS report: blas.c). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

/* [Note: buffers from the kernel table] on the CPU: plain host memory, so
 * zeroing is memset and both copies are one memcpy. */
static int zero_cpu(void *p, size_t bytes)
{
  if (p && bytes) memset(p, 0, bytes);
  return FSDP_SUCCESS;
}

static int copy_cpu(void *dst, const void *src, size_t bytes)
{
  if (bytes && dst != src) memcpy(dst, src, bytes);
  return FSDP_SUCCESS;
}

static const FsdpKernelOps cpu_ops = {
  .name = "cpu",
  .encoder_forward = encoder_forward_cpu,
  .encoder_backward = encoder_backward_cpu,
  .layernorm_forward = layernorm_forward_cpu,
  .layernorm_backward = layernorm_backward_cpu,
  .matmul_forward = matmul_forward_cpu,
  .matmul_backward = matmul_backward_cpu,
  .matmul_forward_bf16 = matmul_forward_bf16_cpu,
  .matmul_backward_bf16 = matmul_backward_bf16_cpu,
  .crossentropy_fused = crossentropy_fused_cpu,
  .residual_layernorm_forward = residual_layernorm_forward_cpu,
  .attention_forward = attention_forward_cpu,
  .attention_backward = attention_backward_cpu,
  .flash_attention_forward = flash_attention_forward_cpu,
  .flash_attention_backward = flash_attention_backward_cpu,
  .gelu_forward = gelu_forward_cpu,
  .gelu_backward = gelu_backward_cpu,
  .residual_forward = residual_forward_cpu,
  .residual_backward = residual_backward_cpu,
  .crossentropy_forward = crossentropy_forward_cpu,
  .crossentropy_softmax_backward = crossentropy_softmax_backward_cpu,
  .adamw_update = adamw_update_cpu,
  .sum_squares = sum_squares_cpu,
  .rmsnorm_forward = rmsnorm_forward_cpu,
  .rmsnorm_backward = rmsnorm_backward_cpu,
  .rope_forward = rope_forward_cpu,
  .rope_backward = rope_backward_cpu,
  .swiglu_forward = swiglu_forward_cpu,
  .swiglu_backward = swiglu_backward_cpu,
  .gqa_pack_forward = gqa_pack_forward_cpu,
  .gqa_pack_backward = gqa_pack_backward_cpu,
  .alloc = FsdpMalloc,
  .free = FsdpFree,
  .zero = zero_cpu,
  .copy_to_host = copy_cpu,
  .copy_from_host = copy_cpu,
};

/* OpenBLAS entry points, declared by its cblas.h; repeated so that another
 * CBLAS header that lacks them still compiles when the library has them. */
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void);
#endif

/* [Note: one thread pool] (matmul.c): a pthreads OpenBLAS runs one thread,
 * OpenMP threads everything.  Only the pthreads build (get_parallel 1) is
 * told: the OpenMP build's openblas_set_num_threads calls
 * omp_set_num_threads, and it runs one thread inside our parallel regions
 * anyway.  Idempotent, so concurrent calls are harmless. */
const FsdpKernelOps *FsdpKernelsCpu(void)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
  if (openblas_get_parallel() == 1) openblas_set_num_threads(1);
#endif
  return &cpu_ops;
}
