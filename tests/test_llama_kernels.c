/* test_llama_kernels.c: the Llama kernels (kernels/cpu/llama.c) on the CPU.
 *
 * - forward against double-precision references written here (RMSNorm
 *   with its eps; RoPE as transformers writes it, q*cos + rotate_half(q)*sin
 *   with rotate_half(x) = cat(-x2, x1) and cos/sin of cat(freqs, freqs);
 *   SwiGLU; grouped-query causal attention with head h reading kv head
 *   h / (NH/KVH), for KVH = NH, 2 and 1), |got - ref| <= 1e-5 (1 + |ref|);
 * - backward against central differences of L = sum(out * R) (R fixed
 *   random, h = 1e-3): per element |a - n| <= 1e-2 |n| + 1e-3 max|n|;
 * - [Note: backward accumulates]: a second backward doubles every gradient.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
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

static float *frand(size_t n, double lo, double hi)
{
  float *x = calloc(n, sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
  return x;
}

static float *fzero(size_t n) { return calloc(n, sizeof(float)); }

static void expect_close(const char *what, const float *got, const double *ref, size_t n)
{
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs(got[i] - ref[i]) / (1.0 + fabs(ref[i]));
    if (e > worst) worst = e, at = i;
  }
  CHECK(worst <= 1e-5, "%s: element %zu is %.8g, reference %.8g", what, at, got[at], ref[at]);
}

/* ---- a kernel under test: forward fills out from the inputs, backward
 * accumulates the inputs' gradients from dout ------------------------------ */

typedef struct Case Case;
struct Case {
  const char *name;
  int nin;
  float *in[3];
  size_t nin_el[3];
  float *out;
  size_t nout;
  void (*forward)(Case *c);
  void (*backward)(Case *c, const float *dout, float *const *din);
  int p[8]; /* shape ints */
  float f;  /* eps / theta */
  float *scratch[4];
};

static double objective(Case *c, const float *R)
{
  c->forward(c);
  double L = 0.0;
  for (size_t i = 0; i < c->nout; i++) L += (double)c->out[i] * R[i];
  return L;
}

/* Gradients against central differences, and accumulation. */
static void check_backward(Case *c)
{
  float *R = frand(c->nout, -1.0, 1.0);
  float *din[3] = {0};
  for (int k = 0; k < c->nin; k++) din[k] = fzero(c->nin_el[k]);
  c->forward(c);
  c->backward(c, R, din);
  for (int k = 0; k < c->nin; k++) {
    size_t n = c->nin_el[k];
    double *num = calloc(n, sizeof *num), mx = 0.0;
    for (size_t i = 0; i < n; i++) {
      float x0 = c->in[k][i];
      const float h = 1e-3f;
      c->in[k][i] = x0 + h;
      double lp = objective(c, R);
      c->in[k][i] = x0 - h;
      double lm = objective(c, R);
      c->in[k][i] = x0;
      num[i] = (lp - lm) / (2.0 * h);
      mx = fmax(mx, fabs(num[i]));
    }
    int bad = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
      if (fabs(din[k][i] - num[i]) > 1e-2 * fabs(num[i]) + 1e-3 * mx) {
        if (!bad) at = i;
        bad++;
      }
    CHECK(bad == 0 && mx > 0, "%s: gradient of input %d: %d of %zu elements off, first [%zu] "
          "analytic %.6g numeric %.6g (max|numeric| %.3g)", c->name, k, bad, n, at, din[k][at],
          num[at], mx);
    free(num);
  }
  /* a second backward adds the same again */
  float *once[3] = {0};
  for (int k = 0; k < c->nin; k++) {
    once[k] = malloc(c->nin_el[k] * sizeof(float));
    memcpy(once[k], din[k], c->nin_el[k] * sizeof(float));
  }
  c->forward(c);
  c->backward(c, R, din);
  for (int k = 0; k < c->nin; k++) {
    int ok = 1;
    for (size_t i = 0; i < c->nin_el[k]; i++)
      ok &= fabs(din[k][i] - 2.0f * once[k][i]) <= 1e-5 * (1.0 + fabs(once[k][i]));
    CHECK(ok, "%s: backward does not accumulate into input %d's gradient", c->name, k);
    free(once[k]);
    free(din[k]);
  }
  free(R);
}

/* ---- RMSNorm -------------------------------------------------------------- */

static void rms_fwd(Case *c)
{
  K->rmsnorm_forward(c->out, c->scratch[0], c->in[0], c->in[1], c->p[0], c->p[1], c->f);
}
static void rms_bwd(Case *c, const float *dout, float *const *din)
{
  K->rmsnorm_backward(din[0], din[1], dout, c->in[0], c->in[1], c->scratch[0], c->p[0], c->p[1]);
}

static void test_rmsnorm(void)
{
  int N = 6, C = 20;
  float eps = 1e-2f; /* large, so that a missing eps is visible */
  Case c = {"rmsnorm", 2, {frand((size_t)N * C, -2, 2), frand(C, 0.5, 1.5)}, {(size_t)N * C, C},
            fzero((size_t)N * C), (size_t)N * C, rms_fwd, rms_bwd, {N, C}, eps, {fzero(N)}};
  c.forward(&c);
  double *ref = calloc((size_t)N * C, sizeof *ref);
  for (int n = 0; n < N; n++) {
    double ss = 0.0;
    for (int i = 0; i < C; i++) ss += (double)c.in[0][n * C + i] * c.in[0][n * C + i];
    double r = 1.0 / sqrt(ss / C + eps);
    for (int i = 0; i < C; i++) ref[n * C + i] = c.in[0][n * C + i] * r * c.in[1][i];
  }
  expect_close("rmsnorm forward", c.out, ref, (size_t)N * C);
  check_backward(&c);
  free(ref);
  free(c.in[0]), free(c.in[1]), free(c.out), free(c.scratch[0]);
}

/* ---- RoPE ----------------------------------------------------------------- */

static void rope_fwd(Case *c)
{
  K->rope_forward(c->out, c->in[0], c->p[0], c->p[1], c->p[2], c->p[3], c->f);
}
static void rope_bwd(Case *c, const float *dout, float *const *din)
{
  K->rope_backward(din[0], dout, c->p[0], c->p[1], c->p[2], c->p[3], c->f);
}

static void test_rope(void)
{
  int B = 2, T = 7, NH = 3, HD = 8;
  float theta = 500000.0f;
  size_t n = (size_t)B * T * NH * HD;
  Case c = {"rope", 1, {frand(n, -1, 1)}, {n}, fzero(n), n, rope_fwd, rope_bwd, {B, T, NH, HD},
            theta, {0}};
  c.forward(&c);
  /* transformers: inv_freq[j] = 1/theta^(2j/HD); emb = cat(freqs, freqs);
   * q_embed = q cos(emb) + rotate_half(q) sin(emb), rotate_half = cat(-x2, x1) */
  double *ref = calloc(n, sizeof *ref);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *x = c.in[0] + (((size_t)b * T + t) * NH + h) * HD;
        double *y = ref + (((size_t)b * T + t) * NH + h) * HD;
        for (int i = 0; i < HD; i++) {
          int j = i % (HD / 2);
          double emb = t * (1.0 / pow(theta, 2.0 * j / HD));
          double rot = i < HD / 2 ? -x[i + HD / 2] : x[i - HD / 2];
          y[i] = x[i] * cos(emb) + rot * sin(emb);
        }
      }
  expect_close("rope forward", c.out, ref, n);
  /* position 0 is the identity, and later positions really rotate */
  int moved = 0;
  for (size_t i = 0; i < n; i++) moved |= fabs(c.out[i] - c.in[0][i]) > 1e-3;
  CHECK(moved, "rope forward: nothing rotated");
  check_backward(&c);
  free(ref);
  free(c.in[0]), free(c.out);
}

/* ---- SwiGLU --------------------------------------------------------------- */

static void swiglu_fwd(Case *c) { K->swiglu_forward(c->out, c->in[0], c->in[1], c->nout); }
static void swiglu_bwd(Case *c, const float *dout, float *const *din)
{
  K->swiglu_backward(din[0], din[1], dout, c->in[0], c->in[1], c->nout);
}

static void test_swiglu(void)
{
  size_t n = 64;
  Case c = {"swiglu", 2, {frand(n, -4, 4), frand(n, -2, 2)}, {n, n}, fzero(n), n, swiglu_fwd,
            swiglu_bwd, {0}, 0, {0}};
  c.forward(&c);
  double *ref = calloc(n, sizeof *ref);
  for (size_t i = 0; i < n; i++) {
    double g = c.in[0][i];
    ref[i] = g / (1.0 + exp(-g)) * c.in[1][i];
  }
  expect_close("swiglu forward", c.out, ref, n);
  check_backward(&c);
  free(ref);
  free(c.in[0]), free(c.in[1]), free(c.out);
}

/* ---- grouped-query causal attention: pack + attention --------------------- */

static void gqa_fwd(Case *c)
{
  int B = c->p[0], T = c->p[1], NH = c->p[2], KVH = c->p[3], HD = c->p[4];
  K->gqa_pack_forward(c->scratch[0], c->in[0], c->in[1], c->in[2], B, T, NH, KVH, HD);
  K->attention_forward(c->out, c->scratch[1], c->scratch[2], c->scratch[0], B, T, NH * HD, NH);
}
static void gqa_bwd(Case *c, const float *dout, float *const *din)
{
  int B = c->p[0], T = c->p[1], NH = c->p[2], KVH = c->p[3], HD = c->p[4];
  size_t C = (size_t)NH * HD, att = (size_t)B * NH * T * T;
  float *dqkv = fzero((size_t)B * T * 3 * C), *dpre = fzero(att), *datt = fzero(att);
  K->attention_backward(dqkv, dpre, datt, dout, c->scratch[0], c->scratch[2], B, T, (int)C, NH);
  K->gqa_pack_backward(din[0], din[1], din[2], dqkv, B, T, NH, KVH, HD);
  free(dqkv), free(dpre), free(datt);
}

static void test_gqa(int KVH)
{
  int B = 2, T = 5, NH = 4, HD = 4;
  size_t C = (size_t)NH * HD, KC = (size_t)KVH * HD, BT = (size_t)B * T;
  size_t att = (size_t)B * NH * T * T;
  char name[32];
  snprintf(name, sizeof name, "gqa(kv %d)", KVH);
  Case c = {name, 3, {frand(BT * C, -1, 1), frand(BT * KC, -1, 1), frand(BT * KC, -1, 1)},
            {BT * C, BT * KC, BT * KC}, fzero(BT * C), BT * C, gqa_fwd, gqa_bwd,
            {B, T, NH, KVH, HD}, 0, {fzero(BT * 3 * C), fzero(att), fzero(att)}};
  c.forward(&c);
  double *ref = calloc(BT * C, sizeof *ref);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int g = h / (NH / KVH);
      for (int t = 0; t < T; t++) {
        const float *q = c.in[0] + ((size_t)b * T + t) * C + (size_t)h * HD;
        double s[16], mx = -1e300, z = 0.0;
        for (int u = 0; u <= t; u++) {
          const float *k = c.in[1] + ((size_t)b * T + u) * KC + (size_t)g * HD;
          double d = 0.0;
          for (int i = 0; i < HD; i++) d += (double)q[i] * k[i];
          s[u] = d / sqrt((double)HD);
          mx = fmax(mx, s[u]);
        }
        for (int u = 0; u <= t; u++) z += (s[u] = exp(s[u] - mx));
        double *y = ref + ((size_t)b * T + t) * C + (size_t)h * HD;
        for (int u = 0; u <= t; u++) {
          const float *v = c.in[2] + ((size_t)b * T + u) * KC + (size_t)g * HD;
          for (int i = 0; i < HD; i++) y[i] += s[u] / z * v[i];
        }
      }
    }
  expect_close(name, c.out, ref, BT * C);
  check_backward(&c);
  free(ref);
  for (int k = 0; k < 3; k++) free(c.in[k]), free(c.scratch[k]);
  free(c.out);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  K = FsdpKernelsCpu();
  if (rank == 0) {
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_gqa(4);
    test_gqa(2);
    test_gqa(1);
  }
  int rc = test_finish("test_llama_kernels");
  FsdpFinalize();
  return rc;
}
