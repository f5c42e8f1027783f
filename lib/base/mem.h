/* mem.h: tagged host allocations with per-tag statistics.
 *
 * Every large buffer of the engine is allocated with a tag that says what it
 * is for, so a run reports current and peak bytes per tag and finalize can
 * find leaks (FsdpMemReport).  Blocks are 64-byte aligned and zeroed.
 * Allocation happens on the compute thread only (the communication stream
 * never allocates), so the counters need no locking.
 */
#ifndef FSDP_MEM_H
#define FSDP_MEM_H

#include <stddef.h>
#include <stdio.h>

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
size_t FsdpMemPeak(FsdpMemTag tag);
size_t FsdpMemCurrentTotal(void);
size_t FsdpMemPeakTotal(void);
/* Peak resident set size of this process in bytes (getrusage). */
size_t FsdpMemPeakRSS(void);
/* Reset every tag's peak to its current value. */
void FsdpMemResetPeaks(void);
/* Print current/peak per tag. */
void FsdpMemReport(FILE *out);

#endif
