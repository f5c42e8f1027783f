/* cuda_call.h: error adapters for CUDA / cuBLAS / NCCL status codes, for
 * the files of the CUDA back-end only (cuda_util.c, device_cuda.c,
 * coll_nccl.c: built by configure --with-cuda, so this header may include
 * the CUDA headers; not installed). */
#ifndef FSDP_CUDA_CALL_H
#define FSDP_CUDA_CALL_H

#include "base/error.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

/* Adapters: relay a CUDA / cuBLAS / NCCL status as FSDP_ERR_CUDA /
 * FSDP_ERR_NCCL with the library's own message. */
#define FSDP_CALL_CUDA(expr)                                                    \
  do {                                                                          \
    cudaError_t fsdp_cuda_err_ = (expr);                                        \
    if (fsdp_cuda_err_ != cudaSuccess)                                          \
      FSDP_ERROR(FSDP_ERR_CUDA, "%s failed: %s (%s)", #expr,                    \
                 cudaGetErrorString(fsdp_cuda_err_),                            \
                 cudaGetErrorName(fsdp_cuda_err_));                             \
  } while (0)

#define FSDP_CALL_CUBLAS(expr)                                                  \
  do {                                                                          \
    cublasStatus_t fsdp_cublas_st_ = (expr);                                    \
    if (fsdp_cublas_st_ != CUBLAS_STATUS_SUCCESS)                               \
      FSDP_ERROR(FSDP_ERR_CUDA, "%s failed: %s", #expr,                         \
                 cublasGetStatusString(fsdp_cublas_st_));                       \
  } while (0)

#define FSDP_CALL_NCCL(expr)                                                    \
  do {                                                                          \
    ncclResult_t fsdp_nccl_res_ = (expr);                                       \
    if (fsdp_nccl_res_ != ncclSuccess)                                          \
      FSDP_ERROR(FSDP_ERR_NCCL, "%s failed: %s", #expr,                         \
                 ncclGetErrorString(fsdp_nccl_res_));                           \
  } while (0)

#endif
