/* fuzz_data: the token-file validator (lib/io/data.c, FsdpDataCreate) on
 * arbitrary files.
 *
 * Input: 4 bytes choose the model's side of the check (vocab_size from
 * bytes 0-1, sequence length T from byte 2, global batch from byte 3),
 * the rest is the token file.  Every failure must be a usage error naming
 * the file; a file that is accepted must deliver batches whose tokens are
 * all below vocab_size, with each target the next input token. */
#include <string.h>

#include "io/data.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  fuzz_init(argc, argv, "data");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 4) return 0;
  int vocab = 2 + (data[0] | data[1] << 8) % 65535; /* 2..65536 */
  int T = 1 + data[2] % 64, gb = 1 + data[3] % 8;
  fuzz_write_file(data + 4, size - 4);
  FsdpData d = NULL;
  int err = FsdpDataCreate(MPI_COMM_WORLD, fuzz_path, vocab, T, gb, 1, &d);
  FUZZ_USAGE_OR_SUCCESS(err);
  if (err) {
    FUZZ_REQUIRE(d == NULL, "a failed create leaves a handle");
    FUZZ_REQUIRE(strstr(FsdpErrorLastMessage(), fuzz_path) != NULL,
                 "message does not name the file: %s", FsdpErrorLastMessage());
    return 0;
  }
  int64_t n = FsdpDataNumTokens(d);
  FUZZ_REQUIRE(n >= (int64_t)gb * T + 1 && 1024 + 2 * n == (int64_t)size - 4,
               "accepted %lld tokens from a file of %zu bytes (T %d, global batch %d)",
               (long long)n, size - 4, T, gb);
  int *in = malloc((size_t)gb * T * sizeof *in), *tg = malloc((size_t)gb * T * sizeof *tg);
  FUZZ_REQUIRE(in && tg, "out of memory");
  for (int64_t step = 0; step < 3; step++) {
    FUZZ_REQUIRE(FsdpDataGetBatch(d, step, 0, 1, in, tg) == FSDP_SUCCESS, "GetBatch: %s",
                 FsdpErrorLastMessage());
    for (int i = 0; i < gb * T; i++) {
      FUZZ_REQUIRE(in[i] >= 0 && in[i] < vocab && tg[i] >= 0 && tg[i] < vocab,
                   "token %d/%d out of [0, %d)", in[i], tg[i], vocab);
      if (i % T != T - 1) FUZZ_REQUIRE(tg[i] == in[i + 1], "target is not the next input");
    }
  }
  free(in);
  free(tg);
  FUZZ_REQUIRE(FsdpDataDestroy(&d) == FSDP_SUCCESS && d == NULL, "destroy");
  return 0;
}
