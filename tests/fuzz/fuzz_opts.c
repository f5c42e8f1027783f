/* fuzz_opts: the options parser (lib/base/opts.c) on arbitrary bytes.
 *
 * Input: up to the first newline, the value of FSDP_OPTIONS (up to a NUL,
 * as an environment variable would be); the rest (or all of it, without a
 * newline) is an options file named on the command line.  Every failure
 * must be a usage error with a message; a database that was built must
 * answer every typed getter with a value or a usage error, and its
 * rendering (FsdpOptsToString, what run files record) must read back as
 * FSDP_OPTIONS to the same database. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "base/opts.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  fuzz_init(argc, argv, "opts");
  return 0;
}

/* Ask for a few options of every type; errors must be usage errors. */
static void read_options(FsdpOpts db)
{
  static const char *const modes[] = {"none", "backward", "both", NULL};
  int64_t i64;
  double d;
  size_t sz;
  int b, idx;
  const char *s;
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetInt(db, "F", "steps", "h", 1, 1, 1000, &i64));
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetInt(db, "F", "seed", "h", 0, INT64_MIN, INT64_MAX, &i64));
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetDouble(db, "F", "lr", "h", 0.1, 0, 1, &d));
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetDouble(db, "F", "x", "h", 0, -INFINITY, INFINITY, &d));
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetSize(db, "F", "mem", "h", 64, &sz));
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetBool(db, "F", "flag", "h", 0, &b));
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetEnum(db, "F", "prefetch", "h", modes, 1, &idx));
  FUZZ_REQUIRE(idx >= 0 && idx < 3, "enum index %d", idx);
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsGetString(db, "F", "title", "h", NULL, &s));
  if (s) FUZZ_REQUIRE(strlen(s) < (1u << 20), "string of %zu bytes", strlen(s));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const uint8_t *nl = memchr(data, '\n', size);
  size_t envlen = nl ? (size_t)(nl - data) : 0;
  char *env = strndup((const char *)data, envlen);
  FUZZ_REQUIRE(env != NULL, "out of memory");
  if (nl && env[0]) setenv("FSDP_OPTIONS", env, 1);
  else unsetenv("FSDP_OPTIONS");
  free(env);
  size_t skip = nl ? envlen + 1 : 0;
  fuzz_write_file(data + skip, size - skip);

  char prog[] = "fuzz_opts", of[] = "-options_file", opt[] = "-cli", val[] = "5";
  char *argv[] = {prog, of, fuzz_path, opt, val, NULL};
  FsdpOpts db = (FsdpOpts)&db;
  int err = FsdpOptsCreate(MPI_COMM_WORLD, 5, argv, &db);
  FUZZ_USAGE_OR_SUCCESS(err);
  if (err) {
    FUZZ_REQUIRE(db == NULL, "a failed create leaves a database");
    FUZZ_REQUIRE(FsdpErrorLastMessage()[0], "a usage error without a message");
    unsetenv("FSDP_OPTIONS");
    return 0;
  }
  read_options(db);
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsCheckUnknown(db));
  FUZZ_USAGE_OR_SUCCESS(FsdpOptsReportLeft(db, NULL, NULL));

  /* The rendering reads back as FSDP_OPTIONS to the same rendering. */
  static char text[1 << 16], again[1 << 16];
  FUZZ_REQUIRE(FsdpOptsToString(db, text, sizeof text) == FSDP_SUCCESS, "ToString");
  FsdpOptsDestroy(&db);
  if (strlen(text) < sizeof text - 1) {
    setenv("FSDP_OPTIONS", text, 1);
    char *argv0[] = {prog, NULL};
    err = FsdpOptsCreate(MPI_COMM_WORLD, 1, argv0, &db);
    FUZZ_REQUIRE(err == FSDP_SUCCESS, "the rendering [%s] does not read back: %s", text,
                 FsdpErrorLastMessage());
    FUZZ_REQUIRE(FsdpOptsToString(db, again, sizeof again) == FSDP_SUCCESS, "ToString");
    FUZZ_REQUIRE(strcmp(text, again) == 0, "rendering [%s] reads back as [%s]", text, again);
    FsdpOptsReportLeft(db, NULL, NULL);
    FsdpOptsDestroy(&db);
  }
  unsetenv("FSDP_OPTIONS");
  return 0;
}
