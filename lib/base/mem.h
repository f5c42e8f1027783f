/* mem.h: tagged host allocations with per-tag statistics.
 *
 * Every large buffer of the engine is allocated with a tag that says what it
 * is for, so a run reports current bytes per tag (the run file's shard
 * bytes) and the current and peak total.  Blocks are 64-byte aligned and zeroed.
 * Allocation happens on the compute thread only (the communication stream
 * never allocates), so the counters need no locking.
 */
#ifndef FSDP_MEM_H
#define FSDP_MEM_H

#include <stddef.h>

typedef enum {
  FSDP_MEM_PARAMS,  /* fp32 parameter shards (and low-precision shard copies) */
  FSDP_MEM_GRADS,   /* gradient shards */
  FSDP_MEM_OPTIM,   /* optimizer state (AdamW moments) */
  FSDP_MEM_GATHER,  /* unsharded parameter buffers (the gather ring) */
  FSDP_MEM_REDUCE,  /* unsharded gradient buffers */
  FSDP_MEM_ACTS,    /* activations kept for backward */
  FSDP_MEM_DATA,    /* token batches */
  FSDP_MEM_OTHER,
  FSDP_MEM_NTAGS
} FsdpMemTag;

const char *FsdpMemTagName(FsdpMemTag tag);

/* Allocate bytes (zeroed, 64-byte aligned) under tag; *(void **)ptr gets the
 * block.  bytes == 0 gives NULL. */
int FsdpMalloc(FsdpMemTag tag, size_t bytes, void *ptr);

/* Free a block from FsdpMalloc; takes the address of the pointer, accepts
 * NULL and sets the pointer to NULL. */
int FsdpFree(void *ptr);

size_t FsdpMemCurrent(FsdpMemTag tag);
size_t FsdpMemCurrentTotal(void);
size_t FsdpMemPeakTotal(void);
/* Peak resident set size of this process in bytes (getrusage). */
size_t FsdpMemPeakRSS(void);

/* Not collective.  Make the malloc'ed array *(T **)array, of *cap elements
 * of elem bytes, hold at least need elements: its capacity doubles (from
 * 16 when it is 0) until it does, so appending n elements one at a time
 * costs O(n).  Untagged (plain realloc): for the engine's small growing
 * lists, freed with free().  Out of memory: returns FSDP_ERR_MEM with the
 * array and *cap unchanged and prints nothing, so the caller says what it
 * was growing (in its own words, or through its own error channel). */
int FsdpArrayReserve(void *array, size_t *cap, size_t need, size_t elem);

#endif
