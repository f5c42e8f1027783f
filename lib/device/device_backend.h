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
  /* Collective on world (every rank); makes the device current.
   * allow_share: ranks may share a GPU; *shared = 1 on every rank when
   * some do (FsdpDeviceSetUpShared). */
  int (*set_up)(MPI_Comm world, int allow_share, int *shared);
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
  /* Host memory the device copies fastest (CUDA: pinned), for staging
   * buffers; free takes &ptr and accepts NULL. */
  int (*host_alloc)(size_t bytes, void *ptr);
  int (*host_free)(void *ptr);
  int (*cast_from_float)(FsdpDtype to, const float *src, void *dst, size_t n);
  int (*cast_to_float)(FsdpDtype from, const void *src, float *dst, size_t n);
  int (*add_scaled)(float *dst, const void *src, FsdpDtype dt, float scale, size_t n);
  int (*any_nonfinite)(const float *x, size_t n, int *bad); /* n > 0 */
  int (*check)(void);
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
/* The CUDA back-end: loaded from libfsdp-cuda.so on first use in a CUDA
 * build (cuda_module.c, [Note: the CUDA module] in cuda_module.h), NULL
 * when that fails or in a build without CUDA (cuda_none.c). */
const FsdpDeviceBackend *FsdpDeviceCudaBackend(void);
/* 1 in a CUDA build, without loading anything. */
int FsdpDeviceCudaBuilt(void);
/* Why FsdpDeviceCudaBackend() is NULL ("" when it is not): no CUDA in
 * this build, or the module's path and dlerror(). */
const char *FsdpDeviceCudaMissing(void);

#endif
