/* mem.c: tagged allocations (see mem.h). */
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/error.h"

/* Each block carries a header in front of it with its tag and size, so
 * FsdpFree needs only the pointer. 64 bytes keeps the block aligned. */
#define FSDP_MEM_HEADER 64
#define FSDP_MEM_MAGIC 0x66736470u

typedef struct {
  uint32_t magic;
  uint32_t tag;
  size_t bytes;
} MemHeader;

static size_t g_current[FSDP_MEM_NTAGS];
static size_t g_current_total, g_peak_total;

const char *FsdpMemTagName(FsdpMemTag tag)
{
  static const char *names[FSDP_MEM_NTAGS] = {
      "params", "grads", "optim", "gather", "reduce", "acts", "data", "other"};
  return (tag >= 0 && tag < FSDP_MEM_NTAGS) ? names[tag] : "?";
}

int FsdpMalloc(FsdpMemTag tag, size_t bytes, void *ptr)
{
  void **out = (void **)ptr;
  *out = NULL;
  if (tag < 0 || tag >= FSDP_MEM_NTAGS)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "bad memory tag %d", (int)tag);
  if (bytes == 0) return FSDP_SUCCESS;
  size_t total = FSDP_MEM_HEADER + ((bytes + 63) / 64) * 64;
  char *base = aligned_alloc(64, total);
  if (!base)
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory allocating %zu bytes for %s",
               bytes, FsdpMemTagName(tag));
  memset(base, 0, total);
  MemHeader *h = (MemHeader *)base;
  h->magic = FSDP_MEM_MAGIC;
  h->tag = (uint32_t)tag;
  h->bytes = bytes;
  g_current[tag] += bytes;
  g_current_total += bytes;
  if (g_current_total > g_peak_total) g_peak_total = g_current_total;
  *out = base + FSDP_MEM_HEADER;
  return FSDP_SUCCESS;
}

int FsdpFree(void *ptr)
{
  void **p = (void **)ptr;
  if (!p || !*p) return FSDP_SUCCESS;
  char *base = (char *)*p - FSDP_MEM_HEADER;
  MemHeader *h = (MemHeader *)base;
  if (h->magic != FSDP_MEM_MAGIC)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "FsdpFree of a block not from FsdpMalloc");
  g_current[h->tag] -= h->bytes;
  g_current_total -= h->bytes;
  h->magic = 0;
  free(base);
  *p = NULL;
  return FSDP_SUCCESS;
}

size_t FsdpMemCurrent(FsdpMemTag tag) { return g_current[tag]; }
size_t FsdpMemCurrentTotal(void) { return g_current_total; }
size_t FsdpMemPeakTotal(void) { return g_peak_total; }

size_t FsdpMemPeakRSS(void)
{
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

int FsdpArrayReserve(void *array, size_t *cap, size_t need, size_t elem)
{
  void **p = (void **)array;
  if (need <= *cap) return FSDP_SUCCESS;
  size_t ncap = *cap ? *cap : 16;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2) return FSDP_ERR_MEM;
    ncap *= 2;
  }
  if (elem && ncap > SIZE_MAX / elem) return FSDP_ERR_MEM;
  void *np = realloc(*p, ncap * elem);
  if (!np) return FSDP_ERR_MEM;
  *p = np;
  *cap = ncap;
  return FSDP_SUCCESS;
}
