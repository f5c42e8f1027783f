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
 * entries, remove or replace whole groups.  Then FsdpCkptReadMeta and
 * FsdpCkptLoad must answer with success or a usage error, and a file they
 * accept must really hold the model's configuration. */
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
  SETUP(GptModelRegister(g_model, g_rt));
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

static void edit(hid_t file, Input *in)
{
  switch (next(in) % 6) {
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

/* A file that Load accepted holds the model's configuration, as scalar
 * integer attributes of exactly the model's values. */
static void check_accepted(void)
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
  check_accepted();
  return 0;
}
