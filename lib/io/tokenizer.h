/* tokenizer.h: llm.c's GPT-2 tokenizer file, for decoding token ids to text
 * (fsdp-sample).
 *
 * Layout (llm.c's gpt2_tokenizer.bin, little-endian): a header of 256
 * uint32 -- [0] magic 20240328, [1] version 1 or 2, [2] number of tokens
 * n, [3] end-of-text id (version 2 only) -- then for each of the n tokens
 * one uint8 length (>= 1) and that many raw bytes (a piece of UTF-8; a
 * multi-byte character may be split across tokens).  Only decoding: fsdp
 * trains on token files that llm.c's scripts already tokenized.
 */
#ifndef FSDP_TOKENIZER_H
#define FSDP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define FSDP_TOKENIZER_MAGIC 20240328

typedef struct FsdpTokenizer_ *FsdpTokenizer;

/* Not collective.  Read and check the file: a missing or short file, a
 * wrong magic or version, a count <= 0, a zero length or a file that ends
 * before its n tokens, or bytes after them, is FSDP_ERR_USAGE with msg
 * naming the file and the defect; nothing is raised or printed (the
 * caller agrees with the other ranks first). */
int FsdpTokenizerLoad(const char *path, FsdpTokenizer *tok, char *msg, size_t size);
/* Accepts NULL. */
void FsdpTokenizerDestroy(FsdpTokenizer *tok);

/* The end-of-text id (version 2), or -1. */
int FsdpTokenizerEot(FsdpTokenizer tok);
/* Token id's bytes (*len of them, not NUL-terminated), or NULL when id is
 * not in [0, n). */
const char *FsdpTokenizerDecode(FsdpTokenizer tok, int id, size_t *len);

#endif
