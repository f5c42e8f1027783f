/* llama.c: the kernels a Llama block adds to the GPT ones (CPU): RMSNorm,
 * rotary position embedding (rotate-half), SwiGLU and the grouped-query
 * head repeat.  Shapes and semantics: kernels.h.  Deterministic
 * ([Note: deterministic CPU kernels]): sums over rows into a shared
 * vector (dweight) run in row order, split over column blocks. */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/rope.h"

/* out (N,C) = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps). */
void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int N,
                         int C, float eps)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float *o = out + (size_t)n * C;
    float ss = 0.0f;
    #pragma omp simd reduction(+:ss)
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    float r = 1.0f / sqrtf(ss / C + eps);
    #pragma omp simd
    for (int c = 0; c < C; c++) o[c] = x[c] * r * weight[c];
    rstd[n] = r;
  }
}

/* dinp += r (g - xhat mean(g xhat)), g = dout w, xhat = x r;
 * dweight += sum over rows of dout xhat. */
void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, const float *rstd, int N, int C)
{
  #pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
    float *di = dinp + (size_t)n * C;
    float r = rstd[n], gx = 0.0f;
    #pragma omp simd reduction(+:gx)
    for (int c = 0; c < C; c++) gx += d[c] * weight[c] * x[c] * r;
    gx /= C;
    #pragma omp simd
    for (int c = 0; c < C; c++) di[c] += r * (d[c] * weight[c] - x[c] * r * gx);
  }
  int nblk = (C + FSDP_CPU_COLBLOCK - 1) / FSDP_CPU_COLBLOCK;
  #pragma omp parallel for schedule(static)
  for (int b = 0; b < nblk; b++) {
    int c0 = b * FSDP_CPU_COLBLOCK, c1 = c0 + FSDP_CPU_COLBLOCK < C ? c0 + FSDP_CPU_COLBLOCK : C;
    for (int n = 0; n < N; n++) {
      const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
      float r = rstd[n];
      for (int c = c0; c < c1; c++) dweight[c] += d[c] * x[c] * r;
    }
  }
}

/* Rotate x (B,T,NH,HD) in pairs (j, j + HD/2) by the angle of (t, j)
 * (kernels/rope.h): sign +1 forward, -1 (the transpose) backward; out = or
 * += by acc.  The angle once per (t, j), for every batch row and head. */
static void rope_apply(float *out, const float *inp, int B, int T, int NH, int HD, float theta,
                       float sign, int acc)
{
  int half = HD / 2;
  #pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++)
    for (int j = 0; j < half; j++) {
      float c, s;
      FsdpRopeCosSin(t, j, HD, theta, sign, &c, &s);
      for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
          FsdpRopeRotatePair(out, inp, (((size_t)b * T + t) * NH + h) * HD, j, half, c, s, acc);
    }
}

void rope_forward_cpu(float *out, const float *inp, int B, int T, int NH, int HD, float theta)
{
  rope_apply(out, inp, B, T, NH, HD, theta, 1.0f, 0);
}

void rope_backward_cpu(float *dinp, const float *dout, int B, int T, int NH, int HD, float theta)
{
  rope_apply(dinp, dout, B, T, NH, HD, theta, -1.0f, 1);
}

/* out = silu(gate) * up. */
void swiglu_forward_cpu(float *out, const float *gate, const float *up, size_t n)
{
  #pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

/* dgate += dout up silu'(gate), dup += dout silu(gate);
 * silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). */
void swiglu_backward_cpu(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n)
{
  #pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float g = gate[i], s = 1.0f / (1.0f + expf(-g));
    dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
    dup[i] += dout[i] * g * s;
  }
}

/* qkv (B,T,3C), C = NH*HD: Q from q (B,T,NH,HD); K and V of head h from
 * kv head h / (NH/KVH) of k, v (B,T,KVH,HD) (transformers' repeat_kv). */
void gqa_pack_forward_cpu(float *qkv, const float *q, const float *k, const float *v, int B,
                          int T, int NH, int KVH, int HD)
{
  size_t C = (size_t)NH * HD, KC = (size_t)KVH * HD;
  int rep = NH / KVH;
  #pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    float *o = qkv + (size_t)bt * 3 * C;
    memcpy(o, q + (size_t)bt * C, C * sizeof(float));
    for (int h = 0; h < NH; h++) {
      size_t src = (size_t)bt * KC + (size_t)(h / rep) * HD;
      memcpy(o + C + (size_t)h * HD, k + src, (size_t)HD * sizeof(float));
      memcpy(o + 2 * C + (size_t)h * HD, v + src, (size_t)HD * sizeof(float));
    }
  }
}

/* dq += dQ; dk, dv += the sums of dK, dV over the heads sharing a kv head. */
void gqa_pack_backward_cpu(float *dq, float *dk, float *dv, const float *dqkv, int B, int T,
                           int NH, int KVH, int HD)
{
  size_t C = (size_t)NH * HD, KC = (size_t)KVH * HD;
  int rep = NH / KVH;
  #pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    const float *d = dqkv + (size_t)bt * 3 * C;
    for (size_t c = 0; c < C; c++) dq[(size_t)bt * C + c] += d[c];
    for (int h = 0; h < NH; h++) {
      size_t dst = (size_t)bt * KC + (size_t)(h / rep) * HD;
      for (int i = 0; i < HD; i++) {
        dk[dst + i] += d[C + (size_t)h * HD + i];
        dv[dst + i] += d[2 * C + (size_t)h * HD + i];
      }
    }
  }
}
