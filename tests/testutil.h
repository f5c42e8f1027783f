/* testutil.h: assertions for fsdp's MPI test programs.
 *
 * CHECK records a failure (with file:line and a message) and goes on, so
 * one run shows every wrong value; test_finish() agrees on the outcome
 * over MPI_COMM_WORLD and returns the exit status: 0, or 1 if any rank
 * failed.  TCALL runs an fsdp call that must succeed.
 */
#ifndef FSDP_TESTUTIL_H
#define FSDP_TESTUTIL_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures = 0;
static int test_checks = 0;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    test_checks++;                                                         \
    if (!(cond)) {                                                         \
      int r_;                                                              \
      MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                  \
      test_failures++;                                                     \
      fprintf(stderr, "[rank %d] FAIL %s:%d: %s: ", r_, __FILE__, __LINE__, \
              #cond);                                                      \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
    }                                                                      \
  } while (0)

#define TCALL(expr)                                                        \
  do {                                                                     \
    int e_ = (expr);                                                       \
    if (e_ != 0) {                                                         \
      fprintf(stderr, "FATAL %s:%d: %s returned %d\n", __FILE__, __LINE__,  \
              #expr, e_);                                                  \
      MPI_Abort(MPI_COMM_WORLD, 1);                                        \
    }                                                                      \
  } while (0)

/* Collective on MPI_COMM_WORLD. */
static inline int test_finish(const char *name)
{
  int local[2] = {test_failures, test_checks}, total[2] = {0, 0}, rank = 0;
  MPI_Allreduce(local, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("%s: %d checks, %d failed\n", name, total[1], total[0]);
  return total[0] ? 1 : 0;
}

#endif
