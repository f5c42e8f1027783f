/* blas.c: which BLAS the CPU kernels run on -- OpenBLAS's core and whether
 * it fell back to slow generic kernels (FsdpKernelsCpuBlasCore,
 * FsdpKernelsCpuBlasIsFallback in kernels.h).  Apart from the table
 * (ops.c) so that the kernels that choose a GEMM path by the core
 * (matmul_bf16.c) and the table depend on it, not on each other. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <strings.h>

#include "kernels/kernels.h"

/* Declared by OpenBLAS's cblas.h; repeated so that another CBLAS header
 * that lacks it still compiles when the library has it. */
#ifdef HAVE_OPENBLAS_GET_CORENAME
char *openblas_get_corename(void);
#endif

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
