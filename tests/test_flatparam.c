/* test_flatparam: the FlatParameter layout (flatparam.h).
 *
 * 1. A hand-worked unit with exact offsets, padding and pieces for F = 1,
 *    2, 3.
 * 2. Bad specs and arguments: FSDP_ERR_USAGE, a message naming the culprit,
 *    no object.
 * 3. Many random units (seeded) at every F in 1..16: padding rules, pieces
 *    tiling every parameter exactly once inside shard bounds, and a round
 *    trip parameter values -> views -> flat buffer -> shards -> pieces ->
 *    parameters, compared exactly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "runtime/flatparam.h"
#include "base/init.h"
#include "testutil.h"

static FsdpParamSpec spec(const char *name, int ndim, int64_t d0, int64_t d1,
                          int64_t d2, int64_t d3)
{
  FsdpParamSpec s;
  memset(&s, 0, sizeof s);
  snprintf(s.name, sizeof s.name, "%s", name);
  s.ndim = ndim;
  s.shape[0] = d0;
  s.shape[1] = d1;
  s.shape[2] = d2;
  s.shape[3] = d3;
  return s;
}

typedef struct {
  int param;
  int64_t param_offset, count, shard_offset;
} Piece;

static void check_pieces(FlatParam fp, int r, const Piece *want, int nwant)
{
  const FlatParamPiece *p = NULL;
  int n = -1;
  TCALL(FlatParamShardPieces(fp, r, &p, &n));
  CHECK(n == nwant, "F=%d shard %d: %d pieces, expected %d",
        FlatParamShardFactor(fp), r, n, nwant);
  for (int k = 0; k < n && k < nwant; k++)
    CHECK(p[k].param == want[k].param &&
              p[k].param_offset == want[k].param_offset &&
              p[k].count == want[k].count &&
              p[k].shard_offset == want[k].shard_offset,
          "F=%d shard %d piece %d: (param %d, off %lld, count %lld, shard off "
          "%lld), expected (%d, %lld, %lld, %lld)",
          FlatParamShardFactor(fp), r, k, p[k].param,
          (long long)p[k].param_offset, (long long)p[k].count,
          (long long)p[k].shard_offset, want[k].param,
          (long long)want[k].param_offset, (long long)want[k].count,
          (long long)want[k].shard_offset);
}

/* w [3,5] (15), b [7] (7), s scalar (1), e [0,4] (0), x [2,30] (60):
 * psi = 83, offsets 0 15 22 23 23. */
static void test_hand_worked(void)
{
  FsdpParamSpec specs[5] = {
      spec("w", 2, 3, 5, 0, 0), spec("b", 1, 7, 0, 0, 0),
      spec("s", 0, 0, 0, 0, 0), spec("e", 2, 0, 4, 0, 0),
      spec("x", 2, 2, 30, 0, 0)};
  const int64_t offsets[5] = {0, 15, 22, 23, 23};
  FlatParam fp = NULL;

  /* F = 1: P = 96 (3 * 32), one shard holding everything. */
  TCALL(FlatParamCreate(specs, 5, 1, 0, &fp));
  CHECK(FlatParamNumel(fp) == 83, "psi %lld", (long long)FlatParamNumel(fp));
  CHECK(FlatParamPaddedNumel(fp) == 96, "P %lld",
        (long long)FlatParamPaddedNumel(fp));
  CHECK(FlatParamShardNumel(fp) == 96, "S %lld",
        (long long)FlatParamShardNumel(fp));
  {
    Piece want[] = {{0, 0, 15, 0}, {1, 0, 7, 15}, {2, 0, 1, 22}, {4, 0, 60, 23}};
    check_pieces(fp, 0, want, 4);
  }
  FlatParamDestroy(&fp);
  CHECK(fp == NULL, "destroy leaves the handle set");

  /* F = 2: a = 32, P = 128 (smallest multiple of 64 >= 83), S = 64; x is
   * cut at 64 = its element 41. */
  TCALL(FlatParamCreate(specs, 5, 2, 1, &fp));
  CHECK(FlatParamNumParams(fp) == 5, "nparams %d", FlatParamNumParams(fp));
  CHECK(FlatParamNumel(fp) == 83, "psi %lld", (long long)FlatParamNumel(fp));
  CHECK(FlatParamPaddedNumel(fp) == 128, "P %lld",
        (long long)FlatParamPaddedNumel(fp));
  CHECK(FlatParamShardNumel(fp) == 64, "S %lld",
        (long long)FlatParamShardNumel(fp));
  CHECK(FlatParamShardFactor(fp) == 2 && FlatParamShardRank(fp) == 1,
        "F %d rank %d", FlatParamShardFactor(fp), FlatParamShardRank(fp));
  for (int i = 0; i < 5; i++)
    CHECK(FlatParamOffset(fp, i) == offsets[i], "offset of %d: %lld, expected %lld",
          i, (long long)FlatParamOffset(fp, i), (long long)offsets[i]);
  CHECK(FlatParamOffset(fp, 5) == -1 && FlatParamOffset(fp, -1) == -1,
        "offset out of range not -1");
  CHECK(FlatParamFind(fp, "x") == 4 && FlatParamFind(fp, "w") == 0 &&
            FlatParamFind(fp, "e") == 3,
        "find: x %d w %d e %d", FlatParamFind(fp, "x"), FlatParamFind(fp, "w"),
        FlatParamFind(fp, "e"));
  CHECK(FlatParamFind(fp, "nope") == -1 && FlatParamFind(fp, "") == -1,
        "find of unknown names");
  CHECK(FlatParamSpecNumel(FlatParamSpec(fp, 2)) == 1, "scalar numel %lld",
        (long long)FlatParamSpecNumel(FlatParamSpec(fp, 2)));
  CHECK(FlatParamSpecNumel(FlatParamSpec(fp, 3)) == 0, "empty numel");
  CHECK(FlatParamSpec(fp, 5) == NULL, "spec out of range");
  {
    Piece want0[] = {{0, 0, 15, 0}, {1, 0, 7, 15}, {2, 0, 1, 22}, {4, 0, 41, 23}};
    Piece want1[] = {{4, 41, 19, 0}};
    check_pieces(fp, 0, want0, 4);
    check_pieces(fp, 1, want1, 1);
  }
  {
    float buf[128];
    CHECK((char *)FlatParamView(fp, buf, sizeof(float), 4) == (char *)(buf + 23),
          "view of x");
    CHECK((char *)FlatParamView(fp, buf, 2, 1) == (char *)buf + 30,
          "bf16 view of b");
    CHECK(FlatParamView(fp, buf, 4, 7) == NULL, "view out of range");
  }
  FlatParamDestroy(&fp);

  /* F = 3: P = 96, S = 32; x spans all three shards: 9 + 32 + 19. */
  TCALL(FlatParamCreate(specs, 5, 3, 0, &fp));
  CHECK(FlatParamPaddedNumel(fp) == 96 && FlatParamShardNumel(fp) == 32,
        "P %lld S %lld", (long long)FlatParamPaddedNumel(fp),
        (long long)FlatParamShardNumel(fp));
  {
    Piece want0[] = {{0, 0, 15, 0}, {1, 0, 7, 15}, {2, 0, 1, 22}, {4, 0, 9, 23}};
    Piece want1[] = {{4, 9, 32, 0}};
    Piece want2[] = {{4, 41, 19, 0}};
    check_pieces(fp, 0, want0, 4);
    check_pieces(fp, 1, want1, 1);
    check_pieces(fp, 2, want2, 1);
  }
  FlatParamDestroy(&fp);

  /* F = 4 with 96 elements exactly: P = 128 (multiple of 128), S = 32, the
   * last shard is all padding and has no pieces. */
  FsdpParamSpec one = spec("big", 1, 96, 0, 0, 0);
  TCALL(FlatParamCreate(&one, 1, 4, 3, &fp));
  CHECK(FlatParamPaddedNumel(fp) == 128 && FlatParamShardNumel(fp) == 32,
        "P %lld S %lld", (long long)FlatParamPaddedNumel(fp),
        (long long)FlatParamShardNumel(fp));
  {
    Piece want2[] = {{0, 64, 32, 0}};
    check_pieces(fp, 2, want2, 1);
    check_pieces(fp, 3, NULL, 0);
  }
  FlatParamDestroy(&fp);

  /* No parameters: P = 0. */
  TCALL(FlatParamCreate(NULL, 0, 2, 0, &fp));
  CHECK(FlatParamNumel(fp) == 0 && FlatParamPaddedNumel(fp) == 0 &&
            FlatParamShardNumel(fp) == 0,
        "empty unit: psi %lld P %lld", (long long)FlatParamNumel(fp),
        (long long)FlatParamPaddedNumel(fp));
  check_pieces(fp, 1, NULL, 0);
  FlatParamDestroy(&fp);
  FlatParamDestroy(NULL);
}

static void expect_usage(const FsdpParamSpec *specs, int n, int F, int rank,
                         const char *needle, const char *what)
{
  FlatParam fp = (FlatParam)&fp; /* must be reset to NULL */
  int rc = FlatParamCreate(specs, n, F, rank, &fp);
  CHECK(rc == FSDP_ERR_USAGE, "%s: returned %d, expected usage error", what, rc);
  CHECK(fp == NULL, "%s: handle not NULL after failure", what);
  CHECK(strstr(FsdpErrorLastMessage(), needle) != NULL,
        "%s: message '%s' does not name '%s'", what, FsdpErrorLastMessage(),
        needle);
  if (rc == FSDP_SUCCESS) FlatParamDestroy(&fp);
}

static void test_bad_input(void)
{
  FsdpParamSpec ok[2] = {spec("a.weight", 2, 4, 4, 0, 0),
                         spec("a.bias", 1, 4, 0, 0, 0)};
  FsdpParamSpec bad[2];
  expect_usage(ok, 2, 0, 0, "sharding factor 0", "F = 0");
  expect_usage(ok, 2, -3, 0, "sharding factor -3", "F = -3");
  expect_usage(ok, 2, 4, 4, "shard rank 4", "rank = F");
  expect_usage(ok, 2, 4, -1, "shard rank -1", "rank < 0");
  expect_usage(ok, -1, 4, 0, "-1 parameters", "nparams < 0");

  memcpy(bad, ok, sizeof ok);
  bad[1].ndim = 5;
  expect_usage(bad, 2, 2, 0, "a.bias", "ndim 5");
  CHECK(strstr(FsdpErrorLastMessage(), "ndim 5") != NULL, "message '%s'",
        FsdpErrorLastMessage());
  bad[1].ndim = -1;
  expect_usage(bad, 2, 2, 0, "ndim -1", "ndim -1");

  memcpy(bad, ok, sizeof ok);
  bad[0].shape[1] = -4;
  expect_usage(bad, 2, 2, 0, "a.weight", "negative dimension");
  CHECK(strstr(FsdpErrorLastMessage(), "-4") != NULL, "message '%s'",
        FsdpErrorLastMessage());

  memcpy(bad, ok, sizeof ok);
  bad[1].name[0] = '\0';
  expect_usage(bad, 2, 2, 0, "parameter 1", "empty name");

  memcpy(bad, ok, sizeof ok);
  memset(bad[0].name, 'n', sizeof bad[0].name); /* no terminator */
  expect_usage(bad, 2, 2, 0, "not terminated", "unterminated name");

  memcpy(bad, ok, sizeof ok);
  snprintf(bad[1].name, sizeof bad[1].name, "a.weight");
  expect_usage(bad, 2, 2, 0, "registered twice", "duplicate name");

  memcpy(bad, ok, sizeof ok);
  bad[0] = spec("huge", 4, 1 << 20, 1 << 20, 1 << 20, 1 << 20);
  expect_usage(bad, 2, 2, 0, "huge", "element count overflow");

  FlatParam fp = NULL;
  TCALL(FlatParamCreate(ok, 2, 2, 0, &fp));
  const FlatParamPiece *p = NULL;
  int n = 0;
  CHECK(FlatParamShardPieces(fp, 2, &p, &n) == FSDP_ERR_USAGE,
        "pieces of shard 2 of 2 accepted");
  CHECK(FlatParamShardPieces(fp, -1, &p, &n) == FSDP_ERR_USAGE,
        "pieces of shard -1 accepted");
  FlatParamDestroy(&fp);
}

/* splitmix64: a small seeded generator so every run sees the same units. */
static uint64_t rng_state;
static uint64_t rng_next(void)
{
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int rng_int(int lo, int hi) { return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1)); }

/* The value parameter i holds at element k: unique over the unit. */
static int64_t value_of(int i, int64_t k) { return ((int64_t)(i + 1) << 32) | k; }

#define SENTINEL INT64_MIN

static void check_random_unit(const FsdpParamSpec *specs, int n, int F)
{
  FlatParam fp = NULL;
  TCALL(FlatParamCreate(specs, n, F, (n * 7) % F, &fp));
  const int64_t a = FSDP_FLAT_ALIGN;
  int64_t psi = 0, want_off[64];
  int64_t numel[64];
  for (int i = 0; i < n; i++) {
    int64_t e = 1;
    for (int d = 0; d < specs[i].ndim; d++) e *= specs[i].shape[d];
    numel[i] = e;
    want_off[i] = psi;
    psi += e;
  }
  int64_t P = FlatParamPaddedNumel(fp), S = FlatParamShardNumel(fp);
  CHECK(FlatParamNumel(fp) == psi, "n=%d F=%d: psi %lld, expected %lld", n, F,
        (long long)FlatParamNumel(fp), (long long)psi);
  CHECK(P % (F * a) == 0, "n=%d F=%d: P %lld not a multiple of %lld", n, F,
        (long long)P, (long long)(F * a));
  CHECK(P - psi >= 0 && P - psi < F * a, "n=%d F=%d: P %lld psi %lld", n, F,
        (long long)P, (long long)psi);
  CHECK(S * F == P, "n=%d F=%d: S %lld * F != P %lld", n, F, (long long)S,
        (long long)P);
  CHECK(FlatParamShardRank(fp) == (n * 7) % F, "shard rank %d",
        FlatParamShardRank(fp));
  for (int i = 0; i < n; i++) {
    CHECK(FlatParamOffset(fp, i) == want_off[i], "F=%d param %d offset %lld, expected %lld",
          F, i, (long long)FlatParamOffset(fp, i), (long long)want_off[i]);
    CHECK(FlatParamFind(fp, specs[i].name) == i, "find %s: %d", specs[i].name,
          FlatParamFind(fp, specs[i].name));
    CHECK(FlatParamSpecNumel(FlatParamSpec(fp, i)) == numel[i], "numel of %d", i);
  }

  /* Values through the views into the flat buffer; padding stays SENTINEL. */
  int64_t *flat = malloc((size_t)(P > 0 ? P : 1) * sizeof *flat);
  int64_t *cover = calloc((size_t)(psi > 0 ? psi : 1), sizeof *cover);
  int64_t *back = malloc((size_t)(psi > 0 ? psi : 1) * sizeof *back);
  for (int64_t k = 0; k < P; k++) flat[k] = SENTINEL;
  for (int64_t k = 0; k < psi; k++) back[k] = SENTINEL;
  for (int i = 0; i < n; i++) {
    int64_t *v = FlatParamView(fp, flat, sizeof *flat, i);
    CHECK(v == flat + want_off[i], "view of %d at %td, expected %lld", i,
          v - flat, (long long)want_off[i]);
    for (int64_t k = 0; k < numel[i]; k++) v[k] = value_of(i, k);
  }
  for (int64_t k = psi; k < P; k++)
    if (flat[k] != SENTINEL) {
      CHECK(0, "F=%d: view writes overran into padding at %lld", F, (long long)k);
      break;
    }

  /* Pieces of every shard rank: in bounds, sorted, disjoint, consistent
   * with the offsets; copy them out of the shards into per-parameter
   * arrays (`back`, laid out like the parameters, i.e. at want_off). */
  int bad = 0;
  for (int r = 0; r < F; r++) {
    const int64_t *shard = flat + (int64_t)r * S; /* what rank r holds */
    const FlatParamPiece *p = NULL;
    int np = -1;
    TCALL(FlatParamShardPieces(fp, r, &p, &np));
    int64_t prev_end = 0;
    for (int k = 0; k < np; k++) {
      int ok = p[k].param >= 0 && p[k].param < n && p[k].count > 0 &&
               p[k].param_offset >= 0 &&
               p[k].param_offset + p[k].count <= numel[p[k].param] &&
               p[k].shard_offset >= prev_end &&
               p[k].shard_offset + p[k].count <= S &&
               p[k].shard_offset + r * S == want_off[p[k].param] + p[k].param_offset;
      if (!ok) {
        if (bad++ < 5)
          CHECK(0, "F=%d shard %d piece %d: (param %d, off %lld, count %lld, shard "
                "off %lld) out of bounds, overlapping or misplaced (S %lld)",
                F, r, k, p[k].param, (long long)p[k].param_offset,
                (long long)p[k].count, (long long)p[k].shard_offset, (long long)S);
        continue;
      }
      prev_end = p[k].shard_offset + p[k].count;
      int64_t base = want_off[p[k].param] + p[k].param_offset;
      for (int64_t e = 0; e < p[k].count; e++) {
        cover[base + e]++;
        back[base + e] = shard[p[k].shard_offset + e];
      }
    }
  }
  int64_t first_bad = -1, nbad = 0;
  for (int64_t k = 0; k < psi; k++)
    if (cover[k] != 1) {
      if (first_bad < 0) first_bad = k;
      nbad++;
    }
  CHECK(nbad == 0, "F=%d n=%d: %lld elements not covered exactly once; first %lld "
        "covered %lld times", F, n, (long long)nbad, (long long)first_bad,
        first_bad >= 0 ? (long long)cover[first_bad] : 0LL);
  nbad = 0;
  first_bad = -1;
  for (int i = 0; i < n; i++)
    for (int64_t k = 0; k < numel[i]; k++)
      if (back[want_off[i] + k] != value_of(i, k)) {
        if (first_bad < 0) {
          first_bad = want_off[i] + k;
          CHECK(0, "F=%d round trip: param %d (%s) element %lld is %llx, expected "
                "%llx", F, i, specs[i].name, (long long)k,
                (unsigned long long)back[want_off[i] + k],
                (unsigned long long)value_of(i, k));
        }
        nbad++;
      }
  CHECK(nbad == 0, "F=%d round trip: %lld wrong elements", F, (long long)nbad);
  free(flat);
  free(cover);
  free(back);
  FlatParamDestroy(&fp);
}

static void test_random(void)
{
  rng_state = 20240521;
  int units = 0;
  for (int trial = 0; trial < 300; trial++) {
    FsdpParamSpec specs[64];
    memset(specs, 0, sizeof specs);
    int n = rng_int(0, 12);
    if (trial % 50 == 7) n = 64; /* a wide unit now and then */
    for (int i = 0; i < n; i++) {
      char name[32];
      snprintf(name, sizeof name, "u%d.p%d", trial, i);
      int ndim = rng_int(0, FSDP_MAX_NDIM);
      specs[i] = spec(name, ndim, 0, 0, 0, 0);
      for (int d = 0; d < ndim; d++) {
        int kind = rng_int(0, 9);
        /* mostly small, sometimes 0 (empty parameter), sometimes large */
        specs[i].shape[d] = kind == 0 ? 0 : kind < 8 ? rng_int(1, 9) : rng_int(10, 300);
      }
      /* keep units small enough to check element by element */
      while (FlatParamSpecNumel(&specs[i]) > 4096) {
        int big = 0;
        for (int d = 1; d < ndim; d++)
          if (specs[i].shape[d] > specs[i].shape[big]) big = d;
        specs[i].shape[big] /= 2;
      }
    }
    FsdpParamSpec copy[64];
    memcpy(copy, specs, sizeof specs);
    for (int F = 1; F <= 16; F++) {
      check_random_unit(specs, n, F);
      units++;
    }
    CHECK(memcmp(copy, specs, sizeof specs) == 0, "create modified the specs");
  }
  CHECK(units == 300 * 16, "ran %d units", units);

  /* The object keeps its own copy of the specs. */
  FsdpParamSpec s[2] = {spec("k", 1, 40, 0, 0, 0), spec("v", 2, 3, 3, 0, 0)};
  FlatParam fp = NULL;
  TCALL(FlatParamCreate(s, 2, 2, 0, &fp));
  s[0].shape[0] = 1;
  snprintf(s[1].name, sizeof s[1].name, "changed");
  CHECK(FlatParamSpec(fp, 0)->shape[0] == 40 && FlatParamFind(fp, "v") == 1,
        "specs not copied");
  FlatParamDestroy(&fp);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  test_hand_worked();
  test_bad_input();
  test_random();
  int status = test_finish("test_flatparam");
  FsdpFinalize();
  return status;
}
