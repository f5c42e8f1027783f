/* cuda_module.h: the CUDA back-end as a library of its own (not installed).
 *
 * [Note: the CUDA module] A CUDA build makes two libraries: libfsdp, which
 * needs none of CUDA's, and libfsdp-cuda.so (device_cuda.c, cuda_util.c,
 * coll_nccl.c, kernels/cuda), which links cudart, cuBLAS(Lt) and NCCL and
 * is installed next to libfsdp.  libfsdp loads it (dlopen, cuda_module.c)
 * the first time something asks for the CUDA back-end -- -device cuda, the
 * NCCL collectives, a GPU count -- so a -device cpu run never loads a CUDA
 * library and starts on a machine that has none.  It is looked for in
 * libfsdp's own folder (the build tree's lib/.libs, the installed libdir,
 * a bundle's lib/), or at $FSDP_CUDA_MODULE; when it cannot be loaded
 * (missing, or cudart/NCCL/cuBLAS not found) -device cuda is a usage error
 * that names the file and dlerror()'s reason.  The module exports one
 * symbol, FsdpCudaModuleEntry; it is linked -Bsymbolic so that its own
 * calls bind to its own functions, not to libfsdp's forwarding ones of
 * the same name (FsdpCudaDeviceCount, FsdpCudaProbeMessage).  It is never
 * unloaded (CUDA's libraries do not support it). */
#ifndef FSDP_CUDA_MODULE_H
#define FSDP_CUDA_MODULE_H

#include "device/device_backend.h"

/* Bumped whenever this struct or a table it points to changes: a module
 * from another build is refused, not misread. */
#define FSDP_CUDA_MODULE_ABI 1
#define FSDP_CUDA_MODULE_ENTRY "FsdpCudaModuleEntry"

typedef struct {
  int abi; /* FSDP_CUDA_MODULE_ABI of the build that made the module */
  const FsdpDeviceBackend *device;
  const void *nccl; /* const CollBackendOps * (comm/coll_backend.h) */
  int (*device_count)(int *count);
  const char *(*probe_message)(void);
} FsdpCudaModule;

/* In the module (comm/cuda_module_entry.c). */
const FsdpCudaModule *FsdpCudaModuleEntry(void);

/* In libfsdp (cuda_module.c with CUDA, cuda_none.c without): the loaded
 * module, or NULL with the reason in FsdpCudaModuleError(). */
const FsdpCudaModule *FsdpCudaModuleLoad(void);
const char *FsdpCudaModuleError(void);

#endif
