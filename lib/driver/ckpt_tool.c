/* ckpt_tool.c: what fsdp-ckpt's subcommands do (info, verify and the
 * llm.c and Hugging Face conversions), for any model family; the program
 * (src/fsdp-ckpt.c) is their table and its options.  One process.
 *
 * Files it reads and writes:
 *
 * fsdp checkpoint (HDF5, lib/io/ckpt.h, format version FSDP_CKPT_VERSION)
 *   /                root attributes: format_version, program, created,
 *                    step, data_position, seed, global_batch, world_size,
 *                    sharding_factor, ranks_per_node (written topology)
 *   /model           attributes: name, family (gpt2; a file without it is
 *                    gpt2), the family's attributes (n_layer, n_embd, ...),
 *                    num_parameters (tensors)
 *   /model/<name>    fp32, the parameter's full logical shape (the names
 *                    of the family's table: wte [V,C], ...,
 *                    h.<i>.attn.c_attn.weight [3C,C], ... for GPT-2)
 *   /optim           attributes: type, step_count, lr, lr_min, weight_decay,
 *                    beta1, beta2, eps, grad_clip, warmup, total_steps,
 *                    decay_embeddings
 *   /optim/exp_avg/<name>, /optim/exp_avg_sq/<name>: AdamW moments, fp32
 *   A file written by import-llmc also carries the root attribute
 *   imported_from (the llm.c file it came from).
 *
 * llm.c checkpoint (karpathy/llm.c): a header of 256 int32 whose first is
 *   the magic of a family's model files and the tensors after it; each
 *   family that has the format states its header and tensor order
 *   (llmc_read/llmc_write in model/family.h; GPT-2's in its folder under
 *   lib/model/).
 *
 * [Note: the model's parameter list] Which datasets a checkpoint must hold
 * and their shapes come from the library: the file's model description
 * (its family and attributes, model.h) gives a model (family.h) that registers its
 * units with a one-rank runtime on MPI_COMM_SELF, and FsdpRuntimeUnitSpecs
 * lists them (before setup: nothing is allocated for info, verify and
 * export); FsdpCkptCheck compares the file with that list, and this tool
 * words its report.  A family's llm.c and Hugging Face layouts
 * (model/convert.h) are checked against that list: every model parameter
 * must be used exactly once with the element count (llm.c) or shape
 * (Hugging Face) the layout gives it, so a model change cannot silently
 * drop or misplace a tensor.
 *
 * [Note: import through the engine] import-llmc and import-hf write the
 * checkpoint with the library's streamed checkpoint writer (ckpt.h
 * [Note: streamed checkpoints]): the attributes FsdpCkptSave writes, the
 * parameters one at a time, AdamW moments that HDF5 fills with zeros, so
 * the layout is exactly what fsdp-train writes and loads; step 0, data
 * position 0, written topology W = F = G = 1.  The optimizer attributes
 * record the library defaults (FSDP_OPTIONS applies): informational, as a
 * resumed run uses its own options.
 *
 * [Note: never overwrite] Both converters write a temporary file next to
 * the output and publish it with FsdpPublish without replace (fileutil.h:
 * link(2), which fails if the output exists; checked up front too, before
 * any work): an existing file is never replaced, not even by a race.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/opts.h"
#include "comm/coll.h"
#include "comm/topo.h"
#include "driver/ckpt_tool.h"
#include "io/ckpt.h"
#include "io/fileutil.h"
#include "io/h5util.h"
#include "io/safetensors.h"
#include "model/convert.h"
#include "model/family.h"
#include "model/model.h"
#include "runtime/fsdp.h"
#include "runtime/optim.h"

#define MSG_SIZE 1400
/* elements per read while scanning or converting (1 MiB of fp32) */
#define CHUNK_ELEMS ((int64_t)1 << 18)

/* ------------------------------------------------------------------ */
/* the model's parameter list ([Note: the model's parameter list])     */

typedef struct {
  const FsdpParamSpec *spec;
  int unit;        /* the unit that registered it */
  int used;        /* llm.c conversion: mapped already */
} ParamRef;

typedef struct {
  FsdpModelDesc desc; /* the model, any family (family.h) */
  FsdpTopo topo;
  FsdpColl coll;
  FsdpRuntime rt;
  FsdpModel model;
  FsdpOptim opt;
  ParamRef *params; /* registration order */
  int nparams;
} Engine;

static int EngineDestroy(Engine *e)
{
  FSDP_CALL(FsdpOptimDestroy(&e->opt));
  FSDP_CALL(FsdpRuntimeDestroy(&e->rt));
  FSDP_CALL(FsdpModelDestroy(&e->model));
  FSDP_CALL(FsdpCollDestroy(&e->coll));
  FSDP_CALL(FsdpTopoDestroy(&e->topo));
  free(e->params);
  e->params = NULL;
  return FSDP_SUCCESS;
}

/* Not collective (MPI_COMM_SELF).  Register cfg's model with a one-rank
 * runtime and list its parameters; with setup, also allocate the shards
 * (F = 1: the whole flat parameter) and an AdamW optimizer (zero moments)
 * whose hyperparameters are *optim. */
static int EngineCreate(const FsdpModelDesc *desc, int setup, const FsdpOptimOptions *optim,
                        Engine *e)
{
  memset(e, 0, sizeof *e);
  e->desc = *desc;
  FsdpTopoOptions to = {0, 0, FSDP_PLACEMENT_BLOCK, 0};
  FsdpRuntimeOptions ro;
  memset(&ro, 0, sizeof ro);
  ro.reshard_after_forward = 1;
  ro.limit_all_gathers = 2;
  ro.prefetch = FSDP_PREFETCH_BACKWARD;
  ro.param_dtype = ro.reduce_dtype = FSDP_DTYPE_FP32;
  ro.grad_accum = 1;
  ro.accum_comm = 1;
  FSDP_CALL(FsdpTopoCreate(MPI_COMM_SELF, &to, &e->topo));
  FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &e->coll));
  FSDP_CALL(FsdpRuntimeCreate(e->topo, e->coll, &ro, &e->rt));
  FSDP_CALL(FsdpModelCreate(desc, 1, 1, (int)FsdpModelDescInt(desc, "seq_len"), FsdpKernelsCpu(),
                            0, &e->model));
  const FsdpModelTable *table = FsdpModelGetTable(e->model);
  FSDP_CALL(FsdpRuntimeAddModel(e->rt, table));
  int n = 0;
  for (int u = 0; u < FsdpRuntimeNumUnits(e->rt); u++) {
    const FsdpParamSpec *s;
    int np;
    FSDP_CALL(FsdpRuntimeUnitSpecs(e->rt, u, &s, &np));
    n += np;
  }
  e->params = calloc((size_t)n + 1, sizeof *e->params);
  FSDP_CHECK_ALLOC(e->params, ((size_t)n + 1) * sizeof *e->params);
  for (int u = 0; u < FsdpRuntimeNumUnits(e->rt); u++) {
    const FsdpParamSpec *s;
    int np;
    FSDP_CALL(FsdpRuntimeUnitSpecs(e->rt, u, &s, &np));
    for (int i = 0; i < np; i++) e->params[e->nparams++] = (ParamRef){&s[i], u, 0};
  }
  if (setup) {
    FSDP_CALL(FsdpRuntimeSetUp(e->rt));
    FSDP_CALL(FsdpOptimCreate(e->rt, FsdpKernelsCpu(), optim, table->decays, &e->opt));
  }
  return FSDP_SUCCESS;
}

static const ParamRef *FindParam(const Engine *e, const char *name)
{
  for (int i = 0; i < e->nparams; i++)
    if (strcmp(e->params[i].spec->name, name) == 0) return &e->params[i];
  return NULL;
}

/* ------------------------------------------------------------------ */
/* structure and values of the tensor groups                           */

/* A report of FsdpCkptCheck in this tool's words (it checks a file
 * against the file's own model config, fp32 only); the rest as the
 * library words them. */
static void ReportString(const FsdpCkptReport *r, const char *path, char *msg, size_t size)
{
  char have[160], want[160];
  const char *g = r->group, *n = r->name;
  switch (r->finding) {
  case FSDP_CKPT_NO_GROUP: FsdpMsgf(msg, size, "checkpoint %s has no group %s", path, g); break;
  case FSDP_CKPT_MISSING: FsdpMsgf(msg, size, "checkpoint %s has no dataset %s/%s", path, g, n); break;
  case FSDP_CKPT_NOT_FLOAT:
  case FSDP_CKPT_NOT_FP32:
    FsdpMsgf(msg, size, "checkpoint %s: %s/%s has %s elements of %zu bytes, expected fp32", path, g, n,
         r->finding == FSDP_CKPT_NOT_FP32 ? "floating-point" : "non-float", r->elem_size);
    break;
  case FSDP_CKPT_SHAPE:
    FsdpCkptShapeString(r->ndim, r->shape, have, sizeof have);
    FsdpCkptShapeString(r->want_ndim, r->want_shape, want, sizeof want);
    FsdpMsgf(msg, size, "checkpoint %s: %s/%s has shape %s, the model config expects %s", path, g, n,
         have, want);
    break;
  case FSDP_CKPT_EXTRA:
    FsdpMsgf(msg, size, "checkpoint %s has %s/%s, which is not a parameter of its model config", path,
         g, n);
    break;
  default: FsdpCkptReportString(r, path, msg, size); break;
  }
}

/* The groups `checks` (FSDP_CKPT_CHECK_*) of path hold exactly the
 * engine's parameters as fp32 datasets of their shapes (and, with
 * FSDP_CKPT_CHECK_VALUES, only finite values), else a usage error naming
 * the first problem. */
static int CheckOrRefuse(const char *path, FsdpRuntime rt, unsigned checks, const char *suffix);

static int CheckGroups(const char *path, const Engine *e, unsigned checks)
{
  return CheckOrRefuse(path, e->rt, checks | FSDP_CKPT_CHECK_FP32, "");
}

/* [Note: finite checkpoints] (ckpt.h): every value of the groups
 * `checks` names is finite, else a usage error naming the first. */
static int CheckValues(const char *path, unsigned checks)
{
  return CheckOrRefuse(path, NULL, checks | FSDP_CKPT_CHECK_VALUES, ": not exported");
}

/* FsdpCkptCheck of `checks` (against rt's parameters where rt is not
 * NULL): a finding is a usage error with the report, then suffix. */
static int CheckOrRefuse(const char *path, FsdpRuntime rt, unsigned checks, const char *suffix)
{
  FsdpCkptReport *r = calloc(1, sizeof *r);
  FSDP_CHECK_ALLOC(r, sizeof *r);
  int err = FsdpCkptCheck(path, rt, NULL, checks, NULL, r);
  char msg[MSG_SIZE];
  if (!err && r->finding != FSDP_CKPT_GOOD) {
    ReportString(r, path, msg, sizeof msg);
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE, "%s%s", msg, suffix);
  }
  free(r);
  return err;
}

/* Open a checkpoint for reading: metadata through the library (which names
 * the file on any problem), the config its model description holds,
 * checked, the model's parameter list, then the file with serial HDF5. */
static int OpenCheckpoint(const char *path, FsdpCkptMeta *meta, Engine *e, hid_t *f)
{
  *f = -1;
  FSDP_CALL(FsdpCkptReadMeta(MPI_COMM_SELF, path, meta));
  char what[4200];
  snprintf(what, sizeof what, "checkpoint %s", path);
  FSDP_CALL(FsdpModelDescCheck(&meta->model, what));
  FSDP_CALL(EngineCreate(&meta->model, 0, NULL, e));
  *f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (*f < 0) {
    char why[600];
    FsdpHdf5ErrorSummary(why, sizeof why);
    EngineDestroy(e);
    FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint %s cannot be opened: %s", path, why);
  }
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* info                                                                */

int FsdpCkptToolInfo(const char *path)
{
  FsdpCkptMeta m;
  Engine e;
  hid_t f;
  FSDP_CALL(OpenCheckpoint(path, &m, &e, &f));
  char program[128] = "";
  FsdpHdf5AttrReadString(f, "program", program, sizeof program);
  /* the attributes in the family's order (the file lists them by name) */
  FsdpModelDesc desc = FsdpModelGetTable(e.model)->desc;
  char attrs[1024];
  snprintf(desc.preset, sizeof desc.preset, "%s", m.model.preset);
  FsdpModelDescFormat(&desc, attrs, sizeof attrs);
  printf("checkpoint      %s\n", path);
  printf("format_version  %d\n", m.format_version);
  printf("program         %s\n", program[0] ? program : "(not recorded)");
  printf("created         %s\n", m.created[0] ? m.created : "(not recorded)");
  printf("step            %lld\n", (long long)m.step);
  printf("data_position   %lld micro-batches\n", (long long)m.data_position);
  printf("seed            %lld\n", (long long)m.seed);
  printf("global_batch    %lld sequences\n", (long long)m.global_batch);
  printf("written at      W %d, F %d, G %d (world size, sharding factor, ranks per node; "
         "loads at any)\n",
         m.world_size, m.sharding_factor, m.ranks_per_node);
  printf("family          %s\n", desc.family);
  printf("model           %s: %s\n", desc.preset[0] ? desc.preset : "(unnamed)", attrs);
  int has_optim = H5Lexists(f, "/optim", H5P_DEFAULT) > 0;
  if (has_optim) {
    const FsdpOptimOptions *o = &m.optim;
    printf("optimizer       adamw, step_count %lld\n", (long long)m.optim_step);
    printf("                lr %g, lr_min %g, weight_decay %g, beta1 %g, beta2 %g, eps %g, "
           "grad_clip %g, warmup %lld, total_steps %lld, decay_embeddings %d\n",
           o->lr, o->lr_min, o->weight_decay, o->beta1, o->beta2, o->eps, o->grad_clip,
           (long long)o->warmup, (long long)o->total_steps, o->decay_embeddings);
  } else {
    printf("optimizer       none (weights only: no /optim group)\n");
  }
  /* the model's parameters in registration order, shapes as in the file */
  int64_t total = 0;
  int missing = 0;
  printf("parameters      (/model/<name>, registration order)\n");
  printf("  %-36s %-16s %12s\n", "name", "shape", "elements");
  hid_t g = H5Gopen2(f, "/model", H5P_DEFAULT);
  for (int i = 0; i < e.nparams; i++) {
    const FsdpParamSpec *spec = e.params[i].spec;
    char shape[160] = "(missing)";
    int64_t numel = 0;
    hid_t d = g >= 0 && H5Lexists(g, spec->name, H5P_DEFAULT) > 0 ? H5Dopen2(g, spec->name, H5P_DEFAULT) : -1;
    hid_t s = d >= 0 ? H5Dget_space(d) : -1;
    int nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    hsize_t dims[H5S_MAX_RANK];
    if (nd >= 0 && H5Sget_simple_extent_dims(s, dims, NULL) >= 0) {
      int64_t sh[H5S_MAX_RANK];
      numel = 1;
      for (int k = 0; k < nd; k++) {
        sh[k] = (int64_t)dims[k];
        numel *= sh[k];
      }
      FsdpCkptShapeString(nd, sh, shape, sizeof shape);
    } else {
      missing++;
    }
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    total += numel;
    printf("  %-36s %-16s %12lld\n", spec->name, shape, (long long)numel);
  }
  if (g >= 0) H5Gclose(g);
  int64_t want = FsdpModelDescParamCount(&desc);
  printf("total           %d tensors, %lld elements (model config: %lld parameters)%s\n",
         e.nparams - missing, (long long)total, (long long)want,
         missing ? "  MISSING TENSORS: run fsdp-ckpt verify" : "");
  fflush(stdout);
  H5Fclose(f);
  FSDP_CALL(EngineDestroy(&e));
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* verify                                                              */

int FsdpCkptToolVerify(const char *path, int weights_only)
{
  FsdpCkptMeta m;
  Engine e;
  hid_t f;
  FSDP_CALL(OpenCheckpoint(path, &m, &e, &f));
  int ngroups = 3;
  if (H5Lexists(f, "/optim", H5P_DEFAULT) <= 0) {
    if (!weights_only) {
      H5Fclose(f);
      EngineDestroy(&e);
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "checkpoint %s has no /optim group (no optimizer state): fsdp-train -resume "
                 "needs it (-weights_only accepts a weights-only file)",
                 path);
    }
    ngroups = 1;
  }
  /* the library's check, as the trainer's load and -resume auto make it
   * ([Note: finite checkpoints] in ckpt.h): every value read */
  int err = CheckGroups(path, &e, FSDP_CKPT_CHECK_MODEL | FSDP_CKPT_CHECK_VALUES |
                                      (ngroups == 3 ? FSDP_CKPT_CHECK_OPTIM : 0));
  int64_t checked = 0;
  for (int k = 0; k < ngroups; k++)
    for (int i = 0; i < e.nparams; i++) checked += FlatParamSpecNumel(e.params[i].spec);
  H5Fclose(f);
  int nparams = e.nparams;
  EngineDestroy(&e);
  FSDP_CALL(err);
  printf("%s: ok: step %lld, %d datasets (%s) with the shapes of its model config, fp32, "
         "%lld values, no NaN/Inf\n",
         path, (long long)m.step, nparams * ngroups,
         ngroups == 3 ? "/model, /optim/exp_avg, /optim/exp_avg_sq" : "/model only",
         (long long)checked);
  fflush(stdout);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* llm.c                                                               */

/* The families that have an llm.c format, by title ("GPT-2"; "GPT-2 or
 * ..."), for messages. */
static void LlmcTitles(char *buf, size_t size)
{
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < FsdpModelNumFamilies() && n < size; i++)
    if (FsdpModelFamilyAt(i)->llmc_read)
      n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? " or " : "",
                            FsdpModelFamilyAt(i)->title ? FsdpModelFamilyAt(i)->title
                                                        : FsdpModelFamilyAt(i)->name);
}

/* The model parameter that tensor x of an llm.c layout is, checked against
 * the element count llm.c gives it (wte: V of its Vp rows); marks it used
 * ([Note: the model's parameter list]). */
static int LlmcParam(Engine *e, const FsdpLlmcTensor *x, ParamRef **out)
{
  ParamRef *p = (ParamRef *)FindParam(e, x->name);
  if (!p)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "llm.c tensor %s maps to %s, which the %s model does not have",
               x->llmc, x->name, e->desc.family);
  if (FlatParamSpecNumel(p->spec) != x->numel || p->used)
    FSDP_ERROR(FSDP_ERR_INTERNAL,
               "llm.c tensor %s (layer %d) has %lld elements but model parameter %s has %lld%s",
               x->llmc, x->layer < 0 ? 0 : x->layer, (long long)x->numel, x->name,
               (long long)FlatParamSpecNumel(p->spec), p->used ? " and is used twice" : "");
  p->used = 1;
  *out = p;
  return FSDP_SUCCESS;
}

static int LlmcCheckCoverage(const Engine *e)
{
  for (int i = 0; i < e->nparams; i++)
    if (!e->params[i].used)
      FSDP_ERROR(FSDP_ERR_INTERNAL, "model parameter %s has no place in the llm.c layout",
                 e->params[i].spec->name);
  return FSDP_SUCCESS;
}

/* [Note: never overwrite] */
static int RefuseExisting(const char *out)
{
  struct stat st;
  if (stat(out, &st) == 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "output file %s exists: fsdp-ckpt never overwrites a file (remove it or choose "
               "another name)",
               out);
  if (errno != ENOENT) FSDP_ERROR(FSDP_ERR_USAGE, "cannot create output %s: %s", out, strerror(errno));
  return FSDP_SUCCESS;
}

/* A temporary file next to out, created (and closed). */
static int MakeTemp(const char *out, const char *tag, char *tmp, size_t size)
{
  int e = FsdpTempFileCreate(out, tag, tmp, size);
  if (e == ENAMETOOLONG) FSDP_ERROR(FSDP_ERR_USAGE, "output path %s is too long", out);
  if (e) FSDP_ERROR(FSDP_ERR_USAGE, "cannot create %s: %s", tmp, strerror(e));
  return FSDP_SUCCESS;
}

/* Publish the complete file tmp as out without ever replacing out; tmp is
 * gone afterwards either way. */
static int Publish(const char *tmp, const char *out)
{
  FsdpPublishStep step;
  int e = FsdpPublish(tmp, out, 0, &step);
  if (e && step == FSDP_PUBLISH_SYNC_DIR) {
    char dir[4200];
    FsdpDirName(out, dir, sizeof dir);
    FsdpWarn(0, "fsync of directory %s failed: %s", dir, strerror(e));
    return FSDP_SUCCESS;
  }
  if (!e) return FSDP_SUCCESS;
  unlink(tmp);
  if (e == EEXIST) FSDP_CALL(RefuseExisting(out));
  if (step == FSDP_PUBLISH_SYNC_FILE) FSDP_ERROR(FSDP_ERR_IO, "fsync of %s failed: %s", tmp, strerror(e));
  FSDP_ERROR(FSDP_ERR_IO, "cannot create %s: %s", out, strerror(e));
}

static int WriteAll(FILE *fp, const void *buf, size_t bytes, const char *path)
{
  if (bytes && fwrite(buf, 1, bytes, fp) != bytes)
    FSDP_ERROR(FSDP_ERR_IO, "writing %s failed: %s", path, strerror(errno));
  return FSDP_SUCCESS;
}

/* The body of export-llmc: the header, then /model of an open checkpoint
 * in the layout's order into fp. */
static int ExportTensors(hid_t f, Engine *e, const int32_t *hdr, const FsdpLlmcLayout *lay,
                         FILE *fp, const char *tmp)
{
  FSDP_CALL(WriteAll(fp, hdr, FSDP_LLMC_HEADER_INTS * sizeof *hdr, tmp));
  int64_t cap = 0;
  for (int i = 0; i < e->nparams; i++)
    if (FlatParamSpecNumel(e->params[i].spec) > cap) cap = FlatParamSpecNumel(e->params[i].spec);
  for (int t = 0; t < lay->n; t++)
    if (lay->t[t].pad_rows * lay->t[t].row > cap) cap = lay->t[t].pad_rows * lay->t[t].row;
  float *buf = NULL;
  FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, (size_t)cap * sizeof(float), &buf));
  int err = FSDP_SUCCESS;
  hid_t g = -1;
  FSDP_HDF5_GOTO(g = H5Gopen2(f, "/model", H5P_DEFAULT));
  for (int t = 0; t < lay->n && !err; t++) {
    ParamRef *p;
    FSDP_GOTO(LlmcParam(e, &lay->t[t], &p));
    int64_t n = FlatParamSpecNumel(p->spec), pad = lay->t[t].pad_rows * lay->t[t].row;
    hid_t d = -1;
    FSDP_HDF5_GOTO(d = H5Dopen2(g, p->spec->name, H5P_DEFAULT));
    herr_t rc = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    H5Dclose(d);
    FSDP_HDF5_GOTO(rc);
    FSDP_GOTO(WriteAll(fp, buf, (size_t)n * sizeof(float), tmp));
    if (pad > 0) { /* llm.c's padding rows (GPT-2: wte rows V..Vp-1) */
      memset(buf, 0, (size_t)pad * sizeof(float));
      FSDP_GOTO(WriteAll(fp, buf, (size_t)pad * sizeof(float), tmp));
    }
  }
  FSDP_GOTO(LlmcCheckCoverage(e));
done:
  FsdpHdf5Close(&g);
  FsdpFree(&buf);
  return err;
}

int FsdpCkptToolExportLlmc(const char *path, const char *out)
{
  if (!FsdpHostIsLittleEndian())
    FSDP_ERROR(FSDP_ERR_USAGE, "llm.c files are little-endian and this host is not: unsupported");
  FSDP_CALL(RefuseExisting(out));
  FsdpCkptMeta m;
  Engine e;
  hid_t f;
  FSDP_CALL(OpenCheckpoint(path, &m, &e, &f));
  const FsdpModelFamily *fam = FsdpModelFamilyFind(e.desc.family);
  if (!fam->llmc_write) {
    char titles[256];
    LlmcTitles(titles, sizeof titles);
    H5Fclose(f);
    EngineDestroy(&e);
    FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint %s holds a %s model: llm.c files hold %s models only",
               path, m.model.family, titles);
  }
  /* [Note: finite checkpoints] (ckpt.h): no NaN/Inf goes out */
  if (CheckGroups(path, &e, FSDP_CKPT_CHECK_MODEL | FSDP_CKPT_CHECK_VALUES) != FSDP_SUCCESS) {
    H5Fclose(f);
    EngineDestroy(&e);
    FSDP_CALL(FSDP_ERR_USAGE);
  }
  int32_t hdr[FSDP_LLMC_HEADER_INTS];
  FsdpLlmcLayout lay;
  memset(&lay, 0, sizeof lay);
  char tmp[4200];
  int err = fam->llmc_write(&e.desc, hdr, &lay);
  if (!err) err = MakeTemp(out, "tmp", tmp, sizeof tmp);
  FILE *fp = NULL;
  if (!err) {
    fp = fopen(tmp, "wb");
    if (!fp) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "cannot open %s: %s", tmp,
                           strerror(errno));
      unlink(tmp);
    }
  }
  if (!err) {
    err = ExportTensors(f, &e, hdr, &lay, fp, tmp);
    if (fclose(fp) != 0 && !err)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "writing %s failed: %s",
                           tmp, strerror(errno));
    if (!err) err = Publish(tmp, out);
    else unlink(tmp);
  }
  H5Fclose(f);
  int derr = EngineDestroy(&e);
  if (!err && !derr) {
    int64_t n = FsdpLlmcLayoutNumel(&lay);
    printf("%s: llm.c %s checkpoint, version %d (fp32), step %lld of %s: %s, %lld parameters, "
           "%lld bytes\n",
           out, fam->title ? fam->title : fam->name, lay.version, (long long)m.step, path,
           lay.sizes, (long long)n, (long long)(FSDP_LLMC_HEADER_INTS * 4 + n * 4));
    fflush(stdout);
  }
  FsdpLlmcLayoutDestroy(&lay); /* on every path: llmc_write made it */
  FSDP_CALL(err);
  FSDP_CALL(derr);
  return FSDP_SUCCESS;
}

/* Read n values of the file's element type (4: fp32, 2: bf16) as fp32. */
static int ReadFloats(FILE *fp, int elem, float *dst, int64_t n, uint16_t *scratch,
                      const char *path)
{
  if (elem == 4) {
    if (n && fread(dst, sizeof(float), (size_t)n, fp) != (size_t)n)
      FSDP_ERROR(FSDP_ERR_USAGE, "llm.c checkpoint %s: short read (truncated?)", path);
    return FSDP_SUCCESS;
  }
  for (int64_t i = 0; i < n; i += CHUNK_ELEMS) {
    size_t k = (size_t)(n - i < CHUNK_ELEMS ? n - i : CHUNK_ELEMS);
    if (fread(scratch, sizeof(uint16_t), k, fp) != k)
      FSDP_ERROR(FSDP_ERR_USAGE, "llm.c checkpoint %s: short read (truncated?)", path);
    for (size_t j = 0; j < k; j++) { /* bf16 is the top half of fp32: exact */
      uint32_t bits = (uint32_t)scratch[j] << 16;
      memcpy(&dst[i + (int64_t)j], &bits, sizeof bits);
    }
  }
  return FSDP_SUCCESS;
}

/* Header of an llm.c file: the family whose magic it has reads the rest
 * (version, sizes, the file's length) into a description and a layout. */
static int ReadLlmcHeader(FILE *fp, const char *path, const FsdpModelFamily **fam,
                          FsdpModelDesc *desc, FsdpLlmcLayout *lay)
{
  int32_t hdr[FSDP_LLMC_HEADER_INTS];
  char titles[256];
  LlmcTitles(titles, sizeof titles);
  if (fread(hdr, sizeof hdr, 1, fp) != 1)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s is not an llm.c %s checkpoint: shorter than the 1024-byte header", path, titles);
  *fam = NULL;
  char magics[256] = "";
  size_t n = 0;
  for (int i = 0; i < FsdpModelNumFamilies(); i++) {
    const FsdpModelFamily *f = FsdpModelFamilyAt(i);
    if (!f->llmc_read) continue;
    if (hdr[0] == f->llmc_magic) *fam = f;
    n += (size_t)snprintf(magics + n, sizeof magics - n, "%s%d", n ? " or " : "", (int)f->llmc_magic);
  }
  if (!*fam)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s is not an llm.c %s checkpoint: magic %d, expected %s (a token file has "
               "20240520, a tokenizer 20240328)",
               path, titles, (int)hdr[0], magics);
  struct stat st;
  if (fstat(fileno(fp), &st) != 0)
    FSDP_ERROR(FSDP_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
  FSDP_CALL((*fam)->llmc_read(hdr, (int64_t)st.st_size, path, desc, lay));
  return FSDP_SUCCESS;
}

/* Every tensor of the llm.c file (after its header) into the streamed
 * checkpoint writer, one at a time ([Note: streamed conversion]). */
static int ImportTensors(FILE *fp, const char *path, const FsdpLlmcLayout *lay, Engine *e,
                         FsdpCkptWriter w)
{
  int elem = lay->elem_bytes;
  uint16_t *scratch = NULL;
  float *buf = NULL;
  int64_t cap = CHUNK_ELEMS;
  int err = FSDP_SUCCESS;
  if (elem == 2) FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)CHUNK_ELEMS * sizeof(uint16_t), &scratch));
  FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)cap * sizeof(float), &buf));
  for (int t = 0; t < lay->n; t++) {
    const FsdpLlmcTensor *x = &lay->t[t];
    ParamRef *p;
    FSDP_GOTO(LlmcParam(e, x, &p));
    int64_t n = FlatParamSpecNumel(p->spec), npad = x->pad_rows * x->row;
    FSDP_GOTO(FsdpCkptWriterBegin(w, p->spec));
    for (int64_t i = 0; i < n; i += CHUNK_ELEMS) {
      int64_t k = n - i < CHUNK_ELEMS ? n - i : CHUNK_ELEMS;
      FSDP_GOTO(ReadFloats(fp, elem, buf, k, scratch, path));
      FSDP_GOTO(FsdpCkptWriterWrite(w, i, k, buf));
    }
    FSDP_GOTO(FsdpCkptWriterEnd(w));
    int warned = 0; /* padding rows (GPT-2: wte rows V..Vp-1): llm.c keeps them zero */
    for (int64_t i = 0; i < npad; i += CHUNK_ELEMS) {
      int64_t k = npad - i < CHUNK_ELEMS ? npad - i : CHUNK_ELEMS;
      FSDP_GOTO(ReadFloats(fp, elem, buf, k, scratch, path));
      for (int64_t j = 0; j < k && !warned; j++)
        if (buf[j] != 0.0f) {
          int64_t first = x->first_pad_row;
          FsdpWarn(0, "llm.c checkpoint %s: padded %s row %lld is not zero; rows %lld..%lld are "
                      "dropped (fsdp's %s has V = %lld rows)",
                   path, x->name, (long long)(first + (i + j) / x->row), (long long)first,
                   (long long)(first + x->pad_rows - 1), x->name, (long long)first);
          warned = 1;
        }
    }
  }
  FSDP_GOTO(LlmcCheckCoverage(e));
done:
  FsdpFree(&scratch);
  FsdpFree(&buf);
  return err;
}

/* The optimizer defaults of the library (plus FSDP_OPTIONS), read from a
 * database of their own so that -help of fsdp-ckpt does not list them. */
static int DefaultOptimOptions(FsdpOptimOptions *o)
{
  char prog[] = "fsdp-ckpt";
  char *argv[] = {prog, NULL};
  FsdpOpts db = NULL;
  FSDP_CALL(FsdpOptsCreate(MPI_COMM_SELF, 1, argv, &db));
  int err = FsdpOptimOptionsFromDb(db, o);
  FsdpOptsReportLeft(db, NULL, NULL); /* unread FSDP_OPTIONS are not ours to report */
  FsdpOptsDestroy(&db);
  FSDP_CALL(err);
  o->total_steps = 0;
  return FSDP_SUCCESS;
}

int FsdpCkptToolImportLlmc(const char *in, const char *out, int64_t global_batch)
{
  if (!FsdpHostIsLittleEndian())
    FSDP_ERROR(FSDP_ERR_USAGE, "llm.c files are little-endian and this host is not: unsupported");
  FSDP_CALL(RefuseExisting(out));
  FILE *fp = fopen(in, "rb");
  if (!fp) FSDP_ERROR(FSDP_ERR_USAGE, "cannot open llm.c checkpoint %s: %s", in, strerror(errno));
  const FsdpModelFamily *fam = NULL;
  FsdpModelDesc desc;
  FsdpLlmcLayout lay;
  memset(&lay, 0, sizeof lay);
  int err = ReadLlmcHeader(fp, in, &fam, &desc, &lay);
  FsdpOptimOptions oo;
  memset(&oo, 0, sizeof oo);
  if (!err) err = DefaultOptimOptions(&oo);
  Engine e;
  memset(&e, 0, sizeof e);
  /* the parameter list only: nothing is allocated for the model */
  if (!err) err = EngineCreate(&desc, 0, NULL, &e);
  char tmp[4200] = "";
  if (!err) err = MakeTemp(out, "import", tmp, sizeof tmp);
  FsdpCkptWriter w = NULL;
  if (!err) {
    FsdpCkptMeta m;
    memset(&m, 0, sizeof m);
    m.step = 0;
    m.data_position = 0;
    m.seed = 0;
    m.global_batch = global_batch;
    m.optim = oo;
    m.model = desc;
    /* [Note: import through the engine] */
    if (!err) err = FsdpCkptWriterCreate(tmp, &m, e.nparams, &w);
  }
  if (!err) err = ImportTensors(fp, in, &lay, &e, w);
  fclose(fp);
  if (!err) err = FsdpCkptWriterClose(&w);
  FsdpCkptWriterAbort(&w);
  if (!err) {
    hid_t f = H5Fopen(tmp, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0 || FsdpHdf5AttrWriteString(f, "imported_from", in) < 0)
      err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "recording imported_from");
    if (f >= 0 && H5Fclose(f) < 0 && !err)
      err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "H5Fclose");
  }
  if (!err) err = Publish(tmp, out);
  else if (tmp[0]) unlink(tmp);
  int derr = EngineDestroy(&e);
  int version = lay.version;
  FsdpLlmcLayoutDestroy(&lay);
  FSDP_CALL(err);
  FSDP_CALL(derr);
  char opts[2048];
  FsdpModelDescTrainOptions(&desc, opts, sizeof opts);
  printf("%s: fsdp checkpoint (format %d) at step 0, zero AdamW moments, from llm.c version %d "
         "(%s) %s: %lld parameters\n"
         "load it with: fsdp-train %s -resume %s\n",
         out, FSDP_CKPT_VERSION, version, version == 3 ? "fp32" : "bf16", in,
         (long long)FsdpModelDescParamCount(&desc), opts, out);
  fflush(stdout);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Hugging Face: import-hf, export-hf                                  */

/* Hugging Face names: a family's layout ([Note: Hugging Face names] in
 * model/convert.h), built from the model description alone: fsdp name and
 * shape, the Hugging Face name, whether Hugging Face stores the matrix
 * transposed, the names a file may leave off or hold beyond the
 * parameters, and the tied head.  The layout is checked against the
 * engine's parameter list ([Note: the model's parameter list]) before any
 * tensor moves, so a model change cannot silently drop one.
 *
 * [Note: streamed conversion] import-hf, export-hf, import-llmc and
 * export-llmc hold one tensor at a time in fp32 (plus fixed buffers): a
 * tensor is read whole (safetensors: widened in place, safetensors.h),
 * then written (transposed through a fixed block buffer where needed)
 * with the streamed checkpoint writer or the safetensors writer
 * (ckpt.h [Note: streamed checkpoints]).  Peak memory is about the
 * largest tensor, never the model: tests/test_hf.sh measures it. */

#define HF_BLOCK ((int64_t)1 << 16) /* elements per transposed block */
#define HF_PIECE ((int64_t)1 << 18) /* elements per piece of an untransposed tensor */

typedef FsdpHfTensor HfTensor;

typedef struct {
  FsdpModelDesc desc;
  const FsdpModelFamily *fam;
  FsdpHfLayout lay;
  int n;
  HfTensor *t; /* lay.t */
  int *seen;   /* import: found in the files */
} HfModel;

static void HfModelDestroy(HfModel *m)
{
  FsdpHfLayoutDestroy(&m->lay);
  free(m->seen);
  m->seen = NULL;
  m->t = NULL;
}

/* The families that convert to and from Hugging Face, by a key of theirs
 * ("gpt2 and llama"), for messages. */
static void HfFamilies(int by_model_type, char *buf, size_t size)
{
  int k = 0, total = 0;
  for (int i = 0; i < FsdpModelNumFamilies(); i++) total += FsdpModelFamilyAt(i)->hf_layout != NULL;
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < FsdpModelNumFamilies() && n < size; i++) {
    const FsdpModelFamily *f = FsdpModelFamilyAt(i);
    if (!f->hf_layout) continue;
    k++;
    n += (size_t)snprintf(buf + n, size - n, "%s%s", k == 1 ? "" : k == total ? " and " : ", ",
                          by_model_type ? f->hf_model_type : f->name);
  }
}

/* The layout of a description; `what` names where the description came
 * from. */
static int HfModelFromDesc(const FsdpModelDesc *desc, const char *what, HfModel *m)
{
  memset(m, 0, sizeof *m);
  m->desc = *desc;
  m->fam = FsdpModelFamilyFind(desc->family);
  if (!m->fam || !m->fam->hf_layout) {
    char fams[256];
    HfFamilies(0, fams, sizeof fams);
    FSDP_ERROR(FSDP_ERR_USAGE, "%s holds a %s model: fsdp-ckpt converts %s to and from "
                               "Hugging Face", what, desc->family, fams);
  }
  int err = m->fam->hf_layout(desc, what, &m->lay);
  if (err) {
    HfModelDestroy(m);
    return err;
  }
  m->n = m->lay.n;
  m->t = m->lay.t;
  m->seen = calloc((size_t)m->n + 1, sizeof *m->seen);
  if (!m->seen) {
    HfModelDestroy(m);
    FSDP_CHECK_ALLOC(NULL, ((size_t)m->n + 1) * sizeof(int));
  }
  return FSDP_SUCCESS;
}

/* The table against the engine's parameter list (either family), name and
 * shape, every parameter once ([Note: the model's parameter list]). */
static int HfCheckEngine(const HfModel *m)
{
  Engine e;
  FSDP_CALL(EngineCreate(&m->desc, 0, NULL, &e));
  int err = FSDP_SUCCESS;
  for (int i = 0; i < m->n && !err; i++) {
    ParamRef *p = (ParamRef *)FindParam(&e, m->t[i].fsdp);
    int same = p && p->spec->ndim == m->t[i].ndim && !p->used;
    for (int d = 0; same && d < p->spec->ndim; d++) same = p->spec->shape[d] == m->t[i].shape[d];
    if (!same)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_INTERNAL,
                           "Hugging Face tensor %s maps to %s, which the %s model %s", m->t[i].hf,
                           m->t[i].fsdp, m->desc.family,
                           p ? "has with another shape (or twice)" : "does not have");
    else p->used = 1;
  }
  for (int i = 0; i < e.nparams && !err; i++)
    if (!e.params[i].used)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_INTERNAL,
                           "model parameter %s has no Hugging Face name", e.params[i].spec->name);
  int derr = EngineDestroy(&e);
  FSDP_CALL(err);
  return derr;
}

/* ---- config.json ---------------------------------------------------- */

/* config.json of a Hugging Face folder into a model description, through
 * the family whose model_type it names. */
static int HfReadConfig(const char *dir, FsdpModelDesc *desc)
{
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FsdpHfConfig cfg = NULL;
  FSDP_CALL(FsdpHfConfigLoad(path, &cfg));
  const char *type = FsdpHfConfigString(cfg, "model_type");
  const FsdpModelFamily *fam = NULL;
  for (int i = 0; type && i < FsdpModelNumFamilies(); i++) {
    const FsdpModelFamily *f = FsdpModelFamilyAt(i);
    if (f->hf_read_config && f->hf_model_type && strcmp(f->hf_model_type, type) == 0) fam = f;
  }
  int err;
  if (fam) {
    err = fam->hf_read_config(cfg, desc);
  } else {
    char types[256];
    HfFamilies(1, types, sizeof types);
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "%s: model_type %s%s%s: fsdp-ckpt imports %s", path, type ? "\"" : "",
                         type ? type : "is missing", type ? "\"" : "", types);
  }
  FsdpHfConfigDestroy(&cfg);
  return err;
}

/* config.json that transformers' from_pretrained reads for m. */
static int HfWriteConfig(const HfModel *m, const char *dtype, const char *path)
{
  FsdpHfConfig cfg = NULL;
  FSDP_CALL(FsdpHfConfigCreate(path, &cfg));
  int err = m->fam->hf_write_config(&m->desc, cfg);
  if (!err) err = FsdpHfConfigSetString(cfg, "torch_dtype", dtype);
  if (!err) err = FsdpHfConfigWrite(cfg, path);
  FsdpHfConfigDestroy(&cfg);
  return err;
}

/* ---- moving tensors ------------------------------------------------- */

/* Rows [r0, r1) of the transpose of src [a, b] (row-major) into dst: dst
 * row j = column j of src, a elements. */
static void TransposeRows(const float *src, int64_t a, int64_t b, int64_t r0, int64_t r1, float *dst)
{
  for (int64_t j = r0; j < r1; j++)
    for (int64_t k = 0; k < a; k++) dst[(j - r0) * a + k] = src[k * b + j];
}


/* Where import-hf found each Hugging Face tensor. */
typedef struct {
  FsdpStFile f;
  const FsdpStTensor *t;
} HfSource;

/* The table entry a file's tensor name maps to (i), or -1 with *ignore
 * set when it is a tensor a converter skips (tied head, mask buffers). */
static int HfMatch(const HfModel *m, const char *name, int *ignore)
{
  *ignore = 0;
  const char *n = name, *prefix = m->lay.optional_prefix;
  size_t plen = prefix ? strlen(prefix) : 0;
  if (plen && strncmp(n, prefix, plen) == 0) n += plen;
  for (int i = 0; i < m->n; i++) {
    const char *hf = m->t[i].hf;
    if (plen && strncmp(hf, prefix, plen) == 0) hf += plen;
    if (strcmp(hf, n) == 0) return i;
  }
  size_t len = strlen(n);
  for (int k = 0; m->lay.ignored_suffixes && m->lay.ignored_suffixes[k]; k++) {
    size_t sl = strlen(m->lay.ignored_suffixes[k]);
    if (len > sl && strcmp(n + len - sl, m->lay.ignored_suffixes[k]) == 0) *ignore = 1;
  }
  if (m->lay.tied_head && strcmp(name, m->lay.tied_head) == 0) *ignore = 2;
  return -1;
}

static void HfShapeString(const FsdpStTensor *t, char *buf, size_t size)
{
  FsdpCkptShapeString(t->ndim, t->shape, buf, size);
}

/* Each table entry found once in the set, with its shape; every tensor of
 * the set used or known to be skipped. */
static int HfMatchSet(HfModel *m, FsdpStSet set, const char *dir, HfSource *src, HfSource *head)
{
  char have[160], want[160], attrs[1024];
  FsdpModelDescFormat(&m->desc, attrs, sizeof attrs);
  head->t = NULL;
  for (int i = 0; i < FsdpStSetNumTensors(set); i++) {
    FsdpStFile f;
    const FsdpStTensor *t;
    FsdpStSetTensorAt(set, i, &f, &t);
    int ignore, k = HfMatch(m, t->name, &ignore);
    if (ignore == 2) {
      *head = (HfSource){f, t};
      continue;
    }
    if (ignore) continue;
    if (k < 0)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "safetensors file %s: tensor %s is not a parameter of the %s model of %s/config.json "
                 "(%s)",
                 FsdpStPath(f), t->name, m->desc.family, dir, attrs);
    HfTensor *e = &m->t[k];
    if (m->seen[k])
      FSDP_ERROR(FSDP_ERR_USAGE, "%s holds tensor %s twice (as %s and %s)", dir, e->fsdp,
                 src[k].t->name, t->name);
    int64_t ws[2] = {e->transpose ? e->shape[1] : e->shape[0], e->transpose ? e->shape[0] : e->shape[1]};
    int same = t->ndim == e->ndim && t->shape[0] == ws[0] && (e->ndim < 2 || t->shape[1] == ws[1]);
    if (!same) {
      HfShapeString(t, have, sizeof have);
      FsdpCkptShapeString(e->ndim, ws, want, sizeof want);
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "safetensors file %s: tensor %s has shape %s but %s/config.json (%s) makes it %s",
                 FsdpStPath(f), t->name, have, dir, attrs, want);
    }
    m->seen[k] = 1;
    src[k] = (HfSource){f, t};
  }
  for (int k = 0; k < m->n; k++)
    if (!m->seen[k])
      FSDP_ERROR(FSDP_ERR_USAGE, "%s has no tensor %s (the %s model of its config.json has it)", dir,
                 m->t[k].hf, m->desc.family);
  if (head->t) {
    int64_t n = m->t[0].shape[0] * m->t[0].shape[1];
    if (head->t->numel != n || head->t->ndim != 2 || head->t->shape[0] != m->t[0].shape[0])
      FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: tensor %s (tied to the embedding) "
                                 "does not have the embedding's shape",
                 FsdpStPath(head->f), head->t->name);
  }
  return FSDP_SUCCESS;
}

/* A tied head must equal the embedding (compared in blocks). */
static int HfCheckTiedHead(const HfModel *m, const HfSource *emb, const HfSource *head, float *a,
                           float *b)
{
  for (int64_t i = 0; i < emb->t->numel; i += HF_BLOCK) {
    int64_t k = emb->t->numel - i < HF_BLOCK ? emb->t->numel - i : HF_BLOCK;
    FSDP_CALL(FsdpStRead(emb->f, emb->t, i, k, a));
    FSDP_CALL(FsdpStRead(head->f, head->t, i, k, b));
    if (memcmp(a, b, (size_t)k * sizeof(float)) != 0)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "safetensors file %s: %s differs from %s, but the %s model ties its output head "
                 "to the embedding",
                 FsdpStPath(head->f), head->t->name, emb->t->name, m->desc.family);
  }
  return FSDP_SUCCESS;
}

/* Elements of the transpose block: rows of a transposed tensor fit. */
static int64_t HfBlockCap(const HfModel *m, int import)
{
  int64_t cap = HF_BLOCK;
  for (int k = 0; k < m->n; k++)
    if (m->t[k].transpose && m->t[k].shape[import ? 1 : 0] > cap)
      cap = m->t[k].shape[import ? 1 : 0];
  return cap;
}

static int HfImportTensors(HfModel *m, const HfSource *src, const HfSource *head,
                           FsdpCkptWriter w)
{
  /* untransposed tensors stream in pieces of HF_PIECE; a transposed one
   * is read whole */
  int64_t cap = HF_PIECE, bcap = HfBlockCap(m, 1);
  for (int k = 0; k < m->n; k++)
    if (m->t[k].transpose && src[k].t->numel > cap) cap = src[k].t->numel;
  float *buf = NULL, *blk = NULL;
  int err = FSDP_SUCCESS;
  FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)cap * sizeof(float), &buf));
  FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)bcap * sizeof(float), &blk));
  if (head->t) FSDP_GOTO(HfCheckTiedHead(m, &src[0], head, buf, buf + HF_BLOCK));
  for (int k = 0; k < m->n; k++) {
    const HfTensor *e = &m->t[k];
    FsdpParamSpec spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.name, sizeof spec.name, "%s", e->fsdp);
    spec.ndim = e->ndim;
    spec.shape[0] = e->shape[0];
    spec.shape[1] = e->shape[1];
    int64_t n = src[k].t->numel;
    FSDP_GOTO(FsdpCkptWriterBegin(w, &spec));
    if (!e->transpose) {
      for (int64_t i = 0; i < n; i += HF_PIECE) {
        int64_t kk = n - i < HF_PIECE ? n - i : HF_PIECE;
        FSDP_GOTO(FsdpStRead(src[k].f, src[k].t, i, kk, buf));
        FSDP_GOTO(FsdpCkptWriterWrite(w, i, kk, buf));
      }
    } else {
      FSDP_GOTO(FsdpStRead(src[k].f, src[k].t, 0, n, buf)); /* HF [in, out] -> fsdp [out, in], a block of rows at a time */
      int64_t out = e->shape[0], in = e->shape[1], per = bcap / in;
      for (int64_t r = 0; r < out; r += per) {
        int64_t r1 = r + per < out ? r + per : out;
        TransposeRows(buf, in, out, r, r1, blk);
        FSDP_GOTO(FsdpCkptWriterWrite(w, r * in, (r1 - r) * in, blk));
      }
    }
    FSDP_GOTO(FsdpCkptWriterEnd(w));
  }
done:
  FsdpFree(&buf);
  FsdpFree(&blk);
  return err;
}

int FsdpCkptToolImportHf(const char *dir, const char *out, int64_t global_batch)
{
  FSDP_CALL(RefuseExisting(out));
  FsdpModelDesc desc;
  FSDP_CALL(HfReadConfig(dir, &desc));
  char what[4200];
  snprintf(what, sizeof what, "%s/config.json", dir);
  HfModel m;
  FSDP_CALL(HfModelFromDesc(&desc, what, &m));
  int err = HfCheckEngine(&m);
  FsdpStSet set = NULL;
  HfSource *src = calloc((size_t)m.n, sizeof *src), head = {NULL, NULL};
  if (!src) err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
  if (!err) err = FsdpStSetOpen(dir, &set);
  if (!err) err = HfMatchSet(&m, set, dir, src, &head);
  FsdpOptimOptions oo;
  memset(&oo, 0, sizeof oo);
  if (!err) err = DefaultOptimOptions(&oo);
  char tmp[4200] = "";
  if (!err) err = MakeTemp(out, "import", tmp, sizeof tmp);
  FsdpCkptWriter w = NULL;
  if (!err) {
    FsdpCkptMeta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_batch = global_batch;
    meta.optim = oo;
    meta.model = desc;
    err = FsdpCkptWriterCreate(tmp, &meta, m.n, &w);
  }
  if (!err) err = HfImportTensors(&m, src, &head, w);
  if (!err) err = FsdpCkptWriterClose(&w);
  FsdpCkptWriterAbort(&w);
  if (!err) {
    hid_t f = H5Fopen(tmp, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0 || FsdpHdf5AttrWriteString(f, "imported_from", dir) < 0)
      err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "recording imported_from");
    if (f >= 0 && H5Fclose(f) < 0 && !err) err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "H5Fclose");
  }
  if (!err) err = Publish(tmp, out);
  else if (tmp[0]) unlink(tmp);
  int dt = set ? FsdpStSetDtype(set) : -1, nfiles = set ? FsdpStSetNumFiles(set) : 0;
  FsdpStSetClose(&set);
  free(src);
  int n = m.n;
  HfModelDestroy(&m);
  FSDP_CALL(err);
  char opts[2048], attrs[1024];
  FsdpModelDescTrainOptions(&desc, opts, sizeof opts);
  FsdpModelDescFormat(&desc, attrs, sizeof attrs);
  printf("%s: fsdp checkpoint (format %d) at step 0, zero AdamW moments, from Hugging Face %s "
         "(%s, %d safetensors file%s, %s): %d tensors; %s\n"
         "load it with:\n"
         "fsdp-train %s -resume %s\n",
         out, FSDP_CKPT_VERSION, dir, desc.family, nfiles, nfiles == 1 ? "" : "s",
         dt >= 0 ? FsdpStDtypeName((FsdpDtype)dt) : "mixed dtypes", n, attrs, opts, out);
  fflush(stdout);
  return FSDP_SUCCESS;
}

/* One dataset of /model whole into buf, after checking its shape. */
static int HfReadDataset(hid_t g, const char *path, const HfTensor *e, float *buf)
{
  hid_t d = H5Lexists(g, e->fsdp, H5P_DEFAULT) > 0 ? H5Dopen2(g, e->fsdp, H5P_DEFAULT) : -1;
  if (d < 0) FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint %s has no dataset /model/%s", path, e->fsdp);
  hid_t s = H5Dget_space(d);
  hsize_t dims[H5S_MAX_RANK];
  int nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
  int same = nd == e->ndim && H5Sget_simple_extent_dims(s, dims, NULL) >= 0;
  for (int k = 0; same && k < nd; k++) same = (int64_t)dims[k] == e->shape[k];
  if (s >= 0) H5Sclose(s);
  herr_t rc = same ? H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : 0;
  H5Dclose(d);
  char want[160];
  FsdpCkptShapeString(e->ndim, e->shape, want, sizeof want);
  if (!same)
    FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint %s: /model/%s does not have the shape %s of its model "
                               "description", path, e->fsdp, want);
  if (rc < 0) {
    char why[600];
    FsdpHdf5ErrorSummary(why, sizeof why);
    FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint %s: /model/%s cannot be read: %s", path, e->fsdp, why);
  }
  return FSDP_SUCCESS;
}

static int HfExportTensors(const HfModel *m, hid_t f, const char *path, FsdpStWriter w)
{
  int64_t cap = 1, bcap = HfBlockCap(m, 0);
  for (int k = 0; k < m->n; k++) {
    int64_t n = m->t[k].shape[0] * (m->t[k].ndim > 1 ? m->t[k].shape[1] : 1);
    if (n > cap) cap = n;
  }
  float *buf = NULL, *blk = NULL;
  int err = FSDP_SUCCESS;
  hid_t g = -1;
  FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)cap * sizeof(float), &buf));
  FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)bcap * sizeof(float), &blk));
  FSDP_HDF5_GOTO(g = H5Gopen2(f, "/model", H5P_DEFAULT));
  H5G_info_t gi;
  FSDP_HDF5_GOTO(H5Gget_info(g, &gi));
  if ((int64_t)gi.nlinks != m->n) {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "checkpoint %s: /model holds %lld datasets but its %s model has %d "
                         "parameters (fsdp-ckpt verify names them)",
                         path, (long long)gi.nlinks, m->desc.family, m->n);
    goto done;
  }
  for (int k = 0; k < m->n; k++) {
    const HfTensor *e = &m->t[k];
    FSDP_GOTO(HfReadDataset(g, path, e, buf));
    int64_t rows = e->shape[0], cols = e->ndim > 1 ? e->shape[1] : 1;
    if (!e->transpose) {
      FSDP_GOTO(FsdpStWriterPut(w, buf, rows * cols));
      continue;
    }
    /* fsdp [out, in] -> HF [in, out]: HF row i = column i of fsdp's */
    int64_t per = bcap / rows;
    for (int64_t r = 0; r < cols; r += per) {
      int64_t r1 = r + per < cols ? r + per : cols;
      TransposeRows(buf, rows, cols, r, r1, blk);
      FSDP_GOTO(FsdpStWriterPut(w, blk, (r1 - r) * rows));
    }
  }
done:
  FsdpHdf5Close(&g);
  FsdpFree(&buf);
  FsdpFree(&blk);
  return err;
}

int FsdpCkptToolExportHf(const char *path, const char *outdir, int bf16)
{
  char cfgpath[4200], stpath[4200];
  snprintf(cfgpath, sizeof cfgpath, "%s/config.json", outdir);
  snprintf(stpath, sizeof stpath, "%s/model.safetensors", outdir);
  FSDP_CALL(RefuseExisting(cfgpath));
  FSDP_CALL(RefuseExisting(stpath));
  FsdpCkptMeta meta;
  FSDP_CALL(FsdpCkptReadMeta(MPI_COMM_SELF, path, &meta));
  char what[4200];
  snprintf(what, sizeof what, "checkpoint %s", path);
  HfModel m;
  FSDP_CALL(HfModelFromDesc(&meta.model, what, &m));
  int err = HfCheckEngine(&m);
  /* [Note: finite checkpoints] (ckpt.h): no NaN/Inf goes out, nothing is created */
  if (!err) err = CheckValues(path, FSDP_CKPT_CHECK_MODEL);
  if (!err && mkdir(outdir, 0777) != 0 && errno != EEXIST)
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE, "cannot create folder %s: %s",
                         outdir, strerror(errno));
  hid_t f = -1;
  if (!err && (f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
    err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, "opening the checkpoint");
  FsdpStDecl *decl = calloc((size_t)m.n, sizeof *decl);
  int64_t(*shapes)[2] = calloc((size_t)m.n, sizeof *shapes);
  if (!err && (!decl || !shapes)) err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM, "out of memory");
  for (int k = 0; !err && k < m.n; k++) {
    const HfTensor *e = &m.t[k];
    shapes[k][0] = e->transpose ? e->shape[1] : e->shape[0];
    shapes[k][1] = e->transpose ? e->shape[0] : e->shape[1];
    decl[k] = (FsdpStDecl){e->hf, e->ndim, shapes[k]};
  }
  char tmp[4200] = "", ctmp[4200] = "";
  FsdpStWriter w = NULL;
  static const char *const md[] = {"format", "pt", NULL};
  if (!err) err = MakeTemp(stpath, "export", tmp, sizeof tmp);
  if (!err) err = FsdpStWriterCreate(tmp, bf16 ? FSDP_DTYPE_BF16 : FSDP_DTYPE_FP32, m.n, decl, md, &w);
  if (!err) err = HfExportTensors(&m, f, path, w);
  if (!err) err = FsdpStWriterClose(&w);
  FsdpStWriterAbort(&w);
  if (!err) err = MakeTemp(cfgpath, "export", ctmp, sizeof ctmp);
  if (!err) err = HfWriteConfig(&m, bf16 ? "bfloat16" : "float32", ctmp);
  if (!err) err = Publish(tmp, stpath);
  else if (tmp[0]) unlink(tmp);
  if (!err) err = Publish(ctmp, cfgpath);
  else if (ctmp[0]) unlink(ctmp);
  if (f >= 0) H5Fclose(f);
  free(decl);
  free(shapes);
  int n = m.n;
  const char *family = m.fam->hf_architecture;
  HfModelDestroy(&m);
  FSDP_CALL(err);
  printf("%s: Hugging Face %s folder (config.json, model.safetensors with %d %s tensors) from "
         "step %lld of %s\n",
         outdir, family, n, bf16 ? "BF16" : "F32", (long long)meta.step, path);
  fflush(stdout);
  return FSDP_SUCCESS;
}
