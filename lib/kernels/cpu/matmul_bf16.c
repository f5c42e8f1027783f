/* matmul_bf16.c: the bf16 matmuls of -compute_dtype bf16 (CPU); the
 * contract is [Note: bf16 matmuls] in kernels.h.
 *
 * [Note: two bf16 GEMM paths] With oneDNN (configure --with-onednn, Debian
 * libdnnl-dev) on a core with bf16 instructions (AVX512_BF16 or AMX), the
 * operands are rounded into bf16 scratch and one oneDNN matmul primitive
 * per product runs them (bf16 in, fp32 accumulation and fp32 out; a sum
 * post-op does the "+=" of backward and of a bias preloaded into out).
 * Otherwise the operands are rounded to bf16 values held in fp32 scratch
 * and the fp32 kernels (matmul.c) run them: every product of two bf16
 * values is exact in fp32, so this is the same arithmetic (bf16 inputs,
 * fp32 sums) in another summation order, without the bf16 speed.
 * FSDP_GEMM_BF16=onednn|convert overrides the choice (tests compare both).
 *
 * Scratch: the rounded operands of the current call (at most inp, weight
 * and dout), grown to the largest call and kept (tag FSDP_MEM_OTHER).
 * The kernels are called from one thread per process (OpenMP inside), as
 * every CPU kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "base/dtype.h"
#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

enum { PATH_UNSET, PATH_CONVERT, PATH_ONEDNN };
static int g_path = PATH_UNSET;

typedef struct {
  void *p;
  size_t bytes;
} Scratch;
static Scratch g_scratch[3];

/* Scratch i of at least bytes, or NULL when memory is exhausted. */
static void *scratch(int i, size_t bytes)
{
  Scratch *s = &g_scratch[i];
  if (s->bytes < bytes) {
    FsdpFree(&s->p);
    s->bytes = 0;
    if (FsdpMalloc(FSDP_MEM_OTHER, bytes, &s->p)) return NULL;
    s->bytes = bytes;
  }
  return s->p;
}

static void round_to_bf16_f32(float *restrict dst, const float *restrict src, size_t n)
{
  #pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] = FsdpBf16ToFloat(FsdpFloatToBf16(src[i]));
}

static int env_path(void)
{
  const char *e = getenv("FSDP_GEMM_BF16");
  if (!e || !e[0] || strcmp(e, "auto") == 0) return PATH_UNSET;
  if (strcmp(e, "convert") == 0) return PATH_CONVERT;
  if (strcmp(e, "onednn") == 0) return PATH_ONEDNN;
  fprintf(stderr, "fsdp: FSDP_GEMM_BF16=%s: expected auto, onednn or convert; using auto\n", e);
  return PATH_UNSET;
}

#ifdef HAVE_ONEDNN
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;

static int core_has_bf16(void)
{
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
         (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

static int onednn_init(void)
{
  if (g_engine) return 0;
  if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return -1;
  if (dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags) != dnnl_success) {
    dnnl_engine_destroy(g_engine);
    g_engine = NULL;
    return -1;
  }
  return 0;
}

/* The primitive descriptor of C (M,N) fp32 [+]= A (M,K) @ B (K,N), A and B
 * bf16 with the given row and column strides. */
static dnnl_primitive_desc_t onednn_pd(int M, int N, int K, dnnl_dim_t as0, dnnl_dim_t as1,
                                       dnnl_dim_t bs0, dnnl_dim_t bs1, int accumulate,
                                       dnnl_memory_desc_t md[3])
{
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  dnnl_dims_t as = {as0, as1}, bs = {bs0, bs1}, cs = {N, 1};
  if (dnnl_memory_desc_init_by_strides(&md[0], 2, ad, dnnl_bf16, as) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&md[1], 2, bd, dnnl_bf16, bs) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&md[2], 2, cd, dnnl_f32, cs) != dnnl_success)
    return NULL;
  dnnl_matmul_desc_t desc;
  if (dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]) != dnnl_success) return NULL;
  dnnl_primitive_attr_t attr = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
  if (accumulate) {
    dnnl_post_ops_t po = NULL;
    if (dnnl_post_ops_create(&po) != dnnl_success) {
      dnnl_primitive_attr_destroy(attr);
      return NULL;
    }
    dnnl_post_ops_append_sum(po, 1.0f);
    dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL) != dnnl_success) pd = NULL;
  dnnl_primitive_attr_destroy(attr);
  return pd;
}

/* C [+]= A @ B as onednn_pd describes; 0 on success.  oneDNN's primitive
 * cache makes the repeated creation of the same shape cheap. */
static int onednn_matmul(int M, int N, int K, const uint16_t *A, dnnl_dim_t as0, dnnl_dim_t as1,
                         const uint16_t *B, dnnl_dim_t bs0, dnnl_dim_t bs1, float *Cm,
                         int accumulate)
{
  if (onednn_init()) return -1;
  dnnl_memory_desc_t md[3];
  dnnl_primitive_desc_t pd = onednn_pd(M, N, K, as0, as1, bs0, bs1, accumulate, md);
  if (!pd) return -1;
  int rc = -1;
  dnnl_primitive_t prim = NULL;
  dnnl_memory_t mem[3] = {NULL, NULL, NULL};
  void *ptr[3] = {(void *)A, (void *)B, Cm};
  if (dnnl_primitive_create(&prim, pd) != dnnl_success) goto done;
  for (int i = 0; i < 3; i++)
    if (dnnl_memory_create(&mem[i], &md[i], g_engine, ptr[i]) != dnnl_success) goto done;
  dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
  if (dnnl_primitive_execute(prim, g_stream, 3, args) != dnnl_success) goto done;
  if (dnnl_stream_wait(g_stream) != dnnl_success) goto done;
  rc = 0;
done:
  for (int i = 0; i < 3; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  if (prim) dnnl_primitive_destroy(prim);
  dnnl_primitive_desc_destroy(pd);
  return rc;
}

static int to_bf16(uint16_t **dst, int slot, const float *src, size_t n)
{
  uint16_t *d = scratch(slot, n * sizeof(uint16_t));
  if (!d) return -1;
  #pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) d[i] = FsdpFloatToBf16(src[i]);
  *dst = d;
  return 0;
}
#endif

static int path(void)
{
  if (g_path != PATH_UNSET) return g_path;
  int want = env_path();
#ifdef HAVE_ONEDNN
  if (want == PATH_UNSET) want = core_has_bf16() ? PATH_ONEDNN : PATH_CONVERT;
  if (want == PATH_ONEDNN && onednn_init()) want = PATH_CONVERT;
#else
  want = PATH_CONVERT; /* built without oneDNN */
#endif
  g_path = want;
  return g_path;
}

#ifdef HAVE_ONEDNN
/* A oneDNN failure (memory, an unsupported shape) is not an error the
 * kernel can return: say so once and convert from then on. */
static void onednn_failed(void)
{
  fprintf(stderr, "fsdp: oneDNN bf16 matmul failed; bf16 matmuls run as fp32 sgemm on "
                  "bf16-rounded inputs from now on\n");
  g_path = PATH_CONVERT;
}

static void bias_rows(float *out, const float *bias, int N, int OC)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
}
#endif

void matmul_forward_bf16_cpu(float *out, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC)
{
  size_t ni = (size_t)N * C, nw = (size_t)OC * C;
#ifdef HAVE_ONEDNN
  if (path() == PATH_ONEDNN) {
    uint16_t *a, *w;
    if (!to_bf16(&a, 0, inp, ni) && !to_bf16(&w, 1, weight, nw)) {
      if (bias) bias_rows(out, bias, N, OC);
      /* weight (OC,C) row-major is B = weight^T (C,OC) with strides {1, C} */
      if (!onednn_matmul(N, OC, C, a, C, 1, w, 1, C, out, bias != NULL)) return;
    }
    onednn_failed();
  }
#else
  (void)path();
#endif
  float *a = scratch(0, ni * sizeof(float)), *w = scratch(1, nw * sizeof(float));
  if (!a || !w) abort(); /* out of memory in a kernel: no way to report it */
  round_to_bf16_f32(a, inp, ni);
  round_to_bf16_f32(w, weight, nw);
  matmul_forward_cpu(out, a, w, bias, N, C, OC);
}

void matmul_backward_bf16_cpu(float *dinp, float *dweight, float *dbias,
                              const float *dout, const float *inp,
                              const float *weight, int N, int C, int OC)
{
  /* dbias: fp32 column sums of the unrounded dout */
  if (dbias) matmul_backward_cpu(NULL, NULL, dbias, dout, inp, weight, N, C, OC);
  if (!dinp && !dweight) return;
  size_t nd = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
#ifdef HAVE_ONEDNN
  if (path() == PATH_ONEDNN) {
    uint16_t *d, *a = NULL, *w = NULL;
    int ok = !to_bf16(&d, 0, dout, nd);
    if (ok && dinp) ok = !to_bf16(&w, 1, weight, nw);
    if (ok && dweight) ok = !to_bf16(&a, 2, inp, ni);
    /* dinp (N,C) += dout (N,OC) @ weight (OC,C) */
    if (ok && dinp) {
      ok = !onednn_matmul(N, C, OC, d, OC, 1, w, C, 1, dinp, 1);
      if (ok) dinp = NULL; /* done: not again below */
    }
    /* dweight (OC,C) += dout^T (OC,N; strides {1, OC}) @ inp (N,C) */
    if (ok && dweight) ok = !onednn_matmul(OC, C, N, d, 1, OC, a, C, 1, dweight, 1);
    if (ok) return;
    onednn_failed();
  }
#else
  (void)path();
#endif
  float *d = scratch(0, nd * sizeof(float));
  float *w = dinp ? scratch(1, nw * sizeof(float)) : NULL;
  float *a = dweight ? scratch(2, ni * sizeof(float)) : NULL;
  if (!d || (dinp && !w) || (dweight && !a)) abort();
  round_to_bf16_f32(d, dout, nd);
  if (w) round_to_bf16_f32(w, weight, nw);
  if (a) round_to_bf16_f32(a, inp, ni);
  matmul_backward_cpu(dinp, dweight, NULL, d, a ? a : inp, w ? w : weight, N, C, OC);
}

void FsdpKernelsCpuGemm(int bf16, char *library, size_t lsize, char *kernel, size_t ksize)
{
  const char *core = FsdpKernelsCpuBlasCore();
  if (!bf16 || path() == PATH_CONVERT) {
    snprintf(library, lsize, "OpenBLAS");
    snprintf(kernel, ksize, bf16 ? "%s sgemm on bf16-rounded inputs" : "%s sgemm", core);
    return;
  }
#ifdef HAVE_ONEDNN
  const dnnl_version_t *v = dnnl_version();
  snprintf(library, lsize, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
  /* the implementation oneDNN picks for a forward product of this model's
   * kind (bf16 x bf16^T -> f32) */
  dnnl_memory_desc_t md[3];
  const char *impl = NULL;
  dnnl_primitive_desc_t pd = onednn_pd(64, 64, 64, 64, 1, 1, 64, 0, md);
  if (pd && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
    impl = NULL;
  snprintf(kernel, ksize, "%s", impl ? impl : "unknown");
  if (pd) dnnl_primitive_desc_destroy(pd);
#else
  snprintf(library, lsize, "OpenBLAS");
  snprintf(kernel, ksize, "%s sgemm on bf16-rounded inputs", core);
#endif
}
