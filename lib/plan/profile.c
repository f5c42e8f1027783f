/* profile.c: the machine profile's fit and its HDF5 file ([Note: what a
 * profile holds] in profile.h).
 *
 * File layout (one process writes it, serial HDF5):
 *   /                      attributes: kind "fsdp-profile", format_version,
 *                          host, cpu, date, backend, blas_core, model,
 *                          source, world_size, ranks_per_node, nodes,
 *                          threads, mem_available_bytes, gemm_flops_per_s,
 *                          peak_flops_per_s, attention_flops_per_s,
 *                          stream_bytes_per_s, adamw_bytes_per_s
 *   /compute/gemm_name     [ngemm] strings; gemm_N, gemm_C, gemm_OC int64;
 *                          gemm_flops_per_s float64
 *   /compute/stage_batch   [nb] int: the micro-batches the model ran at
 *   /compute/stage_forward_s, stage_backward_s   [nb * nstages] float64
 *                          (the probe's model, one row per micro-batch;
 *                          attributes stage_seq_len, stage_params,
 *                          stage_rounds (0 or absent: timed one
 *                          micro-batch after the other), join_fraction,
 *                          sustained_factor (0 or absent: not measured) on
 *                          /compute; may be empty)
 *   /collectives           attribute concurrent_factor (0 or absent: not
 *                          measured)
 *   /collectives/<level>   attributes size (ranks in the group), peers_intra,
 *                          peers_inter (rank 0's group: members on its node
 *                          and on other nodes)
 *   /collectives/<level>/<kind>   bytes, seconds float64 [n]; attributes
 *                          latency_s, bandwidth_bytes_per_s (0 = latency only)
 */
#include "plan/profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "io/fileutil.h"
#include "io/h5util.h"

const char *const FsdpProfileLevelNames[FSDP_PROFILE_NLEVELS] = {"node", "cross", "world"};

static const char kKind[] = "fsdp-profile";

/* Weighted least squares of t = a + v * s (s = 1/bandwidth), weights w. */
static void FitLine(const FsdpProfileCurve *c, double *a, double *s)
{
  double sw = 0, sv = 0, st = 0, svv = 0, svt = 0;
  for (int i = 0; i < c->n; i++) {
    double t = c->seconds[i], v = c->bytes[i], w = t > 0 ? 1.0 / (t * t) : 0.0;
    sw += w;
    sv += w * v;
    st += w * t;
    svv += w * v * v;
    svt += w * v * t;
  }
  double det = sw * svv - sv * sv;
  if (sw <= 0 || fabs(det) <= 1e-300 * sw * svv) { /* one size, or none */
    *a = sw > 0 ? st / sw : 0;
    *s = 0;
    return;
  }
  *s = (sw * svt - sv * st) / det;
  *a = (st - *s * sv) / sw;
  /* noise can push one term below zero: then the other alone, from the
   * same weighted sums */
  if (*s < 0) {
    *s = 0;
    *a = st / sw;
  } else if (*a < 0) {
    *a = 0;
    *s = svv > 0 ? svt / svv : 0;
  }
}

/* The smallest volume of the large-message regime: the points within 32x
 * of the largest, at least the two largest. */
static double LargeRegimeCut(const FsdpProfileCurve *c)
{
  double vmax = 0, second = 0;
  for (int i = 0; i < c->n; i++) vmax = c->bytes[i] > vmax ? c->bytes[i] : vmax;
  for (int i = 0; i < c->n; i++)
    if (c->bytes[i] < vmax && c->bytes[i] > second) second = c->bytes[i];
  double cut = vmax / 32.0;
  return second > 0 && second < cut ? second : cut;
}

/* [Note: the large-message regime] A curve measured on a shaped or shared
 * link is not one line: small messages ride a token bucket's burst (tc
 * tbf), eager protocols or caches and come out many times faster per byte
 * than the sustained rate, which is what a step's back-to-back unit
 * gathers and reductions see.  A single fit weighted by 1/t^2 (equal
 * relative error per point) let the many small points set the bandwidth:
 * on the emulated 1 Gbit/s link it came out 24x the sustained 28 MB/s.  So
 * the bandwidth is the slope of a plain least-squares line (absolute error:
 * the largest messages weigh most) through the large-message regime alone
 * (LargeRegimeCut; fsdp-probe measures up to the plan's largest unit, so
 * the regime is the one the step's messages fall in), and the latency is
 * what the small messages leave over that slope (t - v/b, weighted 1/t^2,
 * at least 0: a burst makes it negative).  A curve whose large regime does
 * not rise (all latency) is fitted as one line over every point, as
 * before. */
void FsdpProfileFit(FsdpProfileCurve *c)
{
  double a = 0, s = 0;
  double cut = LargeRegimeCut(c);
  double n = 0, sv = 0, st = 0, svv = 0, svt = 0;
  for (int i = 0; i < c->n; i++) {
    if (c->bytes[i] < cut) continue;
    double v = c->bytes[i], t = c->seconds[i];
    n += 1;
    sv += v;
    st += t;
    svv += v * v;
    svt += v * t;
  }
  double det = n * svv - sv * sv;
  double slope = n >= 2 && det > 1e-12 * n * svv ? (n * svt - sv * st) / det : 0.0;
  if (!(slope > 0)) {
    FitLine(c, &a, &s);
  } else {
    s = slope;
    double sw = 0, sr = 0;
    for (int i = 0; i < c->n; i++) {
      double t = c->seconds[i];
      if (c->bytes[i] >= cut || !(t > 0)) continue;
      sw += 1.0 / (t * t);
      sr += (t - c->bytes[i] * s) / (t * t);
    }
    a = sw > 0 ? sr / sw : (st - s * sv) / n;
    if (a < 0) a = 0;
  }
  c->latency_s = a;
  c->bandwidth = s > 0 ? 1.0 / s : 0.0;
}

double FsdpProfileCurveSeconds(const FsdpProfileCurve *c, double bytes)
{
  return c->latency_s + (c->bandwidth > 0 ? bytes / c->bandwidth : 0.0);
}

void FsdpProfileScaleTimes(FsdpProfile *p, double factor)
{
  if (!(factor > 1.0) || !isfinite(factor)) return;
  for (int i = 0; i < p->ngemm; i++) p->gemm[i].flops_per_s /= factor;
  p->gemm_flops_per_s /= factor;
  p->attention_flops_per_s /= factor;
  p->stream_bytes_per_s /= factor;
  p->adamw_bytes_per_s /= factor;
  for (int b = 0; b < p->nstage_batches; b++)
    for (int i = 0; i < p->nstages; i++) {
      p->stage_fwd_s[b][i] *= factor;
      p->stage_bwd_s[b][i] *= factor;
    }
  p->contended_allreduce_s *= factor;
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++)
    for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
      FsdpProfileCurve *c = &p->coll[l][k];
      for (int i = 0; i < c->n; i++) c->seconds[i] *= factor;
      c->latency_s *= factor;
      c->bandwidth /= factor;
    }
}

/* ---- writing ---------------------------------------------------------- */

static herr_t WriteArray(hid_t loc, const char *name, hid_t type, const void *data, int n)
{
  hsize_t dim = (hsize_t)n;
  hid_t space = H5Screate_simple(1, &dim, NULL);
  if (space < 0) return -1;
  hid_t d = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = d < 0 ? -1 : (n > 0 ? H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : 0);
  if (d >= 0 && H5Dclose(d) < 0) st = -1;
  H5Sclose(space);
  return st;
}

static herr_t WriteStrings(hid_t loc, const char *name, const char *data, size_t width, int n)
{
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) return -1;
  herr_t st = H5Tset_size(t, width);
  if (st >= 0) st = WriteArray(loc, name, t, data, n);
  H5Tclose(t);
  return st;
}

static int WriteFile(const FsdpProfile *p, const char *tmp)
{
  int err = FSDP_SUCCESS;
  hid_t f = -1, g = -1, lg = -1, kg = -1;
  FSDP_HDF5_GOTO(f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteString(f, "kind", kKind));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(f, "format_version", FSDP_PROFILE_FORMAT_VERSION));
  const struct {
    const char *name, *value;
  } strings[] = {{"host", p->host},           {"cpu", p->cpu},
                 {"date", p->date},           {"backend", p->backend},
                 {"blas_core", p->blas_core}, {"model", p->model},
                 {"source", p->source}};
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
    FSDP_HDF5_GOTO(FsdpHdf5AttrWriteString(f, strings[i].name, strings[i].value));
  const struct {
    const char *name;
    int64_t value;
  } ints[] = {{"world_size", p->world_size}, {"ranks_per_node", p->ranks_per_node},
              {"nodes", p->nodes},           {"threads", p->threads},
              {"mem_available_bytes", p->mem_available}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(f, ints[i].name, ints[i].value));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(f, "gemm_flops_per_s", p->gemm_flops_per_s));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(f, "peak_flops_per_s", p->peak_flops_per_s));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(f, "attention_flops_per_s", p->attention_flops_per_s));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(f, "stream_bytes_per_s", p->stream_bytes_per_s));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(f, "adamw_bytes_per_s", p->adamw_bytes_per_s));

  FSDP_HDF5_GOTO(g = H5Gcreate2(f, "compute", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  char names[FSDP_PROFILE_MAX_GEMMS][sizeof p->gemm[0].name];
  int64_t N[FSDP_PROFILE_MAX_GEMMS], C[FSDP_PROFILE_MAX_GEMMS], OC[FSDP_PROFILE_MAX_GEMMS];
  double rate[FSDP_PROFILE_MAX_GEMMS];
  memset(names, 0, sizeof names);
  for (int i = 0; i < p->ngemm; i++) {
    memcpy(names[i], p->gemm[i].name, sizeof names[i]);
    N[i] = p->gemm[i].N;
    C[i] = p->gemm[i].C;
    OC[i] = p->gemm[i].OC;
    rate[i] = p->gemm[i].flops_per_s;
  }
  FSDP_HDF5_GOTO(WriteStrings(g, "gemm_name", &names[0][0], sizeof names[0], p->ngemm));
  FSDP_HDF5_GOTO(WriteArray(g, "gemm_N", H5T_NATIVE_INT64, N, p->ngemm));
  FSDP_HDF5_GOTO(WriteArray(g, "gemm_C", H5T_NATIVE_INT64, C, p->ngemm));
  FSDP_HDF5_GOTO(WriteArray(g, "gemm_OC", H5T_NATIVE_INT64, OC, p->ngemm));
  FSDP_HDF5_GOTO(WriteArray(g, "gemm_flops_per_s", H5T_NATIVE_DOUBLE, rate, p->ngemm));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(g, "stage_seq_len", p->stage_seq_len));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(g, "stage_params", p->stage_params));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(g, "stage_rounds", p->stage_rounds));
  FSDP_HDF5_GOTO(WriteArray(g, "stage_batch", H5T_NATIVE_INT, p->stage_batch, p->nstage_batches));
  {
    /* [nstage_batches * nstages], batch-major */
    static double fw[FSDP_PROFILE_MAX_STAGE_BATCHES * FSDP_PROFILE_MAX_STAGES];
    static double bw[FSDP_PROFILE_MAX_STAGE_BATCHES * FSDP_PROFILE_MAX_STAGES];
    for (int b = 0; b < p->nstage_batches; b++)
      for (int i = 0; i < p->nstages; i++) {
        fw[b * p->nstages + i] = p->stage_fwd_s[b][i];
        bw[b * p->nstages + i] = p->stage_bwd_s[b][i];
      }
    int n = p->nstage_batches * p->nstages;
    FSDP_HDF5_GOTO(WriteArray(g, "stage_forward_s", H5T_NATIVE_DOUBLE, fw, n));
    FSDP_HDF5_GOTO(WriteArray(g, "stage_backward_s", H5T_NATIVE_DOUBLE, bw, n));
  }
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(g, "contended_factor", p->contended_factor));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(g, "cores_per_node", p->cores_per_node));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(g, "nodes_per_host", p->nodes_per_host));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(g, "contended_allreduce_s", p->contended_allreduce_s));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(g, "contended_allreduce_bytes",
                                         p->contended_allreduce_bytes));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(g, "join_fraction", p->join_fraction));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(g, "sustained_factor", p->sustained_factor));
  FsdpHdf5Close(&g);

  FSDP_HDF5_GOTO(g = H5Gcreate2(f, "collectives", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(g, "concurrent_factor", p->concurrent_factor));
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++) {
    FSDP_HDF5_GOTO(lg = H5Gcreate2(g, FsdpProfileLevelNames[l], H5P_DEFAULT, H5P_DEFAULT,
                                   H5P_DEFAULT));
    FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(lg, "size", p->level_size[l]));
    FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(lg, "peers_intra", p->level_peers_intra[l]));
    FSDP_HDF5_GOTO(FsdpHdf5AttrWriteInt64(lg, "peers_inter", p->level_peers_inter[l]));
    for (int k = 0; p->level_size[l] > 0 && k < FSDP_COLL_NKINDS; k++) {
      const FsdpProfileCurve *c = &p->coll[l][k];
      FSDP_HDF5_GOTO(kg = H5Gcreate2(lg, FsdpCollKindNames[k], H5P_DEFAULT, H5P_DEFAULT,
                                     H5P_DEFAULT));
      FSDP_HDF5_GOTO(WriteArray(kg, "bytes", H5T_NATIVE_DOUBLE, c->bytes, c->n));
      FSDP_HDF5_GOTO(WriteArray(kg, "seconds", H5T_NATIVE_DOUBLE, c->seconds, c->n));
      FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(kg, "latency_s", c->latency_s));
      FSDP_HDF5_GOTO(FsdpHdf5AttrWriteDouble(kg, "bandwidth_bytes_per_s", c->bandwidth));
      FsdpHdf5Close(&kg);
    }
    FsdpHdf5Close(&lg);
  }
done:
  FsdpHdf5Close(&kg);
  FsdpHdf5Close(&lg);
  FsdpHdf5Close(&g);
  if (FsdpHdf5Close(&f) < 0 && !err) err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "H5Fclose");
  return err;
}

int FsdpProfileWrite(const FsdpProfile *p, const char *path)
{
  FsdpHdf5Init();
  char tmp[4096];
  int e = FsdpTempFileCreate(path, "tmp", tmp, sizeof tmp);
  if (e)
    FSDP_ERROR(e == ENOENT || e == EACCES || e == ENAMETOOLONG ? FSDP_ERR_USAGE : FSDP_ERR_IO,
               "-profile_out %s: cannot create a file there: %s", path, strerror(e));
  int err = WriteFile(p, tmp);
  if (!err) {
    FsdpPublishStep step;
    e = FsdpPublish(tmp, path, 1, &step);
    if (e && step != FSDP_PUBLISH_SYNC_DIR) {
      unlink(tmp);
      FSDP_ERROR(FSDP_ERR_IO, "could not publish the profile %s: %s", path, strerror(e));
    }
    return FSDP_SUCCESS;
  }
  unlink(tmp);
  return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
}

/* ---- reading ---------------------------------------------------------- */

/* Reads a 1-D dataset of at most max elements into buf; its length in *n. */
static herr_t ReadArray(hid_t loc, const char *name, hid_t type, void *buf, int max, int *n)
{
  hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
  if (d < 0) return -1;
  hid_t s = H5Dget_space(d);
  hsize_t dim = 0;
  herr_t st = s < 0 || H5Sget_simple_extent_ndims(s) != 1 ? -1 : 0;
  if (st >= 0) st = H5Sget_simple_extent_dims(s, &dim, NULL) < 0 ? -1 : 0;
  if (st >= 0 && dim > (hsize_t)max) st = -1;
  if (st >= 0 && dim > 0) st = H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  if (s >= 0) H5Sclose(s);
  H5Dclose(d);
  *n = (int)dim;
  return st;
}

#define READ_OR_FAIL(expr, what)                                                  \
  do {                                                                            \
    if ((expr) < 0) {                                                             \
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE, "-profile %s: fsdp profile without %s "  \
                         "(damaged, or written by another version)", path, what); \
      goto done;                                                                  \
    }                                                                             \
  } while (0)

/* The root's attributes: where and how it was measured, the rates. */
static int ReadIdentity(hid_t f, const char *path, FsdpProfile *p)
{
  int err = FSDP_SUCCESS;
  struct {
    const char *name;
    char *buf;
    size_t size;
  } strings[] = {{"host", p->host, sizeof p->host},
                 {"cpu", p->cpu, sizeof p->cpu},
                 {"date", p->date, sizeof p->date},
                 {"backend", p->backend, sizeof p->backend},
                 {"blas_core", p->blas_core, sizeof p->blas_core},
                 {"model", p->model, sizeof p->model},
                 {"source", p->source, sizeof p->source}};
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
    READ_OR_FAIL(FsdpHdf5AttrReadString(f, strings[i].name, strings[i].buf, strings[i].size),
                 strings[i].name);
  int64_t v[5];
  const char *int_names[5] = {"world_size", "ranks_per_node", "nodes", "threads",
                              "mem_available_bytes"};
  for (int i = 0; i < 5; i++) READ_OR_FAIL(FsdpHdf5AttrReadInt64(f, int_names[i], &v[i]), int_names[i]);
  p->world_size = (int)v[0];
  p->ranks_per_node = (int)v[1];
  p->nodes = (int)v[2];
  p->threads = (int)v[3];
  p->mem_available = v[4];
  READ_OR_FAIL(FsdpHdf5AttrReadDouble(f, "gemm_flops_per_s", &p->gemm_flops_per_s),
               "gemm_flops_per_s");
  READ_OR_FAIL(FsdpHdf5AttrReadDouble(f, "peak_flops_per_s", &p->peak_flops_per_s),
               "peak_flops_per_s");
  READ_OR_FAIL(FsdpHdf5AttrReadDouble(f, "attention_flops_per_s", &p->attention_flops_per_s),
               "attention_flops_per_s");
  READ_OR_FAIL(FsdpHdf5AttrReadDouble(f, "stream_bytes_per_s", &p->stream_bytes_per_s),
               "stream_bytes_per_s");
  READ_OR_FAIL(FsdpHdf5AttrReadDouble(f, "adamw_bytes_per_s", &p->adamw_bytes_per_s),
               "adamw_bytes_per_s");
done:
  return err;
}

/* /compute: the matmul shapes and their rates. */
static int ReadGemms(hid_t g, const char *path, FsdpProfile *p)
{
  int err = FSDP_SUCCESS;
  char names[FSDP_PROFILE_MAX_GEMMS][sizeof p->gemm[0].name];
  int64_t N[FSDP_PROFILE_MAX_GEMMS], C[FSDP_PROFILE_MAX_GEMMS], OC[FSDP_PROFILE_MAX_GEMMS];
  double rate[FSDP_PROFILE_MAX_GEMMS];
  int n[5] = {0};
  hid_t st = H5Tcopy(H5T_C_S1);
  READ_OR_FAIL(st, "a string type");
  H5Tset_size(st, sizeof names[0]);
  herr_t r = ReadArray(g, "gemm_name", st, names, FSDP_PROFILE_MAX_GEMMS, &n[0]);
  H5Tclose(st);
  READ_OR_FAIL(r, "/compute/gemm_name");
  READ_OR_FAIL(ReadArray(g, "gemm_N", H5T_NATIVE_INT64, N, FSDP_PROFILE_MAX_GEMMS, &n[1]),
               "/compute/gemm_N");
  READ_OR_FAIL(ReadArray(g, "gemm_C", H5T_NATIVE_INT64, C, FSDP_PROFILE_MAX_GEMMS, &n[2]),
               "/compute/gemm_C");
  READ_OR_FAIL(ReadArray(g, "gemm_OC", H5T_NATIVE_INT64, OC, FSDP_PROFILE_MAX_GEMMS, &n[3]),
               "/compute/gemm_OC");
  READ_OR_FAIL(ReadArray(g, "gemm_flops_per_s", H5T_NATIVE_DOUBLE, rate,
                         FSDP_PROFILE_MAX_GEMMS, &n[4]),
               "/compute/gemm_flops_per_s");
  READ_OR_FAIL(n[1] == n[0] && n[2] == n[0] && n[3] == n[0] && n[4] == n[0] ? 0 : -1,
               "/compute arrays of one length");
  p->ngemm = n[0];
  for (int i = 0; i < n[0]; i++) {
    names[i][sizeof names[i] - 1] = '\0';
    memcpy(p->gemm[i].name, names[i], sizeof names[i]);
    p->gemm[i].N = N[i];
    p->gemm[i].C = C[i];
    p->gemm[i].OC = OC[i];
    p->gemm[i].flops_per_s = rate[i];
  }
done:
  return err;
}

/* /compute: the stages measured ([Note: stages measured] in plan/probe.c). */
static int ReadStages(hid_t g, const char *path, FsdpProfile *p)
{
  int err = FSDP_SUCCESS;
  /* the stages measured (absent in files of before them: none) */
  if (H5Lexists(g, "stage_forward_s", H5P_DEFAULT) > 0) {
    static double fw[FSDP_PROFILE_MAX_STAGE_BATCHES * FSDP_PROFILE_MAX_STAGES];
    static double bw[FSDP_PROFILE_MAX_STAGE_BATCHES * FSDP_PROFILE_MAX_STAGES];
    const int max = FSDP_PROFILE_MAX_STAGE_BATCHES * FSDP_PROFILE_MAX_STAGES;
    int64_t sl = 0;
    int nf = 0, nb = 0, nsb = 0;
    READ_OR_FAIL(FsdpHdf5AttrReadInt64(g, "stage_seq_len", &sl), "/compute stage_seq_len");
    READ_OR_FAIL(FsdpHdf5AttrReadInt64(g, "stage_params", &p->stage_params),
                 "/compute stage_params");
    READ_OR_FAIL(ReadArray(g, "stage_batch", H5T_NATIVE_INT, p->stage_batch,
                           FSDP_PROFILE_MAX_STAGE_BATCHES, &nsb), "/compute/stage_batch");
    READ_OR_FAIL(ReadArray(g, "stage_forward_s", H5T_NATIVE_DOUBLE, fw, max, &nf),
                 "/compute/stage_forward_s");
    READ_OR_FAIL(ReadArray(g, "stage_backward_s", H5T_NATIVE_DOUBLE, bw, max, &nb),
                 "/compute/stage_backward_s");
    READ_OR_FAIL(nf == nb && (nsb == 0 ? nf == 0 : nf % nsb == 0 && nf / nsb <= FSDP_PROFILE_MAX_STAGES)
                     ? 0 : -1, "/compute stage arrays of one length per micro-batch");
    /* [Note: micro-batches timed in turn] (absent in files of before
     * it: 0, one micro-batch after the other) */
    if (H5Aexists(g, "stage_rounds") > 0) {
      int64_t rounds = 0;
      READ_OR_FAIL(FsdpHdf5AttrReadInt64(g, "stage_rounds", &rounds), "/compute stage_rounds");
      READ_OR_FAIL(rounds >= 0 && rounds <= 1000 ? 0 : -1, "/compute stage_rounds of 0 to 1000");
      p->stage_rounds = (int)rounds;
    }
    p->nstage_batches = nsb;
    p->nstages = nsb > 0 ? nf / nsb : 0;
    p->stage_seq_len = (int)sl;
    for (int b = 0; b < nsb; b++)
      for (int i = 0; i < p->nstages; i++) {
        p->stage_fwd_s[b][i] = fw[b * p->nstages + i];
        p->stage_bwd_s[b][i] = bw[b * p->nstages + i];
      }
  }
done:
  return err;
}

/* /compute: the factors of what runs beside what, and the speed sustained. */
static int ReadComputeFactors(hid_t g, const char *path, FsdpProfile *p)
{
  int err = FSDP_SUCCESS;
  /* [Note: contended compute] (absent in files of before it: 0, not
   * measured; fsdp-plan takes factor 1) */
  if (H5Aexists(g, "contended_factor") > 0) {
    int64_t cores = 0;
    READ_OR_FAIL(FsdpHdf5AttrReadDouble(g, "contended_factor", &p->contended_factor),
                 "/compute contended_factor");
    READ_OR_FAIL(FsdpHdf5AttrReadInt64(g, "cores_per_node", &cores), "/compute cores_per_node");
    READ_OR_FAIL(p->contended_factor >= 0 && cores >= 0 ? 0 : -1,
                 "/compute contended_factor and cores_per_node of at least 0");
    p->cores_per_node = (int)cores;
  }
  /* [Note: nodes sharing a host] in plan/probe.c (absent before it: 0) */
  if (H5Aexists(g, "nodes_per_host") > 0) {
    int64_t nodes = 0;
    READ_OR_FAIL(FsdpHdf5AttrReadInt64(g, "nodes_per_host", &nodes), "/compute nodes_per_host");
    READ_OR_FAIL(nodes >= 0 && nodes <= INT32_MAX ? 0 : -1,
                 "/compute nodes_per_host of at least 0");
    p->nodes_per_host = (int)nodes;
  }
  if (H5Aexists(g, "contended_allreduce_s") > 0) {
    READ_OR_FAIL(FsdpHdf5AttrReadDouble(g, "contended_allreduce_s", &p->contended_allreduce_s),
                 "/compute contended_allreduce_s");
    READ_OR_FAIL(FsdpHdf5AttrReadDouble(g, "contended_allreduce_bytes",
                                        &p->contended_allreduce_bytes),
                 "/compute contended_allreduce_bytes");
  }
  /* [Note: joining a collective] (absent in files of before it: 0) */
  if (H5Aexists(g, "join_fraction") > 0) {
    READ_OR_FAIL(FsdpHdf5AttrReadDouble(g, "join_fraction", &p->join_fraction),
                 "/compute join_fraction");
    READ_OR_FAIL(p->join_fraction >= 0 && p->join_fraction < 100 ? 0 : -1,
                 "/compute join_fraction of 0 to 100");
  }
  /* [Note: sustained speed] (absent in files of before it: 0) */
  if (H5Aexists(g, "sustained_factor") > 0) {
    READ_OR_FAIL(FsdpHdf5AttrReadDouble(g, "sustained_factor", &p->sustained_factor),
                 "/compute sustained_factor");
    READ_OR_FAIL(p->sustained_factor >= 0 && p->sustained_factor < 100 ? 0 : -1,
                 "/compute sustained_factor of 0 to 100");
  }
done:
  return err;
}

/* /collectives: every level's curves. */
static int ReadCollectives(hid_t f, const char *path, FsdpProfile *p)
{
  int err = FSDP_SUCCESS;
  hid_t g = -1, lg = -1, kg = -1;
  READ_OR_FAIL(g = H5Gopen2(f, "collectives", H5P_DEFAULT), "/collectives");
  /* [Note: two collectives at once] (absent in files of before it: 0) */
  if (H5Aexists(g, "concurrent_factor") > 0) {
    READ_OR_FAIL(FsdpHdf5AttrReadDouble(g, "concurrent_factor", &p->concurrent_factor),
                 "/collectives concurrent_factor");
    READ_OR_FAIL(p->concurrent_factor >= 0 && p->concurrent_factor < 1000 ? 0 : -1,
                 "/collectives concurrent_factor of 0 to 1000");
  }
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++) {
    char what[96];
    snprintf(what, sizeof what, "/collectives/%s", FsdpProfileLevelNames[l]);
    READ_OR_FAIL(lg = H5Gopen2(g, FsdpProfileLevelNames[l], H5P_DEFAULT), what);
    int64_t size = 0;
    int64_t intra = 0, inter = 0;
    READ_OR_FAIL(FsdpHdf5AttrReadInt64(lg, "size", &size), what);
    READ_OR_FAIL(FsdpHdf5AttrReadInt64(lg, "peers_intra", &intra), what);
    READ_OR_FAIL(FsdpHdf5AttrReadInt64(lg, "peers_inter", &inter), what);
    p->level_size[l] = (int)size;
    p->level_peers_intra[l] = (int)intra;
    p->level_peers_inter[l] = (int)inter;
    for (int k = 0; size > 0 && k < FSDP_COLL_NKINDS; k++) {
      FsdpProfileCurve *c = &p->coll[l][k];
      snprintf(what, sizeof what, "/collectives/%s/%s", FsdpProfileLevelNames[l],
               FsdpCollKindNames[k]);
      READ_OR_FAIL(kg = H5Gopen2(lg, FsdpCollKindNames[k], H5P_DEFAULT), what);
      int nb = 0, ns = 0;
      READ_OR_FAIL(ReadArray(kg, "bytes", H5T_NATIVE_DOUBLE, c->bytes, FSDP_PROFILE_MAX_SIZES, &nb),
                   what);
      READ_OR_FAIL(ReadArray(kg, "seconds", H5T_NATIVE_DOUBLE, c->seconds,
                             FSDP_PROFILE_MAX_SIZES, &ns), what);
      READ_OR_FAIL(nb == ns ? 0 : -1, what);
      c->n = nb;
      READ_OR_FAIL(FsdpHdf5AttrReadDouble(kg, "latency_s", &c->latency_s), what);
      READ_OR_FAIL(FsdpHdf5AttrReadDouble(kg, "bandwidth_bytes_per_s", &c->bandwidth), what);
      FsdpHdf5Close(&kg);
    }
    FsdpHdf5Close(&lg);
  }
done:
  FsdpHdf5Close(&kg);
  FsdpHdf5Close(&lg);
  FsdpHdf5Close(&g);
  return err;
}

int FsdpProfileRead(const char *path, FsdpProfile *p)
{
  FsdpHdf5Init();
  memset(p, 0, sizeof *p);
  if (access(path, R_OK) != 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s: cannot read it: %s (write one with fsdp-probe "
               "-profile_out FILE)", path, strerror(errno));
  if (H5Fis_hdf5(path) <= 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "-profile %s is not an HDF5 file (expected a profile written "
               "by fsdp-probe -profile_out)", path);
  int err = FSDP_SUCCESS;
  hid_t f = -1, g = -1;
  FSDP_HDF5_GOTO(f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
  char kind[32] = "";
  if (FsdpHdf5AttrReadString(f, "kind", kind, sizeof kind) < 0 || strcmp(kind, kKind) != 0) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE, "-profile %s is an HDF5 file but not an fsdp profile "
                       "(no kind attribute \"%s\"; a checkpoint or run file?)", path, kKind);
    goto done;
  }
  int64_t version = 0;
  READ_OR_FAIL(FsdpHdf5AttrReadInt64(f, "format_version", &version), "format_version");
  if (version != FSDP_PROFILE_FORMAT_VERSION) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE, "-profile %s has format version %lld, this fsdp reads "
                       "version %d: measure again with fsdp-probe", path, (long long)version,
                       FSDP_PROFILE_FORMAT_VERSION);
    goto done;
  }
  err = ReadIdentity(f, path, p);
  if (err) goto done;
  READ_OR_FAIL(g = H5Gopen2(f, "compute", H5P_DEFAULT), "/compute");
  err = ReadGemms(g, path, p);
  if (!err) err = ReadStages(g, path, p);
  if (!err) err = ReadComputeFactors(g, path, p);
  if (err) goto done;
  FsdpHdf5Close(&g);
  err = ReadCollectives(f, path, p);
done:
  FsdpHdf5Close(&g);
  FsdpHdf5Close(&f);
  return err ? FsdpErrorTrace(__FILE__, __LINE__, __func__, err) : FSDP_SUCCESS;
}
