/* state.cu: what every CUDA kernel file shares at run time -- the state
 * (cuda_state), the first recorded error ([Note: CUDA kernel errors] in
 * common.cuh) and the device layer's allocator.  Apart from the table
 * (ops.cu), which uses every kernel file, so that no kernel file depends
 * on the table. */
#include <stdarg.h>
#include <stdio.h>

#include "common.cuh"

CudaKernelState cuda_state;

void cuda_record_error(int code, const char *file, int line, const char *fmt, ...)
{
  if (cuda_state.err_code != FSDP_SUCCESS) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cuda_state.err_code = code;
  snprintf(cuda_state.err_msg, sizeof cuda_state.err_msg, "%s (%s:%d)", msg, file, line);
}

/* ---- buffers ([Note: buffers from the kernel table] in kernels.h) -------- */

/* The device layer's accounted allocator (FsdpKernelsCudaSetAllocator):
 * device memory statistics and out-of-memory reports live there, and a
 * kernel back-end may not call up into the device layer. */
static FsdpKernelsCudaAllocFn g_alloc_fn;
static FsdpKernelsCudaFreeFn g_free_fn;

extern "C" void FsdpKernelsCudaSetAllocator(FsdpKernelsCudaAllocFn alloc, FsdpKernelsCudaFreeFn free_fn)
{
  g_alloc_fn = alloc;
  g_free_fn = free_fn;
}

int alloc_cuda(FsdpMemTag tag, size_t bytes, void *ptr)
{
  if (!g_alloc_fn)
    FSDP_ERROR(FSDP_ERR_STATE, "CUDA kernel table: alloc before FsdpKernelsCudaSetAllocator "
                               "(FsdpDeviceSetUp installs the device allocator)");
  return g_alloc_fn(tag, bytes, ptr);
}

int free_cuda(void *ptr)
{
  if (!ptr || !*(void **)ptr) return FSDP_SUCCESS;
  if (!g_free_fn)
    FSDP_ERROR(FSDP_ERR_STATE, "CUDA kernel table: free before FsdpKernelsCudaSetAllocator");
  return g_free_fn(ptr);
}

int cuda_alloc_accounted(size_t bytes, void *ptr, int *accounted)
{
  *accounted = g_alloc_fn != NULL;
  if (g_alloc_fn) return g_alloc_fn(FSDP_MEM_OTHER, bytes, ptr);
  cudaError_t e = cudaMalloc((void **)ptr, bytes);
  if (e != cudaSuccess) {
    *(void **)ptr = NULL;
    FSDP_ERROR(FSDP_ERR_CUDA, "cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
  }
  return FSDP_SUCCESS;
}

void cuda_free_accounted(void *ptr)
{
  if (g_free_fn) (void)g_free_fn(ptr); /* best effort: teardown */
}
