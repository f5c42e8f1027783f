/* cuda_none.c: what a build without CUDA (configure without --with-cuda)
 * answers in place of cuda_util.c and device_cuda.c -- no CUDA back-end,
 * no GPU -- so that the interface's questions have answers and nothing
 * else of CUDA is compiled ([Note: one file per back-end] in
 * device_backend.h). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "device/cuda_util.h"
#include "device/cuda_module.h"

static const char kNoCuda[] = "this build has no CUDA back-end (configure --with-cuda)";

const FsdpDeviceBackend *FsdpDeviceCudaBackend(void) { return NULL; }
int FsdpDeviceCudaBuilt(void) { return 0; }
const char *FsdpDeviceCudaMissing(void) { return kNoCuda; }
const FsdpCudaModule *FsdpCudaModuleLoad(void) { return NULL; }
const char *FsdpCudaModuleError(void) { return kNoCuda; }

int FsdpCudaBuilt(void) { return 0; }

int FsdpCudaDeviceCount(int *count)
{
  if (!count) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaDeviceCount: NULL count");
  *count = 0;
  return FSDP_SUCCESS;
}

const char *FsdpCudaProbeMessage(void) { return kNoCuda; }
