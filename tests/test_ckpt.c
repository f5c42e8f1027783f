/* test_ckpt: reshardable HDF5 checkpoints (lib/ckpt).
 *
 *   test_ckpt                  save at (W, F, G, wrap) and load at other
 *                              combinations on sub-communicators, bit-exact,
 *                              file layout and values through the HDF5 C
 *                              API, refused files (missing, truncated,
 *                              garbage, mismatched config, missing / extra
 *                              / reshaped parameter, no optimizer state,
 *                              newer format) with nothing modified,
 *                              directories (-resume auto, prune, temp
 *                              leftovers), options, a trained model
 *   test_ckpt crash DIR        write a checkpoint at step 5, then abort
 *                              the job in the middle of the step-10 one
 *                              (the job fails on purpose)
 *   test_ckpt after-crash DIR  the crashed job's directory: step 5 is the
 *                              newest complete checkpoint and loads; the
 *                              next save removes the leftover
 */
#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt.h"
#include "io/h5util.h"
#include "libfsdp.h"
#include "fsdp_test_model.h"
#include "testutil.h"

static int rank, W;

/* vocab 37 and n_embd 12: shards cut through rows of every 2-D parameter */
static const GptConfig kCfg = {2, 12, 2, 37, 8};

/* The description a model of cfg gives checkpoints (preset "custom"). */
static FsdpModelDesc describe(const GptConfig *cfg)
{
  FsdpModelDesc d;
  TCALL(GptConfigDescribe(cfg, "custom", &d));
  return d;
}

/* An int attribute of a description, -1 when it has none. */
static int64_t attr_int(const FsdpModelDesc *d, const char *name)
{
  const FsdpModelAttr *a = FsdpModelDescFind(d, name);
  return a && a->type == FSDP_MODEL_ATTR_INT ? a->i : -1;
}

typedef struct {
  FsdpTopo topo;
  FsdpColl coll;
  FsdpRuntime rt;
  GptModel model;
  FsdpOptim opt;
} Rig;

/* Collective on comm. */
static void rig_create(MPI_Comm comm, const GptConfig *cfg, int F, int G, int wrap, Rig *r)
{
  memset(r, 0, sizeof *r);
  FsdpTopoOptions to = {0};
  to.sharding_factor = F;
  to.ranks_per_node = G;
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
  oo.weight_decay = 0.1;
  oo.total_steps = 100;
  TCALL(FsdpTopoCreate(comm, &to, &r->topo));
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &r->coll));
  TCALL(GptModelCreate(cfg, wrap, 1, cfg->seq_len, FsdpKernelsCpu(), 1234, &r->model));
  TCALL(FsdpRuntimeCreate(r->topo, r->coll, &ro, &r->rt));
  TCALL(FsdpRuntimeAddModel(r->rt, GptModelTable(r->model)));
  TCALL(FsdpRuntimeSetUp(r->rt));
  TCALL(FsdpOptimCreate(r->rt, FsdpKernelsCpu(), &oo, GptParamDecays, &r->opt));
}

static void rig_destroy(Rig *r)
{
  TCALL(FsdpOptimDestroy(&r->opt));
  TCALL(FsdpRuntimeDestroy(&r->rt));
  TCALL(GptModelDestroy(&r->model));
  TCALL(FsdpCollDestroy(&r->coll));
  TCALL(FsdpTopoDestroy(&r->topo));
}

/* Known value of element idx of parameter `name` in tensor family kind
 * (0 params, 1 exp_avg, 2 exp_avg_sq): exactly representable, distinct. */
static float known(int kind, const char *name, int64_t idx)
{
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)(kind + 1);
  for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ULL;
  h ^= (uint64_t)idx * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  int32_t v = (int32_t)(h & 0xFFFFFF) - (1 << 23);
  return (float)v / (float)(1 << 20) + (float)kind;
}

static float *family(Rig *r, int kind, int u)
{
  return kind == 0 ? FsdpRuntimeUnitShard(r->rt, u)
                   : (kind == 1 ? FsdpOptimExpAvg(r->opt, u) : FsdpOptimExpAvgSq(r->opt, u));
}

/* Fill every shard: pieces with known values, padding with `pad`. */
static void rig_fill(Rig *r, float pad)
{
  for (int u = 0; u < FsdpRuntimeNumUnits(r->rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(r->rt, u);
    const FlatParamPiece *pc;
    int np;
    TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
    int64_t S = FlatParamShardNumel(fp);
    for (int k = 0; k < 3; k++) {
      float *b = family(r, k, u);
      for (int64_t i = 0; i < S; i++) b[i] = pad;
      for (int i = 0; i < np; i++) {
        const char *name = FlatParamSpec(fp, pc[i].param)->name;
        for (int64_t j = 0; j < pc[i].count; j++)
          b[pc[i].shard_offset + j] = known(k, name, pc[i].param_offset + j);
      }
    }
  }
}

/* Check every shard: pieces known, padding zero.  Returns wrong count. */
static int rig_check(Rig *r, const char *what)
{
  int wrong = 0;
  double maxdiff = 0;
  for (int u = 0; u < FsdpRuntimeNumUnits(r->rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(r->rt, u);
    const FlatParamPiece *pc;
    int np;
    TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
    int64_t S = FlatParamShardNumel(fp);
    for (int k = 0; k < 3; k++) {
      const float *b = family(r, k, u);
      char *covered = calloc((size_t)S + 1, 1);
      for (int i = 0; i < np; i++) {
        const char *name = FlatParamSpec(fp, pc[i].param)->name;
        for (int64_t j = 0; j < pc[i].count; j++) {
          float want = known(k, name, pc[i].param_offset + j), got = b[pc[i].shard_offset + j];
          covered[pc[i].shard_offset + j] = 1;
          if (memcmp(&want, &got, sizeof want) != 0) {
            maxdiff = fmax(maxdiff, fabs((double)want - got));
            if (wrong++ < 4)
              fprintf(stderr, "[rank %d] %s: family %d %s[%lld] = %.9g, expected %.9g\n", rank,
                      what, k, name, (long long)(pc[i].param_offset + j), got, want);
          }
        }
      }
      for (int64_t i = 0; i < S; i++)
        if (!covered[i] && b[i] != 0.0f && wrong++ < 4)
          fprintf(stderr, "[rank %d] %s: unit %d family %d padding [%lld] = %g, expected 0\n", rank,
                  what, u, k, (long long)i, b[i]);
      free(covered);
    }
  }
  CHECK(wrong == 0, "%s: %d wrong elements (max difference %g)", what, wrong, maxdiff);
  return wrong;
}

static FsdpCkptMeta make_meta(int64_t step)
{
  FsdpCkptMeta m;
  memset(&m, 0, sizeof m);
  m.step = step;
  m.data_position = 3 * step;
  m.seed = 777;
  m.global_batch = 8;
  m.model = describe(&kCfg);
  m.optim.lr = 6e-4;
  m.optim.beta1 = 0.9;
  m.optim.beta2 = 0.95;
  m.optim.weight_decay = 0.1;
  m.optim.warmup = 7;
  m.optim.total_steps = 100;
  return m;
}

/* Rank-0 checks of a file through the HDF5 C API: every dataset has the
 * parameter's logical shape and the known values; attributes. */
static void check_file_layout(Rig *r, const char *path, int wsave, int fsave, int64_t step)
{
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(f >= 0, "%s does not open with serial HDF5", path);
  if (f < 0) return;
  const char *groups[3] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};
  int wrong = 0, nparams = 0;
  for (int u = 0; u < FsdpRuntimeNumUnits(r->rt); u++) {
    FlatParam fp = FsdpRuntimeUnitFlatParam(r->rt, u);
    for (int p = 0; p < FlatParamNumParams(fp); p++, nparams++) {
      const FsdpParamSpec *spec = FlatParamSpec(fp, p);
      int64_t n = FlatParamSpecNumel(spec);
      float *buf = malloc((size_t)n * sizeof *buf);
      for (int k = 0; k < 3; k++) {
        char dname[256];
        snprintf(dname, sizeof dname, "%s/%s", groups[k], spec->name);
        hid_t d = H5Dopen2(f, dname, H5P_DEFAULT);
        CHECK(d >= 0, "%s: no dataset %s", path, dname);
        if (d < 0) continue;
        hid_t s = H5Dget_space(d);
        hsize_t dims[8];
        int nd = H5Sget_simple_extent_dims(s, dims, NULL);
        int same = nd == spec->ndim;
        for (int i = 0; same && i < nd; i++) same = (int64_t)dims[i] == spec->shape[i];
        CHECK(same, "%s: %s has rank %d, expected the logical shape (rank %d)", path, dname, nd,
              spec->ndim);
        hid_t t = H5Dget_type(d);
        CHECK(H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 4, "%s: %s is not fp32", path, dname);
        H5Tclose(t);
        H5Sclose(s);
        CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0, "reading %s", dname);
        for (int64_t i = 0; i < n; i++) {
          float want = known(k, spec->name, i);
          if (memcmp(&want, &buf[i], sizeof want) != 0 && wrong++ < 4)
            fprintf(stderr, "%s: %s[%lld] = %.9g, expected %.9g\n", path, dname, (long long)i,
                    buf[i], want);
        }
        H5Dclose(d);
      }
      free(buf);
    }
  }
  CHECK(wrong == 0, "%s: %d wrong values read back with the HDF5 C API", path, wrong);
  int64_t v = -1;
  double x = 0;
  char s[64];
  CHECK(FsdpHdf5AttrReadInt64(f, "format_version", &v) >= 0 && v == FSDP_CKPT_VERSION, "format_version %lld", (long long)v);
  CHECK(FsdpHdf5AttrReadInt64(f, "step", &v) >= 0 && v == step, "step attribute %lld, expected %lld", (long long)v, (long long)step);
  CHECK(FsdpHdf5AttrReadInt64(f, "data_position", &v) >= 0 && v == 3 * step, "data_position %lld", (long long)v);
  CHECK(FsdpHdf5AttrReadInt64(f, "seed", &v) >= 0 && v == 777, "seed %lld", (long long)v);
  CHECK(FsdpHdf5AttrReadInt64(f, "world_size", &v) >= 0 && v == wsave, "world_size %lld, expected %d", (long long)v, wsave);
  CHECK(FsdpHdf5AttrReadInt64(f, "sharding_factor", &v) >= 0 && v == fsave, "sharding_factor %lld, expected %d", (long long)v, fsave);
  hid_t g = H5Gopen2(f, "/model", H5P_DEFAULT);
  CHECK(FsdpHdf5AttrReadInt64(g, "n_embd", &v) >= 0 && v == kCfg.n_embd, "/model n_embd %lld", (long long)v);
  CHECK(FsdpHdf5AttrReadInt64(g, "vocab_size", &v) >= 0 && v == kCfg.vocab_size, "/model vocab_size %lld", (long long)v);
  CHECK(FsdpHdf5AttrReadInt64(g, "num_parameters", &v) >= 0 && v == nparams, "/model num_parameters %lld, expected %d", (long long)v, nparams);
  CHECK(FsdpHdf5AttrReadString(g, "family", s, sizeof s) >= 0 && strcmp(s, "gpt2") == 0, "/model family %s", s);
  CHECK(FsdpHdf5AttrReadString(g, "name", s, sizeof s) >= 0 && strcmp(s, "custom") == 0, "/model name %s", s);
  H5G_info_t gi;
  CHECK(H5Gget_info(g, &gi) >= 0 && (int)gi.nlinks == nparams, "/model holds %d datasets, expected %d", (int)gi.nlinks, nparams);
  H5Gclose(g);
  g = H5Gopen2(f, "/optim", H5P_DEFAULT);
  CHECK(FsdpHdf5AttrReadInt64(g, "step_count", &v) >= 0 && v == 17, "/optim step_count %lld", (long long)v);
  CHECK(FsdpHdf5AttrReadDouble(g, "lr", &x) >= 0 && x == 6e-4, "/optim lr %g", x);
  CHECK(FsdpHdf5AttrReadString(g, "type", s, sizeof s) >= 0 && strcmp(s, "adamw") == 0, "/optim type %s", s);
  H5Gclose(g);
  H5Fclose(f);
}

typedef struct {
  int ws, fs, gs, wraps; /* saved at */
  int wl, fl, gl, wrapl; /* loaded at */
} Combo;

static const Combo kCombos[] = {
    {1, 1, 0, 1, 1, 1, 0, 2},  {2, 2, 0, 1, 1, 1, 0, 1}, {2, 1, 0, 1, 2, 2, 0, 1},
    {1, 1, 0, 1, 2, 2, 0, 1},  {2, 2, 0, 1, 2, 2, 0, 2}, {4, 4, 0, 1, 2, 1, 0, 1},
    {4, 4, 0, 1, 4, 2, 2, 1},  {4, 2, 2, 1, 3, 3, 0, 1}, {3, 3, 0, 1, 4, 4, 0, 2},
    {4, 1, 0, 1, 3, 1, 0, 1},  {4, 2, 0, 2, 1, 1, 0, 1},
};

static MPI_Comm sub_comm(int n)
{
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &c);
  if (c != MPI_COMM_NULL) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return c;
}

static void test_reshard(const char *dir)
{
  int n = (int)(sizeof kCombos / sizeof kCombos[0]);
  for (int k = 0; k < n; k++) {
    const Combo *c = &kCombos[k];
    if (c->ws > W || c->wl > W) continue;
    char path[512], what[160];
    snprintf(path, sizeof path, "%s/combo_%02d.h5", dir, k);
    snprintf(what, sizeof what, "saved at (W=%d F=%d G=%d wrap=%d), loaded at (W=%d F=%d G=%d wrap=%d)",
             c->ws, c->fs, c->gs, c->wraps, c->wl, c->fl, c->gl, c->wrapl);
    MPI_Comm cs = sub_comm(c->ws);
    if (cs != MPI_COMM_NULL) {
      Rig r;
      rig_create(cs, &kCfg, c->fs, c->gs, c->wraps, &r);
      rig_fill(&r, 12345.0f); /* padding must not leak anywhere */
      FsdpOptimSetStepCount(r.opt, 17);
      FsdpCkptMeta m = make_meta(40 + k);
      TCALL(FsdpCkptSave(r.rt, r.opt, path, &m));
      int crank;
      MPI_Comm_rank(cs, &crank);
      if (crank == 0) {
        check_file_layout(&r, path, c->ws, c->fs, 40 + k);
        char tmpname[600];
        snprintf(tmpname, sizeof tmpname, "%s.tmp", path);
        DIR *d = opendir(dir);
        struct dirent *e;
        int leftovers = 0;
        while (d && (e = readdir(d)) != NULL) leftovers += strstr(e->d_name, ".tmp-") != NULL;
        if (d) closedir(d);
        CHECK(leftovers == 0, "a complete save left %d temporary files in %s", leftovers, dir);
      }
      rig_destroy(&r);
      MPI_Comm_free(&cs);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm cl = sub_comm(c->wl);
    if (cl != MPI_COMM_NULL) {
      Rig r;
      rig_create(cl, &kCfg, c->fl, c->gl, c->wrapl, &r);
      rig_fill(&r, NAN);
      /* scribble over the pieces too: the load must overwrite everything */
      for (int u = 0; u < FsdpRuntimeNumUnits(r.rt); u++) {
        int64_t S = FlatParamShardNumel(FsdpRuntimeUnitFlatParam(r.rt, u));
        for (int f = 0; f < 3; f++)
          for (int64_t i = 0; i < S; i++) family(&r, f, u)[i] = NAN;
      }
      FsdpCkptMeta m;
      FsdpModelDesc want = describe(&kCfg);
      TCALL(FsdpCkptLoad(r.rt, r.opt, path, &want, &m));
      rig_check(&r, what);
      CHECK(FsdpOptimStepCount(r.opt) == 17, "%s: AdamW step count %lld", what,
            (long long)FsdpOptimStepCount(r.opt));
      CHECK(m.step == 40 + k && m.data_position == 3 * (40 + k) && m.seed == 777 &&
            m.world_size == c->ws && m.sharding_factor == c->fs && m.optim_step == 17 &&
            attr_int(&m.model, "n_embd") == kCfg.n_embd && m.optim.warmup == 7 &&
            m.format_version == 1 && strcmp(m.model.preset, "custom") == 0 &&
            strcmp(m.model.family, "gpt2") == 0 && m.created[0] != '\0',
            "%s: metadata step %lld data %lld seed %lld W %d F %d", what, (long long)m.step,
            (long long)m.data_position, (long long)m.seed, m.world_size, m.sharding_factor);
      rig_destroy(&r);
      MPI_Comm_free(&cl);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

/* ---- refused files ---------------------------------------------------- */

static void copy_file(const char *src, const char *dst, long keep_bytes)
{
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  if (!in || !out) {
    fprintf(stderr, "cannot copy %s to %s\n", src, dst);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  char buf[65536];
  size_t n;
  long total = 0;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
    if (keep_bytes >= 0 && total + (long)n > keep_bytes) n = (size_t)(keep_bytes - total);
    fwrite(buf, 1, n, out);
    total += (long)n;
    if (keep_bytes >= 0 && total >= keep_bytes) break;
  }
  fclose(in);
  fclose(out);
}

typedef struct {
  off_t size;
  time_t mtime;
  long mtime_ns;
} Stamp;

static Stamp stamp(const char *path)
{
  struct stat st;
  Stamp s = {0, 0, 0};
  if (stat(path, &st) == 0) {
    s.size = st.st_size;
    s.mtime = st.st_mtim.tv_sec;
    s.mtime_ns = st.st_mtim.tv_nsec;
  }
  return s;
}

/* Load must fail with a usage error whose message contains every needle,
 * leave the shards and the file untouched. */
static void expect_refused(Rig *r, FsdpOptim opt, const char *path, const GptConfig *expect,
                           const char *needle1, const char *needle2)
{
  Stamp before = stamp(path);
  float *shard = FsdpRuntimeUnitShard(r->rt, 0);
  int64_t S = FlatParamShardNumel(FsdpRuntimeUnitFlatParam(r->rt, 0));
  float *copy = malloc((size_t)S * sizeof *copy);
  memcpy(copy, shard, (size_t)S * sizeof *copy);
  FsdpModelDesc want;
  if (expect) want = describe(expect);
  int err = FsdpCkptLoad(r->rt, opt, path, expect ? &want : NULL, NULL);
  const char *msg = FsdpErrorLastMessage();
  CHECK(err == FSDP_ERR_USAGE, "loading %s gave %d, expected a usage error", path, err);
  CHECK(strstr(msg, needle1) != NULL, "message for %s lacks \"%s\": %s", path, needle1, msg);
  if (needle2) CHECK(strstr(msg, needle2) != NULL, "message for %s lacks \"%s\": %s", path, needle2, msg);
  CHECK(memcmp(copy, shard, (size_t)S * sizeof *copy) == 0, "a refused load of %s modified the shards", path);
  Stamp after = stamp(path);
  CHECK(before.size == after.size && before.mtime == after.mtime && before.mtime_ns == after.mtime_ns,
        "a refused load modified %s", path);
  free(copy);
  if (rank == 0) printf("  refused as expected: %s\n", msg);
}

/* Rank 0: edit a copy of good.h5 with serial HDF5. */
static void edit_copy(const char *good, const char *path, int what)
{
  copy_file(good, path, -1);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) MPI_Abort(MPI_COMM_WORLD, 1);
  hsize_t dims[2] = {5, 7};
  hid_t s = H5Screate_simple(2, dims, NULL), d = -1;
  switch (what) {
  case 0: /* missing parameter */
    H5Ldelete(f, "/model/h.1.mlp.c_fc.weight", H5P_DEFAULT);
    break;
  case 1: /* reshaped parameter */
    H5Ldelete(f, "/model/h.0.attn.c_proj.weight", H5P_DEFAULT);
    d = H5Dcreate2(f, "/model/h.0.attn.c_proj.weight", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    break;
  case 2: /* extra parameter */
    d = H5Dcreate2(f, "/model/h.9.extra", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    break;
  case 3: /* a newer format */
    FsdpHdf5AttrWriteInt64(f, "format_version", 99);
    break;
  case 4: /* missing moment */
    H5Ldelete(f, "/optim/exp_avg_sq/wpe", H5P_DEFAULT);
    break;
  }
  if (d >= 0) H5Dclose(d);
  H5Sclose(s);
  H5Fclose(f);
}

/* ---- the model description ------------------------------------------- */

/* Rank 0: a copy of good.h5 with /model's description attributes edited. */
static void edit_desc(const char *good, const char *path, int what)
{
  copy_file(good, path, -1);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t g = f >= 0 ? H5Gopen2(f, "/model", H5P_DEFAULT) : -1;
  if (g < 0) MPI_Abort(MPI_COMM_WORLD, 1);
  switch (what) {
  case 0: /* format version 1 as written before families: no family */
    H5Adelete(g, "family");
    break;
  case 1: FsdpHdf5AttrWriteInt64(g, "n_layer", 4); break;
  case 2: FsdpHdf5AttrWriteString(g, "family", "llama"); break;
  case 3: FsdpHdf5AttrWriteDouble(g, "rope_theta", 10000.0); break;
  case 4: /* the right value as a float: a description compares types too */
    FsdpHdf5AttrWriteDouble(g, "n_layer", 2.0);
    break;
  case 5: H5Adelete(g, "n_head"); break;
  }
  H5Gclose(g);
  H5Fclose(f);
}

/* Files written before model families load as gpt2 models; a description
 * that differs from the model's is refused naming the attribute, or the
 * family, and both values.  good: test_refused's checkpoint of r at step 9
 * (parameters from rig_fill). */
static void test_model_desc(Rig *r, const char *good, const char *dir)
{
  enum { NEDITS = 6 };
  const char *names[NEDITS] = {"before_families.h5", "deeper.h5", "llama.h5", "rope.h5",
                               "real_layers.h5", "no_heads.h5"};
  char paths[NEDITS][512];
  for (int i = 0; i < NEDITS; i++) {
    snprintf(paths[i], sizeof paths[i], "%s/%s", dir, names[i]);
    if (rank == 0) edit_desc(good, paths[i], i);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* the old attribute set: loads, bit-exact, and reads as family gpt2 */
  if (rank == 0) {
    hid_t f = H5Fopen(paths[0], H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0 && H5Aexists_by_name(f, "/model", "family", H5P_DEFAULT) == 0,
          "%s still has /model/family", paths[0]);
    if (f >= 0) H5Fclose(f);
  }
  for (int u = 0; u < FsdpRuntimeNumUnits(r->rt); u++) { /* the load must overwrite all */
    int64_t S = FlatParamShardNumel(FsdpRuntimeUnitFlatParam(r->rt, u));
    for (int k = 0; k < 3; k++)
      for (int64_t i = 0; i < S; i++) family(r, k, u)[i] = NAN;
  }
  FsdpModelDesc want = describe(&kCfg);
  FsdpCkptMeta got;
  TCALL(FsdpCkptLoad(r->rt, r->opt, paths[0], &want, &got));
  rig_check(r, "checkpoint without /model/family");
  CHECK(strcmp(got.model.family, "gpt2") == 0 && strcmp(got.model.preset, "custom") == 0 &&
            got.model.nattrs == 5 && attr_int(&got.model, "n_layer") == kCfg.n_layer &&
            attr_int(&got.model, "seq_len") == kCfg.seq_len && got.step == 9,
        "a file without family read as family '%s', preset '%s', %d attributes, step %lld",
        got.model.family, got.model.preset, got.model.nattrs, (long long)got.step);
  FsdpCkptMeta mm;
  TCALL(FsdpCkptReadMeta(MPI_COMM_WORLD, paths[0], &mm));
  CHECK(strcmp(mm.model.family, "gpt2") == 0, "ReadMeta of a file without family: '%s'",
        mm.model.family);

  /* mismatches name the attribute and both values */
  char needle[700];
  snprintf(needle, sizeof needle, "checkpoint %s has n_layer 4 but the model has 2", paths[1]);
  expect_refused(r, r->opt, paths[1], &kCfg, needle, NULL);
  expect_refused(r, r->opt, paths[2], &kCfg, paths[2], "holds a llama model but the model is gpt2");
  expect_refused(r, r->opt, paths[3], &kCfg, paths[3],
                 "has the model attribute rope_theta, which the gpt2 model does not have");
  expect_refused(r, r->opt, paths[4], &kCfg, paths[4], "has n_layer 2.0 but the model has 2");
  expect_refused(r, r->opt, paths[5], &kCfg, paths[5], "lacks the model attribute n_head");
  /* the description of the file itself, without an expectation */
  TCALL(FsdpCkptReadMeta(MPI_COMM_WORLD, paths[3], &mm));
  const FsdpModelAttr *rope = FsdpModelDescFind(&mm.model, "rope_theta");
  CHECK(rope && rope->type == FSDP_MODEL_ATTR_REAL && rope->r == 10000.0 && mm.model.nattrs == 6,
        "ReadMeta: rope_theta %s, %d attributes", rope ? "of another type" : "missing",
        mm.model.nattrs);
}

static void test_refused(const char *dir)
{
  Rig r;
  rig_create(MPI_COMM_WORLD, &kCfg, 0, 0, 1, &r);
  rig_fill(&r, 0.0f);
  FsdpOptimSetStepCount(r.opt, 7); /* <= step: [Note: checkpoint attributes] */
  char good[512], p[512];
  snprintf(good, sizeof good, "%s/good.h5", dir);
  FsdpCkptMeta m = make_meta(9);
  TCALL(FsdpCkptSave(r.rt, r.opt, good, &m));
  /* model-only checkpoint */
  char noopt[512];
  snprintf(noopt, sizeof noopt, "%s/noopt.h5", dir);
  TCALL(FsdpCkptSave(r.rt, NULL, noopt, &m));

  snprintf(p, sizeof p, "%s/nope.h5", dir);
  expect_refused(&r, r.opt, p, &kCfg, p, "No such file");

  snprintf(p, sizeof p, "%s/truncated.h5", dir);
  if (rank == 0) copy_file(good, p, stamp(good).size / 2);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_refused(&r, r.opt, p, &kCfg, p, "truncated or corrupt");

  snprintf(p, sizeof p, "%s/garbage.h5", dir);
  if (rank == 0) {
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 1000; i++) fputs("not an HDF5 file ", f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_refused(&r, r.opt, p, &kCfg, p, "not an HDF5 file");

  const char *names[5] = {"missing.h5", "reshaped.h5", "extra.h5", "newer.h5", "nomoment.h5"};
  char paths[5][512];
  for (int i = 0; i < 5; i++) {
    snprintf(paths[i], sizeof paths[i], "%s/%s", dir, names[i]);
    if (rank == 0) edit_copy(good, paths[i], i);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_refused(&r, r.opt, paths[0], &kCfg, paths[0], "has no parameter /model/h.1.mlp.c_fc.weight");
  expect_refused(&r, r.opt, paths[1], &kCfg, paths[1],
                 "/model/h.0.attn.c_proj.weight has shape [5, 7] but the model expects [12, 12]");
  expect_refused(&r, r.opt, paths[2], &kCfg, paths[2], "/model/h.9.extra, which the model does not have");
  expect_refused(&r, r.opt, paths[3], &kCfg, paths[3], "format version 99");
  expect_refused(&r, r.opt, paths[4], &kCfg, paths[4], "has no parameter /optim/exp_avg_sq/wpe");
  expect_refused(&r, r.opt, noopt, &kCfg, noopt, "no optimizer state");
  /* a model-only load of it works */
  FsdpModelDesc want = describe(&kCfg);
  TCALL(FsdpCkptLoad(r.rt, NULL, noopt, &want, NULL));

  /* a config mismatch is named: expected vs file */
  GptConfig wider = kCfg;
  wider.n_embd = 24;
  expect_refused(&r, r.opt, good, &wider, good, "has n_embd 12 but the model has 24");
  GptConfig deeper = kCfg;
  deeper.n_layer = 3;
  expect_refused(&r, r.opt, good, &deeper, good, "has n_layer 2 but the model has 3");
  /* a model of another shape (without an expected config) still fails on the shapes */
  Rig r2;
  rig_create(MPI_COMM_WORLD, &wider, 0, 0, 1, &r2);
  expect_refused(&r2, r2.opt, good, NULL, good, "but the model expects");
  rig_destroy(&r2);

  /* FsdpCkptReadMeta */
  FsdpCkptMeta mm;
  TCALL(FsdpCkptReadMeta(MPI_COMM_WORLD, good, &mm));
  CHECK(mm.step == 9 && mm.optim_step == 7 && attr_int(&mm.model, "vocab_size") == kCfg.vocab_size,
        "ReadMeta step %lld optim %lld", (long long)mm.step, (long long)mm.optim_step);
  CHECK(FsdpCkptReadMeta(MPI_COMM_WORLD, paths[3], &mm) == FSDP_ERR_USAGE, "ReadMeta of a newer format");
  test_model_desc(&r, good, dir);
  rig_destroy(&r);
}

/* ---- directories ------------------------------------------------------- */

static int count_files(const char *dir, const char *needle)
{
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) n += strstr(e->d_name, needle) != NULL;
  if (d) closedir(d);
  return n;
}

static void make_clean_dir(const char *dir)
{
  if (rank == 0) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
    if (d) closedir(d);
    mkdir(dir, 0777);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void test_directory(const char *base)
{
  char dir[512], p[600], latest[600];
  snprintf(dir, sizeof dir, "%s/run", base);
  make_clean_dir(dir);
  Rig r;
  rig_create(MPI_COMM_WORLD, &kCfg, W >= 2 ? W / 2 : 1, 0, 1, &r);
  rig_fill(&r, 0.0f);
  FsdpOptimSetStepCount(r.opt, 7); /* <= step: [Note: checkpoint attributes] */
  FsdpCkptOptions o;
  memset(&o, 0, sizeof o);
  o.dir = dir;
  o.every = 10;
  o.keep = 2;
  int found = -1;
  TCALL(FsdpCkptFindLatest(MPI_COMM_WORLD, dir, latest, sizeof latest, &found));
  CHECK(found == 0 && latest[0] == '\0', "an empty directory has no latest checkpoint");
  TCALL(FsdpCkptResolveResume(MPI_COMM_WORLD, &o, latest, sizeof latest, &found));
  CHECK(found == 0, "fresh start into an empty directory");
  double secs = -1;
  for (int64_t s = 10; s <= 30; s += 10) {
    FsdpCkptMeta m = make_meta(s);
    TCALL(FsdpCkptWriteStep(r.rt, r.opt, &o, &m, p, sizeof p, &secs, NULL));
    char want[600];
    TCALL(FsdpCkptPath(dir, s, want, sizeof want));
    CHECK(strcmp(p, want) == 0, "WriteStep wrote %s, expected %s", p, want);
  }
  CHECK(secs >= 0, "WriteStep seconds %g", secs);
  TCALL(FsdpCkptPath(dir, 20, p, sizeof p));
  CHECK(access(p, F_OK) == 0, "keep 2: %s should remain", p);
  TCALL(FsdpCkptPath(dir, 10, p, sizeof p));
  CHECK(access(p, F_OK) != 0, "keep 2: %s should be deleted", p);
  /* a temporary leftover and a garbage file with a newer step are skipped */
  if (rank == 0) {
    snprintf(p, sizeof p, "%s/ckpt_00000040.h5.tmp-AbC123", dir);
    copy_file(latest[0] ? latest : "/dev/null", p, 100);
    snprintf(p, sizeof p, "%s/ckpt_00000050.h5", dir);
    FILE *f = fopen(p, "w");
    fputs("garbage", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    f = fopen(p, "w");
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  TCALL(FsdpCkptFindLatest(MPI_COMM_WORLD, dir, latest, sizeof latest, &found));
  TCALL(FsdpCkptPath(dir, 30, p, sizeof p));
  CHECK(found == 1 && strcmp(latest, p) == 0, "latest is %s (found %d), expected %s", latest, found, p);
  /* -resume auto picks it; a fresh run into this directory is refused */
  o.resume = "auto";
  TCALL(FsdpCkptResolveResume(MPI_COMM_WORLD, &o, latest, sizeof latest, &found));
  CHECK(found == 1 && strcmp(latest, p) == 0, "-resume auto gave %s", latest);
  o.resume = NULL;
  int err = FsdpCkptResolveResume(MPI_COMM_WORLD, &o, latest, sizeof latest, &found);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "already holds checkpoints"),
        "a fresh run into a directory with checkpoints: %d %s", err, FsdpErrorLastMessage());
  o.resume = "some/file.h5";
  TCALL(FsdpCkptResolveResume(MPI_COMM_WORLD, &o, latest, sizeof latest, &found));
  CHECK(found == 1 && strcmp(latest, "some/file.h5") == 0, "-resume FILE gave %s", latest);
  o.resume = NULL;
  /* a resumed run from an older file writes step 25 below newer ones: the
   * new file survives the prune, the oldest valid one goes, garbage stays,
   * the leftover goes */
  FsdpCkptMeta m = make_meta(25);
  TCALL(FsdpCkptWriteStep(r.rt, r.opt, &o, &m, p, sizeof p, NULL, NULL));
  if (rank == 0) {
    CHECK(access(p, F_OK) == 0, "the checkpoint just written (%s) was pruned", p);
    TCALL(FsdpCkptPath(dir, 30, p, sizeof p));
    CHECK(access(p, F_OK) == 0, "%s should remain", p);
    TCALL(FsdpCkptPath(dir, 20, p, sizeof p));
    CHECK(access(p, F_OK) != 0, "%s should be pruned", p);
    CHECK(count_files(dir, ".tmp-") == 0, "the temporary leftover was not removed");
    CHECK(count_files(dir, "ckpt_00000050.h5") == 1, "a file that is not a checkpoint was deleted");
    CHECK(count_files(dir, "notes.txt") == 1, "an unrelated file was deleted");
  }
  /* the checkpoint FindLatest picked loads at another F */
  TCALL(FsdpCkptFindLatest(MPI_COMM_WORLD, dir, latest, sizeof latest, &found));
  Rig r2;
  rig_create(MPI_COMM_WORLD, &kCfg, 1, 0, 1, &r2);
  FsdpModelDesc want = describe(&kCfg);
  TCALL(FsdpCkptLoad(r2.rt, r2.opt, latest, &want, NULL));
  rig_check(&r2, "latest checkpoint at F=1");
  rig_destroy(&r2);
  rig_destroy(&r);

  /* options */
  char *argv[] = {"test", "-checkpoint_dir", "D/x", "-checkpoint_every", "5", "-checkpoint_keep",
                  "3", "-resume", "auto", NULL};
  FsdpOpts db = NULL;
  TCALL(FsdpOptsCreate(MPI_COMM_WORLD, 9, argv, &db));
  FsdpCkptOptions co;
  TCALL(FsdpCkptOptionsFromDb(db, &co));
  CHECK(strcmp(co.dir, "D/x") == 0 && co.every == 5 && co.keep == 3 && co.resume &&
        strcmp(co.resume, "auto") == 0 && co.test_abort == 0, "options read back wrong");
  TCALL(FsdpOptsCheckUnknown(db));
  FsdpOptsDestroy(&db);
  char *argv2[] = {"test", NULL};
  TCALL(FsdpOptsCreate(MPI_COMM_WORLD, 1, argv2, &db));
  TCALL(FsdpCkptOptionsFromDb(db, &co));
  CHECK(strcmp(co.dir, "checkpoints") == 0 && co.every == 0 && co.keep == 0 && co.resume == NULL,
        "option defaults");
  FsdpOptsDestroy(&db);
  TCALL(FsdpCkptPath("d", 123, p, sizeof p));
  CHECK(strcmp(p, "d/ckpt_00000123.h5") == 0, "path %s", p);
  CHECK(FsdpCkptPath("dir", 1, p, 8) == FSDP_ERR_USAGE, "a path that does not fit");
}

/* ---- a trained model ---------------------------------------------------- */


/* Train at W (full sharding), save, load on one rank: the gathered units
 * are bitwise those of the trained model. */
static void test_trained(const char *dir)
{
  char path[512], opts[256];
  snprintf(path, sizeof path, "%s/trained.h5", dir);
  snprintf(opts, sizeof opts, "-model tiny -steps 3 -batch_size 1 -log_every 0 -seed 5");
  FsdpOpts db = NULL;
  FsdpTrainer tr = test_make_trainer(MPI_COMM_WORLD, opts, &db);
  for (int s = 0; s < 3; s++) TCALL(FsdpTrainerStep(tr, NULL));
  FsdpRuntime rt = FsdpTrainerRuntime(tr);
  FsdpCkptMeta m;
  memset(&m, 0, sizeof m);
  m.step = FsdpTrainerStepsDone(tr);
  m.data_position = m.step;
  m.model = describe(GptModelConfig((GptModel)FsdpModelImpl(FsdpTrainerModel(tr))));
  TCALL(FsdpCkptSave(rt, FsdpTrainerOptim(tr), path, &m));
  int nu = FsdpRuntimeNumUnits(rt);
  float **full = calloc((size_t)nu, sizeof *full);
  for (int u = 0; u < nu; u++) {
    int64_t n = FlatParamNumel(FsdpRuntimeUnitFlatParam(rt, u));
    full[u] = malloc((size_t)n * sizeof(float));
    TCALL(FsdpRuntimeGatherUnit(rt, u, full[u]));
  }
  if (rank == 0) {
    FsdpOpts db1 = NULL;
    FsdpTrainer one = test_make_trainer(MPI_COMM_SELF, opts, &db1);
    FsdpRuntime r1 = FsdpTrainerRuntime(one);
    FsdpCkptMeta got;
    FsdpModelDesc want = describe(GptModelConfig((GptModel)FsdpModelImpl(FsdpTrainerModel(one))));
    TCALL(FsdpCkptLoad(r1, FsdpTrainerOptim(one), path, &want, &got));
    CHECK(got.step == 3 && FsdpOptimStepCount(FsdpTrainerOptim(one)) == 3,
          "trained checkpoint: step %lld, AdamW count %lld", (long long)got.step,
          (long long)FsdpOptimStepCount(FsdpTrainerOptim(one)));
    for (int u = 0; u < nu; u++) {
      int64_t n = FlatParamNumel(FsdpRuntimeUnitFlatParam(r1, u));
      float *b = malloc((size_t)n * sizeof *b);
      TCALL(FsdpRuntimeGatherUnit(r1, u, b));
      int64_t first = -1;
      double maxd = 0;
      for (int64_t i = 0; i < n; i++)
        if (memcmp(&b[i], &full[u][i], sizeof *b) != 0) {
          if (first < 0) first = i;
          maxd = fmax(maxd, fabs((double)b[i] - full[u][i]));
        }
      CHECK(first < 0, "trained unit %s: first wrong element %lld (%.9g vs %.9g), max diff %g",
            FsdpRuntimeUnitName(r1, u), (long long)first, first >= 0 ? b[first] : 0.0,
            first >= 0 ? full[u][first] : 0.0, maxd);
      free(b);
    }
    TCALL(FsdpTrainerDestroy(&one));
    FsdpOptsDestroy(&db1);
  }
  for (int u = 0; u < nu; u++) free(full[u]);
  free(full);
  TCALL(FsdpTrainerDestroy(&tr));
  FsdpOptsDestroy(&db);
}

/* ---- crash ----------------------------------------------------------------- */

static int mode_crash(const char *dir)
{
  make_clean_dir(dir);
  Rig r;
  rig_create(MPI_COMM_WORLD, &kCfg, 0, 0, 1, &r);
  rig_fill(&r, 0.0f);
  FsdpCkptOptions o;
  memset(&o, 0, sizeof o);
  o.dir = dir;
  o.every = 5;
  FsdpCkptMeta m = make_meta(5);
  TCALL(FsdpCkptWriteStep(r.rt, r.opt, &o, &m, NULL, 0, NULL, NULL));
  if (rank == 0) fprintf(stderr, "test_ckpt crash: aborting in the middle of the step-10 checkpoint (expected)\n");
  o.test_abort = 7;
  m = make_meta(10);
  FsdpCkptWriteStep(r.rt, r.opt, &o, &m, NULL, 0, NULL, NULL);
  fprintf(stderr, "test_ckpt crash: the save was not aborted\n");
  return 1;
}

static int mode_after_crash(const char *dir)
{
  char latest[600], p[600];
  int found = 0;
  TCALL(FsdpCkptFindLatest(MPI_COMM_WORLD, dir, latest, sizeof latest, &found));
  TCALL(FsdpCkptPath(dir, 5, p, sizeof p));
  CHECK(found && strcmp(latest, p) == 0, "after the crash the latest checkpoint is %s, expected %s", latest, p);
  if (rank == 0) {
    /* the temporary file and the headroom of its metadata ([Note: failed saves]) */
    CHECK(count_files(dir, ".tmp-") == 2, "the interrupted save should have left its temporary file and its headroom");
    CHECK(count_files(dir, ".headroom") == 1, "the interrupted save should have left one headroom file");
    CHECK(count_files(dir, "ckpt_00000010.h5") == 2, "only the temporary step-10 files should exist");
  }
  Rig r;
  rig_create(MPI_COMM_WORLD, &kCfg, 1, 0, 1, &r);
  FsdpCkptMeta m;
  FsdpModelDesc want = describe(&kCfg);
  TCALL(FsdpCkptLoad(r.rt, r.opt, latest, &want, &m));
  rig_check(&r, "checkpoint before the crash");
  CHECK(m.step == 5, "step %lld", (long long)m.step);
  FsdpCkptOptions o;
  memset(&o, 0, sizeof o);
  o.dir = dir;
  o.every = 5;
  o.keep = 1;
  m = make_meta(10);
  TCALL(FsdpCkptWriteStep(r.rt, r.opt, &o, &m, NULL, 0, NULL, NULL));
  if (rank == 0) {
    CHECK(count_files(dir, ".tmp-") == 0, "the leftover survived the next save");
    CHECK(count_files(dir, "ckpt_") == 1, "keep 1 should leave one checkpoint");
  }
  rig_destroy(&r);
  make_clean_dir(dir);
  if (rank == 0) rmdir(dir);
  return test_finish("test_ckpt after-crash");
}

/* A description read from a file goes back to a GptConfig only when every
 * attribute fits an int: a cast would let n_layer 2^32 + 2 pass for 2
 * (fsdp-ckpt builds its engine from the file's description). */
static void test_desc_int_range(void)
{
  FsdpModelDesc d = describe(&kCfg);
  GptConfig back;
  CHECK(GptConfigFromDesc(&d, "test", &back) == FSDP_SUCCESS && back.n_layer == kCfg.n_layer &&
            back.n_embd == kCfg.n_embd && back.vocab_size == kCfg.vocab_size,
        "a GPT description does not read back to its config");
  for (int i = 0; i < d.nattrs; i++)
    if (strcmp(d.attr[i].name, "n_layer") == 0) d.attr[i].i = ((int64_t)1 << 32) + kCfg.n_layer;
  int err = GptConfigFromDesc(&d, "test", &back);
  CHECK(err == FSDP_ERR_USAGE, "n_layer 2^32+%d was accepted (error %d, n_layer read as %d)",
        kCfg.n_layer, err, err == FSDP_SUCCESS ? back.n_layer : -1);
}

/* FsdpModelFamilyRegister (family.h): a family defined outside the library
 * joins the built-in ones (found by name, its description checked by its
 * table); a name that is taken is a usage error and changes nothing. */
static void test_family_register(void)
{
  const FsdpModelFamily *gpt = FsdpModelFamilyFind("gpt2");
  CHECK(gpt && FsdpModelFamilyFind("llama"), "the built-in families are not registered");
  int before = FsdpModelNumFamilies();
  CHECK(FsdpModelFamilyRegister(gpt) == FSDP_ERR_USAGE && FsdpModelNumFamilies() == before,
        "a second family named gpt2 was not refused");
  static FsdpModelFamily copy;
  static const char *const no_presets[] = {NULL};
  /* a conversion given in part: fsdp-ckpt would call what is missing */
  copy = *gpt;
  copy.name = "gpt2-half-hf";
  copy.presets = no_presets;
  copy.hf_write_config = NULL;
  CHECK(FsdpModelFamilyRegister(&copy) == FSDP_ERR_USAGE && FsdpModelNumFamilies() == before,
        "a family with half a Hugging Face conversion was registered");
  copy = *gpt;
  copy.name = "gpt2-half-llmc";
  copy.presets = no_presets;
  copy.llmc_magic = 0;
  CHECK(FsdpModelFamilyRegister(&copy) == FSDP_ERR_USAGE && FsdpModelNumFamilies() == before,
        "a family with part of an llm.c conversion was registered");
  copy = *gpt;
  copy.name = "gpt2-outside";
  copy.presets = no_presets;
  CHECK(FsdpModelFamilyRegister(&copy) == FSDP_SUCCESS && FsdpModelFamilyFind("gpt2-outside") == &copy &&
            FsdpModelNumFamilies() == before + 1,
        "a family with a new name was not registered");
  FsdpModelDesc d = describe(&kCfg);
  snprintf(d.family, sizeof d.family, "gpt2-outside");
  CHECK(FsdpModelDescCheck(&d, "test") == FSDP_ERR_USAGE,
        "the registered family's check accepted a description of another family name");
  snprintf(d.family, sizeof d.family, "no-such-family");
  CHECK(FsdpModelDescCheck(&d, "test") == FSDP_ERR_USAGE, "an unknown family was accepted");
}

/* [Note: finite checkpoints]: a save of an infinity is refused on every
 * rank, naming the parameter and element, whatever -checkpoint_on_error
 * says; nothing is written or pruned (keep 1 keeps the good checkpoint);
 * NaN in the shard padding, which is never written, is no reason to
 * refuse.  At W = 4 the shard's two replicas split its write, and the
 * replica that writes the bad element finds it. */
static void test_nonfinite_save(const char *base)
{
  char dir[512], p[600];
  snprintf(dir, sizeof dir, "%s/nonfinite", base);
  make_clean_dir(dir);
  Rig r;
  int F = W >= 2 ? W / 2 : 1;
  rig_create(MPI_COMM_WORLD, &kCfg, F, 0, 1, &r);
  rig_fill(&r, NAN);
  FsdpOptimSetStepCount(r.opt, 7);
  FsdpCkptOptions o;
  memset(&o, 0, sizeof o);
  o.dir = dir;
  o.every = 10;
  o.keep = 1;
  o.on_error = FSDP_CKPT_ON_ERROR_CONTINUE;
  FsdpCkptMeta m = make_meta(10);
  int nonfinite = -1;
  TCALL(FsdpCkptWriteStep(r.rt, r.opt, &o, &m, p, sizeof p, NULL, &nonfinite));
  CHECK(nonfinite == 0 && p[0], "a finite state with NaN padding was not saved (%d)", nonfinite);
  /* +Inf at the last element of the last piece of the last unit's last
   * shard, on every replica of that shard */
  int u = FsdpRuntimeNumUnits(r.rt) - 1;
  FlatParam fp = FsdpRuntimeUnitFlatParam(r.rt, u);
  const FlatParamPiece *pc;
  int np;
  TCALL(FlatParamShardPieces(fp, F - 1, &pc, &np));
  const FlatParamPiece last = pc[np - 1];
  if (FlatParamShardRank(fp) == F - 1) family(&r, 2, u)[last.shard_offset + last.count - 1] = INFINITY;
  char want[300];
  snprintf(want, sizeof want, "ckpt_00000020.h5 was not saved: the training state is not finite: "
           "on rank %d, /optim/exp_avg_sq/%s holds +Inf at element %lld",
           W - 1, FlatParamSpec(fp, last.param)->name,
           (long long)(last.param_offset + last.count - 1));
  m = make_meta(20);
  int err = FsdpCkptWriteStep(r.rt, r.opt, &o, &m, p, sizeof p, NULL, &nonfinite);
  CHECK(err == FSDP_ERR_USAGE && nonfinite == 1, "a save of +Inf: error %d, nonfinite %d", err,
        nonfinite);
  CHECK(strstr(FsdpErrorLastMessage(), want) != NULL, "the refusal says '%s', expected '%s'",
        FsdpErrorLastMessage(), want);
  if (rank == 0) {
    TCALL(FsdpCkptPath(dir, 10, p, sizeof p));
    CHECK(access(p, F_OK) == 0, "-checkpoint_keep 1 pruned the good %s after a refused save", p);
    TCALL(FsdpCkptPath(dir, 20, p, sizeof p));
    CHECK(access(p, F_OK) != 0, "the refused %s exists", p);
    CHECK(count_files(dir, ".tmp-") == 0 && count_files(dir, ".headroom") == 0,
          "a refused save left a temporary file");
  }
  rig_destroy(&r);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  int status;
  if (argc >= 3 && strcmp(argv[1], "crash") == 0) {
    status = mode_crash(argv[2]);
  } else if (argc >= 3 && strcmp(argv[1], "after-crash") == 0) {
    status = mode_after_crash(argv[2]);
  } else {
    char dir[256], run[300];
    snprintf(dir, sizeof dir, "test_ckpt_np%d", W);
    snprintf(run, sizeof run, "%s/run", dir);
    make_clean_dir(run);
    make_clean_dir(dir);
    test_desc_int_range();
    test_family_register();
    test_reshard(dir);
    test_refused(dir);
    test_directory(dir);
    test_trained(dir);
    test_nonfinite_save(dir);
    /* every HDF5 file, group, dataset, attribute the library opened is closed */
    ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    CHECK(open_ids == 0, "%lld HDF5 objects left open", (long long)open_ids);
    status = test_finish("test_ckpt");
    if (status == 0) {
      make_clean_dir(run);
      make_clean_dir(dir);
      if (rank == 0) {
        rmdir(run);
        rmdir(dir);
      }
    }
  }
  FsdpFinalize();
  return status;
}
