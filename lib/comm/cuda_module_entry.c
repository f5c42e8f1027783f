/* cuda_module_entry.c: what libfsdp-cuda.so hands libfsdp ([Note: the CUDA
 * module] in device/cuda_module.h): its device back-end and its NCCL
 * collectives (in the comm layer, which may see both). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/coll_backend.h"
#include "device/cuda_module.h"
#include "device/cuda_util.h"

const FsdpDeviceBackend *FsdpCudaDeviceBackend(void); /* device_cuda.c */
const CollBackendOps *FsdpCudaNcclOps(void);          /* coll_nccl.c */

const FsdpCudaModule *FsdpCudaModuleEntry(void)
{
  static FsdpCudaModule m;
  m.abi = FSDP_CUDA_MODULE_ABI;
  m.device = FsdpCudaDeviceBackend();
  m.nccl = FsdpCudaNcclOps();
  m.device_count = FsdpCudaDeviceCount;
  m.probe_message = FsdpCudaProbeMessage;
  return &m;
}
