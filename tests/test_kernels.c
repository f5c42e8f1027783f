/* test_kernels.c: the CPU kernels (kernels/cpu) against references.
 *
 * - forward: every kernel against a straightforward double-precision
 *   implementation written here, |got - ref| <= 1e-5 (1 + |ref|) unless
 *   stated;
 * - backward: every gradient against central differences of the scalar
 *   objective L = sum(out * R) (R fixed random, L accumulated in double,
 *   inputs fp32, step h = 1e-3).  An element passes when
 *   |analytic - numeric| <= 1e-2 |numeric| + 1e-3 max|numeric| and the
 *   whole tensor when ||analytic - numeric|| <= 5e-3 ||numeric||;
 * - [Note: backward accumulates]: a second backward call doubles the
 *   gradient; attention's datt/dpreatt are scratch (garbage in them does
 *   not change dqkv);
 * - attention is causal: changing position t0 leaves out[t < t0]
 *   bit-identical; crossentropy's loss is the log-sum-exp one (finite when
 *   the target's probability underflows); AdamW against a scalar double
 *   reference over several steps; sum_squares in double;
 * - [Note: deterministic CPU kernels]: 1 and 3 OpenMP threads give
 *   bit-identical results for every kernel outside BLAS.
 * Runs on one rank; other ranks (if any) only take part in test_finish.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/kernels_cpu.h" /* expf_fast_cpu */
#include "kernels/kernels.h"
#include "testutil.h"

static const FsdpKernelOps *K;

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static double urand(void) /* [0, 1), splitmix64 */
{
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static float *fvec(size_t n)
{
  float *x = calloc(n ? n : 1, sizeof *x);
  if (!x) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return x;
}

static double *dvec(size_t n)
{
  double *x = calloc(n ? n : 1, sizeof *x);
  if (!x) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return x;
}

static float *frand(size_t n, double lo, double hi)
{
  float *x = fvec(n);
  for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
  return x;
}

static float *fcopy(const float *x, size_t n)
{
  float *y = fvec(n);
  memcpy(y, x, n * sizeof *x);
  return y;
}

static double dot_fd(const float *a, const float *r, size_t n)
{
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * r[i];
  return s;
}

static void set_threads(int n)
{
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

/* got (float) against ref (double): |got - ref| <= atol + rtol |ref|.
 * Prints the first wrong elements and the max difference. */
static int compare_ref(const char *what, const float *got, const double *ref,
                       size_t n, double rtol, double atol)
{
  size_t nbad = 0, imax = 0;
  double maxd = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (d > maxd || d != d) {
      maxd = d;
      imax = i;
    }
    if (!(d <= atol + rtol * fabs(ref[i]))) {
      if (nbad < 5)
        fprintf(stderr, "  %s[%zu] = %.9g, expected %.9g (diff %.3g)\n", what,
                i, got[i], ref[i], d);
      nbad++;
    }
  }
  CHECK(nbad == 0, "%s: %zu of %zu elements wrong, max diff %.3g at [%zu]",
        what, nbad, n, maxd, imax);
  return nbad == 0;
}

static int compare_f(const char *what, const float *got, const float *ref,
                     size_t n, double rtol, double atol)
{
  double *r = dvec(n);
  for (size_t i = 0; i < n; i++) r[i] = ref[i];
  int ok = compare_ref(what, got, r, n, rtol, atol);
  free(r);
  return ok;
}

/* Bit-identical (determinism across thread counts). */
static int compare_bits(const char *what, const float *a, const float *b,
                        size_t n)
{
  size_t nbad = 0, first = 0;
  double maxd = 0.0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (!nbad) first = i;
      nbad++;
      double d = fabs((double)a[i] - b[i]);
      if (d > maxd) maxd = d;
    }
  CHECK(nbad == 0,
        "%s: %zu of %zu elements differ between 1 and 3 threads, first [%zu] "
        "%.9g vs %.9g, max diff %.3g",
        what, nbad, n, first, nbad ? a[first] : 0.0f, nbad ? b[first] : 0.0f,
        maxd);
  return nbad == 0;
}

/* ---- finite differences --------------------------------------------------- */

typedef double (*objective_fn)(void *ctx);

#define FD_H 1e-3f
#define FD_RTOL 1e-2
#define FD_ATOL_FRAC 1e-3
#define FD_NORM_RTOL 5e-3

/* Central differences of obj with respect to x[0..n), using the steps that
 * fp32 can actually represent. */
static void fd_grad(double *num, float *x, size_t n, objective_fn obj,
                    void *ctx)
{
  for (size_t i = 0; i < n; i++) {
    float x0 = x[i], xp = x0 + FD_H, xm = x0 - FD_H;
    x[i] = xp;
    double lp = obj(ctx);
    x[i] = xm;
    double lm = obj(ctx);
    x[i] = x0;
    num[i] = (lp - lm) / ((double)xp - (double)xm);
  }
}

static int check_grad(const char *what, const float *analytic, float *x,
                      size_t n, objective_fn obj, void *ctx)
{
  double *num = dvec(n);
  fd_grad(num, x, n, obj, ctx);
  double maxnum = 0.0, dn2 = 0.0, n2 = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(num[i]) > maxnum) maxnum = fabs(num[i]);
    double d = analytic[i] - num[i];
    dn2 += d * d;
    n2 += num[i] * num[i];
  }
  int ok = compare_ref(what, analytic, num, n, FD_RTOL, FD_ATOL_FRAC * maxnum);
  CHECK(sqrt(dn2) <= FD_NORM_RTOL * sqrt(n2) && n2 > 0.0,
        "%s: ||analytic - numeric|| = %.3g > %.1g ||numeric|| = %.3g", what,
        sqrt(dn2), FD_NORM_RTOL, sqrt(n2));
  free(num);
  return ok;
}

/* Backward called twice from zero must give twice the first result. */
static void check_doubles(const char *what, const float *once,
                          const float *twice, size_t n)
{
  float *two = fvec(n);
  for (size_t i = 0; i < n; i++) two[i] = 2.0f * once[i];
  char buf[128];
  snprintf(buf, sizeof buf, "%s (2nd backward call accumulates)", what);
  compare_f(buf, twice, two, n, 1e-6, 1e-7);
  free(two);
}

/* ---- expf_fast_cpu -------------------------------------------------------- */

static void test_expf_fast(void)
{
  size_t nbad = 0;
  double maxrel = 0.0, xmax = 0.0;
  for (double x = -87.0; x <= 88.0; x += 0.00731) {
    float xf = (float)x;
    double ref = exp((double)xf), got = expf_fast_cpu(xf);
    double rel = fabs(got - ref) / ref;
    if (rel > maxrel) {
      maxrel = rel;
      xmax = xf;
    }
    if (!(rel <= 4.0 * 1.1920929e-7)) nbad++;
  }
  CHECK(nbad == 0, "expf_fast_cpu: %zu points beyond 4 ulp, max rel err %.3g "
        "at x = %.6g", nbad, maxrel, xmax);
  CHECK(expf_fast_cpu(0.0f) == 1.0f, "expf_fast_cpu(0) = %.9g",
        expf_fast_cpu(0.0f));
  float lo = expf_fast_cpu(-1000.0f), hi = expf_fast_cpu(1000.0f);
  CHECK(lo >= 0.0f && lo < 2e-38f, "expf_fast_cpu(-1000) = %g", lo);
  CHECK(isfinite(hi) && hi > 1e38f, "expf_fast_cpu(1000) = %g", hi);
  CHECK(isnan(expf_fast_cpu(NAN)), "expf_fast_cpu(NaN) = %g",
        expf_fast_cpu(NAN));
}

/* ---- encoder -------------------------------------------------------------- */

typedef struct {
  int B, T, C, V;
  int *inp;
  float *wte, *wpe, *out, *R;
} EncCtx;

static double enc_obj(void *p)
{
  EncCtx *c = p;
  K->encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
  return dot_fd(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_encoder(void)
{
  EncCtx c = {.B = 2, .T = 5, .C = 8, .V = 11};
  size_t BT = (size_t)c.B * c.T, n = BT * c.C;
  c.inp = malloc(BT * sizeof(int));
  for (size_t i = 0; i < BT; i++) c.inp[i] = (int)(urand() * c.V);
  c.inp[3] = c.inp[0]; /* a token seen three times: its dwte row sums */
  c.inp[7] = c.inp[0];
  c.wte = frand((size_t)c.V * c.C, -1, 1);
  c.wpe = frand((size_t)c.T * c.C, -1, 1);
  c.out = fvec(n);
  c.R = frand(n, -1, 1);

  enc_obj(&c);
  double *ref = dvec(n);
  for (size_t bt = 0; bt < BT; bt++)
    for (int i = 0; i < c.C; i++)
      ref[bt * c.C + i] = (double)c.wte[(size_t)c.inp[bt] * c.C + i] +
                          c.wpe[(bt % c.T) * c.C + i];
  compare_ref("encoder out", c.out, ref, n, 1e-6, 1e-7);

  float *dwte = fvec((size_t)c.V * c.C), *dwpe = fvec((size_t)c.T * c.C);
  K->encoder_backward(dwte, dwpe, c.R, c.inp, c.B, c.T, c.C);
  float *dwte1 = fcopy(dwte, (size_t)c.V * c.C);
  float *dwpe1 = fcopy(dwpe, (size_t)c.T * c.C);
  check_grad("encoder dwte", dwte1, c.wte, (size_t)c.V * c.C, enc_obj, &c);
  check_grad("encoder dwpe", dwpe1, c.wpe, (size_t)c.T * c.C, enc_obj, &c);
  K->encoder_backward(dwte, dwpe, c.R, c.inp, c.B, c.T, c.C);
  check_doubles("encoder dwte", dwte1, dwte, (size_t)c.V * c.C);
  check_doubles("encoder dwpe", dwpe1, dwpe, (size_t)c.T * c.C);

  free(c.inp); free(c.wte); free(c.wpe); free(c.out); free(c.R); free(ref);
  free(dwte); free(dwpe); free(dwte1); free(dwpe1);
}

/* ---- layernorm ------------------------------------------------------------ */

typedef struct {
  int N, C;
  float *inp, *w, *b, *out, *mean, *rstd, *R;
} LnCtx;

static double ln_obj(void *p)
{
  LnCtx *c = p;
  K->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N,
                       c->C);
  return dot_fd(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(void)
{
  LnCtx c = {.N = 10, .C = 8};
  size_t n = (size_t)c.N * c.C;
  c.inp = frand(n, -1, 1);
  for (int r = 0; r < c.N; r++) /* a row mean far from 0 */
    for (int i = 0; i < c.C; i++) c.inp[(size_t)r * c.C + i] += 0.5f * r - 2;
  for (int i = 0; i < c.C; i++) /* variance ~ eps: a wrong eps shows */
    c.inp[i] = 0.3f + 0.004f * (c.inp[i] + 2);
  c.w = frand(c.C, 0.5, 1.5);
  c.b = frand(c.C, -0.5, 0.5);
  c.out = fvec(n);
  c.mean = fvec(c.N);
  c.rstd = fvec(c.N);
  c.R = frand(n, -1, 1);

  ln_obj(&c);
  double *ref = dvec(n), *rm = dvec(c.N), *rr = dvec(c.N);
  for (int r = 0; r < c.N; r++) {
    const float *x = c.inp + (size_t)r * c.C;
    double m = 0, v = 0;
    for (int i = 0; i < c.C; i++) m += x[i];
    m /= c.C;
    for (int i = 0; i < c.C; i++) v += (x[i] - m) * (x[i] - m);
    v /= c.C;
    double rs = 1.0 / sqrt(v + 1e-5);
    rm[r] = m;
    rr[r] = rs;
    for (int i = 0; i < c.C; i++)
      ref[(size_t)r * c.C + i] = (x[i] - m) * rs * c.w[i] + c.b[i];
  }
  compare_ref("layernorm out", c.out, ref, n, 1e-5, 1e-5);
  compare_ref("layernorm mean", c.mean, rm, c.N, 1e-5, 1e-6);
  compare_ref("layernorm rstd", c.rstd, rr, c.N, 1e-5, 1e-6);

  float *dinp = fvec(n), *dw = fvec(c.C), *db = fvec(c.C);
  K->layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N,
                        c.C);
  float *dinp1 = fcopy(dinp, n), *dw1 = fcopy(dw, c.C), *db1 = fcopy(db, c.C);
  check_grad("layernorm dinp", dinp1, c.inp, n, ln_obj, &c);
  check_grad("layernorm dweight", dw1, c.w, c.C, ln_obj, &c);
  check_grad("layernorm dbias", db1, c.b, c.C, ln_obj, &c);
  ln_obj(&c); /* mean/rstd of the unperturbed input */
  K->layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N,
                        c.C);
  check_doubles("layernorm dinp", dinp1, dinp, n);
  check_doubles("layernorm dweight", dw1, dw, c.C);
  check_doubles("layernorm dbias", db1, db, c.C);

  free(c.inp); free(c.w); free(c.b); free(c.out); free(c.mean); free(c.rstd);
  free(c.R); free(ref); free(rm); free(rr); free(dinp); free(dw); free(db);
  free(dinp1); free(dw1); free(db1);
}

/* ---- matmul --------------------------------------------------------------- */

typedef struct {
  int N, C, OC;
  float *inp, *w, *b, *out, *R;
} MmCtx;

static double mm_obj(void *p)
{
  MmCtx *c = p;
  K->matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
  return dot_fd(c->out, c->R, (size_t)c->N * c->OC);
}

static void matmul_ref(double *ref, const float *inp, const float *w,
                       const float *b, int N, int C, int OC)
{
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = b ? b[o] : 0.0;
      for (int i = 0; i < C; i++)
        s += (double)inp[(size_t)n * C + i] * w[(size_t)o * C + i];
      ref[(size_t)n * OC + o] = s;
    }
}

static void test_matmul_forward_shape(int N, int C, int OC, int bias)
{
  float *inp = frand((size_t)N * C, -1, 1), *w = frand((size_t)OC * C, -1, 1);
  float *b = bias ? frand(OC, -1, 1) : NULL;
  float *out = frand((size_t)N * OC, -9, 9); /* garbage: must be overwritten */
  double *ref = dvec((size_t)N * OC);
  K->matmul_forward(out, inp, w, b, N, C, OC);
  matmul_ref(ref, inp, w, b, N, C, OC);
  char buf[96];
  snprintf(buf, sizeof buf, "matmul out N=%d C=%d OC=%d bias=%d", N, C, OC,
           bias);
  compare_ref(buf, out, ref, (size_t)N * OC, 1e-5, 1e-5 * sqrt((double)C));
  free(inp); free(w); free(b); free(out); free(ref);
}

static void test_matmul(void)
{
  MmCtx c = {.N = 10, .C = 8, .OC = 12};
  size_t ni = (size_t)c.N * c.C, nw = (size_t)c.OC * c.C,
         no = (size_t)c.N * c.OC;
  c.inp = frand(ni, -1, 1);
  c.w = frand(nw, -1, 1);
  c.b = frand(c.OC, -1, 1);
  c.out = fvec(no);
  c.R = frand(no, -1, 1);

  test_matmul_forward_shape(c.N, c.C, c.OC, 1);
  test_matmul_forward_shape(c.N, c.C, c.OC, 0);
  test_matmul_forward_shape(67, 130, 45, 1); /* past BLAS's small blocks */

  float *dinp = fvec(ni), *dw = fvec(nw), *db = fvec(c.OC);
  mm_obj(&c);
  K->matmul_backward(dinp, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
  float *dinp1 = fcopy(dinp, ni), *dw1 = fcopy(dw, nw),
        *db1 = fcopy(db, c.OC);
  check_grad("matmul dinp", dinp1, c.inp, ni, mm_obj, &c);
  check_grad("matmul dweight", dw1, c.w, nw, mm_obj, &c);
  check_grad("matmul dbias", db1, c.b, c.OC, mm_obj, &c);
  K->matmul_backward(dinp, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
  check_doubles("matmul dinp", dinp1, dinp, ni);
  check_doubles("matmul dweight", dw1, dw, nw);
  check_doubles("matmul dbias", db1, db, c.OC);

  /* NULL dinp and dbias: dweight alone, the same values. */
  float *dw2 = fvec(nw);
  K->matmul_backward(NULL, dw2, NULL, c.R, c.inp, c.w, c.N, c.C, c.OC);
  compare_f("matmul dweight (dinp, dbias NULL)", dw2, dw1, nw, 1e-6, 1e-7);

  free(c.inp); free(c.w); free(c.b); free(c.out); free(c.R);
  free(dinp); free(dw); free(db); free(dinp1); free(dw1); free(db1);
  free(dw2);
}

/* With 3 threads sgemm runs in slabs, one per thread, along the longer
 * dimension of each product ([Note: one thread pool]): forward and both
 * backward products against double references, slabs along rows and
 * columns, slab edges not on the alignment. */
static void test_matmul_slabs(void)
{
  const int N = 37, C = 161, OC = 301;
  float *inp = frand((size_t)N * C, -1, 1), *w = frand((size_t)OC * C, -1, 1);
  float *b = frand(OC, -1, 1), *dout = frand((size_t)N * OC, -1, 1);
  float *out = fvec((size_t)N * OC), *dinp = frand((size_t)N * C, -1, 1);
  float *dw = frand((size_t)OC * C, -1, 1);
  double *ref = dvec((size_t)N * OC), *rdi = dvec((size_t)N * C),
         *rdw = dvec((size_t)OC * C);
  for (int n = 0; n < N; n++) /* dinp += dout @ w, from its random start */
    for (int i = 0; i < C; i++) {
      double s = dinp[(size_t)n * C + i];
      for (int o = 0; o < OC; o++)
        s += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + i];
      rdi[(size_t)n * C + i] = s;
    }
  for (int o = 0; o < OC; o++) /* dw += dout^T @ inp */
    for (int i = 0; i < C; i++) {
      double s = dw[(size_t)o * C + i];
      for (int n = 0; n < N; n++)
        s += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + i];
      rdw[(size_t)o * C + i] = s;
    }
  matmul_ref(ref, inp, w, b, N, C, OC);
  set_threads(3);
  K->matmul_forward(out, inp, w, b, N, C, OC);
  K->matmul_backward(dinp, dw, NULL, dout, inp, w, N, C, OC);
  set_threads(1);
  compare_ref("matmul out (3 threads, slabs)", out, ref, (size_t)N * OC, 1e-5,
              1e-4);
  compare_ref("matmul dinp (3 threads, slabs)", dinp, rdi, (size_t)N * C,
              1e-5, 1e-4);
  compare_ref("matmul dweight (3 threads, slabs)", dw, rdw, (size_t)OC * C,
              1e-5, 1e-4);
  free(inp); free(w); free(b); free(dout); free(out); free(dinp); free(dw);
  free(ref); free(rdi); free(rdw);
}

/* ---- attention ------------------------------------------------------------ */

typedef struct {
  int B, T, C, NH;
  float *qkv, *out, *preatt, *att, *R;
} AttCtx;

static double att_obj(void *p)
{
  AttCtx *c = p;
  K->attention_forward(c->out, c->preatt, c->att, c->qkv, c->B, c->T, c->C,
                       c->NH);
  return dot_fd(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* out, preatt, att in double; masked preatt entries are left 0. */
static void attention_ref(double *out, double *preatt, double *att,
                          const float *qkv, int B, int T, int C, int NH)
{
  int hs = C / NH;
  double scale = 1.0 / sqrt((double)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        size_t row = (((size_t)b * NH + h) * T + t) * T;
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double mx = -INFINITY, sum = 0.0;
        for (int t2 = 0; t2 < T; t2++) {
          preatt[row + t2] = 0.0;
          att[row + t2] = 0.0;
        }
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          double s = 0.0;
          for (int i = 0; i < hs; i++) s += (double)q[i] * k[i];
          preatt[row + t2] = s * scale;
          if (s * scale > mx) mx = s * scale;
        }
        for (int t2 = 0; t2 <= t; t2++) {
          att[row + t2] = exp(preatt[row + t2] - mx);
          sum += att[row + t2];
        }
        for (int t2 = 0; t2 <= t; t2++) att[row + t2] /= sum;
        for (int i = 0; i < hs; i++) {
          double o = 0.0;
          for (int t2 = 0; t2 <= t; t2++)
            o += att[row + t2] *
                 qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + i];
          out[((size_t)b * T + t) * C + h * hs + i] = o;
        }
      }
}

/* dqkv of sum(out * dout) in double, from the definition. */
static void attention_backward_ref(double *dqkv, const float *dout,
                                   const float *qkv, int B, int T, int C,
                                   int NH)
{
  int hs = C / NH, C3 = 3 * C;
  double scale = 1.0 / sqrt((double)hs);
  double *att = dvec(T), *da = dvec(T);
  memset(dqkv, 0, (size_t)B * T * C3 * sizeof *dqkv);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
        const float *dt = dout + ((size_t)b * T + t) * C + h * hs;
        double mx = -INFINITY, sum = 0.0, ad = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
          double s = 0.0;
          for (int i = 0; i < hs; i++) s += (double)q[i] * k[i];
          att[t2] = s * scale;
          if (att[t2] > mx) mx = att[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) sum += (att[t2] = exp(att[t2] - mx));
        for (int t2 = 0; t2 <= t; t2++) att[t2] /= sum;
        for (int t2 = 0; t2 <= t; t2++) {
          size_t vr = ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
          double s = 0.0;
          for (int i = 0; i < hs; i++) {
            s += (double)dt[i] * qkv[vr + i];
            dqkv[vr + i] += att[t2] * dt[i];
          }
          da[t2] = s;
          ad += att[t2] * s;
        }
        for (int t2 = 0; t2 <= t; t2++) {
          double g = att[t2] * (da[t2] - ad) * scale;
          size_t qr = ((size_t)b * T + t) * C3 + h * hs;
          size_t kr = ((size_t)b * T + t2) * C3 + C + h * hs;
          for (int i = 0; i < hs; i++) {
            dqkv[qr + i] += g * qkv[kr + i];
            dqkv[kr + i] += g * qkv[qr + i];
          }
        }
      }
  free(att);
  free(da);
}

/* Causality: changing every channel of position t0 leaves the outputs of
 * positions t < t0 bit-identical and changes those at t >= t0. */
static void check_causal(int B, int T, int C, int NH, int t0)
{
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C,
         na = (size_t)B * NH * T * T;
  float *qkv = frand(nq, -2, 2), *out0 = fvec(no), *out1 = fvec(no);
  float *pre = fvec(na), *att = fvec(na);
  K->attention_forward(out0, pre, att, qkv, B, T, C, NH);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < 3 * C; i++) qkv[((size_t)b * T + t0) * 3 * C + i] += 0.75f;
  K->attention_forward(out1, pre, att, qkv, B, T, C, NH);
  size_t leak = 0, moved = 0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < C; i++) {
        size_t k = ((size_t)b * T + t) * C + i;
        if (t < t0 && memcmp(&out1[k], &out0[k], sizeof(float)) != 0) leak++;
        if (t >= t0 && out1[k] != out0[k]) moved++;
      }
  CHECK(leak == 0, "attention T=%d: %zu outputs before t0=%d changed with the "
        "input at t0 (not causal)", T, leak, t0);
  CHECK(moved > (size_t)B * C, "attention T=%d: only %zu outputs at t >= t0=%d "
        "changed", T, moved, t0);
  free(qkv); free(out0); free(out1); free(pre); free(att);
}

/* Backward at a shape too big for finite differences (several causal
 * blocks) against attention_backward_ref. */
static void test_attention_backward_shape(int B, int T, int C, int NH)
{
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C,
         na = (size_t)B * NH * T * T;
  float *qkv = frand(nq, -1, 1), *dout = frand(no, -1, 1), *out = fvec(no);
  float *pre = fvec(na), *att = fvec(na), *dpre = fvec(na), *datt = fvec(na);
  float *dqkv = fvec(nq);
  double *ref = dvec(nq);
  K->attention_forward(out, pre, att, qkv, B, T, C, NH);
  K->attention_backward(dqkv, dpre, datt, dout, qkv, att, B, T, C, NH);
  attention_backward_ref(ref, dout, qkv, B, T, C, NH);
  char buf[96];
  snprintf(buf, sizeof buf, "attention dqkv B=%d T=%d C=%d NH=%d", B, T, C,
           NH);
  compare_ref(buf, dqkv, ref, nq, 1e-4, 1e-5);
  free(qkv); free(dout); free(out); free(pre); free(att); free(dpre);
  free(datt); free(dqkv); free(ref);
}

static void test_attention_forward_shape(int B, int T, int C, int NH)
{
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C,
         na = (size_t)B * NH * T * T;
  float *qkv = frand(nq, -2, 2), *out = frand(no, -9, 9);
  float *pre = frand(na, -9, 9), *att = frand(na, -9, 9);
  double *rout = dvec(no), *rpre = dvec(na), *ratt = dvec(na);
  K->attention_forward(out, pre, att, qkv, B, T, C, NH);
  attention_ref(rout, rpre, ratt, qkv, B, T, C, NH);
  char buf[96];
  snprintf(buf, sizeof buf, "attention out B=%d T=%d C=%d NH=%d", B, T, C, NH);
  compare_ref(buf, out, rout, no, 1e-5, 1e-5);
  snprintf(buf, sizeof buf, "attention att B=%d T=%d C=%d NH=%d", B, T, C, NH);
  compare_ref(buf, att, ratt, na, 1e-5, 1e-6); /* masked entries: exactly 0 */
  size_t nbad = 0;
  for (size_t r = 0; r < na / T; r++) /* preatt below the diagonal */
    for (int t2 = 0; t2 <= (int)(r % T); t2++) {
      size_t i = r * T + t2;
      if (!(fabs(pre[i] - rpre[i]) <= 1e-5 * (1 + fabs(rpre[i])))) {
        if (nbad < 5)
          fprintf(stderr, "  preatt[%zu] = %.9g, expected %.9g\n", i, pre[i],
                  rpre[i]);
        nbad++;
      }
    }
  CHECK(nbad == 0, "attention preatt B=%d T=%d C=%d NH=%d: %zu wrong", B, T,
        C, NH, nbad);
  free(qkv); free(out); free(pre); free(att); free(rout); free(rpre);
  free(ratt);
}

/* [Note: flash attention]: flash_attention_forward/backward against the
 * double references and against the naive kernels, at shapes that cover
 * T = 1, T below, at and across the 64-row and 128-column tiles with a
 * remainder (150, 200, 257), head sizes 5 and 64 and several heads.
 * Tolerances: out and lse 1e-5 relative + 1e-5 absolute (as the naive
 * kernel's); dqkv 1e-4 + 1e-5 (fp32 sums of up to T terms).  dqkv is
 * pre-filled (backward accumulates) and the scratch holds garbage. */
static void test_flash_shape(int B, int T, int C, int NH)
{
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C,
         na = (size_t)B * NH * T * T, nl = (size_t)B * NH * T;
  float *qkv = frand(nq, -2, 2), *dout = frand(no, -1, 1);
  float *out = frand(no, -9, 9), *lse = frand(nl, -9, 9), *scr = frand(nl, 1e3, 2e3);
  float *nout = fvec(no), *pre = fvec(na), *att = fvec(na), *dpre = fvec(na), *datt = fvec(na);
  float *dqkv = fvec(nq), *ndqkv = fvec(nq);
  double *rout = dvec(no), *rpre = dvec(na), *ratt = dvec(na), *rlse = dvec(nl), *rd = dvec(nq);
  for (size_t i = 0; i < nq; i++) dqkv[i] = ndqkv[i] = 0.5f;
  K->flash_attention_forward(out, lse, qkv, B, T, C, NH);
  attention_ref(rout, rpre, ratt, qkv, B, T, C, NH);
  for (size_t r = 0; r < nl; r++) { /* log sum over t2 <= t of e^pre */
    int t = (int)(r % T);
    double mx = -INFINITY, sum = 0.0;
    for (int t2 = 0; t2 <= t; t2++) mx = fmax(mx, rpre[r * T + t2]);
    for (int t2 = 0; t2 <= t; t2++) sum += exp(rpre[r * T + t2] - mx);
    rlse[r] = mx + log(sum);
  }
  char buf[96];
  snprintf(buf, sizeof buf, "flash attention out B=%d T=%d C=%d NH=%d", B, T, C, NH);
  compare_ref(buf, out, rout, no, 1e-5, 1e-5);
  snprintf(buf, sizeof buf, "flash attention lse B=%d T=%d C=%d NH=%d", B, T, C, NH);
  compare_ref(buf, lse, rlse, nl, 1e-5, 1e-5);
  K->attention_forward(nout, pre, att, qkv, B, T, C, NH);
  snprintf(buf, sizeof buf, "flash vs naive out B=%d T=%d C=%d NH=%d", B, T, C, NH);
  compare_f(buf, out, nout, no, 1e-5, 1e-5);

  K->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH);
  attention_backward_ref(rd, dout, qkv, B, T, C, NH);
  for (size_t i = 0; i < nq; i++) rd[i] += 0.5;
  snprintf(buf, sizeof buf, "flash attention dqkv B=%d T=%d C=%d NH=%d", B, T, C, NH);
  compare_ref(buf, dqkv, rd, nq, 1e-4, 1e-5);
  K->attention_backward(ndqkv, dpre, datt, dout, qkv, att, B, T, C, NH);
  snprintf(buf, sizeof buf, "flash vs naive dqkv B=%d T=%d C=%d NH=%d", B, T, C, NH);
  compare_f(buf, dqkv, ndqkv, nq, 1e-4, 1e-5);
  free(qkv); free(dout); free(out); free(lse); free(scr); free(nout); free(pre); free(att);
  free(dpre); free(datt); free(dqkv); free(ndqkv); free(rout); free(rpre); free(ratt);
  free(rlse); free(rd);
}

static void test_flash_attention(void)
{
  test_flash_shape(1, 1, 8, 2);     /* T = 1: one key */
  test_flash_shape(2, 5, 8, 2);
  test_flash_shape(1, 7, 15, 3);    /* hs = 5: vector remainders */
  test_flash_shape(2, 150, 32, 4);  /* three query tiles, two key tiles, remainders */
  test_flash_shape(1, 200, 128, 2); /* head size 64 */
  test_flash_shape(1, 257, 256, 4); /* head size 64, several heads, 3 key tiles */
}

static void test_attention(void)
{
  AttCtx c = {.B = 2, .T = 5, .C = 8, .NH = 2};
  size_t nq = (size_t)c.B * c.T * 3 * c.C, no = (size_t)c.B * c.T * c.C,
         na = (size_t)c.B * c.NH * c.T * c.T;
  c.qkv = frand(nq, -2, 2);
  c.out = fvec(no);
  c.preatt = fvec(na);
  c.att = fvec(na);
  c.R = frand(no, -1, 1);

  test_attention_forward_shape(c.B, c.T, c.C, c.NH);
  test_attention_forward_shape(1, 7, 15, 3);   /* hs = 5: vector remainders */
  test_attention_forward_shape(2, 33, 64, 2);  /* hs = 32, longer rows */
  test_attention_forward_shape(2, 150, 32, 4); /* three causal blocks */
  check_causal(c.B, c.T, c.C, c.NH, 2);
  check_causal(1, 150, 16, 2, 100); /* inside the second block */
  check_causal(1, 150, 16, 2, 64);  /* first row of a block */
  test_attention_backward_shape(c.B, c.T, c.C, c.NH);
  test_attention_backward_shape(2, 150, 32, 4);

  /* Backward; datt/dpreatt hold garbage, which must not matter. */
  float *dqkv = fvec(nq), *datt = frand(na, 1e3, 2e3),
        *dpre = frand(na, -2e3, -1e3);
  att_obj(&c);
  K->attention_backward(dqkv, dpre, datt, c.R, c.qkv, c.att, c.B, c.T, c.C,
                        c.NH);
  float *dqkv1 = fcopy(dqkv, nq);
  check_grad("attention dqkv", dqkv1, c.qkv, nq, att_obj, &c);
  att_obj(&c);
  for (size_t i = 0; i < na; i++) datt[i] = dpre[i] = -7e5f;
  K->attention_backward(dqkv, dpre, datt, c.R, c.qkv, c.att, c.B, c.T, c.C,
                        c.NH);
  check_doubles("attention dqkv", dqkv1, dqkv, nq);

  free(c.qkv); free(c.out); free(c.preatt); free(c.att); free(c.R);
  free(dqkv); free(datt); free(dpre); free(dqkv1);
}

/* ---- gelu ----------------------------------------------------------------- */

typedef struct {
  int N;
  float *inp, *out, *R;
} GeluCtx;

static double gelu_obj(void *p)
{
  GeluCtx *c = p;
  K->gelu_forward(c->out, c->inp, c->N);
  return dot_fd(c->out, c->R, c->N);
}

static void test_gelu(void)
{
  GeluCtx c = {.N = 47};
  c.inp = frand(c.N, -5, 5);
  const float special[] = {0.0f, 1e-4f, -1e-4f, 10.0f, -10.0f, 20.0f, -20.0f};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++)
    c.inp[i] = special[i];
  c.out = fvec(c.N);
  c.R = frand(c.N, -1, 1);

  gelu_obj(&c);
  const double k = sqrt(2.0 / M_PI);
  double *ref = dvec(c.N), *dref = dvec(c.N);
  for (int i = 0; i < c.N; i++) {
    double x = c.inp[i], u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    ref[i] = 0.5 * x * (1.0 + th);
    dref[i] = c.R[i] * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k *
                                               (1.0 + 3.0 * 0.044715 * x * x));
  }
  compare_ref("gelu out", c.out, ref, c.N, 1e-5, 1e-6);

  float *dinp = fvec(c.N);
  K->gelu_backward(dinp, c.inp, c.R, c.N);
  compare_ref("gelu dinp (analytic reference)", dinp, dref, c.N, 1e-5, 1e-6);
  float *dinp1 = fcopy(dinp, c.N);
  check_grad("gelu dinp", dinp1, c.inp, c.N, gelu_obj, &c);
  K->gelu_backward(dinp, c.inp, c.R, c.N);
  check_doubles("gelu dinp", dinp1, dinp, c.N);

  free(c.inp); free(c.out); free(c.R); free(ref); free(dref); free(dinp);
  free(dinp1);
}

/* ---- residual ------------------------------------------------------------- */

typedef struct {
  int N;
  float *a, *b, *out, *R;
} ResCtx;

static double res_obj(void *p)
{
  ResCtx *c = p;
  K->residual_forward(c->out, c->a, c->b, c->N);
  return dot_fd(c->out, c->R, c->N);
}

static void test_residual(void)
{
  ResCtx c = {.N = 23};
  c.a = frand(c.N, -1, 1);
  c.b = frand(c.N, -1, 1);
  c.out = fvec(c.N);
  c.R = frand(c.N, -1, 1);
  res_obj(&c);
  double *ref = dvec(c.N);
  for (int i = 0; i < c.N; i++) ref[i] = (double)c.a[i] + c.b[i];
  compare_ref("residual out", c.out, ref, c.N, 1e-6, 1e-7);

  float *da = fvec(c.N), *db = fvec(c.N);
  K->residual_backward(da, db, c.R, c.N);
  float *da1 = fcopy(da, c.N), *db1 = fcopy(db, c.N);
  check_grad("residual dinp1", da1, c.a, c.N, res_obj, &c);
  check_grad("residual dinp2", db1, c.b, c.N, res_obj, &c);
  K->residual_backward(da, db, c.R, c.N);
  check_doubles("residual dinp1", da1, da, c.N);
  check_doubles("residual dinp2", db1, db, c.N);

  free(c.a); free(c.b); free(c.out); free(c.R); free(ref); free(da); free(db);
  free(da1); free(db1);
}

/* ---- crossentropy --------------------------------------------------------- */

typedef struct {
  int N, V;
  int *targets;
  float *logits, *probs, *losses, dloss;
} CeCtx;

static double ce_obj(void *p)
{
  CeCtx *c = p;
  K->crossentropy_forward(c->losses, c->probs, c->logits, c->targets, c->N,
                          c->V);
  double s = 0.0;
  for (int n = 0; n < c->N; n++) s += (double)c->losses[n] * c->dloss;
  return s;
}

static void ce_ref(double *losses, double *probs, const float *logits,
                   const int *targets, int N, int V)
{
  for (int n = 0; n < N; n++) {
    const float *z = logits + (size_t)n * V;
    double mx = -INFINITY, s = 0.0;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    for (int v = 0; v < V; v++) probs[(size_t)n * V + v] = exp(z[v] - mx) / s;
    losses[n] = log(s) + mx - z[targets[n]];
  }
}

static void test_crossentropy(void)
{
  CeCtx c = {.N = 10, .V = 11};
  size_t nl = (size_t)c.N * c.V;
  c.targets = malloc(c.N * sizeof(int));
  for (int n = 0; n < c.N; n++) c.targets[n] = (int)(urand() * c.V);
  c.logits = frand(nl, -3, 3);
  c.probs = fvec(nl);
  c.losses = fvec(c.N);
  c.dloss = 1.0f / c.N;

  ce_obj(&c);
  double *rl = dvec(c.N), *rp = dvec(nl);
  ce_ref(rl, rp, c.logits, c.targets, c.N, c.V);
  compare_ref("crossentropy losses", c.losses, rl, c.N, 1e-5, 1e-6);
  compare_ref("crossentropy probs", c.probs, rp, nl, 1e-5, 1e-7);

  float *dl = fvec(nl);
  K->crossentropy_softmax_backward(dl, c.probs, c.targets, c.dloss, c.N, c.V);
  float *dl1 = fcopy(dl, nl);
  check_grad("crossentropy dlogits", dl1, c.logits, nl, ce_obj, &c);
  ce_obj(&c);
  K->crossentropy_softmax_backward(dl, c.probs, c.targets, c.dloss, c.N, c.V);
  check_doubles("crossentropy dlogits", dl1, dl, nl);

  /* Logits 300 apart: the target's probability underflows to 0 in fp32,
   * the log-sum-exp loss stays finite and exact. */
  for (size_t i = 0; i < nl; i++) c.logits[i] *= 100.0f;
  ce_obj(&c);
  ce_ref(rl, rp, c.logits, c.targets, c.N, c.V);
  compare_ref("crossentropy losses (logits x100)", c.losses, rl, c.N, 1e-5,
              1e-5);
  compare_ref("crossentropy probs (logits x100)", c.probs, rp, nl, 1e-5,
              1e-7);

  free(c.targets); free(c.logits); free(c.probs); free(c.losses); free(rl);
  free(rp); free(dl); free(dl1);
}

/* ---- adamw and sum_squares ------------------------------------------------ */

static void test_adamw(void)
{
  const size_t n = 37;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f,
              scale = 0.5f;
  float *p = frand(n, -1, 1), *m = fvec(n), *v = fvec(n);
  double *rp = dvec(n), *rm = dvec(n), *rv = dvec(n);
  for (size_t i = 0; i < n; i++) rp[i] = p[i];
  for (int t = 1; t <= 4; t++) {
    float *g = frand(n, -2, 2);
    g[0] = 0.0f;
    K->adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, scale, t);
    for (size_t i = 0; i < n; i++) {
      double gi = (double)g[i] * scale;
      rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
      rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
      double mhat = rm[i] / (1.0 - pow(b1, t)), vhat = rv[i] / (1.0 - pow(b2, t));
      rp[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * rp[i]);
    }
    free(g);
    char buf[64];
    snprintf(buf, sizeof buf, "adamw param after step %d", t);
    compare_ref(buf, p, rp, n, 1e-5, 1e-6);
    snprintf(buf, sizeof buf, "adamw m after step %d", t);
    compare_ref(buf, m, rm, n, 1e-5, 1e-7);
    snprintf(buf, sizeof buf, "adamw v after step %d", t);
    compare_ref(buf, v, rv, n, 1e-5, 1e-8);
  }
  free(p); free(m); free(v); free(rp); free(rm); free(rv);
}

static void test_sum_squares(void)
{
  CHECK(K->sum_squares(NULL, 0) == 0.0, "sum_squares of 0 elements");
  const size_t sizes[] = {5, 16384, 1000003};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    float *x = frand(n, -3, 3);
    long double ref = 0.0L;
    for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
    double got = K->sum_squares(x, n);
    CHECK(fabs(got - (double)ref) <= 1e-12 * (double)ref,
          "sum_squares n=%zu: %.17g, expected %.17g", n, got, (double)ref);
    free(x);
  }
}

/* ---- thread-count independence -------------------------------------------- */

static void test_determinism(void)
{
#ifdef _OPENMP
  const int B = 2, T = 80, C = 160, NH = 4, V = 300, N = B * T;
  const size_t nC = (size_t)N * C, n3 = 3 * nC, na = (size_t)B * NH * T * T,
               nV = (size_t)N * V;
  int *tok = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++) tok[i] = (int)(urand() * 7); /* repeats */
  float *wte = frand((size_t)V * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1);
  float *x = frand(nC, -2, 2), *w = frand(C, 0.5, 1.5), *bb = frand(C, -1, 1);
  float *qkv = frand(n3, -2, 2), *dout = frand(nC, -1, 1);
  float *dout3 = frand(n3, -1, 1), *logits = frand(nV, -4, 4);
  float *big = frand(3000001, -1, 1);
  float *res[2][16];
  double ss[2];
  for (int run = 0; run < 2; run++) {
    set_threads(run == 0 ? 1 : 3);
    float **r = res[run];
    r[0] = fvec(nC);
    K->encoder_forward(r[0], tok, wte, wpe, B, T, C);
    r[1] = fvec((size_t)V * C);
    r[2] = fvec((size_t)T * C);
    K->encoder_backward(r[1], r[2], dout, tok, B, T, C);
    r[3] = fvec(nC);
    float *mean = fvec(N), *rstd = fvec(N);
    K->layernorm_forward(r[3], mean, rstd, x, w, bb, N, C);
    r[4] = fvec(nC);
    r[5] = fvec(C);
    r[6] = fvec(C);
    K->layernorm_backward(r[4], r[5], r[6], dout, x, w, mean, rstd, N, C);
    r[7] = fvec(nC);
    float *pre = fvec(na), *att = fvec(na);
    K->attention_forward(r[7], pre, att, qkv, B, T, C, NH);
    r[8] = fvec(n3);
    float *datt = fvec(na), *dpre = fvec(na);
    K->attention_backward(r[8], dpre, datt, dout, qkv, att, B, T, C, NH);
    r[9] = fvec(nV);
    r[10] = fvec(N);
    K->crossentropy_forward(r[10], r[9], logits, tok, N, V);
    r[11] = fvec(n3);
    K->gelu_forward(r[11], dout3, (int)n3);
    r[12] = fvec(n3);
    K->gelu_backward(r[12], qkv, dout3, (int)n3);
    r[13] = fvec(3 * C); /* matmul's dbias (its own loop, not BLAS) */
    float *dw = fvec((size_t)3 * C * C);
    K->matmul_backward(NULL, dw, r[13], dout3, x, qkv, N, C, 3 * C);
    ss[run] = K->sum_squares(big, 3000001);
    free(mean); free(rstd); free(pre); free(att); free(datt); free(dpre);
    free(dw);
  }
  set_threads(1);
  const char *names[14] = {"encoder out", "encoder dwte", "encoder dwpe",
                           "layernorm out", "layernorm dinp",
                           "layernorm dweight", "layernorm dbias",
                           "attention out", "attention dqkv",
                           "crossentropy probs", "crossentropy losses",
                           "gelu out", "gelu dinp", "matmul dbias"};
  const size_t sizes[14] = {nC, (size_t)V * C, (size_t)T * C, nC, nC, C, C,
                            nC, n3, nV, N, n3, n3, 3 * C};
  for (int k = 0; k < 14; k++) {
    compare_bits(names[k], res[0][k], res[1][k], sizes[k]);
    free(res[0][k]);
    free(res[1][k]);
  }
  CHECK(memcmp(&ss[0], &ss[1], sizeof(double)) == 0,
        "sum_squares: %.17g with 1 thread, %.17g with 3", ss[0], ss[1]);
  free(tok); free(wte); free(wpe); free(x); free(w); free(bb); free(qkv);
  free(dout); free(dout3); free(logits); free(big);
#endif
}

/* ---- the table and the BLAS report ---------------------------------------- */

static void test_ops_and_blas(void)
{
  CHECK(K && K->name && strcmp(K->name, "cpu") == 0, "FsdpKernelsCpu name");
#define HAS(member) CHECK(K->member != NULL, "FsdpKernelsCpu()->%s is NULL", #member)
  HAS(encoder_forward); HAS(encoder_backward);
  HAS(layernorm_forward); HAS(layernorm_backward);
  HAS(matmul_forward); HAS(matmul_backward);
  HAS(attention_forward); HAS(attention_backward);
  HAS(flash_attention_forward); HAS(flash_attention_backward);
  HAS(gelu_forward); HAS(gelu_backward);
  HAS(residual_forward); HAS(residual_backward);
  HAS(crossentropy_forward); HAS(crossentropy_softmax_backward);
  HAS(adamw_update); HAS(sum_squares);
#undef HAS

  const char *core = FsdpKernelsCpuBlasCore();
  int fb = FsdpKernelsCpuBlasIsFallback();
  CHECK(core && core[0], "FsdpKernelsCpuBlasCore empty");
  CHECK(fb == 0 || fb == 1, "FsdpKernelsCpuBlasIsFallback = %d", fb);
#if defined(__x86_64__) && defined(__GNUC__)
  if (core && strcasecmp(core, "Prescott") == 0 && __builtin_cpu_supports("avx2"))
    CHECK(fb == 1, "Prescott on an AVX2 CPU must be a fallback");
  if (core && (strcasecmp(core, "SkylakeX") == 0 ||
               strcasecmp(core, "Haswell") == 0))
    CHECK(fb == 0, "%s must not be a fallback", core);
#endif
  printf("BLAS core: %s%s\n", core ? core : "(null)",
         fb ? " (generic fallback)" : "");
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  K = FsdpKernelsCpu();
  if (rank == 0) {
    set_threads(1);
    test_ops_and_blas();
    test_expf_fast();
    test_encoder();
    test_layernorm();
    test_matmul();
    test_matmul_slabs();
    test_attention();
    test_flash_attention();
    test_gelu();
    test_residual();
    test_crossentropy();
    test_adamw();
    test_sum_squares();
    test_determinism();
  }
  int rc = test_finish("test_kernels");
  MPI_Finalize();
  return rc;
}
