/* test_safetensors: lib/io/safetensors (one rank).
 *   - writer -> reader round trip (F32 exact, BF16 rounded to nearest even),
 *     header in declaration order, 8-byte aligned data, pieces of any size;
 *   - F16 and BF16 widen exactly (known bit patterns: subnormal, max, inf,
 *     signs), also for element ranges that start inside a tensor;
 *   - each header defect of [Note: safetensors validation] is refused with
 *     FSDP_ERR_USAGE and a message naming the file, the tensor and the
 *     problem: bad JSON, duplicate key, not an object, header length past
 *     the end, shorter than 8 bytes, unknown and unsupported dtypes, bad
 *     shape, offsets reversed / overlapping / with a gap / past the end
 *     (truncated) / short of the end (trailing bytes), bytes != shape *
 *     dtype; a file truncated after opening fails its read;
 *   - sets: a sharded folder's index against its files (a tensor in the
 *     wrong file, a tensor missing from the map, no model files at all). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "libfsdp.h"
#include "testutil.h"

static char g_dir[256];

/* A file of an 8-byte length, the header text and `data` bytes (0..).
 * hlen < 0: the true length. */
static void write_raw(const char *path, const char *header, int64_t hlen, int64_t data)
{
  FILE *f = fopen(path, "wb");
  uint64_t n = hlen < 0 ? strlen(header) : (uint64_t)hlen;
  uint8_t b[8];
  for (int k = 0; k < 8; k++) b[k] = (uint8_t)(n >> (8 * k));
  fwrite(b, 1, 8, f);
  fwrite(header, 1, strlen(header), f);
  for (int64_t i = 0; i < data; i++) fputc((int)(i & 0xff), f);
  fclose(f);
}

/* Opening `header` (+ data bytes) fails with a usage error whose message
 * holds the file name and each of the words. */
static void expect_refused(const char *what, const char *header, int64_t hlen, int64_t data,
                           const char *w1, const char *w2)
{
  char path[512];
  snprintf(path, sizeof path, "%s/%s.safetensors", g_dir, what);
  write_raw(path, header, hlen, data);
  FsdpStFile f = NULL;
  int err = FsdpStOpen(path, &f);
  const char *msg = FsdpErrorLastMessage();
  CHECK(err == FSDP_ERR_USAGE, "%s: FsdpStOpen returned %d, expected a usage error", what, err);
  CHECK(f == NULL, "%s: a handle came back", what);
  CHECK(strstr(msg, path) != NULL, "%s: message does not name the file: %s", what, msg);
  CHECK(!w1 || strstr(msg, w1), "%s: message lacks '%s': %s", what, w1, msg);
  CHECK(!w2 || strstr(msg, w2), "%s: message lacks '%s': %s", what, w2, msg);
  FsdpStClose(&f);
}

static void test_roundtrip(void)
{
  char path[512];
  snprintf(path, sizeof path, "%s/rt.safetensors", g_dir);
  int64_t s0[2] = {3, 5}, s1[1] = {7}, s2[1] = {0};
  FsdpStDecl decl[3] = {{"b.weight", 2, s0}, {"a.bias", 1, s1}, {"empty", 1, s2}};
  float v[22];
  for (int i = 0; i < 22; i++) v[i] = (float)(i * 0.37 - 3.1) * (i % 3 ? 1.0f : -1e-3f);
  for (int bf = 0; bf <= 1; bf++) {
    const char *md[] = {"format", "pt", NULL};
    FsdpStWriter w;
    TCALL(FsdpStWriterCreate(path, bf ? FSDP_DTYPE_BF16 : FSDP_DTYPE_FP32, 3, decl, md, &w));
    TCALL(FsdpStWriterPut(w, v, 4)); /* pieces cross tensor borders */
    TCALL(FsdpStWriterPut(w, v + 4, 13));
    TCALL(FsdpStWriterPut(w, v + 17, 5));
    TCALL(FsdpStWriterClose(&w));
    FsdpStFile f;
    TCALL(FsdpStOpen(path, &f));
    CHECK(FsdpStNumTensors(f) == 3, "%d tensors", FsdpStNumTensors(f));
    const FsdpStTensor *t0 = FsdpStTensorAt(f, 0), *t1 = FsdpStFind(f, "a.bias");
    CHECK(strcmp(t0->name, "b.weight") == 0 && t0->ndim == 2 && t0->shape[0] == 3 &&
              t0->shape[1] == 5 && t0->numel == 15,
          "first tensor %s", t0->name);
    CHECK(t1 && t1->ndim == 1 && t1->shape[0] == 7, "a.bias");
    CHECK(t0->offset % 8 == 0, "data offset %lld not 8-byte aligned", (long long)t0->offset);
    CHECK(t0->dtype == (bf ? FSDP_DTYPE_BF16 : FSDP_DTYPE_FP32), "dtype");
    float r[22];
    TCALL(FsdpStRead(f, t0, 0, 15, r));
    TCALL(FsdpStRead(f, t1, 0, 7, r + 15));
    int bad = 0;
    for (int i = 0; i < 22; i++) {
      float want = bf ? FsdpBf16ToFloat(FsdpFloatToBf16(v[i])) : v[i];
      if (memcmp(&want, &r[i], 4) != 0) bad++;
    }
    CHECK(bad == 0, "%s round trip: %d values differ", bf ? "BF16" : "F32", bad);
    /* a range inside a tensor */
    TCALL(FsdpStRead(f, t0, 6, 5, r));
    float want6 = bf ? FsdpBf16ToFloat(FsdpFloatToBf16(v[6])) : v[6];
    CHECK(r[0] == want6, "range read: %g vs %g", r[0], want6);
    FsdpStClose(&f);
  }
  /* a file truncated after it was opened: the read fails, naming it */
  FsdpStFile f;
  TCALL(FsdpStOpen(path, &f));
  CHECK(truncate(path, 40) == 0, "truncate");
  float r[15];
  int err = FsdpStRead(f, FsdpStFind(f, "b.weight"), 0, 15, r);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "b.weight") &&
            strstr(FsdpErrorLastMessage(), "short read"),
        "read of a truncated file: %d %s", err, FsdpErrorLastMessage());
  FsdpStClose(&f);
}

static void test_widening(void)
{
  char path[512];
  snprintf(path, sizeof path, "%s/wide.safetensors", g_dir);
  /* F16: 1, 2^-24 (smallest subnormal), 65504 (max), -2, +inf, -0, 0x3555 (0.333251953125)
   * BF16: 1, 3.140625, -inf, 2^-133 (subnormal 0x0001) */
  const uint16_t h[8] = {0x3c00, 0x0001, 0x7bff, 0xc000, 0x7c00, 0x8000, 0x3555, 0x03ff};
  const float hw[8] = {1.0f, 5.9604644775390625e-08f, 65504.0f, -2.0f, INFINITY, -0.0f,
                       0.333251953125f, 6.0975551605224609375e-05f};
  const uint16_t b[4] = {0x3f80, 0x4049, 0xff80, 0x0001};
  const float bw[4] = {1.0f, 3.140625f, -INFINITY, 9.18354961579912115600575419705e-41f};
  char header[256];
  snprintf(header, sizeof header,
           "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,16]},"
           "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[16,24]}}");
  FILE *fp = fopen(path, "wb");
  uint64_t n = strlen(header);
  fwrite(&n, 8, 1, fp);
  fwrite(header, 1, n, fp);
  fwrite(h, 2, 8, fp);
  fwrite(b, 2, 4, fp);
  fclose(fp);
  FsdpStFile f;
  TCALL(FsdpStOpen(path, &f));
  float r[8];
  TCALL(FsdpStRead(f, FsdpStFind(f, "h"), 0, 8, r));
  for (int i = 0; i < 8; i++)
    CHECK(memcmp(&r[i], &hw[i], 4) == 0, "F16 0x%04x -> %a, expected %a", h[i], r[i], hw[i]);
  TCALL(FsdpStRead(f, FsdpStFind(f, "h"), 3, 5, r));
  for (int i = 0; i < 5; i++)
    CHECK(memcmp(&r[i], &hw[3 + i], 4) == 0, "F16 range [3..8) element %d -> %a", i, r[i]);
  TCALL(FsdpStRead(f, FsdpStFind(f, "b"), 0, 4, r));
  for (int i = 0; i < 4; i++)
    CHECK(memcmp(&r[i], &bw[i], 4) == 0, "BF16 0x%04x -> %a, expected %a", b[i], r[i], bw[i]);
  FsdpStClose(&f);
}

static void test_defects(void)
{
  const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
  expect_refused("good_control", ok, -1, 17, "w", "trailing bytes"); /* one byte too many */
  expect_refused("badjson", "{\"w\":{\"dtype\":\"F32\",", -1, 16, "not valid JSON", NULL);
  expect_refused("dupkey",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 -1, 8, "not valid JSON", "duplicate");
  expect_refused("array", "[1,2,3]", -1, 0, "not a JSON object", NULL);
  expect_refused("hlen_past_eof", ok, 4000, 16, "header length 4000", "past the end");
  expect_refused("tiny", "", 0, 0, NULL, NULL); /* 8 bytes, empty header */
  {
    char path[512];
    snprintf(path, sizeof path, "%s/short.safetensors", g_dir);
    FILE *f = fopen(path, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    FsdpStFile h = NULL;
    int err = FsdpStOpen(path, &h);
    CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "shorter than the 8-byte"),
          "3-byte file: %s", FsdpErrorLastMessage());
  }
  expect_refused("unknown_dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                 -1, 8, "tensor w", "unknown dtype \"F33\"");
  expect_refused("unsupported_dtype",
                 "{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", -1, 16,
                 "tensor w", "dtype I64; fsdp reads F32, BF16 and F16");
  expect_refused("neg_shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
                 -1, 8, "tensor w", "not a non-negative integer");
  expect_refused("no_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", -1, 8, "tensor w",
                 "data_offsets is not two");
  expect_refused("reversed", "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}",
                 -1, 8, "tensor w", "end before they begin");
  expect_refused("size_mismatch",
                 "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[0,16]}}", -1, 16,
                 "tensor w", "hold 16 bytes but its shape and dtype BF16 need 12");
  expect_refused("overlap",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                 -1, 16, "tensor b", "overlapping tensors");
  expect_refused("gap",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                 -1, 20, "tensor b", "a gap between tensors");
  expect_refused("truncated",
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[8,408]}}",
                 -1, 40, "places b", "truncated");
  expect_refused("bad_metadata", "{\"__metadata__\":{\"format\":3}}", -1, 0, "__metadata__", NULL);
  /* the control case with the right size opens */
  char path[512];
  snprintf(path, sizeof path, "%s/good.safetensors", g_dir);
  write_raw(path, ok, -1, 16);
  FsdpStFile f = NULL;
  CHECK(FsdpStOpen(path, &f) == FSDP_SUCCESS, "a good file is refused: %s", FsdpErrorLastMessage());
  FsdpStClose(&f);
}

static void write_file(const char *dir, const char *name, const char *text)
{
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

static void test_sets(void)
{
  char dir[300], path[512];
  snprintf(dir, sizeof dir, "%s/set", g_dir);
  mkdir(dir, 0755);
  FsdpStSet s = NULL;
  int err = FsdpStSetOpen(dir, &s);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "neither model.safetensors"),
        "empty folder: %s", FsdpErrorLastMessage());
  snprintf(path, sizeof path, "%s/m1.safetensors", dir);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8);
  snprintf(path, sizeof path, "%s/m2.safetensors", dir);
  write_raw(path, "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", -1, 4);
  write_file(dir, "model.safetensors.index.json",
             "{\"metadata\":{},\"weight_map\":{\"a\":\"m1.safetensors\",\"b\":\"m2.safetensors\"}}");
  TCALL(FsdpStSetOpen(dir, &s));
  CHECK(FsdpStSetNumFiles(s) == 2 && FsdpStSetNumTensors(s) == 2, "set of 2 files");
  FsdpStFile f;
  const FsdpStTensor *t;
  FsdpStSetFind(s, "b", &f, &t);
  CHECK(t && t->dtype == FSDP_DTYPE_BF16 && strstr(FsdpStPath(f), "m2.safetensors"), "b in m2");
  CHECK(FsdpStSetDtype(s) == -1, "mixed dtypes");
  FsdpStSetClose(&s);
  write_file(dir, "model.safetensors.index.json",
             "{\"weight_map\":{\"a\":\"m2.safetensors\",\"b\":\"m2.safetensors\"}}");
  err = FsdpStSetOpen(dir, &s);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "tensor a") &&
            strstr(FsdpErrorLastMessage(), "does not hold it"),
        "wrong shard: %s", FsdpErrorLastMessage());
  write_file(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a\":\"m1.safetensors\"}}");
  snprintf(path, sizeof path, "%s/m1.safetensors", dir);
  write_raw(path,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
            -1, 12);
  err = FsdpStSetOpen(dir, &s);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "tensor z") &&
            strstr(FsdpErrorLastMessage(), "not in the weight_map"),
        "unmapped tensor: %s", FsdpErrorLastMessage());
  write_file(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a\":\"../m1.safetensors\"}}");
  err = FsdpStSetOpen(dir, &s);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "not a file name in that folder"),
        "shard outside the folder: %s", FsdpErrorLastMessage());
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  snprintf(g_dir, sizeof g_dir, "/tmp/fsdp_test_st.XXXXXX");
  if (!mkdtemp(g_dir)) MPI_Abort(MPI_COMM_WORLD, 1);
  test_roundtrip();
  test_widening();
  test_defects();
  test_sets();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
  int rc = test_finish("test_safetensors");
  FsdpFinalize();
  return rc;
}
