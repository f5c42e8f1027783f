/* fileutil.c: publishing a file whole (see fileutil.h). */
#include "io/fileutil.h"

#include <errno.h>
#include <limits.h>
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

int FsdpMakeDirs(const char *dir)
{
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(p, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* Append component c (not "" or ".") to the absolute path out. */
static int AppendComponent(char *out, size_t size, const char *c)
{
  if (strcmp(c, "..") == 0) {
    char *slash = strrchr(out, '/');
    if (slash == out) out[1] = '\0';
    else if (slash) *slash = '\0';
    return 0;
  }
  size_t n = strlen(out);
  int w = snprintf(out + n, size - n, "%s%s", n > 0 && out[n - 1] == '/' ? "" : "/", c);
  return w < 0 || (size_t)w >= size - n ? ENAMETOOLONG : 0;
}

static int Canonical(const char *path, char *out, size_t size, int depth)
{
  if (depth > 40) return ELOOP;
  char resolved[PATH_MAX];
  if (realpath(path, resolved)) {
    if (strlen(resolved) >= size) return ENAMETOOLONG;
    snprintf(out, size, "%s", resolved);
    return 0;
  }
  /* a dangling link: where it points is the file a writer creates */
  char target[PATH_MAX];
  ssize_t tn = readlink(path, target, sizeof target - 1);
  if (tn > 0) {
    target[tn] = '\0';
    char joined[2 * PATH_MAX + 2];
    if (target[0] == '/') snprintf(joined, sizeof joined, "%s", target);
    else {
      char dir[PATH_MAX];
      FsdpDirName(path, dir, sizeof dir);
      snprintf(joined, sizeof joined, "%s/%s", dir, target);
    }
    return Canonical(joined, out, size, depth + 1);
  }
  /* not there yet: the canonical parent, then the last component */
  char copy[PATH_MAX];
  if (snprintf(copy, sizeof copy, "%s", path) >= (int)sizeof copy) return ENAMETOOLONG;
  size_t n = strlen(copy);
  while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
  char *slash = strrchr(copy, '/');
  const char *last = slash ? slash + 1 : copy;
  int err;
  if (!slash) err = Canonical(".", out, size, depth + 1);
  else if (slash == copy) err = Canonical("/", out, size, depth + 1);
  else {
    *slash = '\0';
    err = Canonical(copy, out, size, depth + 1);
  }
  if (err) return err;
  if (last[0] == '\0' || strcmp(last, ".") == 0) return 0;
  return AppendComponent(out, size, last);
}

int FsdpPathCanonical(const char *path, char *out, size_t size)
{
  if (!path || !path[0]) return ENOENT;
  return Canonical(path, out, size, 0);
}
