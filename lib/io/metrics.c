/* metrics.c: the HDF5 run file (see metrics.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fallocate(2): [Note: room to close the run file] */
#endif
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "io/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "io/h5util.h"
#include "base/mem.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

#define MSG_SIZE 1024
#define COL_CHUNK 256
#define MEM_CHUNK_ROWS 64
#define EVENT_CHUNK 16
#define KIND_LEN 16
#define DETAIL_LEN 256

/* Standard columns, in FsdpMetricsRow order (plus world_size). */
enum {
  COL_STEP, COL_WORLD, COL_LOSS, COL_LR, COL_GRAD_NORM, COL_STEP_TIME, COL_TOKENS,
  COL_INTRA, COL_INTER, NSTD
};
static const char *const kStdNames[NSTD] = {
    "step", "world_size", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s",
    "comm_intra_bytes", "comm_inter_bytes"};
static const int kStdIsInt[NSTD] = {1, 1, 0, 0, 0, 0, 0, 1, 1};

/* [Note: validation rows] Validation losses have rows of their own, one
 * per validation, in two 1-D datasets of /metrics of equal length that
 * are not per-step columns: val_step (int64) and val_loss (float64).  They
 * are created with the file (empty while a run does not validate), since
 * SWMR forbids new objects once rows stream; a file appended to that
 * lacks them (written before validation existed) gets them before its
 * first new row. */
static const char *const kValNames[2] = {"val_step", "val_loss"};
static int IsValName(const char *name)
{
  return strcmp(name, kValNames[0]) == 0 || strcmp(name, kValNames[1]) == 0;
}


enum { MEM_ALLOCATED, MEM_PEAK, MEM_SHARD, MEM_UNSHARDED, MEM_RSS, NMEM };
static const char *const kMemNames[NMEM] = {"allocated", "peak", "shard_bytes", "unsharded_bytes",
                                            "rss"};

typedef struct {
  char name[64];
  int is_int;
  hid_t dset; /* rank 0 */
  double v;
  int64_t iv;
} Column;

typedef struct {
  int64_t step;
  char kind[KIND_LEN];
  double seconds;
  char detail[DETAIL_LEN];
} EventRecord;

struct FsdpMetrics_ {
  MPI_Comm comm;
  int rank, W;
  char path[4096];
  hid_t file, gmetrics, gmemory; /* rank 0 */
  hid_t mem[NMEM], events, event_type;
  hid_t val[2];  /* rank 0: /metrics/val_step, /metrics/val_loss */
  int64_t nval;  /* rank 0: validation rows */
  Column *cols;
  int ncols;
  size_t cap;
  int64_t rows, nevents, mem_width;
  int swmr;    /* rank 0 entered SWMR mode */
  int started; /* a row or event was logged: the layout is fixed */
  int truncate;       /* appending after a resume: keep rows up to keep_step */
  int64_t keep_step;  /* ([Note: run file after a resume]) */
  int64_t dropped;    /* rank 0: rows it dropped */
  int broken;         /* rank 0: a write failed ([Note: run file on a full disk]) */
  int fail_errno;     /* its errno (0: none) */
  int no_room;        /* rank 0: the file system has no fallocate: no reserve */
  char fail_what[600]; /* HDF5's account of it */
};

int FsdpMetricsOptionsFromDb(FsdpOpts db, const char **path)
{
  FSDP_CALL(FsdpOptsGetString(db, "Output", "metrics",
                              "HDF5 run file: per-step metrics and per-rank memory (h5py, "
                              "fsdp-report); an existing file is refused unless resuming, which "
                              "appends after dropping the rows of later steps",
                              NULL, path));
  if (*path && !(*path)[0]) *path = NULL;
  return FSDP_SUCCESS;
}

void FsdpMetricsSampleMemory(FsdpMetricsMemory *mem)
{
  mem->allocated = (int64_t)FsdpMemCurrentTotal();
  mem->peak = (int64_t)FsdpMemPeakTotal();
  mem->shard_bytes = (int64_t)(FsdpMemCurrent(FSDP_MEM_PARAMS) + FsdpMemCurrent(FSDP_MEM_GRADS) +
                               FsdpMemCurrent(FSDP_MEM_OPTIM));
  mem->unsharded_bytes = (int64_t)(FsdpMemCurrent(FSDP_MEM_GATHER) + FsdpMemCurrent(FSDP_MEM_REDUCE));
  mem->rss = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    long long size = 0, resident = 0;
    if (fscanf(f, "%lld %lld", &size, &resident) == 2)
      mem->rss = (int64_t)resident * (int64_t)sysconf(_SC_PAGESIZE);
    fclose(f);
  }
  if (mem->rss < 0) mem->rss = (int64_t)FsdpMemPeakRSS();
}

/* ------------------------------------------------------------------ */
/* rank 0: datasets                                                    */

static hid_t CreateColumnDataset(hid_t g, const char *name, int is_int, int64_t rows)
{
  hsize_t dims = (hsize_t)rows, maxdims = H5S_UNLIMITED, chunk = COL_CHUNK;
  hid_t space = H5Screate_simple(1, &dims, &maxdims);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hid_t d = -1;
  if (space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, 1, &chunk) >= 0) {
    /* rows a column did not exist for (an appended run) read as NaN / -1 */
    double nan = NAN;
    int64_t minus1 = -1;
    herr_t r = is_int ? H5Pset_fill_value(dcpl, H5T_NATIVE_INT64, &minus1)
                      : H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan);
    if (r >= 0)
      d = H5Dcreate2(g, name, is_int ? H5T_STD_I64LE : H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl,
                     H5P_DEFAULT);
  }
  if (dcpl >= 0) H5Pclose(dcpl);
  if (space >= 0) H5Sclose(space);
  return d;
}

/* Open or create /metrics/<name> on rank 0 (length m->rows). */
static int OpenColumn(FsdpMetrics m, Column *c)
{
  if (H5Lexists(m->gmetrics, c->name, H5P_DEFAULT) > 0) {
    FSDP_CALL_HDF5(c->dset = H5Dopen2(m->gmetrics, c->name, H5P_DEFAULT));
    hsize_t n = (hsize_t)m->rows;
    FSDP_CALL_HDF5(H5Dset_extent(c->dset, &n));
  } else {
    FSDP_CALL_HDF5(c->dset = CreateColumnDataset(m->gmetrics, c->name, c->is_int, m->rows));
  }
  return FSDP_SUCCESS;
}

static int PushColumn(FsdpMetrics m, const char *name, int is_int, int *col)
{
  if (strlen(name) == 0 || strlen(name) >= sizeof m->cols[0].name || strchr(name, '/'))
    FSDP_ERROR(FSDP_ERR_USAGE, "run file column name \"%s\" is empty, too long or has a '/'", name);
  if (FsdpArrayReserve(&m->cols, &m->cap, (size_t)m->ncols + 1, sizeof *m->cols))
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory adding run file column \"%s\"", name);
  Column *c = &m->cols[m->ncols];
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name);
  c->is_int = is_int;
  c->dset = -1;
  c->v = NAN;
  c->iv = -1;
  if (m->rank == 0 && m->file >= 0) FSDP_CALL(OpenColumn(m, c));
  if (col) *col = m->ncols;
  m->ncols++;
  return FSDP_SUCCESS;
}

static hid_t EventType(void)
{
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(EventRecord));
  hid_t k = H5Tcopy(H5T_C_S1), d = H5Tcopy(H5T_C_S1);
  herr_t r = (t < 0 || k < 0 || d < 0) ? -1 : 0;
  if (r >= 0) r = H5Tset_size(k, KIND_LEN);
  if (r >= 0) r = H5Tset_size(d, DETAIL_LEN);
  if (r >= 0) r = H5Tinsert(t, "step", HOFFSET(EventRecord, step), H5T_NATIVE_INT64);
  if (r >= 0) r = H5Tinsert(t, "kind", HOFFSET(EventRecord, kind), k);
  if (r >= 0) r = H5Tinsert(t, "seconds", HOFFSET(EventRecord, seconds), H5T_NATIVE_DOUBLE);
  if (r >= 0) r = H5Tinsert(t, "detail", HOFFSET(EventRecord, detail), d);
  if (k >= 0) H5Tclose(k);
  if (d >= 0) H5Tclose(d);
  if (r < 0 && t >= 0) {
    H5Tclose(t);
    t = -1;
  }
  return t;
}

/* The run file's own root attributes (metrics.h): a model attribute must
 * not take one of these names. */
static const char *const kRootNames[] = {
    "format_version", "program", "start_time", "options", "topology", "world_size", "hostnames",
    "model_name", "model_family", "param_count", "tokens_per_step"};

static int WriteRootAttributes(FsdpMetrics m, const FsdpMetricsInfo *info, const char *hosts,
                               int host_len)
{
  hid_t f = m->file;
  char now[40];
  FsdpIsoTime(now, sizeof now);
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteInt64(f, "format_version", FSDP_METRICS_VERSION));
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteString(f, "program", "fsdp " PACKAGE_VERSION));
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteString(f, "start_time", now));
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteString(f, "options", info && info->options ? info->options : ""));
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteString(f, "topology", info && info->topology ? info->topology : ""));
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteInt64(f, "world_size", m->W));
  const FsdpModelDesc *d = info ? info->model : NULL;
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteString(f, "model_name", d ? d->preset : ""));
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteString(f, "model_family", d ? d->family : ""));
  for (int k = 0; d && k < d->nattrs; k++) {
    const FsdpModelAttr *a = &d->attr[k];
    for (size_t r = 0; r < sizeof kRootNames / sizeof kRootNames[0]; r++)
      if (strcmp(a->name, kRootNames[r]) == 0)
        FSDP_ERROR(FSDP_ERR_INTERNAL, "model attribute %s would overwrite the run file's root "
                   "attribute of that name (metrics.h)", a->name);
    if (a->type == FSDP_MODEL_ATTR_INT) FSDP_CALL_HDF5(FsdpHdf5AttrWriteInt64(f, a->name, a->i));
    else if (a->type == FSDP_MODEL_ATTR_REAL) FSDP_CALL_HDF5(FsdpHdf5AttrWriteDouble(f, a->name, a->r));
    else FSDP_CALL_HDF5(FsdpHdf5AttrWriteString(f, a->name, a->s));
  }
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteInt64(f, "param_count", info ? info->param_count : 0));
  FSDP_CALL_HDF5(FsdpHdf5AttrWriteInt64(f, "tokens_per_step", info ? info->tokens_per_step : 0));
  /* hostnames: [W] fixed-length strings */
  int err = FSDP_SUCCESS;
  hsize_t n = (hsize_t)m->W;
  hid_t t = -1, s = -1, a = -1;
  FSDP_HDF5_GOTO(t = H5Tcopy(H5T_C_S1));
  FSDP_HDF5_GOTO(H5Tset_size(t, (size_t)host_len));
  FSDP_HDF5_GOTO(s = H5Screate_simple(1, &n, NULL));
  FSDP_HDF5_GOTO(a = H5Acreate2(f, "hostnames", t, s, H5P_DEFAULT, H5P_DEFAULT));
  FSDP_HDF5_GOTO(H5Awrite(a, t, hosts));
done:
  FsdpHdf5Close(&a);
  FsdpHdf5Close(&s);
  FsdpHdf5Close(&t);
  return err;
}

/* Rank 0: *rows becomes the number of leading rows of the 1-D int64
 * dataset d (*rows long) up to the first one above step ([Note: run file
 * after a resume]). */
static int RowsUpTo(hid_t d, int64_t step, int64_t *rows)
{
  if (*rows <= 0) return FSDP_SUCCESS;
  int64_t *v = malloc((size_t)*rows * sizeof *v);
  FSDP_CHECK_ALLOC(v, (size_t)*rows * sizeof *v);
  if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
    free(v);
    FSDP_CALL_HDF5(-1);
  }
  int64_t k = 0;
  while (k < *rows && v[k] <= step) k++;
  free(v);
  *rows = k;
  return FSDP_SUCCESS;
}

/* Rank 0: open or create the validation datasets. */
static int OpenValidation(FsdpMetrics m)
{
  for (int k = 0; k < 2; k++) {
    if (H5Lexists(m->gmetrics, kValNames[k], H5P_DEFAULT) > 0) {
      FSDP_CALL_HDF5(m->val[k] = H5Dopen2(m->gmetrics, kValNames[k], H5P_DEFAULT));
      hid_t sp = -1;
      hsize_t n = 0;
      FSDP_CALL_HDF5(sp = H5Dget_space(m->val[k]));
      herr_t r = H5Sget_simple_extent_dims(sp, &n, NULL);
      H5Sclose(sp);
      FSDP_CALL_HDF5(r);
      if (k == 0) {
        m->nval = (int64_t)n; /* both have the same length (written together) */
        if (m->truncate) FSDP_CALL(RowsUpTo(m->val[0], m->keep_step, &m->nval));
      }
      if (m->truncate) {
        hsize_t keep = (hsize_t)m->nval;
        FSDP_CALL_HDF5(H5Dset_extent(m->val[k], &keep));
      }
    } else {
      FSDP_CALL_HDF5(m->val[k] = CreateColumnDataset(m->gmetrics, kValNames[k], k == 0, 0));
    }
  }
  return FSDP_SUCCESS;
}

/* Rank 0: create the datasets of a new file. */
static int CreateLayout(FsdpMetrics m)
{
  FSDP_CALL_HDF5(m->gmetrics = H5Gcreate2(m->file, "/metrics", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  FSDP_CALL_HDF5(m->gmemory = H5Gcreate2(m->file, "/memory", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  int err = FSDP_SUCCESS;
  hid_t space = -1, dcpl = -1;
  hsize_t dims[2] = {0, (hsize_t)m->W}, maxdims[2] = {H5S_UNLIMITED, H5S_UNLIMITED};
  hsize_t chunk[2] = {MEM_CHUNK_ROWS, (hsize_t)m->W};
  int64_t minus1 = -1;
  FSDP_HDF5_GOTO(space = H5Screate_simple(2, dims, maxdims));
  FSDP_HDF5_GOTO(dcpl = H5Pcreate(H5P_DATASET_CREATE));
  FSDP_HDF5_GOTO(H5Pset_chunk(dcpl, 2, chunk));
  FSDP_HDF5_GOTO(H5Pset_fill_value(dcpl, H5T_NATIVE_INT64, &minus1));
  for (int k = 0; k < NMEM; k++)
    FSDP_HDF5_GOTO(m->mem[k] = H5Dcreate2(m->gmemory, kMemNames[k], H5T_STD_I64LE, space,
                                          H5P_DEFAULT, dcpl, H5P_DEFAULT));
  FsdpHdf5Close(&space);
  FsdpHdf5Close(&dcpl);
  hsize_t e0 = 0, emax = H5S_UNLIMITED, echunk = EVENT_CHUNK;
  FSDP_HDF5_GOTO(space = H5Screate_simple(1, &e0, &emax));
  FSDP_HDF5_GOTO(dcpl = H5Pcreate(H5P_DATASET_CREATE));
  FSDP_HDF5_GOTO(H5Pset_chunk(dcpl, 1, &echunk));
  FSDP_HDF5_GOTO(m->events = H5Dcreate2(m->file, "/events", m->event_type, space, H5P_DEFAULT,
                                        dcpl, H5P_DEFAULT));
  m->mem_width = m->W;
  err = OpenValidation(m);
done:
  FsdpHdf5Close(&space);
  FsdpHdf5Close(&dcpl);
  return err;
}

/* Rank 0: open the datasets of an existing run file for appending. 0, or
 * FSDP_ERR_USAGE with msg when it is not a run file. */
static int OpenLayout(FsdpMetrics m, char *msg, size_t size)
{
  int64_t v = 0;
  if (FsdpHdf5AttrReadInt64(m->file, "format_version", &v) < 0 || v < 1 || v > FSDP_METRICS_VERSION ||
      H5Lexists(m->file, "/metrics", H5P_DEFAULT) <= 0 ||
      H5Lexists(m->file, "/memory", H5P_DEFAULT) <= 0 ||
      H5Lexists(m->file, "/events", H5P_DEFAULT) <= 0) {
    FsdpMsgf(msg, size, "%s is not an fsdp run file of a version this build appends to (format_version "
         "1, /metrics, /memory, /events)", m->path);
    return FSDP_ERR_USAGE;
  }
  FSDP_CALL_HDF5(m->gmetrics = H5Gopen2(m->file, "/metrics", H5P_DEFAULT));
  FSDP_CALL_HDF5(m->gmemory = H5Gopen2(m->file, "/memory", H5P_DEFAULT));
  if (H5Lexists(m->gmetrics, "step", H5P_DEFAULT) <= 0) {
    FsdpMsgf(msg, size, "run file %s has no /metrics/step", m->path);
    return FSDP_ERR_USAGE;
  }
  hid_t d = -1, s = -1;
  hsize_t n = 0, dims[2];
  FSDP_CALL_HDF5(d = H5Dopen2(m->gmetrics, "step", H5P_DEFAULT));
  FSDP_CALL_HDF5(s = H5Dget_space(d));
  FSDP_CALL_HDF5(H5Sget_simple_extent_dims(s, &n, NULL));
  H5Sclose(s);
  m->rows = (int64_t)n;
  /* [Note: run file after a resume]: every dataset below takes this length */
  int terr = m->truncate ? RowsUpTo(d, m->keep_step, &m->rows) : FSDP_SUCCESS;
  H5Dclose(d);
  FSDP_CALL(terr);
  m->dropped = (int64_t)n - m->rows;
  for (int k = 0; k < NMEM; k++) {
    if (H5Lexists(m->gmemory, kMemNames[k], H5P_DEFAULT) <= 0) {
      FsdpMsgf(msg, size, "run file %s has no /memory/%s", m->path, kMemNames[k]);
      return FSDP_ERR_USAGE;
    }
    FSDP_CALL_HDF5(m->mem[k] = H5Dopen2(m->gmemory, kMemNames[k], H5P_DEFAULT));
    FSDP_CALL_HDF5(s = H5Dget_space(m->mem[k]));
    int nd = H5Sget_simple_extent_ndims(s);
    herr_t r = nd == 2 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
    H5Sclose(s);
    if (r < 0) {
      FsdpMsgf(msg, size, "run file %s: /memory/%s is not 2-D", m->path, kMemNames[k]);
      return FSDP_ERR_USAGE;
    }
    m->mem_width = (int64_t)dims[1] > m->W ? (int64_t)dims[1] : m->W;
    dims[0] = (hsize_t)m->rows;
    dims[1] = (hsize_t)m->mem_width;
    FSDP_CALL_HDF5(H5Dset_extent(m->mem[k], dims));
  }
  FSDP_CALL(OpenValidation(m));
  FSDP_CALL_HDF5(m->events = H5Dopen2(m->file, "/events", H5P_DEFAULT));
  FSDP_CALL_HDF5(s = H5Dget_space(m->events));
  FSDP_CALL_HDF5(H5Sget_simple_extent_dims(s, &n, NULL));
  H5Sclose(s);
  m->nevents = (int64_t)n;
  return FSDP_SUCCESS;
}

static hid_t LatestFapl(int clear_flags)
{
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return -1;
  /* SWMR needs the latest file format */
  if (H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0) {
    H5Pclose(fapl);
    return -1;
  }
#if H5_VERSION_GE(1, 10, 7)
  /* lock where the file system supports it, go on where it does not (some
   * parallel file systems refuse flock) */
  H5Pset_file_locking(fapl, 1, 1);
#endif
  if (clear_flags && H5Pexist(fapl, "clear_status_flags") > 0) {
    /* a killed writer leaves the SWMR-write mark in the superblock; this is
     * the property h5clear -s sets (HDF5 1.10 has no public call for it) */
    hbool_t clear = 1;
    H5Pset(fapl, "clear_status_flags", &clear);
  }
  return fapl;
}

/* [Note: room to close the run file] HDF5 cannot be trusted after a
 * write of the run file failed for want of space: its close fails too,
 * and the library crashed in its own clean-up at MPI_Finalize in our
 * runs.  So rank 0 keeps room past the end of the file, reserved with
 * fallocate(FALLOC_FL_KEEP_SIZE) (the file's size does not change, its
 * blocks are allocated), renewed before every row: while a renewal
 * succeeds, the next row and the close find their blocks.  A renewal the
 * file system refuses (ENOSPC, EDQUOT) stops the job before anything is
 * written, with the file intact, and the close then uses the room still
 * reserved.  The room: 64 KiB (a new chunk of every column, metadata,
 * the close's flush) plus two /memory chunks of every dataset (they grow
 * with W).
 * Where the file system has no fallocate the rows go on unreserved (a
 * failed write still gives the message of [Note: run file on a full
 * disk]). 0, or the errno that stops the run. */
static int ReserveRoom(FsdpMetrics m)
{
  if (m->no_room || m->file < 0) return 0;
  int *fd = NULL;
  struct stat st;
  if (H5Fget_vfd_handle(m->file, H5P_DEFAULT, (void **)&fd) < 0 || !fd || fstat(*fd, &st) != 0) {
    H5Eclear2(H5E_DEFAULT);
    m->no_room = 1;
    return 0;
  }
  off_t room = 64 * 1024 + 2 * NMEM * (off_t)MEM_CHUNK_ROWS * (off_t)m->W * 8;
  int e = fallocate(*fd, FALLOC_FL_KEEP_SIZE, st.st_size, room) == 0 ? 0 : errno;
  if (e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) {
    m->no_room = 1;
    return 0;
  }
  return e;
}

/* Why an HDF5 call on the file failed: the errno it left, else HDF5's
 * account of its error stack (take it right after the call). */
static void Reason(int err_no, char *why, size_t size)
{
  if (err_no) {
    snprintf(why, size, "%s", strerror(err_no));
    return;
  }
  FsdpHdf5ErrorSummary(why, size);
  if (!why[0]) snprintf(why, size, "cause not reported");
}

/* Rank 0: create or open the file.  Usage problems return FSDP_ERR_USAGE
 * with msg (not printed); HDF5 failures are raised. */
static int OpenRoot(FsdpMetrics m, const FsdpMetricsInfo *info, int append, const char *hosts,
                    int host_len, char *msg, size_t size)
{
  int exists = access(m->path, F_OK) == 0;
  if (exists && !append) {
    FsdpMsgf(msg, size, "run file %s already exists: refusing to overwrite it (remove it, choose "
         "another -metrics, or resume the run, which appends to it)", m->path);
    return FSDP_ERR_USAGE;
  }
  hid_t fapl = LatestFapl(exists);
  FSDP_CALL_HDF5(fapl);
  m->event_type = EventType();
  if (m->event_type < 0) {
    H5Pclose(fapl);
    FSDP_CALL_HDF5(m->event_type);
  }
  if (exists) {
    if (H5Fis_hdf5(m->path) <= 0) {
      H5Pclose(fapl);
      FsdpMsgf(msg, size, "run file %s exists and is not an HDF5 file: refusing to append to it",
           m->path);
      return FSDP_ERR_USAGE;
    }
    errno = 0;
    m->file = H5Fopen(m->path, H5F_ACC_RDWR, fapl);
    if (m->file < 0) {
      char why[600];
      Reason(errno, why, sizeof why); /* before the next HDF5 call clears the stack */
      H5Pclose(fapl);
      FsdpMsgf(msg, size, "cannot open run file %s to append to it: %s", m->path, why);
      return FSDP_ERR_USAGE;
    }
    H5Pclose(fapl);
    int e = ReserveRoom(m);
    if (e) {
      FsdpMsgf(msg, size, "cannot append to run file %s: no room past its end: %s", m->path,
               strerror(e));
      return FSDP_ERR_USAGE;
    }
    return OpenLayout(m, msg, size);
  }
  errno = 0;
  m->file = H5Fcreate(m->path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  if (m->file < 0) {
    char why[600];
    int e = errno;
    Reason(e, why, sizeof why); /* before the next HDF5 call clears the stack */
    H5Pclose(fapl);
    FsdpMsgf(msg, size, "cannot create run file %s: %s", m->path, why);
    if (e != EEXIST) unlink(m->path); /* what a failed create left is ours */
    return FSDP_ERR_USAGE;
  }
  H5Pclose(fapl);
  int e = ReserveRoom(m);
  if (e) {
    FsdpMsgf(msg, size, "cannot create run file %s: no room past its end: %s", m->path,
             strerror(e));
    FsdpHdf5Close(&m->file);
    unlink(m->path);
    return FSDP_ERR_USAGE;
  }
  FSDP_CALL(WriteRootAttributes(m, info, hosts, host_len));
  FSDP_CALL(CreateLayout(m));
  return FSDP_SUCCESS;
}

static void CloseHandles(FsdpMetrics m)
{
  for (int i = 0; i < m->ncols; i++) FsdpHdf5Close(&m->cols[i].dset);
  for (int k = 0; k < NMEM; k++) FsdpHdf5Close(&m->mem[k]);
  FsdpHdf5Close(&m->events);
  FsdpHdf5Close(&m->event_type);
  FsdpHdf5Close(&m->val[0]);
  FsdpHdf5Close(&m->val[1]);
  FsdpHdf5Close(&m->gmetrics);
  FsdpHdf5Close(&m->gmemory);
}

static void FreeMetrics(FsdpMetrics m)
{
  if (!m) return;
  CloseHandles(m);
  FsdpHdf5Close(&m->file);
  free(m->cols);
  free(m);
}

static int OpenFileColumns(FsdpMetrics m);

int FsdpMetricsCreate(MPI_Comm comm, const char *path, const FsdpMetricsInfo *info, int append,
                      FsdpMetrics *out)
{
  *out = NULL;
  FsdpHdf5Init();
  FsdpMetrics m = calloc(1, sizeof *m);
  FSDP_CHECK_ALLOC(m, sizeof *m);
  m->comm = comm;
  m->file = m->gmetrics = m->gmemory = m->events = m->event_type = -1;
  for (int k = 0; k < NMEM; k++) m->mem[k] = -1;
  m->val[0] = m->val[1] = -1;
  int err = MPI_Comm_rank(comm, &m->rank);
  if (err == MPI_SUCCESS) err = MPI_Comm_size(comm, &m->W);
  if (err != MPI_SUCCESS) {
    free(m);
    FSDP_CALL_MPI(err);
  }
  if (strlen(path) >= sizeof m->path) {
    free(m);
    FSDP_ERROR(FSDP_ERR_USAGE, "run file name %s is too long", path);
  }
  snprintf(m->path, sizeof m->path, "%s", path);
  if (append && info && info->resume_step) {
    m->truncate = 1;
    m->keep_step = *info->resume_step;
  }
  /* hostnames of every rank, for the root attribute */
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  memset(host, 0, sizeof host);
  MPI_Get_processor_name(host, &len);
  int host_len = 64;
  char *hosts = m->rank == 0 ? calloc((size_t)m->W, (size_t)host_len) : NULL;
  if (m->rank == 0 && !hosts) {
    size_t bytes = (size_t)m->W * (size_t)host_len;
    free(m);
    FSDP_CHECK_ALLOC(hosts, bytes);
  }
  host[host_len - 1] = '\0';
  err = MPI_Gather(host, host_len, MPI_CHAR, hosts, host_len, MPI_CHAR, 0, comm);
  if (err != MPI_SUCCESS) {
    free(hosts);
    free(m);
    FSDP_CALL_MPI(err);
  }
  struct { int code; int64_t rows, nevents, dropped; char msg[MSG_SIZE]; } r;
  memset(&r, 0, sizeof r);
  if (m->rank == 0) {
    r.code = OpenRoot(m, info, append, hosts, host_len, r.msg, sizeof r.msg);
    if (r.code && r.code != FSDP_ERR_USAGE) FsdpMsgf(r.msg, sizeof r.msg, "run file %s: %s", path,
                                                 FsdpErrorLastMessage());
    r.rows = m->rows;
    r.nevents = m->nevents;
    r.dropped = m->dropped;
  }
  free(hosts);
  err = MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, 0, comm);
  if (err != MPI_SUCCESS) r.code = FSDP_ERR_MPI;
  m->rows = r.rows;
  m->nevents = r.nevents;
  for (int i = 0; i < NSTD && !r.code; i++) r.code = PushColumn(m, kStdNames[i], kStdIsInt[i], NULL);
  /* appending: the file's other columns stay as long as the rest (NaN
   * where this run sets nothing); only rank 0 holds them */
  if (!r.code && m->rank == 0 && append) r.code = OpenFileColumns(m);
  if (r.code) {
    FreeMetrics(m);
    if (err != MPI_SUCCESS) FSDP_CALL_MPI(err);
    FSDP_ERROR(r.code, "%s", r.msg);
  }
  *out = m;
  if (append && m->rows + r.dropped > 0) {
    char detail[DETAIL_LEN];
    if (m->truncate)
      snprintf(detail, sizeof detail, "resumed at step %lld, %lld later rows dropped; %s",
               (long long)m->keep_step, (long long)r.dropped,
               info && info->topology ? info->topology : "");
    else
      snprintf(detail, sizeof detail, "%s", info && info->topology ? info->topology : "");
    FSDP_CALL(FsdpMetricsEvent(m, -1, "append", detail, 0.0));
  }
  return FSDP_SUCCESS;
}

static herr_t CollectName(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
  (void)g;
  (void)info;
  FsdpMetrics m = ctx;
  if (FsdpMetricsColumn(m, name) >= 0 || IsValName(name)) return 0; /* [Note: validation rows] */
  hid_t d = H5Dopen2(m->gmetrics, name, H5P_DEFAULT);
  if (d < 0) return 0; /* not a dataset: not ours, leave it */
  hid_t t = H5Dget_type(d);
  int is_int = t >= 0 && H5Tget_class(t) == H5T_INTEGER;
  if (t >= 0) H5Tclose(t);
  H5Dclose(d);
  return PushColumn(m, name, is_int, NULL) ? -1 : 0;
}

/* Rank 0, appending: take every dataset of /metrics as a column. */
static int OpenFileColumns(FsdpMetrics m)
{
  if (m->gmetrics < 0) return FSDP_SUCCESS;
  FSDP_CALL_HDF5(H5Literate(m->gmetrics, H5_INDEX_NAME, H5_ITER_INC, NULL, CollectName, m));
  return FSDP_SUCCESS;
}

int FsdpMetricsAddColumn(FsdpMetrics m, const char *name, int *col)
{
  int c = FsdpMetricsColumn(m, name);
  if (c >= 0) {
    if (col) *col = c;
    return FSDP_SUCCESS;
  }
  if (m->started)
    FSDP_ERROR(FSDP_ERR_STATE, "run file %s: column %s added after the first row (columns are "
               "fixed once rows stream)", m->path, name);
  FSDP_CALL(PushColumn(m, name, 0, col));
  return FSDP_SUCCESS;
}

int FsdpMetricsColumn(FsdpMetrics m, const char *name)
{
  for (int i = 0; i < m->ncols; i++)
    if (strcmp(m->cols[i].name, name) == 0) return i;
  return -1;
}

int FsdpMetricsSet(FsdpMetrics m, int col, double value)
{
  if (col < NSTD || col >= m->ncols)
    FSDP_ERROR(FSDP_ERR_USAGE, "run file %s: no added column %d (standard columns are set "
               "through FsdpMetricsRow)", m->path, col);
  m->cols[col].v = value;
  return FSDP_SUCCESS;
}

int64_t FsdpMetricsNumRows(FsdpMetrics m) { return m->rows; }

/* Rank 0: the first failed call of a write keeps its errno and HDF5's
 * account, taken before the cleanup's calls clear the stack ([Note: run
 * file on a full disk]). */
static void NoteFailure(FsdpMetrics m)
{
  int e = errno;
  if (m->broken) return;
  m->broken = 1;
  m->fail_errno = e;
  FsdpHdf5ErrorSummary(m->fail_what, sizeof m->fail_what);
}

/* Run one HDF5 call of a write; on failure note it and go to done. */
#define TRY_HDF5(m, expr)                                                  \
  do {                                                                     \
    errno = 0;                                                             \
    if ((expr) < 0) {                                                      \
      NoteFailure(m);                                                      \
      goto done;                                                           \
    }                                                                      \
  } while (0)

/* Rank 0, after a failed write: the one message every rank raises, and
 * its code (FSDP_ERR_USAGE when the file system refused: errno set). */
static int FailMessage(FsdpMetrics m, const char *what, char *msg, size_t size)
{
  char why[700], clear[4200] = "";
  if (m->fail_errno)
    snprintf(why, sizeof why, "%s", strerror(m->fail_errno));
  else
    snprintf(why, sizeof why, "%s", m->fail_what[0] ? m->fail_what : "cause not reported");
  /* a failed write leaves the SWMR mark; a refused reservation closes cleanly */
  if (m->broken) snprintf(clear, sizeof clear, " (h5clear -s %s lets any HDF5 reader open it)", m->path);
  FsdpMsgf(msg, size, "run file %s: %s failed: %s. The file keeps the %lld rows written "
           "before%s; free space and continue with -resume auto", m->path, what, why,
           (long long)m->rows, clear);
  return m->fail_errno ? FSDP_ERR_USAGE : FSDP_ERR_HDF5;
}

/* Rank 0, before a write: renew the room ([Note: room to close the run
 * file]); -1 (noted as the write's failure, the file intact) when the
 * file system refuses it. */
static herr_t Stop(FsdpMetrics m)
{
  int e = ReserveRoom(m);
  if (!e) return 0;
  m->fail_errno = e;
  m->fail_what[0] = '\0';
  return -1;
}

/* Rank 0: enter SWMR mode before the first row or event. */
static herr_t StartSwmr(FsdpMetrics m)
{
  herr_t r = -1;
  if (m->swmr) return 0;
  TRY_HDF5(m, H5Fstart_swmr_write(m->file));
  m->swmr = 1;
  r = 0;
done:
  return r;
}

/* Rank 0: write one value at row `row` of a 1-D dataset. */
static herr_t WriteCell(FsdpMetrics m, hid_t d, int64_t row, hid_t mtype, const void *v)
{
  herr_t r = -1;
  hsize_t n = (hsize_t)row + 1, start = (hsize_t)row, one = 1;
  hid_t fs = -1, ms = -1;
  TRY_HDF5(m, H5Dset_extent(d, &n));
  TRY_HDF5(m, fs = H5Dget_space(d));
  TRY_HDF5(m, H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL));
  TRY_HDF5(m, ms = H5Screate_simple(1, &one, NULL));
  TRY_HDF5(m, H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, v));
  r = 0;
done:
  FsdpHdf5Close(&ms);
  FsdpHdf5Close(&fs);
  return r;
}

/* Rank 0: row `row` (W values) of a /memory dataset. */
static herr_t WriteMemoryRow(FsdpMetrics m, hid_t d, const int64_t *vals)
{
  herr_t r = -1;
  hsize_t dims[2] = {(hsize_t)m->rows + 1, (hsize_t)m->mem_width};
  hsize_t start[2] = {(hsize_t)m->rows, 0}, count[2] = {1, (hsize_t)m->W};
  hid_t fs = -1, ms = -1;
  TRY_HDF5(m, H5Dset_extent(d, dims));
  TRY_HDF5(m, fs = H5Dget_space(d));
  TRY_HDF5(m, H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL));
  TRY_HDF5(m, ms = H5Screate_simple(2, count, NULL));
  TRY_HDF5(m, H5Dwrite(d, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, vals));
  r = 0;
done:
  FsdpHdf5Close(&ms);
  FsdpHdf5Close(&fs);
  return r;
}

/* Rank 0: the row, every rank's memory (all, W x NMEM; vals: W scratch),
 * then the flush of [Note: run file streaming]. */
static herr_t WriteRow(FsdpMetrics m, const int64_t *all, int64_t *vals)
{
  herr_t r = -1;
  if (Stop(m) < 0 || StartSwmr(m) < 0) return -1;
  for (int i = 0; i < m->ncols; i++) {
    Column *c = &m->cols[i];
    if (WriteCell(m, c->dset, m->rows, c->is_int ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE,
                  c->is_int ? (const void *)&c->iv : (const void *)&c->v) < 0)
      return -1;
  }
  for (int k = 0; k < NMEM; k++) {
    for (int q = 0; q < m->W; q++) vals[q] = all[(size_t)q * NMEM + k];
    if (WriteMemoryRow(m, m->mem[k], vals) < 0) return -1;
  }
  TRY_HDF5(m, H5Fflush(m->file, H5F_SCOPE_GLOBAL));
  r = 0;
done:
  return r;
}

int FsdpMetricsAppendRow(FsdpMetrics m, const FsdpMetricsRow *row, const FsdpMetricsMemory *mem)
{
  FsdpMetricsMemory local;
  if (!mem) {
    FsdpMetricsSampleMemory(&local);
    mem = &local;
  }
  int64_t mine[NMEM] = {mem->allocated, mem->peak, mem->shard_bytes, mem->unsharded_bytes, mem->rss};
  int64_t *all = NULL;
  if (m->rank == 0) {
    all = malloc((size_t)m->W * (NMEM + 1) * sizeof *all);
    FSDP_CHECK_ALLOC(all, (size_t)m->W * (NMEM + 1) * sizeof *all);
  }
  int merr = MPI_Gather(mine, NMEM, MPI_INT64_T, all, NMEM, MPI_INT64_T, 0, m->comm);
  struct { int code; char msg[MSG_SIZE]; } v;
  memset(&v, 0, sizeof v);
  if (m->rank == 0 && merr == MPI_SUCCESS) {
    Column *c = m->cols;
    c[COL_STEP].iv = row->step;
    c[COL_WORLD].iv = m->W;
    c[COL_LOSS].v = row->loss;
    c[COL_LR].v = row->lr;
    c[COL_GRAD_NORM].v = row->grad_norm;
    c[COL_STEP_TIME].v = row->step_time_s;
    c[COL_TOKENS].v = row->tokens_per_s;
    c[COL_INTRA].iv = row->comm_intra_bytes;
    c[COL_INTER].iv = row->comm_inter_bytes;
    if (WriteRow(m, all, all + (size_t)m->W * NMEM) < 0) {
      char what[64];
      snprintf(what, sizeof what, "writing row %lld (step %lld)", (long long)m->rows,
               (long long)row->step);
      v.code = FailMessage(m, what, v.msg, sizeof v.msg);
    }
  }
  free(all);
  FSDP_CALL_MPI(merr);
  /* agree on rank 0's outcome so no rank runs on into a collective alone */
  FSDP_CALL_MPI(MPI_Bcast(&v, (int)sizeof v, MPI_BYTE, 0, m->comm));
  if (v.code) FSDP_ERROR(v.code, "%s", v.msg);
  m->rows++;
  m->started = 1;
  for (int i = NSTD; i < m->ncols; i++) m->cols[i].v = NAN;
  return FSDP_SUCCESS;
}

int FsdpMetricsAppendValidation(FsdpMetrics m, int64_t step, double loss)
{
  struct { int code; char msg[MSG_SIZE]; } v;
  memset(&v, 0, sizeof v);
  if (m->rank == 0) {
    herr_t r = Stop(m);
    if (r >= 0) r = StartSwmr(m);
    if (r >= 0) r = WriteCell(m, m->val[0], m->nval, H5T_NATIVE_INT64, &step);
    if (r >= 0) r = WriteCell(m, m->val[1], m->nval, H5T_NATIVE_DOUBLE, &loss);
    /* [Note: run file streaming] */
    if (r >= 0) {
      errno = 0;
      r = H5Fflush(m->file, H5F_SCOPE_GLOBAL);
      if (r < 0) NoteFailure(m);
    }
    if (r < 0) {
      char what[80];
      snprintf(what, sizeof what, "writing validation row %lld (step %lld)", (long long)m->nval,
               (long long)step);
      v.code = FailMessage(m, what, v.msg, sizeof v.msg);
    }
  }
  FSDP_CALL_MPI(MPI_Bcast(&v, (int)sizeof v, MPI_BYTE, 0, m->comm));
  if (v.code) FSDP_ERROR(v.code, "%s", v.msg);
  m->nval++;
  m->started = 1;
  return FSDP_SUCCESS;
}

int FsdpMetricsEvent(FsdpMetrics m, int64_t step, const char *kind, const char *detail,
                     double seconds)
{
  m->started = 1;
  if (m->rank != 0) {
    m->nevents++;
    return FSDP_SUCCESS;
  }
  EventRecord e;
  memset(&e, 0, sizeof e);
  e.step = step;
  snprintf(e.kind, sizeof e.kind, "%s", kind ? kind : "");
  snprintf(e.detail, sizeof e.detail, "%s", detail ? detail : "");
  e.seconds = seconds;
  herr_t r = Stop(m);
  if (r >= 0) r = StartSwmr(m);
  if (r >= 0) r = WriteCell(m, m->events, m->nevents, m->event_type, &e);
  if (r >= 0) {
    errno = 0;
    r = H5Fflush(m->file, H5F_SCOPE_GLOBAL);
    if (r < 0) NoteFailure(m);
  }
  if (r < 0) {
    /* rank 0 alone: not a usage error, so the job ends (metrics.h) */
    char msg[MSG_SIZE];
    FailMessage(m, "writing an event", msg, sizeof msg);
    FSDP_ERROR(FSDP_ERR_IO, "%s", msg);
  }
  m->nevents++;
  return FSDP_SUCCESS;
}

int FsdpMetricsDestroy(FsdpMetrics *pm)
{
  if (!pm || !*pm) return FSDP_SUCCESS;
  FsdpMetrics m = *pm;
  int err = FSDP_SUCCESS;
  if (m->rank == 0) {
    CloseHandles(m);
    /* after a failed write the close fails too: the message was given */
    if (m->file >= 0 && !m->broken && H5Fclose(m->file) < 0)
      err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "H5Fclose(run file)");
    m->file = -1;
  }
  MPI_Comm comm = m->comm;
  FreeMetrics(m);
  *pm = NULL;
  FSDP_CALL_MPI(MPI_Bcast(&err, 1, MPI_INT, 0, comm));
  if (err) FSDP_ERROR(err, "closing the run file failed");
  return FSDP_SUCCESS;
}
