/* outputs.h: the files a run writes, checked together before it starts.
 *
 * [Note: one job's files] A run writes a run file (-metrics), a timeline
 * (-trace) and checkpoints (-checkpoint_dir), and reads inputs (-data,
 * -val_data, -resume FILE).  Checked one by one, at the moment each is
 * written, they collide: a timeline written at the end of a run over the
 * run file or a checkpoint, a run file in the checkpoint directory under a
 * name that the next save renames a checkpoint onto, a directory that
 * turns out to be a file or to live on /proc at the first save, hours in.
 * So FsdpOutputsCheck looks at all of them at start-up, on rank 0, by
 * their real paths (FsdpPathCanonical: "./run.h5", "x/../run.h5" and a
 * symbolic link to it are one file):
 *   - -trace refuses an existing file, as -metrics does (its writer opens
 *     with O_EXCL too, so a file that appears meanwhile is not replaced),
 *     and its directory must exist and be writable; a resumed run (a
 *     requeued or preempted job run again with the same options) keeps
 *     the earlier run's trace and writes its own to FILE.1, FILE.2, ...
 *     (the first free name), as -metrics appends to its run file;
 *   - no two outputs, and no output and an input, are one file;
 *   - no output takes a name the checkpoints own in -checkpoint_dir
 *     (FsdpCkptIsOwnName) or its lock file (dirlock.h);
 *   - the checkpoint directory, when checkpoints are saved there, is a
 *     directory or is created now, is writable, and is on a file system
 *     that stores files (not procfs, sysfs, cgroupfs and their kin, found
 *     with statfs(2)); -resume auto alone needs it only where it exists,
 *     and then the same way (the job locks it: dirlock.h).
 * Every refusal is FSDP_ERR_USAGE on every rank with the option, the path
 * and the errno text.
 */
#ifndef FSDP_OUTPUTS_H
#define FSDP_OUTPUTS_H

#include <mpi.h>
#include <stddef.h>

#define FSDP_OUTPUTS_MAX_INPUTS 4

typedef struct {
  const char *metrics;  /* -metrics FILE, or NULL */
  const char *trace;    /* -trace FILE, or NULL */
  const char *ckpt_dir; /* -checkpoint_dir */
  int ckpt_writes;      /* checkpoints are saved there */
  int ckpt_reads;       /* -resume auto looks there */
  int resuming;         /* -resume FILE or auto: an existing -trace is an earlier run's */
  struct {
    const char *option; /* "-data" */
    const char *path;   /* NULL: not given */
  } inputs[FSDP_OUTPUTS_MAX_INPUTS];
} FsdpOutputs;

/* Collective on comm.  [Note: one job's files].  *ckpt_dir_in_use (may be
 * NULL) gets 1 when the checkpoint directory exists and the run saves or
 * resumes there: the caller locks it (dirlock.h).  trace (size bytes; may
 * be NULL): the file this run writes its -trace to (o->trace, or the
 * first free FILE.<k> of a resumed run; "" without -trace). */
int FsdpOutputsCheck(MPI_Comm comm, const FsdpOutputs *o, int *ckpt_dir_in_use, char *trace,
                     size_t size);

#endif
