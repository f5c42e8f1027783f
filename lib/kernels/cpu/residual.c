/* residual.c: residual connection (CPU).  Elementwise, so out may alias
 * inp1 or inp2 (no restrict here on purpose). */
#include "kernels/kernels.h"
#include "kernels/cpu/kernels_cpu.h"

/* out (N) = inp1 + inp2. */
void residual_forward_cpu(float *out, const float *inp1, const float *inp2,
                          size_t N)
{
  #pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

/* dinp1 += dout; dinp2 += dout. */
void residual_backward_cpu(float *dinp1, float *dinp2, const float *dout,
                           size_t N)
{
  #pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < N; i++) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}
