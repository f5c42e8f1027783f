/* dirlock.h: one job per checkpoint directory.
 *
 * [Note: checkpoint directory lock] Two jobs writing one -checkpoint_dir
 * overwrite each other's ckpt_<step>.h5, prune each other's files, and a
 * job resuming there can load the other's model.  So a job that uses the
 * directory (saves there, or -resume auto reads it) holds a lock in it
 * for its whole life: the lock file <dir>/.fsdp.lock, locked with an
 * fcntl(2) write lock (open file description lock where the kernel has
 * one, else a POSIX record lock; both reach NFS servers through their lock
 * protocol, unlike flock(2) on older clients) by world rank 0 alone.  The
 * other ranks, on any node, take the verdict rank 0 broadcasts: a second
 * job is refused on every rank at start-up (FSDP_ERR_USAGE, exit status 2)
 * with a message naming the holder, before it reads or writes anything in
 * the directory, so nothing of the other job's is touched.
 *
 * The holder writes who it is into the file (host, pid, SLURM_JOB_ID when
 * there is one, start time) and removes the file as it releases the lock
 * (a job that opened the old file meanwhile sees, once it holds the lock,
 * that the name now points elsewhere, and starts over on the new file).
 * A kernel lock vanishes with its process, so the lock of a job that was
 * killed, crashed or requeued by Slurm is free although its file is still
 * there and names it: the next job simply locks the file again and warns,
 * naming the old holder (a requeued Slurm job sees its own job id there
 * and resumes).
 * On NFSv4 a dead client's lock outlives it until its lease expires (90 s
 * by default): a job started within that time is refused and can be
 * started again.  On a file system without locks (fcntl says ENOLCK,
 * EOPNOTSUPP or ENOSYS) the job warns that nothing guards the directory
 * and runs on.
 */
#ifndef FSDP_DIRLOCK_H
#define FSDP_DIRLOCK_H

#include <mpi.h>

#define FSDP_DIRLOCK_NAME ".fsdp.lock"

typedef struct FsdpDirLock_ *FsdpDirLock;

/* Collective on comm.  World rank 0 of comm locks dir's lock file (dir
 * must exist and be writable) and writes its identity into it.  Another
 * job holding it: FSDP_ERR_USAGE on every rank naming the holder; *lock
 * stays NULL.  what names the directory in messages ("-checkpoint_dir"). */
int FsdpDirLockAcquire(MPI_Comm comm, const char *dir, const char *what, FsdpDirLock *lock);

/* Not collective.  Remove the lock file and release the lock; accepts
 * NULL and sets *lock = NULL. */
int FsdpDirLockRelease(FsdpDirLock *lock);

#endif
