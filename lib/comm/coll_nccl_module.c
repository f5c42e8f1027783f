/* coll_nccl_module.c: the NCCL back-end's place in libfsdp in a CUDA
 * build: the collectives of libfsdp-cuda.so, loaded on first use ([Note:
 * the CUDA module] in device/cuda_module.h); NULL, and coll.c's usage error
 * with the reason, when it cannot be loaded.  A build without CUDA links
 * coll_nccl_none.c instead. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/coll_backend.h"
#include "device/cuda_module.h"

const CollBackendOps *FsdpCollNcclOps(void)
{
  const FsdpCudaModule *m = FsdpCudaModuleLoad();
  return m ? (const CollBackendOps *)m->nccl : NULL;
}
