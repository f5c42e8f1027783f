/* test_kernels_cuda.c: the CUDA kernels (kernels/cuda) against the CPU
 * kernels (kernels/cpu) on the same random inputs, plus the device helpers
 * the FSDP runtime uses and the NCCL backend at one rank.
 *
 * Tolerances (stated once):
 * - fp32 matmuls: |cuda - cpu| <= 1e-5 |cpu| + 2 sqrt(K) 2^-24 sum|terms|
 *   (compare_dev_sum: what fp32 rounding of a K-term sum allows, any
 *   order, split-K included);
 * - other fp32 kernels: |cuda - cpu| <= 1e-5 (1 + |cpu|) elementwise (softmax
 *   probabilities: 1e-5 |cpu| + 1e-7); the two differ only by summation
 *   order, FMA contraction and expf/tanhf versus the CPU's polynomial;
 * - bf16 matmuls: against the CPU kernel on the same bf16-rounded operands
 *   1e-5 (1 + |ref|) (bf16 products are exact in fp32, accumulation is
 *   fp32); against the unrounded fp32 operands 1e-2 (1 + |ref|), the cost
 *   of rounding the operands to 8 significant bits;
 * - the table's bf16 matmuls (fp32 operands rounded on the device) and
 *   TF32 matmuls, the fused classifier: stated at their tests;
 * - casts and in-place scaling: bit-identical to lib/base/dtype.h, special
 *   values included; sum of squares: relative 1e-12 and bit-identical on a
 *   second call (deterministic two-stage reduction).
 * Backward kernels accumulate, so every gradient starts from the same
 * random values on both sides; attention's datt/dpreatt scratch starts as
 * NaN on the GPU (overwritten, never read).
 *
 * Without a usable GPU (or in a build whose CUDA cannot find a driver)
 * the checks that need no device still run -- a kernel before init is a
 * recorded state error, init fails with FSDP_ERR_CUDA, device selection
 * and the NCCL backend are usage errors with clear messages -- and the test
 * exits 77: "no CUDA device: skipped".  Runs on one rank.
 */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm/coll.h"
#include "kernels/cuda/kernels_cuda.h"
#include "device/cuda_util.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/init.h"
#include "kernels/kernels.h"
#include "comm/stream.h"
#include "testutil.h"

double sum_squares_cpu(const float *x, size_t n); /* kernels/cpu */

static const FsdpKernelOps *KC, *KG; /* CPU, CUDA */
static void *g_stream;                /* compute stream of the CUDA kernels */

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double urand(void) /* [0, 1), splitmix64 */
{
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static void *xmalloc(size_t bytes)
{
  void *p = calloc(bytes ? bytes : 1, 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

static float *frand(size_t n, double lo, double hi)
{
  float *x = xmalloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
  return x;
}

static float *fcopy(const float *x, size_t n)
{
  float *y = xmalloc(n * sizeof *y);
  memcpy(y, x, n * sizeof *y);
  return y;
}

static void *dev_from(const void *h, size_t bytes)
{
  void *d = NULL;
  TCALL(FsdpCudaMalloc(FSDP_MEM_OTHER, bytes, &d));
  TCALL(FsdpCudaMemcpyAsync(d, h, bytes, g_stream));
  return d;
}

static void *dev_zeros(size_t bytes)
{
  void *d = NULL;
  TCALL(FsdpCudaMalloc(FSDP_MEM_OTHER, bytes, &d));
  return d;
}

/* Wait for the kernels, check their errors, copy back. */
static void dev_to(void *h, const void *d, size_t bytes, const char *what)
{
  int err = FsdpKernelsCudaSynchronize();
  CHECK(err == FSDP_SUCCESS, "%s: CUDA kernels failed (%d): %s", what, err,
        FsdpErrorLastMessage());
  TCALL(FsdpCudaMemcpyAsync(h, d, bytes, g_stream));
  TCALL(FsdpCudaStreamSynchronize(g_stream));
}

static void dfree(void *pp) { TCALL(FsdpCudaFree(pp)); }

/* got (device) against ref (host): |got - ref| <= atol + rtol |ref|. */
static void compare_dev(const char *what, const float *dgot, const float *ref, size_t n,
                        double rtol, double atol)
{
  float *got = xmalloc(n * sizeof *got);
  dev_to(got, dgot, n * sizeof *got, what);
  size_t nbad = 0, worst = 0;
  double maxd = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    int ok = d <= atol + rtol * fabs((double)ref[i]);
    if (!ok) {
      if (nbad < 5)
        fprintf(stderr, "  %s[%zu]: cuda %.9g cpu %.9g (diff %.3g)\n", what, i, got[i], ref[i],
                d);
      nbad++;
    }
    if (!(d <= maxd)) { /* NaN counts as the worst */
      maxd = d;
      worst = i;
    }
  }
  CHECK(nbad == 0, "%s: %zu of %zu elements off; max |diff| %.3g at %zu", what, nbad, n, maxd,
        worst);
  if (nbad == 0) printf("  ok %-34s n=%-8zu max |diff| %.3g\n", what, n, maxd);
  free(got);
}

#define TOL32 1e-5, 1e-5 /* rtol, atol: 1e-5 (1 + |ref|) */

/* A matmul element is a K-term fp32 sum, summed in another order (and
 * split-K by cuBLAS at will) on the GPU: both sides' rounding errors are
 * within sqrt(K) u sum|terms| with high probability (Higham and Mary's
 * probabilistic bound, u = 2^-24), so the absolute part allows 2 sqrt(K) u
 * abs[i], abs = the same product on |operands|; the relative part stays
 * 1e-5.  A fixed 1e-5 (1 + |ref|) flakes at K = 2304 with split-K. */
static void compare_dev_sum(const char *what, const float *dgot, const float *ref,
                            const float *abs_ref, size_t n, int K)
{
  float *got = xmalloc(n * sizeof *got);
  dev_to(got, dgot, n * sizeof *got, what);
  const double u = ldexp(1.0, -24), f = 2.0 * sqrt((double)K) * u;
  size_t nbad = 0;
  double maxr = 0.0; /* the worst |diff| / allowed */
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    double allowed = 1e-5 * fabs((double)ref[i]) + f * (double)abs_ref[i] + 1e-30;
    if (!(d <= allowed)) {
      if (nbad < 5)
        fprintf(stderr, "  %s[%zu]: cuda %.9g cpu %.9g (diff %.3g, allowed %.3g)\n", what, i,
                got[i], ref[i], d, allowed);
      nbad++;
    }
    if (!(d / allowed <= maxr)) maxr = d / allowed;
  }
  CHECK(nbad == 0, "%s: %zu of %zu elements off (K=%d); worst diff/allowed %.3g", what, nbad, n,
        K, maxr);
  if (nbad == 0) printf("  ok %-34s n=%-8zu K=%-5d worst diff/allowed %.3g\n", what, n, K, maxr);
  free(got);
}

static float *fabs_copy(const float *x, size_t n)
{
  float *a = xmalloc(n * sizeof *a);
  for (size_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
  return a;
}

/* ---- kernels of the table --------------------------------------------------- */

static void test_encoder(int B, int T, int C, int V)
{
  size_t n = (size_t)B * T * C;
  int *inp = xmalloc((size_t)B * T * sizeof *inp);
  for (int i = 0; i < B * T; i++) inp[i] = (int)(urand() * V) % V;
  inp[1 % (B * T)] = inp[0]; /* a repeated token: two adds into one row */
  float *wte = frand((size_t)V * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1);
  float *out = xmalloc(n * sizeof *out);
  KC->encoder_forward(out, inp, wte, wpe, B, T, C);
  int *dinp = dev_from(inp, (size_t)B * T * sizeof *inp);
  float *dwte = dev_from(wte, (size_t)V * C * 4), *dwpe = dev_from(wpe, (size_t)T * C * 4);
  float *dout_ = dev_zeros(n * 4);
  KG->encoder_forward(dout_, dinp, dwte, dwpe, B, T, C);
  compare_dev("encoder_forward out", dout_, out, n, TOL32);

  float *g = frand(n, -1, 1);
  float *gwte = frand((size_t)V * C, -1, 1), *gwpe = frand((size_t)T * C, -1, 1);
  float *d_g = dev_from(g, n * 4), *d_gwte = dev_from(gwte, (size_t)V * C * 4),
        *d_gwpe = dev_from(gwpe, (size_t)T * C * 4);
  KC->encoder_backward(gwte, gwpe, g, inp, B, T, C);
  KG->encoder_backward(d_gwte, d_gwpe, d_g, dinp, B, T, C);
  compare_dev("encoder_backward dwte", d_gwte, gwte, (size_t)V * C, TOL32);
  compare_dev("encoder_backward dwpe", d_gwpe, gwpe, (size_t)T * C, TOL32);
  dfree(&dinp), dfree(&dwte), dfree(&dwpe), dfree(&dout_), dfree(&d_g), dfree(&d_gwte),
      dfree(&d_gwpe);
  free(inp), free(wte), free(wpe), free(out), free(g), free(gwte), free(gwpe);
}

static void test_layernorm(int N, int C)
{
  size_t n = (size_t)N * C;
  float *x = frand(n, -2, 3), *w = frand(C, 0.5, 1.5), *b = frand(C, -0.5, 0.5);
  for (size_t i = 0; i < (size_t)C; i++) x[i] += 100.0f; /* |mean| >> std in row 0 */
  float *out = xmalloc(n * 4), *mean = xmalloc(N * 4), *rstd = xmalloc(N * 4);
  KC->layernorm_forward(out, mean, rstd, x, w, b, N, C);
  float *dx = dev_from(x, n * 4), *dw = dev_from(w, C * 4), *db = dev_from(b, C * 4);
  float *dout_ = dev_zeros(n * 4), *dmean = dev_zeros(N * 4), *drstd = dev_zeros(N * 4);
  KG->layernorm_forward(dout_, dmean, drstd, dx, dw, db, N, C);
  compare_dev("layernorm_forward out", dout_, out, n, TOL32);
  compare_dev("layernorm_forward mean", dmean, mean, N, TOL32);
  compare_dev("layernorm_forward rstd", drstd, rstd, N, 1e-5, 0.0);

  float *g = frand(n, -1, 1), *gx = frand(n, -1, 1), *gw = frand(C, -1, 1), *gb = frand(C, -1, 1);
  float *d_g = dev_from(g, n * 4), *d_gx = dev_from(gx, n * 4), *d_gw = dev_from(gw, C * 4),
        *d_gb = dev_from(gb, C * 4);
  /* backward reads the CPU's mean/rstd on both sides: only backward differs */
  float *d_mean = dev_from(mean, N * 4), *d_rstd = dev_from(rstd, N * 4);
  KC->layernorm_backward(gx, gw, gb, g, x, w, mean, rstd, N, C);
  KG->layernorm_backward(d_gx, d_gw, d_gb, d_g, dx, dw, d_mean, d_rstd, N, C);
  compare_dev("layernorm_backward dinp", d_gx, gx, n, TOL32);
  compare_dev("layernorm_backward dweight", d_gw, gw, C, TOL32);
  compare_dev("layernorm_backward dbias", d_gb, gb, C, TOL32);
  dfree(&dx), dfree(&dw), dfree(&db), dfree(&dout_), dfree(&dmean), dfree(&drstd);
  dfree(&d_g), dfree(&d_gx), dfree(&d_gw), dfree(&d_gb), dfree(&d_mean), dfree(&d_rstd);
  free(x), free(w), free(b), free(out), free(mean), free(rstd), free(g), free(gx), free(gw),
      free(gb);
}

/* offset: elements by which every device operand is shifted from its
 * 256-byte aligned allocation (FlatParameter views start anywhere). */
static void test_matmul(int N, int C, int OC, int with_bias, int offset)
{
  char tag[96];
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *x = frand(ni, -1, 1), *w = frand(nw, -1, 1), *b = with_bias ? frand(OC, -1, 1) : NULL;
  float *out = xmalloc(no * 4);
  KC->matmul_forward(out, x, w, b, N, C, OC);
  float *bx = dev_zeros((ni + offset) * 4), *bw = dev_zeros((nw + offset) * 4),
        *bb = dev_zeros((OC + offset) * 4), *bo = dev_zeros((no + offset) * 4);
  float *dx = bx + offset, *dw = bw + offset, *db = bb + offset, *dout_ = bo + offset;
  TCALL(FsdpCudaMemcpyAsync(dx, x, ni * 4, g_stream));
  TCALL(FsdpCudaMemcpyAsync(dw, w, nw * 4, g_stream));
  if (b) TCALL(FsdpCudaMemcpyAsync(db, b, OC * 4, g_stream));
  KG->matmul_forward(dout_, dx, dw, b ? db : NULL, N, C, OC);
  snprintf(tag, sizeof tag, "matmul_forward %dx%dx%d%s+%d", N, C, OC, b ? " bias" : "", offset);
  /* the same products on |operands|: the scale of each sum's rounding */
  float *ax = fabs_copy(x, ni), *aw = fabs_copy(w, nw), *ab = b ? fabs_copy(b, OC) : NULL;
  float *aout = xmalloc(no * 4);
  KC->matmul_forward(aout, ax, aw, ab, N, C, OC);
  compare_dev_sum(tag, dout_, out, aout, no, C);

  float *g = frand(no, -1, 1), *gx = frand(ni, -1, 1), *gw = frand(nw, -1, 1),
        *gb = frand(OC, -1, 1);
  float *ag = fabs_copy(g, no), *agx = fabs_copy(gx, ni), *agw = fabs_copy(gw, nw),
        *agb = fabs_copy(gb, OC);
  KC->matmul_backward(agx, agw, b ? agb : NULL, ag, ax, aw, N, C, OC);
  float *bg = dev_zeros((no + offset) * 4), *bgx = dev_zeros((ni + offset) * 4),
        *bgw = dev_zeros((nw + offset) * 4), *bgb = dev_zeros((OC + offset) * 4);
  float *d_g = bg + offset, *d_gx = bgx + offset, *d_gw = bgw + offset, *d_gb = bgb + offset;
  TCALL(FsdpCudaMemcpyAsync(d_g, g, no * 4, g_stream));
  TCALL(FsdpCudaMemcpyAsync(d_gx, gx, ni * 4, g_stream));
  TCALL(FsdpCudaMemcpyAsync(d_gw, gw, nw * 4, g_stream));
  TCALL(FsdpCudaMemcpyAsync(d_gb, gb, OC * 4, g_stream));
  KC->matmul_backward(gx, gw, b ? gb : NULL, g, x, w, N, C, OC);
  KG->matmul_backward(d_gx, d_gw, b ? d_gb : NULL, d_g, dx, dw, N, C, OC);
  snprintf(tag, sizeof tag, "matmul_backward dinp +%d", offset);
  compare_dev_sum(tag, d_gx, gx, agx, ni, OC + 1);
  snprintf(tag, sizeof tag, "matmul_backward dweight +%d", offset);
  compare_dev_sum(tag, d_gw, gw, agw, nw, N + 1);
  snprintf(tag, sizeof tag, "matmul_backward dbias%s", b ? "" : " (NULL: untouched)");
  compare_dev_sum(tag, d_gb, gb, agb, OC, N + 1);
  dfree(&bx), dfree(&bw), dfree(&bb), dfree(&bo), dfree(&bg), dfree(&bgx), dfree(&bgw),
      dfree(&bgb);
  free(x), free(w), free(b), free(out), free(g), free(gx), free(gw), free(gb);
  free(ax), free(aw), free(ab), free(aout), free(ag), free(agx), free(agw), free(agb);
}

static uint16_t *to_bf16(const float *x, size_t n, float *rounded)
{
  uint16_t *h = xmalloc(n * sizeof *h);
  FsdpDtypeFromFloat(FSDP_DTYPE_BF16, x, h, n);
  FsdpDtypeToFloat(FSDP_DTYPE_BF16, h, rounded, n);
  return h;
}

static void test_matmul_bf16(int N, int C, int OC)
{
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *x = frand(ni, -1, 1), *w = frand(nw, -1, 1), *b = frand(OC, -1, 1);
  float *xr = xmalloc(ni * 4), *wr = xmalloc(nw * 4);
  uint16_t *xh = to_bf16(x, ni, xr), *wh = to_bf16(w, nw, wr);
  float *ref = xmalloc(no * 4), *ref32 = xmalloc(no * 4);
  KC->matmul_forward(ref, xr, wr, b, N, C, OC);
  KC->matmul_forward(ref32, x, w, b, N, C, OC);
  uint16_t *dx = dev_from(xh, ni * 2), *dw = dev_from(wh, nw * 2);
  float *db = dev_from(b, OC * 4), *dout_ = dev_zeros(no * 4);
  matmul_forward_bf16_cuda(dout_, dx, dw, db, N, C, OC);
  compare_dev("matmul_forward_bf16 (bf16 operands)", dout_, ref, no, TOL32);
  compare_dev("matmul_forward_bf16 (fp32 operands)", dout_, ref32, no, 1e-2, 1e-2);

  float *g = frand(no, -1, 1), *gr = xmalloc(no * 4);
  uint16_t *gh = to_bf16(g, no, gr);
  float *gx = frand(ni, -1, 1), *gw = frand(nw, -1, 1), *gb = frand(OC, -1, 1);
  uint16_t *d_g = dev_from(gh, no * 2);
  float *d_gx = dev_from(gx, ni * 4), *d_gw = dev_from(gw, nw * 4), *d_gb = dev_from(gb, OC * 4);
  KC->matmul_backward(gx, gw, gb, gr, xr, wr, N, C, OC);
  matmul_backward_bf16_cuda(d_gx, d_gw, d_gb, d_g, dx, dw, N, C, OC);
  compare_dev("matmul_backward_bf16 dinp", d_gx, gx, ni, TOL32);
  compare_dev("matmul_backward_bf16 dweight", d_gw, gw, nw, TOL32);
  compare_dev("matmul_backward_bf16 dbias", d_gb, gb, OC, TOL32);
  dfree(&dx), dfree(&dw), dfree(&db), dfree(&dout_), dfree(&d_g), dfree(&d_gx), dfree(&d_gw),
      dfree(&d_gb);
  free(x), free(w), free(b), free(xr), free(wr), free(xh), free(wh), free(ref), free(ref32);
  free(g), free(gr), free(gh), free(gx), free(gw), free(gb);
}

/* got (device) against ref (host) with an allowance proportional to the
 * same products on |operands|: |got - ref| <= rtol |ref| + f abs_ref. */
static void compare_dev_scaled(const char *what, const float *dgot, const float *ref,
                               const float *abs_ref, size_t n, double rtol, double f)
{
  float *got = xmalloc(n * sizeof *got);
  dev_to(got, dgot, n * sizeof *got, what);
  size_t nbad = 0;
  double maxr = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    double allowed = rtol * fabs((double)ref[i]) + f * (double)abs_ref[i] + 1e-30;
    if (!(d <= allowed)) {
      if (nbad < 5)
        fprintf(stderr, "  %s[%zu]: cuda %.9g ref %.9g (diff %.3g, allowed %.3g)\n", what, i,
                got[i], ref[i], d, allowed);
      nbad++;
    }
    if (!(d / allowed <= maxr)) maxr = d / allowed;
  }
  CHECK(nbad == 0, "%s: %zu of %zu elements off; worst diff/allowed %.3g", what, nbad, n, maxr);
  if (nbad == 0) printf("  ok %-34s n=%-8zu worst diff/allowed %.3g\n", what, n, maxr);
  free(got);
}

/* [Note: bf16 matmuls]: the table's bf16 entries (what -compute_dtype bf16
 * runs on CUDA) take fp32 operands and round them on the device.
 * Reference: the CPU table's bf16 entries on the same fp32 operands (the
 * same rounding, bf16 products exact in fp32), so only the fp32 summation
 * order differs: 1e-5 |ref| + 2 sqrt(K) 2^-24 sum|terms|, as the fp32
 * matmuls.  Against the unrounded fp32 product: 2^-7 sum|terms| (two
 * operands each rounded to 8 significant bits: relative 2^-8 + 2^-8 per
 * product), which a matmul that skipped the rounding would also pass, so
 * the first comparison is the one that pins the bf16 semantics.  dbias:
 * fp32 column sums of the unrounded dout, as on the CPU.  Then the plan
 * cache: the same shapes again create no new cuBLASLt plan. */
static void test_matmul_bf16_table(int N, int C, int OC, int offset)
{
  char tag[96];
  CHECK(KG->matmul_forward_bf16 && KG->matmul_backward_bf16, "the cuda table has bf16 matmuls");
  if (!KG->matmul_forward_bf16 || !KG->matmul_backward_bf16) return;
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *x = frand(ni, -1, 1), *w = frand(nw, -1, 1), *b = frand(OC, -1, 1);
  float *ref = xmalloc(no * 4), *ref32 = xmalloc(no * 4), *aref = xmalloc(no * 4);
  KC->matmul_forward_bf16(ref, x, w, b, N, C, OC);
  KC->matmul_forward(ref32, x, w, b, N, C, OC);
  float *ax = fabs_copy(x, ni), *aw = fabs_copy(w, nw), *ab = fabs_copy(b, OC);
  KC->matmul_forward(aref, ax, aw, ab, N, C, OC);
  float *bx = dev_zeros((ni + offset) * 4), *bw = dev_zeros((nw + offset) * 4);
  float *dx = bx + offset, *dw = bw + offset;
  TCALL(FsdpCudaMemcpyAsync(dx, x, ni * 4, g_stream));
  TCALL(FsdpCudaMemcpyAsync(dw, w, nw * 4, g_stream));
  float *db = dev_from(b, OC * 4), *dout_ = dev_zeros(no * 4);
  KG->matmul_forward_bf16(dout_, dx, dw, db, N, C, OC);
  const double fK = 2.0 * sqrt((double)C) * ldexp(1.0, -24);
  snprintf(tag, sizeof tag, "bf16 table fwd %dx%dx%d+%d vs cpu bf16", N, C, OC, offset);
  compare_dev_scaled(tag, dout_, ref, aref, no, 1e-5, fK);
  snprintf(tag, sizeof tag, "bf16 table fwd %dx%dx%d vs fp32", N, C, OC);
  compare_dev_scaled(tag, dout_, ref32, aref, no, 0.0, ldexp(1.0, -7));

  int plans0 = 0, plans1 = 0;
  uint64_t hits0 = 0, hits1 = 0, misses0 = 0, misses1 = 0;
  FsdpKernelsCudaGemmPlanStats(&plans0, &hits0, &misses0);

  float *g = frand(no, -1, 1), *gx = frand(ni, -1, 1), *gw = frand(nw, -1, 1),
        *gb = frand(OC, -1, 1);
  float *ag = fabs_copy(g, no), *agx = fabs_copy(gx, ni), *agw = fabs_copy(gw, nw),
        *agb = fabs_copy(gb, OC);
  KC->matmul_backward(agx, agw, agb, ag, ax, aw, N, C, OC);
  float *d_g = dev_from(g, no * 4), *d_gx = dev_from(gx, ni * 4), *d_gw = dev_from(gw, nw * 4),
        *d_gb = dev_from(gb, OC * 4);
  KC->matmul_backward_bf16(gx, gw, gb, g, x, w, N, C, OC);
  KG->matmul_backward_bf16(d_gx, d_gw, d_gb, d_g, dx, dw, N, C, OC);
  compare_dev_scaled("bf16 table dinp vs cpu bf16", d_gx, gx, agx, ni, 1e-5,
                     2.0 * sqrt((double)OC + 1) * ldexp(1.0, -24));
  compare_dev_scaled("bf16 table dweight vs cpu bf16", d_gw, gw, agw, nw, 1e-5,
                     2.0 * sqrt((double)N + 1) * ldexp(1.0, -24));
  compare_dev_scaled("bf16 table dbias (fp32 dout)", d_gb, gb, agb, OC, 1e-5,
                     2.0 * sqrt((double)N + 1) * ldexp(1.0, -24));

  /* [Note: GEMM plans per shape]: the same three shapes again */
  KG->matmul_forward_bf16(dout_, dx, dw, db, N, C, OC);
  KG->matmul_backward_bf16(d_gx, d_gw, NULL, d_g, dx, dw, N, C, OC);
  TCALL(FsdpKernelsCudaSynchronize());
  FsdpKernelsCudaGemmPlanStats(&plans1, &hits1, &misses1);
  int created_bwd = plans1 - plans0;
  CHECK(created_bwd <= 2, "backward created %d plans (at most dinp's and dweight's)", created_bwd);
  CHECK(hits1 - hits0 >= 3, "repeated shapes: %llu cache hits, expected >= 3",
        (unsigned long long)(hits1 - hits0));
  int plans2 = 0;
  uint64_t hits2 = 0, misses2 = 0;
  KG->matmul_forward_bf16(dout_, dx, dw, db, N, C, OC);
  TCALL(FsdpKernelsCudaSynchronize());
  FsdpKernelsCudaGemmPlanStats(&plans2, &hits2, &misses2);
  CHECK(plans2 == plans1 && misses2 == misses1 && hits2 == hits1 + 1,
        "a repeated forward: plans %d -> %d, misses %llu -> %llu, hits +%llu", plans1, plans2,
        (unsigned long long)misses1, (unsigned long long)misses2,
        (unsigned long long)(hits2 - hits1));
  printf("  ok gemm plans: %d cached, %llu hits, %llu created\n", plans2,
         (unsigned long long)hits2, (unsigned long long)misses2);
  dfree(&bx), dfree(&bw), dfree(&db), dfree(&dout_), dfree(&d_g), dfree(&d_gx), dfree(&d_gw),
      dfree(&d_gb);
  free(x), free(w), free(b), free(ref), free(ref32), free(aref), free(ax), free(aw), free(ab);
  free(g), free(gx), free(gw), free(gb), free(ag), free(agx), free(agw), free(agb);
}

/* -tf32 1: fp32 matmuls on TF32 tensor cores.  TF32 keeps 10 mantissa
 * bits of each operand (relative 2^-11 each if rounded, 2^-10 if the
 * hardware truncates), so a product is within 2^-9 relative and a K-term
 * sum within 2^-9 sum|terms| plus fp32's own rounding; allowed: 2^-8
 * sum|terms|.  Exact fp32 (TF32 off) is what test_matmul checks. */
static void test_matmul_tf32(int N, int C, int OC)
{
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *x = frand(ni, -1, 1), *w = frand(nw, -1, 1), *b = frand(OC, -1, 1);
  float *ref = xmalloc(no * 4), *aref = xmalloc(no * 4);
  KC->matmul_forward(ref, x, w, b, N, C, OC);
  float *ax = fabs_copy(x, ni), *aw = fabs_copy(w, nw), *ab = fabs_copy(b, OC);
  KC->matmul_forward(aref, ax, aw, ab, N, C, OC);
  float *dx = dev_from(x, ni * 4), *dw = dev_from(w, nw * 4), *db = dev_from(b, OC * 4),
        *dout_ = dev_zeros(no * 4);
  FsdpKernelsCudaSetTF32(1);
  KG->matmul_forward(dout_, dx, dw, db, N, C, OC);
  FsdpKernelsCudaSetTF32(0);
  TCALL(FsdpKernelsCudaSynchronize());
  compare_dev_scaled("matmul_forward TF32", dout_, ref, aref, no, 1e-5,
                     ldexp(1.0, -8) + 2.0 * sqrt((double)C) * ldexp(1.0, -24));
  dfree(&dx), dfree(&dw), dfree(&db), dfree(&dout_);
  free(x), free(w), free(b), free(ref), free(aref), free(ax), free(aw), free(ab);
}

/* [Note: fused classifier] and [Note: padded vocabulary]: the CUDA fused
 * kernel on (N, Vp) logits whose padded columns hold NaN against (a) the
 * CPU fused kernel on the same input and (b) the CUDA unfused pair
 * (crossentropy_forward + crossentropy_softmax_backward into zeroed
 * dlogits) on the unpadded (N, V) logits; padded columns must come back 0.
 * Tolerances as the unfused kernels': losses 1e-5 (1 + |ref|), gradients
 * 1e-5 |ref| + 1e-7 dloss (probabilities scaled by dloss). */
static void test_fused_classifier(int N, int V, int Vp)
{
  char tag[96];
  CHECK(KG->crossentropy_fused != NULL, "the cuda table has crossentropy_fused");
  if (!KG->crossentropy_fused) return;
  size_t n = (size_t)N * V, np = (size_t)N * Vp;
  float *z = frand(n, -4, 4), *zp = xmalloc(np * 4), *loss = xmalloc(N * 4);
  int *tg = xmalloc(N * sizeof *tg);
  for (int i = 0; i < N; i++) tg[i] = (int)(urand() * V) % V;
  z[(tg[0] + 1) % V] = 100.0f; /* row 0: the target's probability underflows */
  for (int r = 0; r < N; r++)
    for (int v = 0; v < Vp; v++) zp[(size_t)r * Vp + v] = v < V ? z[(size_t)r * V + v] : NAN;
  float dloss = 1.0f / (float)N;
  float *d_zp = dev_from(zp, np * 4), *d_loss = dev_zeros(N * 4);
  int *d_tg = dev_from(tg, N * sizeof *tg);
  KG->crossentropy_fused(d_loss, d_zp, d_tg, dloss, N, V, Vp);
  KC->crossentropy_fused(loss, zp, tg, dloss, N, V, Vp); /* zp: the CPU's gradient now */
  snprintf(tag, sizeof tag, "fused classifier losses V=%d Vp=%d", V, Vp);
  compare_dev(tag, d_loss, loss, N, TOL32);
  snprintf(tag, sizeof tag, "fused classifier grads (pad 0) V=%d", V);
  compare_dev(tag, d_zp, zp, np, 1e-5, 1e-7 * dloss);
  /* against the unfused CUDA pair on the unpadded logits */
  float *d_z = dev_from(z, n * 4), *d_probs = dev_zeros(n * 4), *d_l2 = dev_zeros(N * 4),
        *d_dz = dev_zeros(n * 4);
  KG->crossentropy_forward(d_l2, d_probs, d_z, d_tg, N, V);
  KG->crossentropy_softmax_backward(d_dz, d_probs, d_tg, dloss, N, V);
  float *l2 = xmalloc(N * 4), *dz = xmalloc(n * 4), *fz = xmalloc(np * 4);
  dev_to(l2, d_l2, N * 4, "unfused losses");
  dev_to(dz, d_dz, n * 4, "unfused dlogits");
  compare_dev("fused vs unfused (cuda) losses", d_loss, l2, N, TOL32);
  dev_to(fz, d_zp, np * 4, "fused grads");
  size_t nbad = 0;
  for (int r = 0; r < N; r++)
    for (int v = 0; v < V; v++) {
      float a = fz[(size_t)r * Vp + v], c = dz[(size_t)r * V + v];
      if (!(fabsf(a - c) <= 1e-5f * fabsf(c) + 1e-7f * dloss)) nbad++;
    }
  CHECK(nbad == 0, "fused vs unfused (cuda) gradients: %zu of %zu off", nbad, n);
  if (nbad == 0) printf("  ok %-34s n=%-8zu\n", "fused vs unfused (cuda) grads", n);
  dfree(&d_zp), dfree(&d_loss), dfree(&d_tg), dfree(&d_z), dfree(&d_probs), dfree(&d_l2),
      dfree(&d_dz);
  free(z), free(zp), free(loss), free(tg), free(l2), free(dz), free(fz);
}

/* [Note: fused residual and LayerNorm]: the CUDA kernel (res aliasing
 * inp1, as the GPT block calls it) against the CPU unfused pair; the
 * LayerNorm tolerance of test_layernorm, the residual sums exact. */
static void test_residual_layernorm(int N, int C)
{
  CHECK(KG->residual_layernorm_forward != NULL, "the cuda table has residual_layernorm_forward");
  if (!KG->residual_layernorm_forward) return;
  size_t n = (size_t)N * C;
  float *a = frand(n, 2, 4), *b = frand(n, -1, 1), *w = frand(C, -1, 1), *bb = frand(C, -1, 1);
  float *da = dev_from(a, n * 4), *db = dev_from(b, n * 4), *dw = dev_from(w, C * 4),
        *dbb = dev_from(bb, C * 4);
  float *dout_ = dev_zeros(n * 4), *dm = dev_zeros(N * 4), *dr = dev_zeros(N * 4);
  float *out = xmalloc(n * 4), *m = xmalloc(N * 4), *r = xmalloc(N * 4);
  KC->residual_forward(a, a, b, n);
  KC->layernorm_forward(out, m, r, a, w, bb, N, C);
  KG->residual_layernorm_forward(da, dout_, dm, dr, da, db, dw, dbb, N, C);
  compare_dev("residual_layernorm res", da, a, n, 0.0, 0.0);
  compare_dev("residual_layernorm out", dout_, out, n, TOL32);
  compare_dev("residual_layernorm mean", dm, m, N, TOL32);
  compare_dev("residual_layernorm rstd", dr, r, N, TOL32);
  dfree(&da), dfree(&db), dfree(&dw), dfree(&dbb), dfree(&dout_), dfree(&dm), dfree(&dr);
  free(a), free(b), free(w), free(bb), free(out), free(m), free(r);
}

static void test_attention(int B, int T, int C, int NH)
{
  char tag[96];
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float *qkv = frand(nq, -1, 1), *out = xmalloc(no * 4), *pre = xmalloc(na * 4),
        *att = xmalloc(na * 4);
  KC->attention_forward(out, pre, att, qkv, B, T, C, NH);
  float *dq = dev_from(qkv, nq * 4), *dout_ = dev_zeros(no * 4), *dpre = dev_zeros(na * 4),
        *datt = dev_zeros(na * 4);
  TCALL(FsdpCudaMemsetAsync(dpre, 0xff, na * 4, g_stream)); /* NaN: masked half rewritten */
  TCALL(FsdpCudaMemsetAsync(datt, 0xff, na * 4, g_stream));
  KG->attention_forward(dout_, dpre, datt, dq, B, T, C, NH);
  snprintf(tag, sizeof tag, "attention_forward out T=%d hs=%d", T, C / NH);
  compare_dev(tag, dout_, out, no, TOL32);
  compare_dev("attention_forward preatt", dpre, pre, na, TOL32);
  compare_dev("attention_forward att", datt, att, na, 1e-5, 1e-7);

  float *g = frand(no, -1, 1), *gq = frand(nq, -1, 1), *sp = xmalloc(na * 4),
        *sa = xmalloc(na * 4);
  float *d_g = dev_from(g, no * 4), *d_gq = dev_from(gq, nq * 4), *d_att = dev_from(att, na * 4),
        *d_sp = dev_zeros(na * 4), *d_sa = dev_zeros(na * 4);
  TCALL(FsdpCudaMemsetAsync(d_sp, 0xff, na * 4, g_stream)); /* scratch: NaN garbage */
  TCALL(FsdpCudaMemsetAsync(d_sa, 0xff, na * 4, g_stream));
  KC->attention_backward(gq, sp, sa, g, qkv, att, B, T, C, NH);
  KG->attention_backward(d_gq, d_sp, d_sa, d_g, dq, d_att, B, T, C, NH);
  compare_dev("attention_backward dqkv", d_gq, gq, nq, TOL32);
  compare_dev("attention_backward datt (scratch)", d_sa, sa, na, TOL32);
  compare_dev("attention_backward dpreatt (scratch)", d_sp, sp, na, TOL32);
  dfree(&dq), dfree(&dout_), dfree(&dpre), dfree(&datt), dfree(&d_g), dfree(&d_gq),
      dfree(&d_att), dfree(&d_sp), dfree(&d_sa);
  free(qkv), free(out), free(pre), free(att), free(g), free(gq), free(sp), free(sa);
}

/* [Note: flash attention] on the GPU against the CPU's flash kernels (which
 * test_kernels checks against double references and the naive kernels):
 * fp32 inputs (out, lse, dqkv to TOL32 / 1e-4); bf16 inputs (qkv, dout
 * rounded to bf16 on both sides): out is bf16 (one rounding: 2^-8
 * relative), lse and dqkv fp32 against the CPU on the rounded values and
 * the GPU's own bf16 out.  dqkv accumulates; the scratch is NaN garbage.
 * Shapes: T = 1, T not a multiple of the 32-row tiles, head sizes 12, 64
 * and 128 (the shared-memory opt-in). */
static void test_flash_attention(int B, int T, int C, int NH)
{
  char tag[96];
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
  float *qkv = frand(nq, -1, 1), *out = xmalloc(no * 4), *lse = xmalloc(nl * 4);
  float *g = frand(no, -1, 1), *gq = frand(nq, -1, 1), *scr = xmalloc(nl * 4);
  float *d_qkv = dev_from(qkv, nq * 4), *d_out = dev_zeros(no * 4), *d_lse = dev_zeros(nl * 4);
  float *d_g = dev_from(g, no * 4), *d_gq = dev_from(gq, nq * 4), *d_scr = dev_zeros(nl * 4);
  TCALL(FsdpCudaMemsetAsync(d_scr, 0xff, nl * 4, g_stream));
  KC->flash_attention_forward(out, lse, qkv, B, T, C, NH);
  KG->flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH);
  snprintf(tag, sizeof tag, "flash_attention_forward out B=%d T=%d hs=%d", B, T, C / NH);
  compare_dev(tag, d_out, out, no, TOL32);
  compare_dev("flash_attention_forward lse", d_lse, lse, nl, TOL32);
  KC->flash_attention_backward(gq, scr, g, qkv, out, lse, B, T, C, NH);
  KG->flash_attention_backward(d_gq, d_scr, d_g, d_qkv, d_out, d_lse, B, T, C, NH);
  snprintf(tag, sizeof tag, "flash_attention_backward dqkv B=%d T=%d hs=%d", B, T, C / NH);
  compare_dev(tag, d_gq, gq, nq, 1e-4, 1e-5);

  /* bf16 activations, fp32 statistics and gradients */
  float *qr = xmalloc(nq * 4), *gr = xmalloc(no * 4), *outr = xmalloc(no * 4);
  uint16_t *qh = to_bf16(qkv, nq, qr), *gh = to_bf16(g, no, gr), *oh = xmalloc(no * 2);
  uint16_t *d_qh = dev_from(qh, nq * 2), *d_gh = dev_from(gh, no * 2), *d_oh = dev_zeros(no * 2);
  float *gq2 = frand(nq, -1, 1), *d_gq2 = dev_from(gq2, nq * 4);
  KC->flash_attention_forward(out, lse, qr, B, T, C, NH);
  flash_attention_forward_bf16_cuda(d_oh, d_lse, d_qh, B, T, C, NH);
  dev_to(oh, d_oh, no * 2, "flash_attention_forward_bf16");
  FsdpDtypeToFloat(FSDP_DTYPE_BF16, oh, outr, no);
  float *d_outr = dev_from(outr, no * 4);
  compare_dev("flash_attention_forward_bf16 out (bf16)", d_outr, out, no, 8e-3, 1e-5);
  compare_dev("flash_attention_forward_bf16 lse (fp32)", d_lse, lse, nl, TOL32);
  KC->flash_attention_backward(gq2, scr, gr, qr, outr, lse, B, T, C, NH);
  flash_attention_backward_bf16_cuda(d_gq2, d_scr, d_gh, d_qh, d_oh, d_lse, B, T, C, NH);
  compare_dev("flash_attention_backward_bf16 dqkv (fp32)", d_gq2, gq2, nq, 1e-4, 1e-5);
  dfree(&d_qkv), dfree(&d_out), dfree(&d_lse), dfree(&d_g), dfree(&d_gq), dfree(&d_scr),
      dfree(&d_qh), dfree(&d_gh), dfree(&d_oh), dfree(&d_gq2), dfree(&d_outr);
  free(qkv), free(out), free(lse), free(g), free(gq), free(scr), free(qr), free(gr), free(outr),
      free(qh), free(gh), free(oh), free(gq2);
}

static void test_elementwise(int N)
{
  float *x = frand(N, -6, 6), *y = frand(N, -1, 1), *out = xmalloc(N * 4);
  x[0] = 0.0f, x[1] = 20.0f, x[2] = -20.0f; /* tanh saturation */
  float *dx = dev_from(x, N * 4), *dy = dev_from(y, N * 4), *dout_ = dev_zeros(N * 4);
  KC->gelu_forward(out, x, N);
  KG->gelu_forward(dout_, dx, N);
  compare_dev("gelu_forward", dout_, out, N, TOL32);
  float *g = frand(N, -1, 1), *gx = frand(N, -1, 1);
  float *d_g = dev_from(g, N * 4), *d_gx = dev_from(gx, N * 4);
  KC->gelu_backward(gx, x, g, N);
  KG->gelu_backward(d_gx, dx, d_g, N);
  compare_dev("gelu_backward", d_gx, gx, N, TOL32);

  KC->residual_forward(out, x, y, N);
  KG->residual_forward(dout_, dx, dy, N);
  compare_dev("residual_forward", dout_, out, N, 0.0, 0.0);
  float *g1 = fcopy(gx, N), *g2 = frand(N, -1, 1);
  float *d_g1 = dev_from(g1, N * 4), *d_g2 = dev_from(g2, N * 4);
  KC->residual_backward(g1, g2, g, N);
  KG->residual_backward(d_g1, d_g2, d_g, N);
  compare_dev("residual_backward dinp1", d_g1, g1, N, 0.0, 0.0);
  compare_dev("residual_backward dinp2", d_g2, g2, N, 0.0, 0.0);
  dfree(&dx), dfree(&dy), dfree(&dout_), dfree(&d_g), dfree(&d_gx), dfree(&d_g1), dfree(&d_g2);
  free(x), free(y), free(out), free(g), free(gx), free(g1), free(g2);
}

/* The Llama kernels (kernels/cuda/llama.cu) against the CPU ones: RMSNorm,
 * RoPE forward and backward, SwiGLU, the grouped-query pack (KVH < NH). */
static void test_llama(int B, int T, int NH, int KVH, int HD, int H)
{
  int N = B * T, C = NH * HD, KVC = KVH * HD;
  size_t nC = (size_t)N * C, nK = (size_t)N * KVC, nH = (size_t)N * H;
  float *x = frand(nC, -2, 2), *w = frand(C, 0.5, 1.5), *out = xmalloc(nC * 4), *r = xmalloc(N * 4);
  float *dx = dev_from(x, nC * 4), *dw = dev_from(w, C * 4), *dout_ = dev_zeros(nC * 4),
        *dr = dev_zeros(N * 4);
  KC->rmsnorm_forward(out, r, x, w, N, C, 1e-5f);
  KG->rmsnorm_forward(dout_, dr, dx, dw, N, C, 1e-5f);
  compare_dev("rmsnorm_forward out", dout_, out, nC, TOL32);
  compare_dev("rmsnorm_forward rstd", dr, r, N, 1e-5, 0.0);
  float *g = frand(nC, -1, 1), *gx = frand(nC, -1, 1), *gw = frand(C, -1, 1);
  float *d_g = dev_from(g, nC * 4), *d_gx = dev_from(gx, nC * 4), *d_gw = dev_from(gw, C * 4);
  float *d_r = dev_from(r, N * 4);
  KC->rmsnorm_backward(gx, gw, g, x, w, r, N, C);
  KG->rmsnorm_backward(d_gx, d_gw, d_g, dx, dw, d_r, N, C);
  compare_dev("rmsnorm_backward dinp", d_gx, gx, nC, TOL32);
  compare_dev("rmsnorm_backward dweight", d_gw, gw, C, TOL32);
  KC->rope_forward(out, x, B, T, NH, HD, 500000.0f);
  KG->rope_forward(dout_, dx, B, T, NH, HD, 500000.0f);
  compare_dev("rope_forward", dout_, out, nC, TOL32);
  KC->rope_backward(gx, g, B, T, NH, HD, 10000.0f);
  KG->rope_backward(d_gx, d_g, B, T, NH, HD, 10000.0f);
  compare_dev("rope_backward", d_gx, gx, nC, TOL32);
  float *a = frand(nH, -6, 6), *b = frand(nH, -1, 1), *o = xmalloc(nH * 4), *ga = frand(nH, -1, 1),
        *gb = frand(nH, -1, 1), *go = frand(nH, -1, 1);
  float *da = dev_from(a, nH * 4), *db = dev_from(b, nH * 4), *d_o = dev_zeros(nH * 4),
        *d_ga = dev_from(ga, nH * 4), *d_gb = dev_from(gb, nH * 4), *d_go = dev_from(go, nH * 4);
  KC->swiglu_forward(o, a, b, nH);
  KG->swiglu_forward(d_o, da, db, nH);
  compare_dev("swiglu_forward", d_o, o, nH, TOL32);
  KC->swiglu_backward(ga, gb, go, a, b, nH);
  KG->swiglu_backward(d_ga, d_gb, d_go, da, db, nH);
  compare_dev("swiglu_backward dgate", d_ga, ga, nH, TOL32);
  compare_dev("swiglu_backward dup", d_gb, gb, nH, TOL32);
  float *k = frand(nK, -1, 1), *v = frand(nK, -1, 1), *qkv = xmalloc(3 * nC * 4);
  float *dk = dev_from(k, nK * 4), *dv = dev_from(v, nK * 4), *dqkv = dev_zeros(3 * nC * 4);
  KC->gqa_pack_forward(qkv, x, k, v, B, T, NH, KVH, HD);
  KG->gqa_pack_forward(dqkv, dx, dk, dv, B, T, NH, KVH, HD);
  compare_dev("gqa_pack_forward", dqkv, qkv, 3 * nC, 0.0, 0.0);
  float *gqkv = frand(3 * nC, -1, 1), *gk = frand(nK, -1, 1), *gv = frand(nK, -1, 1);
  float *d_gqkv = dev_from(gqkv, 3 * nC * 4), *d_gk = dev_from(gk, nK * 4),
        *d_gv = dev_from(gv, nK * 4);
  KC->gqa_pack_backward(gx, gk, gv, gqkv, B, T, NH, KVH, HD);
  KG->gqa_pack_backward(d_gx, d_gk, d_gv, d_gqkv, B, T, NH, KVH, HD);
  compare_dev("gqa_pack_backward dq", d_gx, gx, nC, TOL32);
  compare_dev("gqa_pack_backward dk", d_gk, gk, nK, TOL32);
  compare_dev("gqa_pack_backward dv", d_gv, gv, nK, TOL32);
  dfree(&dx), dfree(&dw), dfree(&dout_), dfree(&dr), dfree(&d_g), dfree(&d_gx), dfree(&d_gw);
  dfree(&d_r), dfree(&da), dfree(&db), dfree(&d_o), dfree(&d_ga), dfree(&d_gb), dfree(&d_go);
  dfree(&dk), dfree(&dv), dfree(&dqkv), dfree(&d_gqkv), dfree(&d_gk), dfree(&d_gv);
  free(x), free(w), free(out), free(r), free(g), free(gx), free(gw), free(a), free(b), free(o);
  free(ga), free(gb), free(go), free(k), free(v), free(qkv), free(gqkv), free(gk), free(gv);
}

static void test_crossentropy(int N, int V)
{
  size_t n = (size_t)N * V;
  float *z = frand(n, -4, 4), *probs = xmalloc(n * 4), *loss = xmalloc(N * 4);
  int *tg = xmalloc(N * sizeof *tg);
  for (int i = 0; i < N; i++) tg[i] = (int)(urand() * V) % V;
  z[(size_t)0 * V + (tg[0] + 1) % V] = 100.0f; /* row 0: target prob underflows */
  KC->crossentropy_forward(loss, probs, z, tg, N, V);
  float *dz = dev_from(z, n * 4), *dp = dev_zeros(n * 4), *dl = dev_zeros(N * 4);
  int *dt = dev_from(tg, N * sizeof *tg);
  KG->crossentropy_forward(dl, dp, dz, dt, N, V);
  compare_dev("crossentropy_forward losses", dl, loss, N, TOL32);
  compare_dev("crossentropy_forward probs", dp, probs, n, 1e-5, 1e-7);
  float *g = frand(n, -1, 1), *d_g = dev_from(g, n * 4);
  float dloss = 1.0f / N;
  KC->crossentropy_softmax_backward(g, probs, tg, dloss, N, V);
  float *d_probs = dev_from(probs, n * 4); /* the same probs on both sides */
  KG->crossentropy_softmax_backward(d_g, d_probs, dt, dloss, N, V);
  compare_dev("crossentropy_softmax_backward", d_g, g, n, TOL32);
  dfree(&dz), dfree(&dp), dfree(&dl), dfree(&dt), dfree(&d_g), dfree(&d_probs);
  free(z), free(probs), free(loss), free(tg), free(g);
}

static void test_adamw(size_t n)
{
  float *p = frand(n, -1, 1), *gr = frand(n, -1e-2, 1e-2), *m = frand(n, -1e-3, 1e-3),
        *v = frand(n, 0, 1e-5);
  float *dp = dev_from(p, n * 4), *dg = dev_from(gr, n * 4), *dm = dev_from(m, n * 4),
        *dv = dev_from(v, n * 4);
  for (int t = 1; t <= 3; t++) {
    KC->adamw_update(p, gr, m, v, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    KG->adamw_update(dp, dg, dm, dv, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
  }
  compare_dev("adamw_update param (3 steps)", dp, p, n, 1e-6, 1e-7);
  compare_dev("adamw_update m", dm, m, n, 1e-5, 1e-9);
  compare_dev("adamw_update v", dv, v, n, 1e-5, 1e-12);
  dfree(&dp), dfree(&dg), dfree(&dm), dfree(&dv);
  free(p), free(gr), free(m), free(v);
}

static void test_sum_squares(size_t n)
{
  float *x = frand(n, -3, 3);
  double ref = sum_squares_cpu(x, n);
  float *dx = dev_from(x, n * 4);
  double a = KG->sum_squares(dx, n), b = sum_squares_cuda(dx, n);
  TCALL(FsdpKernelsCudaCheck());
  CHECK(fabs(a - ref) <= 1e-12 * ref, "sum_squares n=%zu: cuda %.17g cpu %.17g", n, a, ref);
  CHECK(memcmp(&a, &b, sizeof a) == 0, "sum_squares not deterministic: %.17g then %.17g", a, b);
  double *dres = dev_zeros(sizeof(double)), hres = 0;
  sum_squares_device_cuda(dres, dx, n);
  dev_to(&hres, dres, sizeof hres, "sum_squares_device_cuda");
  CHECK(memcmp(&a, &hres, sizeof a) == 0, "sum_squares_device_cuda %.17g vs %.17g", hres, a);
  double z = KG->sum_squares(dx, 0);
  CHECK(z == 0.0, "sum_squares of 0 elements: %g", z);
  printf("  ok sum_squares n=%zu rel diff %.3g\n", n, fabs(a - ref) / ref);
  dfree(&dx), dfree(&dres);
  free(x);
}

/* ---- precision helpers ------------------------------------------------------ */

static void test_casts(size_t n)
{
  float *x = frand(n, -70000, 70000);
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65520.0f,
                           -65519.0f, 1e-8f, 6e-8f, -3e-5f, 1.0f + 1.0f / 256, 3.4e38f,
                           1.17549435e-38f, 1.0f + 3.0f / 512};
  for (size_t i = 0; i < sizeof special / sizeof special[0] && i < n; i++) x[i] = special[i];
  for (size_t i = 16; i < n; i += 7) x[i] *= 1e-6f; /* small values, fp16 subnormals */
  float *dx = dev_from(x, n * 4);
  for (int dt = FSDP_DTYPE_BF16; dt <= FSDP_DTYPE_FP16; dt++) {
    const char *name = FsdpDtypeNames[dt];
    uint16_t *ref = xmalloc(n * 2), *got = xmalloc(n * 2);
    FsdpDtypeFromFloat((FsdpDtype)dt, x, ref, n);
    uint16_t *dh = dev_zeros(n * 2);
    cast_from_float_cuda(dh, (FsdpDtype)dt, dx, n);
    dev_to(got, dh, n * 2, "cast_from_float_cuda");
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
      if (got[i] != ref[i]) {
        if (bad < 5)
          fprintf(stderr, "  cast fp32->%s [%zu] %.9g: cuda 0x%04x host 0x%04x\n", name, i, x[i],
                  got[i], ref[i]);
        bad++;
      }
    CHECK(bad == 0, "cast fp32 -> %s: %zu of %zu differ from lib/base/dtype.h", name, bad, n);
    /* back to fp32 (exact), and add_scaled into fp32 */
    float *back = xmalloc(n * 4), *gb = xmalloc(n * 4);
    FsdpDtypeToFloat((FsdpDtype)dt, ref, back, n);
    float *dback = dev_zeros(n * 4);
    cast_to_float_cuda(dback, dh, (FsdpDtype)dt, n);
    dev_to(gb, dback, n * 4, "cast_to_float_cuda");
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&gb[i], &back[i], 4) != 0;
    CHECK(bad == 0, "cast %s -> fp32: %zu of %zu differ", name, bad, n);
    /* scale in place (one rounding, as coll_mpi.c does on the host) */
    uint16_t *sref = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++)
      sref[i] = dt == FSDP_DTYPE_BF16 ? FsdpFloatToBf16(FsdpBf16ToFloat(ref[i]) * 0.375f)
                                      : FsdpFloatToFp16(FsdpFp16ToFloat(ref[i]) * 0.375f);
    scale_inplace_cuda(dh, (FsdpDtype)dt, 0.375f, n);
    dev_to(got, dh, n * 2, "scale_inplace_cuda");
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != sref[i];
    CHECK(bad == 0, "scale_inplace %s: %zu of %zu differ", name, bad, n);
    if (!bad) printf("  ok casts fp32<->%s, scale_inplace: bit-identical (n=%zu)\n", name, n);
    dfree(&dh), dfree(&dback);
    free(ref), free(got), free(back), free(gb), free(sref);
  }
  /* add_scaled: dst (fp32) += scale * src (bf16) on finite values */
  size_t m = n - 16;
  float *acc = frand(m, -1, 1), *src = frand(m, -10, 10), *srcr = xmalloc(m * 4);
  uint16_t *sh = to_bf16(src, m, srcr);
  float *ref = xmalloc(m * 4);
  for (size_t i = 0; i < m; i++) ref[i] = acc[i] + 0.25f * srcr[i];
  float *dacc = dev_from(acc, m * 4);
  uint16_t *dsh = dev_from(sh, m * 2);
  add_scaled_cuda(dacc, dsh, FSDP_DTYPE_BF16, 0.25f, m);
  compare_dev("add_scaled bf16 -> fp32", dacc, ref, m, 1e-7, 0.0);
  float *d32 = dev_from(src, m * 4);
  for (size_t i = 0; i < m; i++) ref[i] += -2.0f * src[i];
  add_scaled_cuda(dacc, d32, FSDP_DTYPE_FP32, -2.0f, m);
  compare_dev("add_scaled fp32 -> fp32", dacc, ref, m, 1e-6, 1e-6);
  dfree(&dx), dfree(&dacc), dfree(&dsh), dfree(&d32);
  free(x), free(acc), free(src), free(srcr), free(sh), free(ref);
}

static void test_nonfinite(size_t n)
{
  int *flag = dev_zeros(sizeof(int)), h = -1;
  for (int dt = FSDP_DTYPE_FP32; dt <= FSDP_DTYPE_FP16; dt++) {
    float *x = frand(n, -100, 100);
    void *hx = xmalloc(n * 4);
    FsdpDtypeFromFloat((FsdpDtype)dt, x, hx, n);
    void *dx = dev_from(hx, n * FsdpDtypeSize((FsdpDtype)dt));
    TCALL(FsdpCudaMemsetAsync(flag, 0, sizeof(int), g_stream));
    nonfinite_check_cuda(flag, dx, (FsdpDtype)dt, n);
    dev_to(&h, flag, sizeof h, "nonfinite_check_cuda");
    CHECK(h == 0, "nonfinite_check %s: finite data flagged", FsdpDtypeNames[dt]);
    for (int k = 0; k < 2; k++) { /* an inf near the end, then a NaN at 0 */
      size_t at = k == 0 ? n - 3 : 0;
      x[at] = k == 0 ? INFINITY : NAN;
      FsdpDtypeFromFloat((FsdpDtype)dt, x, hx, n);
      TCALL(FsdpCudaMemcpyAsync(dx, hx, n * FsdpDtypeSize((FsdpDtype)dt), g_stream));
      TCALL(FsdpCudaMemsetAsync(flag, 0, sizeof(int), g_stream));
      nonfinite_check_cuda(flag, dx, (FsdpDtype)dt, n);
      dev_to(&h, flag, sizeof h, "nonfinite_check_cuda");
      CHECK(h == 1, "nonfinite_check %s: %s at %zu not flagged", FsdpDtypeNames[dt],
            k == 0 ? "inf" : "NaN", at);
    }
    dfree(&dx);
    free(x), free(hx);
  }
  printf("  ok nonfinite_check fp32/bf16/fp16\n");
  dfree(&flag);
}

/* ---- errors, device selection, NCCL ---------------------------------------- */

static void test_error_path(void)
{
  attention_forward_cuda(NULL, NULL, NULL, NULL, 1, 4, 10, 4); /* C % NH != 0 */
  residual_forward_cuda(NULL, NULL, NULL, 4);                  /* skipped after an error */
  int err = FsdpKernelsCudaCheck();
  CHECK(err == FSDP_ERR_INTERNAL && strstr(FsdpErrorLastMessage(), "C % NH == 0"),
        "bad shape: code %d, message '%s'", err, FsdpErrorLastMessage());
  err = FsdpKernelsCudaCheck();
  CHECK(err == FSDP_SUCCESS, "the error is cleared once raised (got %d)", err);
  /* flash attention's shared-memory tiles hold at most FA_MAX_HS (128)
   * channels a head: hs 256 is refused, not run out of bounds */
  flash_attention_forward_cuda(NULL, NULL, NULL, 1, 4, 1024, 4);
  err = FsdpKernelsCudaCheck();
  CHECK(err == FSDP_ERR_INTERNAL && strstr(FsdpErrorLastMessage(), "FA_MAX_HS"),
        "flash attention at hs 256: code %d, message '%s'", err, FsdpErrorLastMessage());
}

static void *bound_device_of_new_thread(void *arg)
{
  int *out = arg;
  if (FsdpCudaBindThread() == FSDP_SUCCESS) cudaGetDevice(out);
  return NULL;
}

static void test_select_device(int ngpus)
{
  /* the shortage messages are tested without a GPU (test_gpu_select.c);
   * here: the chosen device is current, on this thread and, once bound,
   * on another */
  int dev = -1;
  int err = FsdpCudaSelectDevice(MPI_COMM_WORLD, &dev);
  CHECK(err == FSDP_SUCCESS && dev >= 0 && dev < ngpus && FsdpCudaCurrentDevice() == dev,
        "select a device: code %d, device %d of %d", err, dev, ngpus);
  int cur = -1;
  cudaGetDevice(&cur);
  CHECK(cur == dev, "current device %d, selected %d", cur, dev);
  pthread_t th;
  int other = -2;
  if (pthread_create(&th, NULL, bound_device_of_new_thread, &other) == 0) {
    pthread_join(th, NULL);
    CHECK(other == dev, "a bound thread's device: %d, selected %d", other, dev);
  }
  char desc[256];
  TCALL(FsdpCudaDeviceDescribe(dev, desc, sizeof desc));
  printf("  device %d: %s\n", dev, desc);
}

/* NCCL at one rank: all-gather in place, reduce-scatter with a scale
 * (ncclPreMulSum), all-reduce; blocking and async with a device wait. */
static void test_nccl_w1(void)
{
  int wsize = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  if (wsize != 1) return;
  FsdpGroup g = {MPI_COMM_WORLD, 1, 0, 0, 0, "world"};
  FsdpColl c = NULL;
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_NCCL, &c));
  TCALL(FsdpCollSetCudaStreams(c, NULL, g_stream));
  TCALL(FsdpCollAttach(c, &g));
  const size_t n = 4097;
  float *x = frand(n, -1, 1), *ref = xmalloc(n * 4);
  float *dx = dev_from(x, n * 4), *dy = dev_zeros(n * 4);
  TCALL(FsdpCollAllGather(c, &g, dx, dx, n, FSDP_DTYPE_FP32));
  compare_dev("nccl all-gather (W=1, in place)", dx, x, n, 0.0, 0.0);
  TCALL(FsdpCollReduceScatter(c, &g, dx, dy, n, FSDP_DTYPE_FP32, 0.25f));
  for (size_t i = 0; i < n; i++) ref[i] = x[i] * 0.25f;
  compare_dev("nccl reduce-scatter scale 1/4", dy, ref, n, 0.0, 0.0);
  TCALL(FsdpCollAllReduce(c, &g, dy, n, FSDP_DTYPE_FP32, 4.0f));
  compare_dev("nccl all-reduce scale 4", dy, x, n, 0.0, 0.0);
  /* bf16 async: the compute stream waits on the device, then a kernel
   * lands the result in fp32 (add_scaled) */
  float *xr = xmalloc(n * 4);
  uint16_t *xh = to_bf16(x, n, xr), *dh = dev_from(xh, n * 2), *dh2 = dev_zeros(n * 2);
  FsdpStream s = NULL;
  TCALL(FsdpStreamCreate("nccl-wait", 8, &s));
  FsdpEvent ev;
  TCALL(FsdpCollReduceScatterAsync(c, &g, dh, dh2, n, FSDP_DTYPE_BF16, 0.5f, s, &ev));
  TCALL(FsdpCollWaitDevice(c, ev, g_stream));
  float *acc = dev_zeros(n * 4);
  add_scaled_cuda(acc, dh2, FSDP_DTYPE_BF16, 2.0f, n);
  compare_dev("nccl reduce-scatter bf16 async (x0.5, x2)", acc, xr, n, 0.0, 0.0);
  TCALL(FsdpEventWait(ev));
  TCALL(FsdpStreamDestroy(&s));
  TCALL(FsdpCollDestroy(&c));
  dfree(&dx), dfree(&dy), dfree(&dh), dfree(&dh2), dfree(&acc);
  free(x), free(ref), free(xr), free(xh);
}

/* Checks that need no GPU: they run everywhere, before the skip. */
static void test_without_device(void)
{
  residual_forward_cuda(NULL, NULL, NULL, 4); /* before init */
  int err = FsdpKernelsCudaCheck();
  CHECK(err == FSDP_ERR_STATE && strstr(FsdpErrorLastMessage(), "FsdpKernelsCudaInit"),
        "kernel before init: code %d, message '%s'", err, FsdpErrorLastMessage());
  err = FsdpKernelsCudaInit(0, NULL);
  CHECK(err == FSDP_ERR_CUDA && strlen(FsdpErrorLastMessage()) > 0,
        "init without a device: code %d, message '%s'", err, FsdpErrorLastMessage());
  int dev = 0;
  err = FsdpCudaSelectDevice(MPI_COMM_WORLD, &dev);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "no usable GPU") && dev == -1,
        "select without a device: code %d, message '%s'", err, FsdpErrorLastMessage());
  FsdpColl c = NULL;
  err = FsdpCollCreate(FSDP_COLL_BACKEND_NCCL, &c);
  CHECK(err == FSDP_ERR_USAGE && c == NULL && strstr(FsdpErrorLastMessage(), "NCCL"),
        "NCCL without a device: code %d, message '%s'", err, FsdpErrorLastMessage());
  void *s = NULL;
  err = FsdpCudaMalloc(FSDP_MEM_OTHER, 16, &s);
  CHECK(err != FSDP_SUCCESS && s == NULL, "device malloc without a device: code %d", err);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int ngpus = 0;
  TCALL(FsdpCudaDeviceCount(&ngpus));
  if (ngpus == 0) {
    test_without_device();
    int status = test_finish("test_kernels_cuda (no device)");
    if (rank == 0 && status == 0)
      printf("no CUDA device: skipped (%s)\n", FsdpCudaProbeMessage());
    TCALL(FsdpFinalize());
    return status ? status : 77;
  }
  int wsize = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  if (wsize != 1) { /* device selection and NCCL here assume one rank */
    if (rank == 0) printf("test_kernels_cuda runs on one rank: skipped at %d\n", wsize);
    TCALL(FsdpFinalize());
    return 77;
  }
  {
    test_select_device(ngpus);
    TCALL(FsdpCudaStreamCreate(0, &g_stream));
    TCALL(FsdpKernelsCudaInit(0, g_stream));
    KC = FsdpKernelsCpu();
    KG = FsdpKernelsCuda();
    CHECK(strcmp(KG->name, "cuda") == 0, "table name '%s'", KG->name);
    test_encoder(2, 33, 48, 101);
    test_layernorm(66, 48);
    test_layernorm(7, 130);
    test_residual_layernorm(66, 48);
    test_residual_layernorm(1024, 768); /* gpt2 at T=1024 */
    test_matmul(66, 48, 144, 1, 0);
    test_matmul(37, 48, 35, 0, 1);  /* odd shapes, no bias, 4-byte aligned */
    test_matmul(64, 768, 2304, 1, 3);
    test_matmul_bf16(66, 48, 144);
    test_matmul_bf16(37, 64, 35);
    /* -compute_dtype bf16 and -tf32 ([Note: bf16 compute] in runtime/fsdp.h) */
    test_matmul_bf16_table(66, 48, 144, 0);
    test_matmul_bf16_table(37, 48, 35, 1); /* odd shapes, 4-byte aligned */
    test_matmul_bf16_table(1024, 768, 2304, 0); /* gpt2's qkv at T=1024 */
    test_matmul_tf32(256, 768, 768);
    test_attention(2, 33, 48, 4);
    test_attention(1, 70, 36, 3);
    test_flash_attention(1, 1, 8, 2);
    test_flash_attention(2, 33, 48, 4);
    test_flash_attention(1, 70, 36, 3);
    test_flash_attention(2, 130, 256, 4);
    test_flash_attention(1, 100, 256, 2);
    test_elementwise(10007);
    test_llama(2, 33, 8, 2, 16, 100);
    test_llama(1, 5, 3, 1, 6, 7);
    test_crossentropy(9, 1001);
    test_fused_classifier(9, 1001, fsdp_padded_vocab(1001));
    test_fused_classifier(70, 50257, fsdp_padded_vocab(50257)); /* gpt2's head, > 66 rows */
    test_adamw(100003);
    test_sum_squares(1000003);
    test_sum_squares(5);
    test_casts(4099);
    test_nonfinite(3001);
    test_error_path();
    test_nccl_w1();
    FsdpCudaMemStats st;
    FsdpCudaMemGetStats(&st);
    CHECK(st.allocated == 0 && st.alloc_retries == 0 && st.alloc_failures == 0,
          "device memory at the end: %zu bytes allocated, %llu retries, %llu failures",
          st.allocated, (unsigned long long)st.alloc_retries,
          (unsigned long long)st.alloc_failures);
    printf("  device memory: peak %zu bytes, %llu allocations, %llu retries\n", st.peak,
           (unsigned long long)st.num_allocs, (unsigned long long)st.alloc_retries);
    TCALL(FsdpKernelsCudaFinalize());
    TCALL(FsdpCudaStreamDestroy(&g_stream));
  }
  int status = test_finish("test_kernels_cuda");
  TCALL(FsdpFinalize());
  return status;
}
