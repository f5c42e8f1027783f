/* outputs.c: the files a run writes, checked before it starts (see outputs.h). */
#include "io/outputs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "base/error.h"
#include "io/ckpt.h"
#include "io/dirlock.h"
#include "io/fileutil.h"

#define PATH_LEN 4096
#define MSG_LEN 2048

/* File systems of the kernel's own objects (linux/magic.h): writes there
 * do not store files, and statvfs reports them full or empty. */
static const struct {
  unsigned long magic;
  const char *name;
} kPseudoFs[] = {
    {0x9fa0, "procfs"},       {0x62656572, "sysfs"},     {0x27e0eb, "cgroupfs"},
    {0x63677270, "cgroup2"},  {0x64626720, "debugfs"},   {0x74726163, "tracefs"},
    {0x73636673, "securityfs"}, {0xcafe4a11, "bpffs"},   {0x62656570, "configfs"},
    {0x6165676c, "pstorefs"}, {0xde5e81e4, "efivarfs"},  {0xf97cff8c, "selinuxfs"},
    {0x1cd1, "devpts"},       {0x65735543, "fusectl"},   {0x42494e4d, "binfmt_misc"},
    {0x19800202, "mqueue"},   {0x6e736673, "nsfs"},      {0x958458f6, "hugetlbfs"},
};

static const char *PseudoFs(const char *path)
{
  struct statfs sf;
  if (statfs(path, &sf) != 0) return NULL;
  for (size_t i = 0; i < sizeof kPseudoFs / sizeof kPseudoFs[0]; i++)
    if ((unsigned long)sf.f_type == kPseudoFs[i].magic) return kPseudoFs[i].name;
  return NULL;
}

/* The nearest existing ancestor of the canonical path p (p itself when it
 * exists) into out. */
static void ExistingAncestor(const char *p, char *out, size_t size)
{
  snprintf(out, size, "%s", p);
  struct stat st;
  while (stat(out, &st) != 0 && strcmp(out, "/") != 0) {
    char *slash = strrchr(out, '/');
    if (slash == out) out[1] = '\0';
    else if (slash) *slash = '\0';
    else break;
  }
}

/* Rank 0: the checkpoint directory ([Note: one job's files]); *in_use. */
static int CheckCkptDir(const FsdpOutputs *o, const char *canon, char *msg, size_t size,
                        int *in_use)
{
  const char *dir = o->ckpt_dir;
  *in_use = 0;
  if (!o->ckpt_writes && !o->ckpt_reads) return 0;
  char near[PATH_LEN];
  ExistingAncestor(canon, near, sizeof near);
  const char *fs = PseudoFs(near);
  if (fs) {
    FsdpMsgf(msg, size, "option -checkpoint_dir %s: %s is on %s, a kernel file system that "
             "stores no files: choose a directory on a real file system", dir, canon, fs);
    return 1;
  }
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno != ENOENT || !o->ckpt_writes) {
      if (errno == ENOENT) return 0; /* -resume auto: nothing there yet */
      FsdpMsgf(msg, size, "option -checkpoint_dir %s: %s", dir, strerror(errno));
      return 1;
    }
    if (FsdpMakeDirs(dir) != 0) {
      FsdpMsgf(msg, size, "option -checkpoint_dir %s: cannot create the directory: %s", dir,
               strerror(errno));
      return 1;
    }
  } else if (!S_ISDIR(st.st_mode)) {
    FsdpMsgf(msg, size, "option -checkpoint_dir %s: %s (it is a file)", dir, strerror(ENOTDIR));
    return 1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    FsdpMsgf(msg, size, "option -checkpoint_dir %s: cannot write in the directory: %s", dir,
             strerror(errno));
    return 1;
  }
  *in_use = 1;
  return 0;
}

/* Rank 0: the -trace file may be created: no file there (exists), a
 * writable directory (!exists: after the checkpoint directory is made). */
static int CheckTrace(const char *trace, const char *canon, int exists, char *msg, size_t size)
{
  struct stat st;
  if (exists) {
    if (lstat(trace, &st) != 0) return 0;
    FsdpMsgf(msg, size, "option -trace %s: the file exists: refusing to overwrite it (remove "
             "it or choose another -trace)", trace);
    return 1;
  }
  char dir[PATH_LEN];
  FsdpDirName(canon, dir, sizeof dir);
  int e = 0;
  if (stat(dir, &st) != 0) e = errno;
  else if (!S_ISDIR(st.st_mode)) e = ENOTDIR;
  else if (access(dir, W_OK | X_OK) != 0) e = errno;
  if (e) {
    FsdpMsgf(msg, size, "option -trace %s: cannot create a file in %s: %s", trace, dir,
             strerror(e));
    return 1;
  }
  return 0;
}

/* Rank 0: a resumed run's -trace over an earlier run's file: the first
 * free FILE.<k> into alt (k from 1), else 1 with msg set. */
static int ResumedTrace(const char *trace, char *alt, size_t alt_size, char *msg, size_t size)
{
  struct stat st;
  for (int k = 1; k < 1000; k++) {
    if (snprintf(alt, alt_size, "%s.%d", trace, k) >= (int)alt_size) break;
    if (lstat(alt, &st) != 0 && errno == ENOENT) return 0;
  }
  FsdpMsgf(msg, size, "option -trace %s: the file exists, and so do %s.1 to %s.999 of earlier "
           "resumed runs: remove them or choose another -trace", trace, trace, trace);
  return 1;
}

/* Rank 0: every check, the first refusal into msg; trace_path: the file
 * the run writes its trace to. */
static int CheckAll(const FsdpOutputs *o, char *msg, size_t size, int *in_use, char *trace_path,
                    size_t trace_size)
{
  struct {
    const char *option, *path;
    char canon[PATH_LEN];
  } out[2] = {{"-metrics", o->metrics, ""}, {"-trace", o->trace, ""}};
  struct stat st;
  if (o->trace && o->resuming && lstat(o->trace, &st) == 0) {
    /* a requeued job's earlier run wrote it: kept, this run writes beside */
    if (ResumedTrace(o->trace, trace_path, trace_size, msg, size)) return 1;
    out[1].path = trace_path;
  } else if (o->trace) {
    snprintf(trace_path, trace_size, "%s", o->trace);
  }
  char dir[PATH_LEN];
  int e = FsdpPathCanonical(o->ckpt_dir, dir, sizeof dir);
  if (e) {
    FsdpMsgf(msg, size, "option -checkpoint_dir %s: %s", o->ckpt_dir, strerror(e));
    return 1;
  }
  for (int k = 0; k < 2; k++) {
    if (!out[k].path) continue;
    e = FsdpPathCanonical(out[k].path, out[k].canon, sizeof out[k].canon);
    if (e) {
      FsdpMsgf(msg, size, "option %s %s: %s", out[k].option, out[k].path, strerror(e));
      return 1;
    }
  }
  if (o->trace && CheckTrace(out[1].path, out[1].canon, 1, msg, size)) return 1;
  if (o->metrics && o->trace && strcmp(out[0].canon, out[1].canon) == 0) {
    FsdpMsgf(msg, size, "options -metrics %s and -trace %s are one file (%s): each output needs "
             "a file of its own", o->metrics, out[1].path, out[0].canon);
    return 1;
  }
  for (int k = 0; k < 2; k++) {
    if (!out[k].path) continue;
    for (int i = 0; i < FSDP_OUTPUTS_MAX_INPUTS; i++) {
      char in[PATH_LEN];
      if (!o->inputs[i].path || FsdpPathCanonical(o->inputs[i].path, in, sizeof in) != 0) continue;
      if (strcmp(in, out[k].canon) == 0) {
        FsdpMsgf(msg, size, "option %s %s is the input of %s %s: an output must not replace "
                 "an input", out[k].option, out[k].path, o->inputs[i].option, o->inputs[i].path);
        return 1;
      }
    }
    char parent[PATH_LEN];
    FsdpDirName(out[k].canon, parent, sizeof parent);
    const char *base = out[k].canon + strlen(parent) + (strcmp(parent, "/") != 0);
    if (strcmp(parent, dir) == 0 && (FsdpCkptIsOwnName(base) || strcmp(base, FSDP_DIRLOCK_NAME) == 0)) {
      FsdpMsgf(msg, size, "option %s %s: %s in -checkpoint_dir %s is a name the checkpoints "
               "take (saves rename onto ckpt_<step>.h5, pruning deletes them): choose another "
               "name or directory", out[k].option, out[k].path, base, o->ckpt_dir);
      return 1;
    }
  }
  if (CheckCkptDir(o, dir, msg, size, in_use)) return 1;
  return o->trace && CheckTrace(out[1].path, out[1].canon, 0, msg, size);
}

int FsdpOutputsCheck(MPI_Comm comm, const FsdpOutputs *o, int *ckpt_dir_in_use, char *trace,
                     size_t size)
{
  int rank;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  struct {
    int bad, in_use;
    char msg[MSG_LEN];
    char trace[PATH_LEN];
  } v;
  memset(&v, 0, sizeof v);
  if (rank == 0) v.bad = CheckAll(o, v.msg, sizeof v.msg, &v.in_use, v.trace, sizeof v.trace);
  FSDP_CALL_MPI(MPI_Bcast(&v, (int)sizeof v, MPI_BYTE, 0, comm));
  if (v.bad) FSDP_ERROR(FSDP_ERR_USAGE, "%s", v.msg);
  if (ckpt_dir_in_use) *ckpt_dir_in_use = v.in_use;
  if (trace) snprintf(trace, size, "%s", v.trace);
  return FSDP_SUCCESS;
}
