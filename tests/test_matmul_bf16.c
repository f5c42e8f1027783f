/* test_matmul_bf16.c: the bf16 matmuls of the CPU kernel table
 * ([Note: bf16 matmuls] in kernels/kernels.h) on one GEMM path, chosen by
 * argv[1] (auto, onednn or convert: FSDP_GEMM_BF16, [Note: two bf16 GEMM
 * paths] in kernels/cpu/matmul_bf16.c).
 *
 * Forward (with and without bias) and backward (dinp, dweight, dbias, each
 * alone and together, added onto nonzero gradients) against double
 * references over several shapes, two ways:
 *   - tight, against the product of the bf16-ROUNDED operands: bf16 inputs
 *     with fp32 accumulation differ from it only by fp32 summation,
 *     |got - ref| <= 1e-5 (1e-6 + S) where S = sum_k |a_k b_k|; an operand
 *     left unrounded (or rounded the wrong way) is off by ~2^-9 S;
 *   - loose, against the product of the UNROUNDED fp32 operands: each
 *     product a_k b_k changes by at most 2^-8 |a_k b_k| when both are
 *     rounded, so |got - ref| <= 2^-8 S + 1e-5 (1e-6 + S); and the rounding
 *     must be visible (the largest error is above 1e-4 of the largest S);
 *   - dbias is the fp32 column sum of the unrounded dout (1e-5 relative).
 * And the library/kernel report: "OpenBLAS" for convert, "oneDNN ..." for
 * onednn when the build has oneDNN.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "base/dtype.h"
#include "kernels/kernels.h"
#include "testutil.h"

static const FsdpKernelOps *K;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double urand(void)
{
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static float *frand(size_t n)
{
  float *x = malloc((n ? n : 1) * sizeof *x);
  if (!x) MPI_Abort(MPI_COMM_WORLD, 1);
  for (size_t i = 0; i < n; i++) x[i] = (float)(2.0 * urand() - 1.0);
  return x;
}

static float *fcopy(const float *x, size_t n)
{
  float *y = malloc((n ? n : 1) * sizeof *y);
  if (!y) MPI_Abort(MPI_COMM_WORLD, 1);
  memcpy(y, x, n * sizeof *y);
  return y;
}

static double r16(float x, int round) { return round ? FsdpBf16ToFloat(FsdpFloatToBf16(x)) : x; }

/* C (M,N) = sum_k A(m,k) B(k,n), A and B given by element functions'
 * strides; S (M,N) = sum_k |A B|. */
static void ref_mm(double *Cr, double *S, int M, int N, int Kd, const float *A, size_t as0,
                   size_t as1, const float *B, size_t bs0, size_t bs1, int round)
{
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double c = 0.0, s = 0.0;
      for (int k = 0; k < Kd; k++) {
        double p = r16(A[m * as0 + k * as1], round) * r16(B[k * bs0 + n * bs1], round);
        c += p;
        s += fabs(p);
      }
      Cr[(size_t)m * N + n] = c;
      S[(size_t)m * N + n] = s;
    }
}

/* got - base against ref (tight: rounded operands; loose: unrounded). */
static void compare(const char *what, const float *got, const float *base, const double *tight,
                    const double *loose, const double *S, size_t n)
{
  int bad_t = 0, bad_l = 0;
  double maxdiff = 0.0, maxS = 0.0;
  for (size_t i = 0; i < n; i++) {
    double g = (double)got[i] - (base ? (double)base[i] : 0.0);
    double tol = 1e-5 * (1e-6 + S[i]);
    if (fabs(g - tight[i]) > tol + 1e-6 * fabs(base ? base[i] : 0.0f)) {
      if (!bad_t)
        fprintf(stderr, "%s[%zu]: %.9g, rounded-operand reference %.9g (tol %.3g)\n", what, i, g,
                tight[i], tol);
      bad_t++;
    }
    if (fabs(g - loose[i]) > ldexp(S[i], -8) + tol + 1e-6 * fabs(base ? base[i] : 0.0f)) bad_l++;
    if (fabs(g - loose[i]) > maxdiff) maxdiff = fabs(g - loose[i]);
    if (S[i] > maxS) maxS = S[i];
  }
  CHECK(bad_t == 0, "%s: %d of %zu elements off the bf16-rounded-operand reference", what, bad_t, n);
  CHECK(bad_l == 0, "%s: %d of %zu elements beyond 2^-8 S of the fp32 reference", what, bad_l, n);
  CHECK(maxdiff > 1e-4 * maxS, "%s: no bf16 rounding visible (max diff %.3g, max S %.3g)", what,
        maxdiff, maxS);
}

static void test_shape(int N, int C, int OC)
{
  char what[96];
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *inp = frand(ni), *w = frand(nw), *bias = frand((size_t)OC), *dout = frand(no);
  double *t = malloc(sizeof(double) * (no > nw ? (no > ni ? no : ni) : (nw > ni ? nw : ni)));
  double *l = malloc(sizeof(double) * (no > nw ? (no > ni ? no : ni) : (nw > ni ? nw : ni)));
  double *S = malloc(sizeof(double) * (no > nw ? (no > ni ? no : ni) : (nw > ni ? nw : ni)));
  float *out = frand(no);

  /* forward, no bias: out (N,OC) = inp (N,C) @ w^T; w^T (k=c, n=oc) at oc*C + c */
  ref_mm(t, S, N, OC, C, inp, C, 1, w, 1, C, 1);
  ref_mm(l, S, N, OC, C, inp, C, 1, w, 1, C, 0);
  K->matmul_forward_bf16(out, inp, w, NULL, N, C, OC);
  snprintf(what, sizeof what, "forward %dx%dx%d", N, C, OC);
  compare(what, out, NULL, t, l, S, no);
  /* with bias: out - bias is the same product */
  float *out_b = frand(no);
  K->matmul_forward_bf16(out_b, inp, w, bias, N, C, OC);
  float *bias_rows = malloc(no * sizeof(float));
  for (int n = 0; n < N; n++) memcpy(bias_rows + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
  snprintf(what, sizeof what, "forward+bias %dx%dx%d", N, C, OC);
  compare(what, out_b, bias_rows, t, l, S, no);

  /* backward, all three at once, onto nonzero gradients */
  float *dinp0 = frand(ni), *dw0 = frand(nw), *db0 = frand((size_t)OC);
  float *dinp = fcopy(dinp0, ni), *dw = fcopy(dw0, nw), *db = fcopy(db0, (size_t)OC);
  K->matmul_backward_bf16(dinp, dw, db, dout, inp, w, N, C, OC);
  /* dinp (N,C) = dout (N,OC) @ w (OC,C) */
  ref_mm(t, S, N, C, OC, dout, OC, 1, w, C, 1, 1);
  ref_mm(l, S, N, C, OC, dout, OC, 1, w, C, 1, 0);
  snprintf(what, sizeof what, "dinp %dx%dx%d", N, C, OC);
  compare(what, dinp, dinp0, t, l, S, ni);
  /* dweight (OC,C) = dout^T (OC,N) @ inp (N,C) */
  ref_mm(t, S, OC, C, N, dout, 1, OC, inp, C, 1, 1);
  ref_mm(l, S, OC, C, N, dout, 1, OC, inp, C, 1, 0);
  snprintf(what, sizeof what, "dweight %dx%dx%d", N, C, OC);
  compare(what, dw, dw0, t, l, S, nw);
  /* dbias: fp32 column sums of the unrounded dout */
  int bad = 0;
  for (int oc = 0; oc < OC; oc++) {
    double s = 0.0, a = 0.0;
    for (int n = 0; n < N; n++) {
      s += dout[(size_t)n * OC + oc];
      a += fabs(dout[(size_t)n * OC + oc]);
    }
    if (fabs((double)db[oc] - db0[oc] - s) > 1e-5 * (1.0 + a)) bad++;
  }
  CHECK(bad == 0, "dbias %dx%dx%d: %d of %d off the unrounded column sums", N, C, OC, bad, OC);

  /* each gradient alone (NULL for the others) gives the same values */
  float *dinp2 = fcopy(dinp0, ni), *dw2 = fcopy(dw0, nw), *db2 = fcopy(db0, (size_t)OC);
  K->matmul_backward_bf16(dinp2, NULL, NULL, dout, inp, w, N, C, OC);
  K->matmul_backward_bf16(NULL, dw2, NULL, dout, inp, w, N, C, OC);
  K->matmul_backward_bf16(NULL, NULL, db2, dout, inp, w, N, C, OC);
  double md = 0.0, mw = 0.0, mb = 0.0;
  for (size_t i = 0; i < ni; i++) md = fmax(md, fabs((double)dinp2[i] - dinp[i]));
  for (size_t i = 0; i < nw; i++) mw = fmax(mw, fabs((double)dw2[i] - dw[i]));
  for (int i = 0; i < OC; i++) mb = fmax(mb, fabs((double)db2[i] - db[i]));
  CHECK(md < 1e-5 && mw < 1e-5 && mb < 1e-5,
        "%dx%dx%d: one gradient at a time differs from all at once (%.3g %.3g %.3g)", N, C, OC,
        md, mw, mb);

  free(inp); free(w); free(bias); free(dout); free(t); free(l); free(S); free(out); free(out_b);
  free(bias_rows); free(dinp0); free(dw0); free(db0); free(dinp); free(dw); free(db);
  free(dinp2); free(dw2); free(db2);
}

/* The AVX-512 subset oneDNN 2.x needs for bf16 matmuls. */
static int cpu_has_avx512_core(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return 1;
#endif
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  const char *mode = argc > 1 ? argv[1] : "auto";
  setenv("FSDP_GEMM_BF16", mode, 1); /* read on the first bf16 call */
  K = FsdpKernelsCpu();
  CHECK(K->matmul_forward_bf16 && K->matmul_backward_bf16, "the CPU table lacks bf16 matmuls");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0 && K->matmul_forward_bf16) {
    test_shape(3, 5, 7);
    test_shape(37, 50, 70);
    test_shape(64, 128, 96);
    test_shape(200, 48, 300); /* long N: dweight sums 200 terms */
    char lib[64], ker[160];
    FsdpKernelsCpuGemm(1, lib, sizeof lib, ker, sizeof ker);
    printf("bf16 GEMM (%s): %s, %s\n", mode, lib, ker);
    if (strcmp(mode, "convert") == 0)
      CHECK(strcmp(lib, "OpenBLAS") == 0 && strstr(ker, "bf16-rounded"), "convert reports %s %s",
            lib, ker);
#ifdef HAVE_ONEDNN
    /* oneDNN 2.x computes bf16 matmuls only on AVX-512 (avx512_core: F,
     * BW, VL, DQ); on an AVX2 CPU (AMD Zen 3, Intel before Skylake-SP)
     * its primitive fails to create and the kernels fall back to sgemm
     * on bf16-rounded inputs, saying so.  Either way the name must be
     * the kernel that ran. */
    if (strcmp(mode, "onednn") == 0 && cpu_has_avx512_core())
      CHECK(strncmp(lib, "oneDNN ", 7) == 0, "onednn reports %s %s", lib, ker);
    else if (strcmp(mode, "onednn") == 0)
      CHECK(strcmp(lib, "OpenBLAS") == 0 && strstr(ker, "bf16-rounded"),
            "onednn on a CPU without AVX-512 reports %s %s, not the fallback", lib, ker);
#endif
    FsdpKernelsCpuGemm(0, lib, sizeof lib, ker, sizeof ker);
    CHECK(strcmp(lib, "OpenBLAS") == 0, "fp32 GEMM reports %s", lib);
  }
  int rc = test_finish("test_matmul_bf16");
  MPI_Finalize();
  return rc;
}
