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
#include "common.cuh"

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

/* cuBLASLt descriptors, destroyed on every path out of lt_gemm. */
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs()
  {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

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
  /* A bias cuBLASLt might not read (it wants 16-byte alignment), or any
   * bias on the cublasGemmEx path: rows start as the bias, beta = 1. */
  bool fill_bias = bias && ((uintptr_t)bias % 16 != 0);
  if (fill_bias) {
    size_t total = (size_t)m * n;
    fill_rows_kernel<<<grid_stride_blocks(total, 256), 256, 0, cuda_state.stream>>>(d, bias, m,
                                                                                    total);
    CUDA_CHECK_LAUNCH();
    bias = nullptr;
    beta = 1.0f;
  }
  cublasComputeType_t ct = (ab == CUDA_R_32F && cuda_state.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                 : CUBLAS_COMPUTE_32F;
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LtDescs L;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&L.op, ct, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bt = CUDA_R_32F;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                sizeof epi));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                sizeof bt));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&L.a, ab, ta ? k : m, ta ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&L.b, ab, tb ? n : k, tb ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&L.d, CUDA_R_32F, m, n, ldd));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&L.pref));
  size_t ws = cuda_state.lt_workspace_size;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      L.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  uint32_t al_a = ptr_alignment(a), al_b = ptr_alignment(b), al_d = ptr_alignment(d);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      L.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      L.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      L.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      L.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(cuda_state.lt, L.op, L.a, L.b, L.d, L.d,
                                                     L.pref, 1, &heur, &found);
  if (hs == CUBLAS_STATUS_SUCCESS && found > 0) {
    CUBLAS_CHECK(cublasLtMatmul(cuda_state.lt, L.op, &alpha, a, L.a, b, L.b, &beta, d, L.d, d,
                                L.d, &heur.algo, cuda_state.lt_workspace,
                                cuda_state.lt_workspace_size, cuda_state.stream));
    return;
  }
  /* No cuBLASLt algorithm: cublasGemmEx, with the bias as initial rows. */
  if (bias) {
    size_t total = (size_t)m * n;
    fill_rows_kernel<<<grid_stride_blocks(total, 256), 256, 0, cuda_state.stream>>>(d, bias, m,
                                                                                    total);
    CUDA_CHECK_LAUNCH();
    beta = 1.0f;
  }
  CUBLAS_CHECK(cublasGemmEx(cuda_state.blas, opa, opb, m, n, k, &alpha, a, ab, lda, b, ab, ldb,
                            &beta, d, CUDA_R_32F, ldd, ct, CUBLAS_GEMM_DEFAULT));
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
