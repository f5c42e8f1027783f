/* ops.c: the CPU back-end's FsdpKernelOps table and its BLAS report. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>
#include <strings.h>

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
#ifdef HAVE_OPENBLAS_GET_CORENAME
char *openblas_get_corename(void);
#endif
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

const char *FsdpKernelsCpuBlasCore(void)
{
#ifdef HAVE_OPENBLAS_GET_CORENAME
  const char *core = openblas_get_corename();
  if (core && core[0]) return core;
#endif
  return "unknown";
}

/* [Note: BLAS fallback core] A DYNAMIC_ARCH OpenBLAS picks its kernels from
 * cpuid at load time; a release older than the CPU (Debian 12's 0.3.21 on
 * Sapphire Rapids) does not know the model and falls back to "Prescott"
 * (SSE3), several times slower than the AVX-512 kernels that
 * OPENBLAS_CORETYPE=SkylakeX selects.  We rank cores by the widest vector
 * ISA their kernels use (0 SSE, 1 AVX, 2 AVX2, 3 AVX-512) and call the core
 * a fallback when it is below what the CPU offers, capped at AVX2: OpenBLAS
 * itself chooses Haswell kernels on some AVX-512 CPUs (OS without ZMM state,
 * early Zen 4 support) and that gap is small.  Unknown names are never a
 * fallback: we cannot tell. */
static const struct {
  const char *name;
  int isa;
} blas_cores[] = {
  {"Katmai", 0}, {"Coppermine", 0}, {"Northwood", 0}, {"Prescott", 0},
  {"Banias", 0}, {"Atom", 0}, {"Core2", 0}, {"Penryn", 0},
  {"Dunnington", 0}, {"Nehalem", 0}, {"Athlon", 0}, {"Opteron", 0},
  {"Opteron_SSE3", 0}, {"Barcelona", 0}, {"Nano", 0}, {"Bobcat", 0},
  {"Sandybridge", 1}, {"Bulldozer", 1}, {"Piledriver", 1},
  {"Steamroller", 1},
  {"Haswell", 2}, {"Excavator", 2}, {"Zen", 2},
  {"SkylakeX", 3}, {"CooperLake", 3}, {"SapphireRapids", 3},
};

static int cpu_isa_level(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 3;
  if (__builtin_cpu_supports("avx2")) return 2;
  if (__builtin_cpu_supports("avx")) return 1;
  return 0;
#else
  return -1; /* not x86: the ranking above does not apply */
#endif
}

int FsdpKernelsCpuBlasIsFallback(void)
{
  const char *core = FsdpKernelsCpuBlasCore();
  int cpu = cpu_isa_level();
  if (cpu > 2) cpu = 2;
  for (size_t i = 0; i < sizeof blas_cores / sizeof blas_cores[0]; i++)
    if (strcasecmp(core, blas_cores[i].name) == 0)
      return blas_cores[i].isa < cpu;
  return 0;
}
