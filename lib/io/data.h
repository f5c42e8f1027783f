/* data.h: token data for training (docs/design.md §7 "Token data").
 *
 * Two sources behind one handle: a token file in llm.c's .bin layout
 * (256 int32 header: magic 20240520, version 1, token count n; then n
 * uint16 tokens; file size must be exactly 1024 + 2n; or llm.c's LLaMA-3
 * layout: magic 20240801, version 7, n uint32 tokens, 1024 + 4n), or the built-in
 * task (no file; a deterministic, learnable token stream generated from
 * the seed, see data.c [Note: built-in task]).
 *
 * [Note: global batch] Samples are windows of T+1 tokens (inputs are the
 * first T, targets the last T).  Global sample j starts at token
 * (j * T) mod (n - T) -- consecutive windows that wrap around -- so a
 * file is read in order like llm.c does.  Micro-step m
 * (counted from 0 over the whole run, including gradient accumulation
 * micro-steps) uses global samples [m*GB, (m+1)*GB) where GB = global batch
 * = data-parallel ranks * B; data-parallel rank r takes
 * [m*GB + r*B, m*GB + (r+1)*B).  So W ranks with batch B see exactly the
 * samples one rank with batch W*B sees, and the position to resume from is
 * just the micro-step counter.
 */
#ifndef FSDP_DATA_H
#define FSDP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#define FSDP_DATA_MAGIC 20240520
#define FSDP_DATA_VERSION 1
#define FSDP_DATA_HEADER_INTS 256

typedef struct FsdpData_ *FsdpData;

/* Collective on comm (every rank opens and validates the same file; a
 * failure on any rank fails every rank with the lowest failing rank's code
 * and message, see data.c [Note: agreeing on data errors]).  path == NULL
 * or "" selects the built-in task.
 * Validation (each a usage error naming the file and the defect): missing
 * or unreadable file, short header, wrong magic, wrong version, token count
 * <= 0 or larger than the file holds, file size not 1024 + 2n, any token
 * >= vocab_size (naming its position and value), fewer tokens than one
 * global batch needs (global_batch * T + 1).  The file's tokens are read
 * into memory once (tagged FSDP_MEM_DATA). */
int FsdpDataCreate(MPI_Comm comm, const char *path, int vocab_size, int T,
                   int global_batch, uint64_t seed, FsdpData *d);
int FsdpDataDestroy(FsdpData *d);

/* Collective on comm.  The held-out data for validation: a token file is
 * read as by FsdpDataCreate; without one (path NULL or "") the built-in
 * task's held-out stream -- the same task (table, rules, seed), but
 * segments the training stream never contains (data.c [Note: held-out
 * stream]).  Batches follow [Note: global batch] like training's, so
 * validation batch k is the same global_batch windows for any W. */
int FsdpDataCreateHeldOut(MPI_Comm comm, const char *path, int vocab_size, int T,
                          int global_batch, uint64_t seed, FsdpData *d);

/* Not collective.  The built-in task's token as text (data.c [Note:
 * built-in alphabet]): markers as line breaks, content tokens as
 * syllables; ids outside its alphabet as "<id>". */
void FsdpDataBuiltinTokenText(int token, char *buf, size_t size);

/* Not collective.  Fill inputs and targets (B*T ints each) for
 * data-parallel rank dp_rank at micro-step `micro_step`, following
 * [Note: global batch] with B = global_batch / dp_size. */
int FsdpDataGetBatch(FsdpData d, int64_t micro_step, int dp_rank, int dp_size,
                     int *inputs, int *targets);

/* Not collective.  Write n tokens to path in the token-file layout above
 * (little-endian; 1 <= n <= INT32_MAX, the header's count is an int32), so
 * tests and tools make files llm.c and FsdpDataCreate read.  Failing to
 * create or write the file is FSDP_ERR_IO naming it. */
int FsdpDataWriteFile(const char *path, const uint16_t *tokens, int64_t n);

/* Number of tokens in the stream (file count, or the built-in period). */
int64_t FsdpDataNumTokens(FsdpData d);
/* "builtin" or the file path. */
const char *FsdpDataSourceName(FsdpData d);

#endif
