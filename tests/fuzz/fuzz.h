/* fuzz.h: what the fuzz harnesses share (tests/fuzz/run.sh builds them
 * with libFuzzer; replay.c runs them on fixed inputs under ctest).
 *
 * A harness defines LLVMFuzzerInitialize (MPI on one rank, its setup) and
 * LLVMFuzzerTestOneInput (one input: write it where the code under test
 * reads it, run that code, check what a correct implementation
 * guarantees, abort() otherwise).  Usage errors are the expected outcome
 * of most inputs; anything else that fails is a bug, reported by
 * FUZZ_REQUIRE with the message of the failure. */
#ifndef FSDP_FUZZ_H
#define FSDP_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/error.h"
#include "base/init.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Where FUZZ_REQUIRE reports: a copy of stderr taken before libFuzzer's
 * -close_fd_mask closes it (which silences fsdp's expected usage errors). */
static FILE *fuzz_report;

#define FUZZ_REQUIRE(cond, ...)                                          \
  do {                                                                   \
    if (!(cond)) {                                                       \
      FILE *fuzz_out_ = fuzz_report ? fuzz_report : stderr;              \
      fprintf(fuzz_out_, "fuzz: %s:%d: %s fails: ", __FILE__, __LINE__, #cond); \
      fprintf(fuzz_out_, __VA_ARGS__);                                   \
      fprintf(fuzz_out_, "\n");                                          \
      fflush(fuzz_out_);                                                 \
      abort();                                                           \
    }                                                                    \
  } while (0)

/* A usage error is an answer; any other failure is a bug. */
#define FUZZ_USAGE_OR_SUCCESS(err)                                       \
  FUZZ_REQUIRE((err) == FSDP_SUCCESS || (err) == FSDP_ERR_USAGE,         \
               "error %d: %s", (err), FsdpErrorLastMessage())

static char fuzz_path[256];

static void fuzz_remove_file(void) { unlink(fuzz_path); }

/* Once: MPI on this one process, and a scratch file name for inputs. */
static inline void fuzz_init(int *argc, char ***argv, const char *name)
{
  int fd = dup(2);
  fuzz_report = fd >= 0 ? fdopen(fd, "w") : NULL;
  /* OpenMPI's handlers of SIGSEGV/SIGABRT would take the place of
   * libFuzzer's and the sanitizers' (no input saved, no report) */
  setenv("OMPI_MCA_opal_signal", "", 0);
  if (FsdpInitialize(argc, argv) != FSDP_SUCCESS) abort();
  const char *dir = getenv("TMPDIR");
  snprintf(fuzz_path, sizeof fuzz_path, "%s/fsdp_fuzz_%s_%ld", dir && *dir ? dir : "/tmp",
           name, (long)getpid());
  atexit(fuzz_remove_file);
}

/* Write the input (or a part of it) to the scratch file. */
static inline void fuzz_write_file(const uint8_t *data, size_t size)
{
  FILE *f = fopen(fuzz_path, "wb");
  FUZZ_REQUIRE(f != NULL, "cannot create %s", fuzz_path);
  FUZZ_REQUIRE(fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s",
               fuzz_path);
}

#endif
