/* cuda_module.c: libfsdp's side of [Note: the CUDA module] (cuda_module.h)
 * in a CUDA build: finds and loads libfsdp-cuda.so on first use and
 * forwards the CUDA back-end's entry points to it (the NCCL collectives':
 * comm/coll_nccl_module.c).  A build without CUDA links cuda_none.c in its
 * place. */
#define _GNU_SOURCE 1 /* dladdr, Dl_info (glibc) */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "device/cuda_module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_util.h"

#define CUDA_MODULE_FILE "libfsdp-cuda.so"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const FsdpCudaModule *g_module = NULL;
static char g_error[6144]; /* a path of up to 4095 bytes and dlerror() */

/* $FSDP_CUDA_MODULE, else libfsdp-cuda.so in the folder libfsdp was
 * loaded from (dladdr of one of its functions). */
static void ModulePath(char *buf, size_t size)
{
  const char *env = getenv("FSDP_CUDA_MODULE");
  if (env && env[0]) {
    snprintf(buf, size, "%s", env);
    return;
  }
  Dl_info info;
  memset(&info, 0, sizeof info);
  const char *slash = NULL;
  if (dladdr((void *)FsdpCudaModuleLoad, &info) && info.dli_fname)
    slash = strrchr(info.dli_fname, '/');
  if (slash)
    snprintf(buf, size, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
             CUDA_MODULE_FILE);
  else
    snprintf(buf, size, "%s", CUDA_MODULE_FILE); /* the loader's search path */
}

static void Load(void)
{
  char path[4096];
  ModulePath(path, sizeof path);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(g_error, sizeof g_error,
             "cannot load the CUDA back-end %s: %s (it needs the CUDA runtime, cuBLAS and "
             "NCCL: put their folder on LD_LIBRARY_PATH, or run through the bundle's fsdp-env)",
             path, e ? e : "unknown error");
    return;
  }
  const FsdpCudaModule *(*entry)(void) = NULL;
  *(void **)&entry = dlsym(h, FSDP_CUDA_MODULE_ENTRY);
  const FsdpCudaModule *m = entry ? entry() : NULL;
  if (!m) {
    snprintf(g_error, sizeof g_error, "cannot load the CUDA back-end %s: it has no %s", path,
             FSDP_CUDA_MODULE_ENTRY);
    return;
  }
  if (m->abi != FSDP_CUDA_MODULE_ABI || !m->device || !m->nccl || !m->device_count ||
      !m->probe_message) {
    snprintf(g_error, sizeof g_error,
             "cannot use the CUDA back-end %s: it is from another build of fsdp (interface %d, "
             "this libfsdp needs %d)",
             path, m->abi, FSDP_CUDA_MODULE_ABI);
    return;
  }
  g_module = m; /* never dlclose'd ([Note: the CUDA module]) */
}

const FsdpCudaModule *FsdpCudaModuleLoad(void)
{
  pthread_once(&g_once, Load);
  return g_module;
}

const char *FsdpCudaModuleError(void) { return g_module ? "" : g_error; }

/* ---- the entry points shared code and tests call -------------------------- */

int FsdpDeviceCudaBuilt(void) { return 1; }

const char *FsdpDeviceCudaMissing(void)
{
  return FsdpCudaModuleLoad() ? "" : FsdpCudaModuleError();
}

const FsdpDeviceBackend *FsdpDeviceCudaBackend(void)
{
  const FsdpCudaModule *m = FsdpCudaModuleLoad();
  return m ? m->device : NULL;
}

int FsdpCudaBuilt(void) { return 1; }

int FsdpCudaDeviceCount(int *count)
{
  if (!count) FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpCudaDeviceCount: NULL count");
  *count = 0;
  const FsdpCudaModule *m = FsdpCudaModuleLoad();
  return m ? m->device_count(count) : FSDP_SUCCESS;
}

const char *FsdpCudaProbeMessage(void)
{
  const FsdpCudaModule *m = FsdpCudaModuleLoad();
  return m ? m->probe_message() : FsdpCudaModuleError();
}
