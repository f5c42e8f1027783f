/* attention_bench: naive vs flash attention on the CPU back-end, side by
 * side ([Note: flash attention], kernels/cpu/attention.c).  For each shape
 * B T C NH: the median of REPS forward and forward+backward calls of each
 * kind, the ratio naive/flash (above 1: flash is faster) and the bytes
 * each keeps for backward.  make bench/attention_bench; run as
 *   bench/attention_bench [REPS]
 * under the bench lock (bench/README.md). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "lib/median.h" /* bench/lib/median.h */

static float *Buf(size_t n, unsigned seed)
{
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fprintf(stderr, "attention_bench: out of memory (%zu floats)\n", n);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u + seed) % 1000) * 2e-3f - 1.0f;
  return p;
}

int main(int argc, char **argv)
{
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1 || reps > 1000) {
    fprintf(stderr, "usage: attention_bench [REPS 1..1000]\n");
    return 2;
  }
  const FsdpKernelOps *k = FsdpKernelsCpu();
  /* the tests' and benches' shapes: test_kernels' largest, the training
   * tests' T = 130, gpt2 heads (hs 64) at T = 256 and 1024 */
  const int shapes[][4] = {{1, 257, 256, 4}, {2, 130, 64, 4}, {4, 256, 768, 12}, {2, 1024, 768, 12}};
  printf("threads %d, BLAS core %s, median of %d\n", omp_get_max_threads(), FsdpKernelsCpuBlasCore(),
         reps);
  printf("%-18s %10s %10s %6s %10s %10s %6s %12s %12s\n", "B,T,C,NH", "naive fwd", "flash fwd",
         "ratio", "naive f+b", "flash f+b", "ratio", "naive MiB", "flash MiB");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T,
           nl = (size_t)B * NH * T;
    float *qkv = Buf(nq, 1), *dout = Buf(no, 2), *out = Buf(no, 3), *dqkv = Buf(nq, 4);
    float *pre = Buf(na, 5), *att = Buf(na, 6), *dpre = Buf(na, 7), *datt = Buf(na, 8);
    float *lse = Buf(nl, 9), *scr = Buf(nl, 10);
    double t[4][1000], med[4];
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
      double t0 = omp_get_wtime();
      k->attention_forward(out, pre, att, qkv, B, T, C, NH);
      double t1 = omp_get_wtime();
      k->attention_backward(dqkv, dpre, datt, dout, qkv, att, B, T, C, NH);
      double t2 = omp_get_wtime();
      k->flash_attention_forward(out, lse, qkv, B, T, C, NH);
      double t3 = omp_get_wtime();
      k->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH);
      double t4 = omp_get_wtime();
      if (r < 0) continue;
      t[0][r] = t1 - t0;
      t[1][r] = t2 - t0;
      t[2][r] = t3 - t2;
      t[3][r] = t4 - t2;
    }
    for (int i = 0; i < 4; i++) med[i] = BenchMedian(t[i], reps);
    char name[48];
    snprintf(name, sizeof name, "%d,%d,%d,%d", B, T, C, NH);
    /* kept for backward (and backward scratch): naive preatt + att and
     * dpreatt + datt; flash lse and the row sums */
    printf("%-18s %8.2fms %8.2fms %6.2f %8.2fms %8.2fms %6.2f %12.1f %12.3f\n", name,
           1e3 * med[0], 1e3 * med[2], med[0] / med[2], 1e3 * med[1], 1e3 * med[3],
           med[1] / med[3], 4.0 * 4 * na / 1048576.0, 2.0 * 4 * nl / 1048576.0);
    free(qkv); free(dout); free(out); free(dqkv); free(pre); free(att); free(dpre); free(datt);
    free(lse); free(scr);
  }
  return 0;
}
