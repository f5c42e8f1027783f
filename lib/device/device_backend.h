/* device_backend.h: what a device back-end gives device.c (not installed).
 *
 * [Note: one file per back-end] Each back-end of device.h is one file that
 * fills an FsdpDeviceBackend: device_cpu.c (always built) and
 * device_cuda.c (built by configure --with-cuda; automake conditional
 * FSDP_CUDA).  device.c picks the table at FsdpDeviceSetUp and forwards
 * every FsdpDevice* call to it, so no shared file tests for CUDA (configure
 * defines no such macro: the file list is the only switch).
 * A CPU-only build links cuda_none.c instead of device_cuda.c and
 * cuda_util.c: FsdpDeviceCudaBackend() is NULL there, which device.c
 * turns into the usage error for -device cuda. */
#ifndef FSDP_DEVICE_BACKEND_H
#define FSDP_DEVICE_BACKEND_H

#include "device/device.h"

typedef struct {
  /* Collective on the topology's world; makes the device current. */
  int (*set_up)(FsdpTopo topo);
  int (*finalize)(void); /* releases what set_up made */
  const FsdpKernelOps *(*kernels)(void);
  void *(*compute_stream)(void);
  int (*describe)(char *buf, size_t size);
  int (*alloc)(FsdpMemTag tag, size_t bytes, void *ptr);
  int (*free)(void *ptr);
  int (*zero)(void *p, size_t bytes); /* p != NULL, bytes > 0 */
  /* Either direction (unified addressing); the host side is usable on
   * return.  bytes > 0. */
  int (*copy)(void *dst, const void *src, size_t bytes);
  int (*cast_from_float)(FsdpDtype to, const float *src, void *dst, size_t n);
  int (*cast_to_float)(FsdpDtype from, const void *src, float *dst, size_t n);
  int (*add_scaled)(float *dst, const void *src, FsdpDtype dt, float scale, size_t n);
  int (*any_nonfinite)(const float *x, size_t n, int *bad); /* n > 0 */
  int (*check)(void);
  int (*synchronize)(void);
  /* 1 and *s filled where the back-end keeps device memory statistics;
   * 0 where it has none (the CPU: FsdpMemGetStats covers host memory). */
  int (*mem_stats)(FsdpDeviceMemStats *s);
  /* fp32 GEMMs on TF32 tensor cores (1) or in true fp32 (0); NULL where
   * the back-end has no such choice (the CPU). */
  int (*set_tf32)(int on);
  /* [Note: one readback per step] (device.h): count > 0, every n[i] > 0 */
  int (*sum_squares_many)(const float *const *x, const size_t *n, int count, double *sq);
  int (*any_nonfinite_many)(const float *const *x, const size_t *n, int count, int *bad);
} FsdpDeviceBackend;

const FsdpDeviceBackend *FsdpDeviceCpuBackend(void);  /* device_cpu.c */
/* device_cuda.c; NULL from cuda_none.c in a build without CUDA. */
const FsdpDeviceBackend *FsdpDeviceCudaBackend(void);

#endif
