/* gemm_plan.c: [Note: GEMM plans per shape] (gemm_plan.h). */
#include <string.h>

#include "kernels/gemm_plan.h"

void FsdpGemmPlanReset(FsdpGemmPlanTable *t) { memset(t, 0, sizeof *t); }

static int KeyEqual(const FsdpGemmKey *a, const FsdpGemmKey *b)
{
  return a->m == b->m && a->n == b->n && a->k == b->k && a->lda == b->lda && a->ldb == b->ldb &&
         a->ldd == b->ldd && a->ta == b->ta && a->tb == b->tb && a->ab_type == b->ab_type &&
         a->compute == b->compute && a->epilogue == b->epilogue && a->align_a == b->align_a &&
         a->align_b == b->align_b && a->align_d == b->align_d;
}

/* FNV-1a over the fields (not the struct's bytes: no padding is hashed). */
static uint32_t KeyHash(const FsdpGemmKey *k)
{
  const uint32_t f[] = {(uint32_t)k->m,       (uint32_t)k->n,       (uint32_t)k->k,
                        (uint32_t)k->lda,     (uint32_t)k->ldb,     (uint32_t)k->ldd,
                        (uint32_t)k->ta,      (uint32_t)k->tb,      (uint32_t)k->ab_type,
                        (uint32_t)k->compute, (uint32_t)k->epilogue, k->align_a,
                        k->align_b,           k->align_d};
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    h ^= f[i];
    h *= 16777619u;
  }
  return h;
}

/* Open addressing with linear probing; slots are never freed one by one
 * except by FsdpGemmPlanDrop right after their creation failed, which
 * leaves a hole that can break a probe chain of a key inserted after it:
 * so a lookup scans past unused slots until it has seen every used one. */
int FsdpGemmPlanSlot(FsdpGemmPlanTable *t, const FsdpGemmKey *key, int *created)
{
  const int mask = FSDP_GEMM_PLAN_SLOTS - 1;
  int first_free = -1, seen = 0;
  *created = 0;
  for (int i = 0, s = (int)(KeyHash(key) & (uint32_t)mask); i < FSDP_GEMM_PLAN_SLOTS;
       i++, s = (s + 1) & mask) {
    if (!t->used[s]) {
      if (first_free < 0) first_free = s;
      if (seen == t->count) break; /* every used slot seen: key is absent */
      continue;
    }
    seen++;
    if (KeyEqual(&t->key[s], key)) {
      t->hits++;
      return s;
    }
  }
  if (first_free < 0) {
    t->full++;
    return -1;
  }
  t->key[first_free] = *key;
  t->used[first_free] = 1;
  t->count++;
  t->misses++;
  *created = 1;
  return first_free;
}

void FsdpGemmPlanDrop(FsdpGemmPlanTable *t, int slot)
{
  if (slot < 0 || slot >= FSDP_GEMM_PLAN_SLOTS || !t->used[slot]) return;
  t->used[slot] = 0;
  t->count--;
}
