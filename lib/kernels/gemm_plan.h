/* gemm_plan.h: a GEMM's shape as a cache key, and a small fixed-size table
 * from key to slot, for back-ends whose GEMM library wants descriptors and
 * an algorithm choice per shape (kernels/cuda/matmul.cu: cuBLASLt).
 *
 * [Note: GEMM plans per shape] Creating cuBLASLt's operation and layout
 * descriptors and asking its heuristic for an algorithm costs host time on
 * every call (tens of microseconds, several per linear layer and step),
 * yet a training run has a handful of distinct shapes.  So a back-end
 * keys each GEMM by everything the descriptors and the algorithm depend on
 * (FsdpGemmKey: sizes, leading dimensions, transposes, operand type,
 * compute mode, epilogue, operand alignments) and keeps, per slot of this
 * table, what it created the first time.  The table is plain C with no
 * device types, so a CPU test covers the keying (tests/test_gemm_plan.c);
 * the back-end owns whatever the slots stand for (parallel arrays indexed
 * by slot) and frees them when it finalizes.  A full table is not an
 * error: FsdpGemmPlanSlot returns -1 and the caller creates and destroys
 * descriptors for that call as before (correct, only slower).  Not
 * thread-safe: the compute thread calls it, as every kernel. */
#ifndef FSDP_GEMM_PLAN_H
#define FSDP_GEMM_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FSDP_GEMM_PLAN_SLOTS 128 /* distinct shapes cached; a power of two */

typedef struct {
  int32_t m, n, k, lda, ldb, ldd;
  int32_t ta, tb;      /* transposes (0/1) */
  int32_t ab_type;     /* operand type, the back-end's code (e.g. cudaDataType_t) */
  int32_t compute;     /* compute mode, the back-end's code (e.g. TF32 or not) */
  int32_t epilogue;    /* epilogue, the back-end's code (none, bias, ...) */
  uint32_t align_a, align_b, align_d; /* operand alignments in bytes */
} FsdpGemmKey;

typedef struct {
  FsdpGemmKey key[FSDP_GEMM_PLAN_SLOTS];
  unsigned char used[FSDP_GEMM_PLAN_SLOTS];
  int count;                   /* slots in use */
  uint64_t hits, misses, full; /* lookups that found / created / found no room */
} FsdpGemmPlanTable;

/* Empties the table (the back-end frees what its slots stood for first). */
void FsdpGemmPlanReset(FsdpGemmPlanTable *t);

/* The slot of key: *created = 0 when it was there already, 1 when this
 * call took a free slot for it (the caller fills its slot now); -1 when
 * the table is full (nothing cached, *created = 0). */
int FsdpGemmPlanSlot(FsdpGemmPlanTable *t, const FsdpGemmKey *key, int *created);

/* The slot's key is given up (its creation failed): the next lookup of the
 * same key creates again. */
void FsdpGemmPlanDrop(FsdpGemmPlanTable *t, int slot);

#ifdef __cplusplus
}
#endif

#endif
