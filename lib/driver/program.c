/* program.c: the shared main of fsdp's programs (program.h). */
#include "driver/program.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/init.h"
#include "driver/preempt.h"
#include "io/ckpt.h"

/* Split the leading non-option arguments off argv: r gets them, *rest the
 * program name followed by the options (freed by the caller). */
static int SplitPositional(int argc, char **argv, int max_positional, FsdpProgramRun *r,
                           int *nrest, char ***rest)
{
  char **out = calloc((size_t)argc + 1, sizeof *out);
  FSDP_CHECK_ALLOC(out, ((size_t)argc + 1) * sizeof *out);
  int i = 1, n = 0;
  out[n++] = argv[0];
  if (max_positional > 0)
    for (; i < argc && argv[i][0] != '-'; i++) {
      if (r->npositional < max_positional) r->positional[r->npositional] = argv[i];
      r->npositional++;
    }
  for (; i < argc; i++) out[n++] = argv[i];
  *nrest = n;
  *rest = out;
  return FSDP_SUCCESS;
}

/* Options, then the work; returns an error code, r the outcome. */
static int Run(int argc, char **argv, const FsdpProgram *p, FsdpProgramRun *r)
{
  FSDP_ASSERT(p->max_positional <= FSDP_PROGRAM_MAX_POSITIONAL);
  int nrest = 0;
  char **rest = NULL;
  FSDP_CALL(SplitPositional(argc, argv, p->max_positional, r, &nrest, &rest));
  int err = FsdpOptsCreate(MPI_COMM_WORLD, nrest, rest, &r->db);
  free(rest);
  FSDP_CALL(err);
  /* read every option first: -help lists them all and a typo is an error
   * before any MPI work or allocation */
  err = p->read_options(r->db, p->state);
  if (FsdpOptsHelpRequested(r->db)) {
    FsdpOptsPrintHelp(r->db, stdout, p->help);
    FsdpOptsDestroy(&r->db);
    return FSDP_SUCCESS;
  }
  if (!err) err = FsdpOptsCheckUnknown(r->db);
  /* [Note: threads beyond the affinity mask] (base/init.c) */
  if (!err && p->computes) FsdpWarnThreadAffinity(p->name);
  if (!err) err = p->run(r);
  /* -options_left: FsdpOptsDestroy lists them (a run may have already) */
  int derr = FsdpOptsDestroy(&r->db);
  return err ? err : derr;
}

int FsdpProgramMain(int argc, char **argv, const FsdpProgram *p)
{
  int err = FsdpInitialize(&argc, &argv);
  if (err) {
    FsdpFinalize();
    return FsdpExitStatus(err);
  }
  FsdpProgramRun r = {.state = p->state};
  err = Run(argc, argv, p, &r);
  /* a rank-local failure may leave other ranks inside a collective */
  if (err && err != FSDP_ERR_USAGE && p->on_failure == FSDP_PROGRAM_ABORT_ON_FAILURE)
    FsdpAbort(err);
  FsdpFinalize();
  /* [Note: preemption] (driver/preempt.h): a checkpoint was written; the
   * job script requeues the run on this status */
  if (!err && r.preempted) return FSDP_EXIT_PREEMPTED;
  /* [Note: finite checkpoints] (io/ckpt.h): every rank stopped with one message */
  if (err == FSDP_ERR_USAGE && r.nonfinite) return FSDP_EXIT_NONFINITE;
  return FsdpExitStatus(err);
}
