/* attention.cu: causal multi-head self-attention (CUDA), the
 * straightforward kernel set of llm.c's attention_forward/backward: the
 * four products are strided-batched SGEMMs over the heads of one sequence
 * and the softmax runs one warp per row.  qkv (B,T,3C) is read in place:
 * head h of Q, K, V is a (T, hs) matrix at column offset h*hs (+C, +2C)
 * with row stride 3C, so consecutive heads are hs elements apart and one
 * cublasSgemmStridedBatched call covers the NH heads of one batch row (no
 * permuted copies, no scratch).  Column-major views of the row-major
 * buffers (see matmul.cu):
 *   pre^T (T,T)      = K^T-view x Q          gemm(T, N), alpha = scale
 *   out_h^T (hs,T)   = V x att^T-view        gemm(N, N)
 *   datt^T (T,T)     = V^T-view x dout_h     gemm(T, N)
 *   dQ^T (hs,T)     += scale K x dpre^T-view gemm(N, N)
 *   dK^T (hs,T)     += scale Q x dpre-view   gemm(N, T)
 *   dV^T (hs,T)     += dout_h x att-view     gemm(N, T)
 * The full T x T scores are computed and the masked half zeroed by the
 * softmax kernels (as the CPU kernel leaves it: 0 above the diagonal in
 * preatt, att, datt and dpreatt); a fused flash-style kernel is the
 * performance step. */
#include "common.cuh"

#define SOFTMAX_ROWS_PER_BLOCK 8 /* warps per block */

/* ---- kernels ------------------------------------------------------------- */

/* Row t of one (b,h) matrix, one warp: att[t2] = softmax over t2 <= t of
 * pre[t2]; pre and att are 0 for t2 > t. */
__global__ void softmax_causal_forward_kernel(float *pre, float *att, int T, size_t rows)
{
  int lane = threadIdx.x % 32;
  size_t row = (size_t)blockIdx.x * SOFTMAX_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= rows) return;
  int t = (int)(row % T);
  float *p = pre + row * T, *a = att + row * T;
  float mx = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += 32) mx = fmaxf(mx, p[t2]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    float e = expf(p[t2] - mx);
    a[t2] = e;
    sum += e;
  }
  float inv = 1.0f / warp_sum(sum);
  for (int t2 = lane; t2 <= t; t2 += 32) a[t2] *= inv;
  for (int t2 = t + 1 + lane; t2 < T; t2 += 32) {
    p[t2] = 0.0f;
    a[t2] = 0.0f;
  }
}

/* Row t, one warp: dpre[t2] = att (datt - sum(att datt)) for t2 <= t; datt
 * and dpre are 0 above the diagonal. */
__global__ void softmax_causal_backward_kernel(float *dpre, float *datt, const float *att, int T,
                                               size_t rows)
{
  int lane = threadIdx.x % 32;
  size_t row = (size_t)blockIdx.x * SOFTMAX_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= rows) return;
  int t = (int)(row % T);
  const float *a = att + row * T;
  float *da = datt + row * T, *dp = dpre + row * T;
  float ad = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) ad += a[t2] * da[t2];
  ad = warp_sum(ad);
  for (int t2 = lane; t2 <= t; t2 += 32) dp[t2] = a[t2] * (da[t2] - ad);
  for (int t2 = t + 1 + lane; t2 < T; t2 += 32) {
    da[t2] = 0.0f;
    dp[t2] = 0.0f;
  }
}

/* ---- launchers ----------------------------------------------------------- */

/* Column-major gemm over the NH heads of one batch row: matrix i of each
 * operand starts i*stride elements after the first. */
#define SGEMM_HEADS(opa, opb, m, n, k, alpha, A, lda, sA, Bm, ldb, sB, beta, Cm, ldc, sC)      \
  do {                                                                                       \
    float alpha_ = (alpha), beta_ = (beta);                                                  \
    CUBLAS_CHECK(cublasSgemmStridedBatched(cuda_state.blas, opa, opb, m, n, k, &alpha_, A,   \
                                           lda, sA, Bm, ldb, sB, &beta_, Cm, ldc, sC, NH));  \
  } while (0)

extern "C" void attention_forward_cuda(float *out, float *preatt, float *att, const float *qkv,
                                       int B, int T, int C, int NH)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
  if (B == 0) return;
  const int C3 = 3 * C, hs = C / NH;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf((float)hs);
  const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * C3, *k = q + C;
    float *pre = preatt + (size_t)b * NH * TT;
    SGEMM_HEADS(T_, N_, T, T, hs, scale, k, C3, hs, q, C3, hs, 0.0f, pre, T, TT);
  }
  size_t rows = (size_t)B * NH * T;
  softmax_causal_forward_kernel<<<(unsigned)((rows + SOFTMAX_ROWS_PER_BLOCK - 1) /
                                             SOFTMAX_ROWS_PER_BLOCK),
                                  32 * SOFTMAX_ROWS_PER_BLOCK, 0, cuda_state.stream>>>(
      preatt, att, T, rows);
  CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (size_t)b * T * C3 + 2 * C;
    const float *a = att + (size_t)b * NH * TT;
    float *o = out + (size_t)b * T * C;
    SGEMM_HEADS(N_, N_, hs, T, T, 1.0f, v, C3, hs, a, T, TT, 0.0f, o, C, hs);
  }
}

extern "C" void attention_backward_cuda(float *dqkv, float *dpreatt, float *datt,
                                        const float *dout, const float *qkv, const float *att,
                                        int B, int T, int C, int NH)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T > 0 && NH > 0 && C % NH == 0);
  if (B == 0) return;
  const int C3 = 3 * C, hs = C / NH;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf((float)hs);
  const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (size_t)b * T * C3 + 2 * C;
    const float *d = dout + (size_t)b * T * C;
    float *da = datt + (size_t)b * NH * TT;
    SGEMM_HEADS(T_, N_, T, T, hs, 1.0f, v, C3, hs, d, C, hs, 0.0f, da, T, TT);
  }
  size_t rows = (size_t)B * NH * T;
  softmax_causal_backward_kernel<<<(unsigned)((rows + SOFTMAX_ROWS_PER_BLOCK - 1) /
                                              SOFTMAX_ROWS_PER_BLOCK),
                                   32 * SOFTMAX_ROWS_PER_BLOCK, 0, cuda_state.stream>>>(
      dpreatt, datt, att, T, rows);
  CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; b++) {
    size_t base = (size_t)b * T * C3;
    const float *q = qkv + base, *k = q + C;
    float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
    const float *d = dout + (size_t)b * T * C;
    const float *a = att + (size_t)b * NH * TT, *dp = dpreatt + (size_t)b * NH * TT;
    SGEMM_HEADS(N_, N_, hs, T, T, scale, k, C3, hs, dp, T, TT, 1.0f, dq, C3, hs);
    SGEMM_HEADS(N_, T_, hs, T, T, scale, q, C3, hs, dp, T, TT, 1.0f, dk, C3, hs);
    SGEMM_HEADS(N_, T_, hs, T, T, 1.0f, d, C, hs, a, T, TT, 1.0f, dv, C3, hs);
  }
}

/* ---- flash attention ------------------------------------------------------
 *
 * [Note: flash attention] (kernels/cpu/attention.c) on the GPU: the same
 * algorithm, no T x T buffer.  Tiles of FA_BR query rows and FA_BC key
 * rows live in shared memory (their head's hs <= FA_MAX_HS channels,
 * converted to fp32 on load); scores, probabilities and the softmax
 * statistics (running max, sum, lse, D) are fp32 whatever the input type.
 *   forward:  grid (query tiles, NH, B), one block per (b, h, query
 *             tile); key tiles up to the tile's last row only (causal:
 *             tiles wholly above the diagonal are skipped); online softmax
 *             with the output accumulated in shared memory; writes out
 *             and lse (B,NH,T).
 *   backward: D = rowsum(dO * O) into the (B,NH,T) scratch (one warp per
 *             row); then one block per (b, h, key tile) recomputes P and
 *             dS for every query tile at or below it and sums dK and dV
 *             in shared memory, and one block per (b, h, query tile) sums
 *             dQ over the key tiles up to its last row.  Two passes
 *             recompute P twice but need no atomics, so the gradients are
 *             deterministic (as the CPU kernels, [Note: deterministic CPU
 *             kernels]).
 * Each phase of a tile is a loop of the block's FA_THREADS threads over
 * its elements, __syncthreads between phases: plain CUDA-core fp32, written
 * to be checked by reading; tensor-core MMA tiles are the next step.
 * Inputs are fp32 or bf16 (uint16_t bits, nearest-even stores); dqkv is
 * fp32 and accumulates. */
#define FA_BR 32       /* query rows per tile */
#define FA_BC 32       /* key rows per tile */
#define FA_THREADS 128 /* threads per block */
#define FA_MAX_HS 128  /* largest head size (shared memory: see fa_smem_*) */
#define FA_D_ROWS 8    /* rows (warps) per block of the D kernel */

__device__ __forceinline__ float fa_ld(const float *p) { return *p; }
__device__ __forceinline__ float fa_ld(const uint16_t *p) { return bf16_bits_to_float(*p); }
__device__ __forceinline__ void fa_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void fa_st(uint16_t *p, float v) { *p = float_to_bf16_bits(v); }

/* rows x hs of a (T, stride) matrix from row r0 into shared dst (rows
 * past T are zero). */
template <typename Tin>
__device__ void fa_load_tile(float *dst, const Tin *src, int r0, int rows, int T, int stride,
                             int hs)
{
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) {
    int r = i / hs, d = i % hs;
    dst[i] = r0 + r < T ? fa_ld(src + (size_t)(r0 + r) * stride + d) : 0.0f;
  }
}

/* s[r][c] = scale Q[r] . K[c] for the FA_BR x FA_BC tile; -INFINITY where
 * masked (key after query, or either past T). */
__device__ void fa_scores(float *s, const float *q, const float *k, int q0, int k0, int T, int hs,
                          float scale)
{
  for (int i = threadIdx.x; i < FA_BR * FA_BC; i += blockDim.x) {
    int r = i / FA_BC, c = i % FA_BC, t = q0 + r, t2 = k0 + c;
    float acc = -INFINITY;
    if (t < T && t2 <= t) {
      acc = 0.0f;
      for (int d = 0; d < hs; d++) acc += q[r * hs + d] * k[c * hs + d];
      acc *= scale;
    }
    s[i] = acc;
  }
}

/* Dynamic shared memory of the kernels below, in floats. */
static inline size_t fa_smem_forward(int hs) { return (size_t)(2 * FA_BR + 2 * FA_BC) * hs + FA_BR * FA_BC + 3 * FA_BR; }
static inline size_t fa_smem_dkdv(int hs) { return (size_t)(2 * FA_BR + 4 * FA_BC) * hs + 2 * FA_BR * FA_BC + 2 * FA_BR; }
static inline size_t fa_smem_dq(int hs) { return (size_t)(3 * FA_BR + 2 * FA_BC) * hs + 2 * FA_BR * FA_BC + 2 * FA_BR; }

template <typename Tin>
__global__ void __launch_bounds__(FA_THREADS)
    flash_forward_kernel(Tin *out, float *lse, const Tin *qkv, int T, int C, int NH, float scale)
{
  extern __shared__ float fa_smem[];
  const int hs = C / NH, C3 = 3 * C, h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * FA_BR;
  float *q = fa_smem, *o = q + FA_BR * hs, *k = o + FA_BR * hs, *v = k + FA_BC * hs;
  float *s = v + FA_BC * hs, *m = s + FA_BR * FA_BC, *l = m + FA_BR, *corr = l + FA_BR;
  const Tin *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
  fa_load_tile(q, qb, q0, FA_BR, T, C3, hs);
  for (int i = threadIdx.x; i < FA_BR * hs; i += blockDim.x) o[i] = 0.0f;
  for (int r = threadIdx.x; r < FA_BR; r += blockDim.x) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  const int last = min(q0 + FA_BR, T) - 1; /* the tile's last row */
  for (int k0 = 0; k0 <= last; k0 += FA_BC) {
    __syncthreads(); /* the previous tile's k, v, s are consumed */
    fa_load_tile(k, qb + C, k0, FA_BC, T, C3, hs);
    fa_load_tile(v, qb + 2 * C, k0, FA_BC, T, C3, hs);
    __syncthreads();
    fa_scores(s, q, k, q0, k0, T, hs, scale);
    __syncthreads();
    /* online softmax, one thread per row */
    for (int r = threadIdx.x; r < FA_BR; r += blockDim.x) {
      float mx = m[r];
      for (int c = 0; c < FA_BC; c++) mx = fmaxf(mx, s[r * FA_BC + c]);
      float sum = 0.0f;
      for (int c = 0; c < FA_BC; c++) {
        float x = s[r * FA_BC + c], p = x == -INFINITY ? 0.0f : expf(x - mx);
        s[r * FA_BC + c] = p;
        sum += p;
      }
      float cr = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
      corr[r] = cr;
      l[r] = l[r] * cr + sum;
      m[r] = mx;
    }
    __syncthreads();
    /* o = o corr + P V */
    for (int i = threadIdx.x; i < FA_BR * hs; i += blockDim.x) {
      int r = i / hs, d = i % hs;
      float acc = o[i] * corr[r];
      for (int c = 0; c < FA_BC; c++) acc += s[r * FA_BC + c] * v[c * hs + d];
      o[i] = acc;
    }
  }
  __syncthreads();
  Tin *ob = out + (size_t)b * T * C + (size_t)h * hs;
  for (int i = threadIdx.x; i < FA_BR * hs; i += blockDim.x) {
    int r = i / hs, d = i % hs;
    if (q0 + r < T) fa_st(ob + (size_t)(q0 + r) * C + d, o[i] / l[r]);
  }
  float *lb = lse + ((size_t)b * NH + h) * T;
  for (int r = threadIdx.x; r < FA_BR; r += blockDim.x)
    if (q0 + r < T) lb[q0 + r] = m[r] + logf(l[r]);
}

/* D[b,h,t] = sum over the head's channels of dout * out; one warp a row. */
template <typename Tin>
__global__ void flash_rowdot_kernel(float *D, const Tin *dout, const Tin *out, int T, int C,
                                    int NH, size_t rows)
{
  size_t row = (size_t)blockIdx.x * FA_D_ROWS + threadIdx.x / 32;
  if (row >= rows) return;
  int lane = threadIdx.x % 32, hs = C / NH, t = (int)(row % T), h = (int)(row / T % NH);
  size_t b = row / ((size_t)T * NH), off = (b * T + t) * C + (size_t)h * hs;
  float acc = 0.0f;
  for (int d = lane; d < hs; d += 32) acc += fa_ld(dout + off + d) * fa_ld(out + off + d);
  acc = warp_sum(acc);
  if (lane == 0) D[row] = acc;
}

/* P and dS of one tile pair in place: s holds the scores (masked
 * -INFINITY), dp = dO V^T on entry; s = P, dp = dS = P (dP - D) on exit. */
__device__ void fa_tile_grad(float *s, float *dp, const float *ls, const float *Dr)
{
  for (int i = threadIdx.x; i < FA_BR * FA_BC; i += blockDim.x) {
    int r = i / FA_BC;
    float p = s[i] == -INFINITY ? 0.0f : expf(s[i] - ls[r]);
    s[i] = p;
    dp[i] = p * (dp[i] - Dr[r]);
  }
}

/* dp[r][c] = dO[r] . V[c] */
__device__ void fa_dpv(float *dp, const float *dO, const float *v, int hs)
{
  for (int i = threadIdx.x; i < FA_BR * FA_BC; i += blockDim.x) {
    int r = i / FA_BC, c = i % FA_BC;
    float acc = 0.0f;
    for (int d = 0; d < hs; d++) acc += dO[r * hs + d] * v[c * hs + d];
    dp[i] = acc;
  }
}

/* Row statistics of query tile q0 into shared ls, Dr (past T: 0). */
__device__ void fa_load_rows(float *ls, float *Dr, const float *lse, const float *D, int q0, int T)
{
  for (int r = threadIdx.x; r < FA_BR; r += blockDim.x) {
    ls[r] = q0 + r < T ? lse[q0 + r] : 0.0f;
    Dr[r] = q0 + r < T ? D[q0 + r] : 0.0f;
  }
}

/* One block per (b, h, key tile): dK, dV of the tile's keys. */
template <typename Tin>
__global__ void __launch_bounds__(FA_THREADS)
    flash_backward_dkdv_kernel(float *dqkv, const float *D, const Tin *dout, const Tin *qkv,
                               const float *lse, int T, int C, int NH, float scale)
{
  extern __shared__ float fa_smem[];
  const int hs = C / NH, C3 = 3 * C, h = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * FA_BC;
  float *k = fa_smem, *v = k + FA_BC * hs, *dk = v + FA_BC * hs, *dv = dk + FA_BC * hs;
  float *q = dv + FA_BC * hs, *dO = q + FA_BR * hs, *s = dO + FA_BR * hs, *dp = s + FA_BR * FA_BC;
  float *ls = dp + FA_BR * FA_BC, *Dr = ls + FA_BR;
  const Tin *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
  const Tin *db = dout + (size_t)b * T * C + (size_t)h * hs;
  const size_t bh = ((size_t)b * NH + h) * T;
  fa_load_tile(k, qb + C, k0, FA_BC, T, C3, hs);
  fa_load_tile(v, qb + 2 * C, k0, FA_BC, T, C3, hs);
  for (int i = threadIdx.x; i < FA_BC * hs; i += blockDim.x) dk[i] = dv[i] = 0.0f;
  /* causal: query tiles from the one holding row k0 */
  for (int q0 = k0 / FA_BR * FA_BR; q0 < T; q0 += FA_BR) {
    __syncthreads();
    fa_load_tile(q, qb, q0, FA_BR, T, C3, hs);
    fa_load_tile(dO, db, q0, FA_BR, T, C, hs);
    fa_load_rows(ls, Dr, lse + bh, D + bh, q0, T);
    __syncthreads();
    fa_scores(s, q, k, q0, k0, T, hs, scale);
    fa_dpv(dp, dO, v, hs);
    __syncthreads();
    fa_tile_grad(s, dp, ls, Dr);
    __syncthreads();
    /* dV[c] += sum_r P[r][c] dO[r]; dK[c] += scale sum_r dS[r][c] Q[r] */
    for (int i = threadIdx.x; i < FA_BC * hs; i += blockDim.x) {
      int c = i / hs, d = i % hs;
      float av = 0.0f, ak = 0.0f;
      for (int r = 0; r < FA_BR; r++) {
        av += s[r * FA_BC + c] * dO[r * hs + d];
        ak += dp[r * FA_BC + c] * q[r * hs + d];
      }
      dv[i] += av;
      dk[i] += scale * ak;
    }
  }
  __syncthreads();
  float *dkb = dqkv + (size_t)b * T * C3 + C + (size_t)h * hs, *dvb = dkb + C;
  for (int i = threadIdx.x; i < FA_BC * hs; i += blockDim.x) {
    int c = i / hs, d = i % hs;
    if (k0 + c < T) {
      dkb[(size_t)(k0 + c) * C3 + d] += dk[i];
      dvb[(size_t)(k0 + c) * C3 + d] += dv[i];
    }
  }
}

/* One block per (b, h, query tile): dQ of the tile's rows. */
template <typename Tin>
__global__ void __launch_bounds__(FA_THREADS)
    flash_backward_dq_kernel(float *dqkv, const float *D, const Tin *dout, const Tin *qkv,
                             const float *lse, int T, int C, int NH, float scale)
{
  extern __shared__ float fa_smem[];
  const int hs = C / NH, C3 = 3 * C, h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * FA_BR;
  float *q = fa_smem, *dO = q + FA_BR * hs, *dq = dO + FA_BR * hs, *k = dq + FA_BR * hs;
  float *v = k + FA_BC * hs, *s = v + FA_BC * hs, *dp = s + FA_BR * FA_BC;
  float *ls = dp + FA_BR * FA_BC, *Dr = ls + FA_BR;
  const Tin *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
  const size_t bh = ((size_t)b * NH + h) * T;
  fa_load_tile(q, qb, q0, FA_BR, T, C3, hs);
  fa_load_tile(dO, dout + (size_t)b * T * C + (size_t)h * hs, q0, FA_BR, T, C, hs);
  fa_load_rows(ls, Dr, lse + bh, D + bh, q0, T);
  for (int i = threadIdx.x; i < FA_BR * hs; i += blockDim.x) dq[i] = 0.0f;
  const int last = min(q0 + FA_BR, T) - 1;
  for (int k0 = 0; k0 <= last; k0 += FA_BC) {
    __syncthreads();
    fa_load_tile(k, qb + C, k0, FA_BC, T, C3, hs);
    fa_load_tile(v, qb + 2 * C, k0, FA_BC, T, C3, hs);
    __syncthreads();
    fa_scores(s, q, k, q0, k0, T, hs, scale);
    fa_dpv(dp, dO, v, hs);
    __syncthreads();
    fa_tile_grad(s, dp, ls, Dr);
    __syncthreads();
    for (int i = threadIdx.x; i < FA_BR * hs; i += blockDim.x) {
      int r = i / hs, d = i % hs;
      float acc = 0.0f;
      for (int c = 0; c < FA_BC; c++) acc += dp[r * FA_BC + c] * k[c * hs + d];
      dq[i] += scale * acc;
    }
  }
  __syncthreads();
  float *dqb = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
  for (int i = threadIdx.x; i < FA_BR * hs; i += blockDim.x) {
    int r = i / hs, d = i % hs;
    if (q0 + r < T) dqb[(size_t)(q0 + r) * C3 + d] += dq[i];
  }
}

/* Shared memory above the 48 KiB default needs the kernel's opt-in (hs 128:
 * about 100 KiB for the dK/dV kernel; an H100/H200 SM has 227 KiB). */
template <typename K>
static int fa_smem_opt_in(K kernel, size_t bytes)
{
  if (bytes <= 48 * 1024) return 1;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)bytes);
  if (e != cudaSuccess) {
    cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__,
                      "flash attention: %zu bytes of shared memory refused: %s", bytes,
                      cudaGetErrorString(e));
    return 0;
  }
  return 1;
}

template <typename Tin>
static void flash_forward_launch(Tin *out, float *lse, const Tin *qkv, int B, int T, int C, int NH)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T > 0 && NH > 0 && C % NH == 0 && C / NH <= FA_MAX_HS);
  CUDA_KASSERT(B <= 65535 && NH <= 65535); /* grid z and y */
  if (B == 0) return;
  const int hs = C / NH;
  const size_t smem = fa_smem_forward(hs) * sizeof(float);
  if (!fa_smem_opt_in(flash_forward_kernel<Tin>, smem)) return;
  dim3 grid((unsigned)ceil_div(T, FA_BR), (unsigned)NH, (unsigned)B);
  flash_forward_kernel<Tin><<<grid, FA_THREADS, smem, cuda_state.stream>>>(
      out, lse, qkv, T, C, NH, 1.0f / sqrtf((float)hs));
  CUDA_CHECK_LAUNCH();
}

template <typename Tin>
static void flash_backward_launch(float *dqkv, float *scratch, const Tin *dout, const Tin *qkv,
                                  const Tin *out, const float *lse, int B, int T, int C, int NH)
{
  CUDA_LAUNCHER_BEGIN();
  CUDA_KASSERT(B >= 0 && T > 0 && NH > 0 && C % NH == 0 && C / NH <= FA_MAX_HS);
  CUDA_KASSERT(B <= 65535 && NH <= 65535); /* grid z and y */
  if (B == 0) return;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  size_t rows = (size_t)B * NH * T;
  flash_rowdot_kernel<Tin><<<(unsigned)((rows + FA_D_ROWS - 1) / FA_D_ROWS), 32 * FA_D_ROWS, 0,
                             cuda_state.stream>>>(scratch, dout, out, T, C, NH, rows);
  CUDA_CHECK_LAUNCH();
  const size_t smem_kv = fa_smem_dkdv(hs) * sizeof(float), smem_q = fa_smem_dq(hs) * sizeof(float);
  if (!fa_smem_opt_in(flash_backward_dkdv_kernel<Tin>, smem_kv)) return;
  if (!fa_smem_opt_in(flash_backward_dq_kernel<Tin>, smem_q)) return;
  dim3 gkv((unsigned)ceil_div(T, FA_BC), (unsigned)NH, (unsigned)B);
  flash_backward_dkdv_kernel<Tin><<<gkv, FA_THREADS, smem_kv, cuda_state.stream>>>(
      dqkv, scratch, dout, qkv, lse, T, C, NH, scale);
  CUDA_CHECK_LAUNCH();
  dim3 gq((unsigned)ceil_div(T, FA_BR), (unsigned)NH, (unsigned)B);
  flash_backward_dq_kernel<Tin><<<gq, FA_THREADS, smem_q, cuda_state.stream>>>(
      dqkv, scratch, dout, qkv, lse, T, C, NH, scale);
  CUDA_CHECK_LAUNCH();
}

extern "C" void flash_attention_forward_cuda(float *out, float *lse, const float *qkv, int B,
                                             int T, int C, int NH)
{
  flash_forward_launch<float>(out, lse, qkv, B, T, C, NH);
}

extern "C" void flash_attention_backward_cuda(float *dqkv, float *scratch, const float *dout,
                                              const float *qkv, const float *out,
                                              const float *lse, int B, int T, int C, int NH)
{
  flash_backward_launch<float>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
}

extern "C" void flash_attention_forward_bf16_cuda(uint16_t *out, float *lse, const uint16_t *qkv,
                                                  int B, int T, int C, int NH)
{
  flash_forward_launch<uint16_t>(out, lse, qkv, B, T, C, NH);
}

extern "C" void flash_attention_backward_bf16_cuda(float *dqkv, float *scratch,
                                                   const uint16_t *dout, const uint16_t *qkv,
                                                   const uint16_t *out, const float *lse, int B,
                                                   int T, int C, int NH)
{
  flash_backward_launch<uint16_t>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
}
