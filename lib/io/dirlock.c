/* dirlock.c: one job per checkpoint directory (see dirlock.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_SETLK */
#endif
#include "io/dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"

#ifdef F_OFD_SETLK
#define LOCK_CMD F_OFD_SETLK /* not dropped when another fd of the file closes */
#else
#define LOCK_CMD F_SETLK
#endif

#define HOLDER_LEN 512

struct FsdpDirLock_ {
  int fd; /* rank 0: the locked file, or -1 (other ranks, no lock support) */
  char path[4200];
};

/* "host vm, pid 123, Slurm job 45, since 2026-..." (no newline). */
static void Identity(char *buf, size_t size)
{
  char host[256] = "?";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';
  char when[40] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S%z", &tm);
  const char *job = getenv("SLURM_JOB_ID");
  char slurm[96] = "";
  if (job && job[0]) snprintf(slurm, sizeof slurm, ", Slurm job %.64s", job);
  snprintf(buf, size, "host %s, pid %ld%s, since %s", host, (long)getpid(), slurm, when);
  /* what another job prints back must not carry control bytes */
  for (char *p = buf; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

/* The holder a lock file names, as one printable line ("" when empty). */
static void ReadHolder(int fd, char *buf, size_t size)
{
  ssize_t n = pread(fd, buf, size - 1, 0);
  if (n < 0) n = 0;
  buf[n] = '\0';
  char *nl = strchr(buf, '\n');
  if (nl) *nl = '\0';
  for (char *p = buf; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

/* Rank 0: lock; fills v (code 0: locked, or no locks here) and *fd. */
typedef struct {
  int code;
  char msg[1400];
} Verdict;

static void LockRankZero(const char *dir, const char *what, int *fd_out, char *path_out,
                         size_t path_size, Verdict *v)
{
  char path[4200];
  *fd_out = -1;
  if (snprintf(path, sizeof path, "%s/%s", dir, FSDP_DIRLOCK_NAME) >= (int)sizeof path) {
    v->code = FSDP_ERR_USAGE;
    FsdpMsgf(v->msg, sizeof v->msg, "option %s %s: directory name too long", what, dir);
    return;
  }
  char holder[HOLDER_LEN];
  int fd = -1, r = -1, e = 0;
  /* a holder removes the file as it releases it: a lock won on a file
   * that no longer has this name is no lock; open the new one */
  for (int tries = 0; tries < 100; tries++) {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
      v->code = FSDP_ERR_USAGE;
      FsdpMsgf(v->msg, sizeof v->msg, "option %s %s: cannot open the lock file %s: %s", what,
               dir, path, strerror(errno));
      return;
    }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    r = fcntl(fd, LOCK_CMD, &fl);
    e = errno;
    if (r != 0 && e == EINVAL && LOCK_CMD != F_SETLK) {
      /* a kernel or file system without open-file-description locks:
       * the classic process lock (rank 0 keeps this fd open for the
       * job's life and opens no other on the file) */
      r = fcntl(fd, F_SETLK, &fl);
      e = errno;
    }
    struct stat mine, named;
    if (r != 0 || (fstat(fd, &mine) == 0 && stat(path, &named) == 0 && mine.st_ino == named.st_ino &&
                   mine.st_dev == named.st_dev))
      break;
    close(fd);
    fd = -1;
  }
  if (fd < 0) {
    v->code = FSDP_ERR_USAGE;
    FsdpMsgf(v->msg, sizeof v->msg, "option %s %s: the lock file %s keeps being replaced", what,
             dir, path);
    return;
  }
  if (r != 0) {
    if (e == EACCES || e == EAGAIN) {
      ReadHolder(fd, holder, sizeof holder);
      v->code = FSDP_ERR_USAGE;
      FsdpMsgf(v->msg, sizeof v->msg,
               "option %s %s: the directory is in use by another job (%s; lock file %s): two "
               "jobs in one checkpoint directory overwrite each other's checkpoints. Wait for "
               "that job to end, or choose another %s",
               what, dir, holder[0] ? holder : "it has not written its name yet", path, what);
    } else if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
      FsdpWarn(0, "%s %s: this file system has no file locks (%s): nothing keeps a second job "
                  "from using the directory at the same time",
               what, dir, strerror(e));
    } else {
      v->code = FSDP_ERR_USAGE;
      FsdpMsgf(v->msg, sizeof v->msg, "option %s %s: cannot lock %s: %s", what, dir, path,
               strerror(e));
    }
    close(fd);
    return;
  }
  /* [Note: checkpoint directory lock]: a name left in the file is a job
   * that ended without releasing the lock; its kernel lock went with it */
  ReadHolder(fd, holder, sizeof holder);
  char me[HOLDER_LEN];
  Identity(me, sizeof me);
  if (holder[0]) {
    const char *job = getenv("SLURM_JOB_ID"), *at = strstr(holder, ", Slurm job ");
    char same[160] = "";
    size_t jn = job ? strlen(job) : 0;
    if (jn && at && strncmp(at + 12, job, jn) == 0 && at[12 + jn] == ',')
      snprintf(same, sizeof same, " (this Slurm job, requeued)");
    FsdpWarn(0, "%s %s: taking over the lock %s left by %s%s, which no longer holds it (it "
                "was killed, crashed or requeued)",
             what, dir, path, holder, same);
  }
  char line[HOLDER_LEN + 2];
  int n = snprintf(line, sizeof line, "%s\n", me);
  /* the name only informs: the kernel's lock is what keeps others out,
   * so a full disk here is the run file's and the checkpoints' to report */
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n || fsync(fd) != 0)
    FsdpWarn(0, "%s %s: locked, but cannot write this job's name into %s: %s", what, dir, path,
             strerror(errno));
  *fd_out = fd;
  snprintf(path_out, path_size, "%s", path);
}

int FsdpDirLockAcquire(MPI_Comm comm, const char *dir, const char *what, FsdpDirLock *lock)
{
  *lock = NULL;
  int rank;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  Verdict v;
  memset(&v, 0, sizeof v);
  int fd = -1;
  char path[4200] = "";
  if (rank == 0) LockRankZero(dir, what, &fd, path, sizeof path, &v);
  FSDP_CALL_MPI(MPI_Bcast(&v, (int)sizeof v, MPI_BYTE, 0, comm));
  if (v.code) FSDP_ERROR(v.code, "%s", v.msg);
  FsdpDirLock l = calloc(1, sizeof *l);
  if (!l) {
    if (fd >= 0) close(fd);
    FSDP_CHECK_ALLOC(l, sizeof *l);
  }
  l->fd = fd;
  snprintf(l->path, sizeof l->path, "%s", path);
  *lock = l;
  return FSDP_SUCCESS;
}

int FsdpDirLockRelease(FsdpDirLock *lock)
{
  if (!lock || !*lock) return FSDP_SUCCESS;
  FsdpDirLock l = *lock;
  *lock = NULL;
  int err = FSDP_SUCCESS;
  if (l->fd >= 0) {
    /* removed while still locked (a job waiting on it retries on the new
     * file); the close drops the lock */
    if (unlink(l->path) != 0) FsdpWarn(0, "cannot remove %s: %s", l->path, strerror(errno));
    if (close(l->fd) != 0) err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO,
                                                "closing %s failed: %s", l->path, strerror(errno));
  }
  free(l);
  return err;
}
