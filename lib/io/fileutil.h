/* fileutil.h: publishing a file whole -- the one copy of "temporary file,
 * fsync, rename" that the checkpoint save (ckpt.c) and fsdp-ckpt's
 * converters share.
 *
 * [Note: publishing a file] A file that readers find by its name must
 * never be seen half written, nor lost by a crash right after it was
 * announced.  So the writer fills a temporary file next to it
 * (FsdpTempFileCreate: same directory, hence same file system), and
 * FsdpPublish fsyncs the data, gives the file its name in one atomic step
 * (rename(2), or link(2) where an existing file must never be replaced),
 * and fsyncs the directory so that the name itself is durable.
 */
#ifndef FSDP_FILEUTIL_H
#define FSDP_FILEUTIL_H

#include <stddef.h>

/* The step of FsdpPublish that failed. */
typedef enum {
  FSDP_PUBLISH_OK = 0,
  FSDP_PUBLISH_SYNC_FILE, /* fsync of the temporary file */
  FSDP_PUBLISH_NAME,      /* rename / link (EEXIST: the name exists, kept) */
  FSDP_PUBLISH_SYNC_DIR   /* fsync of the directory: the file is published */
} FsdpPublishStep;

/* Not collective.  Create "<path>.<tag>-XXXXXX" (mkstemp(3)) into tmp,
 * empty and closed, with the permissions any new file gets (the umask's,
 * not mkstemp's 0600: it becomes the published file).  0, or an errno
 * (ENAMETOOLONG when the name does not fit in size). */
int FsdpTempFileCreate(const char *path, const char *tag, char *tmp, size_t size);

/* Not collective.  The directory part of path ("." when it has none). */
void FsdpDirName(const char *path, char *dir, size_t size);

/* Not collective.  Publish the complete file tmp as path ([Note:
 * publishing a file]).  replace: rename(2), an existing path is replaced.
 * Otherwise link(2), then tmp is removed: an existing path is never
 * replaced, not even by a race (EEXIST); where the file system has no
 * hard links, tmp is renamed after a fresh check that path does not exist.
 * Returns 0, or an errno with *failed (may be NULL) the failed step; tmp
 * is then left for the caller to remove (after FSDP_PUBLISH_SYNC_DIR it
 * is gone: the file is published, only its durability is in doubt). */
int FsdpPublish(const char *tmp, const char *path, int replace, FsdpPublishStep *failed);

/* Not collective.  mkdir -p dir (mode 0777 less the umask).  0, or -1
 * with errno (ENOTDIR: dir or a parent exists and is not a directory). */
int FsdpMakeDirs(const char *dir);

/* Not collective.  The absolute path path names once written, whether or
 * not it exists yet: realpath(3) of its longest existing prefix, symbolic
 * links (dangling ones too) followed, the rest appended with "." and ".."
 * resolved.  Two spellings of one file ("run.h5", "./x/../run.h5", a link
 * to it) give the same string.  0, or an errno (ENAMETOOLONG, ELOOP). */
int FsdpPathCanonical(const char *path, char *out, size_t size);

#endif
