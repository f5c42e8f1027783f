/* test_gpu_host.c: the host-side pieces of the GPU head and GEMM path,
 * on the CPU (the CUDA back-end uses the same code; test_kernels_cuda
 * checks the device side where a GPU is):
 * - [Note: GEMM plans per shape] (kernels/gemm_plan.h): one slot per
 *   distinct key, found again on every later call (hits), a different
 *   slot when any one field differs, a full table answers -1 without
 *   losing the cached keys, a dropped slot is created again;
 * - [Note: padded vocabulary]: 50257 -> 50304, multiples stay, small V;
 * - [Note: fused classifier]: the CPU crossentropy_fused equals
 *   crossentropy_forward + crossentropy_softmax_backward into zeroed
 *   dlogits (losses and gradients within 1e-6 (1 + |ref|): only the order
 *   of vectorized sums may differ), with the padded columns of the input
 *   holding NaN (never read) and written as 0;
 * - [Note: fused residual and LayerNorm]: the CPU residual_layernorm_forward
 *   equals residual_forward then layernorm_forward bit for bit, with res
 *   aliasing inp1 as the GPT block calls it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/init.h"
#include "kernels/gemm_plan.h"
#include "kernels/kernels.h"
#include "testutil.h"

static FsdpGemmKey key_of(int m, int n, int k)
{
  FsdpGemmKey key;
  memset(&key, 0, sizeof key);
  key.m = m, key.n = n, key.k = k, key.lda = k, key.ldb = k, key.ldd = m;
  key.ta = 1, key.ab_type = 0, key.compute = 68, key.epilogue = 1;
  key.align_a = key.align_b = key.align_d = 256;
  return key;
}

static void test_plan_table(void)
{
  static FsdpGemmPlanTable t; /* large: not on the stack */
  FsdpGemmPlanReset(&t);
  int created = -1;
  FsdpGemmKey a = key_of(2304, 64, 768);
  int sa = FsdpGemmPlanSlot(&t, &a, &created);
  CHECK(sa >= 0 && created == 1, "first lookup: slot %d created %d", sa, created);
  for (int i = 0; i < 10; i++) {
    int s = FsdpGemmPlanSlot(&t, &a, &created);
    CHECK(s == sa && created == 0, "repeat %d: slot %d (want %d) created %d", i, s, sa, created);
  }
  CHECK(t.count == 1 && t.hits == 10 && t.misses == 1, "count %d hits %llu misses %llu", t.count,
        (unsigned long long)t.hits, (unsigned long long)t.misses);
  /* every field is part of the key */
  for (int f = 0; f < 14; f++) {
    FsdpGemmKey b = a;
    switch (f) {
    case 0: b.m++; break;
    case 1: b.n++; break;
    case 2: b.k++; break;
    case 3: b.lda++; break;
    case 4: b.ldb++; break;
    case 5: b.ldd++; break;
    case 6: b.ta = 0; break;
    case 7: b.tb = 1; break;
    case 8: b.ab_type = 14; break;
    case 9: b.compute = 77; break;
    case 10: b.epilogue = 0; break;
    case 11: b.align_a = 4; break;
    case 12: b.align_b = 8; break;
    case 13: b.align_d = 16; break;
    }
    int s = FsdpGemmPlanSlot(&t, &b, &created);
    CHECK(s >= 0 && s != sa && created == 1, "field %d changed: slot %d (a's %d) created %d", f,
          s, sa, created);
  }
  CHECK(t.count == 15, "15 distinct keys, count %d", t.count);
  /* fill the table; the next new key finds no room, the old ones stay */
  int n = 0;
  while (t.count < FSDP_GEMM_PLAN_SLOTS && n < 10 * FSDP_GEMM_PLAN_SLOTS) {
    FsdpGemmKey c = key_of(1000 + n, 7, 9);
    (void)FsdpGemmPlanSlot(&t, &c, &created);
    n++;
  }
  CHECK(t.count == FSDP_GEMM_PLAN_SLOTS, "filled: count %d", t.count);
  FsdpGemmKey z = key_of(5, 5, 5);
  int sz = FsdpGemmPlanSlot(&t, &z, &created);
  CHECK(sz == -1 && created == 0 && t.full == 1, "full table: slot %d created %d full %llu", sz,
        created, (unsigned long long)t.full);
  CHECK(FsdpGemmPlanSlot(&t, &a, &created) == sa && created == 0, "a survives a full table");
  FsdpGemmKey c0 = key_of(1000, 7, 9);
  int s0 = FsdpGemmPlanSlot(&t, &c0, &created);
  CHECK(s0 >= 0 && created == 0, "a filler key is still found: slot %d created %d", s0, created);
  /* a dropped slot (its creation failed) is created again, and the keys
   * probed past it are still found */
  FsdpGemmPlanDrop(&t, sa);
  for (int i = 0; i < n; i++) {
    FsdpGemmKey c = key_of(1000 + i, 7, 9);
    int s = FsdpGemmPlanSlot(&t, &c, &created);
    CHECK(s >= 0 && created == 0, "after a drop, filler %d: slot %d created %d", i, s, created);
  }
  int sa2 = FsdpGemmPlanSlot(&t, &a, &created);
  CHECK(sa2 >= 0 && created == 1, "dropped key: slot %d created %d", sa2, created);
  FsdpGemmPlanReset(&t);
  CHECK(t.count == 0 && FsdpGemmPlanSlot(&t, &a, &created) >= 0 && created == 1, "reset");
}

static void test_padded_vocab(void)
{
  CHECK(fsdp_padded_vocab(50257) == 50304, "50257 -> %d", fsdp_padded_vocab(50257));
  CHECK(fsdp_padded_vocab(50304) == 50304, "50304 -> %d", fsdp_padded_vocab(50304));
  CHECK(fsdp_padded_vocab(1) == 128, "1 -> %d", fsdp_padded_vocab(1));
  CHECK(fsdp_padded_vocab(128) == 128 && fsdp_padded_vocab(129) == 256, "128, 129");
  CHECK(fsdp_padded_vocab(32000) == 32000, "32000 -> %d", fsdp_padded_vocab(32000));
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
  rng += 0x9E3779B97F4A7C15ull;
  uint64_t z = rng;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}

/* fused on (N, Vp) with NaN padding against the unfused pair on (N, V) */
static void test_fused_classifier(int N, int V, int Vp)
{
  const FsdpKernelOps *k = FsdpKernelsCpu();
  CHECK(k->crossentropy_fused != NULL, "the CPU table has crossentropy_fused");
  if (!k->crossentropy_fused) return;
  size_t n = (size_t)N * V, np = (size_t)N * Vp;
  float *z = malloc(n * 4), *zp = malloc(np * 4), *probs = malloc(n * 4), *dz = calloc(n, 4);
  float *loss = malloc(N * 4), *lossf = malloc(N * 4);
  int *tg = malloc(N * sizeof *tg);
  for (int r = 0; r < N; r++) {
    tg[r] = (int)((unsigned)(frand() * 1e6f + 4e6f) % (unsigned)V);
    for (int v = 0; v < Vp; v++) {
      float x = v < V ? frand() : NAN;
      if (v < V) z[(size_t)r * V + v] = x;
      zp[(size_t)r * Vp + v] = x;
    }
  }
  z[(tg[0] + 1) % V] = zp[(tg[0] + 1) % V] = 100.0f; /* row 0: target's prob underflows */
  float dloss = 1.0f / (float)N;
  k->crossentropy_forward(loss, probs, z, tg, N, V);
  k->crossentropy_softmax_backward(dz, probs, tg, dloss, N, V);
  k->crossentropy_fused(lossf, zp, tg, dloss, N, V, Vp);
  int bad_loss = 0, bad_grad = 0, bad_pad = 0;
  for (int r = 0; r < N; r++) {
    if (!(fabsf(lossf[r] - loss[r]) <= 1e-6f * (1 + fabsf(loss[r])))) bad_loss++;
    for (int v = 0; v < Vp; v++) {
      float g = zp[(size_t)r * Vp + v];
      if (v >= V) {
        if (g != 0.0f) bad_pad++;
      } else {
        float ref = dz[(size_t)r * V + v];
        if (!(fabsf(g - ref) <= 1e-6f * (1 + fabsf(ref)))) bad_grad++;
      }
    }
  }
  CHECK(bad_loss == 0, "fused N=%d V=%d Vp=%d: %d losses off (row 0: %g vs %g)", N, V, Vp,
        bad_loss, lossf[0], loss[0]);
  CHECK(isfinite(lossf[0]) && lossf[0] > 50.0f, "row 0 loss %g: finite and large", lossf[0]);
  CHECK(bad_grad == 0, "fused N=%d V=%d Vp=%d: %d gradients off", N, V, Vp, bad_grad);
  CHECK(bad_pad == 0, "fused N=%d V=%d Vp=%d: %d padded columns not 0", N, V, Vp, bad_pad);
  free(z), free(zp), free(probs), free(dz), free(loss), free(lossf), free(tg);
}

static void test_residual_layernorm(int N, int C)
{
  const FsdpKernelOps *k = FsdpKernelsCpu();
  CHECK(k->residual_layernorm_forward != NULL, "the CPU table has residual_layernorm_forward");
  if (!k->residual_layernorm_forward) return;
  size_t n = (size_t)N * C;
  float *a = malloc(n * 4), *b = malloc(n * 4), *a2 = malloc(n * 4), *w = malloc(C * 4),
        *bb = malloc(C * 4);
  float *o1 = malloc(n * 4), *o2 = malloc(n * 4), *m1 = malloc(N * 4), *m2 = malloc(N * 4),
        *r1 = malloc(N * 4), *r2 = malloc(N * 4);
  for (size_t i = 0; i < n; i++) a[i] = a2[i] = frand() + 3.0f, b[i] = frand();
  for (int c = 0; c < C; c++) w[c] = frand(), bb[c] = frand();
  k->residual_forward(a, a, b, n);
  k->layernorm_forward(o1, m1, r1, a, w, bb, N, C);
  k->residual_layernorm_forward(a2, o2, m2, r2, a2, b, w, bb, N, C); /* res aliases inp1 */
  CHECK(memcmp(a, a2, n * 4) == 0, "fused residual (N=%d C=%d) differs from residual_forward", N,
        C);
  CHECK(memcmp(o1, o2, n * 4) == 0, "fused LayerNorm out (N=%d C=%d) differs", N, C);
  CHECK(memcmp(m1, m2, N * 4) == 0 && memcmp(r1, r2, N * 4) == 0, "fused mean/rstd differ");
  free(a), free(b), free(a2), free(w), free(bb), free(o1), free(o2), free(m1), free(m2), free(r1),
      free(r2);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  test_plan_table();
  test_padded_vocab();
  test_fused_classifier(7, 1001, fsdp_padded_vocab(1001));
  test_fused_classifier(3, 50257, fsdp_padded_vocab(50257));
  test_fused_classifier(5, 64, 64); /* no padding */
  test_residual_layernorm(67, 48);
  test_residual_layernorm(3, 770);
  int status = test_finish("test_gpu_host");
  TCALL(FsdpFinalize());
  return status;
}
