/* ckpt.c: reshardable checkpoints in parallel HDF5 (see ckpt.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fallocate(2): [Note: failed saves] */
#endif
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "io/ckpt.h"

#include "device/device.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"
#include "io/fileutil.h"
#include "io/h5util.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

#define MSG_SIZE 1024

static int64_t g_test_abort = 0;

void FsdpCkptSetTestAbort(int64_t after_datasets) { g_test_abort = after_datasets; }

/* The three tensor families of a checkpoint, in the order they are written. */
enum { KIND_PARAM, KIND_EXP_AVG, KIND_EXP_AVG_SQ, NKINDS };
static const char *const kKindGroup[NKINDS] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};

static MPI_Comm WorldComm(FsdpRuntime rt) { return FsdpTopoWorld(FsdpRuntimeTopo(rt))->comm; }

/* [Note: device staging] On a GPU the shards live in device memory; a
 * save first copies them to host staging buffers and a load reads into
 * staging buffers and then copies them to the device, so the HDF5 code
 * below always sees host memory.  g_stage[kind * units + unit] while set. */
static float **g_stage = NULL;

static float *DeviceShard(FsdpRuntime rt, FsdpOptim opt, int kind, int unit)
{
  switch (kind) {
  case KIND_PARAM: return FsdpRuntimeUnitShard(rt, unit);
  case KIND_EXP_AVG: return opt ? FsdpOptimExpAvg(opt, unit) : NULL;
  default: return opt ? FsdpOptimExpAvgSq(opt, unit) : NULL;
  }
}

static int StageDestroy(FsdpRuntime rt, FsdpOptim opt, int to_device);

/* Not collective.  to_host: fill the staging buffers from the device. */
static int StageCreate(FsdpRuntime rt, FsdpOptim opt, int to_host)
{
  if (FsdpDeviceGetKind() == FSDP_DEVICE_CPU) return FSDP_SUCCESS;
  int n = FsdpRuntimeNumUnits(rt);
  g_stage = calloc((size_t)NKINDS * (size_t)n, sizeof *g_stage);
  FSDP_CHECK_ALLOC(g_stage, sizeof *g_stage);
  for (int k = 0; k < NKINDS; k++)
    for (int u = 0; u < n; u++) {
      float *dev = DeviceShard(rt, opt, k, u);
      if (!dev) continue;
      size_t bytes = (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u)) * sizeof(float);
      int err = FsdpMalloc(FSDP_MEM_OTHER, bytes, &g_stage[k * n + u]);
      if (!err && to_host) err = FsdpDeviceCopyToHost(g_stage[k * n + u], dev, bytes);
      if (err) {
        StageDestroy(rt, opt, 0);
        return err;
      }
    }
  return FSDP_SUCCESS;
}

/* Not collective.  to_device: copy the staging buffers to the device. */
static int StageDestroy(FsdpRuntime rt, FsdpOptim opt, int to_device)
{
  if (!g_stage) return FSDP_SUCCESS;
  int n = FsdpRuntimeNumUnits(rt), err = FSDP_SUCCESS;
  for (int k = 0; k < NKINDS; k++)
    for (int u = 0; u < n; u++) {
      float *dev = DeviceShard(rt, opt, k, u);
      size_t bytes = (size_t)FlatParamShardNumel(FsdpRuntimeUnitFlatParam(rt, u)) * sizeof(float);
      if (dev && to_device && !err) err = FsdpDeviceCopyFromHost(dev, g_stage[k * n + u], bytes);
      FsdpFree(&g_stage[k * n + u]);
    }
  free(g_stage);
  g_stage = NULL;
  return err;
}

static float *KindShard(FsdpRuntime rt, FsdpOptim opt, int kind, int unit)
{
  if (g_stage) return g_stage[kind * FsdpRuntimeNumUnits(rt) + unit];
  switch (kind) {
  case KIND_PARAM: return FsdpRuntimeUnitShard(rt, unit);
  case KIND_EXP_AVG: return FsdpOptimExpAvg(opt, unit);
  default: return FsdpOptimExpAvgSq(opt, unit);
  }
}

/* ------------------------------------------------------------------ */
/* selections                                                          */

static hid_t CreateSpace(const FsdpParamSpec *spec)
{
  if (spec->ndim == 0) return H5Screate(H5S_SCALAR);
  hsize_t dims[FSDP_MAX_NDIM];
  for (int d = 0; d < spec->ndim; d++) dims[d] = (hsize_t)spec->shape[d];
  return H5Screate_simple(spec->ndim, dims, NULL);
}

/* OR into `space` the flat elements [a, b) of the sub-array dims[level..]
 * at coordinates prefix[0..level) ([Note: checkpoint I/O]). */
static herr_t SelectRange(hid_t space, int ndim, const hsize_t *dims, int level, hsize_t *prefix,
                          hsize_t a, hsize_t b)
{
  if (a >= b) return 0;
  hsize_t start[FSDP_MAX_NDIM], block[FSDP_MAX_NDIM], count[FSDP_MAX_NDIM];
  for (int d = 0; d < ndim; d++) {
    start[d] = d < level ? prefix[d] : 0;
    block[d] = d < level ? 1 : dims[d];
    count[d] = 1;
  }
  if (level == ndim - 1) {
    start[level] = a;
    block[level] = b - a;
    return H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, block);
  }
  hsize_t inner = 1;
  for (int d = level + 1; d < ndim; d++) inner *= dims[d];
  hsize_t r0 = a / inner, r1 = b / inner;
  if (a % inner) { /* partial first row */
    hsize_t end = (r0 + 1) * inner < b ? (r0 + 1) * inner : b;
    prefix[level] = r0;
    if (SelectRange(space, ndim, dims, level + 1, prefix, a - r0 * inner, end - r0 * inner) < 0)
      return -1;
    if (end == b) return 0;
    r0++;
  }
  if (r1 > r0) { /* full rows */
    start[level] = r0;
    block[level] = r1 - r0;
    if (H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, block) < 0) return -1;
  }
  if (b % inner) { /* partial last row */
    prefix[level] = r1;
    return SelectRange(space, ndim, dims, level + 1, prefix, 0, b - r1 * inner);
  }
  return 0;
}

/* Select flat elements [start, start + count) of a parameter's dataspace. */
static herr_t SelectFlat(hid_t space, const FsdpParamSpec *spec, int64_t start, int64_t count)
{
  if (H5Sselect_none(space) < 0) return -1;
  if (count <= 0) return 0;
  if (spec->ndim == 0) return H5Sselect_all(space);
  hsize_t dims[FSDP_MAX_NDIM], prefix[FSDP_MAX_NDIM];
  for (int d = 0; d < spec->ndim; d++) dims[d] = (hsize_t)spec->shape[d];
  return SelectRange(space, spec->ndim, dims, 0, prefix, (hsize_t)start,
                     (hsize_t)(start + count));
}

static hid_t MemSpace(int64_t count)
{
  hsize_t n = count > 0 ? (hsize_t)count : 1;
  hid_t s = H5Screate_simple(1, &n, NULL);
  if (s >= 0 && count <= 0 && H5Sselect_none(s) < 0) {
    H5Sclose(s);
    return -1;
  }
  return s;
}

/* The range of parameter `param` this rank transfers: shard elements
 * [lo, hi) of my shard, intersected with the piece of that parameter.
 * *start (in the parameter) and *count (0: nothing), *shard_off. */
static void PieceRange(const FlatParamPiece *pc, int npieces, int param, int64_t lo, int64_t hi,
                       int64_t *start, int64_t *count, int64_t *shard_off)
{
  *start = 0;
  *count = 0;
  *shard_off = 0;
  for (int i = 0; i < npieces; i++) {
    if (pc[i].param != param) continue;
    int64_t a = pc[i].shard_offset > lo ? pc[i].shard_offset : lo;
    int64_t e = pc[i].shard_offset + pc[i].count;
    int64_t b = e < hi ? e : hi;
    if (a < b) {
      *start = pc[i].param_offset + (a - pc[i].shard_offset);
      *count = b - a;
      *shard_off = a;
    }
    return;
  }
}

/* Collective on the file's comm: read one tensor (the save writes through
 * WriteTensors, [Note: failed saves]). */
static int ReadTensor(hid_t parent, const char *name, const FsdpParamSpec *spec, hid_t dxpl,
                      float *buf, int64_t start, int64_t count)
{
  int err = FSDP_SUCCESS;
  hid_t fspace = -1, dset = -1, mspace = -1;
  float dummy = 0.0f;
  FSDP_HDF5_GOTO(dset = H5Dopen2(parent, name, H5P_DEFAULT));
  FSDP_HDF5_GOTO(fspace = H5Dget_space(dset));
  FSDP_HDF5_GOTO(SelectFlat(fspace, spec, start, count));
  FSDP_HDF5_GOTO(mspace = MemSpace(count));
  FSDP_HDF5_GOTO(H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, count > 0 ? buf : &dummy));
done:
  FsdpHdf5Close(&mspace);
  FsdpHdf5Close(&fspace);
  if (FsdpHdf5Close(&dset) < 0 && !err) err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "H5Dclose");
  return err;
}

/* ------------------------------------------------------------------ */
/* attributes                                                          */

/* 1 with msg set when attribute group/name's value v does not fit an int:
 * cast, 2^32 + 2 would pass for a model's 2 layers (found by tests/fuzz). */
static int OutOfIntRange(int64_t v, const char *path, const char *group, const char *name,
                         char *msg, size_t size)
{
  if (v >= INT_MIN && v <= INT_MAX) return 0;
  FsdpMsgf(msg, size, "checkpoint %s has %s/%s = %lld, out of range for an int", path, group, name,
       (long long)v);
  return 1;
}

/* /model attributes that are not the model description's (ckpt.h). */
static int IsModelGroupAttr(const char *name)
{
  return strcmp(name, "name") == 0 || strcmp(name, "family") == 0 ||
         strcmp(name, "num_parameters") == 0;
}

typedef struct {
  FsdpModelDesc *desc;
  const char *path;
  char *msg;
  size_t size;
  int bad;
} DescReader;

/* H5Aiterate2 callback: one attribute of /model into the description. */
static herr_t ReadDescAttr(hid_t g, const char *name, const H5A_info_t *info, void *ctx)
{
  (void)info;
  DescReader *r = ctx;
  if (IsModelGroupAttr(name)) return 0;
  FsdpModelDesc *d = r->desc;
  if (strlen(name) >= FSDP_MODEL_NAME_MAX || d->nattrs >= FSDP_MODEL_MAX_ATTRS) {
    FsdpMsgf(r->msg, r->size,
         "checkpoint %s: /model/%s is one attribute too many or too long for a model "
         "description (at most %d, names of at most %d characters)",
         r->path, name, FSDP_MODEL_MAX_ATTRS, FSDP_MODEL_NAME_MAX - 1);
    r->bad = 1;
    return 1;
  }
  int64_t i = 0;
  double x = 0.0;
  char str[FSDP_MODEL_STRING_MAX];
  int err;
  /* probing reads: each fails unless the attribute is one value of its class */
  if (FsdpHdf5AttrReadInt64(g, name, &i) >= 0) err = FsdpModelDescAddInt(d, name, i);
  else if (FsdpHdf5AttrReadDouble(g, name, &x) >= 0) err = FsdpModelDescAddReal(d, name, x);
  else if (FsdpHdf5AttrReadString(g, name, str, sizeof str) >= 0) err = FsdpModelDescAddString(d, name, str);
  else err = FSDP_ERR_USAGE;
  if (err) {
    FsdpMsgf(r->msg, r->size, "checkpoint %s: /model/%s is not one integer, number or string", r->path,
         name);
    r->bad = 1;
    return 1;
  }
  return 0;
}

/* The model description of /model (group g): 0, or 1 with msg.  Files of
 * format version 1 written before there were families hold GPT-2 models. */
static int ReadModelDesc(hid_t g, const char *path, FsdpModelDesc *desc, char *msg, size_t size)
{
  char family[FSDP_MODEL_NAME_MAX] = "gpt2", preset[FSDP_MODEL_NAME_MAX] = "";
  if (H5Aexists(g, "family") > 0 && FsdpHdf5AttrReadString(g, "family", family, sizeof family) < 0) {
    FsdpMsgf(msg, size, "checkpoint %s: /model/family is not a string", path);
    return 1;
  }
  FsdpHdf5AttrReadString(g, "name", preset, sizeof preset);
  FsdpModelDescInit(desc, family, preset);
  DescReader r = {desc, path, msg, size, 0};
  hsize_t at = 0;
  if (H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &at, ReadDescAttr, &r) < 0 && !r.bad) {
    FsdpMsgf(msg, size, "checkpoint %s: cannot list the attributes of /model", path);
    r.bad = 1;
  }
  return r.bad;
}

/* [Note: checkpoint attributes]: 0 when m's values are in range and
 * consistent, else 1 with msg naming the file, the attribute, its value
 * and what was expected.  has_optim: the file has /optim (step_count). */
static int ValidateAttributes(const FsdpCkptMeta *m, int has_optim, const char *path, char *msg,
                              size_t size)
{
  const long long step = (long long)m->step, pos = (long long)m->data_position;
  if (m->step < 0 || m->step > FSDP_CKPT_MAX_STEP) {
    FsdpMsgf(msg, size, "checkpoint %s has step %lld; expected 0 to %lld (optimizer steps done)",
             path, step, (long long)FSDP_CKPT_MAX_STEP);
    return 1;
  }
  /* each step consumes 1 to FSDP_CKPT_MAX_ACCUM micro-batches */
  const long long most = m->step > INT64_MAX / FSDP_CKPT_MAX_ACCUM
                             ? (long long)INT64_MAX
                             : step * (long long)FSDP_CKPT_MAX_ACCUM;
  if (pos < step || pos > most) {
    FsdpMsgf(msg, size,
             "checkpoint %s has data_position %lld at step %lld; expected %lld to %lld "
             "micro-batches (each step consumes 1 to %lld: -grad_accum)",
             path, pos, step, step, most, (long long)FSDP_CKPT_MAX_ACCUM);
    return 1;
  }
  if (m->seed < 0) {
    FsdpMsgf(msg, size, "checkpoint %s has seed %lld; expected a seed >= 0 (as -seed)", path,
             (long long)m->seed);
    return 1;
  }
  if (m->global_batch < 0) {
    FsdpMsgf(msg, size, "checkpoint %s has global_batch %lld; expected >= 0 sequences (0: unknown)",
             path, (long long)m->global_batch);
    return 1;
  }
  if (m->world_size < 1 || m->sharding_factor < 1 || m->sharding_factor > m->world_size ||
      m->world_size % m->sharding_factor != 0 || m->ranks_per_node < 1) {
    FsdpMsgf(msg, size,
             "checkpoint %s records the topology world_size %d, sharding_factor %d, "
             "ranks_per_node %d; expected world_size >= 1, a sharding_factor that divides it, "
             "ranks_per_node >= 1",
             path, m->world_size, m->sharding_factor, m->ranks_per_node);
    return 1;
  }
  if (has_optim && (m->optim_step < 0 || m->optim_step > m->step)) {
    FsdpMsgf(msg, size,
             "checkpoint %s has /optim step_count %lld at step %lld; expected 0 to %lld (AdamW "
             "counts the optimizer steps it took)",
             path, (long long)m->optim_step, step, step);
    return 1;
  }
  return 0;
}

/* Read the metadata of an open file into *m; 0 on success, else 1 with
 * msg set (a file that is HDF5 but not a checkpoint this build reads, or
 * attributes out of range: [Note: checkpoint attributes]). */
static int ReadAttributes(hid_t file, const char *path, FsdpCkptMeta *m, char *msg, size_t size)
{
  memset(m, 0, sizeof *m);
  int64_t v = 0;
  if (FsdpHdf5AttrReadInt64(file, "format_version", &v) < 0) {
    FsdpMsgf(msg, size, "checkpoint %s is not an fsdp checkpoint (no format_version attribute)",
             path);
    return 1;
  }
  if (v < 1 || v > FSDP_CKPT_VERSION) {
    FsdpMsgf(msg, size, "checkpoint %s has format version %lld; this build reads version %d",
             path, (long long)v, FSDP_CKPT_VERSION);
    return 1;
  }
  m->format_version = (int)v;
  struct { const char *name; int64_t *dst; } i64[] = {
      {"step", &m->step}, {"data_position", &m->data_position}, {"seed", &m->seed},
      {"global_batch", &m->global_batch}};
  for (size_t i = 0; i < sizeof i64 / sizeof i64[0]; i++)
    if (FsdpHdf5AttrReadInt64(file, i64[i].name, i64[i].dst) < 0) {
      FsdpMsgf(msg, size, "checkpoint %s lacks the attribute /%s", path, i64[i].name);
      return 1;
    }
  struct { const char *name; int *dst; } ints[] = {
      {"world_size", &m->world_size}, {"sharding_factor", &m->sharding_factor},
      {"ranks_per_node", &m->ranks_per_node}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (FsdpHdf5AttrReadInt64(file, ints[i].name, &v) < 0) {
      FsdpMsgf(msg, size, "checkpoint %s lacks the attribute /%s", path, ints[i].name);
      return 1;
    }
    if (OutOfIntRange(v, path, "", ints[i].name, msg, size)) return 1;
    *ints[i].dst = (int)v;
  }
  FsdpHdf5AttrReadString(file, "created", m->created, sizeof m->created);
  hid_t g = H5Gopen2(file, "/model", H5P_DEFAULT);
  if (g < 0) {
    FsdpMsgf(msg, size, "checkpoint %s has no /model group", path);
    return 1;
  }
  int bad = ReadModelDesc(g, path, &m->model, msg, size);
  H5Gclose(g);
  if (bad) return 1;
  int has_optim = H5Lexists(file, "/optim", H5P_DEFAULT) > 0;
  if (has_optim) {
    g = H5Gopen2(file, "/optim", H5P_DEFAULT);
    if (g >= 0) {
      FsdpOptimOptions *o = &m->optim;
      FsdpHdf5AttrReadInt64(g, "step_count", &m->optim_step);
      FsdpHdf5AttrReadDouble(g, "lr", &o->lr);
      FsdpHdf5AttrReadDouble(g, "lr_min", &o->lr_min);
      FsdpHdf5AttrReadDouble(g, "weight_decay", &o->weight_decay);
      FsdpHdf5AttrReadDouble(g, "beta1", &o->beta1);
      FsdpHdf5AttrReadDouble(g, "beta2", &o->beta2);
      FsdpHdf5AttrReadDouble(g, "eps", &o->eps);
      FsdpHdf5AttrReadDouble(g, "grad_clip", &o->grad_clip);
      FsdpHdf5AttrReadInt64(g, "warmup", &o->warmup);
      FsdpHdf5AttrReadInt64(g, "total_steps", &o->total_steps);
      if (FsdpHdf5AttrReadInt64(g, "decay_embeddings", &v) >= 0) o->decay_embeddings = (int)v;
      H5Gclose(g);
    }
  }
  return ValidateAttributes(m, has_optim, path, msg, size);
}

/* Open path read-only with serial HDF5 (the default sec2 driver); on
 * failure returns -1 with msg naming the file and why. */
static hid_t OpenSerial(const char *path, char *msg, size_t size)
{
  struct stat st;
  if (stat(path, &st) != 0) {
    FsdpMsgf(msg, size, "checkpoint %s cannot be read: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    FsdpMsgf(msg, size, "checkpoint %s is not a regular file", path);
    return -1;
  }
  if (H5Fis_hdf5(path) <= 0) {
    FsdpMsgf(msg, size, "checkpoint %s is not an HDF5 file (corrupt, or not a checkpoint)", path);
    return -1;
  }
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    char why[600];
    FsdpHdf5ErrorSummary(why, sizeof why);
    FsdpMsgf(msg, size, "checkpoint %s cannot be opened (truncated or corrupt): %s", path, why);
  }
  return f;
}

void FsdpCkptShapeString(int ndim, const int64_t *shape, char *buf, size_t size)
{
  size_t n = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < ndim && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (n < size) snprintf(buf + n, size - n, "]");
}

/* Is `name` a parameter the runtime registered? */
static int RuntimeHasParam(FsdpRuntime rt, const char *name)
{
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
    const FsdpParamSpec *specs;
    int n = 0;
    if (FsdpRuntimeUnitSpecs(rt, u, &specs, &n) != FSDP_SUCCESS) continue;
    for (int p = 0; p < n; p++)
      if (strcmp(specs[p].name, name) == 0) return 1;
  }
  return 0;
}

typedef struct {
  FsdpRuntime rt;
  char name[FSDP_MAX_NAME + 1];
} ExtraSearch;

static herr_t FindExtra(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
  (void)g;
  (void)info;
  ExtraSearch *s = ctx;
  if (!RuntimeHasParam(s->rt, name)) {
    snprintf(s->name, sizeof s->name, "%s", name);
    return 1; /* stop */
  }
  return 0;
}

_Static_assert(FSDP_CKPT_MAX_RANK >= H5S_MAX_RANK, "a report holds any dataset's shape");

/* Is parameter spec in group g a float dataset of its shape?  Sets
 * r->finding (and its details) when not. */
static void CheckDataset(hid_t g, const FsdpParamSpec *spec, int fp32, FsdpCkptReport *r)
{
  snprintf(r->name, sizeof r->name, "%s", spec->name);
  if (H5Lexists(g, spec->name, H5P_DEFAULT) <= 0) {
    r->finding = FSDP_CKPT_MISSING;
    return;
  }
  hid_t d = H5Dopen2(g, spec->name, H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  hid_t t = d >= 0 ? H5Dget_type(d) : -1;
  int ndim = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
  hsize_t dims[H5S_MAX_RANK];
  if (ndim >= 0 && H5Sget_simple_extent_dims(s, dims, NULL) < 0) ndim = -1;
  if (d < 0 || s < 0 || t < 0 || ndim < 0) {
    r->finding = FSDP_CKPT_UNREADABLE;
  } else if (H5Tget_class(t) != H5T_FLOAT || (fp32 && H5Tget_size(t) != 4)) {
    r->finding = H5Tget_class(t) != H5T_FLOAT ? FSDP_CKPT_NOT_FLOAT : FSDP_CKPT_NOT_FP32;
    r->elem_size = H5Tget_size(t);
  } else {
    int same = ndim == spec->ndim;
    for (int k = 0; k < ndim; k++) {
      r->shape[k] = (int64_t)dims[k];
      if (same && r->shape[k] != spec->shape[k]) same = 0;
    }
    if (!same) {
      r->finding = FSDP_CKPT_SHAPE;
      r->ndim = ndim;
      r->want_ndim = spec->ndim;
      memcpy(r->want_shape, spec->shape, sizeof r->want_shape);
    }
  }
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
}

/* Does group gname hold exactly the runtime's parameters, with their
 * shapes?  Sets r->finding when not. */
static void CheckGroup(hid_t file, FsdpRuntime rt, const char *gname, int fp32, FsdpCkptReport *r)
{
  snprintf(r->group, sizeof r->group, "%s", gname);
  if (H5Lexists(file, gname, H5P_DEFAULT) <= 0) {
    r->finding = FSDP_CKPT_NO_GROUP;
    return;
  }
  hid_t g = H5Gopen2(file, gname, H5P_DEFAULT);
  if (g < 0) {
    r->finding = FSDP_CKPT_BAD_GROUP;
    return;
  }
  int64_t expected = 0;
  for (int u = 0; u < FsdpRuntimeNumUnits(rt) && !r->finding; u++) {
    const FsdpParamSpec *specs;
    int n = 0;
    if (FsdpRuntimeUnitSpecs(rt, u, &specs, &n) != FSDP_SUCCESS) n = 0;
    for (int p = 0; p < n && !r->finding; p++, expected++) CheckDataset(g, &specs[p], fp32, r);
  }
  H5G_info_t info;
  if (!r->finding && H5Gget_info(g, &info) < 0) {
    r->finding = FSDP_CKPT_BAD_GROUP;
  } else if (!r->finding && (int64_t)info.nlinks != expected) {
    /* every parameter is there: so something else is */
    ExtraSearch x = {rt, ""};
    H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, FindExtra, &x);
    r->finding = x.name[0] ? FSDP_CKPT_EXTRA : FSDP_CKPT_COUNT;
    snprintf(r->name, sizeof r->name, "%s", x.name);
    r->entries = (int64_t)info.nlinks;
    r->expected = expected;
  }
  H5Gclose(g);
}

/* [Note: finite checkpoints]: index of the first non-finite of x[0..n), or -1. */
static int64_t FirstNonFinite(const float *x, int64_t n)
{
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return -1;
}

static const char *NonFiniteName(float v) { return isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf"; }

/* Element `flat` (row-major) of an array of shape[ndim] as an index. */
static void FlatToIndex(int ndim, const int64_t *shape, int64_t flat, int64_t *idx)
{
  for (int k = ndim - 1; k >= 0; k--) {
    idx[k] = shape[k] > 0 ? flat % shape[k] : 0;
    flat = shape[k] > 0 ? flat / shape[k] : 0;
  }
}

/* Report x[i] of parameter spec of group gname (x starts at flat element
 * `start`) as a non-finite value. */
static void ReportNonFinite(const char *gname, const FsdpParamSpec *spec, int64_t start,
                            const float *x, int64_t i, FsdpCkptReport *r)
{
  r->finding = FSDP_CKPT_NONFINITE;
  snprintf(r->group, sizeof r->group, "%s", gname);
  snprintf(r->name, sizeof r->name, "%s", spec->name);
  snprintf(r->value, sizeof r->value, "%s", NonFiniteName(x[i]));
  r->element = start + i;
  r->ndim = spec->ndim;
  FlatToIndex(spec->ndim, spec->shape, start + i, r->shape);
}

#define SCAN_CHUNK ((int64_t)1 << 18) /* floats read at a time */

typedef struct {
  const char *gname;
  float *buf; /* SCAN_CHUNK floats */
  FsdpCkptReport *r;
} ValueScan;

/* H5Literate callback: read dataset `name` of a group in chunks and stop
 * (1) at its first non-finite value or a read that fails.  Entries that
 * are no dataset of at most FSDP_MAX_NDIM dimensions are the structure
 * check's business. */
static herr_t ScanDataset(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
  (void)info;
  ValueScan *vs = ctx;
  FsdpParamSpec spec;
  memset(&spec, 0, sizeof spec);
  snprintf(spec.name, sizeof spec.name, "%s", name);
  hid_t d = H5Dopen2(g, name, H5P_DEFAULT), fs = d >= 0 ? H5Dget_space(d) : -1;
  int ndim = fs >= 0 ? H5Sget_simple_extent_ndims(fs) : -1;
  hsize_t dims[H5S_MAX_RANK];
  int stop = 0;
  if (ndim >= 0 && ndim <= FSDP_MAX_NDIM && H5Sget_simple_extent_dims(fs, dims, NULL) >= 0) {
    spec.ndim = ndim;
    for (int k = 0; k < ndim; k++) spec.shape[k] = (int64_t)dims[k];
    int64_t numel = FlatParamSpecNumel(&spec);
    for (int64_t start = 0; start < numel && !stop; start += SCAN_CHUNK) {
      int64_t n = numel - start < SCAN_CHUNK ? numel - start : SCAN_CHUNK;
      hid_t ms = MemSpace(n);
      herr_t rc = ms < 0 ? -1 : SelectFlat(fs, &spec, start, n);
      if (rc >= 0) rc = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, vs->buf);
      if (ms >= 0) H5Sclose(ms);
      int64_t bad = rc < 0 ? -1 : FirstNonFinite(vs->buf, n);
      if (rc < 0) {
        vs->r->finding = FSDP_CKPT_UNREADABLE;
        snprintf(vs->r->group, sizeof vs->r->group, "%s", vs->gname);
        snprintf(vs->r->name, sizeof vs->r->name, "%s", name);
        stop = 1;
      } else if (bad >= 0) {
        ReportNonFinite(vs->gname, &spec, start, vs->buf, bad, vs->r);
        stop = 1;
      }
    }
  }
  if (fs >= 0) H5Sclose(fs);
  if (d >= 0) H5Dclose(d);
  return stop;
}

/* [Note: finite checkpoints]: every value of the groups `checks` names
 * (those present), datasets in name order; sets r->finding at the first
 * non-finite one. */
static int ScanValues(hid_t file, unsigned checks, FsdpCkptReport *r)
{
  float *buf = malloc((size_t)SCAN_CHUNK * sizeof *buf);
  FSDP_CHECK_ALLOC(buf, (size_t)SCAN_CHUNK * sizeof *buf);
  for (int k = 0; k < NKINDS && !r->finding; k++) {
    if (!(checks & (k == KIND_PARAM ? FSDP_CKPT_CHECK_MODEL : FSDP_CKPT_CHECK_OPTIM))) continue;
    if (H5Lexists(file, kKindGroup[k], H5P_DEFAULT) <= 0) continue;
    hid_t g = H5Gopen2(file, kKindGroup[k], H5P_DEFAULT);
    if (g < 0) continue;
    ValueScan vs = {kKindGroup[k], buf, r};
    H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, ScanDataset, &vs);
    H5Gclose(g);
  }
  free(buf);
  return FSDP_SUCCESS;
}

int FsdpCkptCheck(const char *path, FsdpRuntime rt, const FsdpModelDesc *expect, unsigned checks,
                  FsdpCkptMeta *meta, FsdpCkptReport *report)
{
  FsdpHdf5Init();
  memset(report, 0, sizeof *report);
  FsdpCkptMeta local;
  FsdpCkptMeta *m = meta ? meta : &local;
  memset(m, 0, sizeof *m);
  hid_t f = OpenSerial(path, report->text, sizeof report->text);
  int bad = f < 0 || ReadAttributes(f, path, m, report->text, sizeof report->text);
  if (!bad && expect) {
    char what[4200];
    FsdpMsgf(what, sizeof what, "checkpoint %s", path);
    bad = FsdpModelDescCompare(&m->model, expect, what, report->text, sizeof report->text);
  }
  if (bad) report->finding = FSDP_CKPT_BAD_FILE;
  static const char *const groups[3] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};
  for (int k = 0; k < 3 && rt && !report->finding; k++)
    if (checks & (k == 0 ? FSDP_CKPT_CHECK_MODEL : FSDP_CKPT_CHECK_OPTIM))
      CheckGroup(f, rt, groups[k], (checks & FSDP_CKPT_CHECK_FP32) != 0, report);
  int err = FSDP_SUCCESS;
  if (!report->finding && (checks & FSDP_CKPT_CHECK_VALUES)) err = ScanValues(f, checks, report);
  if (f >= 0) H5Fclose(f);
  return err;
}

void FsdpCkptReportString(const FsdpCkptReport *r, const char *path, char *buf, size_t size)
{
  char have[160], want[160];
  const char *g = r->group, *n = r->name;
  switch (r->finding) {
  case FSDP_CKPT_GOOD: FsdpMsgf(buf, size, "checkpoint %s is good", path); break;
  case FSDP_CKPT_BAD_FILE: FsdpMsgf(buf, size, "%s", r->text); break;
  case FSDP_CKPT_NO_GROUP:
    FsdpMsgf(buf, size, "checkpoint %s has no group %s%s", path, g,
         strncmp(g, "/optim", 6) == 0 ? " (no optimizer state)" : "");
    break;
  case FSDP_CKPT_BAD_GROUP: FsdpMsgf(buf, size, "checkpoint %s: %s is not a readable group", path, g); break;
  case FSDP_CKPT_MISSING: FsdpMsgf(buf, size, "checkpoint %s has no parameter %s/%s", path, g, n); break;
  case FSDP_CKPT_UNREADABLE:
    FsdpMsgf(buf, size, "checkpoint %s: %s/%s is not a readable dataset", path, g, n);
    break;
  case FSDP_CKPT_NOT_FLOAT:
    FsdpMsgf(buf, size, "checkpoint %s: %s/%s is not a floating-point dataset", path, g, n);
    break;
  case FSDP_CKPT_NOT_FP32:
    FsdpMsgf(buf, size, "checkpoint %s: %s/%s holds floats of %zu bytes, not 4", path, g, n, r->elem_size);
    break;
  case FSDP_CKPT_SHAPE:
    FsdpCkptShapeString(r->ndim, r->shape, have, sizeof have);
    FsdpCkptShapeString(r->want_ndim, r->want_shape, want, sizeof want);
    FsdpMsgf(buf, size, "checkpoint %s: %s/%s has shape %s but the model expects %s", path, g, n, have,
         want);
    break;
  case FSDP_CKPT_EXTRA:
    FsdpMsgf(buf, size, "checkpoint %s has parameter %s/%s, which the model does not have", path, g, n);
    break;
  case FSDP_CKPT_NONFINITE:
    FsdpCkptShapeString(r->ndim, r->shape, have, sizeof have);
    FsdpMsgf(buf, size, "checkpoint %s: %s/%s holds %s at element %lld (index %s)", path, g, n,
             r->value, (long long)r->element, have);
    break;
  default:
    FsdpMsgf(buf, size, "checkpoint %s: %s holds %lld entries but the model has %lld parameters", path,
         g, (long long)r->entries, (long long)r->expected);
    break;
  }
}

/* What rank 0 tells everyone after looking at a file. */
typedef struct {
  int bad;
  char msg[MSG_SIZE];
  FsdpCkptMeta meta;
} Verdict;

/* Rank 0 only.  rt NULL: header only. */
static int Validate(FsdpRuntime rt, int with_optim, const char *path, const FsdpModelDesc *expect,
                    Verdict *v)
{
  memset(v, 0, sizeof *v);
  FsdpCkptReport *r = calloc(1, sizeof *r);
  FSDP_CHECK_ALLOC(r, sizeof *r);
  unsigned checks = FSDP_CKPT_CHECK_MODEL | (with_optim ? FSDP_CKPT_CHECK_OPTIM : 0) |
                    (rt ? FSDP_CKPT_CHECK_VALUES : 0);
  int err = FsdpCkptCheck(path, rt, expect, checks, &v->meta, r);
  v->bad = r->finding != FSDP_CKPT_GOOD;
  if (v->bad) FsdpCkptReportString(r, path, v->msg, sizeof v->msg);
  free(r);
  return err;
}

/* Collective on comm: rank 0 validates, everyone gets the verdict. */
static int AgreeOnFile(MPI_Comm comm, FsdpRuntime rt, int with_optim, const char *path,
                       const FsdpModelDesc *expect, FsdpCkptMeta *meta)
{
  int rank;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  Verdict *v = calloc(1, sizeof *v);
  FSDP_CHECK_ALLOC(v, sizeof *v);
  /* a rank-0 failure to look (memory) is told as a verdict: no hang */
  if (rank == 0 && Validate(rt, with_optim, path, expect, v) != FSDP_SUCCESS && !v->bad) {
    v->bad = 1;
    FsdpMsgf(v->msg, sizeof v->msg, "checkpoint %s could not be validated (out of memory)", path);
  }
  int err = MPI_Bcast(v, (int)sizeof *v, MPI_BYTE, 0, comm);
  if (err != MPI_SUCCESS) {
    free(v);
    FSDP_CALL_MPI(err);
  }
  if (v->bad) {
    char msg[MSG_SIZE];
    memcpy(msg, v->msg, sizeof msg);
    free(v);
    FSDP_ERROR(FSDP_ERR_USAGE, "%s", msg);
  }
  if (meta) *meta = v->meta;
  free(v);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* save                                                                */

/* [Note: failed saves] A save can fail on any rank in any call (a full
 * disk, a quota, an I/O error), and in parallel HDF5 the failure is
 * rank-local: ROMIO/OMPIO complete a collective write on every rank and
 * only some learn that their part was short.  A rank that then returns,
 * or goes on to the next collective HDF5 call while another stops, hangs
 * the job.  So every call of a save runs through a SaveGuard: a failure
 * is noted on its rank (not printed, not returned), the rank skips its
 * rank-local calls, and before every collective HDF5 call all ranks agree
 * (one MPI_Allreduce) that everyone still stands.  When one does not, all
 * leave the write phase together, close what is open, rank 0 removes
 * the temporary file, and every rank returns the same message: the first
 * failing rank's call and errno text, the space the checkpoint needs
 * against what statvfs(3) reports free, and the newest complete
 * checkpoint, which nothing here touches (pruning runs only after a save
 * succeeded).  MPI-IO reports a short write without an errno; when
 * statvfs then shows less free space than needed, the message says ENOSPC.
 *
 * Closing is the hazard: H5Fclose flushes HDF5's metadata with collective
 * writes, and a rank whose flush fails skips the rest of the flush's
 * collectives and hangs the others -- also on the way out of a failed
 * save.  So before the HDF5 file exists, rank 0 reserves room for all of
 * its metadata in a side file <tmp>.headroom, and frees it right before
 * every H5Fclose (and truncates the temporary file first after a
 * failure): the flush always finds space.  Then rank 0 reserves the whole
 * estimated file with fallocate(2), so the common case, a file system too
 * small for one more checkpoint, fails before any data is written, in one
 * rank-local call with an exact errno, and no later write of the file
 * can run out of space (where the file system has no fallocate, the
 * writes find out, and the headroom still lets the close through).
 *
 * [Note: storage fault injection] Tests set FSDP_TEST_CKPT_FAULT to
 * RANK:SAVE:SITE to make one call of this process's SAVE-th save (1 =
 * the first) fail on world rank RANK as if with ENOSPC, after the real
 * call ran, so collectives stay matched exactly as after a real failure.
 * SITE is N (the N-th tensor write), reserve (rank 0's reservation) or
 * close (the collective close that flushes the file). */

typedef struct {
  MPI_Comm comm;
  int rank;
  int failed; /* this rank: a call of the save failed */
  int agreed; /* every rank knows that some rank failed */
  int first;  /* then: the lowest failing rank */
  /* this rank's failure; once agreed, the first failing rank's */
  struct {
    int err_no;    /* 0: the call left no errno */
    int nonfinite; /* not the storage: the state is not finite ([Note: finite checkpoints]) */
    char what[MSG_SIZE];
  } why;
} SaveGuard;

static int64_t g_saves = 0; /* saves this process began */

static void SaveFail(SaveGuard *g, int err_no, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void SaveFail(SaveGuard *g, int err_no, const char *fmt, ...)
{
  if (g->failed) return; /* the first failure is the cause */
  g->failed = 1;
  g->why.err_no = err_no;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->why.what, sizeof g->why.what, fmt, ap);
  va_end(ap);
}

/* An HDF5 call failed on this rank: note what, with the errno it left and
 * HDF5's account (taken now: the next HDF5 call clears it). */
static void SaveFailHdf5(SaveGuard *g, const char *what)
{
  int err_no = errno;
  char stack[600];
  FsdpHdf5ErrorSummary(stack, sizeof stack);
  SaveFail(g, err_no, "%s failed%s%s%s", what, stack[0] ? " [HDF5: " : "", stack,
           stack[0] ? "]" : "");
}

/* [Note: finite checkpoints]: x[i], element start + i of parameter spec
 * in group gname, is not finite: refuse the save with its name. */
static void SaveFailNonFinite(SaveGuard *g, const char *gname, const FsdpParamSpec *spec,
                              int64_t start, const float *x, int64_t i)
{
  if (g->failed) return;
  FsdpCkptReport r;
  memset(&r, 0, sizeof r);
  ReportNonFinite(gname, spec, start, x, i, &r);
  char index[160];
  FsdpCkptShapeString(r.ndim, r.shape, index, sizeof index);
  SaveFail(g, 0, "%s/%s holds %s at element %lld (index %s)", gname, spec->name, r.value,
           (long long)r.element, index);
  g->why.nonfinite = 1;
}

/* Run one HDF5 call of a save unless this rank already failed. */
#define SAVE_HDF5(g, what, expr)                                           \
  do {                                                                     \
    if (!(g)->failed) {                                                    \
      errno = 0;                                                           \
      if ((expr) < 0) SaveFailHdf5((g), (what));                           \
    }                                                                      \
  } while (0)

/* Collective on g->comm: does every rank still stand?  If not, g->agreed
 * and every rank holds the first failing rank's why. */
static int SaveAgree(SaveGuard *g)
{
  int mine = g->failed ? g->rank : INT_MAX, first = INT_MAX;
  FSDP_CALL_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, g->comm));
  if (first == INT_MAX) return FSDP_SUCCESS;
  FSDP_CALL_MPI(MPI_Bcast(&g->why, (int)sizeof g->why, MPI_BYTE, first, g->comm));
  g->agreed = 1;
  g->first = first;
  return FSDP_SUCCESS;
}

/* Before each collective call: agree, and leave together on a failure
 * (needs the int err and the label done). */
#define SAVE_AGREE(g)                                                      \
  do {                                                                     \
    FSDP_GOTO(SaveAgree(g));                                               \
    if ((g)->agreed) goto done;                                            \
  } while (0)

/* [Note: storage fault injection]: does SITE (n-th write) fail here? */
static int InjectedFault(const SaveGuard *g, const char *site, int64_t n)
{
  const char *spec = getenv("FSDP_TEST_CKPT_FAULT");
  long long rank = -1, save = -1;
  char what[32];
  if (!spec || sscanf(spec, "%lld:%lld:%31s", &rank, &save, what) != 3) return 0;
  if (rank != g->rank || save != g_saves) return 0;
  char *end;
  long long k = strtoll(what, &end, 10);
  if (end != what && *end == '\0') return strcmp(site, "write") == 0 && k == n;
  return strcmp(site, what) == 0;
}

/* Bytes a checkpoint file takes: *meta_bytes of HDF5 metadata (0.45 KiB
 * per dataset measured on -model tiny; 1 KiB per dataset and 16 KiB leave
 * room) plus the tensors.  The close truncates the file to what it holds. */
static int64_t EstimateBytes(FsdpRuntime rt, int nkinds, int64_t *meta_bytes)
{
  int64_t data = 0, meta = 16 * 1024;
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(rt, u);
    for (int p = 0; p < FlatParamNumParams(fp); p++) {
      const FsdpParamSpec *spec = FlatParamSpec(fp, p);
      int64_t numel = 1;
      for (int d = 0; d < spec->ndim; d++) numel *= spec->shape[d];
      data += nkinds * numel * (int64_t)sizeof(float);
      meta += nkinds * 1024;
    }
  }
  *meta_bytes = meta;
  return data + meta;
}

/* Allocate bytes [0, bytes) of the open file fd: 0, or an errno.  Writes
 * zeros where the file system has no fallocate and `or_write`, else
 * leaves it to the writes. */
static int AllocateFile(int fd, int64_t bytes, int or_write)
{
  int err_no = 0;
#ifdef __linux__
  if (fallocate(fd, 0, 0, (off_t)bytes) == 0) return 0;
  err_no = errno;
#else
  err_no = EOPNOTSUPP;
#endif
  if (err_no != EOPNOTSUPP && err_no != ENOSYS && err_no != EINVAL) return err_no;
  if (!or_write) return 0;
  static const char zeros[65536];
  for (int64_t off = 0; off < bytes;) {
    size_t n = bytes - off < (int64_t)sizeof zeros ? (size_t)(bytes - off) : sizeof zeros;
    ssize_t w = pwrite(fd, zeros, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : ENOSPC;
    off += w;
  }
  return fsync(fd) == 0 ? 0 : errno;
}

/* The side file that holds room for the temporary file's metadata. */
static void HeadroomName(const char *tmp, char *buf, size_t size)
{
  snprintf(buf, size, "%s.headroom", tmp);
}

/* Rank 0: free the headroom ([Note: failed saves]). */
static void FreeHeadroom(const char *tmp)
{
  char h[4300];
  HeadroomName(tmp, h, sizeof h);
  if (tmp[0] && unlink(h) != 0 && errno != ENOENT)
    FsdpWarn(0, "cannot delete %s: %s", h, strerror(errno));
}

/* Rank 0: reserve `bytes` in tmp's headroom file. */
static void MakeHeadroom(SaveGuard *g, const char *tmp, int64_t bytes)
{
  char h[4300];
  HeadroomName(tmp, h, sizeof h);
  int fd = open(h, O_WRONLY | O_CREAT | O_EXCL, 0600);
  int err_no = fd < 0 ? errno : AllocateFile(fd, bytes, 1);
  if (fd >= 0) close(fd);
  if (err_no) SaveFail(g, err_no, "reserving %lld bytes in %s failed", (long long)bytes, h);
}

/* Collective on g->comm: rank 0 makes a unique temporary name next to
 * path into tmp ("" when it could not) and its headroom of headroom
 * bytes. */
static int MakeTempName(SaveGuard *g, const char *path, int64_t headroom, char *tmp, size_t size)
{
  struct { int made; char name[4096]; } r;
  memset(&r, 0, sizeof r);
  if (g->rank == 0) {
    int e = FsdpTempFileCreate(path, "tmp", r.name, sizeof r.name < size ? sizeof r.name : size);
    if (e == ENAMETOOLONG) {
      SaveFail(g, e, "the checkpoint path %s is too long", path);
    } else if (e) {
      SaveFail(g, e, "creating %s failed", r.name);
    } else {
      r.made = 1;
      MakeHeadroom(g, r.name, headroom);
    }
  }
  FSDP_CALL_MPI(MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, 0, g->comm));
  snprintf(tmp, size, "%s", r.made ? r.name : "");
  return FSDP_SUCCESS;
}

/* Rank 0: reserve `bytes` of tmp ([Note: failed saves]). */
static void Reserve(SaveGuard *g, const char *tmp, int64_t bytes)
{
  int fd = open(tmp, O_WRONLY);
  int err_no = fd < 0 ? errno : AllocateFile(fd, bytes, 0);
  if (fd >= 0) close(fd);
  if (!err_no && InjectedFault(g, "reserve", 0)) err_no = ENOSPC;
  if (err_no) SaveFail(g, err_no, "reserving %lld bytes for %s failed", (long long)bytes, tmp);
}

/* Rank 0: fsync tmp, rename it to path, fsync the directory
 * ([Note: atomic checkpoints]); the caller agrees on the outcome. */
static void Publish(SaveGuard *g, const char *tmp, const char *path)
{
  FsdpPublishStep step;
  int e = FsdpPublish(tmp, path, 1, &step);
  char dir[4096];
  FsdpDirName(path, dir, sizeof dir);
  if (e && step == FSDP_PUBLISH_SYNC_FILE) SaveFail(g, e, "fsync of %s failed", tmp);
  else if (e && step == FSDP_PUBLISH_NAME) SaveFail(g, e, "renaming %s to %s failed", tmp, path);
  else if (e)
    SaveFail(g, e, "fsync of directory %s failed (%s is complete but may not survive a crash)", dir,
             path);
}

static int CountParams(FsdpRuntime rt)
{
  int n = 0;
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++)
    n += FlatParamNumParams(FsdpRuntimeUnitFlatParam(rt, u));
  return n;
}

/* Collective: the attributes of ckpt.h's layout, agreed one by one. */
/* topo: the written topology (W, F, G); nparams: tensors under /model. */
static int WriteAttributes(SaveGuard *g, hid_t file, hid_t model, hid_t optim, const int topo[3],
                           int nparams, const FsdpCkptMeta *m, int64_t optim_step, const char *tmp)
{
  char created[40];
  FsdpIsoTime(created, sizeof created);
  /* every rank passes the same values: rank 0 decides the time */
  FSDP_CALL_MPI(MPI_Bcast(created, sizeof created, MPI_CHAR, 0, g->comm));
  const FsdpOptimOptions *o = &m->optim;
  enum { I64, F64, STR };
  typedef struct {
    hid_t obj;
    const char *name;
    int type;
    int64_t i;
    double d;
    const char *s;
  } AttrValue;
  const AttrValue head[] = {
      {file, "format_version", I64, FSDP_CKPT_VERSION, 0, NULL},
      {file, "program", STR, 0, 0, "fsdp " PACKAGE_VERSION},
      {file, "created", STR, 0, 0, created},
      {file, "step", I64, m->step, 0, NULL},
      {file, "data_position", I64, m->data_position, 0, NULL},
      {file, "seed", I64, m->seed, 0, NULL},
      {file, "global_batch", I64, m->global_batch, 0, NULL},
      {file, "world_size", I64, topo[0], 0, NULL},
      {file, "sharding_factor", I64, topo[1], 0, NULL},
      {file, "ranks_per_node", I64, topo[2], 0, NULL},
      {model, "name", STR, 0, 0, m->model.preset},
      {model, "family", STR, 0, 0, m->model.family},
  };
  /* then the model's description, as it describes itself */
  const AttrValue tail[] = {
      {model, "num_parameters", I64, nparams, 0, NULL},
      {optim, "type", STR, 0, 0, "adamw"},
      {optim, "step_count", I64, optim_step, 0, NULL},
      {optim, "lr", F64, 0, o->lr, NULL},
      {optim, "lr_min", F64, 0, o->lr_min, NULL},
      {optim, "weight_decay", F64, 0, o->weight_decay, NULL},
      {optim, "beta1", F64, 0, o->beta1, NULL},
      {optim, "beta2", F64, 0, o->beta2, NULL},
      {optim, "eps", F64, 0, o->eps, NULL},
      {optim, "grad_clip", F64, 0, o->grad_clip, NULL},
      {optim, "warmup", I64, o->warmup, 0, NULL},
      {optim, "total_steps", I64, o->total_steps, 0, NULL},
      {optim, "decay_embeddings", I64, o->decay_embeddings, 0, NULL},
  };
  enum { NHEAD = sizeof head / sizeof head[0], NTAIL = sizeof tail / sizeof tail[0] };
  AttrValue a[NHEAD + FSDP_MODEL_MAX_ATTRS + NTAIL];
  size_t n = 0;
  for (size_t k = 0; k < NHEAD; k++) a[n++] = head[k];
  for (int k = 0; k < m->model.nattrs; k++) {
    const FsdpModelAttr *x = &m->model.attr[k];
    int type = x->type == FSDP_MODEL_ATTR_INT ? I64 : x->type == FSDP_MODEL_ATTR_REAL ? F64 : STR;
    a[n++] = (AttrValue){model, x->name, type, x->i, x->r, x->s};
  }
  for (size_t k = 0; k < NTAIL; k++) a[n++] = tail[k];
  int err = FSDP_SUCCESS;
  char what[MSG_SIZE];
  for (size_t k = 0; k < n; k++) {
    if (a[k].obj < 0) continue; /* no /optim */
    FsdpMsgf(what, sizeof what, "writing attribute %s of %s", a[k].name, tmp);
    SAVE_HDF5(g, what,
              a[k].type == I64   ? FsdpHdf5AttrWriteInt64(a[k].obj, a[k].name, a[k].i)
              : a[k].type == F64 ? FsdpHdf5AttrWriteDouble(a[k].obj, a[k].name, a[k].d)
                                 : FsdpHdf5AttrWriteString(a[k].obj, a[k].name, a[k].s));
    SAVE_AGREE(g);
  }
done:
  return err;
}

/* Collective: write every tensor of the checkpoint into an open file. */
static int WriteTensors(SaveGuard *g, hid_t file, FsdpRuntime rt, FsdpOptim opt, hid_t dxpl,
                        const char *tmp)
{
  int err = FSDP_SUCCESS;
  hid_t dcpl = -1, groups[NKINDS] = {-1, -1, -1}, fspace = -1, mspace = -1, dset = -1;
  int nkinds = opt ? NKINDS : 1;
  int64_t written = 0;
  float dummy = 0.0f;
  char what[MSG_SIZE];
  FsdpTopo topo = FsdpRuntimeTopo(rt);
  const FsdpGroup *rep = FsdpTopoReplica(topo);
  FsdpMsgf(what, sizeof what, "setting up the datasets of %s", tmp);
  SAVE_HDF5(g, what, dcpl = H5Pcreate(H5P_DATASET_CREATE));
  /* every element gets written: no fill pass; parallel HDF5 allocates
   * contiguous datasets at creation anyway */
  SAVE_HDF5(g, what, H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  SAVE_HDF5(g, what, H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
  for (int k = 0; k < nkinds; k++) {
    SAVE_AGREE(g);
    SAVE_HDF5(g, what, groups[k] = H5Gopen2(file, kKindGroup[k], H5P_DEFAULT));
  }
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(rt, u);
    const FlatParamPiece *pc;
    int npc;
    FSDP_GOTO(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &npc));
    /* [Note: checkpoint I/O] replicas split the shard */
    int64_t S = FlatParamShardNumel(fp);
    int64_t lo = S * rep->rank / rep->size, hi = S * (rep->rank + 1) / rep->size;
    for (int p = 0; p < FlatParamNumParams(fp); p++) {
      const FsdpParamSpec *spec = FlatParamSpec(fp, p);
      int64_t start, count, off;
      PieceRange(pc, npc, p, lo, hi, &start, &count, &off);
      for (int k = 0; k < nkinds; k++) {
        float *shard = KindShard(rt, opt, k, u);
        FsdpMsgf(what, sizeof what, "writing %s/%s to %s", kKindGroup[k], spec->name, tmp);
        /* the agreement covers the previous dataset's close too */
        SAVE_HDF5(g, what, fspace = CreateSpace(spec));
        SAVE_AGREE(g);
        SAVE_HDF5(g, what, dset = H5Dcreate2(groups[k], spec->name, H5T_IEEE_F32LE, fspace,
                                             H5P_DEFAULT, dcpl, H5P_DEFAULT));
        SAVE_HDF5(g, what, SelectFlat(fspace, spec, start, count));
        SAVE_HDF5(g, what, mspace = MemSpace(count));
        /* [Note: finite checkpoints]: the piece this rank is about to write */
        int64_t bad = count > 0 && shard ? FirstNonFinite(shard + off, count) : -1;
        if (bad >= 0) SaveFailNonFinite(g, kKindGroup[k], spec, start, shard + off, bad);
        SAVE_AGREE(g);
        errno = 0;
        herr_t wr = H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl,
                             count > 0 && shard ? shard + off : &dummy);
        if (wr >= 0 && InjectedFault(g, "write", ++written)) {
          errno = ENOSPC;
          wr = -1;
        }
        if (wr < 0) SaveFailHdf5(g, what);
        if (g_test_abort > 0 && written >= g_test_abort) {
          fprintf(stderr, "fsdp: -checkpoint_test_abort: aborting after %lld datasets of %s\n",
                  (long long)written, tmp);
          fflush(stderr);
          MPI_Abort(WorldComm(rt), 3);
        }
        SAVE_AGREE(g);
        SAVE_HDF5(g, what, FsdpHdf5Close(&dset));
        FsdpHdf5Close(&mspace);
        FsdpHdf5Close(&fspace);
      }
    }
  }
  FsdpMsgf(what, sizeof what, "closing the groups of %s", tmp);
  SAVE_AGREE(g);
  for (int k = 0; k < NKINDS; k++) SAVE_HDF5(g, what, FsdpHdf5Close(&groups[k]));
  SAVE_HDF5(g, what, FsdpHdf5Close(&dcpl));
done:
  /* after an agreed failure: every rank closes the same objects, except
   * where an open itself failed on some ranks only */
  FsdpHdf5Close(&mspace);
  FsdpHdf5Close(&fspace);
  FsdpHdf5Close(&dset);
  for (int k = 0; k < NKINDS; k++) FsdpHdf5Close(&groups[k]);
  FsdpHdf5Close(&dcpl);
  return err;
}

static int ParallelAccess(MPI_Comm comm, hid_t *fapl, hid_t *dxpl)
{
  FSDP_CALL_HDF5(*fapl = H5Pcreate(H5P_FILE_ACCESS));
  FSDP_CALL_HDF5(H5Pset_fapl_mpio(*fapl, comm, MPI_INFO_NULL));
  /* metadata reads by one rank + broadcast, metadata writes collective */
  FSDP_CALL_HDF5(H5Pset_all_coll_metadata_ops(*fapl, 1));
  FSDP_CALL_HDF5(H5Pset_coll_metadata_write(*fapl, 1));
  FSDP_CALL_HDF5(*dxpl = H5Pcreate(H5P_DATASET_XFER));
  FSDP_CALL_HDF5(H5Pset_dxpl_mpio(*dxpl, H5FD_MPIO_COLLECTIVE));
  return FSDP_SUCCESS;
}

static int NewestValid(const char *dir, int verify, char *path, size_t size, int *found);

/* Rank 0, after a failed save was cleaned up: the one message every rank
 * returns ([Note: failed saves]). */
static void DescribeFailure(const SaveGuard *g, const char *path, int64_t need,
                            const char *cleanup, char *msg, size_t size)
{
  char dir[4096], space[512] = "", newest[4096];
  FsdpDirName(path, dir, sizeof dir);
  struct statvfs sv;
  int64_t avail = statvfs(dir, &sv) == 0 ? (int64_t)sv.f_bavail * (int64_t)sv.f_frsize : -1;
  int err_no = g->why.err_no;
  if (err_no == 0 && avail >= 0 && avail < need) err_no = ENOSPC;
  if (avail >= 0)
    FsdpMsgf(space, sizeof space, "; it needs about %lld bytes (%.1f MiB), %s has %lld bytes (%.1f MiB) free",
         (long long)need, need / 1048576.0, dir, (long long)avail, avail / 1048576.0);
  int found = 0, nonfinite = g->why.nonfinite;
  /* after a non-finite refusal: the newest that -resume auto would take */
  if (NewestValid(dir, nonfinite, newest, sizeof newest, &found) != FSDP_SUCCESS) found = 0;
  char tail[4200];
  if (found)
    FsdpMsgf(tail, sizeof tail, "the newest %s checkpoint, %s, is intact (-resume auto takes it)",
             nonfinite ? "good" : "complete", newest);
  else
    FsdpMsgf(tail, sizeof tail, "%s holds no earlier %s checkpoint", dir, nonfinite ? "good" : "complete");
  if (nonfinite) {
    FsdpMsgf(msg, size, "checkpoint %s was not saved: the training state is not finite: on rank %d, "
             "%s. %s; %s", path, g->first, g->why.what, cleanup, tail);
    return;
  }
  FsdpMsgf(msg, size, "checkpoint %s was not saved: %s: on rank %d, %s%s. %s; %s", path,
       err_no ? strerror(err_no) : "cause not reported", g->first, g->why.what, space, cleanup,
       tail);
}

/* Collective on the runtime's world: save to path.  A storage failure on
 * any rank comes back on every rank as *failed = 1 with msg (not printed)
 * after the cleanup of [Note: failed saves], a non-finite value as
 * *failed = 2 ([Note: finite checkpoints]); other errors are raised. */
static int SaveGuarded(FsdpRuntime rt, FsdpOptim opt, const char *path, const FsdpCkptMeta *meta,
                       int *failed, char *msg, size_t size)
{
  FsdpHdf5Init();
  *failed = 0;
  for (int k = 0; k < meta->model.nattrs; k++)
    if (IsModelGroupAttr(meta->model.attr[k].name))
      FSDP_ERROR(FSDP_ERR_INTERNAL, "model attribute %s would overwrite the /model attribute of "
                 "that name (ckpt.h)", meta->model.attr[k].name);
  g_saves++;
  SaveGuard guard, *g = &guard;
  memset(g, 0, sizeof *g);
  g->comm = WorldComm(rt);
  FSDP_CALL_MPI(MPI_Comm_rank(g->comm, &g->rank));
  int nkinds = opt ? NKINDS : 1;
  /* at its peak a save holds the file and the headroom */
  int64_t meta_bytes = 0, need = EstimateBytes(rt, nkinds, &meta_bytes);
  need += meta_bytes;
  char tmp[4200] = "", what[MSG_SIZE];
  int err = FSDP_SUCCESS, staged = 0, open_everywhere = 0;
  hid_t fapl = -1, dxpl = -1, file = -1, model = -1, optim = -1, grp = -1;
  if (ParallelAccess(g->comm, &fapl, &dxpl) != FSDP_SUCCESS)
    SaveFail(g, 0, "setting up parallel HDF5 for %s failed", path);
  FSDP_GOTO(MakeTempName(g, path, meta_bytes, tmp, sizeof tmp));
  SAVE_AGREE(g);
  FsdpMsgf(what, sizeof what, "creating %s", tmp);
  SAVE_HDF5(g, what, file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  SAVE_AGREE(g);
  /* a file open on some ranks only cannot be closed (H5Fclose is
   * collective): it stays open there until the process ends */
  open_everywhere = 1;
  if (g->rank == 0) Reserve(g, tmp, need - meta_bytes);
  SAVE_AGREE(g);
  SAVE_HDF5(g, what, model = H5Gcreate2(file, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (opt) {
    static const char *const optim_groups[] = {"/optim", "/optim/exp_avg", "/optim/exp_avg_sq"};
    for (int k = 0; k < 3; k++) {
      SAVE_AGREE(g);
      SAVE_HDF5(g, what, grp = H5Gcreate2(file, optim_groups[k], H5P_DEFAULT, H5P_DEFAULT,
                                          H5P_DEFAULT));
      if (k == 0) optim = grp;
      else SAVE_HDF5(g, what, FsdpHdf5Close(&grp));
      grp = -1;
    }
  }
  SAVE_AGREE(g);
  FsdpTopo topo = FsdpRuntimeTopo(rt);
  const int written_topo[3] = {FsdpTopoWorld(topo)->size, FsdpTopoShard(topo)->size,
                               FsdpTopoRanksPerNode(topo)};
  FSDP_GOTO(WriteAttributes(g, file, model, optim, written_topo, CountParams(rt), meta,
                            opt ? FsdpOptimStepCount(opt) : 0, tmp));
  if (g->agreed) goto done;
  if (StageCreate(rt, opt, 1) != FSDP_SUCCESS)
    SaveFail(g, 0, "staging the shards of %s in host memory failed", path);
  else
    staged = 1;
  SAVE_AGREE(g);
  FSDP_GOTO(WriteTensors(g, file, rt, opt, dxpl, tmp));
  if (g->agreed) goto done;
  FsdpMsgf(what, sizeof what, "closing the groups of %s", tmp);
  SAVE_HDF5(g, what, FsdpHdf5Close(&model));
  SAVE_HDF5(g, what, FsdpHdf5Close(&optim));
  SAVE_AGREE(g);
  /* H5Fclose is collective and completes every rank's writes; the
   * metadata it flushes finds room ([Note: failed saves]) */
  if (g->rank == 0) FreeHeadroom(tmp);
  FSDP_CALL_MPI(MPI_Barrier(g->comm));
  FsdpMsgf(what, sizeof what, "closing %s (flushing its metadata)", tmp);
  errno = 0;
  herr_t cr = H5Fclose(file);
  file = -1;
  if (cr >= 0 && InjectedFault(g, "close", 0)) {
    errno = ENOSPC;
    cr = -1;
  }
  if (cr < 0) SaveFailHdf5(g, what);
  SAVE_AGREE(g);
  if (g->rank == 0) Publish(g, tmp, path);
  SAVE_AGREE(g);
done:
  if (staged && StageDestroy(rt, opt, 0) != FSDP_SUCCESS && !err) err = FSDP_ERR_MEM;
  FsdpHdf5Close(&grp);
  FsdpHdf5Close(&model);
  FsdpHdf5Close(&optim);
  if (g->agreed && file >= 0 && open_everywhere) {
    /* room for the metadata the close flushes, then close together */
    if (g->rank == 0 && truncate(tmp, 0) != 0 && errno != ENOENT)
      FsdpWarn(0, "cannot truncate %s: %s", tmp, strerror(errno));
    if (g->rank == 0) FreeHeadroom(tmp);
    if (MPI_Barrier(g->comm) != MPI_SUCCESS && !err) err = FSDP_ERR_MPI;
  }
  if (g->rank == 0) FreeHeadroom(tmp);
  if (open_everywhere || !g->agreed) FsdpHdf5Close(&file);
  FsdpHdf5Close(&dxpl);
  FsdpHdf5Close(&fapl);
  if (err) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  if (!g->agreed) return FSDP_SUCCESS;
  struct { char msg[2 * MSG_SIZE]; } r;
  memset(&r, 0, sizeof r);
  if (g->rank == 0) {
    char cleanup[4400] = "No temporary file was left";
    if (tmp[0] && unlink(tmp) != 0 && errno != ENOENT)
      FsdpMsgf(cleanup, sizeof cleanup, "removing the temporary file %s failed: %s", tmp,
           strerror(errno));
    else if (tmp[0])
      FsdpMsgf(cleanup, sizeof cleanup, "The temporary file was removed");
    DescribeFailure(g, path, need, cleanup, r.msg, sizeof r.msg);
  }
  FSDP_CALL_MPI(MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, 0, g->comm));
  *failed = g->why.nonfinite ? 2 : 1;
  snprintf(msg, size, "%s", r.msg);
  return FSDP_SUCCESS;
}

int FsdpCkptSave(FsdpRuntime rt, FsdpOptim opt, const char *path, const FsdpCkptMeta *meta)
{
  char msg[2 * MSG_SIZE];
  int failed = 0;
  FSDP_CALL(SaveGuarded(rt, opt, path, meta, &failed, msg, sizeof msg));
  /* every rank holds the same verdict: one message, no hang ([Note: usage errors]) */
  if (failed) FSDP_ERROR(FSDP_ERR_USAGE, "%s", msg);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* streamed writing ([Note: streamed checkpoints])                     */

struct FsdpCkptWriter_ {
  char path[4200];
  hid_t file, groups[NKINDS], zero_dcpl, data_dcpl, dset, fspace;
  FsdpParamSpec spec; /* the parameter between Begin and End */
  int64_t done;       /* its elements written so far */
  int open;           /* Begin without End */
  int nparams, written;
};

void FsdpCkptWriterAbort(FsdpCkptWriter *pw)
{
  FsdpCkptWriter w = *pw;
  if (!w) return;
  FsdpHdf5Close(&w->dset);
  FsdpHdf5Close(&w->fspace);
  for (int k = 0; k < NKINDS; k++) FsdpHdf5Close(&w->groups[k]);
  FsdpHdf5Close(&w->zero_dcpl);
  FsdpHdf5Close(&w->data_dcpl);
  FsdpHdf5Close(&w->file);
  free(w);
  *pw = NULL;
}

int FsdpCkptWriterCreate(const char *path, const FsdpCkptMeta *meta, int nparams,
                         FsdpCkptWriter *out)
{
  FsdpHdf5Init();
  *out = NULL;
  for (int k = 0; k < meta->model.nattrs; k++)
    if (IsModelGroupAttr(meta->model.attr[k].name))
      FSDP_ERROR(FSDP_ERR_INTERNAL, "model attribute %s would overwrite the /model attribute of "
                 "that name (ckpt.h)", meta->model.attr[k].name);
  FsdpCkptWriter w = calloc(1, sizeof *w);
  FSDP_CHECK_ALLOC(w, sizeof *w);
  w->file = w->zero_dcpl = w->data_dcpl = w->dset = w->fspace = -1;
  for (int k = 0; k < NKINDS; k++) w->groups[k] = -1;
  w->nparams = nparams;
  snprintf(w->path, sizeof w->path, "%s", path);
  int err = FSDP_SUCCESS;
  hid_t optim = -1;
  const float zero = 0.0f;
  /* the moments are zero: HDF5 writes the fill value when it allocates
   * (a fixed-size fill buffer), so no moment ever sits in memory.  They
   * are allocated and filled, not left unallocated (1/3 of the file):
   * FsdpCkptLoad's collective read of a never-written dataset hung on 2
   * ranks (OpenMPI, HDF5 1.14) when that was tried */
  FSDP_HDF5_GOTO(w->zero_dcpl = H5Pcreate(H5P_DATASET_CREATE));
  FSDP_HDF5_GOTO(H5Pset_fill_value(w->zero_dcpl, H5T_NATIVE_FLOAT, &zero));
  FSDP_HDF5_GOTO(H5Pset_alloc_time(w->zero_dcpl, H5D_ALLOC_TIME_EARLY));
  FSDP_HDF5_GOTO(H5Pset_fill_time(w->zero_dcpl, H5D_FILL_TIME_ALLOC));
  /* parameters: every element gets written, as in a save */
  FSDP_HDF5_GOTO(w->data_dcpl = H5Pcreate(H5P_DATASET_CREATE));
  FSDP_HDF5_GOTO(H5Pset_fill_time(w->data_dcpl, H5D_FILL_TIME_NEVER));
  FSDP_HDF5_GOTO(w->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  FSDP_HDF5_GOTO(w->groups[KIND_PARAM] = H5Gcreate2(w->file, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  FSDP_HDF5_GOTO(optim = H5Gcreate2(w->file, "/optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  for (int k = 1; k < NKINDS; k++)
    FSDP_HDF5_GOTO(w->groups[k] = H5Gcreate2(w->file, kKindGroup[k], H5P_DEFAULT, H5P_DEFAULT,
                                             H5P_DEFAULT));
  /* the save's attribute writer, on one rank: a W = F = G = 1 file */
  SaveGuard g;
  memset(&g, 0, sizeof g);
  g.comm = MPI_COMM_SELF;
  const int topo[3] = {1, 1, 1};
  FSDP_GOTO(WriteAttributes(&g, w->file, w->groups[KIND_PARAM], optim, topo, nparams, meta, 0, path));
  if (g.failed) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "%s", g.why.what);
    goto done;
  }
done:
  FsdpHdf5Close(&optim);
  if (err) {
    FsdpCkptWriterAbort(&w);
    return err;
  }
  *out = w;
  return FSDP_SUCCESS;
}

int FsdpCkptWriterBegin(FsdpCkptWriter w, const FsdpParamSpec *spec)
{
  if (w->open) FSDP_ERROR(FSDP_ERR_STATE, "FsdpCkptWriterBegin(%s) before the end of %s", spec->name,
                          w->spec.name);
  w->spec = *spec;
  w->done = 0;
  FSDP_CALL_HDF5(w->fspace = CreateSpace(spec));
  for (int k = NKINDS - 1; k >= 0; k--) {
    hid_t d;
    FSDP_CALL_HDF5(d = H5Dcreate2(w->groups[k], spec->name, H5T_IEEE_F32LE, w->fspace, H5P_DEFAULT,
                                  k == KIND_PARAM ? w->data_dcpl : w->zero_dcpl, H5P_DEFAULT));
    if (k == KIND_PARAM) w->dset = d;
    else FSDP_CALL_HDF5(H5Dclose(d));
  }
  w->open = 1;
  return FSDP_SUCCESS;
}

int FsdpCkptWriterWrite(FsdpCkptWriter w, int64_t start, int64_t count, const float *data)
{
  if (!w->open || start != w->done || count < 0 || start + count > FlatParamSpecNumel(&w->spec))
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpCkptWriterWrite: elements %lld..%lld of %s out of order",
               (long long)start, (long long)(start + count), w->spec.name);
  if (count == 0) return FSDP_SUCCESS;
  hid_t ms = MemSpace(count);
  herr_t rc = ms < 0 ? -1 : SelectFlat(w->fspace, &w->spec, start, count);
  if (rc >= 0) rc = H5Dwrite(w->dset, H5T_NATIVE_FLOAT, ms, w->fspace, H5P_DEFAULT, data);
  if (ms >= 0) H5Sclose(ms);
  if (rc < 0) {
    char why[600];
    FsdpHdf5ErrorSummary(why, sizeof why);
    FSDP_ERROR(FSDP_ERR_IO, "writing /model/%s to %s failed: %s", w->spec.name, w->path, why);
  }
  w->done += count;
  return FSDP_SUCCESS;
}

int FsdpCkptWriterEnd(FsdpCkptWriter w)
{
  if (!w->open || w->done != FlatParamSpecNumel(&w->spec))
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpCkptWriterEnd: %lld of %lld elements of %s written",
               (long long)w->done, (long long)FlatParamSpecNumel(&w->spec), w->spec.name);
  FSDP_CALL_HDF5(FsdpHdf5Close(&w->dset));
  FSDP_CALL_HDF5(FsdpHdf5Close(&w->fspace));
  w->open = 0;
  w->written++;
  return FSDP_SUCCESS;
}

int FsdpCkptWriterClose(FsdpCkptWriter *pw)
{
  FsdpCkptWriter w = *pw;
  if (!w) return FSDP_SUCCESS;
  if (w->open || w->written != w->nparams) {
    int n = w->written, want = w->nparams;
    FsdpCkptWriterAbort(pw);
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpCkptWriterClose: %d of %d parameters written", n, want);
  }
  hid_t f = w->file;
  w->file = -1;
  char path[sizeof w->path];
  memcpy(path, w->path, sizeof path);
  FsdpCkptWriterAbort(pw); /* closes the groups and lists */
  if (H5Fclose(f) < 0) {
    char why[600];
    FsdpHdf5ErrorSummary(why, sizeof why);
    FSDP_ERROR(FSDP_ERR_IO, "closing checkpoint %s failed: %s", path, why);
  }
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* load                                                                */

static int ReadTensors(hid_t file, FsdpRuntime rt, FsdpOptim opt, hid_t dxpl)
{
  int err = FSDP_SUCCESS;
  hid_t groups[NKINDS] = {-1, -1, -1};
  int nkinds = opt ? NKINDS : 1;
  for (int k = 0; k < nkinds; k++) FSDP_HDF5_GOTO(groups[k] = H5Gopen2(file, kKindGroup[k], H5P_DEFAULT));
  for (int u = 0; u < FsdpRuntimeNumUnits(rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(rt, u);
    const FlatParamPiece *pc;
    int npc;
    FSDP_GOTO(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &npc));
    int64_t S = FlatParamShardNumel(fp);
    /* padding is zero; pieces overwrite the rest */
    for (int k = 0; k < nkinds; k++) {
      float *shard = KindShard(rt, opt, k, u);
      if (shard && S > 0) memset(shard, 0, (size_t)S * sizeof *shard);
    }
    for (int p = 0; p < FlatParamNumParams(fp); p++) {
      const FsdpParamSpec *spec = FlatParamSpec(fp, p);
      int64_t start, count, off;
      PieceRange(pc, npc, p, 0, S, &start, &count, &off);
      for (int k = 0; k < nkinds; k++) {
        float *shard = KindShard(rt, opt, k, u);
        FSDP_GOTO(ReadTensor(groups[k], spec->name, spec, dxpl, shard ? shard + off : NULL, start,
                             count));
      }
    }
  }
done:
  for (int k = 0; k < NKINDS; k++) FsdpHdf5Close(&groups[k]);
  return err;
}

int FsdpCkptLoad(FsdpRuntime rt, FsdpOptim opt, const char *path, const FsdpModelDesc *expect,
                 FsdpCkptMeta *meta)
{
  FsdpHdf5Init();
  MPI_Comm comm = WorldComm(rt);
  FsdpCkptMeta m;
  /* [Note: checkpoint validation] */
  FSDP_CALL(AgreeOnFile(comm, rt, opt != NULL, path, expect, &m));
  int err = FSDP_SUCCESS;
  hid_t fapl = -1, dxpl = -1, file = -1;
  FSDP_GOTO(ParallelAccess(comm, &fapl, &dxpl));
  FSDP_HDF5_GOTO(file = H5Fopen(path, H5F_ACC_RDONLY, fapl));
  FSDP_GOTO(StageCreate(rt, opt, 0));
  err = ReadTensors(file, rt, opt, dxpl);
  {
    int serr = StageDestroy(rt, opt, err == FSDP_SUCCESS);
    if (!err) err = serr;
  }
  if (err) goto done;
  if (opt) FsdpOptimSetStepCount(opt, m.optim_step);
  if (meta) *meta = m;
done:
  FsdpHdf5Close(&file);
  FsdpHdf5Close(&dxpl);
  FsdpHdf5Close(&fapl);
  return err;
}

int FsdpCkptReadMeta(MPI_Comm comm, const char *path, FsdpCkptMeta *meta)
{
  FsdpHdf5Init();
  FSDP_CALL(AgreeOnFile(comm, NULL, 0, path, NULL, meta));
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* directories                                                         */

int FsdpCkptPath(const char *dir, int64_t step, char *buf, size_t size)
{
  int n = snprintf(buf, size, "%s/ckpt_%08lld.h5", dir, (long long)step);
  if (n < 0 || (size_t)n >= size)
    FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint directory name %s is too long", dir);
  return FSDP_SUCCESS;
}

/* Step of a file named exactly ckpt_<digits>.h5, or -1. */
static int64_t ParseCkptName(const char *name)
{
  if (strncmp(name, "ckpt_", 5) != 0) return -1;
  const char *p = name + 5;
  int64_t step = 0;
  int digits = 0;
  while (*p >= '0' && *p <= '9' && digits < 18) {
    step = step * 10 + (*p - '0');
    p++;
    digits++;
  }
  if (digits == 0 || strcmp(p, ".h5") != 0) return -1;
  return step;
}

static int IsTempName(const char *name)
{
  return strncmp(name, "ckpt_", 5) == 0 && strstr(name, ".h5.tmp-") != NULL;
}

int FsdpCkptIsOwnName(const char *name) { return ParseCkptName(name) >= 0 || IsTempName(name); }

typedef struct {
  int64_t step;
  char name[256];
} Entry;

static int EntryCmpDesc(const void *a, const void *b)
{
  int64_t x = ((const Entry *)a)->step, y = ((const Entry *)b)->step;
  return x < y ? 1 : (x > y ? -1 : 0);
}

/* Complete checkpoints of dir sorted newest first (*n = 0, *list NULL when
 * dir does not exist).  Rank-local. */
static int ListCheckpoints(const char *dir, Entry **list, int *n)
{
  *list = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return FSDP_SUCCESS;
  size_t cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int64_t step = ParseCkptName(e->d_name);
    if (step < 0 || strlen(e->d_name) >= sizeof((*list)->name)) continue;
    if (FsdpArrayReserve(list, &cap, (size_t)*n + 1, sizeof **list)) {
      closedir(d);
      free(*list);
      *list = NULL;
      FSDP_ERROR(FSDP_ERR_MEM, "out of memory listing %s", dir);
    }
    (*list)[*n].step = step;
    snprintf((*list)[*n].name, sizeof(*list)->name, "%s", e->d_name);
    (*n)++;
  }
  closedir(d);
  if (*n > 1) qsort(*list, (size_t)*n, sizeof **list, EntryCmpDesc);
  return FSDP_SUCCESS;
}

/* Quick validity check: opens as HDF5 and carries a readable format. */
static int QuickCheck(const char *path, char *msg, size_t size)
{
  hid_t f = OpenSerial(path, msg, size);
  if (f < 0) return 1;
  int64_t v = 0;
  int bad = 0;
  if (FsdpHdf5AttrReadInt64(f, "format_version", &v) < 0 || v < 1 || v > FSDP_CKPT_VERSION) {
    FsdpMsgf(msg, size, "checkpoint %s has no format version this build reads", path);
    bad = 1;
  }
  H5Fclose(f);
  return bad;
}

/* FsdpCkptFindResumable's check: every attribute, both groups, every
 * value ([Note: finite checkpoints]).  0, or 1 with msg. */
static int VerifyCheck(const char *path, char *msg, size_t size, int *err)
{
  FsdpCkptReport *r = calloc(1, sizeof *r);
  if (!r) {
    *err = FSDP_ERR_MEM;
    return 1;
  }
  *err = FsdpCkptCheck(path, NULL, NULL,
                       FSDP_CKPT_CHECK_MODEL | FSDP_CKPT_CHECK_OPTIM | FSDP_CKPT_CHECK_VALUES, NULL,
                       r);
  int bad = r->finding != FSDP_CKPT_GOOD;
  if (bad) FsdpCkptReportString(r, path, msg, size);
  free(r);
  return bad || *err;
}

/* Not collective: the newest checkpoint of dir passing QuickCheck (with
 * verify: VerifyCheck) into path (*found = 0 when none); warns about the
 * ones it skips. */
static int NewestValid(const char *dir, int verify, char *path, size_t size, int *found)
{
  Entry *list = NULL;
  int n = 0;
  *found = 0;
  int err = ListCheckpoints(dir, &list, &n);
  for (int i = 0; i < n && !err; i++) {
    char p[4096], msg[MSG_SIZE];
    snprintf(p, sizeof p, "%s/%s", dir, list[i].name);
    if (QuickCheck(p, msg, sizeof msg) == 0 && (!verify || VerifyCheck(p, msg, sizeof msg, &err) == 0)) {
      *found = 1;
      snprintf(path, size, "%s", p);
      break;
    }
    FsdpWarn(0, "skipping %s (%s)", p, msg);
  }
  free(list);
  return err;
}

/* Collective on comm: FsdpCkptFindLatest, or with verify
 * FsdpCkptFindResumable. */
static int FindNewest(MPI_Comm comm, const char *dir, int verify, char *path, size_t size,
                      int *found)
{
  FsdpHdf5Init();
  int rank;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  struct { int err, found; char path[4096]; } r;
  memset(&r, 0, sizeof r);
  if (rank == 0) r.err = NewestValid(dir, verify, r.path, sizeof r.path, &r.found);
  FSDP_CALL_MPI(MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, 0, comm));
  if (r.err) FSDP_ERROR(r.err, "listing checkpoints in %s failed", dir);
  if (strlen(r.path) >= size) FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint path %s is too long", r.path);
  snprintf(path, size, "%s", r.path);
  *found = r.found;
  return FSDP_SUCCESS;
}

int FsdpCkptFindLatest(MPI_Comm comm, const char *dir, char *path, size_t size, int *found)
{
  FSDP_CALL(FindNewest(comm, dir, 0, path, size, found));
  return FSDP_SUCCESS;
}

int FsdpCkptFindResumable(MPI_Comm comm, const char *dir, char *path, size_t size, int *found)
{
  FSDP_CALL(FindNewest(comm, dir, 1, path, size, found));
  return FSDP_SUCCESS;
}

/* FsdpCkptWriteStep's pruning (ckpt.h), never deleting the file named
 * `protect`. */
static int PruneExcept(MPI_Comm comm, const char *dir, int keep, const char *protect)
{
  FsdpHdf5Init();
  int rank;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  int err = FSDP_SUCCESS;
  if (rank == 0) {
    Entry *list = NULL;
    int n = 0;
    err = ListCheckpoints(dir, &list, &n);
    char p[4096], msg[MSG_SIZE];
    int valid = 0;
    for (int i = 0; i < n && !err; i++) {
      snprintf(p, sizeof p, "%s/%s", dir, list[i].name);
      if (protect && strcmp(p, protect) == 0) {
        valid++;
        continue;
      }
      /* files that fail the check are not ours to judge: leave them */
      if (QuickCheck(p, msg, sizeof msg) != 0) continue;
      if (keep <= 0 || ++valid <= keep) continue;
      if (unlink(p) != 0) FsdpWarn(0, "cannot delete old checkpoint %s: %s", p, strerror(errno));
    }
    free(list);
    /* leftovers of interrupted saves ([Note: atomic checkpoints]) */
    DIR *d = err ? NULL : opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (!IsTempName(e->d_name)) continue;
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (unlink(p) != 0) FsdpWarn(0, "cannot delete %s: %s", p, strerror(errno));
    }
    if (d) closedir(d);
  }
  FSDP_CALL_MPI(MPI_Bcast(&err, 1, MPI_INT, 0, comm));
  if (err) FSDP_ERROR(err, "pruning checkpoints in %s failed", dir);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* options and the periodic checkpoint                                 */

int FsdpCkptOptionsFromDb(FsdpOpts db, FsdpCkptOptions *o)
{
  memset(o, 0, sizeof *o);
  const char *g = "Checkpoint";
  int64_t v;
  FSDP_CALL(FsdpOptsGetString(db, g, "checkpoint_dir",
                              "directory of checkpoints ckpt_<step>.h5 (checked at start-up; one "
                              "job at a time: locked through its .fsdp.lock)",
                              "checkpoints", &o->dir));
  if (!o->dir || !o->dir[0]) FSDP_ERROR(FSDP_ERR_USAGE, "option -checkpoint_dir: empty directory name");
  FSDP_CALL(FsdpOptsGetInt(db, g, "checkpoint_every",
                           "write a checkpoint after every K-th step (0 = never)", 0, 0,
                           INT64_MAX / 4, &o->every));
  FSDP_CALL(FsdpOptsGetInt(db, g, "checkpoint_keep",
                           "keep the N newest checkpoints, delete older ones (0 = keep all)", 0, 0,
                           1 << 30, &v));
  o->keep = (int)v;
  FSDP_CALL(FsdpOptsGetString(db, g, "resume",
                              "resume from a checkpoint FILE, or auto: the newest one in "
                              "-checkpoint_dir that passes verification (others are skipped and "
                              "named; none: start fresh)",
                              NULL, &o->resume));
  if (o->resume && !o->resume[0]) o->resume = NULL;
  static const char *const on_error_names[] = {"stop", "continue", NULL};
  int idx = 0;
  FSDP_CALL(FsdpOptsGetEnum(db, g, "checkpoint_on_error",
                            "when a checkpoint cannot be saved (disk full, I/O error): stop the "
                            "job, or continue: warn and train on without it",
                            on_error_names, 0, &idx));
  o->on_error = idx ? FSDP_CKPT_ON_ERROR_CONTINUE : FSDP_CKPT_ON_ERROR_STOP;
  FSDP_CALL(FsdpOptsGetInt(db, g, "checkpoint_test_abort",
                           "testing: abort the job after writing N datasets of a checkpoint (0 = off)",
                           0, 0, INT64_MAX / 4, &o->test_abort));
  return FSDP_SUCCESS;
}

int FsdpCkptResolveResume(MPI_Comm comm, const FsdpCkptOptions *o, char *path, size_t size,
                          int *found)
{
  *found = 0;
  if (size) path[0] = '\0';
  if (o->resume && strcmp(o->resume, "auto") == 0) {
    FSDP_CALL(FsdpCkptFindResumable(comm, o->dir, path, size, found));
    return FSDP_SUCCESS;
  }
  if (o->resume) {
    if (strlen(o->resume) >= size) FSDP_ERROR(FSDP_ERR_USAGE, "option -resume: path too long");
    snprintf(path, size, "%s", o->resume);
    *found = 1;
    return FSDP_SUCCESS;
  }
  if (o->every > 0) {
    char latest[4096];
    int have = 0;
    FSDP_CALL(FsdpCkptFindLatest(comm, o->dir, latest, sizeof latest, &have));
    if (have)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "checkpoint directory %s already holds checkpoints (newest: %s): continue that "
                 "run with -resume auto, or choose another -checkpoint_dir",
                 o->dir, latest);
  }
  return FSDP_SUCCESS;
}

int FsdpCkptWriteStep(FsdpRuntime rt, FsdpOptim opt, const FsdpCkptOptions *o,
                      const FsdpCkptMeta *meta, char *path, size_t size, double *seconds,
                      int *nonfinite)
{
  if (nonfinite) *nonfinite = 0;
  MPI_Comm comm = WorldComm(rt);
  double t0 = MPI_Wtime();
  int rank;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));
  char p[4096];
  FSDP_CALL(FsdpCkptPath(o->dir, meta->step, p, sizeof p));
  struct { int failed; char msg[2 * MSG_SIZE]; } r;
  memset(&r, 0, sizeof r);
  if (rank == 0 && FsdpMakeDirs(o->dir) != 0) {
    r.failed = 1;
    FsdpMsgf(r.msg, sizeof r.msg, "checkpoint %s was not saved: cannot create the directory %s: %s", p,
         o->dir, strerror(errno));
  }
  FSDP_CALL_MPI(MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, 0, comm));
  if (o->test_abort > 0) FsdpCkptSetTestAbort(o->test_abort);
  if (!r.failed) FSDP_CALL(SaveGuarded(rt, opt, p, meta, &r.failed, r.msg, sizeof r.msg));
  if (seconds) *seconds = MPI_Wtime() - t0;
  if (r.failed == 2) { /* [Note: finite checkpoints]: training on would not help */
    if (nonfinite) *nonfinite = 1;
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s. The run stops: lower -lr or clip gradients (-grad_clip), and continue from "
               "the newest good checkpoint with -resume auto",
               r.msg);
  }
  if (r.failed && o->on_error == FSDP_CKPT_ON_ERROR_CONTINUE) {
    /* every rank knows; one warns */
    FsdpWarn(1, "%s. Training goes on (-checkpoint_on_error continue)", r.msg);
    if (path && size) path[0] = '\0';
    return FSDP_SUCCESS;
  }
  if (r.failed)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s. Free space or choose another -checkpoint_dir and continue with -resume auto "
               "(or train on without checkpoints that fail: -checkpoint_on_error continue)",
               r.msg);
  FSDP_CALL(PruneExcept(comm, o->dir, o->keep, p));
  if (path && size) snprintf(path, size, "%s", p);
  if (seconds) *seconds = MPI_Wtime() - t0;
  return FSDP_SUCCESS;
}
