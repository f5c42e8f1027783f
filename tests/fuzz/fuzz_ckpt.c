/* fuzz_ckpt: checkpoint validation (lib/io/ckpt.c: the attributes and the
 * dataset shapes of a file against the model) on checkpoints edited by
 * the input.
 *
 * Fuzzing the bytes of an HDF5 file would mostly exercise HDF5's own
 * parser; what fsdp owns is how it reads and checks attributes and
 * datasets.  So the input is a program of edits applied, through the HDF5
 * API, to a valid checkpoint of a tiny model (written once at start):
 * set an attribute of the root, /model or /optim to a value of any type
 * and shape (scalar, 0-4 elements, null), delete one, delete or replace a
 * parameter's dataset with one of another type or shape, add extra
 * entries, remove or replace whole groups; set a root or /optim integer
 * attribute to one of the values that broke resumes (a negative step,
 * data position or step count, 2^62, a world size of 0, ...); put a NaN
 * or an infinity into one element of a dataset.  Then FsdpCkptReadMeta
 * and FsdpCkptLoad must answer with success or a usage error, and a file
 * they accept must really hold the model's configuration, attributes in
 * range and consistent ([Note: checkpoint attributes] in ckpt.h) and
 * leave only finite values in the shards ([Note: finite checkpoints]). */
#include <math.h>
#include <hdf5.h>
#include <string.h>

#include "io/ckpt.h"
#include "fuzz.h"
#include "io/h5util.h"
#include "libfsdp.h"

static const GptConfig kCfg = {1, 8, 2, 11, 4};
static FsdpTopo g_topo;
static FsdpColl g_coll;
static GptModel g_model;
static FsdpModelDesc g_desc; /* what the model gives checkpoints */
static FsdpRuntime g_rt;
static FsdpOptim g_opt;
static uint8_t *g_base; /* the valid checkpoint's bytes */
static size_t g_base_size;
static const char *g_params[64]; /* parameter names of the model */
static int g_nparams;

#define SETUP(call)                                                   \
  do {                                                                \
    if ((call) != FSDP_SUCCESS) {                                     \
      fprintf(stderr, "fuzz_ckpt: setup: %s failed: %s\n", #call,     \
              FsdpErrorLastMessage());                                \
      abort();                                                        \
    }                                                                 \
  } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  fuzz_init(argc, argv, "ckpt");
  FsdpHdf5Init();
  FsdpTopoOptions to = {0};
  FsdpRuntimeOptions ro = {0};
  ro.reshard_after_forward = 1;
  ro.limit_all_gathers = 2;
  ro.prefetch = FSDP_PREFETCH_NONE;
  FsdpOptimOptions oo;
  memset(&oo, 0, sizeof oo);
  oo.lr = 1e-3;
  oo.beta1 = 0.9;
  oo.beta2 = 0.95;
  oo.eps = 1e-8;
  oo.total_steps = 10;
  SETUP(FsdpTopoCreate(MPI_COMM_WORLD, &to, &g_topo));
  SETUP(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &g_coll));
  SETUP(GptModelCreate(&kCfg, 1, 1, kCfg.seq_len, FsdpKernelsCpu(), 1, &g_model));
  SETUP(FsdpRuntimeCreate(g_topo, g_coll, &ro, &g_rt));
  SETUP(FsdpRuntimeAddModel(g_rt, GptModelTable(g_model)));
  SETUP(FsdpRuntimeSetUp(g_rt));
  SETUP(FsdpOptimCreate(g_rt, FsdpKernelsCpu(), &oo, GptParamDecays, &g_opt));
  for (int u = 0; u < FsdpRuntimeNumUnits(g_rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(g_rt, u);
    for (int p = 0; p < FlatParamNumParams(fp) && g_nparams < 64; p++)
      g_params[g_nparams++] = FlatParamSpec(fp, p)->name;
  }
  FsdpCkptMeta m;
  memset(&m, 0, sizeof m);
  m.step = 3;
  m.data_position = 3;
  m.global_batch = 4;
  SETUP(GptConfigDescribe(&kCfg, "custom", &g_desc));
  m.model = g_desc;
  m.optim = oo;
  char base[300];
  snprintf(base, sizeof base, "%s.base", fuzz_path);
  SETUP(FsdpCkptSave(g_rt, g_opt, base, &m));
  FILE *f = fopen(base, "rb");
  FUZZ_REQUIRE(f && fseek(f, 0, SEEK_END) == 0, "cannot read %s", base);
  g_base_size = (size_t)ftell(f);
  g_base = malloc(g_base_size);
  rewind(f);
  FUZZ_REQUIRE(g_base && fread(g_base, 1, g_base_size, f) == g_base_size, "read %s", base);
  fclose(f);
  unlink(base);
  return 0;
}

/* The input, read a byte at a time (zeros when it runs out). */
typedef struct {
  const uint8_t *p;
  size_t n, at;
} Input;

static unsigned next(Input *in) { return in->at < in->n ? in->p[in->at++] : 0; }

static const char *const kObjects[] = {"/", "/model", "/optim"};
static const char *const kAttrs[] = {
    "format_version", "step", "data_position", "seed", "global_batch", "world_size",
    "sharding_factor", "ranks_per_node", "created", "program", "name", "n_layer", "n_embd",
    "n_head", "vocab_size", "seq_len", "num_parameters", "type", "step_count", "lr",
    "warmup", "total_steps", "decay_embeddings", "extra"};
static const char *const kGroups[] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq", "/optim",
                                      "/"};
#define COUNT(a) ((unsigned)(sizeof(a) / sizeof((a)[0])))

/* Set attribute `name` of obj to a value of the input's choosing. */
static void set_attr(hid_t file, Input *in)
{
  hid_t obj = H5Oopen(file, kObjects[next(in) % COUNT(kObjects)], H5P_DEFAULT);
  const char *name = kAttrs[next(in) % COUNT(kAttrs)];
  unsigned kind = next(in) % 6, shape = next(in) % 7;
  if (obj < 0) return;
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hsize_t n = shape < 5 ? shape : 1;
  hid_t space = shape == 5 ? H5Screate(H5S_SCALAR)
                : shape == 6 ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, NULL);
  size_t len = 1 + next(in) % 16;
  hid_t type = kind == 0 ? H5Tcopy(H5T_NATIVE_INT64)
               : kind == 1 ? H5Tcopy(H5T_NATIVE_INT32)
               : kind == 2 ? H5Tcopy(H5T_NATIVE_UINT64)
               : kind == 3 ? H5Tcopy(H5T_NATIVE_DOUBLE) : H5Tcopy(H5T_C_S1);
  if (kind == 4) H5Tset_size(type, len);
  if (kind == 5) H5Tset_size(type, H5T_VARIABLE);
  uint8_t buf[4 * 16];
  char strings[4][17];
  char *vlen[4];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)next(in);
  for (int i = 0; i < 4; i++) {
    memcpy(strings[i], buf + 16 * i, 16);
    strings[i][16] = '\0';
    vlen[i] = strings[i];
  }
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0 && shape != 6) H5Awrite(a, type, kind == 5 ? (void *)vlen : (void *)buf);
  if (a >= 0) H5Aclose(a);
  H5Tclose(type);
  H5Sclose(space);
  H5Oclose(obj);
}

/* A dataset `name` in group g of the input's type and shape. */
static void make_dataset(hid_t g, const char *name, Input *in)
{
  static const hid_t *const types[] = {&H5T_NATIVE_FLOAT_g, &H5T_NATIVE_DOUBLE_g,
                                       &H5T_NATIVE_INT_g, &H5T_NATIVE_UCHAR_g};
  hid_t type = *types[next(in) % 4];
  int rank = (int)(next(in) % 4);
  hsize_t dims[3] = {1, 1, 1};
  for (int k = 0; k < rank; k++) dims[k] = 1 + next(in) % 40;
  hid_t space = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(g, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d >= 0) H5Dclose(d);
  H5Sclose(space);
}

/* Set integer attribute `name` of the root or /optim to a value from a
 * table of the ones that matter ([Note: checkpoint attributes]). */
static void set_int_attr(hid_t file, Input *in)
{
  static const char *const names[] = {"step", "data_position", "seed", "global_batch",
                                      "world_size", "sharding_factor", "ranks_per_node",
                                      "step_count"};
  static const int64_t values[] = {-7, -1, 0, 1, 2, 3, 4, 5, 100, (int64_t)1 << 20,
                                   ((int64_t)1 << 20) * 3 + 1, (int64_t)1 << 62, INT64_MIN,
                                   INT64_MAX, -100, 17};
  const char *name = names[next(in) % COUNT(names)];
  int64_t v = values[next(in) % COUNT(values)];
  hid_t obj = H5Oopen(file, strcmp(name, "step_count") == 0 ? "/optim" : "/", H5P_DEFAULT);
  if (obj < 0) return;
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  FsdpHdf5AttrWriteInt64(obj, name, v);
  H5Oclose(obj);
}

/* Put a NaN or an infinity into one element of a parameter's dataset. */
static void set_nonfinite(hid_t file, Input *in)
{
  static const float values[] = {NAN, INFINITY, -INFINITY};
  hid_t g = H5Gopen2(file, kGroups[next(in) % 3], H5P_DEFAULT);
  const char *name = g_params[next(in) % (unsigned)g_nparams];
  unsigned at = next(in) * 256u + next(in);
  float v = values[next(in) % 3];
  hid_t d = g >= 0 ? H5Dopen2(g, name, H5P_DEFAULT) : -1;
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  hssize_t n = s >= 0 ? H5Sget_simple_extent_npoints(s) : 0;
  if (n > 0 && H5Dget_storage_size(d) > 0) {
    float *buf = malloc((size_t)n * sizeof *buf);
    if (buf && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0) {
      buf[at % (unsigned)n] = v;
      H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    }
    free(buf);
  }
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  if (g >= 0) H5Gclose(g);
}

static void edit(hid_t file, Input *in)
{
  unsigned op = next(in);
  /* the two edits added last sit at the top of the byte, so that the
   * checked-in inputs keep their meaning */
  if (op >= 248) {
    if (op < 252) set_int_attr(file, in);
    else set_nonfinite(file, in);
    return;
  }
  switch (op % 6) {
  case 0:
    set_attr(file, in);
    break;
  case 1: { /* delete an attribute */
    const char *obj = kObjects[next(in) % COUNT(kObjects)];
    H5Adelete_by_name(file, obj, kAttrs[next(in) % COUNT(kAttrs)], H5P_DEFAULT);
    break;
  }
  case 2: { /* delete a parameter's dataset, maybe put another in its place */
    hid_t g = H5Gopen2(file, kGroups[next(in) % 3], H5P_DEFAULT);
    const char *name = g_params[next(in) % (unsigned)g_nparams];
    unsigned replace = next(in) & 1;
    if (g < 0) break;
    H5Ldelete(g, name, H5P_DEFAULT);
    if (replace) make_dataset(g, name, in);
    H5Gclose(g);
    break;
  }
  case 3: { /* an extra entry: a dataset or a group with the input's name */
    hid_t g = H5Gopen2(file, kGroups[next(in) % COUNT(kGroups)], H5P_DEFAULT);
    char name[9];
    unsigned len = 1 + next(in) % 8;
    for (unsigned i = 0; i < len; i++) name[i] = (char)('a' + next(in) % 26);
    name[len] = '\0';
    unsigned group = next(in) & 1;
    if (g < 0) break;
    if (group) {
      hid_t c = H5Gcreate2(g, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (c >= 0) H5Gclose(c);
    } else {
      make_dataset(g, name, in);
    }
    H5Gclose(g);
    break;
  }
  case 4: /* remove a whole group */
    H5Ldelete(file, kGroups[next(in) % 4], H5P_DEFAULT);
    break;
  case 5: { /* a dataset where a group should be */
    const char *path = kGroups[next(in) % 4];
    H5Ldelete(file, path, H5P_DEFAULT);
    make_dataset(file, path, in);
    break;
  }
  }
}

/* A scalar integer attribute of the accepted file (it must have one). */
static int64_t accepted_int(hid_t f, const char *obj, const char *name)
{
  int64_t v = 0;
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  FUZZ_REQUIRE(o >= 0 && FsdpHdf5AttrReadInt64(o, name, &v) >= 0, "accepted without %s%s%s", obj,
               strcmp(obj, "/") ? "/" : "", name);
  H5Oclose(o);
  return v;
}

/* [Note: checkpoint attributes] and [Note: finite checkpoints] (ckpt.h):
 * what an accepted file records is in range and consistent, and what the
 * load put into the shards is finite. */
static void check_accepted_state(hid_t f, int with_optim)
{
  int64_t step = accepted_int(f, "/", "step"), pos = accepted_int(f, "/", "data_position");
  int64_t W = accepted_int(f, "/", "world_size"), F = accepted_int(f, "/", "sharding_factor");
  FUZZ_REQUIRE(step >= 0 && step <= FSDP_CKPT_MAX_STEP, "accepted step %lld", (long long)step);
  FUZZ_REQUIRE(pos >= step && pos / FSDP_CKPT_MAX_ACCUM <= step,
               "accepted data_position %lld at step %lld", (long long)pos, (long long)step);
  FUZZ_REQUIRE(W >= 1 && F >= 1 && F <= W && W % F == 0, "accepted world_size %lld, sharding_factor %lld",
               (long long)W, (long long)F);
  FUZZ_REQUIRE(accepted_int(f, "/", "ranks_per_node") >= 1, "accepted ranks_per_node < 1");
  FUZZ_REQUIRE(accepted_int(f, "/", "seed") >= 0, "accepted a negative seed");
  FUZZ_REQUIRE(accepted_int(f, "/", "global_batch") >= 0, "accepted a negative global_batch");
  if (with_optim) {
    int64_t t = FsdpOptimStepCount(g_opt);
    FUZZ_REQUIRE(t >= 0 && t <= step, "accepted step_count %lld at step %lld", (long long)t,
                 (long long)step);
  }
  for (int u = 0; u < FsdpRuntimeNumUnits(g_rt); u++) {
    int64_t n = FlatParamShardNumel(FsdpRuntimeUnitFlatParam(g_rt, u));
    const float *x[3] = {FsdpRuntimeUnitShard(g_rt, u), with_optim ? FsdpOptimExpAvg(g_opt, u) : NULL,
                         with_optim ? FsdpOptimExpAvgSq(g_opt, u) : NULL};
    for (int k = 0; k < 3; k++)
      for (int64_t i = 0; x[k] && i < n; i++)
        FUZZ_REQUIRE(isfinite(x[k][i]), "accepted a non-finite value (unit %d, tensor %d, element %lld)",
                     u, k, (long long)i);
  }
}

/* A file that Load accepted holds the model's configuration, as scalar
 * integer attributes of exactly the model's values, and the attributes
 * and values check_accepted_state checks. */
static void check_accepted(int with_optim)
{
  hid_t f = H5Fopen(fuzz_path, H5F_ACC_RDONLY, H5P_DEFAULT);
  FUZZ_REQUIRE(f >= 0, "an accepted checkpoint does not open");
  const char *names[] = {"n_layer", "n_embd", "n_head", "vocab_size", "seq_len"};
  const int want[] = {kCfg.n_layer, kCfg.n_embd, kCfg.n_head, kCfg.vocab_size, kCfg.seq_len};
  for (int i = 0; i < 5; i++) {
    hid_t a = H5Aopen_by_name(f, "/model", names[i], H5P_DEFAULT, H5P_DEFAULT);
    FUZZ_REQUIRE(a >= 0, "accepted without /model %s", names[i]);
    hid_t s = H5Aget_space(a);
    int64_t v = 0;
    FUZZ_REQUIRE(H5Sget_simple_extent_npoints(s) == 1 && H5Aread(a, H5T_NATIVE_INT64, &v) >= 0,
                 "accepted /model %s that is not one integer", names[i]);
    FUZZ_REQUIRE(v == want[i], "accepted /model %s = %lld, the model has %d", names[i],
                 (long long)v, want[i]);
    H5Sclose(s);
    H5Aclose(a);
  }
  check_accepted_state(f, with_optim);
  H5Fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  fuzz_write_file(g_base, g_base_size);
  Input in = {data, size, 0};
  unsigned flags = next(&in);
  hid_t f = H5Fopen(fuzz_path, H5F_ACC_RDWR, H5P_DEFAULT);
  FUZZ_REQUIRE(f >= 0, "the base checkpoint does not open");
  for (int k = 0; k < 16 && in.at < in.n; k++) edit(f, &in);
  FUZZ_REQUIRE(H5Fclose(f) >= 0, "closing the edited file");

  FsdpCkptMeta meta;
  FUZZ_USAGE_OR_SUCCESS(FsdpCkptReadMeta(MPI_COMM_WORLD, fuzz_path, &meta));
  int err = FsdpCkptLoad(g_rt, flags & 1 ? NULL : g_opt, fuzz_path, &g_desc, &meta);
  FUZZ_USAGE_OR_SUCCESS(err);
  if (err) {
    FUZZ_REQUIRE(strstr(FsdpErrorLastMessage(), fuzz_path) != NULL,
                 "message does not name the file: %s", FsdpErrorLastMessage());
    return 0;
  }
  check_accepted(!(flags & 1));
  return 0;
}
