/* kernels_cuda.h: the CUDA back-end of the compute kernels (kernels/cuda).
 *
 * Every FsdpKernelOps entry of kernels.h with the same shapes and the same
 * semantics ([Note: backward accumulates]; attention_backward overwrites
 * its datt/dpreatt scratch), operating on DEVICE pointers, plus the extra
 * device functions the FSDP runtime needs on a GPU: fp32 <-> bf16/fp16
 * casts, "add scaled into fp32" (landing a reduced low-precision gradient
 * in the fp32 gradient shard), sum of squares in double, an inf/NaN check,
 * and bf16 matmuls with fp32 accumulation (-param_dtype bf16).
 *
 * Usage (one compute thread per process, one GPU per rank):
 *   FsdpKernelsCudaInit(device, stream);    // after FsdpCudaSelectDevice
 *   const FsdpKernelOps *k = FsdpKernelsCuda();
 *   k->matmul_forward(out, inp, w, b, N, C, OC);  // async on `stream`
 *   ...
 *   FSDP_CALL(FsdpKernelsCudaCheck());       // once per unit / step
 *   FsdpKernelsCudaFinalize();
 *
 * Every launch goes to the compute stream given at init (NULL: the legacy
 * default stream) and returns at once; only sum_squares (which returns a
 * host double) and FsdpKernelsCudaSynchronize wait.  Errors: see [Note:
 * CUDA kernel errors] in common.cuh.  Not thread-safe: the compute thread
 * launches.  bf16/fp16 buffers are uint16_t bit patterns (lib/base/dtype.h). */
#ifndef FSDP_KERNELS_CUDA_H
#define FSDP_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- lifecycle ----------------------------------------------------------- */

/* Not collective.  Selects device (cudaSetDevice), creates the cuBLAS and
 * cuBLASLt handles and their workspace, and makes stream (a cudaStream_t;
 * NULL = the legacy default stream) the stream of every launch.  Calling
 * it again finalizes first.  Returns FSDP_ERR_CUDA with the library's
 * message on failure (no device, no driver, out of memory). */
int FsdpKernelsCudaInit(int device, void *stream);
/* Frees handles and workspace; safe without Init. */
int FsdpKernelsCudaFinalize(void);
/* Change the compute stream (cuBLAS follows). */
int FsdpKernelsCudaSetStream(void *stream);
void *FsdpKernelsCudaStream(void);
/* 1: fp32 GEMMs may use TF32 tensor cores (about 1e-3 relative error);
 * 0 (default): true fp32, what the kernel tests compare at 1e-5. */
void FsdpKernelsCudaSetTF32(int on);

/* The allocator behind the table's alloc and free entries: the device
 * layer's accounted one (FsdpDeviceSetUp installs FsdpCudaMalloc and
 * FsdpCudaFree), so buffers a model allocates through its kernel table
 * appear in the run's device memory statistics.  Before it is installed
 * alloc and free are FSDP_ERR_STATE. */
typedef int (*FsdpKernelsCudaAllocFn)(FsdpMemTag tag, size_t bytes, void *ptr);
typedef int (*FsdpKernelsCudaFreeFn)(void *ptr);
void FsdpKernelsCudaSetAllocator(FsdpKernelsCudaAllocFn alloc, FsdpKernelsCudaFreeFn free_fn);

/* The table; valid after FsdpKernelsCudaInit. */
const FsdpKernelOps *FsdpKernelsCuda(void);

/* Raise and clear the first error recorded by a launcher since the last
 * check (FSDP_SUCCESS if none). */
int FsdpKernelsCudaCheck(void);
/* Wait for the compute stream, then FsdpKernelsCudaCheck (also reports
 * errors that only show when kernels run). */
int FsdpKernelsCudaSynchronize(void);

/* ---- the table's kernels (kernels.h for shapes and semantics) ------------ */

void encoder_forward_cuda(float *out, const int *inp, const float *wte,
                          const float *wpe, int B, int T, int C);
void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout,
                           const int *inp, int B, int T, int C);
void layernorm_forward_cuda(float *out, float *mean, float *rstd,
                            const float *inp, const float *weight,
                            const float *bias, int N, int C);
void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp,
                             const float *weight, const float *mean,
                             const float *rstd, int N, int C);
void matmul_forward_cuda(float *out, const float *inp, const float *weight,
                         const float *bias, int N, int C, int OC);
void matmul_backward_cuda(float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp,
                          const float *weight, int N, int C, int OC);
void attention_forward_cuda(float *out, float *preatt, float *att,
                            const float *qkv, int B, int T, int C, int NH);
void attention_backward_cuda(float *dqkv, float *dpreatt, float *datt,
                             const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);
/* [Note: flash attention] (attention.cu): the kernels.h entries, and the
 * same algorithm on bf16 activations (uint16_t bits; statistics, lse,
 * scratch and dqkv fp32). */
void flash_attention_forward_cuda(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH);
void flash_attention_backward_cuda(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *out, const float *lse, int B,
                                   int T, int C, int NH);
void flash_attention_forward_bf16_cuda(uint16_t *out, float *lse, const uint16_t *qkv, int B,
                                       int T, int C, int NH);
void flash_attention_backward_bf16_cuda(float *dqkv, float *scratch, const uint16_t *dout,
                                        const uint16_t *qkv, const uint16_t *out,
                                        const float *lse, int B, int T, int C, int NH);
void gelu_forward_cuda(float *out, const float *inp, size_t N);
void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N);
void residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N);
void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N);
void crossentropy_forward_cuda(float *losses, float *probs, const float *logits,
                               const int *targets, int N, int V);
void crossentropy_softmax_backward_cuda(float *dlogits, const float *probs,
                                        const int *targets, float dloss, int N,
                                        int V);
void adamw_update_cuda(float *param, const float *grad, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, int t);
/* Returns a host double: waits for the compute stream. */
double sum_squares_cuda(const float *x, size_t n);
/* llama.cu */
void rmsnorm_forward_cuda(float *out, float *rstd, const float *inp, const float *weight, int N,
                          int C, float eps);
void rmsnorm_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp,
                           const float *weight, const float *rstd, int N, int C);
void rope_forward_cuda(float *out, const float *inp, int B, int T, int NH, int HD, float theta);
void rope_backward_cuda(float *dinp, const float *dout, int B, int T, int NH, int HD,
                        float theta);
void swiglu_forward_cuda(float *out, const float *gate, const float *up, size_t n);
void swiglu_backward_cuda(float *dgate, float *dup, const float *dout, const float *gate,
                          const float *up, size_t n);
void gqa_pack_forward_cuda(float *qkv, const float *q, const float *k, const float *v, int B,
                           int T, int NH, int KVH, int HD);
void gqa_pack_backward_cuda(float *dq, float *dk, float *dv, const float *dqkv, int B, int T,
                            int NH, int KVH, int HD);

/* ---- extra device functions for the FSDP runtime ------------------------- */

/* Mixed precision linear layer: inp, weight (and dout) bf16, products
 * accumulated in fp32, out / gradients fp32 (bias fp32, may be NULL).
 * out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias;
 * dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp;
 * dbias (OC) += column sums of dout; dinp, dweight, dbias may be NULL. */
void matmul_forward_bf16_cuda(float *out, const uint16_t *inp,
                              const uint16_t *weight, const float *bias, int N,
                              int C, int OC);
void matmul_backward_bf16_cuda(float *dinp, float *dweight, float *dbias,
                               const uint16_t *dout, const uint16_t *inp,
                               const uint16_t *weight, int N, int C, int OC);

/* The table's bf16 matmuls ([Note: bf16 matmuls] in kernels.h): fp32
 * operands rounded to bf16 in device scratch, then the bf16 GEMMs above;
 * dbias from the unrounded fp32 dout. */
void matmul_forward_bf16_rounding_cuda(float *out, const float *inp, const float *weight,
                                       const float *bias, int N, int C, int OC);
void matmul_backward_bf16_rounding_cuda(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp,
                                        const float *weight, int N, int C, int OC);
/* [Note: fused classifier] in kernels.h (one block per row). */
void crossentropy_fused_cuda(float *losses, float *logits, const int *targets, float dloss,
                             int N, int V, int Vp);
/* [Note: fused residual and LayerNorm] in kernels.h (one warp per row). */
void residual_layernorm_forward_cuda(float *res, float *out, float *mean, float *rstd,
                                     const float *inp1, const float *inp2, const float *weight,
                                     const float *bias, int N, int C);
/* [Note: GEMM plans per shape] (kernels/gemm_plan.h): cached cuBLASLt
 * plans, lookups that found one, lookups that created one. */
void FsdpKernelsCudaGemmPlanStats(int *plans, uint64_t *hits, uint64_t *misses);

/* dst (n, dtype dt) = src (fp32), rounded to nearest even exactly like
 * FsdpDtypeFromFloat; dt == FP32 copies. */
void cast_from_float_cuda(void *dst, FsdpDtype dt, const float *src, size_t n);
/* dst (fp32) = src (n, dtype dt). */
void cast_to_float_cuda(float *dst, const void *src, FsdpDtype dt, size_t n);
/* dst (fp32) += scale * src (dtype dt): lands a reduced bf16/fp16 gradient
 * (or an fp32 one) in the fp32 gradient shard. */
void add_scaled_cuda(float *dst, const void *src, FsdpDtype dt, float scale,
                     size_t n);
/* x (dtype dt) *= scale in place, in fp32 (one rounding for bf16/fp16). */
void scale_inplace_cuda(void *x, FsdpDtype dt, float scale, size_t n);
/* The same on a given cudaStream_t (lib/comm/coll_nccl.c: the NCCL comm stream);
 * returns FSDP_SUCCESS or the launch error (not recorded). */
int scale_inplace_on_stream_cuda(void *x, FsdpDtype dt, float scale, size_t n,
                                 void *stream);
/* *d_out (one double on the device) = sum of x[i]^2 in double, by a
 * two-stage reduction whose partition depends on n only (deterministic).
 * Does not wait. */
void sum_squares_device_cuda(double *d_out, const float *x, size_t n);
/* *d_flag (one int on the device) is set to 1 if any of the n elements of
 * x (dtype dt) is inf or NaN; left alone otherwise (so one flag can cover
 * several buffers: zero it, check each, read it once).  Does not wait. */
void nonfinite_check_cuda(int *d_flag, const void *x, FsdpDtype dt, size_t n);

#ifdef __cplusplus
}
#endif

#endif
