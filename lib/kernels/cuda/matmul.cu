/* matmul.cu: linear layers through cuBLASLt (CUDA).
 *
 * Weights are [out, in] (kernels.h) and buffers are row-major, so each
 * product is written for cuBLAS's column-major view, where a row-major
 * (R, C) matrix is a column-major (C, R) one (llm.c's matmul.cuh does the
 * same):
 *   out^T (OC,N)    = W^T-view (OC,C) x inp (C,N)       -> gemm(T, N)
 *   dinp  (C,N)    += W (C,OC) x dout (OC,N)            -> gemm(N, N)
 *   dweight (C,OC) += inp (C,N) x dout^T (N,OC)         -> gemm(N, T)
 * The forward bias rides on cuBLASLt's BIAS epilogue; dbias is a column
 * sum of dout (column_sum_accumulate) because the BGRAD epilogue
 * overwrites and [Note: backward accumulates].
 *
 * fp32 GEMMs compute in fp32 (CUBLAS_COMPUTE_32F) unless TF32 was asked
 * for; the bf16 entry points take bf16 operands and accumulate and write
 * fp32.  Whenever cuBLASLt has no algorithm for a case (heuristics return
 * none, e.g. for odd leading dimensions) cublasGemmEx does it. */
#include <string.h>

#include "common.cuh"

extern "C" {
#include "kernels/gemm_plan.h"
}

#define COLSUM_ROWS 256 /* rows per block in the column-sum kernel */

/* ---- kernels ------------------------------------------------------------- */

/* Block (32, 8): out[c] += sum over COLSUM_ROWS rows of x[r][c]; see
 * layernorm_backward_params_kernel for the shape. */
__global__ void column_sum_kernel(float *out, const void *__restrict__ x, int dt, int N, int C)
{
  __shared__ float s[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  int r0 = blockIdx.y * COLSUM_ROWS, r1 = min(r0 + COLSUM_ROWS, N);
  float a = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) a += load_as_float(x, dt, (size_t)r * C + c);
  s[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; k++) a += s[k][threadIdx.x];
    atomicAdd(&out[c], a);
  }
}

/* out (N, OC) rows = bias: the fallback for a bias cuBLASLt cannot take. */
__global__ void fill_rows_kernel(float *out, const float *__restrict__ bias, int OC, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = bias[i % OC];
}

/* ---- launchers ----------------------------------------------------------- */

void column_sum_accumulate(float *out, const void *x, int dt, int N, int C)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0 && ceil_div(N, COLSUM_ROWS) <= 65535);
  if (N == 0) return;
  dim3 grid(ceil_div(C, 32), ceil_div(N, COLSUM_ROWS)), block(32, 8);
  column_sum_kernel<<<grid, block, 0, cuda_state.stream>>>(out, x, dt, N, C);
  CUDA_CHECK_LAUNCH();
}

/* Largest power of two (<= 256) dividing the address: cuBLASLt assumes
 * 256-byte aligned operands unless told otherwise, and FlatParameter views
 * start at any element. */
static uint32_t ptr_alignment(const void *p)
{
  uint32_t a = 256;
  while (a > 1 && ((uintptr_t)p % a) != 0) a >>= 1;
  return a;
}

/* [Note: GEMM plans per shape] (kernels/gemm_plan.h): the descriptors and
 * the heuristic's algorithm of each distinct GEMM, created on its first
 * call and kept until FsdpKernelsCudaFinalize (lt_plans_release).  A plan
 * is keyed by everything they depend on; the bias pointer is not (it is an
 * attribute set on the cached operation descriptor at each call). */
struct LtPlan {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
  int found; /* 0: cuBLASLt has no algorithm, cublasGemmEx runs it */
};
static FsdpGemmPlanTable lt_table;
static LtPlan lt_plans[FSDP_GEMM_PLAN_SLOTS];

static void lt_plan_destroy(LtPlan *p)
{
  /* best effort, as FsdpKernelsCudaFinalize: statuses are not checked */
  if (p->d) cublasLtMatrixLayoutDestroy(p->d);
  if (p->b) cublasLtMatrixLayoutDestroy(p->b);
  if (p->a) cublasLtMatrixLayoutDestroy(p->a);
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  memset(p, 0, sizeof *p);
}

void lt_plans_release(void)
{
  for (int s = 0; s < FSDP_GEMM_PLAN_SLOTS; s++)
    if (lt_table.used[s]) lt_plan_destroy(&lt_plans[s]);
  FsdpGemmPlanReset(&lt_table);
}

extern "C" void FsdpKernelsCudaGemmPlanStats(int *plans, uint64_t *hits, uint64_t *misses)
{
  *plans = lt_table.count;
  *hits = lt_table.hits;
  *misses = lt_table.misses;
}

/* Record a cuBLAS failure and say so (returns 1 on failure). */
#define LT_FAILED(expr)                                                                    \
  ([&]() {                                                                                 \
    cublasStatus_t st_ = (expr);                                                           \
    if (st_ == CUBLAS_STATUS_SUCCESS) return 0;                                            \
    cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "%s failed: %s", #expr,           \
                      cublasGetStatusString(st_));                                         \
    return 1;                                                                              \
  }())

/* Fill plan p for key: descriptors, then the heuristic's best algorithm
 * (none found is not an error: p->found = 0).  0 on success; on failure
 * the error is recorded and p is left empty. */
static int lt_plan_create(LtPlan *p, const FsdpGemmKey *k)
{
  memset(p, 0, sizeof *p);
  cublasComputeType_t ct = (cublasComputeType_t)k->compute;
  cudaDataType_t ab = (cudaDataType_t)k->ab_type;
  cublasOperation_t opa = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulPreference_t pref = nullptr;
  int bad = LT_FAILED(cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F)) ||
            LT_FAILED(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                                     sizeof opa)) ||
            LT_FAILED(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                                     sizeof opb));
  if (!bad && k->epilogue == CUBLASLT_EPILOGUE_BIAS) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bt = CUDA_R_32F;
    bad = LT_FAILED(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                   sizeof epi)) ||
          LT_FAILED(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                   sizeof bt));
  }
  bad = bad ||
        LT_FAILED(cublasLtMatrixLayoutCreate(&p->a, ab, k->ta ? k->k : k->m, k->ta ? k->m : k->k,
                                             k->lda)) ||
        LT_FAILED(cublasLtMatrixLayoutCreate(&p->b, ab, k->tb ? k->n : k->k, k->tb ? k->k : k->n,
                                             k->ldb)) ||
        LT_FAILED(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, k->m, k->n, k->ldd)) ||
        LT_FAILED(cublasLtMatmulPreferenceCreate(&pref));
  if (!bad) {
    size_t ws = cuda_state.lt_workspace_size;
    bad = LT_FAILED(cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
          LT_FAILED(cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_a, sizeof k->align_a)) ||
          LT_FAILED(cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_b, sizeof k->align_b)) ||
          LT_FAILED(cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_d, sizeof k->align_d)) ||
          LT_FAILED(cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_d, sizeof k->align_d));
  }
  if (!bad) {
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    /* a failed heuristic query is "no algorithm" (cublasGemmEx then) */
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(cuda_state.lt, p->op, p->a, p->b, p->d,
                                                       p->d, pref, 1, &heur, &found);
    p->found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->found) p->algo = heur.algo;
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (bad) lt_plan_destroy(p);
  return bad;
}

/* Column-major D (m,n) fp32 = alpha op(A) op(B) + beta D + bias (m, fp32,
 * broadcast over columns; NULL for none; only with beta == 0).  A is
 * (m,k) or, transposed, (k,m) with leading dimension lda; B is (k,n) or
 * (n,k) with ldb; A and B have type ab (fp32 or bf16). */
static void lt_gemm(float *d, int ldd, const void *a, int lda, bool ta, const void *b, int ldb,
                    bool tb, cudaDataType_t ab, int m, int n, int k, float alpha, float beta,
                    const float *bias)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(m >= 0 && n >= 0 && k >= 0 && (!bias || beta == 0.0f));
  if (m == 0 || n == 0) return;
  /* A bias cuBLASLt might not read (it wants 16-byte alignment): rows
   * start as the bias, beta = 1. */
  if (bias && ((uintptr_t)bias % 16 != 0)) {
    size_t total = (size_t)m * n;
    fill_rows_kernel<<<grid_stride_blocks(total, 256), 256, 0, cuda_state.stream>>>(d, bias, m,
                                                                                    total);
    CUDA_CHECK_LAUNCH();
    bias = nullptr;
    beta = 1.0f;
  }
  cublasComputeType_t ct = (ab == CUDA_R_32F && cuda_state.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                 : CUBLAS_COMPUTE_32F;
  FsdpGemmKey key;
  memset(&key, 0, sizeof key);
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
  key.ta = ta, key.tb = tb, key.ab_type = (int32_t)ab, key.compute = (int32_t)ct;
  key.epilogue = bias ? (int32_t)CUBLASLT_EPILOGUE_BIAS : (int32_t)CUBLASLT_EPILOGUE_DEFAULT;
  key.align_a = ptr_alignment(a), key.align_b = ptr_alignment(b), key.align_d = ptr_alignment(d);
  int created = 0;
  int slot = FsdpGemmPlanSlot(&lt_table, &key, &created);
  LtPlan once; /* a full table: a plan for this call only */
  LtPlan *p = slot >= 0 ? &lt_plans[slot] : &once;
  if (created || slot < 0) {
    if (lt_plan_create(p, &key)) {
      if (slot >= 0) FsdpGemmPlanDrop(&lt_table, slot);
      return;
    }
  }
  int failed = 0;
  if (p->found) {
    if (bias)
      failed = LT_FAILED(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &bias, sizeof bias));
    failed = failed ||
             LT_FAILED(cublasLtMatmul(cuda_state.lt, p->op, &alpha, a, p->a, b, p->b, &beta, d,
                                      p->d, d, p->d, &p->algo, cuda_state.lt_workspace,
                                      cuda_state.lt_workspace_size, cuda_state.stream));
  } else {
    /* No cuBLASLt algorithm: cublasGemmEx, with the bias as initial rows. */
    if (bias) {
      size_t total = (size_t)m * n;
      fill_rows_kernel<<<grid_stride_blocks(total, 256), 256, 0, cuda_state.stream>>>(d, bias, m,
                                                                                      total);
      cudaError_t le = cudaGetLastError();
      if (le != cudaSuccess) {
        cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "%s: launch failed: %s", __func__,
                          cudaGetErrorString(le));
        failed = 1;
      }
      beta = 1.0f;
    }
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    failed = failed || LT_FAILED(cublasGemmEx(cuda_state.blas, opa, opb, m, n, k, &alpha, a, ab, lda, b, ab,
                                    ldb, &beta, d, CUDA_R_32F, ldd, ct, CUBLAS_GEMM_DEFAULT));
  }
  (void)failed; /* recorded: [Note: CUDA kernel errors] */
  if (slot < 0) lt_plan_destroy(&once);
}

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias. */
static void matmul_forward_any(float *out, const void *inp, const void *weight,
                               const float *bias, int N, int C, int OC, cudaDataType_t ab)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0 && OC > 0);
  lt_gemm(out, OC, weight, C, true, inp, C, false, ab, OC, N, C, 1.0f, 0.0f, bias);
}

/* dinp += dout @ weight; dweight += dout^T @ inp; dbias += colsum(dout). */
static void matmul_backward_any(float *dinp, float *dweight, float *dbias, const void *dout,
                                const void *inp, const void *weight, int N, int C, int OC,
                                cudaDataType_t ab)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0 && OC > 0);
  if (dinp) lt_gemm(dinp, C, weight, C, false, dout, OC, false, ab, C, N, OC, 1.0f, 1.0f, nullptr);
  if (dweight)
    lt_gemm(dweight, C, inp, C, false, dout, OC, true, ab, C, OC, N, 1.0f, 1.0f, nullptr);
  if (dbias)
    column_sum_accumulate(dbias, dout, ab == CUDA_R_32F ? FSDP_DTYPE_FP32 : FSDP_DTYPE_BF16, N,
                          OC);
}

extern "C" void matmul_forward_cuda(float *out, const float *inp, const float *weight,
                                    const float *bias, int N, int C, int OC)
{
  matmul_forward_any(out, inp, weight, bias, N, C, OC, CUDA_R_32F);
}

extern "C" void matmul_backward_cuda(float *dinp, float *dweight, float *dbias,
                                     const float *dout, const float *inp, const float *weight,
                                     int N, int C, int OC)
{
  matmul_backward_any(dinp, dweight, dbias, dout, inp, weight, N, C, OC, CUDA_R_32F);
}

extern "C" void matmul_forward_bf16_cuda(float *out, const uint16_t *inp, const uint16_t *weight,
                                         const float *bias, int N, int C, int OC)
{
  matmul_forward_any(out, inp, weight, bias, N, C, OC, CUDA_R_16BF);
}

extern "C" void matmul_backward_bf16_cuda(float *dinp, float *dweight, float *dbias,
                                          const uint16_t *dout, const uint16_t *inp,
                                          const uint16_t *weight, int N, int C, int OC)
{
  matmul_backward_any(dinp, dweight, dbias, dout, inp, weight, N, C, OC, CUDA_R_16BF);
}

/* ---- the table's bf16 matmuls ([Note: bf16 matmuls] in kernels.h) -------
 *
 * The table's entries take fp32 operands (the model's activations and its
 * fp32 compute copy of the weights), so, as the CPU's convert path does,
 * each operand is rounded to bf16 (nearest even, cast_from_float_cuda: the
 * rounding of FsdpDtypeFromFloat and of the CPU kernels) into scratch, and
 * the bf16 GEMM accumulates in fp32 on the tensor cores.  dbias is the fp32
 * column sum of the unrounded dout, as on the CPU.  The rounding costs one
 * read and a half-size write per operand; keeping activations in bf16
 * between kernels (llm.c) would remove it and is not done here.
 *
 * Scratch: three device buffers -- inp (forward) or dout (backward),
 * weight, inp (backward) -- grown to the largest call and kept until
 * FsdpKernelsCudaFinalize: shapes repeat every step, so they grow during
 * step 1 only (fsdp-plan counts them: PlanBf16ScratchBytes, 2 bytes an
 * element).  Through the device layer's accounted allocator when it is
 * installed (a training run: the run's device memory statistics include
 * them), else cudaMalloc (the kernel tests).  Freeing on growth waits for
 * the device (cudaFree does), so no launch still reads the old buffer. */
static uint16_t *bf16_scratch[3];
static size_t bf16_scratch_n[3];
static int bf16_scratch_accounted[3]; /* 1: from the installed allocator */

static void bf16_scratch_free(int i)
{
  /* best effort, as Finalize */
  if (bf16_scratch[i]) {
    if (bf16_scratch_accounted[i]) cuda_free_accounted(&bf16_scratch[i]);
    else cudaFree(bf16_scratch[i]);
  }
  bf16_scratch[i] = nullptr;
  bf16_scratch_n[i] = 0;
  bf16_scratch_accounted[i] = 0;
}

void bf16_scratch_release(void)
{
  for (int i = 0; i < 3; i++) bf16_scratch_free(i);
}

/* Scratch slot i rounded from src (n fp32), or NULL with the error recorded. */
static const uint16_t *round_operand(int i, const float *src, size_t n)
{
  if (bf16_scratch_n[i] < n) {
    bf16_scratch_free(i);
    size_t bytes = n * sizeof(uint16_t);
    int accounted = 0;
    int rc = cuda_alloc_accounted(bytes, &bf16_scratch[i], &accounted);
    if (rc != FSDP_SUCCESS) {
      bf16_scratch[i] = nullptr;
      cuda_record_error(rc, __FILE__, __LINE__, "bf16 matmul scratch of %zu bytes: %s", bytes,
                        FsdpErrorLastMessage());
      return nullptr;
    }
    bf16_scratch_n[i] = n;
    bf16_scratch_accounted[i] = accounted;
  }
  cast_from_float_cuda(bf16_scratch[i], FSDP_DTYPE_BF16, src, n);
  return cuda_state.err_code == FSDP_SUCCESS ? bf16_scratch[i] : nullptr;
}

extern "C" void matmul_forward_bf16_rounding_cuda(float *out, const float *inp,
                                                  const float *weight, const float *bias, int N,
                                                  int C, int OC)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0 && OC > 0);
  if (N == 0) return;
  const uint16_t *a = round_operand(0, inp, (size_t)N * C);
  const uint16_t *w = a ? round_operand(1, weight, (size_t)OC * C) : nullptr;
  if (!w) return;
  matmul_forward_any(out, a, w, bias, N, C, OC, CUDA_R_16BF);
}

extern "C" void matmul_backward_bf16_rounding_cuda(float *dinp, float *dweight, float *dbias,
                                                   const float *dout, const float *inp,
                                                   const float *weight, int N, int C, int OC)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(N >= 0 && C > 0 && OC > 0);
  if (dbias) column_sum_accumulate(dbias, dout, FSDP_DTYPE_FP32, N, OC);
  if (N == 0 || (!dinp && !dweight)) return;
  const uint16_t *d = round_operand(0, dout, (size_t)N * OC);
  const uint16_t *w = d && dinp ? round_operand(1, weight, (size_t)OC * C) : nullptr;
  const uint16_t *a = d && dweight ? round_operand(2, inp, (size_t)N * C) : nullptr;
  if (!d || (dinp && !w) || (dweight && !a)) return;
  matmul_backward_any(dinp, dweight, nullptr, d, a, w, N, C, OC, CUDA_R_16BF);
}
