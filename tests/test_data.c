/* test_data.c: token files and the built-in task (lib/io/data.h).
 *
 * Rank 0 writes valid and defective token files into a directory named
 * after its pid; every rank then opens them.  Checks: every defect is a
 * usage error on every rank whose message names the file and the defect
 * (and a defect seen by one rank only fails all of them); batches hold the
 * file's tokens at the positions of [Note: global batch], wrap around, and
 * do not depend on how the global batch is split over data-parallel ranks;
 * the built-in task is deterministic per seed, in range, and has both
 * bigram and copy (attention) structure.
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/data.h"
#include "base/error.h"
#include "base/init.h"
#include "base/mem.h"
#include "testutil.h"

static int g_rank, g_size;
static char g_dir[256];

static void path_of(char *out, size_t size, const char *name)
{
  snprintf(out, size, "%s/%s", g_dir, name);
}

/* Rank 0 writes a file of raw bytes: a header with the given first three
 * slots, ntok tokens, extra trailing bytes, cut to `keep` bytes if
 * keep >= 0.  Collective on MPI_COMM_WORLD (barrier after writing). */
static void write_raw(const char *name, int32_t magic, int32_t version,
                      int32_t count, const uint16_t *tok, long ntok,
                      long extra, long keep)
{
  if (g_rank == 0) {
    long total = 1024 + 2 * ntok + extra;
    unsigned char *buf = calloc((size_t)total, 1);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h); /* test hosts are little-endian */
    memcpy(buf + 1024, tok, (size_t)ntok * 2);
    for (long i = 0; i < extra; i++) buf[1024 + 2 * ntok + i] = 0xAB;
    if (keep >= 0 && keep < total) total = keep;
    char path[512];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, (size_t)total, f) != (size_t)total) {
      fprintf(stderr, "cannot write %s\n", path);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fclose(f);
    free(buf);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Open path (collectively); expect a usage error on this rank whose
 * message contains the path (unless NULL) and each of `want`. */
static void expect_usage(const char *label, const char *path, int V, int T,
                         int GB, const char *want1, const char *want2)
{
  FsdpData d = NULL;
  int err = FsdpDataCreate(MPI_COMM_WORLD, path, V, T, GB, 1, &d);
  const char *msg = FsdpErrorLastMessage();
  CHECK(err == FSDP_ERR_USAGE, "%s: got code %d (%s), want usage error",
        label, err, FsdpErrorName(err));
  CHECK(d == NULL, "%s: handle set on failure", label);
  if (path && *path)
    CHECK(strstr(msg, path) != NULL, "%s: message does not name the file: %s",
          label, msg);
  if (want1)
    CHECK(strstr(msg, want1) != NULL, "%s: message lacks '%s': %s", label,
          want1, msg);
  if (want2)
    CHECK(strstr(msg, want2) != NULL, "%s: message lacks '%s': %s", label,
          want2, msg);
  FsdpDataDestroy(&d);
}

static uint16_t file_token(long i, int V)
{
  return (uint16_t)(((uint64_t)i * 2654435761u >> 7) % (uint64_t)V);
}

/* Compare a batch with the windows that [Note: global batch] says: sample
 * j = m*GB + r*B + i starts at (j*T) mod (n - T).  Computed here in 128-bit
 * arithmetic, independently of the library's modular reduction. */
static int check_batch(const char *label, FsdpData d, const uint16_t *tok,
                       long n, int T, int GB, int64_t m, int r, int W)
{
  const int B = GB / W;
  int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
  int err = FsdpDataGetBatch(d, m, r, W, in, tg);
  CHECK(err == 0, "%s: GetBatch(m=%lld, r=%d, W=%d) failed", label,
        (long long)m, r, W);
  int bad = 0;
  for (int i = 0; i < B && !err; i++) {
    __extension__ __int128 j = (__int128)m * GB + (__int128)r * B + i;
    long start = (long)((j * T) % (n - T));
    for (int t = 0; t < T; t++) {
      int k = i * T + t;
      if (in[k] != tok[start + t] || tg[k] != tok[start + t + 1]) {
        if (bad < 3)
          fprintf(stderr,
                  "[rank %d] %s m=%lld r=%d W=%d sample %d t=%d: input %d "
                  "target %d, want %d %d (tokens %ld, %ld)\n", g_rank, label,
                  (long long)m, r, W, i, t, in[k], tg[k], tok[start + t],
                  tok[start + t + 1], start + t, start + t + 1);
        bad++;
      }
    }
  }
  CHECK(bad == 0, "%s: %d wrong tokens at m=%lld r=%d W=%d", label, bad,
        (long long)m, r, W);
  free(in);
  free(tg);
  return bad;
}

/* The concatenation over W data-parallel ranks of their batches equals the
 * batch of one rank with the whole global batch. */
static void check_split_invariance(const char *label, FsdpData d, int T,
                                   int GB, int64_t m)
{
  int *in1 = malloc(sizeof(int) * GB * T), *tg1 = malloc(sizeof(int) * GB * T);
  int *in = malloc(sizeof(int) * GB * T), *tg = malloc(sizeof(int) * GB * T);
  TCALL(FsdpDataGetBatch(d, m, 0, 1, in1, tg1));
  for (int W = 2; W <= GB; W++) {
    if (GB % W) continue;
    const int B = GB / W;
    for (int r = 0; r < W; r++)
      TCALL(FsdpDataGetBatch(d, m, r, W, in + (size_t)r * B * T,
                             tg + (size_t)r * B * T));
    int bad = 0, first = -1;
    for (int k = 0; k < GB * T; k++)
      if (in[k] != in1[k] || tg[k] != tg1[k]) {
        if (first < 0) first = k;
        bad++;
      }
    CHECK(bad == 0,
          "%s: m=%lld split over %d ranks differs from one rank in %d "
          "tokens, first at %d (%d vs %d)", label, (long long)m, W, bad,
          first, first >= 0 ? in[first] : 0, first >= 0 ? in1[first] : 0);
  }
  free(in1);
  free(tg1);
  free(in);
  free(tg);
}

/* Across the real ranks of MPI_COMM_WORLD: rank r with B = GB/size gets
 * exactly rank r's slice of the one-rank global batch. */
static void check_world_split(const char *label, FsdpData d, int T, int GB,
                              int64_t m)
{
  if (GB % g_size) return;
  const int B = GB / g_size;
  int *mine = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
  int *all = malloc(sizeof(int) * GB * T), *ref = malloc(sizeof(int) * GB * T);
  int *reft = malloc(sizeof(int) * GB * T);
  TCALL(FsdpDataGetBatch(d, m, g_rank, g_size, mine, tg));
  MPI_Allgather(mine, B * T, MPI_INT, all, B * T, MPI_INT, MPI_COMM_WORLD);
  TCALL(FsdpDataGetBatch(d, m, 0, 1, ref, reft));
  int bad = 0;
  for (int k = 0; k < GB * T; k++) bad += all[k] != ref[k];
  CHECK(bad == 0, "%s: m=%lld gathered over %d ranks differs in %d tokens",
        label, (long long)m, g_size, bad);
  free(mine);
  free(tg);
  free(all);
  free(ref);
  free(reft);
}

static void test_defects(void)
{
  char p[512], good[512];
  const int V = 1000;
  uint16_t tok[1000];
  for (int i = 0; i < 1000; i++) tok[i] = file_token(i, V);
  size_t base = FsdpMemCurrent(FSDP_MEM_DATA);

  path_of(good, sizeof good, "good.bin");
  write_raw("good.bin", FSDP_DATA_MAGIC, 1, 1000, tok, 1000, 0, -1);

  path_of(p, sizeof p, "missing.bin");
  expect_usage("missing file", p, V, 8, 4, "cannot open", "No such file");
  expect_usage("directory", g_dir, V, 8, 4, "is a directory", NULL);

  write_raw("short.bin", FSDP_DATA_MAGIC, 1, 1000, tok, 1000, 0, 100);
  path_of(p, sizeof p, "short.bin");
  expect_usage("short header", p, V, 8, 4, "too short for its header",
               "100 bytes");

  write_raw("empty.bin", FSDP_DATA_MAGIC, 1, 1000, tok, 0, 0, 0);
  path_of(p, sizeof p, "empty.bin");
  expect_usage("empty file", p, V, 8, 4, "too short for its header",
               "0 bytes");

  write_raw("magic.bin", 12345, 1, 1000, tok, 1000, 0, -1);
  path_of(p, sizeof p, "magic.bin");
  expect_usage("wrong magic", p, V, 8, 4, "magic 12345", "expected 20240520");

  write_raw("model.bin", 20240326, 3, 1000, tok, 1000, 0, -1);
  path_of(p, sizeof p, "model.bin");
  expect_usage("model file", p, V, 8, 4, "magic 20240326", "checkpoint");

  /* llm.c's LLaMA-3 layout: the same header words, uint32 tokens (the 1000
   * uint16 values read as 500 uint32 ones); version 7 only */
  write_raw("llama3v.bin", 20240801, 1, 500, tok, 1000, 0, -1);
  path_of(p, sizeof p, "llama3v.bin");
  expect_usage("llama3 file, wrong version", p, V, 8, 4, "version 1", "expected 7");
  write_raw("llama3big.bin", 20240801, 7, 500, tok, 1000, 2, -1);
  path_of(p, sizeof p, "llama3big.bin");
  expect_usage("llama3 file, trailing bytes", p, 1 << 30, 8, 4, "2 trailing bytes", "1024 + 4*500");

  write_raw("version.bin", FSDP_DATA_MAGIC, 7, 1000, tok, 1000, 0, -1);
  path_of(p, sizeof p, "version.bin");
  expect_usage("wrong version", p, V, 8, 4, "version 7", "expected 1");

  write_raw("zero.bin", FSDP_DATA_MAGIC, 1, 0, tok, 1000, 0, -1);
  path_of(p, sizeof p, "zero.bin");
  expect_usage("zero count", p, V, 8, 4, "header says 0 tokens", "positive");

  write_raw("negative.bin", FSDP_DATA_MAGIC, 1, -5, tok, 1000, 0, -1);
  path_of(p, sizeof p, "negative.bin");
  expect_usage("negative count", p, V, 8, 4, "header says -5 tokens",
               "positive");

  write_raw("truncated.bin", FSDP_DATA_MAGIC, 1, 1000, tok, 900, 0, -1);
  path_of(p, sizeof p, "truncated.bin");
  expect_usage("count too large", p, V, 8, 4,
               "header says 1000 tokens but the file holds only 900", NULL);

  /* Half a token short: the count is still too large. */
  write_raw("halftoken.bin", FSDP_DATA_MAGIC, 1, 1000, tok, 1000, 0,
            1024 + 1999);
  path_of(p, sizeof p, "halftoken.bin");
  expect_usage("odd truncation", p, V, 8, 4,
               "header says 1000 tokens but the file holds only 999", NULL);

  write_raw("trailing.bin", FSDP_DATA_MAGIC, 1, 1000, tok, 1000, 3, -1);
  path_of(p, sizeof p, "trailing.bin");
  expect_usage("trailing bytes", p, V, 8, 4, "3 trailing bytes", "3027");

  write_raw("trailing1.bin", FSDP_DATA_MAGIC, 1, 1000, tok, 1000, 1, -1);
  path_of(p, sizeof p, "trailing1.bin");
  expect_usage("one trailing byte", p, V, 8, 4, "1 trailing byte ", NULL);

  {
    uint16_t bad[1000];
    memcpy(bad, tok, sizeof bad);
    bad[123] = (uint16_t)V;
    bad[500] = 60000;
    write_raw("vocab.bin", FSDP_DATA_MAGIC, 1, 1000, bad, 1000, 0, -1);
    path_of(p, sizeof p, "vocab.bin");
    expect_usage("token out of vocab", p, V, 8, 4, "position 123 has value 1000",
                 "-vocab_size 1000");
    /* With a vocabulary that holds 1000 the next bad token is reported. */
    expect_usage("token out of vocab 2", p, 50257, 8, 4,
                 "position 500 has value 60000", "-vocab_size 50257");
  }

  /* One global batch of 8 sequences of 16 needs 129 tokens. */
  write_raw("small.bin", FSDP_DATA_MAGIC, 1, 128, tok, 128, 0, -1);
  path_of(p, sizeof p, "small.bin");
  expect_usage("too few tokens", p, V, 16, 8, "holds 128 tokens",
               "8*16 + 1 = 129");
  write_raw("enough.bin", FSDP_DATA_MAGIC, 1, 129, tok, 129, 0, -1);
  path_of(p, sizeof p, "enough.bin");
  {
    FsdpData d = NULL;
    int err = FsdpDataCreate(MPI_COMM_WORLD, p, V, 16, 8, 1, &d);
    CHECK(err == 0 && d, "exactly one global batch of tokens refused: %s",
          FsdpErrorLastMessage());
    if (d) {
      check_batch("one batch", d, tok, 129, 16, 8, 0, 0, 1);
      check_batch("one batch, next step", d, tok, 129, 16, 8, 1, 0, 1);
    }
    FsdpDataDestroy(&d);
  }

  /* Bad arguments. */
  expect_usage("T = 0", good, V, 0, 4, "sequence length", NULL);
  expect_usage("global batch = 0", good, V, 8, 0, "global batch", NULL);
  expect_usage("vocab_size = 0", good, 0, 8, 4, "-vocab_size", NULL);
  expect_usage("built-in, V = 3", NULL, 3, 8, 4, "-vocab_size >= 4", NULL);

  /* A defect only the last rank sees must fail every rank, not hang. */
  if (g_size > 1) {
    path_of(p, sizeof p, "missing.bin");
    const char *mine = g_rank == g_size - 1 ? p : good;
    FsdpData d = NULL;
    int err = FsdpDataCreate(MPI_COMM_WORLD, mine, V, 8, 4, 1, &d);
    const char *msg = FsdpErrorLastMessage();
    char want[64];
    snprintf(want, sizeof want, "seen on rank %d", g_size - 1);
    CHECK(err == FSDP_ERR_USAGE, "one-rank defect: code %d on rank %d", err,
          g_rank);
    CHECK(strstr(msg, p) && strstr(msg, "No such file") && strstr(msg, want),
          "one-rank defect: message %s", msg);
    FsdpDataDestroy(&d);
  }

  CHECK(FsdpMemCurrent(FSDP_MEM_DATA) == base,
        "failed creates leaked %zu bytes of data memory",
        FsdpMemCurrent(FSDP_MEM_DATA) - base);
}

static void test_file_batches(void)
{
  char p[512];
  const long n = 1000;
  const int V = 50257, T = 8, GB = 12;
  uint16_t tok[1000];
  for (long i = 0; i < n; i++) tok[i] = file_token(i, V);
  path_of(p, sizeof p, "tokens.bin");
  if (g_rank == 0) TCALL(FsdpDataWriteFile(p, tok, n));
  MPI_Barrier(MPI_COMM_WORLD);

  /* The writer's bytes: llm.c's layout exactly. */
  {
    FILE *f = fopen(p, "rb");
    CHECK(f != NULL, "cannot reopen %s", p);
    if (f) {
      int32_t h[256];
      uint16_t back[1000];
      size_t nh = fread(h, 4, 256, f), nt = fread(back, 2, 1000, f);
      int extra = fgetc(f);
      fclose(f);
      int zeros = 1;
      for (int i = 3; i < 256; i++) zeros &= h[i] == 0;
      CHECK(nh == 256 && h[0] == 20240520 && h[1] == 1 && h[2] == 1000 &&
                zeros, "written header wrong: %d %d %d", h[0], h[1], h[2]);
      CHECK(nt == 1000 && memcmp(back, tok, sizeof tok) == 0 && extra == EOF,
            "written tokens wrong (%zu read, extra %d)", nt, extra);
    }
  }
  if (g_rank == 0) {
    char q[600];
    snprintf(q, sizeof q, "%s/no/such/dir/x.bin", g_dir);
    int err = FsdpDataWriteFile(q, tok, n);
    CHECK(err == FSDP_ERR_IO && strstr(FsdpErrorLastMessage(), q),
          "writing into a missing directory: code %d, %s", err,
          FsdpErrorLastMessage());
  }

  size_t base = FsdpMemCurrent(FSDP_MEM_DATA);
  FsdpData d = NULL;
  TCALL(FsdpDataCreate(MPI_COMM_WORLD, p, V, T, GB, 1, &d));
  CHECK(FsdpMemCurrent(FSDP_MEM_DATA) - base == 2 * (size_t)n,
        "data memory %zu, want %ld", FsdpMemCurrent(FSDP_MEM_DATA) - base,
        2 * n);
  CHECK(FsdpDataNumTokens(d) == n, "NumTokens %lld", (long long)FsdpDataNumTokens(d));
  CHECK(strcmp(FsdpDataSourceName(d), p) == 0, "SourceName %s",
        FsdpDataSourceName(d));

  /* n - T = 992 = 124 windows of 8 per pass, so micro-steps 0..30 cover the
   * first wrap (sample 124, micro-step 10) and the second (248, step 20). */
  for (int64_t m = 0; m <= 30; m++)
    for (int W = 1; W <= GB; W++) {
      if (GB % W) continue;
      for (int r = 0; r < W; r++) check_batch("file", d, tok, n, T, GB, m, r, W);
    }
  /* Far into a run: no overflow in (j*T) mod (n-T). */
  check_batch("file, step 1e15", d, tok, n, T, GB, 1000000000000007LL, 3, 4);
  check_batch("file, step 2^62/GB", d, tok, n, T, GB,
              (int64_t)((1ULL << 62) / GB), 5, 6);

  /* Wrap-around, spelled out: sample 123 is the last window of the pass
   * (tokens 984..992) and sample 124 starts over at token 0. */
  {
    int in[12 * 8], tg[12 * 8];
    TCALL(FsdpDataGetBatch(d, 10, 0, 1, in, tg)); /* samples 120..131 */
    CHECK(in[3 * T] == tok[984] && tg[3 * T + T - 1] == tok[992],
          "sample 123: %d..%d, want %d..%d", in[3 * T], tg[3 * T + T - 1],
          tok[984], tok[992]);
    CHECK(in[4 * T] == tok[0] && tg[4 * T] == tok[1],
          "sample 124 does not wrap to token 0: %d, want %d", in[4 * T],
          tok[0]);
    int shifted = 1;
    for (int k = 0; k < 12 * T; k++)
      if (k % T != T - 1) shifted &= tg[k] == in[k + 1];
    CHECK(shifted, "targets are not the inputs shifted by one");
  }

  for (int64_t m = 0; m < 25; m++) {
    check_split_invariance("file", d, T, GB, m);
    check_world_split("file", d, T, GB, m);
  }

  {
    int in[12 * 8], tg[12 * 8];
    int err = FsdpDataGetBatch(d, 0, 0, 5, in, tg);
    CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "12") &&
              strstr(FsdpErrorLastMessage(), "5 data-parallel"),
          "global batch 12 over 5 ranks: code %d, %s", err,
          FsdpErrorLastMessage());
  }
  TCALL(FsdpDataDestroy(&d));
  CHECK(d == NULL, "Destroy did not clear the handle");
  TCALL(FsdpDataDestroy(&d));
  CHECK(FsdpMemCurrent(FSDP_MEM_DATA) == base, "data memory leaked: %zu",
        FsdpMemCurrent(FSDP_MEM_DATA) - base);
}

/* Read the first `count` tokens of the stream: with one rank, consecutive
 * samples are consecutive windows, so their inputs tile the stream. */
static void read_stream(FsdpData d, int T, int GB, long count, int *s)
{
  int *in = malloc(sizeof(int) * GB * T), *tg = malloc(sizeof(int) * GB * T);
  for (long m = 0, p = 0; p < count; m++) {
    TCALL(FsdpDataGetBatch(d, m, 0, 1, in, tg));
    for (int k = 0; k < GB * T && p < count; k++) s[p++] = in[k];
  }
  free(in);
  free(tg);
}

static void test_builtin(void)
{
  const int T = 64, GB = 4;
  const long N = 256 * 1024; /* tokens examined */
  int *s1 = malloc(sizeof(int) * N), *s2 = malloc(sizeof(int) * N);
  int *s3 = malloc(sizeof(int) * N);
  FsdpData d1 = NULL, d2 = NULL, d3 = NULL;
  TCALL(FsdpDataCreate(MPI_COMM_WORLD, NULL, 256, T, GB, 1234, &d1));
  TCALL(FsdpDataCreate(MPI_COMM_WORLD, "", 256, T, GB, 1234, &d2));
  TCALL(FsdpDataCreate(MPI_COMM_WORLD, NULL, 256, T, GB, 1235, &d3));
  CHECK(strcmp(FsdpDataSourceName(d1), "builtin") == 0 &&
            strcmp(FsdpDataSourceName(d2), "builtin") == 0,
        "source names %s %s", FsdpDataSourceName(d1), FsdpDataSourceName(d2));
  CHECK(FsdpDataNumTokens(d1) == (1 << 20), "built-in period %lld",
        (long long)FsdpDataNumTokens(d1));
  read_stream(d1, T, GB, N, s1);
  read_stream(d2, T, GB, N, s2);
  read_stream(d3, T, GB, N, s3);
  long same12 = 0, same13 = 0, out = 0;
  for (long i = 0; i < N; i++) {
    same12 += s1[i] == s2[i];
    same13 += s1[i] == s3[i];
    out += s1[i] < 0 || s1[i] >= 256;
  }
  CHECK(same12 == N, "same seed, different streams: %ld of %ld equal", same12,
        N);
  CHECK(same13 < N / 10, "seeds 1234 and 1235 agree on %ld of %ld tokens",
        same13, N);
  CHECK(out == 0, "%ld tokens outside [0, 256)", out);
  /* The world-rank split and the in-process split, on the built-in task;
   * steps far past one period too. */
  for (int64_t m = 0; m < 8; m++) {
    check_split_invariance("builtin", d1, T, GB, m * 1000003);
    check_world_split("builtin", d1, T, GB, m * 1000003);
  }

  /* Structure.  H1 = entropy of the next token, H2 = plug-in conditional
   * entropy of the next token given the current one (the loss of the best
   * bigram model); ln 256 = 5.55.  [Note: built-in task] gives H2 ~ 3.1. */
  {
    static double cnt[256][256];
    double row[256] = {0}, col[256] = {0};
    for (long i = 0; i + 1 < N; i++) {
      cnt[s1[i]][s1[i + 1]] += 1;
      row[s1[i]] += 1;
      col[s1[i + 1]] += 1;
    }
    double H1 = 0, H2 = 0, total = (double)(N - 1);
    int succ[256];
    for (int a = 0; a < 256; a++) {
      if (col[a] > 0) H1 -= col[a] / total * log(col[a] / total);
      succ[a] = 0;
      for (int b = 0; b < 256; b++) {
        if (cnt[a][b] > 0) H2 -= cnt[a][b] / total * log(cnt[a][b] / row[a]);
        if (cnt[a][b] > cnt[a][succ[a]]) succ[a] = b;
      }
    }
    const double lnV = log(256.0);
    if (g_rank == 0)
      printf("built-in task, V=256: H(next) %.3f, H(next|current) %.3f, "
             "ln V %.3f\n", H1, H2, lnV);
    CHECK(H1 > 0.9 * lnV, "unigram entropy %.3f: the alphabet is not used",
          H1);
    CHECK(H2 < 0.65 * lnV, "conditional entropy %.3f not far below ln V %.3f",
          H2, lnV);
    CHECK(H1 - H2 > 1.5, "bigram structure too weak: H1 %.3f H2 %.3f", H1, H2);

    /* Copy structure: positions whose next token the best bigram guess
     * misses but "what followed the last occurrence of the current token
     * within 64 tokens" (an induction head) gets.  In a stream with bigram
     * structure only this is about 0.1/254 of positions. */
    long copy_hits = 0;
    int last[256];
    for (int a = 0; a < 256; a++) last[a] = -1000000;
    for (long i = 0; i + 1 < N; i++) {
      const int a = s1[i], y = s1[i + 1];
      if (i - last[a] <= 64 && y == s1[last[a] + 1] && y != succ[a])
        copy_hits++;
      last[a] = (int)i;
    }
    const double frac = (double)copy_hits / (double)(N - 1);
    if (g_rank == 0)
      printf("built-in task: %.3f of next tokens are copies a bigram model "
             "misses\n", frac);
    CHECK(frac > 0.15, "copy structure too weak: %.3f", frac);
  }
  TCALL(FsdpDataDestroy(&d1));
  TCALL(FsdpDataDestroy(&d2));
  TCALL(FsdpDataDestroy(&d3));

  /* Token range for other vocabularies, and a global batch longer than the
   * period. */
  const int vocabs[] = {4, 16, 50257};
  for (int v = 0; v < 3; v++) {
    FsdpData d = NULL;
    TCALL(FsdpDataCreate(MPI_COMM_WORLD, NULL, vocabs[v], 32, 8, 7, &d));
    read_stream(d, 32, 8, 65536, s1);
    long bad = 0, maxtok = 0;
    for (long i = 0; i < 65536; i++) {
      bad += s1[i] < 0 || s1[i] >= vocabs[v];
      if (s1[i] > maxtok) maxtok = s1[i];
    }
    CHECK(bad == 0, "V=%d: %ld tokens out of range (max %ld)", vocabs[v], bad,
          maxtok);
    CHECK(maxtok == (vocabs[v] < 256 ? vocabs[v] : 256) - 1,
          "V=%d: largest token %ld, want the alphabet's last", vocabs[v],
          maxtok);
    TCALL(FsdpDataDestroy(&d));
  }
  {
    FsdpData d = NULL;
    TCALL(FsdpDataCreate(MPI_COMM_WORLD, NULL, 256, 1024, 1100, 7, &d));
    CHECK(FsdpDataNumTokens(d) == 1100L * 1024 + 1,
          "period for a global batch of 1100x1024: %lld",
          (long long)FsdpDataNumTokens(d));
    TCALL(FsdpDataDestroy(&d));
  }
  free(s1);
  free(s2);
  free(s3);
}

/* The most frequent successor of each token of s[0..n) (-1: too rare). */
static void successors(const int *s, long n, int *succ)
{
  static int cnt[256][256];
  memset(cnt, 0, sizeof cnt);
  for (long i = 0; i + 1 < n; i++) cnt[s[i]][s[i + 1]]++;
  for (int a = 0; a < 256; a++) {
    int best = 0, total = 0;
    for (int b = 0; b < 256; b++) {
      total += cnt[a][b];
      if (cnt[a][b] > cnt[a][best]) best = b;
    }
    succ[a] = total >= 100 ? best : -1;
  }
}

/* [Note: held-out stream] in data.c: validation text of the built-in task
 * is other text (few positions agree with the training stream) of the
 * same task (the same successor table, unlike another seed's); and the
 * built-in alphabet ([Note: built-in alphabet]). */
static void test_heldout(void)
{
  const int T = 64, GB = 4;
  const long N = 256 * 1024;
  int *tr = malloc(sizeof(int) * N), *ho = malloc(sizeof(int) * N), *other = malloc(sizeof(int) * N);
  FsdpData d = NULL, h = NULL, h2 = NULL;
  TCALL(FsdpDataCreate(MPI_COMM_WORLD, NULL, 256, T, GB, 1234, &d));
  TCALL(FsdpDataCreateHeldOut(MPI_COMM_WORLD, NULL, 256, T, GB, 1234, &h));
  TCALL(FsdpDataCreateHeldOut(MPI_COMM_WORLD, NULL, 256, T, GB, 1235, &h2));
  read_stream(d, T, GB, N, tr);
  read_stream(h, T, GB, N, ho);
  read_stream(h2, T, GB, N, other);
  long same = 0;
  for (long i = 0; i < N; i++) same += tr[i] == ho[i];
  CHECK(same < N / 10, "held-out and training streams agree on %ld of %ld tokens", same, N);
  int s_tr[256], s_ho[256], s_other[256];
  successors(tr, N, s_tr);
  successors(ho, N, s_ho);
  successors(other, N, s_other);
  int both = 0, agree = 0, agree_other = 0;
  for (int a = 2; a < 256; a++) {
    if (s_tr[a] < 0 || s_ho[a] < 0 || s_other[a] < 0) continue;
    both++;
    agree += s_tr[a] == s_ho[a];
    agree_other += s_tr[a] == s_other[a];
  }
  if (g_rank == 0)
    printf("held-out stream: %ld of %ld tokens equal training's; successor table: %d of %d "
           "content tokens agree (another seed's held-out stream: %d)\n",
           same, N, agree, both, agree_other);
  CHECK(both > 200 && agree >= both * 95 / 100, "held-out successor table agrees on %d of %d", agree,
        both);
  CHECK(agree_other < both / 10, "another seed's table agrees on %d of %d: the check is blind",
        agree_other, both);
  TCALL(FsdpDataDestroy(&d));
  TCALL(FsdpDataDestroy(&h));
  TCALL(FsdpDataDestroy(&h2));
  free(tr);
  free(ho);
  free(other);
  const struct { int tok; const char *text; } alpha[] = {
      {0, "\n"}, {1, "\n> "}, {2, "ba "}, {17, "za "}, {18, "be "}, {255, "tua "}, {300, "<300>"}};
  for (size_t i = 0; i < sizeof alpha / sizeof alpha[0]; i++) {
    char buf[32];
    FsdpDataBuiltinTokenText(alpha[i].tok, buf, sizeof buf);
    CHECK(strcmp(buf, alpha[i].text) == 0, "built-in alphabet: token %d is '%s', expected '%s'",
          alpha[i].tok, buf, alpha[i].text);
  }
}

/* Remove the test directory and the files in it (no subdirectories). */
static void remove_dir(const char *dir)
{
  DIR *dp = opendir(dir);
  struct dirent *e;
  char p[512];
  while (dp && (e = readdir(dp)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0) perror(p);
  }
  if (dp) closedir(dp);
  if (rmdir(dir) != 0) perror(dir);
}

/* llm.c's LLaMA-3 token file (magic 20240801, version 7, uint32 tokens):
 * ids above 65535 come back whole in the windows of [Note: global batch],
 * and an id at or above -vocab_size is refused naming its value. */
static void test_llama3_file(void)
{
  char p[512];
  enum { N = 300 };
  const int V = 128256, T = 8, GB = 4;
  path_of(p, sizeof p, "llama3.bin");
  if (g_rank == 0) {
    unsigned char buf[1024 + 4 * N];
    memset(buf, 0, sizeof buf);
    int32_t h[3] = {20240801, 7, N};
    memcpy(buf, h, sizeof h); /* test hosts are little-endian */
    for (int i = 0; i < N; i++) {
      uint32_t v = (uint32_t)(65000 + 211 * i) % (uint32_t)V;
      memcpy(buf + 1024 + 4 * i, &v, 4);
    }
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(buf, 1, sizeof buf, f) != sizeof buf) MPI_Abort(MPI_COMM_WORLD, 1);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  FsdpData d = NULL;
  TCALL(FsdpDataCreate(MPI_COMM_WORLD, p, V, T, GB, 1, &d));
  CHECK(FsdpDataNumTokens(d) == N, "llama3 file: %lld tokens, expected %d",
        (long long)FsdpDataNumTokens(d), N);
  int in[GB * 8], tg[GB * 8], bad = 0, big = 0;
  TCALL(FsdpDataGetBatch(d, 3, 0, 1, in, tg)); /* samples 12..15 */
  for (int i = 0; i < GB; i++)
    for (int t = 0; t < T; t++) {
      long pos = (long)(12 + i) * T + t;
      int want = (65000 + 211 * (int)pos) % V, wantt = (65000 + 211 * (int)(pos + 1)) % V;
      bad += in[i * T + t] != want || tg[i * T + t] != wantt;
      big += in[i * T + t] > 65535;
    }
  CHECK(bad == 0 && big > 0, "llama3 file: %d of %d tokens differ (%d above 65535)", bad, GB * T,
        big);
  TCALL(FsdpDataDestroy(&d));
  /* the same file with a vocabulary too small for its ids */
  expect_usage("llama3 file, small vocabulary", p, 70000, T, GB, "has value", "not below -vocab_size 70000");
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int pid = (int)getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  snprintf(g_dir, sizeof g_dir, "/tmp/fsdp-test-data-%d", pid);
  if (g_rank == 0 && mkdir(g_dir, 0700) != 0) {
    perror(g_dir);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  test_defects();
  test_file_batches();
  test_llama3_file();
  test_builtin();
  test_heldout();

  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) remove_dir(g_dir);
  int status = test_finish("test_data");
  TCALL(FsdpFinalize());
  return status;
}
