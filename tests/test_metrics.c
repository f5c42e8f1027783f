/* test_metrics: the HDF5 run file (lib/metrics), read back with the HDF5 C
 * API (not through the library).
 *
 *   test_metrics                  rows, per-rank memory [rows, W],
 *                                 attributes, events, extra columns,
 *                                 refusal to overwrite, append (also at a
 *                                 smaller W), files that are not run files
 *   test_metrics crash FILE       log 5 rows, then rank 0 kills itself
 *                                 (SIGKILL): the job fails on purpose
 *   test_metrics after-crash FILE the killed job's file: its 5 rows read
 *                                 back (SWMR read), append mode reopens it
 *   test_metrics write FILE [N]   write a finished run file with N rows of
 *                                 known values (for tests/test_report.sh)
 */
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/h5util.h"
#include "libfsdp.h"
#include "io/metrics.h"
#include "testutil.h"

static int rank, W;

/* Values of row i of the synthetic run (also what test_report.sh expects). */
static void known_row(int i, FsdpMetricsRow *r)
{
  r->step = 10 * (int64_t)(i + 1);
  r->loss = 5.0 - 0.1 * i;
  r->lr = 1e-3;
  r->grad_norm = 1.0 + i;
  r->step_time_s = 0.040 + 0.001 * (i % 5);
  r->tokens_per_s = 8192.0 / r->step_time_s;
  r->comm_intra_bytes = 1000000;
  r->comm_inter_bytes = 250000;
}

static void known_mem(int i, int r, FsdpMetricsMemory *m)
{
  m->allocated = (int64_t)(r + 1) * 1048576 + i;
  m->peak = (int64_t)(r + 1) * 10 * 1048576 + (int64_t)i * 4096;
  m->shard_bytes = 1000 * (int64_t)(r + 1);
  m->unsharded_bytes = 2000 + i;
  m->rss = 3000000 + 7 * (int64_t)r;
}

static int write_rows(FsdpMetrics m, int first, int n)
{
  for (int i = first; i < first + n; i++) {
    FsdpMetricsRow row;
    FsdpMetricsMemory mem;
    known_row(i, &row);
    known_mem(i, rank, &mem);
    int err = FsdpMetricsAppendRow(m, &row, &mem);
    if (err) return err;
  }
  return 0;
}

static void remove_file(const char *path)
{
  if (rank == 0) unlink(path);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- readers (HDF5 C API, rank 0) ----------------------------------- */

static int64_t extent(hid_t f, const char *name, int64_t *second)
{
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) return -1;
  hid_t s = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  int nd = H5Sget_simple_extent_dims(s, dims, NULL);
  H5Sclose(s);
  H5Dclose(d);
  if (second) *second = nd == 2 ? (int64_t)dims[1] : -1;
  return (int64_t)dims[0];
}

/* Read a whole dataset converted to mtype into buf (sized by the caller). */
static int read_all(hid_t f, const char *name, hid_t mtype, void *buf)
{
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) return -1;
  herr_t r = H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  H5Dclose(d);
  return r < 0 ? -1 : 0;
}

static int attr_string(hid_t f, const char *name, char *buf, size_t size)
{
  return FsdpHdf5AttrReadString(f, name, buf, size) < 0 ? -1 : 0;
}

/* Check rows [0, n) of the standard columns and of /memory (width w, the
 * first `ranks` columns written, the rest -1) against the known values. */
static void check_rows(hid_t f, int n, int width, int ranks_in_rows, int first_world_rows)
{
  int64_t second = 0;
  CHECK(extent(f, "/metrics/step", NULL) == n, "/metrics/step has %lld rows, expected %d",
        (long long)extent(f, "/metrics/step", NULL), n);
  const char *cols[] = {"loss", "lr", "grad_norm", "step_time_s", "tokens_per_s",
                        "comm_intra_bytes", "comm_inter_bytes", "world_size"};
  for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
    char p[64];
    snprintf(p, sizeof p, "/metrics/%s", cols[c]);
    CHECK(extent(f, p, NULL) == n, "%s has %lld rows, expected %d", p, (long long)extent(f, p, NULL), n);
  }
  int64_t *step = calloc((size_t)n + 1, sizeof *step), *intra = calloc((size_t)n + 1, sizeof *intra);
  int64_t *world = calloc((size_t)n + 1, sizeof *world);
  double *loss = calloc((size_t)n + 1, sizeof *loss), *tps = calloc((size_t)n + 1, sizeof *tps);
  CHECK(read_all(f, "/metrics/step", H5T_NATIVE_INT64, step) == 0, "reading /metrics/step");
  CHECK(read_all(f, "/metrics/loss", H5T_NATIVE_DOUBLE, loss) == 0, "reading /metrics/loss");
  CHECK(read_all(f, "/metrics/tokens_per_s", H5T_NATIVE_DOUBLE, tps) == 0, "reading tokens_per_s");
  CHECK(read_all(f, "/metrics/comm_intra_bytes", H5T_NATIVE_INT64, intra) == 0, "reading intra");
  CHECK(read_all(f, "/metrics/world_size", H5T_NATIVE_INT64, world) == 0, "reading world_size");
  int bad = 0;
  for (int i = 0; i < n; i++) {
    FsdpMetricsRow r;
    known_row(i, &r);
    int want_world = i < first_world_rows ? W : ranks_in_rows;
    if (step[i] != r.step || loss[i] != r.loss || tps[i] != r.tokens_per_s ||
        intra[i] != r.comm_intra_bytes || world[i] != want_world) {
      if (bad++ < 3)
        CHECK(0, "row %d: step %lld loss %.17g tok/s %.17g intra %lld world %lld, expected "
              "%lld %.17g %.17g %lld %d", i, (long long)step[i], loss[i], tps[i],
              (long long)intra[i], (long long)world[i], (long long)r.step, r.loss,
              r.tokens_per_s, (long long)r.comm_intra_bytes, want_world);
    }
  }
  CHECK(bad == 0, "%d wrong rows in /metrics", bad);
  free(step);
  free(intra);
  free(world);
  free(loss);
  free(tps);
  /* /memory: [n, width] */
  const char *mem[] = {"/memory/allocated", "/memory/peak", "/memory/shard_bytes",
                       "/memory/unsharded_bytes", "/memory/rss"};
  int64_t *v = calloc((size_t)n * width + 1, sizeof *v);
  for (int k = 0; k < 5; k++) {
    int64_t rows = extent(f, mem[k], &second);
    CHECK(rows == n && second == width, "%s has shape [%lld, %lld], expected [%d, %d]", mem[k],
          (long long)rows, (long long)second, n, width);
    if (rows != n || second != width) continue;
    CHECK(read_all(f, mem[k], H5T_NATIVE_INT64, v) == 0, "reading %s", mem[k]);
    int wrong = 0;
    for (int i = 0; i < n; i++)
      for (int r = 0; r < width; r++) {
        int written = i < first_world_rows ? r < W : r < ranks_in_rows;
        FsdpMetricsMemory km;
        known_mem(i, r, &km);
        int64_t want[5] = {km.allocated, km.peak, km.shard_bytes, km.unsharded_bytes, km.rss};
        int64_t w = written ? want[k] : -1;
        if (v[(size_t)i * width + r] != w && wrong++ < 3)
          CHECK(0, "%s[%d, %d] = %lld, expected %lld", mem[k], i, r,
                (long long)v[(size_t)i * width + r], (long long)w);
      }
    CHECK(wrong == 0, "%s: %d wrong entries", mem[k], wrong);
  }
  free(v);
}

typedef struct {
  int64_t step;
  char kind[16];
  double seconds;
  char detail[256];
} Ev;

static int read_events(hid_t f, Ev *ev, int max)
{
  int64_t n = extent(f, "/events", NULL);
  if (n < 0 || n > max) return -1;
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(Ev));
  hid_t k = H5Tcopy(H5T_C_S1), d = H5Tcopy(H5T_C_S1);
  H5Tset_size(k, 16);
  H5Tset_size(d, 256);
  H5Tinsert(t, "step", HOFFSET(Ev, step), H5T_NATIVE_INT64);
  H5Tinsert(t, "kind", HOFFSET(Ev, kind), k);
  H5Tinsert(t, "seconds", HOFFSET(Ev, seconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "detail", HOFFSET(Ev, detail), d);
  int r = n ? read_all(f, "/events", t, ev) : 0;
  H5Tclose(k);
  H5Tclose(d);
  H5Tclose(t);
  return r < 0 ? -1 : (int)n;
}

/* ---- the main test --------------------------------------------------- */

static const char kOptions[] = "-model tiny -steps 7 -metrics 'a b.h5'";

static FsdpMetricsInfo info(void)
{
  FsdpMetricsInfo in;
  memset(&in, 0, sizeof in);
  in.options = kOptions;
  in.topology = "W=4 test topology";
  static FsdpModelDesc desc;
  const GptConfig cfg = {2, 16, 2, 50, 8};
  TCALL(GptConfigDescribe(&cfg, "custom", &desc));
  in.model = &desc;
  in.param_count = 12345;
  in.tokens_per_step = 8192;
  return in;
}

static void test_main(void)
{
  char path[256];
  snprintf(path, sizeof path, "test_metrics_np%d.h5", W);
  remove_file(path);
  FsdpMetricsInfo in = info();
  FsdpMetrics m = NULL;
  TCALL(FsdpMetricsCreate(MPI_COMM_WORLD, path, &in, 0, &m));
  int col = -1, again = -2;
  TCALL(FsdpMetricsAddColumn(m, "loss_scale", &col));
  TCALL(FsdpMetricsAddColumn(m, "loss_scale", &again));
  CHECK(col >= 0 && again == col, "re-adding a column gives %d, first %d", again, col);
  CHECK(FsdpMetricsColumn(m, "step") == 0 && FsdpMetricsColumn(m, "nope") == -1,
        "column lookup by name");
  for (int i = 0; i < 7; i++) {
    FsdpMetricsRow row;
    FsdpMetricsMemory mem;
    known_row(i, &row);
    known_mem(i, rank, &mem);
    if (i % 2 == 0) TCALL(FsdpMetricsSet(m, col, 1024.0 * (i + 1)));
    TCALL(FsdpMetricsAppendRow(m, &row, &mem));
    if (i == 2) TCALL(FsdpMetricsEvent(m, row.step, "checkpoint", "ckpt/ckpt_00000030.h5", 0.5));
  }
  CHECK(FsdpMetricsNumRows(m) == 7, "NumRows %lld", (long long)FsdpMetricsNumRows(m));
  CHECK(FsdpMetricsAddColumn(m, "late", NULL) == FSDP_ERR_STATE,
        "adding a column after the first row must be FSDP_ERR_STATE");
  CHECK(FsdpMetricsSet(m, 1, 3.0) == FSDP_ERR_USAGE, "setting a standard column through Set");
  TCALL(FsdpMetricsDestroy(&m));
  CHECK(m == NULL, "close sets the handle to NULL");
  TCALL(FsdpMetricsDestroy(&m)); /* NULL is fine */

  struct stat st0, st1;
  if (rank == 0) stat(path, &st0);
  /* an existing file is never overwritten */
  int err = FsdpMetricsCreate(MPI_COMM_WORLD, path, &in, 0, &m);
  CHECK(err == FSDP_ERR_USAGE && m == NULL, "creating over an existing file: %d", err);
  CHECK(strstr(FsdpErrorLastMessage(), path) && strstr(FsdpErrorLastMessage(), "already exists"),
        "message should name the file and say it exists: %s", FsdpErrorLastMessage());
  if (rank == 0) {
    stat(path, &st1);
    CHECK(st0.st_size == st1.st_size && st0.st_mtime == st1.st_mtime, "refused file was modified");
  }

  if (rank == 0) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0, "a closed run file opens without SWMR flags");
    if (f >= 0) {
      check_rows(f, 7, W, W, 7);
      double ls[8];
      CHECK(read_all(f, "/metrics/loss_scale", H5T_NATIVE_DOUBLE, ls) == 0, "reading loss_scale");
      for (int i = 0; i < 7; i++) {
        int ok = i % 2 == 0 ? ls[i] == 1024.0 * (i + 1) : isnan(ls[i]);
        CHECK(ok, "loss_scale[%d] = %g", i, ls[i]);
      }
      char s[512];
      int64_t v = 0;
      CHECK(attr_string(f, "options", s, sizeof s) == 0 && strcmp(s, kOptions) == 0,
            "options attribute \"%s\"", s);
      CHECK(attr_string(f, "topology", s, sizeof s) == 0 && strcmp(s, "W=4 test topology") == 0,
            "topology attribute \"%s\"", s);
      CHECK(attr_string(f, "start_time", s, sizeof s) == 0 && strlen(s) >= 19 && s[4] == '-' &&
            s[10] == 'T', "start_time attribute \"%s\" is not ISO 8601", s);
      CHECK(FsdpHdf5AttrReadInt64(f, "n_embd", &v) >= 0 && v == 16, "n_embd attribute %lld", (long long)v);
      CHECK(FsdpHdf5AttrReadInt64(f, "world_size", &v) >= 0 && v == W, "world_size %lld", (long long)v);
      CHECK(FsdpHdf5AttrReadInt64(f, "format_version", &v) >= 0 && v == FSDP_METRICS_VERSION,
            "format_version %lld", (long long)v);
      hid_t a = H5Aopen(f, "hostnames", H5P_DEFAULT);
      hid_t sp = a >= 0 ? H5Aget_space(a) : -1;
      CHECK(sp >= 0 && H5Sget_simple_extent_npoints(sp) == W, "hostnames has %lld entries, expected %d",
            sp >= 0 ? (long long)H5Sget_simple_extent_npoints(sp) : -1LL, W);
      if (sp >= 0) H5Sclose(sp);
      if (a >= 0) H5Aclose(a);
      Ev ev[8];
      int ne = read_events(f, ev, 8);
      CHECK(ne == 1, "%d events, expected 1", ne);
      if (ne == 1)
        CHECK(ev[0].step == 30 && strcmp(ev[0].kind, "checkpoint") == 0 && ev[0].seconds == 0.5 &&
              strcmp(ev[0].detail, "ckpt/ckpt_00000030.h5") == 0,
              "event (%lld, %s, %g, %s)", (long long)ev[0].step, ev[0].kind, ev[0].seconds, ev[0].detail);
      H5Fclose(f);
    }
  }

  /* append: a resumed run continues the rows */
  TCALL(FsdpMetricsCreate(MPI_COMM_WORLD, path, &in, 1, &m));
  CHECK(FsdpMetricsNumRows(m) == 7, "append starts at row %lld", (long long)FsdpMetricsNumRows(m));
  TCALL(write_rows(m, 7, 3));
  TCALL(FsdpMetricsDestroy(&m));
  /* append from rank 0 alone (a resumed run at W = 1): /memory keeps its
   * width, the other ranks' entries of the new row are -1 */
  if (rank == 0) {
    FsdpMetrics m1 = NULL;
    TCALL(FsdpMetricsCreate(MPI_COMM_SELF, path, &in, 1, &m1));
    CHECK(FsdpMetricsNumRows(m1) == 10, "second append starts at row %lld",
          (long long)FsdpMetricsNumRows(m1));
    TCALL(write_rows(m1, 10, 1));
    TCALL(FsdpMetricsDestroy(&m1));
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0, "reopening the appended file");
    if (f >= 0) {
      check_rows(f, 11, W, 1, 10);
      Ev ev[8];
      int ne = read_events(f, ev, 8);
      CHECK(ne == 3 && strcmp(ev[1].kind, "append") == 0 && strcmp(ev[2].kind, "append") == 0,
            "%d events after two appends (expected checkpoint, append, append)", ne);
      double ls[11];
      CHECK(read_all(f, "/metrics/loss_scale", H5T_NATIVE_DOUBLE, ls) == 0 && isnan(ls[8]),
            "an appended row without the extra column reads NaN");
      H5Fclose(f);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* files that are not run files are refused even in append mode */
  char other[256];
  snprintf(other, sizeof other, "test_metrics_other_np%d.h5", W);
  if (rank == 0) {
    FILE *t = fopen(other, "w");
    fputs("not hdf5\n", t);
    fclose(t);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  err = FsdpMetricsCreate(MPI_COMM_WORLD, other, &in, 1, &m);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), other),
        "appending to a text file: %d (%s)", err, FsdpErrorLastMessage());
  if (rank == 0) {
    unlink(other);
    hid_t f = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  err = FsdpMetricsCreate(MPI_COMM_WORLD, other, &in, 1, &m);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "not an fsdp run file"),
        "appending to an unrelated HDF5 file: %d (%s)", err, FsdpErrorLastMessage());
  remove_file(other);

  FsdpMetricsMemory mm;
  FsdpMetricsSampleMemory(&mm);
  CHECK(mm.rss > 1000000 && mm.allocated >= 0 && mm.peak >= mm.allocated,
        "sampled memory: rss %lld allocated %lld peak %lld", (long long)mm.rss,
        (long long)mm.allocated, (long long)mm.peak);
  remove_file(path);
}

/* ---- crash / after-crash / write ------------------------------------- */

static int mode_crash(const char *path)
{
  remove_file(path);
  FsdpMetricsInfo in = info();
  FsdpMetrics m = NULL;
  TCALL(FsdpMetricsCreate(MPI_COMM_WORLD, path, &in, 0, &m));
  TCALL(write_rows(m, 0, 5));
  TCALL(FsdpMetricsEvent(m, 50, "checkpoint", "x.h5", 1.5));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    fprintf(stderr, "test_metrics crash: rank 0 kills itself with SIGKILL after 5 rows (expected)\n");
    fflush(stderr);
    raise(SIGKILL);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* the launcher ends the other ranks */
  return 0;
}

static int mode_after_crash(const char *path)
{
  if (rank == 0) {
    /* the killed writer left the SWMR mark: read as an SWMR reader */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
    CHECK(f >= 0, "the killed job's run file %s does not open for SWMR reading", path);
    if (f >= 0) {
      check_rows(f, 5, W, W, 5);
      Ev ev[4];
      CHECK(read_events(f, ev, 4) == 1 && ev[0].step == 50, "the event logged before the kill");
      H5Fclose(f);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  /* a resumed run appends to it */
  FsdpMetricsInfo in = info();
  FsdpMetrics m = NULL;
  TCALL(FsdpMetricsCreate(MPI_COMM_WORLD, path, &in, 1, &m));
  CHECK(FsdpMetricsNumRows(m) == 5, "append after the kill starts at row %lld",
        (long long)FsdpMetricsNumRows(m));
  TCALL(write_rows(m, 5, 2));
  TCALL(FsdpMetricsDestroy(&m));
  if (rank == 0) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0, "after a clean close the file opens normally");
    if (f >= 0) {
      check_rows(f, 7, W, W, 7);
      H5Fclose(f);
    }
  }
  remove_file(path);
  return test_finish("test_metrics after-crash");
}

static int mode_write(const char *path, int n)
{
  remove_file(path);
  FsdpMetricsInfo in = info();
  FsdpMetrics m = NULL;
  TCALL(FsdpMetricsCreate(MPI_COMM_WORLD, path, &in, 0, &m));
  TCALL(write_rows(m, 0, n));
  TCALL(FsdpMetricsEvent(m, 10 * (int64_t)n, "checkpoint", "ckpt/ckpt_last.h5", 0.25));
  TCALL(FsdpMetricsDestroy(&m));
  return 0;
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  int status = 0;
  if (argc >= 3 && strcmp(argv[1], "crash") == 0) {
    status = mode_crash(argv[2]);
  } else if (argc >= 3 && strcmp(argv[1], "after-crash") == 0) {
    status = mode_after_crash(argv[2]);
  } else if (argc >= 3 && strcmp(argv[1], "write") == 0) {
    status = mode_write(argv[2], argc >= 4 ? atoi(argv[3]) : 20);
  } else if (argc == 1) {
    test_main();
    /* every HDF5 file, group, dataset, attribute the library opened is closed */
    ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    CHECK(open_ids == 0, "%lld HDF5 objects left open", (long long)open_ids);
    status = test_finish("test_metrics");
  } else {
    if (rank == 0) fprintf(stderr, "usage: test_metrics [crash|after-crash|write FILE [ROWS]]\n");
    status = 2;
  }
  FsdpFinalize();
  return status;
}
