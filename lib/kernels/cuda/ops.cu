/* ops.cu: the CUDA back-end's FsdpKernelOps table, its set-up and
 * teardown (device, stream, cuBLAS/cuBLASLt handles, workspaces) and the
 * check that raises a recorded error ([Note: CUDA kernel errors] in
 * common.cuh).  The state and the error recording every kernel file uses
 * are in state.cu: the kernel files depend on it, the table on them. */
#include <stdio.h>
#include <string.h>

#include "common.cuh"

/* cuBLASLt workspace: 32 MiB is what NVIDIA recommends for Hopper (and
 * what llm.c uses); smaller GPUs need less but gain nothing from less. */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define SUMSQ_PARTIALS 1024 /* must match SUMSQ_MAX_BLOCKS in adamw.cu */

static int zero_cuda(void *p, size_t bytes)
{
  if (!p || !bytes) return FSDP_SUCCESS;
  cudaError_t e = cudaMemsetAsync(p, 0, bytes, cuda_state.stream);
  if (e != cudaSuccess)
    FSDP_ERROR(FSDP_ERR_CUDA, "zeroing %zu device bytes: %s", bytes, cudaGetErrorString(e));
  return FSDP_SUCCESS;
}

/* Both directions: unified addressing lets one copy serve; waiting for the
 * compute stream makes the host side usable (or reusable) on return. */
static int copy_cuda(void *dst, const void *src, size_t bytes)
{
  if (!bytes) return FSDP_SUCCESS;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_state.stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cuda_state.stream);
  if (e != cudaSuccess)
    FSDP_ERROR(FSDP_ERR_CUDA, "copying %zu bytes between host and device: %s", bytes,
               cudaGetErrorString(e));
  return FSDP_SUCCESS;
}

static const FsdpKernelOps cuda_ops = {
    "cuda",
    encoder_forward_cuda,
    encoder_backward_cuda,
    layernorm_forward_cuda,
    layernorm_backward_cuda,
    matmul_forward_cuda,
    matmul_backward_cuda,
    attention_forward_cuda,
    attention_backward_cuda,
    gelu_forward_cuda,
    gelu_backward_cuda,
    residual_forward_cuda,
    residual_backward_cuda,
    crossentropy_forward_cuda,
    crossentropy_softmax_backward_cuda,
    adamw_update_cuda,
    sum_squares_cuda,
    rmsnorm_forward_cuda,
    rmsnorm_backward_cuda,
    rope_forward_cuda,
    rope_backward_cuda,
    swiglu_forward_cuda,
    swiglu_backward_cuda,
    gqa_pack_forward_cuda,
    gqa_pack_backward_cuda,
    alloc_cuda,
    free_cuda,
    zero_cuda,
    copy_cuda,
    copy_cuda,
    matmul_forward_bf16_rounding_cuda, /* [Note: bf16 matmuls] */
    matmul_backward_bf16_rounding_cuda,
    crossentropy_fused_cuda, /* [Note: fused classifier] */
    residual_layernorm_forward_cuda, /* [Note: fused residual and LayerNorm] */
    flash_attention_forward_cuda, /* [Note: flash attention] */
    flash_attention_backward_cuda,
};

extern "C" const FsdpKernelOps *FsdpKernelsCuda(void) { return &cuda_ops; }

/* Init/Finalize report through the fsdp convention directly. */
#define INIT_CALL_CUDA(expr)                                                    \
  do {                                                                          \
    cudaError_t init_err_ = (expr);                                             \
    if (init_err_ != cudaSuccess) {                                             \
      FsdpKernelsCudaFinalize();                                                \
      FSDP_ERROR(FSDP_ERR_CUDA, "CUDA kernels on device %d: %s failed: %s",     \
                 device, #expr, cudaGetErrorString(init_err_));                 \
    }                                                                           \
  } while (0)

#define INIT_CALL_CUBLAS(expr)                                                  \
  do {                                                                          \
    cublasStatus_t init_st_ = (expr);                                           \
    if (init_st_ != CUBLAS_STATUS_SUCCESS) {                                    \
      FsdpKernelsCudaFinalize();                                                \
      FSDP_ERROR(FSDP_ERR_CUDA, "CUDA kernels on device %d: %s failed: %s",     \
                 device, #expr, cublasGetStatusString(init_st_));               \
    }                                                                           \
  } while (0)

extern "C" int FsdpKernelsCudaInit(int device, void *stream)
{
  FsdpKernelsCudaFinalize();
  cuda_state.device = device;
  INIT_CALL_CUDA(cudaSetDevice(device));
  INIT_CALL_CUDA(cudaDeviceGetAttribute(&cuda_state.sm_count, cudaDevAttrMultiProcessorCount,
                                        device));
  cuda_state.stream = (cudaStream_t)stream;
  INIT_CALL_CUBLAS(cublasCreate(&cuda_state.blas));
  INIT_CALL_CUBLAS(cublasSetStream(cuda_state.blas, cuda_state.stream));
  /* Plain fp32 unless TF32 is asked for (FsdpKernelsCudaSetTF32). */
  INIT_CALL_CUBLAS(cublasSetMathMode(cuda_state.blas, cuda_state.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                      : CUBLAS_DEFAULT_MATH));
  INIT_CALL_CUBLAS(cublasLtCreate(&cuda_state.lt));
  INIT_CALL_CUDA(cudaMalloc(&cuda_state.lt_workspace, LT_WORKSPACE_BYTES));
  cuda_state.lt_workspace_size = LT_WORKSPACE_BYTES;
  INIT_CALL_CUBLAS(cublasSetWorkspace(cuda_state.blas, cuda_state.lt_workspace,
                                      cuda_state.lt_workspace_size));
  INIT_CALL_CUDA(cudaMalloc((void **)&cuda_state.sumsq_partial,
                            SUMSQ_PARTIALS * sizeof(double)));
  INIT_CALL_CUDA(cudaMalloc((void **)&cuda_state.sumsq_result, sizeof(double)));
  INIT_CALL_CUDA(cudaMallocHost((void **)&cuda_state.sumsq_host, sizeof(double)));
  cuda_state.err_code = FSDP_SUCCESS;
  cuda_state.err_msg[0] = '\0';
  cuda_state.initialized = 1;
  return FSDP_SUCCESS;
}

extern "C" int FsdpKernelsCudaFinalize(void)
{
  /* Best effort: a finalize after a device error must still free what it
   * can, so statuses are not checked. */
  if (cuda_state.lt) lt_plans_release();
  bf16_scratch_release();
  if (cuda_state.blas) cublasDestroy(cuda_state.blas);
  if (cuda_state.lt) cublasLtDestroy(cuda_state.lt);
  if (cuda_state.lt_workspace) cudaFree(cuda_state.lt_workspace);
  if (cuda_state.sumsq_partial) cudaFree(cuda_state.sumsq_partial);
  if (cuda_state.sumsq_result) cudaFree(cuda_state.sumsq_result);
  if (cuda_state.sumsq_host) cudaFreeHost(cuda_state.sumsq_host);
  int tf32 = cuda_state.tf32;
  memset(&cuda_state, 0, sizeof cuda_state);
  cuda_state.tf32 = tf32;
  return FSDP_SUCCESS;
}

extern "C" int FsdpKernelsCudaSetStream(void *stream)
{
  if (!cuda_state.initialized)
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpKernelsCudaSetStream before FsdpKernelsCudaInit");
  cuda_state.stream = (cudaStream_t)stream;
  cublasStatus_t st = cublasSetStream(cuda_state.blas, cuda_state.stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    FSDP_ERROR(FSDP_ERR_CUDA, "cublasSetStream failed: %s", cublasGetStatusString(st));
  return FSDP_SUCCESS;
}

extern "C" void *FsdpKernelsCudaStream(void) { return (void *)cuda_state.stream; }

extern "C" void FsdpKernelsCudaSetTF32(int on)
{
  cuda_state.tf32 = on ? 1 : 0;
  if (cuda_state.blas) {
    /* reported by the next FsdpKernelsCudaCheck, like a failed launch */
    cublasStatus_t st =
        cublasSetMathMode(cuda_state.blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    if (st != CUBLAS_STATUS_SUCCESS)
      cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "cublasSetMathMode (TF32 %s) failed: %s",
                        on ? "on" : "off", cublasGetStatusString(st));
  }
}

extern "C" int FsdpKernelsCudaCheck(void)
{
  int code = cuda_state.err_code;
  if (code == FSDP_SUCCESS) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return FSDP_SUCCESS;
    cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__, "CUDA error after a kernel: %s",
                      cudaGetErrorString(e));
    code = cuda_state.err_code;
  }
  char msg[sizeof cuda_state.err_msg];
  memcpy(msg, cuda_state.err_msg, sizeof msg);
  cuda_state.err_code = FSDP_SUCCESS;
  cuda_state.err_msg[0] = '\0';
  FSDP_ERROR(code, "CUDA kernel: %s", msg);
}

extern "C" int FsdpKernelsCudaSynchronize(void)
{
  if (cuda_state.initialized) {
    cudaError_t e = cudaStreamSynchronize(cuda_state.stream);
    if (e != cudaSuccess)
      cuda_record_error(FSDP_ERR_CUDA, __FILE__, __LINE__,
                        "while the compute stream ran: %s", cudaGetErrorString(e));
  }
  FSDP_CALL(FsdpKernelsCudaCheck());
  return FSDP_SUCCESS;
}
