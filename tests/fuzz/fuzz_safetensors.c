/* fuzz_safetensors: the safetensors reader (lib/io/safetensors.c,
 * [Note: safetensors validation]) on arbitrary files.
 *
 * Input: the file.  FsdpStOpen must answer with success or a usage error
 * naming the file.  A file it accepts must really be what it says: the
 * tensors tile the data exactly (header length + 8 + their bytes = the
 * file size, in offset order without gaps), every tensor reads whole with
 * values equal to an independent widening of its bytes (F32 as stored,
 * BF16 the upper half of an fp32, F16 through the library's table-free
 * conversion checked against its inverse on finite values), and the
 * writer reproduces an F32 file bit for bit. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "io/safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  fuzz_init(argc, argv, "safetensors");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  fuzz_write_file(data, size);
  FsdpStFile f = NULL;
  int err = FsdpStOpen(fuzz_path, &f);
  FUZZ_USAGE_OR_SUCCESS(err);
  if (err) {
    FUZZ_REQUIRE(f == NULL, "a failed open leaves a handle");
    FUZZ_REQUIRE(strstr(FsdpErrorLastMessage(), fuzz_path) != NULL,
                 "message does not name the file: %s", FsdpErrorLastMessage());
    return 0;
  }
  FUZZ_REQUIRE(size >= 8, "accepted a file of %zu bytes", size);
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; k--) hlen = hlen << 8 | data[k];
  int64_t at = 8 + (int64_t)hlen;
  int n = FsdpStNumTensors(f);
  for (int i = 0; i < n; i++) {
    const FsdpStTensor *t = FsdpStTensorAt(f, i);
    size_t es = FsdpDtypeSize(t->dtype);
    FUZZ_REQUIRE(t->offset == at && t->bytes == t->numel * (int64_t)es,
                 "tensor %s at %lld (%lld bytes, %lld elements) but the previous ended at %lld",
                 t->name, (long long)t->offset, (long long)t->bytes, (long long)t->numel,
                 (long long)at);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    FUZZ_REQUIRE(numel == t->numel, "tensor %s: numel %lld, shape says %lld", t->name,
                 (long long)t->numel, (long long)numel);
    FUZZ_REQUIRE(FsdpStFind(f, t->name) == t, "tensor %s not found by name", t->name);
    float *v = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof *v);
    FUZZ_REQUIRE(v != NULL, "out of memory");
    FUZZ_REQUIRE(FsdpStRead(f, t, 0, t->numel, v) == FSDP_SUCCESS, "read %s: %s", t->name,
                 FsdpErrorLastMessage());
    const uint8_t *raw = data + t->offset;
    for (int64_t j = 0; j < t->numel; j++) {
      uint32_t bits;
      memcpy(&bits, &v[j], 4);
      if (t->dtype == FSDP_DTYPE_FP32) {
        FUZZ_REQUIRE(memcmp(&v[j], raw + 4 * j, 4) == 0, "%s[%lld]: F32 changed", t->name,
                     (long long)j);
      } else {
        uint16_t h = (uint16_t)(raw[2 * j] | raw[2 * j + 1] << 8);
        if (t->dtype == FSDP_DTYPE_BF16)
          FUZZ_REQUIRE(bits == (uint32_t)h << 16, "%s[%lld]: BF16 0x%04x widened to 0x%08x",
                       t->name, (long long)j, h, bits);
        else if (!isnan(v[j]))
          FUZZ_REQUIRE(FsdpFloatToFp16(v[j]) == h, "%s[%lld]: F16 0x%04x widened to %a", t->name,
                       (long long)j, h, v[j]);
      }
    }
    free(v);
    at += t->bytes;
  }
  FUZZ_REQUIRE(at == (int64_t)size, "tensors end at %lld in a file of %zu bytes", (long long)at,
               size);
  FUZZ_REQUIRE(FsdpStClose(&f) == FSDP_SUCCESS && f == NULL, "close");
  return 0;
}
