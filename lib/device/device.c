/* device.c: device.h over the back-end chosen at set-up ([Note: one file
 * per back-end] in device_backend.h). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "device/device.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "device/device_backend.h"

/* Before FsdpDeviceSetUp (and after Finalize) buffers live on the CPU. */
static FsdpDeviceKind g_kind = FSDP_DEVICE_CPU;
static const FsdpDeviceBackend *g_backend = NULL; /* NULL: the CPU's */

/* What -device calls each kind and what configure calls its back-end,
 * for the message when a kind is not built. */
static const struct {
  const char *option, *name;
} kKindNames[] = {[FSDP_DEVICE_CPU] = {"cpu", "CPU"}, [FSDP_DEVICE_CUDA] = {"cuda", "CUDA"}};

static const FsdpDeviceBackend *BackendOf(FsdpDeviceKind kind)
{
  switch (kind) {
  case FSDP_DEVICE_CPU: return FsdpDeviceCpuBackend();
  case FSDP_DEVICE_CUDA: return FsdpDeviceCudaBackend();
  }
  return NULL;
}

static const FsdpDeviceBackend *Current(void)
{
  return g_backend ? g_backend : FsdpDeviceCpuBackend();
}

/* CUDA: whether the build has it, without loading the module (a -device
 * cpu run never loads a CUDA library: [Note: the CUDA module]). */
int FsdpDeviceKindAvailable(FsdpDeviceKind kind)
{
  return kind == FSDP_DEVICE_CUDA ? FsdpDeviceCudaBuilt() : BackendOf(kind) != NULL;
}

int FsdpDeviceSetUp(FsdpDeviceKind kind, MPI_Comm world)
{
  return FsdpDeviceSetUpShared(kind, world, 0, NULL);
}

int FsdpDeviceSetUpShared(FsdpDeviceKind kind, MPI_Comm world, int allow_share, int *shared)
{
  int shared_ = 0;
  if (shared) *shared = 0;
  if ((int)kind < 0 || kind > FSDP_DEVICE_CUDA)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpDeviceSetUp: unknown device kind %d", (int)kind);
  const FsdpDeviceBackend *b = BackendOf(kind);
  /* Every rank asks for the same kind, so every rank raises this. */
  if (!b)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -device %s: %s; use -device cpu", kKindNames[kind].option,
               FsdpDeviceCudaMissing());
  FSDP_CALL(b->set_up(world, allow_share, &shared_));
  if (shared) *shared = shared_;
  g_kind = kind;
  g_backend = b;
  return FSDP_SUCCESS;
}

int FsdpDeviceFinalize(void)
{
  const FsdpDeviceBackend *b = Current();
  g_kind = FSDP_DEVICE_CPU;
  g_backend = NULL;
  FSDP_CALL(b->finalize());
  return FSDP_SUCCESS;
}

FsdpDeviceKind FsdpDeviceGetKind(void) { return g_kind; }
void *FsdpDeviceComputeStream(void) { return Current()->compute_stream(); }
const FsdpKernelOps *FsdpDeviceKernels(void) { return Current()->kernels(); }
int FsdpDeviceDescribe(char *buf, size_t size) { return Current()->describe(buf, size); }

int FsdpDeviceGetMemStats(FsdpDeviceMemStats *s)
{
  if (!s) return 0;
  memset(s, 0, sizeof *s);
  return Current()->mem_stats(s);
}

int FsdpDeviceAlloc(FsdpMemTag tag, size_t bytes, void *ptr)
{
  return Current()->alloc(tag, bytes, ptr);
}

int FsdpDeviceFree(void *ptr) { return Current()->free(ptr); }

int FsdpDeviceZero(void *p, size_t bytes)
{
  if (!p || !bytes) return FSDP_SUCCESS;
  return Current()->zero(p, bytes);
}

int FsdpDeviceCopyToHost(void *dst, const void *src, size_t bytes)
{
  if (!bytes) return FSDP_SUCCESS;
  return Current()->copy(dst, src, bytes);
}

int FsdpDeviceCopyFromHost(void *dst, const void *src, size_t bytes)
{
  if (!bytes) return FSDP_SUCCESS;
  return Current()->copy(dst, src, bytes);
}

int FsdpDeviceHostAlloc(size_t bytes, void *ptr)
{
  return Current()->host_alloc(bytes, ptr);
}

int FsdpDeviceHostFree(void *ptr) { return Current()->host_free(ptr); }

int FsdpDeviceCastFromFloat(FsdpDtype to, const float *src, void *dst, size_t n)
{
  return Current()->cast_from_float(to, src, dst, n);
}

int FsdpDeviceCastToFloat(FsdpDtype from, const void *src, float *dst, size_t n)
{
  return Current()->cast_to_float(from, src, dst, n);
}

int FsdpDeviceAddScaled(float *dst, const void *src, FsdpDtype dt, float scale, size_t n)
{
  return Current()->add_scaled(dst, src, dt, scale, n);
}

int FsdpDeviceAnyNonFinite(const float *x, size_t n, int *bad)
{
  *bad = 0;
  if (!n) return FSDP_SUCCESS;
  return Current()->any_nonfinite(x, n, bad);
}

int FsdpDeviceCheck(void) { return Current()->check(); }

/* [Note: one readback per step]: empty buffers are dropped here, so a
 * back-end sees only n[i] > 0; at most FSDP_DEVICE_READBACK_MAX per call. */
static int Compact(const float *const *x, const size_t *n, int count, int *next,
                   const float **cx, size_t *cn)
{
  int c = 0;
  while (*next < count && c < FSDP_DEVICE_READBACK_MAX) {
    int i = (*next)++;
    if (!n[i]) continue;
    cx[c] = x[i];
    cn[c] = n[i];
    c++;
  }
  return c;
}

int FsdpDeviceSumSquaresMany(const float *const *x, const size_t *n, int count, double *sq)
{
  static const float *cx[FSDP_DEVICE_READBACK_MAX];
  static size_t cn[FSDP_DEVICE_READBACK_MAX];
  *sq = 0.0;
  for (int next = 0; next < count;) {
    int c = Compact(x, n, count, &next, cx, cn);
    if (!c) continue;
    double part = 0.0;
    FSDP_CALL(Current()->sum_squares_many(cx, cn, c, &part));
    *sq += part;
  }
  return FSDP_SUCCESS;
}

int FsdpDeviceAnyNonFiniteMany(const float *const *x, const size_t *n, int count, int *bad)
{
  static const float *cx[FSDP_DEVICE_READBACK_MAX];
  static size_t cn[FSDP_DEVICE_READBACK_MAX];
  *bad = 0;
  for (int next = 0; next < count && !*bad;) {
    int c = Compact(x, n, count, &next, cx, cn);
    if (c) FSDP_CALL(Current()->any_nonfinite_many(cx, cn, c, bad));
  }
  return FSDP_SUCCESS;
}

int FsdpDeviceSetTF32(int on, int *applied)
{
  const FsdpDeviceBackend *b = Current();
  *applied = b->set_tf32 != NULL;
  return b->set_tf32 ? b->set_tf32(on) : FSDP_SUCCESS;
}
