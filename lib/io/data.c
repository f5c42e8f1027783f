/* data.c: token data -- llm.c token files and the built-in task (data.h). */
#include "io/data.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/mem.h"

#define FSDP_DATA_HEADER_BYTES (FSDP_DATA_HEADER_INTS * 4)
/* Magics of llm.c files that are not GPT-2 token files, for better
 * messages when a user passes one of them to -data. */
#define LLMC_MAGIC_TOKENS_LLAMA3 20240801
#define LLMC_VERSION_TOKENS_LLAMA3 7
#define LLMC_MAGIC_MODEL 20240326
#define LLMC_MAGIC_TOKENIZER 20240328

struct FsdpData_ {
  char *source;       /* "builtin" or the file path (for messages) */
  uint16_t *tokens;   /* (n) the whole stream, tagged FSDP_MEM_DATA, or NULL */
  uint32_t *tokens32; /* (n) instead, for uint32 files ([Note: two token widths]) */
  int64_t n;          /* tokens in the stream */
  int vocab_size;     /* V */
  int T;              /* sequence length */
  int global_batch;   /* GB = data-parallel ranks * B */
  int heldout;        /* built-in task: the held-out segments (validation) */
};

/* ---- little-endian helpers ---------------------------------------------- */

static int32_t LoadLeI32(const unsigned char *p)
{
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
  int32_t v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static void StoreLeI32(unsigned char *p, int32_t v)
{
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  p[0] = (unsigned char)u;
  p[1] = (unsigned char)(u >> 8);
  p[2] = (unsigned char)(u >> 16);
  p[3] = (unsigned char)(u >> 24);
}

/* ---- rank-local failures, agreed on before anyone returns --------------- */

/* Record a usage error of this rank in msg without raising it: whether and
 * with which message to raise is decided by DataAgree, so that all ranks
 * fail together and the error is printed once. */
static int LocalFail(char *msg, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int LocalFail(char *msg, size_t size, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, size, fmt, ap);
  va_end(ap);
  return FSDP_ERR_USAGE;
}

/* [Note: agreeing on data errors] Every rank opens and checks the file
 * itself.  Normally all ranks then reach the same verdict, but not always:
 * a path that exists on one node's local disk and not on another's, a
 * node-local out-of-memory.  A rank that failed and returned while the others
 * went on into the first collective of the run would hang the job, so
 * FsdpDataCreate ends with this agreement: the lowest failing rank's code and
 * message are broadcast and every rank raises them (rank 0 prints usage
 * errors, so a defect only rank 5 saw still reaches the user). */
static int DataAgree(MPI_Comm comm, int *code, char *msg, size_t size)
{
  int rank = 0, nranks = 1, mine, first = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  FSDP_CALL_MPI(MPI_Comm_size(comm, &nranks));
  mine = *code != FSDP_SUCCESS ? rank : nranks;
  FSDP_CALL_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == nranks) return FSDP_SUCCESS;
  FSDP_CALL_MPI(MPI_Bcast(code, 1, MPI_INT, first, comm));
  FSDP_CALL_MPI(MPI_Bcast(msg, (int)size, MPI_CHAR, first, comm));
  msg[size - 1] = '\0';
  if (first != 0) {
    size_t len = strlen(msg);
    snprintf(msg + len, size - len,
             " (seen on rank %d of %d; the ranks below it loaded the data)",
             first, nranks);
  }
  return FSDP_SUCCESS;
}

/* ---- token files -------------------------------------------------------- */

/* Read and check the token file into d (this rank only).  On failure returns
 * the code with the message in msg; nothing is raised. */
static int DataReadFile(struct FsdpData_ *d, const char *path, char *msg,
                          size_t size)
{
  int code = FSDP_SUCCESS;
  FILE *f = fopen(path, "rb");
  if (!f)
    return LocalFail(msg, size, "cannot open token file '%s': %s", path,
                      strerror(errno));

  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    code = LocalFail(msg, size, "cannot stat token file '%s': %s", path,
                      strerror(errno));
    goto done;
  }
  if (S_ISDIR(st.st_mode)) {
    code = LocalFail(msg, size, "token file '%s' is a directory", path);
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    /* The size check below is what catches truncated copies; it needs a
     * regular file. */
    code = LocalFail(msg, size,
                      "token file '%s' is not a regular file (its size must "
                      "be known to check it)", path);
    goto done;
  }
  const long long bytes = (long long)st.st_size;
  if (bytes < FSDP_DATA_HEADER_BYTES) {
    code = LocalFail(msg, size,
                      "token file '%s' is too short for its header: %lld "
                      "bytes, but the header alone is %d bytes (%d int32)",
                      path, bytes, FSDP_DATA_HEADER_BYTES,
                      FSDP_DATA_HEADER_INTS);
    goto done;
  }

  unsigned char header[FSDP_DATA_HEADER_BYTES];
  if (fread(header, 1, sizeof header, f) != sizeof header) {
    code = LocalFail(msg, size, "cannot read the header of token file '%s': %s",
                      path, ferror(f) ? strerror(errno) : "unexpected end of file");
    goto done;
  }
  const int32_t magic = LoadLeI32(header);
  const int32_t version = LoadLeI32(header + 4);
  const int32_t count = LoadLeI32(header + 8);
  /* [Note: two token widths] llm.c writes GPT-2 tokens as uint16 (magic
   * 20240520, version 1) and LLaMA-3 tokens as uint32 (magic 20240801,
   * version 7: the 128256-token vocabulary does not fit 16 bits).  Each is
   * kept at its own width (tokens or tokens32), so a GPT-2 file costs what
   * it did. */
  const int llama3 = magic == LLMC_MAGIC_TOKENS_LLAMA3;
  const int tb = llama3 ? 4 : 2; /* bytes per token */
  const int32_t want_version = llama3 ? LLMC_VERSION_TOKENS_LLAMA3 : FSDP_DATA_VERSION;
  if (magic != FSDP_DATA_MAGIC && !llama3) {
    const char *hint = "";
    if (magic == LLMC_MAGIC_MODEL)
      hint = "; 20240326 is an llm.c model checkpoint, not a token file";
    else if (magic == LLMC_MAGIC_TOKENIZER)
      hint = "; 20240328 is an llm.c tokenizer file, not a token file";
    code = LocalFail(msg, size,
                      "token file '%s' has magic %d, expected %d (an llm.c "
                      "token file) or %d (llm.c's LLaMA-3 token file)%s", path, (int)magic,
                      FSDP_DATA_MAGIC, LLMC_MAGIC_TOKENS_LLAMA3, hint);
    goto done;
  }
  if (version != want_version) {
    code = LocalFail(msg, size, "token file '%s' has version %d, expected %d",
                      path, (int)version, (int)want_version);
    goto done;
  }
  if (count <= 0) {
    code = LocalFail(msg, size,
                      "token file '%s': header says %d tokens; the count must "
                      "be positive", path, (int)count);
    goto done;
  }
  const long long holds = (bytes - FSDP_DATA_HEADER_BYTES) / tb;
  if ((long long)count > holds) {
    code = LocalFail(msg, size,
                      "token file '%s': header says %d tokens but the file "
                      "holds only %lld (%lld bytes; truncated?)", path,
                      (int)count, holds, bytes);
    goto done;
  }
  const long long expect_bytes = FSDP_DATA_HEADER_BYTES + (long long)tb * count;
  if (bytes != expect_bytes) {
    code = LocalFail(msg, size,
                      "token file '%s' has %lld trailing byte%s after its %d "
                      "tokens (its size must be exactly 1024 + %d*%d = %lld "
                      "bytes, it is %lld)", path, bytes - expect_bytes,
                      bytes - expect_bytes == 1 ? "" : "s", (int)count, tb,
                      (int)count, expect_bytes, bytes);
    goto done;
  }
  const long long need = (long long)d->global_batch * d->T + 1;
  if ((long long)count < need) {
    code = LocalFail(msg, size,
                      "token file '%s' holds %d tokens but one global batch "
                      "needs global_batch*T + 1 = %d*%d + 1 = %lld (global "
                      "batch = data-parallel ranks x -batch_size); use a larger "
                      "file or a smaller -batch_size or -seq_len", path,
                      (int)count, d->global_batch, d->T, need);
    goto done;
  }

  if (tb == 4) code = FsdpMalloc(FSDP_MEM_DATA, (size_t)count * 4, &d->tokens32);
  else code = FsdpMalloc(FSDP_MEM_DATA, (size_t)count * 2, &d->tokens);
  if (code != FSDP_SUCCESS) {
    snprintf(msg, size, "loading token file '%s': %s", path,
             FsdpErrorLastMessage());
    goto done;
  }
  /* One read of the whole stream: token files used here are small, and every
   * rank needs random access to all of it ([Note: global batch]). */
  if (fread(tb == 4 ? (void *)d->tokens32 : (void *)d->tokens, (size_t)tb, (size_t)count, f) !=
      (size_t)count) {
    code = LocalFail(msg, size, "cannot read the %d tokens of token file "
                      "'%s': %s", (int)count, path,
                      ferror(f) ? strerror(errno) : "unexpected end of file");
    goto done;
  }
  if (!FsdpHostIsLittleEndian()) {
    if (tb == 2)
      for (int32_t i = 0; i < count; i++)
        d->tokens[i] = (uint16_t)(d->tokens[i] >> 8 | d->tokens[i] << 8);
    else
      for (int32_t i = 0; i < count; i++) {
        uint32_t v = d->tokens32[i];
        d->tokens32[i] = v >> 24 | (v >> 8 & 0xff00u) | (v << 8 & 0xff0000u) | v << 24;
      }
  }
  d->n = count;
  for (int32_t i = 0; i < count; i++) {
    int64_t v = tb == 4 ? (int64_t)d->tokens32[i] : (int64_t)d->tokens[i];
    if (v >= d->vocab_size) {
      code = LocalFail(msg, size,
                        "token file '%s': the token at position %d has value "
                        "%lld, not below -vocab_size %d", path, (int)i,
                        (long long)v, d->vocab_size);
      goto done;
    }
  }

done:
  fclose(f);
  return code;
}

int FsdpDataWriteFile(const char *path, const uint16_t *tokens, int64_t n)
{
  if (!path || !*path) FSDP_ERROR(FSDP_ERR_USAGE, "token file: empty path");
  if (n < 1 || n > INT32_MAX)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "token file '%s': cannot write %lld tokens (the header's count "
               "is an int32 and must be positive)", path, (long long)n);
  FILE *f = fopen(path, "wb");
  if (!f)
    FSDP_ERROR(FSDP_ERR_IO, "cannot create token file '%s': %s", path,
               strerror(errno));
  unsigned char header[FSDP_DATA_HEADER_BYTES] = {0};
  StoreLeI32(header, FSDP_DATA_MAGIC);
  StoreLeI32(header + 4, FSDP_DATA_VERSION);
  StoreLeI32(header + 8, (int32_t)n);
  int ok = fwrite(header, 1, sizeof header, f) == sizeof header;
  /* Encode through a small buffer so the file is little-endian on any
   * host. */
  unsigned char buf[8192];
  for (int64_t i = 0; ok && i < n;) {
    size_t k = 0;
    for (; k + 2 <= sizeof buf && i < n; i++, k += 2) {
      buf[k] = (unsigned char)tokens[i];
      buf[k + 1] = (unsigned char)(tokens[i] >> 8);
    }
    ok = fwrite(buf, 1, k, f) == k;
  }
  int err = ok ? 0 : errno;
  if (fclose(f) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  if (!ok)
    FSDP_ERROR(FSDP_ERR_IO, "cannot write token file '%s': %s", path,
               strerror(err));
  return FSDP_SUCCESS;
}

/* ---- the built-in task -------------------------------------------------- */

/* [Note: built-in task] Without -data, training runs on a token stream that
 * a small GPT can learn quickly and that needs attention, not only bigram
 * statistics, to learn fully.  Made of:
 *
 *   alphabet   A = min(V, 256) tokens; 0 and 1 are segment markers, the
 *              K = A - 2 others are content.  (With the GPT-2 vocabulary the
 *              model first learns to never predict the other V - A tokens:
 *              ln V -> about ln A.)
 *   segments   back to back; each starts with its marker (bigram with
 *              probability 2/3, copy 1/3) and is one of:
 *     bigram   marker 0, then 16..64 content tokens: the first uniform, each
 *              next one is succ[previous] with probability 0.97 and uniform
 *              otherwise; succ is a fixed random permutation of the content
 *              tokens (a bigram table to learn);
 *     copy     marker 1, then a phrase of 4..12 uniform content tokens,
 *              repeated so that it occurs 3..6 times in a row (learnable only
 *              by looking back: induction-head structure).
 *
 * Every random choice is a counter-based hash of (seed, segment, slot) and
 * the table of (seed, table slot), so the stream is a pure function of the
 * seed, independent of the order it is generated in.  The stream is
 * generated once (period n = 2^20 tokens, or one global batch if that is
 * longer; 2 MiB as uint16) and then read exactly like a token file.
 *
 * Loss floors, nats per token, measured over one period (seed 1234) by
 * counting: with V >= 256, uniform ln 256 = 5.55 (ln V at initialization:
 * 10.8 for GPT-2's vocabulary) and a bigram model (the conditional entropy
 * of the next token given the current one; it cannot copy) 2.44; with
 * V = 64: 4.16 and 2.08; V = 16: 2.77 and 1.52.  Most of what remains is
 * the first, uniform occurrence of each copy phrase.  A model below the
 * bigram figure has learned to copy, i.e. uses attention.
 * tests/test_data.c asserts the bigram structure and the copy structure. */
#define BUILTIN_PERIOD (1 << 20)
#define BUILTIN_ALPHABET 256
#define BUILTIN_MARK_BIGRAM 0
#define BUILTIN_MARK_COPY 1
#define BUILTIN_NMARKS 2
#define BUILTIN_MIN_VOCAB (BUILTIN_NMARKS + 2)
#define BUILTIN_TABLE_STREAM UINT64_MAX /* hash stream of the succ table */
/* [Note: held-out stream] Validation on the built-in task needs text of
 * the same task (the same succ table, the same segment rules) that
 * training never sees.  The training stream uses segments 0, 1, 2, ...
 * (about 2^16 of them per period); the held-out stream numbers its
 * segments from 2^62, so every random choice comes from hash slots the
 * training stream never draws, while the table (its own hash stream,
 * BUILTIN_TABLE_STREAM) is shared. */
#define BUILTIN_HELDOUT_SEGMENT (UINT64_C(1) << 62)

/* splitmix64's finalizer: a bijection of 64-bit words with good avalanche. */
static uint64_t mix64(uint64_t z)
{
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Counter-based random word for (seed, stream, slot). */
static uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t slot)
{
  return mix64(mix64(mix64(seed ^ 0x6461746174736B31ULL) ^ stream) ^ slot);
}

/* Uniform in [0, k) from the high 32 bits (bias < k / 2^32, negligible). */
static int DrawBelow(uint64_t h, int k)
{
  return (int)(((h >> 32) * (uint64_t)k) >> 32);
}

/* Probability 0.97 from the low 32 bits. */
static int DrawFollow(uint64_t h)
{
  return (h & 0xFFFFFFFFULL) < (uint64_t)(0.97 * 4294967296.0);
}

static int DataMakeBuiltin(struct FsdpData_ *d, uint64_t seed, char *msg,
                             size_t size)
{
  if (d->vocab_size < BUILTIN_MIN_VOCAB)
    return LocalFail(msg, size,
                      "the built-in task needs -vocab_size >= %d (2 markers "
                      "and 2 content tokens), got %d; or give -data FILE",
                      BUILTIN_MIN_VOCAB, d->vocab_size);
  const long long need = (long long)d->global_batch * d->T + 1;
  if (need > INT32_MAX)
    return LocalFail(msg, size,
                      "the built-in task cannot hold one global batch of "
                      "%d*%d + 1 = %lld tokens", d->global_batch, d->T, need);
  const int64_t n = need > BUILTIN_PERIOD ? need : BUILTIN_PERIOD;
  const int K = (d->vocab_size < BUILTIN_ALPHABET ? d->vocab_size
                                                  : BUILTIN_ALPHABET) -
                BUILTIN_NMARKS;

  int code = FsdpMalloc(FSDP_MEM_DATA, (size_t)n * sizeof(uint16_t), &d->tokens);
  if (code != FSDP_SUCCESS) {
    snprintf(msg, size, "making the built-in task: %s", FsdpErrorLastMessage());
    return code;
  }
  d->n = n;

  /* succ: a random permutation of the content tokens (Fisher-Yates). */
  int succ[BUILTIN_ALPHABET];
  for (int c = 0; c < K; c++) succ[c] = c;
  for (int c = K - 1; c > 0; c--) {
    int j = DrawBelow(hash3(seed, BUILTIN_TABLE_STREAM, (uint64_t)c), c + 1);
    int t = succ[c];
    succ[c] = succ[j];
    succ[j] = t;
  }

  uint16_t *out = d->tokens;
  int64_t p = 0;
#define BUILTIN_PUT(tok)                          \
  do {                                            \
    if (p < n) out[p] = (uint16_t)(tok);          \
    p++;                                          \
  } while (0)
  for (uint64_t seg = d->heldout ? BUILTIN_HELDOUT_SEGMENT : 0; p < n; seg++) {
    const uint64_t h = hash3(seed, seg, 0);
    if ((h & 0xff) % 3 != 0) { /* two segments in three are bigram text */
      const int len = 16 + (int)((h >> 8) % 49);  /* 16..64 */
      int prev = -1;
      BUILTIN_PUT(BUILTIN_MARK_BIGRAM);
      for (int o = 0; o < len; o++) {
        const uint64_t r = hash3(seed, seg, 1 + (uint64_t)o);
        const int c = prev >= 0 && DrawFollow(r) ? succ[prev] : DrawBelow(r, K);
        BUILTIN_PUT(BUILTIN_NMARKS + c);
        prev = c;
      }
    } else {
      const int len = 4 + (int)((h >> 8) % 9);    /* 4..12 */
      const int reps = 3 + (int)((h >> 16) % 4);  /* 3..6 occurrences */
      BUILTIN_PUT(BUILTIN_MARK_COPY);
      for (int k = 0; k < reps; k++)
        for (int o = 0; o < len; o++)
          BUILTIN_PUT(BUILTIN_NMARKS +
                      DrawBelow(hash3(seed, seg, 1 + (uint64_t)o), K));
    }
  }
#undef BUILTIN_PUT
  return FSDP_SUCCESS;
}

/* ---- the handle --------------------------------------------------------- */

static void DataFree(struct FsdpData_ *d)
{
  if (!d) return;
  FsdpFree(&d->tokens);
  FsdpFree(&d->tokens32);
  free(d->source);
  free(d);
}

/* Everything FsdpDataCreate does on one rank; raises nothing. */
static int DataSetup(struct FsdpData_ *d, const char *path, int vocab_size,
                      int T, int global_batch, uint64_t seed, char *msg,
                      size_t size)
{
  const int builtin = !path || !*path;
  char what[1200];
  if (builtin)
    snprintf(what, sizeof what, "the built-in task");
  else
    snprintf(what, sizeof what, "token file '%.1000s'", path);
  if (vocab_size < 1)
    return LocalFail(msg, size, "%s: -vocab_size must be positive, got %d",
                      what, vocab_size);
  if (T < 1)
    return LocalFail(msg, size, "%s: the sequence length (-seq_len) "
                      "must be positive, got %d", what, T);
  if (global_batch < 1)
    return LocalFail(msg, size, "%s: the global batch must be positive, "
                      "got %d", what, global_batch);
  d->vocab_size = vocab_size;
  d->T = T;
  d->global_batch = global_batch;
  d->source = strdup(builtin ? "builtin" : path);
  if (!d->source) {
    snprintf(msg, size, "%s: out of memory", what);
    return FSDP_ERR_MEM;
  }
  return builtin ? DataMakeBuiltin(d, seed, msg, size)
                 : DataReadFile(d, path, msg, size);
}

static int DataCreate(MPI_Comm comm, const char *path, int vocab_size, int T,
                      int global_batch, uint64_t seed, int heldout, FsdpData *d)
{
  FSDP_ASSERT(d != NULL);
  *d = NULL;
  char msg[2048] = "";
  int code;
  struct FsdpData_ *x = calloc(1, sizeof *x);
  if (x) x->heldout = heldout;
  if (x)
    code = DataSetup(x, path, vocab_size, T, global_batch, seed, msg,
                      sizeof msg);
  else {
    code = FSDP_ERR_MEM;
    snprintf(msg, sizeof msg, "token data: out of memory");
  }
  /* [Note: agreeing on data errors] */
  int err = DataAgree(comm, &code, msg, sizeof msg);
  if (err != FSDP_SUCCESS || code != FSDP_SUCCESS) DataFree(x);
  FSDP_CALL(err);
  if (code != FSDP_SUCCESS) FSDP_ERROR(code, "%s", msg);
  *d = x;
  return FSDP_SUCCESS;
}

int FsdpDataCreate(MPI_Comm comm, const char *path, int vocab_size, int T,
                   int global_batch, uint64_t seed, FsdpData *d)
{
  return DataCreate(comm, path, vocab_size, T, global_batch, seed, 0, d);
}

int FsdpDataCreateHeldOut(MPI_Comm comm, const char *path, int vocab_size, int T,
                          int global_batch, uint64_t seed, FsdpData *d)
{
  return DataCreate(comm, path, vocab_size, T, global_batch, seed, 1, d);
}

/* [Note: built-in alphabet] The built-in task's tokens as text, so that
 * fsdp-sample can show what a model trained on it writes: the bigram
 * marker starts a new line, the copy marker a new line with "> ", and
 * content token c (0-based after the markers) is a syllable: a consonant
 * (c mod 16) and a vowel group (c div 16), followed by a space. */
static const char kConsonants[16] = {'b', 'd', 'f', 'g', 'h', 'j', 'k', 'l',
                                     'm', 'n', 'p', 'r', 's', 't', 'v', 'z'};
static const char *const kVowels[16] = {"a",  "e",  "i",  "o",  "u",  "ai", "au", "ea",
                                        "ee", "ei", "ia", "io", "oa", "oo", "ou", "ua"};

void FsdpDataBuiltinTokenText(int token, char *buf, size_t size)
{
  if (size == 0) return;
  if (token == BUILTIN_MARK_BIGRAM)
    snprintf(buf, size, "\n");
  else if (token == BUILTIN_MARK_COPY)
    snprintf(buf, size, "\n> ");
  else if (token >= BUILTIN_NMARKS && token < BUILTIN_ALPHABET)
    snprintf(buf, size, "%c%s ", kConsonants[(token - BUILTIN_NMARKS) % 16],
             kVowels[(token - BUILTIN_NMARKS) / 16]);
  else /* never produced by the task (ids beyond its alphabet) */
    snprintf(buf, size, "<%d>", token);
}

int FsdpDataDestroy(FsdpData *d)
{
  if (!d || !*d) return FSDP_SUCCESS;
  DataFree(*d);
  *d = NULL;
  return FSDP_SUCCESS;
}

int FsdpDataGetBatch(FsdpData d, int64_t micro_step, int dp_rank, int dp_size,
                     int *inputs, int *targets)
{
  FSDP_ASSERT(d != NULL && inputs != NULL && targets != NULL);
  if (dp_size < 1 || d->global_batch % dp_size != 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "the global batch of %d sequences does not split evenly over "
               "%d data-parallel ranks", d->global_batch, dp_size);
  if (dp_rank < 0 || dp_rank >= dp_size)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "data-parallel rank %d is not in [0, %d)",
               dp_rank, dp_size);
  if (micro_step < 0)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "negative micro-step %lld",
               (long long)micro_step);
  const int T = d->T;
  const int B = d->global_batch / dp_size;
  /* [Note: global batch]: sample j starts at (j*T) mod span.  Reduce every
   * factor mod span first: span < 2^31, so no product overflows however
   * long the run. */
  const int64_t span = d->n - T;
  const int64_t j0 = ((micro_step % span) * (d->global_batch % span) +
                      (int64_t)dp_rank * B) % span;
  for (int i = 0; i < B; i++) {
    const int64_t j = (j0 + i) % span;
    const int64_t off = (j * (T % span)) % span;
    int *in = inputs + (size_t)i * T, *tg = targets + (size_t)i * T;
    if (d->tokens32) {
      const uint32_t *w = d->tokens32 + off; /* below vocab_size: fits an int */
      for (int t = 0; t < T; t++) {
        in[t] = (int)w[t];
        tg[t] = (int)w[t + 1];
      }
    } else {
      const uint16_t *w = d->tokens + off;
      for (int t = 0; t < T; t++) {
        in[t] = w[t];
        tg[t] = w[t + 1];
      }
    }
  }
  return FSDP_SUCCESS;
}

int64_t FsdpDataNumTokens(FsdpData d) { return d ? d->n : 0; }

const char *FsdpDataSourceName(FsdpData d) { return d ? d->source : ""; }
