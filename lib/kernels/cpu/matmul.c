/* matmul.c: linear layer through CBLAS (CPU).  Weights are [out, in]
 * (kernels.h), so every product is a cblas_sgemm on row-major data. */
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

/* [Note: one thread pool] OpenMP threads the kernels, and a pthreads
 * OpenBLAS would thread sgemm with a pool of its own: both pools spin
 * between calls, and on a rank with as many cores as threads they steal
 * the cores from each other (a GPT-2 block at B=4, T=64 on 2 cores took
 * 87-140 ms instead of 52 ms).  So OpenMP is the only pool: FsdpKernelsCpu()
 * sets OpenBLAS to one thread (ops.c), and each sgemm below is split into
 * slabs of C, one single-threaded sgemm per OpenMP thread.  The slab runs
 * along the longer of C's two dimensions (rows of dweight for a wide
 * vocabulary, columns of out otherwise), so each thread packs its own part
 * of the bigger operand.  OMP_NUM_THREADS alone sets a rank's threads.
 * The K-sums inside each element do not depend on the slabs, but the
 * kernels BLAS picks at slab edges may; that is the reassociation inside
 * BLAS that [Note: deterministic CPU kernels] allows. */
#define SGEMM_SLAB_MIN 128 /* below this many rows/columns: one call */
#define SGEMM_SLAB_ALIGN 16

/* Row-major C (M,Nc) = op(A) (M,Kd) @ op(B) (Kd,Nc) + beta C. */
static void sgemm_slabs(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int Nc,
                        int Kd, const float *A, int lda, const float *Bm,
                        int ldb, float beta, float *Cm, int ldc)
{
  int nt = 1;
#ifdef _OPENMP
  if (!omp_in_parallel()) nt = omp_get_max_threads();
#endif
  int along_m = M > Nc, len = along_m ? M : Nc;
  if (nt <= 1 || len < SGEMM_SLAB_MIN) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, Nc, Kd, 1.0f, A, lda, Bm, ldb,
                beta, Cm, ldc);
    return;
  }
  int per = ((len + nt - 1) / nt + SGEMM_SLAB_ALIGN - 1) / SGEMM_SLAB_ALIGN *
            SGEMM_SLAB_ALIGN;
  #pragma omp parallel for schedule(static)
  for (int k = 0; k < nt; k++) {
    int i0 = k * per, i1 = i0 + per < len ? i0 + per : len;
    if (i0 >= i1) continue;
    if (along_m) { /* rows i0..i1 of C: rows of op(A) */
      const float *Ak = ta == CblasNoTrans ? A + (size_t)i0 * lda : A + i0;
      cblas_sgemm(CblasRowMajor, ta, tb, i1 - i0, Nc, Kd, 1.0f, Ak, lda, Bm,
                  ldb, beta, Cm + (size_t)i0 * ldc, ldc);
    } else { /* columns i0..i1 of C: columns of op(B) */
      const float *Bk = tb == CblasNoTrans ? Bm + i0 : Bm + (size_t)i0 * ldb;
      cblas_sgemm(CblasRowMajor, ta, tb, M, i1 - i0, Kd, 1.0f, A, lda, Bk,
                  ldb, beta, Cm + i0, ldc);
    }
  }
}

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC).  With a bias the
 * rows of out start as the bias and sgemm adds onto them (beta = 1), so
 * the bias costs one write pass and no extra read of out. */
void matmul_forward_cpu(float *out, const float *inp, const float *weight,
                        const float *bias, int N, int C, int OC)
{
  float beta = 0.0f;
  if (bias) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      float *restrict o = out + (size_t)n * OC;
      const float *restrict b = bias;
      #pragma omp simd
      for (int oc = 0; oc < OC; oc++) o[oc] = b[oc];
    }
    beta = 1.0f;
  }
  sgemm_slabs(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, beta, out,
            OC);
}

/* dinp (N,C) += dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T @ inp;
 * dbias (OC) += column sums of dout.  dinp, dweight or dbias may be NULL
 * (that gradient is skipped). */
void matmul_backward_cpu(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp,
                         const float *weight, int N, int C, int OC)
{
  if (dinp)
    sgemm_slabs(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, 1.0f,
              dinp, C);
  if (dweight)
    sgemm_slabs(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f,
              dweight, C);
  if (dbias) {
    /* Column blocks, rows in order inside [Note: deterministic CPU
     * kernels]. */
    int nblk = (OC + FSDP_CPU_COLBLOCK - 1) / FSDP_CPU_COLBLOCK;
    #pragma omp parallel for schedule(static)
    for (int k = 0; k < nblk; k++) {
      int o0 = k * FSDP_CPU_COLBLOCK;
      int o1 = o0 + FSDP_CPU_COLBLOCK < OC ? o0 + FSDP_CPU_COLBLOCK : OC;
      float *restrict db = dbias;
      for (int n = 0; n < N; n++) {
        const float *restrict d = dout + (size_t)n * OC;
        #pragma omp simd
        for (int oc = o0; oc < o1; oc++) db[oc] += d[oc];
      }
    }
  }
}
