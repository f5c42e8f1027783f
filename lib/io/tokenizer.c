/* tokenizer.c: llm.c GPT-2 tokenizer files (see tokenizer.h). */
#include "io/tokenizer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define TOK_HEADER_INTS 256

struct FsdpTokenizer_ {
  int n, eot;
  char *bytes;      /* every token's bytes, back to back */
  size_t *offset;   /* [n + 1]: token i is bytes[offset[i] .. offset[i+1]) */
};

static int Fail(char *msg, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int Fail(char *msg, size_t size, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, size, fmt, ap);
  va_end(ap);
  return FSDP_ERR_USAGE;
}

static uint32_t LoadLeU32(const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void FsdpTokenizerDestroy(FsdpTokenizer *ptok)
{
  if (!ptok || !*ptok) return;
  free((*ptok)->bytes);
  free((*ptok)->offset);
  free(*ptok);
  *ptok = NULL;
}

int FsdpTokenizerLoad(const char *path, FsdpTokenizer *out, char *msg, size_t size)
{
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return Fail(msg, size, "cannot open tokenizer file '%s': %s", path, strerror(errno));
  int code = FSDP_SUCCESS;
  struct FsdpTokenizer_ *t = calloc(1, sizeof *t);
  unsigned char header[TOK_HEADER_INTS * 4];
  if (!t) {
    code = Fail(msg, size, "tokenizer file '%s': out of memory", path);
    goto done;
  }
  if (fread(header, 1, sizeof header, f) != sizeof header) {
    code = Fail(msg, size, "tokenizer file '%s' is too short for its header of %d uint32", path,
                TOK_HEADER_INTS);
    goto done;
  }
  uint32_t magic = LoadLeU32(header), version = LoadLeU32(header + 4);
  uint32_t n = LoadLeU32(header + 8);
  if (magic != FSDP_TOKENIZER_MAGIC) {
    code = Fail(msg, size, "tokenizer file '%s' has magic %u, expected %d (llm.c's "
                "gpt2_tokenizer.bin)%s", path, magic, FSDP_TOKENIZER_MAGIC,
                magic == 20240520 ? "; 20240520 is a token file, not a tokenizer" : "");
    goto done;
  }
  if (version != 1 && version != 2) {
    code = Fail(msg, size, "tokenizer file '%s' has version %u, expected 1 or 2", path, version);
    goto done;
  }
  if (n == 0 || n > (1u << 24)) {
    code = Fail(msg, size, "tokenizer file '%s': header says %u tokens, expected 1 .. %d", path, n,
                1 << 24);
    goto done;
  }
  t->n = (int)n;
  t->eot = -1;
  if (version == 2) {
    uint32_t eot = LoadLeU32(header + 12);
    if (eot >= n) {
      code = Fail(msg, size, "tokenizer file '%s': end-of-text id %u is not below its %u tokens",
                  path, eot, n);
      goto done;
    }
    t->eot = (int)eot;
  }
  t->offset = calloc((size_t)n + 1, sizeof *t->offset);
  t->bytes = malloc((size_t)n * 255 + 1);
  if (!t->offset || !t->bytes) {
    code = Fail(msg, size, "tokenizer file '%s': out of memory for %u tokens", path, n);
    goto done;
  }
  size_t at = 0;
  for (uint32_t i = 0; i < n; i++) {
    int len = fgetc(f);
    if (len == EOF) {
      code = Fail(msg, size, "tokenizer file '%s' ends at token %u of %u (truncated?)", path, i, n);
      goto done;
    }
    if (len == 0) {
      code = Fail(msg, size, "tokenizer file '%s': token %u has length 0", path, i);
      goto done;
    }
    if (fread(t->bytes + at, 1, (size_t)len, f) != (size_t)len) {
      code = Fail(msg, size, "tokenizer file '%s' ends inside token %u of %u (truncated?)", path, i,
                  n);
      goto done;
    }
    t->offset[i] = at;
    at += (size_t)len;
  }
  t->offset[n] = at;
  if (fgetc(f) != EOF) {
    code = Fail(msg, size, "tokenizer file '%s' has bytes after its %u tokens", path, n);
    goto done;
  }
done:
  fclose(f);
  if (code) {
    FsdpTokenizerDestroy(&t);
    return code;
  }
  *out = t;
  return FSDP_SUCCESS;
}

int FsdpTokenizerEot(FsdpTokenizer t) { return t->eot; }

const char *FsdpTokenizerDecode(FsdpTokenizer t, int id, size_t *len)
{
  if (id < 0 || id >= t->n) {
    *len = 0;
    return NULL;
  }
  *len = t->offset[id + 1] - t->offset[id];
  return t->bytes + t->offset[id];
}
