/* fileutil.c: publishing a file whole (see fileutil.h). */
#include "io/fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int FsdpTempFileCreate(const char *path, const char *tag, char *tmp, size_t size)
{
  int n = snprintf(tmp, size, "%s.%s-XXXXXX", path, tag);
  if (n < 0 || (size_t)n >= size) return ENAMETOOLONG;
  int fd = mkstemp(tmp);
  if (fd < 0) return errno;
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0)
    FsdpWarn(0, "cannot set the permissions of %s: %s", tmp, strerror(errno));
  close(fd);
  return 0;
}

void FsdpDirName(const char *path, char *dir, size_t size)
{
  snprintf(dir, size, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir) dir[1] = '\0';
  else if (slash) *slash = '\0';
  else snprintf(dir, size, ".");
}

/* fsync a file or a directory: 0, or -1 with errno. */
static int FsyncPath(const char *path, int dir)
{
  int fd = open(path, dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return -1;
  int r = fsync(fd);
  int e = errno;
  if (close(fd) != 0 && r == 0) return -1;
  errno = e;
  return r;
}

/* Name tmp path without replacing an existing path: 0 or an errno. */
static int NameExclusive(const char *tmp, const char *path)
{
  if (link(tmp, path) == 0) {
    unlink(tmp);
    return 0;
  }
  if (errno == EEXIST) return EEXIST;
  /* no hard links here (some parallel and FUSE file systems) */
  struct stat st;
  if (stat(path, &st) == 0) return EEXIST;
  return rename(tmp, path) == 0 ? 0 : errno;
}

int FsdpPublish(const char *tmp, const char *path, int replace, FsdpPublishStep *failed)
{
  FsdpPublishStep step = FSDP_PUBLISH_SYNC_FILE;
  int e = FsyncPath(tmp, 0) == 0 ? 0 : errno;
  if (!e) {
    step = FSDP_PUBLISH_NAME;
    if (replace) e = rename(tmp, path) == 0 ? 0 : errno;
    else e = NameExclusive(tmp, path);
  }
  if (!e) {
    step = FSDP_PUBLISH_SYNC_DIR;
    char dir[4096];
    FsdpDirName(path, dir, sizeof dir);
    e = FsyncPath(dir, 1) == 0 ? 0 : errno;
  }
  if (failed) *failed = e ? step : FSDP_PUBLISH_OK;
  return e;
}
