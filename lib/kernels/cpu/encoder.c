/* encoder.c: token + position embedding (CPU). */
#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

/* out (B,T,C) = wte (V,C)[inp[b,t]] + wpe (maxT,C)[t]. */
void encoder_forward_cpu(float *out, const int *inp, const float *wte,
                         const float *wpe, int B, int T, int C)
{
  #pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    float *restrict o = out + (size_t)bt * C;
    const float *restrict we = wte + (size_t)inp[bt] * C;
    const float *restrict pe = wpe + (size_t)(bt % T) * C;
    #pragma omp simd
    for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
  }
}

/* dwte[inp[b,t]] += dout[b,t]; dwpe[t] += dout[b,t].  Two positions may
 * hold the same token, so tasks own column blocks and walk all positions
 * in order [Note: deterministic CPU kernels]. */
void encoder_backward_cpu(float *dwte, float *dwpe, const float *dout,
                          const int *inp, int B, int T, int C)
{
  int nblk = (C + FSDP_CPU_COLBLOCK - 1) / FSDP_CPU_COLBLOCK;
  #pragma omp parallel for schedule(static)
  for (int k = 0; k < nblk; k++) {
    int c0 = k * FSDP_CPU_COLBLOCK;
    int c1 = c0 + FSDP_CPU_COLBLOCK < C ? c0 + FSDP_CPU_COLBLOCK : C;
    for (int bt = 0; bt < B * T; bt++) {
      const float *restrict d = dout + (size_t)bt * C;
      float *restrict we = dwte + (size_t)inp[bt] * C;
      float *restrict pe = dwpe + (size_t)(bt % T) * C;
      #pragma omp simd
      for (int c = c0; c < c1; c++) {
        we[c] += d[c];
        pe[c] += d[c];
      }
    }
  }
}
