/* safetensors.c: reader and writer of Hugging Face safetensors files
 * (safetensors.h; [Note: safetensors validation], [Note: streaming
 * conversion], [Note: safetensors sets]). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

/* The reference implementation refuses headers above 100 MB: a header
 * length beyond that is a corrupt or hostile file, not a model. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* elements converted per write (fixed buffer of the writer) */
#define ST_CHUNK ((int64_t)1 << 16)

struct FsdpStFile_ {
  char *path;
  int fd;
  int64_t size;
  int n;
  FsdpStTensor *t; /* offset order */
};

static const struct {
  const char *name;
  int size; /* bytes per element; 0: a dtype we know but do not read */
  FsdpDtype dt;
} kDtypes[] = {
    {"F32", 4, FSDP_DTYPE_FP32}, {"BF16", 2, FSDP_DTYPE_BF16}, {"F16", 2, FSDP_DTYPE_FP16},
    {"F64", 0, 0}, {"I64", 0, 0}, {"I32", 0, 0}, {"I16", 0, 0}, {"I8", 0, 0}, {"U64", 0, 0},
    {"U32", 0, 0}, {"U16", 0, 0}, {"U8", 0, 0}, {"BOOL", 0, 0}, {"F8_E4M3", 0, 0},
    {"F8_E5M2", 0, 0},
};
#define NDTYPES ((int)(sizeof kDtypes / sizeof kDtypes[0]))

const char *FsdpStDtypeName(FsdpDtype dt)
{
  return dt == FSDP_DTYPE_FP32 ? "F32" : dt == FSDP_DTYPE_BF16 ? "BF16" : "F16";
}

const char *FsdpStPath(FsdpStFile f) { return f->path; }
int FsdpStNumTensors(FsdpStFile f) { return f->n; }
const FsdpStTensor *FsdpStTensorAt(FsdpStFile f, int i) { return &f->t[i]; }

const FsdpStTensor *FsdpStFind(FsdpStFile f, const char *name)
{
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
  return NULL;
}

int FsdpStClose(FsdpStFile *f)
{
  if (!*f) return FSDP_SUCCESS;
  if ((*f)->fd >= 0) close((*f)->fd);
  free((*f)->path);
  free((*f)->t);
  free(*f);
  *f = NULL;
  return FSDP_SUCCESS;
}

/* pread all of it; 0 or errno (EIO for a short read: end of file) */
static int ReadAt(int fd, void *buf, size_t bytes, int64_t off)
{
  char *p = buf;
  while (bytes > 0) {
    ssize_t r = pread(fd, p, bytes, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return EIO;
    p += r;
    bytes -= (size_t)r;
    off += r;
  }
  return 0;
}

/* A non-negative JSON integer, else -1. */
static int64_t JsonCount(const json_t *v)
{
  if (!json_is_integer(v)) return -1;
  json_int_t i = json_integer_value(v);
  return i < 0 ? -1 : (int64_t)i;
}

static int CmpOffset(const void *a, const void *b)
{
  const FsdpStTensor *x = a, *y = b;
  return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

/* One tensor entry of the header into *t (offsets relative to the data). */
static int ParseTensor(const char *path, const char *name, json_t *v, FsdpStTensor *t)
{
  if (strlen(name) >= sizeof t->name)
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: tensor name %.60s... is longer than %d bytes",
               path, name, FSDP_ST_NAME_MAX - 1);
  snprintf(t->name, sizeof t->name, "%s", name);
  if (!json_is_object(v))
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: tensor %s: header entry is not an object",
               path, name);
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
         *off = json_object_get(v, "data_offsets");
  if (!json_is_string(dt))
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: tensor %s has no dtype string", path, name);
  int k = 0;
  while (k < NDTYPES && strcmp(kDtypes[k].name, json_string_value(dt)) != 0) k++;
  if (k == NDTYPES)
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: tensor %s has unknown dtype \"%s\"", path, name,
               json_string_value(dt));
  if (kDtypes[k].size == 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "safetensors file %s: tensor %s has dtype %s; fsdp reads F32, BF16 and F16", path,
               name, kDtypes[k].name);
  t->dtype = kDtypes[k].dt;
  if (!json_is_array(sh) || json_array_size(sh) > FSDP_ST_MAX_NDIM)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "safetensors file %s: tensor %s: shape is not an array of at most %d dimensions",
               path, name, FSDP_ST_MAX_NDIM);
  t->ndim = (int)json_array_size(sh);
  t->numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    int64_t n = JsonCount(json_array_get(sh, (size_t)d));
    if (n < 0)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "safetensors file %s: tensor %s: dimension %d of its shape is not a "
                 "non-negative integer",
                 path, name, d);
    if (n > 0 && t->numel > INT64_MAX / 8 / n)
      FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: tensor %s: shape overflows", path, name);
    t->shape[d] = n;
    t->numel *= n;
  }
  int64_t b = json_is_array(off) && json_array_size(off) == 2 ? JsonCount(json_array_get(off, 0)) : -1;
  int64_t e = b >= 0 ? JsonCount(json_array_get(off, 1)) : -1;
  if (b < 0 || e < 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "safetensors file %s: tensor %s: data_offsets is not two non-negative integers",
               path, name);
  if (e < b)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "safetensors file %s: tensor %s: data_offsets [%" PRId64 ", %" PRId64 "] end before they begin",
               path, name, b, e);
  t->offset = b;
  t->bytes = e - b;
  int64_t want = t->numel * kDtypes[k].size;
  if (t->bytes != want)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "safetensors file %s: tensor %s: data_offsets [%" PRId64 ", %" PRId64 "] hold %" PRId64
               " bytes but its shape and dtype %s need %" PRId64,
               path, name, b, e, t->bytes, kDtypes[k].name, want);
  return FSDP_SUCCESS;
}

/* Parse and validate the header of an open file into f. */
static int ParseHeader(FsdpStFile f)
{
  const char *path = f->path;
  uint8_t lenb[8];
  if (f->size < 8 || ReadAt(f->fd, lenb, 8, 0) != 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "safetensors file %s is %" PRId64 " bytes: shorter than the 8-byte header length",
               path, f->size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | lenb[i];
  if (n > ST_MAX_HEADER || n > (uint64_t)(f->size - 8))
    FSDP_ERROR(FSDP_ERR_USAGE,
               "safetensors file %s: header length %" PRIu64 " runs past the end of the file (%" PRId64
               " bytes) or above the 100 MB limit: truncated or not a safetensors file",
               path, n, f->size);
  char *text = malloc(n + 1);
  FSDP_CHECK_ALLOC(text, n + 1);
  if (ReadAt(f->fd, text, n, 8) != 0) {
    free(text);
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: cannot read its header", path);
  }
  json_error_t je;
  json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!root)
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: header is not valid JSON: %s (byte %d)", path,
               je.text, je.position);
  int err = FSDP_SUCCESS;
  if (!json_is_object(root)) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "safetensors file %s: header is not a JSON object", path);
    goto done;
  }
  size_t cap = json_object_size(root);
  f->t = calloc(cap + 1, sizeof *f->t);
  if (!f->t) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "__metadata__") == 0) {
      const char *mk;
      json_t *mv;
      int ok = json_is_object(v);
      json_object_foreach(v, mk, mv) if (!json_is_string(mv)) ok = 0;
      if (!ok) {
        err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                             "safetensors file %s: __metadata__ is not an object of strings", path);
        goto done;
      }
      continue;
    }
    err = ParseTensor(path, key, v, &f->t[f->n]);
    if (err) goto done;
    f->n++;
  }
  qsort(f->t, (size_t)f->n, sizeof *f->t, CmpOffset);
  int64_t data = 8 + (int64_t)n, at = 0;
  for (int i = 0; i < f->n; i++) {
    FsdpStTensor *t = &f->t[i];
    if (t->offset != at) {
      err = FsdpErrorRaise(
          __FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
          "safetensors file %s: tensor %s: data_offsets begin at %" PRId64 " but %s ends at %" PRId64
          " (%s)",
          path, t->name, t->offset, i ? f->t[i - 1].name : "the header", at,
          t->offset < at ? "overlapping tensors" : "a gap between tensors");
      goto done;
    }
    at += t->bytes;
    t->offset += data;
  }
  if (data + at != f->size) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "safetensors file %s is %" PRId64 " bytes but its header places %s at %" PRId64
                         "..%" PRId64 ": %s",
                         path, f->size, f->n ? f->t[f->n - 1].name : "the end of the data",
                         f->n ? f->t[f->n - 1].offset : data, data + at,
                         data + at > f->size ? "truncated" : "trailing bytes after the last tensor");
    goto done;
  }
done:
  json_decref(root);
  return err;
}

int FsdpStOpen(const char *path, FsdpStFile *out)
{
  *out = NULL;
  if (!FsdpHostIsLittleEndian())
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors files are little-endian and this host is not: unsupported");
  FsdpStFile f = calloc(1, sizeof *f);
  FSDP_CHECK_ALLOC(f, sizeof *f);
  f->fd = -1;
  f->path = strdup(path);
  int err = FSDP_SUCCESS;
  struct stat st;
  if (!f->path) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
  } else if ((f->fd = open(path, O_RDONLY)) < 0 || fstat(f->fd, &st) != 0) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "cannot open safetensors file %s: %s", path, strerror(errno));
  } else {
    f->size = (int64_t)st.st_size;
    err = ParseHeader(f);
  }
  if (err) {
    FsdpStClose(&f);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  *out = f;
  return FSDP_SUCCESS;
}

int FsdpStRead(FsdpStFile f, const FsdpStTensor *t, int64_t start, int64_t count, float *out)
{
  if (start < 0 || count < 0 || start + count > t->numel)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "reading elements %" PRId64 "..%" PRId64 " of %s (%" PRId64 ")",
               start, start + count, t->name, t->numel);
  size_t es = FsdpDtypeSize(t->dtype);
  /* narrow types land in the upper half of out and widen forward in
   * place: element i is read (from half-word count + i) before float i
   * overwrites half-words 2i and 2i+1 <= count + i */
  uint16_t *half = (uint16_t *)out + (t->dtype == FSDP_DTYPE_FP32 ? 0 : count);
  int e = ReadAt(f->fd, t->dtype == FSDP_DTYPE_FP32 ? (void *)out : (void *)half,
                 (size_t)count * es, t->offset + start * (int64_t)es);
  if (e)
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: reading tensor %s failed: %s", f->path, t->name,
               e == EIO ? "short read (the file was truncated since it was opened)" : strerror(e));
  if (t->dtype == FSDP_DTYPE_BF16)
    for (int64_t i = 0; i < count; i++) out[i] = FsdpBf16ToFloat(half[i]);
  else if (t->dtype == FSDP_DTYPE_FP16)
    for (int64_t i = 0; i < count; i++) out[i] = FsdpFp16ToFloat(half[i]);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* sets                                                                */

struct FsdpStSet_ {
  int nfiles;
  FsdpStFile *files;
};

int FsdpStSetClose(FsdpStSet *s)
{
  if (!*s) return FSDP_SUCCESS;
  for (int i = 0; i < (*s)->nfiles; i++) FsdpStClose(&(*s)->files[i]);
  free((*s)->files);
  free(*s);
  *s = NULL;
  return FSDP_SUCCESS;
}

int FsdpStSetNumFiles(FsdpStSet s) { return s->nfiles; }

int FsdpStSetNumTensors(FsdpStSet s)
{
  int n = 0;
  for (int i = 0; i < s->nfiles; i++) n += s->files[i]->n;
  return n;
}

void FsdpStSetTensorAt(FsdpStSet s, int i, FsdpStFile *f, const FsdpStTensor **t)
{
  *f = NULL;
  *t = NULL;
  for (int k = 0; k < s->nfiles; k++) {
    if (i < s->files[k]->n) {
      *f = s->files[k];
      *t = &s->files[k]->t[i];
      return;
    }
    i -= s->files[k]->n;
  }
}

void FsdpStSetFind(FsdpStSet s, const char *name, FsdpStFile *f, const FsdpStTensor **t)
{
  *f = NULL;
  *t = NULL;
  for (int k = 0; k < s->nfiles && !*t; k++)
    if ((*t = FsdpStFind(s->files[k], name))) *f = s->files[k];
}

int FsdpStSetDtype(FsdpStSet s)
{
  int dt = -1;
  for (int k = 0; k < s->nfiles; k++)
    for (int i = 0; i < s->files[k]->n; i++) {
      if (dt >= 0 && dt != (int)s->files[k]->t[i].dtype) return -1;
      dt = (int)s->files[k]->t[i].dtype;
    }
  return dt;
}

static int AddFile(FsdpStSet s, const char *dir, const char *name)
{
  char path[4200];
  if (strchr(name, '/') || strcmp(name, "..") == 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s/model.safetensors.index.json names shard \"%s\", which is not a "
                               "file name in that folder", dir, name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (int k = 0; k < s->nfiles; k++)
    if (strcmp(s->files[k]->path, path) == 0) return FSDP_SUCCESS;
  FsdpStFile *nf = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof *nf);
  FSDP_CHECK_ALLOC(nf, (size_t)(s->nfiles + 1) * sizeof *nf);
  s->files = nf;
  FSDP_CALL(FsdpStOpen(path, &s->files[s->nfiles]));
  s->nfiles++;
  return FSDP_SUCCESS;
}

/* The index's weight_map against the files it names. */
static int OpenIndexed(FsdpStSet s, const char *dir, const char *ipath)
{
  json_error_t je;
  json_t *root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s is not valid JSON: %s (line %d)", ipath, je.text, je.line);
  json_t *map = json_object_get(root, "weight_map");
  int err = FSDP_SUCCESS;
  const char *key;
  json_t *v;
  if (!json_is_object(map) || json_object_size(map) == 0) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "%s has no weight_map object naming the shard of each tensor", ipath);
    goto done;
  }
  json_object_foreach(map, key, v) {
    if (!json_is_string(v)) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                           "%s: weight_map entry of tensor %s is not a file name", ipath, key);
      goto done;
    }
    if ((err = AddFile(s, dir, json_string_value(v)))) goto done;
  }
  json_object_foreach(map, key, v) {
    FsdpStFile f;
    const FsdpStTensor *t;
    FsdpStSetFind(s, key, &f, &t);
    char want[4200];
    snprintf(want, sizeof want, "%s/%s", dir, json_string_value(v));
    if (!t || strcmp(f->path, want) != 0) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                           "%s places tensor %s in %s, which does not hold it", ipath, key, want);
      goto done;
    }
  }
  for (int k = 0; k < s->nfiles; k++)
    for (int i = 0; i < s->files[k]->n; i++) {
      const char *name = s->files[k]->t[i].name;
      json_t *where = json_object_get(map, name);
      char want[4200] = "";
      if (where) snprintf(want, sizeof want, "%s/%s", dir, json_string_value(where));
      if (strcmp(want, s->files[k]->path) != 0) {
        err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                             "safetensors file %s: tensor %s is %s %s", s->files[k]->path, name,
                             where ? "also in" : "not in the weight_map of", where ? want : ipath);
        goto done;
      }
    }
done:
  json_decref(root);
  return err;
}

int FsdpStSetOpen(const char *dir, FsdpStSet *out)
{
  *out = NULL;
  FsdpStSet s = calloc(1, sizeof *s);
  FSDP_CHECK_ALLOC(s, sizeof *s);
  char one[4200], index[4200];
  snprintf(one, sizeof one, "%s/model.safetensors", dir);
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
  int err;
  if (access(one, F_OK) == 0) err = AddFile(s, dir, "model.safetensors");
  else if (access(index, F_OK) == 0) err = OpenIndexed(s, dir, index);
  else
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "%s holds neither model.safetensors nor model.safetensors.index.json "
                         "(a Hugging Face model folder saved with safetensors)",
                         dir);
  if (err) {
    FsdpStSetClose(&s);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  *out = s;
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* writer                                                              */

struct FsdpStWriter_ {
  char *path;
  FILE *fp;
  FsdpDtype dt;
  int64_t total, written; /* elements */
  uint16_t buf[ST_CHUNK];
};

void FsdpStWriterAbort(FsdpStWriter *w)
{
  if (!*w) return;
  if ((*w)->fp) fclose((*w)->fp);
  free((*w)->path);
  free(*w);
  *w = NULL;
}

int FsdpStWriterCreate(const char *path, FsdpDtype dt, int n, const FsdpStDecl *decl,
                       const char *const *metadata, FsdpStWriter *out)
{
  *out = NULL;
  if (dt != FSDP_DTYPE_FP32 && dt != FSDP_DTYPE_BF16)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "safetensors writer: dtype %d (F32 or BF16 only)", (int)dt);
  if (!FsdpHostIsLittleEndian())
    FSDP_ERROR(FSDP_ERR_USAGE, "safetensors files are little-endian and this host is not: unsupported");
  FsdpStWriter w = calloc(1, sizeof *w);
  FSDP_CHECK_ALLOC(w, sizeof *w);
  w->dt = dt;
  w->path = strdup(path);
  int err = FSDP_SUCCESS;
  char *text = NULL;
  json_t *root = json_object();
  int64_t at = 0;
  size_t es = FsdpDtypeSize(dt);
  if (!w->path || !root) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
    goto done;
  }
  if (metadata) {
    json_t *m = json_object();
    for (int k = 0; metadata[k] && metadata[k + 1]; k += 2)
      json_object_set_new(m, metadata[k], json_string(metadata[k + 1]));
    json_object_set_new(root, "__metadata__", m);
  }
  for (int i = 0; i < n; i++) {
    json_t *t = json_object(), *sh = json_array();
    int64_t numel = 1;
    for (int d = 0; d < decl[i].ndim; d++) {
      json_array_append_new(sh, json_integer(decl[i].shape[d]));
      numel *= decl[i].shape[d];
    }
    json_object_set_new(t, "dtype", json_string(FsdpStDtypeName(dt)));
    json_object_set_new(t, "shape", sh);
    json_object_set_new(t, "data_offsets", json_pack("[II]", (json_int_t)at,
                                                      (json_int_t)(at + numel * (int64_t)es)));
    if (json_object_get(root, decl[i].name)) {
      json_decref(t);
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_INTERNAL,
                           "safetensors writer: tensor %s declared twice", decl[i].name);
      goto done;
    }
    json_object_set_new(root, decl[i].name, t);
    at += numel * (int64_t)es;
    w->total += numel;
  }
  /* declaration order in the header (JSON_PRESERVE_ORDER), padded with
   * spaces to a multiple of 8 so the data is aligned, as the Python
   * writer does */
  text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!text) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
    goto done;
  }
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  uint8_t lenb[8];
  for (int k = 0; k < 8; k++) lenb[k] = (uint8_t)((uint64_t)padded >> (8 * k));
  w->fp = fopen(path, "wb");
  if (!w->fp || fwrite(lenb, 1, 8, w->fp) != 8 || fwrite(text, 1, len, w->fp) != len ||
      fwrite("        ", 1, padded - len, w->fp) != padded - len) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "writing %s failed: %s", path,
                         strerror(errno));
    goto done;
  }
done:
  free(text);
  json_decref(root);
  if (err) {
    FsdpStWriterAbort(&w);
    return err;
  }
  *out = w;
  return FSDP_SUCCESS;
}

int FsdpStWriterPut(FsdpStWriter w, const float *data, int64_t count)
{
  if (count < 0 || w->written + count > w->total)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "safetensors writer %s: %" PRId64 " elements past the declared %" PRId64,
               w->path, w->written + count, w->total);
  int ok = 1;
  if (w->dt == FSDP_DTYPE_FP32) {
    ok = count == 0 || fwrite(data, sizeof(float), (size_t)count, w->fp) == (size_t)count;
  } else {
    for (int64_t i = 0; i < count && ok; i += ST_CHUNK) {
      int64_t k = count - i < ST_CHUNK ? count - i : ST_CHUNK;
      for (int64_t j = 0; j < k; j++) w->buf[j] = FsdpFloatToBf16(data[i + j]);
      ok = fwrite(w->buf, sizeof(uint16_t), (size_t)k, w->fp) == (size_t)k;
    }
  }
  if (!ok) FSDP_ERROR(FSDP_ERR_IO, "writing %s failed: %s", w->path, strerror(errno));
  w->written += count;
  return FSDP_SUCCESS;
}

int FsdpStWriterClose(FsdpStWriter *pw)
{
  FsdpStWriter w = *pw;
  if (!w) return FSDP_SUCCESS;
  int err = FSDP_SUCCESS;
  if (w->written != w->total)
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_INTERNAL,
                         "safetensors writer %s: %" PRId64 " of %" PRId64 " elements written", w->path,
                         w->written, w->total);
  else if (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0)
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "writing %s failed: %s", w->path,
                         strerror(errno));
  int c = fclose(w->fp);
  w->fp = NULL;
  if (c != 0 && !err)
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "closing %s failed: %s", w->path,
                         strerror(errno));
  FsdpStWriterAbort(pw);
  return err;
}
