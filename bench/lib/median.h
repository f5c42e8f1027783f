/* median.h: the median of a bench program's timings, shared by
 * attention_bench.c, reduce_scatter_bench.c and ckpt_io.c (each took the
 * median of its repeats with a copy of its own).  Header-only: the
 * programs are built one source file each (Makefile.am, EXTRA_PROGRAMS). */
#ifndef FSDP_BENCH_MEDIAN_H
#define FSDP_BENCH_MEDIAN_H

#include <stdlib.h>

static inline int BenchCmpDouble(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n-1] (n >= 1), sorting v in place; the mean of the
 * two middle values when n is even. */
static inline double BenchMedian(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, BenchCmpDouble);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
