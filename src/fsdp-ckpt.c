/* fsdp-ckpt: inspect, verify and convert fsdp checkpoints.
 *
 *   fsdp-ckpt info ckpt_00000100.h5
 *   fsdp-ckpt verify ckpt_00000100.h5          # exit 0 good, 2 bad (as a load judges it)
 *   fsdp-ckpt export-llmc ckpt_00000100.h5 model.bin
 *   fsdp-ckpt import-llmc gpt2_124M.bin gpt2.h5
 *   fsdp-train -model custom -n_layer 12 -n_embd 768 -n_head 12 \
 *              -vocab_size 50257 -seq_len 1024 -resume gpt2.h5 -steps ...
 *   fsdp-ckpt import-hf ./gpt2-hf gpt2.h5        # Hugging Face folder
 *   fsdp-ckpt export-hf ckpt_00000100.h5 ./out -hf_dtype bf16
 *
 * One process (no mpiexec needed; MPI starts as a singleton).  Options are
 * PETSc style and come after the subcommand and its files.
 *
 * Files it reads and writes:
 *
 * fsdp checkpoint (HDF5, lib/io/ckpt.h, format version FSDP_CKPT_VERSION)
 *   /                root attributes: format_version, program, created,
 *                    step, data_position, seed, global_batch, world_size,
 *                    sharding_factor, ranks_per_node (written topology)
 *   /model           attributes: name, family (gpt2; a file without it is
 *                    gpt2), n_layer, n_embd, n_head, vocab_size, seq_len,
 *                    num_parameters (tensors)
 *   /model/<name>    fp32, the parameter's full logical shape (gpt.h names:
 *                    wte [V,C], wpe [seq_len,C], ln_f.weight [C], ...,
 *                    h.<i>.attn.c_attn.weight [3C,C], ...)
 *   /optim           attributes: type, step_count, lr, lr_min, weight_decay,
 *                    beta1, beta2, eps, grad_clip, warmup, total_steps,
 *                    decay_embeddings
 *   /optim/exp_avg/<name>, /optim/exp_avg_sq/<name>: AdamW moments, fp32
 *   A file written by import-llmc also carries the root attribute
 *   imported_from (the llm.c file it came from).
 *
 * llm.c GPT-2 checkpoint (karpathy/llm.c train_gpt2.c, gpt2_124M.bin):
 *   all little-endian; a header of 256 int32 (unused slots 0):
 *   [0] magic 20240326, [1] version (3: fp32 tensors, 5: bf16), [2] maxT,
 *   [3] V, [4] L, [5] NH, [6] C, [7] Vp (padded vocab, ceil(V/128)*128);
 *   then the tensors row-major, back to back, per-layer tensors stacked
 *   over the L layers:
 *     wte (Vp, C)  rows V..Vp-1 zero     <- /model/wte [V, C]
 *     wpe (maxT, C)                       <- /model/wpe
 *     ln1w (L, C)  ln1b (L, C)            <- h.<l>.ln_1.weight / .bias
 *     qkvw (L, 3C, C)  qkvb (L, 3C)       <- h.<l>.attn.c_attn.weight / .bias
 *     attprojw (L, C, C)  attprojb (L, C) <- h.<l>.attn.c_proj.weight / .bias
 *     ln2w (L, C)  ln2b (L, C)            <- h.<l>.ln_2.weight / .bias
 *     fcw (L, 4C, C)  fcb (L, 4C)         <- h.<l>.mlp.c_fc.weight / .bias
 *     fcprojw (L, C, 4C)  fcprojb (L, C)  <- h.<l>.mlp.c_proj.weight / .bias
 *     lnfw (C)  lnfb (C)                  <- ln_f.weight / ln_f.bias
 *   Both sides store linear weights as (out, in), so tensors copy as they
 *   are, no transposes.
 *
 * [Note: the model's parameter list] Which datasets a checkpoint must hold
 * and their shapes come from the library: the file's model description
 * (its family and attributes, model.h) gives a model (family.h) that registers its
 * units with a one-rank runtime on MPI_COMM_SELF, and FsdpRuntimeUnitSpecs
 * lists them (before setup: nothing is allocated for info, verify and
 * export); FsdpCkptCheck compares the file with that list, and this tool
 * words its report.  The llm.c conversion states only the
 * correspondence above (kLlmc) and checks it against that list: every
 * model parameter must be used exactly once with the element count llm.c
 * gives it, so a model change cannot silently drop or misplace a tensor.
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

#include <jansson.h>

#include "io/fileutil.h"
#include "io/h5util.h"
#include "io/safetensors.h"
#include "libfsdp.h"

static const char kHelp[] =
    "fsdp-ckpt: inspect, verify and convert fsdp checkpoints (one process).\n"
    "Usage:\n"
    "  fsdp-ckpt info FILE                 step, format, model config, optimizer state,\n"
    "                                      written topology (W, F, G), data position,\n"
    "                                      creation time, parameters with shapes\n"
    "  fsdp-ckpt verify FILE               root and /optim attributes in range and\n"
    "                                      consistent, every parameter of the file's model\n"
    "                                      config present in /model and /optim/exp_avg[_sq]\n"
    "                                      with its shape, fp32, no NaN/Inf (the checks\n"
    "                                      fsdp-train's load makes); exit 0 if good, 2\n"
    "                                      naming the first problem\n"
    "  fsdp-ckpt export-llmc FILE OUT.bin  llm.c GPT-2 checkpoint (version 3, fp32)\n"
    "                                      from /model\n"
    "  fsdp-ckpt import-llmc IN.bin OUT.h5 fsdp checkpoint at step 0 with zero AdamW\n"
    "                                      moments from an llm.c GPT-2 checkpoint\n"
    "                                      (version 3 fp32, or 5 bf16 converted exactly)\n"
    "  fsdp-ckpt import-hf DIR OUT.h5      fsdp checkpoint at step 0 with zero AdamW\n"
    "                                      moments from a Hugging Face folder: config.json\n"
    "                                      (model_type gpt2 or llama) and model.safetensors\n"
    "                                      or shards with model.safetensors.index.json;\n"
    "                                      F32, BF16, F16 converted exactly to fp32; prints\n"
    "                                      the fsdp-train line that loads it\n"
    "  fsdp-ckpt export-hf FILE OUTDIR     config.json and model.safetensors (fp32, or\n"
    "                                      bf16 with -hf_dtype bf16) for transformers'\n"
    "                                      from_pretrained\n"
    "Options follow the files.  Outputs are never overwritten.\n"
    "\n"
    "fsdp checkpoint (HDF5): root attributes format_version, program, created,\n"
    "step, data_position, seed, global_batch, world_size, sharding_factor,\n"
    "ranks_per_node; /model (attributes name, family, n_layer, n_embd, n_head,\n"
    "vocab_size, seq_len, num_parameters) with one fp32 dataset per parameter\n"
    "in its full shape (wte [V,C], wpe [seq_len,C], ln_f.weight/bias [C],\n"
    "h.<i>.ln_1.weight/bias [C], h.<i>.attn.c_attn.weight [3C,C]/bias [3C],\n"
    "h.<i>.attn.c_proj.weight [C,C]/bias [C], h.<i>.ln_2.weight/bias [C],\n"
    "h.<i>.mlp.c_fc.weight [4C,C]/bias [4C], h.<i>.mlp.c_proj.weight [C,4C]/bias\n"
    "[C]); /optim (attributes type, step_count and the AdamW hyperparameters)\n"
    "with /optim/exp_avg/<name> and /optim/exp_avg_sq/<name> of the same shapes.\n"
    "\n"
    "llm.c GPT-2 checkpoint: little-endian; 256 int32 header: [0] 20240326,\n"
    "[1] version 3 (fp32) or 5 (bf16), [2] maxT = seq_len, [3] V, [4] L, [5] NH,\n"
    "[6] C, [7] Vp = ceil(V/128)*128; then, back to back: wte (Vp,C) with rows\n"
    "V..Vp-1 zero, wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb\n"
    "(L,3C), attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw\n"
    "(L,4C,C), fcb (L,4C), fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C):\n"
    "h.<l>.<tensor> is layer l of the stacked tensor; weights are (out, in) on\n"
    "both sides.  An imported file loads with\n"
    "  fsdp-train -model custom -n_layer L -n_embd C -n_head NH -vocab_size V\n"
    "             -seq_len maxT -resume OUT.h5 ...\n"
    "\n"
    "Hugging Face (safetensors): GPT-2 tensors are GPT2LMHeadModel's,\n"
    "transformer.<fsdp name> (wte.weight, wpe.weight, h.<i>.attn.c_attn.weight, ...);\n"
    "its Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out] and transposed;\n"
    "lm_head is tied to wte.  Llama tensors keep LlamaForCausalLM's names\n"
    "(model.embed_tokens.weight, model.layers.<i>.self_attn.q_proj.weight, ...,\n"
    "lm_head.weight when untied).  Conversions hold one tensor at a time.\n";

#define MSG_SIZE 1400
#define LLMC_MAGIC 20240326
#define LLMC_HEADER_INTS 256
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
  GptConfig cfg;      /* gpt2 only: the llm.c conversions */
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
  if (strcmp(desc->family, GPT_FAMILY) == 0)
    FSDP_CALL(GptConfigFromDesc(desc, "the model description", &e->cfg));
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

/* A config read from a file, checked with messages naming the file (the
 * library's GptConfigValidate speaks of options). */
static int CheckConfig(const char *what, const GptConfig *c)
{
  if (c->n_layer < 1 || c->n_embd < 1 || c->n_head < 1 || c->seq_len < 2)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s holds an invalid model config (n_layer %d, n_embd %d, n_head %d, seq_len %d)",
               what, c->n_layer, c->n_embd, c->n_head, c->seq_len);
  if (c->n_embd % c->n_head)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: n_embd %d is not divisible by n_head %d", what, c->n_embd,
               c->n_head);
  if (c->vocab_size < 2 || c->vocab_size > 65536)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: vocab_size %d is outside 2..65536 (fsdp stores tokens as uint16)",
               what, c->vocab_size);
  return FSDP_SUCCESS;
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
  if (strcmp(meta->model.family, GPT_FAMILY) == 0) {
    GptConfig cfg;
    FSDP_CALL(GptConfigFromDesc(&meta->model, what, &cfg));
    FSDP_CALL(CheckConfig(what, &cfg));
  }
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

static int Info(const char *path)
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

static int Verify(const char *path, int weights_only)
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

/* The llm.c tensor order ([Note: the model's parameter list]): the
 * fsdp name (per-layer ones under h.<l>.) and the per-layer element count
 * llm.c gives it as multiples of (rows, cols) in units of C, maxT, Vp. */
typedef enum { DIM_ONE, DIM_C, DIM_3C, DIM_4C, DIM_T, DIM_VP } LlmcDim;
typedef struct {
  const char *llmc, *name;
  int per_layer;
  LlmcDim rows, cols;
} LlmcTensor;

static const LlmcTensor kLlmc[] = {
    {"wte", "wte", 0, DIM_VP, DIM_C},
    {"wpe", "wpe", 0, DIM_T, DIM_C},
    {"ln1w", "ln_1.weight", 1, DIM_C, DIM_ONE},
    {"ln1b", "ln_1.bias", 1, DIM_C, DIM_ONE},
    {"qkvw", "attn.c_attn.weight", 1, DIM_3C, DIM_C},
    {"qkvb", "attn.c_attn.bias", 1, DIM_3C, DIM_ONE},
    {"attprojw", "attn.c_proj.weight", 1, DIM_C, DIM_C},
    {"attprojb", "attn.c_proj.bias", 1, DIM_C, DIM_ONE},
    {"ln2w", "ln_2.weight", 1, DIM_C, DIM_ONE},
    {"ln2b", "ln_2.bias", 1, DIM_C, DIM_ONE},
    {"fcw", "mlp.c_fc.weight", 1, DIM_4C, DIM_C},
    {"fcb", "mlp.c_fc.bias", 1, DIM_4C, DIM_ONE},
    {"fcprojw", "mlp.c_proj.weight", 1, DIM_C, DIM_4C},
    {"fcprojb", "mlp.c_proj.bias", 1, DIM_C, DIM_ONE},
    {"lnfw", "ln_f.weight", 0, DIM_C, DIM_ONE},
    {"lnfb", "ln_f.bias", 0, DIM_C, DIM_ONE},
};
#define NLLMC ((int)(sizeof kLlmc / sizeof kLlmc[0]))

typedef struct {
  int version, maxT, V, L, NH, C, Vp;
} LlmcHeader;

static int64_t LlmcDimSize(const LlmcHeader *h, LlmcDim d)
{
  switch (d) {
  case DIM_C: return h->C;
  case DIM_3C: return 3 * (int64_t)h->C;
  case DIM_4C: return 4 * (int64_t)h->C;
  case DIM_T: return h->maxT;
  case DIM_VP: return h->Vp;
  default: return 1;
  }
}

/* Elements of every tensor of the file (llm.c's parameter count). */
static int64_t LlmcNumel(const LlmcHeader *h)
{
  int64_t n = 0;
  for (int t = 0; t < NLLMC; t++)
    n += LlmcDimSize(h, kLlmc[t].rows) * LlmcDimSize(h, kLlmc[t].cols) *
         (kLlmc[t].per_layer ? h->L : 1);
  return n;
}

static int PaddedVocab(int V) { return (int)(((int64_t)V + 127) / 128 * 128); }

/* The model parameter for llm.c tensor t at layer l, checked against the
 * element count llm.c gives it (wte: V of its Vp rows); marks it used. */
static int LlmcParam(Engine *e, const LlmcHeader *h, int t, int l, ParamRef **out)
{
  char name[FSDP_MAX_NAME];
  if (kLlmc[t].per_layer) snprintf(name, sizeof name, "h.%d.%s", l, kLlmc[t].name);
  else snprintf(name, sizeof name, "%s", kLlmc[t].name);
  ParamRef *p = (ParamRef *)FindParam(e, name);
  if (!p)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "llm.c tensor %s maps to %s, which the GPT model does not have",
               kLlmc[t].llmc, name);
  int64_t rows = kLlmc[t].rows == DIM_VP ? h->V : LlmcDimSize(h, kLlmc[t].rows);
  int64_t want = rows * LlmcDimSize(h, kLlmc[t].cols);
  if (FlatParamSpecNumel(p->spec) != want || p->used)
    FSDP_ERROR(FSDP_ERR_INTERNAL,
               "llm.c tensor %s (layer %d) has %lld elements but model parameter %s has %lld%s",
               kLlmc[t].llmc, l, (long long)want, name, (long long)FlatParamSpecNumel(p->spec),
               p->used ? " and is used twice" : "");
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

/* The body of export-llmc: /model of an open checkpoint into fp. */
static int ExportTensors(hid_t f, Engine *e, const LlmcHeader *h, FILE *fp, const char *tmp)
{
  int32_t hdr[LLMC_HEADER_INTS];
  memset(hdr, 0, sizeof hdr);
  hdr[0] = LLMC_MAGIC;
  hdr[1] = 3;
  hdr[2] = h->maxT;
  hdr[3] = h->V;
  hdr[4] = h->L;
  hdr[5] = h->NH;
  hdr[6] = h->C;
  hdr[7] = h->Vp;
  FSDP_CALL(WriteAll(fp, hdr, sizeof hdr, tmp));
  int64_t cap = 0;
  for (int i = 0; i < e->nparams; i++)
    if (FlatParamSpecNumel(e->params[i].spec) > cap) cap = FlatParamSpecNumel(e->params[i].spec);
  int64_t pad = (int64_t)(h->Vp - h->V) * h->C;
  if (pad > cap) cap = pad;
  float *buf = NULL;
  FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, (size_t)cap * sizeof(float), &buf));
  int err = FSDP_SUCCESS;
  hid_t g = -1;
  FSDP_HDF5_GOTO(g = H5Gopen2(f, "/model", H5P_DEFAULT));
  for (int t = 0; t < NLLMC && !err; t++)
    for (int l = 0; l < (kLlmc[t].per_layer ? h->L : 1) && !err; l++) {
      ParamRef *p;
      FSDP_GOTO(LlmcParam(e, h, t, l, &p));
      int64_t n = FlatParamSpecNumel(p->spec);
      hid_t d = -1;
      FSDP_HDF5_GOTO(d = H5Dopen2(g, p->spec->name, H5P_DEFAULT));
      herr_t rc = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
      H5Dclose(d);
      FSDP_HDF5_GOTO(rc);
      FSDP_GOTO(WriteAll(fp, buf, (size_t)n * sizeof(float), tmp));
      if (t == 0 && pad > 0) { /* wte rows V..Vp-1 */
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

static int ExportLlmc(const char *path, const char *out)
{
  if (!FsdpHostIsLittleEndian())
    FSDP_ERROR(FSDP_ERR_USAGE, "llm.c files are little-endian and this host is not: unsupported");
  FSDP_CALL(RefuseExisting(out));
  FsdpCkptMeta m;
  Engine e;
  hid_t f;
  FSDP_CALL(OpenCheckpoint(path, &m, &e, &f));
  if (strcmp(e.desc.family, GPT_FAMILY) != 0) {
    H5Fclose(f);
    EngineDestroy(&e);
    FSDP_ERROR(FSDP_ERR_USAGE, "checkpoint %s holds a %s model: llm.c files hold GPT-2 models only",
               path, m.model.family);
  }
  /* [Note: finite checkpoints] (ckpt.h): no NaN/Inf goes out */
  if (CheckGroups(path, &e, FSDP_CKPT_CHECK_MODEL | FSDP_CKPT_CHECK_VALUES) != FSDP_SUCCESS) {
    H5Fclose(f);
    EngineDestroy(&e);
    FSDP_CALL(FSDP_ERR_USAGE);
  }
  const GptConfig *c = &e.cfg;
  LlmcHeader h = {3, c->seq_len, c->vocab_size, c->n_layer, c->n_head, c->n_embd,
                  PaddedVocab(c->vocab_size)};
  char tmp[4200];
  int err = MakeTemp(out, "tmp", tmp, sizeof tmp);
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
    err = ExportTensors(f, &e, &h, fp, tmp);
    if (fclose(fp) != 0 && !err)
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_IO, "writing %s failed: %s",
                           tmp, strerror(errno));
    if (!err) err = Publish(tmp, out);
    else unlink(tmp);
  }
  H5Fclose(f);
  int derr = EngineDestroy(&e);
  FSDP_CALL(err);
  FSDP_CALL(derr);
  int64_t n = LlmcNumel(&h);
  printf("%s: llm.c GPT-2 checkpoint, version 3 (fp32), step %lld of %s: maxT %d, V %d (Vp %d), "
         "L %d, NH %d, C %d, %lld parameters, %lld bytes\n",
         out, (long long)m.step, path, h.maxT, h.V, h.Vp, h.L, h.NH, h.C, (long long)n,
         (long long)(LLMC_HEADER_INTS * 4 + n * 4));
  fflush(stdout);
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

/* Header of an llm.c file: magic, version, sizes, and the file length. */
static int ReadLlmcHeader(FILE *fp, const char *path, LlmcHeader *h)
{
  int32_t hdr[LLMC_HEADER_INTS];
  if (fread(hdr, sizeof hdr, 1, fp) != 1)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s is not an llm.c GPT-2 checkpoint: shorter than the 1024-byte header", path);
  if (hdr[0] != LLMC_MAGIC)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s is not an llm.c GPT-2 checkpoint: magic %d, expected %d (a token file has "
               "20240520, a tokenizer 20240328)",
               path, (int)hdr[0], LLMC_MAGIC);
  if (hdr[1] != 3 && hdr[1] != 5)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "llm.c checkpoint %s has version %d; fsdp-ckpt reads version 3 (fp32) and 5 (bf16)",
               path, (int)hdr[1]);
  *h = (LlmcHeader){hdr[1], hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7]};
  if (h->maxT < 1 || h->V < 1 || h->L < 1 || h->NH < 1 || h->C < 1 || h->Vp < h->V)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "llm.c checkpoint %s has an invalid header: maxT %d, V %d, L %d, NH %d, C %d, Vp %d",
               path, h->maxT, h->V, h->L, h->NH, h->C, h->Vp);
  int elem = h->version == 3 ? 4 : 2;
  int64_t want = LLMC_HEADER_INTS * 4 + LlmcNumel(h) * elem;
  struct stat st;
  if (fstat(fileno(fp), &st) != 0)
    FSDP_ERROR(FSDP_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
  if ((int64_t)st.st_size != want)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "llm.c checkpoint %s is %lld bytes, but its header (version %d, maxT %d, V %d, "
               "Vp %d, L %d, C %d) makes %lld: truncated or not a GPT-2 checkpoint",
               path, (long long)st.st_size, h->version, h->maxT, h->V, h->Vp, h->L, h->C,
               (long long)want);
  return FSDP_SUCCESS;
}

/* Every tensor of the llm.c file (after its header) into the streamed
 * checkpoint writer, one at a time ([Note: streamed conversion]). */
static int ImportTensors(FILE *fp, const char *path, const LlmcHeader *h, Engine *e,
                         FsdpCkptWriter w)
{
  int elem = h->version == 3 ? 4 : 2;
  uint16_t *scratch = NULL;
  float *buf = NULL;
  int64_t npad = (int64_t)(h->Vp - h->V) * h->C, cap = CHUNK_ELEMS;
  int err = FSDP_SUCCESS;
  if (elem == 2) FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)CHUNK_ELEMS * sizeof(uint16_t), &scratch));
  FSDP_GOTO(FsdpMalloc(FSDP_MEM_OTHER, (size_t)cap * sizeof(float), &buf));
  for (int t = 0; t < NLLMC; t++)
    for (int l = 0; l < (kLlmc[t].per_layer ? h->L : 1); l++) {
      ParamRef *p;
      FSDP_GOTO(LlmcParam(e, h, t, l, &p));
      int64_t n = FlatParamSpecNumel(p->spec);
      FSDP_GOTO(FsdpCkptWriterBegin(w, p->spec));
      for (int64_t i = 0; i < n; i += CHUNK_ELEMS) {
        int64_t k = n - i < CHUNK_ELEMS ? n - i : CHUNK_ELEMS;
        FSDP_GOTO(ReadFloats(fp, elem, buf, k, scratch, path));
        FSDP_GOTO(FsdpCkptWriterWrite(w, i, k, buf));
      }
      FSDP_GOTO(FsdpCkptWriterEnd(w));
      int warned = 0; /* wte rows V..Vp-1: llm.c keeps them zero */
      for (int64_t i = 0; t == 0 && i < npad; i += CHUNK_ELEMS) {
        int64_t k = npad - i < CHUNK_ELEMS ? npad - i : CHUNK_ELEMS;
        FSDP_GOTO(ReadFloats(fp, elem, buf, k, scratch, path));
        for (int64_t j = 0; j < k && !warned; j++)
          if (buf[j] != 0.0f) {
            FsdpWarn(0, "llm.c checkpoint %s: padded wte row %lld is not zero; rows %d..%d are "
                        "dropped (fsdp's wte has V = %d rows)",
                     path, (long long)(h->V + (i + j) / h->C), h->V, h->Vp - 1, h->V);
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

static int ImportLlmc(const char *in, const char *out, int64_t global_batch)
{
  if (!FsdpHostIsLittleEndian())
    FSDP_ERROR(FSDP_ERR_USAGE, "llm.c files are little-endian and this host is not: unsupported");
  FSDP_CALL(RefuseExisting(out));
  FILE *fp = fopen(in, "rb");
  if (!fp) FSDP_ERROR(FSDP_ERR_USAGE, "cannot open llm.c checkpoint %s: %s", in, strerror(errno));
  LlmcHeader h;
  int err = ReadLlmcHeader(fp, in, &h);
  GptConfig cfg = {h.L, h.C, h.NH, h.V, h.maxT};
  char what[4200];
  snprintf(what, sizeof what, "llm.c checkpoint %s", in);
  if (!err) err = CheckConfig(what, &cfg);
  if (!err && h.Vp != PaddedVocab(h.V))
    FsdpWarn(0, "llm.c checkpoint %s pads its vocabulary to %d rows, not %d: exported files "
                "will use %d",
             in, h.Vp, PaddedVocab(h.V), PaddedVocab(h.V));
  FsdpOptimOptions oo;
  memset(&oo, 0, sizeof oo);
  if (!err) err = DefaultOptimOptions(&oo);
  Engine e;
  memset(&e, 0, sizeof e);
  /* the parameter list only: nothing is allocated for the model */
  FsdpModelDesc desc;
  if (!err) err = GptConfigDescribe(&cfg, "custom", &desc);
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
  if (!err) err = ImportTensors(fp, in, &h, &e, w);
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
  FSDP_CALL(err);
  FSDP_CALL(derr);
  printf("%s: fsdp checkpoint (format %d) at step 0, zero AdamW moments, from llm.c version %d "
         "(%s) %s: %lld parameters\n"
         "load it with: fsdp-train -model custom -n_layer %d -n_embd %d -n_head %d -vocab_size "
         "%d -seq_len %d -resume %s\n",
         out, FSDP_CKPT_VERSION, h.version, h.version == 3 ? "fp32" : "bf16", in,
         (long long)GptConfigParamCount(&cfg), h.L, h.C, h.NH, h.V, h.maxT, out);
  fflush(stdout);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Hugging Face: import-hf, export-hf                                  */

/* [Note: Hugging Face names] A family's tensors are a table built from the
 * model description alone (HfModelFromDesc): fsdp name and shape, the
 * Hugging Face name, and whether Hugging Face stores the matrix
 * transposed.  GPT-2: GPT2LMHeadModel's transformer.<fsdp name> (wte and
 * wpe with .weight); its Conv1D layers (c_attn, c_proj, c_fc) keep weights
 * as [in, out], fsdp as [out, in], so those are transposed; the LM head
 * is tied to wte (lm_head.weight, when a file has it, must equal wte).
 * Files saved from GPT2Model name tensors without "transformer.", and old
 * ones carry the attention mask buffers h.<i>.attn.bias / masked_bias:
 * both are accepted.  The vocabulary is never padded (fsdp's wte and
 * Hugging Face's both have vocab_size rows; only llm.c's file pads to
 * Vp).  Llama: fsdp's names are LlamaForCausalLM's
 * (model.embed_tokens.weight, model.layers.<i>.self_attn.q_proj.weight,
 * ..., model.norm.weight, lm_head.weight only when untied), nothing is
 * transposed.  For GPT-2 the table is checked against the engine's
 * parameter list ([Note: the model's parameter list]) before any tensor
 * moves, so a model change cannot silently drop one; a family the engine
 * cannot build here is converted by its table alone.
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

typedef struct {
  char fsdp[FSDP_MAX_NAME];
  char hf[FSDP_ST_NAME_MAX];
  int ndim;
  int64_t shape[2]; /* fsdp's shape; Hugging Face's is reversed when transposed */
  int transpose;
  int seen; /* import: found in the files */
} HfTensor;

typedef struct {
  FsdpModelDesc desc;
  int llama;
  int tied;        /* Hugging Face ties lm_head.weight to the embedding */
  int n;
  HfTensor *t;
  GptConfig gpt;   /* GPT-2 */
} HfModel;

static int64_t HfInt(const FsdpModelDesc *d, const char *name)
{
  const FsdpModelAttr *a = FsdpModelDescFind(d, name);
  return a ? (a->type == FSDP_MODEL_ATTR_INT ? a->i : (int64_t)a->r) : -1;
}

static double HfReal(const FsdpModelDesc *d, const char *name)
{
  const FsdpModelAttr *a = FsdpModelDescFind(d, name);
  return a ? (a->type == FSDP_MODEL_ATTR_REAL ? a->r : (double)a->i) : -1.0;
}

static int HfAdd(HfModel *m, const char *fsdp, const char *hf, int64_t rows, int64_t cols,
                 int transpose)
{
  HfTensor *t = &m->t[m->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->fsdp, sizeof t->fsdp, "%s", fsdp);
  snprintf(t->hf, sizeof t->hf, "%s", hf);
  t->ndim = cols > 0 ? 2 : 1;
  t->shape[0] = rows;
  t->shape[1] = cols;
  t->transpose = transpose;
  return FSDP_SUCCESS;
}

static void HfModelDestroy(HfModel *m)
{
  free(m->t);
  m->t = NULL;
}

/* The table of a description ([Note: Hugging Face names]); `what` names
 * where the description came from. */
static int HfModelFromDesc(const FsdpModelDesc *desc, const char *what, HfModel *m)
{
  memset(m, 0, sizeof *m);
  m->desc = *desc;
  char name[FSDP_MAX_NAME], hf[FSDP_ST_NAME_MAX];
  if (strcmp(desc->family, "gpt2") == 0) {
    FSDP_CALL(GptConfigFromDesc(desc, what, &m->gpt));
    FSDP_CALL(CheckConfig(what, &m->gpt));
    const GptConfig *c = &m->gpt;
    int64_t C = c->n_embd;
    m->tied = 1;
    m->t = calloc((size_t)(4 + 12 * c->n_layer), sizeof *m->t);
    FSDP_CHECK_ALLOC(m->t, (size_t)(4 + 12 * c->n_layer) * sizeof *m->t);
    HfAdd(m, "wte", "transformer.wte.weight", c->vocab_size, C, 0);
    HfAdd(m, "wpe", "transformer.wpe.weight", c->seq_len, C, 0);
    HfAdd(m, "ln_f.weight", "transformer.ln_f.weight", C, 0, 0);
    HfAdd(m, "ln_f.bias", "transformer.ln_f.bias", C, 0, 0);
    static const struct { const char *s; int rows, cols, tr; } blk[] = {
        {"ln_1.weight", 1, 0, 0},        {"ln_1.bias", 1, 0, 0},
        {"attn.c_attn.weight", 3, 1, 1}, {"attn.c_attn.bias", 3, 0, 0},
        {"attn.c_proj.weight", 1, 1, 1}, {"attn.c_proj.bias", 1, 0, 0},
        {"ln_2.weight", 1, 0, 0},        {"ln_2.bias", 1, 0, 0},
        {"mlp.c_fc.weight", 4, 1, 1},    {"mlp.c_fc.bias", 4, 0, 0},
        {"mlp.c_proj.weight", 1, 4, 1},  {"mlp.c_proj.bias", 1, 0, 0},
    };
    for (int l = 0; l < c->n_layer; l++)
      for (int k = 0; k < 12; k++) {
        snprintf(name, sizeof name, "h.%d.%s", l, blk[k].s);
        snprintf(hf, sizeof hf, "transformer.%s", name);
        HfAdd(m, name, hf, blk[k].rows * C, blk[k].cols * C, blk[k].tr);
      }
    return FSDP_SUCCESS;
  }
  if (strcmp(desc->family, "llama") == 0) {
    int64_t L = HfInt(desc, "n_layer"), C = HfInt(desc, "n_embd"), H = HfInt(desc, "n_head"),
            K = HfInt(desc, "n_kv_head"), F = HfInt(desc, "ffn_hidden"), V = HfInt(desc, "vocab_size"),
            T = HfInt(desc, "seq_len"), tie = HfInt(desc, "tie_embeddings");
    if (L < 1 || C < 1 || H < 1 || K < 1 || F < 1 || V < 2 || T < 1 || tie < 0 || tie > 1 ||
        C % H || H % K || HfReal(desc, "rope_theta") <= 0 || HfReal(desc, "norm_eps") <= 0 ||
        L > 100000)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "%s holds an invalid llama model description (n_layer %lld, n_embd %lld, n_head "
                 "%lld, n_kv_head %lld, ffn_hidden %lld, vocab_size %lld, seq_len %lld, "
                 "tie_embeddings %lld, rope_theta %g, norm_eps %g): n_embd must divide by n_head "
                 "and n_head by n_kv_head",
                 what, (long long)L, (long long)C, (long long)H, (long long)K, (long long)F,
                 (long long)V, (long long)T, (long long)tie, HfReal(desc, "rope_theta"),
                 HfReal(desc, "norm_eps"));
    int64_t hd = C / H;
    m->llama = 1;
    m->tied = (int)tie;
    size_t cap = (size_t)(3 + 9 * L);
    m->t = calloc(cap, sizeof *m->t);
    FSDP_CHECK_ALLOC(m->t, cap * sizeof *m->t);
    HfAdd(m, "model.embed_tokens.weight", "model.embed_tokens.weight", V, C, 0);
    const struct { const char *s; int64_t rows, cols; } blk[] = {
        {"input_layernorm.weight", C, 0},      {"self_attn.q_proj.weight", H * hd, C},
        {"self_attn.k_proj.weight", K * hd, C}, {"self_attn.v_proj.weight", K * hd, C},
        {"self_attn.o_proj.weight", C, H * hd}, {"post_attention_layernorm.weight", C, 0},
        {"mlp.gate_proj.weight", F, C},         {"mlp.up_proj.weight", F, C},
        {"mlp.down_proj.weight", C, F},
    };
    for (int64_t l = 0; l < L; l++)
      for (int k = 0; k < 9; k++) {
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, blk[k].s);
        HfAdd(m, name, name, blk[k].rows, blk[k].cols, 0);
      }
    HfAdd(m, "model.norm.weight", "model.norm.weight", C, 0, 0);
    if (!tie) HfAdd(m, "lm_head.weight", "lm_head.weight", V, C, 0);
    return FSDP_SUCCESS;
  }
  FSDP_ERROR(FSDP_ERR_USAGE, "%s holds a %s model: fsdp-ckpt converts gpt2 and llama to and from "
                             "Hugging Face", what, desc->family);
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

/* An integer field of config.json (def when absent and def >= 0). */
static int CfgInt(json_t *cfg, const char *path, const char *key, int64_t def, int64_t *v)
{
  json_t *j = json_object_get(cfg, key);
  if ((!j || json_is_null(j)) && def >= 0) {
    *v = def;
    return FSDP_SUCCESS;
  }
  if (!json_is_integer(j) || json_integer_value(j) < 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s is %s, expected a non-negative integer", path, key,
               j ? "not an integer" : "missing");
  *v = (int64_t)json_integer_value(j);
  return FSDP_SUCCESS;
}

static int CfgReal(json_t *cfg, const char *path, const char *key, double def, double *v)
{
  json_t *j = json_object_get(cfg, key);
  if (!j || json_is_null(j)) {
    *v = def;
    return FSDP_SUCCESS;
  }
  if (!json_is_number(j)) FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s is not a number", path, key);
  *v = json_number_value(j);
  return FSDP_SUCCESS;
}

/* A string field that must be one of the accepted values (NULL-ended;
 * the first is the default when absent). */
static int CfgOneOf(json_t *cfg, const char *path, const char *key, const char *const *ok,
                    const char *why)
{
  json_t *j = json_object_get(cfg, key);
  if (!j || json_is_null(j)) return FSDP_SUCCESS;
  for (int k = 0; json_is_string(j) && ok[k]; k++)
    if (strcmp(json_string_value(j), ok[k]) == 0) return FSDP_SUCCESS;
  FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s is %s%s%s; fsdp's model supports %s%s%s (%s)", path, key,
             json_is_string(j) ? "\"" : "", json_is_string(j) ? json_string_value(j) : "not a string",
             json_is_string(j) ? "\"" : "", ok[0], ok[1] ? " or " : "", ok[1] ? ok[1] : "", why);
}

/* A boolean field that must be `want` when present. */
static int CfgFlag(json_t *cfg, const char *path, const char *key, int want, const char *why)
{
  json_t *j = json_object_get(cfg, key);
  if (!j || json_is_null(j)) return FSDP_SUCCESS;
  if (!json_is_boolean(j) || json_is_true(j) != want)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s must be %s for fsdp's model (%s)", path, key,
               want ? "true" : "false", why);
  return FSDP_SUCCESS;
}

/* config.json of a Hugging Face folder into a model description. */
static int HfReadConfig(const char *dir, FsdpModelDesc *desc)
{
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_error_t je;
  json_t *cfg = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!cfg)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s (line %d): a Hugging Face model folder has a config.json",
               path, je.text, je.line);
  int err = FSDP_SUCCESS;
  json_t *mt = json_object_get(cfg, "model_type");
  const char *type = json_is_string(mt) ? json_string_value(mt) : "";
  if (strcmp(type, "gpt2") == 0) {
    int64_t L, C, H, V, T, inner;
    static const char *const act[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    double eps;
    if ((err = CfgInt(cfg, path, "n_layer", -1, &L)) || (err = CfgInt(cfg, path, "n_embd", -1, &C)) ||
        (err = CfgInt(cfg, path, "n_head", -1, &H)) || (err = CfgInt(cfg, path, "vocab_size", -1, &V)) ||
        (err = CfgInt(cfg, path, "n_positions", -1, &T)) ||
        (err = CfgInt(cfg, path, "n_inner", 4 * C, &inner)) ||
        (err = CfgReal(cfg, path, "layer_norm_epsilon", 1e-5, &eps)) ||
        (err = CfgOneOf(cfg, path, "activation_function", act, "GELU, tanh approximation")) ||
        (err = CfgFlag(cfg, path, "scale_attn_weights", 1, "scores scaled by 1/sqrt(head size)")) ||
        (err = CfgFlag(cfg, path, "scale_attn_by_inverse_layer_idx", 0, "no per-layer scaling")))
      goto done;
    if (inner != 4 * C || eps != 1e-5 || L > INT32_MAX || C > INT32_MAX || H > INT32_MAX ||
        V > INT32_MAX || T > INT32_MAX) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                           "%s: n_inner %lld and layer_norm_epsilon %g: fsdp's GPT-2 has an MLP of "
                           "4 n_embd = %lld and LayerNorm eps 1e-5 (and sizes in int range)",
                           path, (long long)inner, eps, (long long)(4 * C));
      goto done;
    }
    GptConfig c = {(int)L, (int)C, (int)H, (int)V, (int)T};
    err = GptConfigDescribe(&c, "custom", desc);
  } else if (strcmp(type, "llama") == 0) {
    int64_t L, C, H, K, F, V, T, hd;
    double theta, eps;
    static const char *const act[] = {"silu", NULL};
    json_t *tie = json_object_get(cfg, "tie_word_embeddings"), *rs = json_object_get(cfg, "rope_scaling"),
           *rp = json_object_get(cfg, "rope_parameters");
    if ((err = CfgInt(cfg, path, "num_hidden_layers", -1, &L)) ||
        (err = CfgInt(cfg, path, "hidden_size", -1, &C)) ||
        (err = CfgInt(cfg, path, "num_attention_heads", -1, &H)) ||
        (err = CfgInt(cfg, path, "num_key_value_heads", H, &K)) ||
        (err = CfgInt(cfg, path, "intermediate_size", -1, &F)) ||
        (err = CfgInt(cfg, path, "vocab_size", -1, &V)) ||
        (err = CfgInt(cfg, path, "max_position_embeddings", -1, &T)) ||
        (err = CfgInt(cfg, path, "head_dim", H ? C / H : 0, &hd)) ||
        (err = CfgReal(cfg, path, "rope_theta", 10000.0, &theta)) ||
        (err = CfgReal(cfg, path, "rms_norm_eps", 1e-6, &eps)) ||
        (err = CfgOneOf(cfg, path, "hidden_act", act, "SwiGLU MLP")) ||
        (err = CfgFlag(cfg, path, "attention_bias", 0, "no biases")) ||
        (err = CfgFlag(cfg, path, "mlp_bias", 0, "no biases")))
      goto done;
    if (tie && !json_is_boolean(tie)) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                           "%s: tie_word_embeddings is not true or false", path);
      goto done;
    }
    /* transformers 5 writes RoPE as rope_parameters {rope_theta, rope_type} */
    if (json_is_object(rp)) {
      json_t *rt = json_object_get(rp, "rope_type");
      if (rt && !(json_is_string(rt) && strcmp(json_string_value(rt), "default") == 0)) rs = rp;
      else if ((err = CfgReal(rp, path, "rope_theta", theta, &theta))) goto done;
    }
    if (rs && !json_is_null(rs)) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                           "%s: rope_scaling (or a rope_parameters rope_type other than default) is "
                           "set; fsdp's llama has plain RoPE (rope_theta only), "
                           "so the converted model would compute something else",
                           path);
      goto done;
    }
    if (H && hd != C / H) {
      err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                           "%s: head_dim %lld is not hidden_size / num_attention_heads = %lld", path,
                           (long long)hd, (long long)(C / H));
      goto done;
    }
    FsdpModelDescInit(desc, "llama", "custom");
    const char *const names[] = {"n_layer", "n_embd", "n_head", "n_kv_head",
                                 "ffn_hidden", "vocab_size", "seq_len", "tie_embeddings"};
    const int64_t vals[] = {L, C, H, K, F, V, T, tie ? json_is_true(tie) : 0};
    for (int k = 0; k < 8 && !err; k++) err = FsdpModelDescAddInt(desc, names[k], vals[k]);
    if (!err) err = FsdpModelDescAddReal(desc, "rope_theta", theta);
    if (!err) err = FsdpModelDescAddReal(desc, "norm_eps", eps);
  } else {
    err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_USAGE,
                         "%s: model_type %s%s%s: fsdp-ckpt imports gpt2 and llama", path,
                         json_is_string(mt) ? "\"" : "", json_is_string(mt) ? type : "is missing",
                         json_is_string(mt) ? "\"" : "");
  }
done:
  json_decref(cfg);
  return err;
}

/* config.json that transformers' from_pretrained reads for m. */
static int HfWriteConfig(const HfModel *m, const char *dtype, const char *path)
{
  json_t *j = json_object();
  const FsdpModelDesc *d = &m->desc;
  if (!m->llama) {
    json_object_set_new(j, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
    json_object_set_new(j, "model_type", json_string("gpt2"));
    json_object_set_new(j, "n_layer", json_integer(m->gpt.n_layer));
    json_object_set_new(j, "n_embd", json_integer(m->gpt.n_embd));
    json_object_set_new(j, "n_head", json_integer(m->gpt.n_head));
    json_object_set_new(j, "vocab_size", json_integer(m->gpt.vocab_size));
    json_object_set_new(j, "n_positions", json_integer(m->gpt.seq_len));
    json_object_set_new(j, "n_ctx", json_integer(m->gpt.seq_len));
    json_object_set_new(j, "n_inner", json_null());
    json_object_set_new(j, "activation_function", json_string("gelu_new"));
    json_object_set_new(j, "layer_norm_epsilon", json_real(1e-5));
    json_object_set_new(j, "tie_word_embeddings", json_true());
  } else {
    json_object_set_new(j, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(j, "model_type", json_string("llama"));
    json_object_set_new(j, "num_hidden_layers", json_integer(HfInt(d, "n_layer")));
    json_object_set_new(j, "hidden_size", json_integer(HfInt(d, "n_embd")));
    json_object_set_new(j, "num_attention_heads", json_integer(HfInt(d, "n_head")));
    json_object_set_new(j, "num_key_value_heads", json_integer(HfInt(d, "n_kv_head")));
    json_object_set_new(j, "intermediate_size", json_integer(HfInt(d, "ffn_hidden")));
    json_object_set_new(j, "vocab_size", json_integer(HfInt(d, "vocab_size")));
    json_object_set_new(j, "max_position_embeddings", json_integer(HfInt(d, "seq_len")));
    json_object_set_new(j, "tie_word_embeddings", json_boolean(m->tied));
    json_object_set_new(j, "rope_theta", json_real(HfReal(d, "rope_theta")));
    json_object_set_new(j, "rms_norm_eps", json_real(HfReal(d, "norm_eps")));
    json_object_set_new(j, "hidden_act", json_string("silu"));
    json_object_set_new(j, "attention_bias", json_false());
    json_object_set_new(j, "mlp_bias", json_false());
    json_object_set_new(j, "rope_scaling", json_null());
  }
  json_object_set_new(j, "torch_dtype", json_string(dtype));
  int rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(j);
  if (rc != 0) FSDP_ERROR(FSDP_ERR_IO, "writing %s failed: %s", path, strerror(errno));
  return FSDP_SUCCESS;
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
  const char *n = name;
  if (!m->llama && strncmp(n, "transformer.", 12) == 0) n += 12;
  for (int i = 0; i < m->n; i++) {
    const char *hf = m->t[i].hf;
    if (!m->llama) hf += 12; /* "transformer." */
    if (strcmp(hf, n) == 0) return i;
  }
  size_t len = strlen(n);
  if (!m->llama && (len > 10 && strcmp(n + len - 10, ".attn.bias") == 0)) *ignore = 1;
  if (!m->llama && (len > 17 && strcmp(n + len - 17, ".attn.masked_bias") == 0)) *ignore = 1;
  if (m->llama && len > 22 && strcmp(n + len - 22, ".rotary_emb.inv_freq") == 0) *ignore = 1;
  if (m->tied && strcmp(name, "lm_head.weight") == 0) *ignore = 2;
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
    if (e->seen)
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
    e->seen = 1;
    src[k] = (HfSource){f, t};
  }
  for (int k = 0; k < m->n; k++)
    if (!m->t[k].seen)
      FSDP_ERROR(FSDP_ERR_USAGE, "%s has no tensor %s (the %s model of its config.json has it)", dir,
                 m->t[k].hf, m->desc.family);
  if (head->t) {
    int64_t n = m->t[0].shape[0] * m->t[0].shape[1];
    if (head->t->numel != n || head->t->ndim != 2 || head->t->shape[0] != m->t[0].shape[0])
      FSDP_ERROR(FSDP_ERR_USAGE, "safetensors file %s: tensor lm_head.weight (tied to the embedding) "
                                 "does not have the embedding's shape",
                 FsdpStPath(head->f));
  }
  return FSDP_SUCCESS;
}

/* A tied head must equal the embedding (compared in blocks). */
static int HfCheckTiedHead(const HfSource *emb, const HfSource *head, float *a, float *b)
{
  for (int64_t i = 0; i < emb->t->numel; i += HF_BLOCK) {
    int64_t k = emb->t->numel - i < HF_BLOCK ? emb->t->numel - i : HF_BLOCK;
    FSDP_CALL(FsdpStRead(emb->f, emb->t, i, k, a));
    FSDP_CALL(FsdpStRead(head->f, head->t, i, k, b));
    if (memcmp(a, b, (size_t)k * sizeof(float)) != 0)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "safetensors file %s: lm_head.weight differs from %s, but the model ties its "
                 "output head to the embedding (GPT-2 always, llama with tie_word_embeddings)",
                 FsdpStPath(head->f), emb->t->name);
  }
  return FSDP_SUCCESS;
}

/* The fsdp-train options that rebuild a description, for the load line. */
static void TrainOptions(const FsdpModelDesc *d, char *buf, size_t size)
{
  size_t n = (size_t)snprintf(buf, size, "-model custom");
  if (strcmp(d->family, "gpt2") != 0 && n < size)
    n += (size_t)snprintf(buf + n, size - n, " -family %s", d->family);
  for (int k = 0; k < d->nattrs && n < size; k++) {
    char v[80];
    FsdpModelAttrValueString(&d->attr[k], v, sizeof v);
    n += (size_t)snprintf(buf + n, size - n, " -%s %s", d->attr[k].name, v);
  }
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
  if (head->t) FSDP_GOTO(HfCheckTiedHead(&src[0], head, buf, buf + HF_BLOCK));
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

static int ImportHf(const char *dir, const char *out, int64_t global_batch)
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
  TrainOptions(&desc, opts, sizeof opts);
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

static int ExportHf(const char *path, const char *outdir, int bf16)
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
  const char *family = m.llama ? "LlamaForCausalLM" : "GPT2LMHeadModel";
  HfModelDestroy(&m);
  FSDP_CALL(err);
  printf("%s: Hugging Face %s folder (config.json, model.safetensors with %d %s tensors) from "
         "step %lld of %s\n",
         outdir, family, n, bf16 ? "BF16" : "F32", (long long)meta.step, path);
  fflush(stdout);
  return FSDP_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* driver                                                              */

static const struct {
  const char *name;
  int nfiles;
} kCommands[] = {{"info", 1},        {"verify", 1},    {"export-llmc", 2},
                 {"import-llmc", 2}, {"import-hf", 2}, {"export-hf", 2}};
#define NCOMMANDS ((int)(sizeof kCommands / sizeof kCommands[0]))

static int Run(int argc, char **argv)
{
  /* positional arguments (subcommand, files) come first; the options
   * database gets the rest */
  const char *cmd = NULL, *files[2] = {NULL, NULL};
  int nfiles = 0, i = 1;
  if (i < argc && argv[i][0] != '-') cmd = argv[i++];
  for (; i < argc && argv[i][0] != '-'; i++) {
    if (nfiles < 2) files[nfiles] = argv[i];
    nfiles++;
  }
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  FSDP_CHECK_ALLOC(rest, ((size_t)argc + 1) * sizeof *rest);
  int nrest = 0;
  rest[nrest++] = argv[0];
  for (; i < argc; i++) rest[nrest++] = argv[i];
  FsdpOpts db = NULL;
  int err = FsdpOptsCreate(MPI_COMM_WORLD, nrest, rest, &db);
  free(rest);
  FSDP_CALL(err);
  int weights_only = 0;
  int64_t global_batch = 0;
  err = FsdpOptsGetBool(db, "fsdp-ckpt", "weights_only",
                        "verify: accept a checkpoint without /optim (weights only)", 0,
                        &weights_only);
  if (!err)
    err = FsdpOptsGetInt(db, "fsdp-ckpt", "global_batch",
                         "import-llmc, import-hf: sequences per optimizer step to record in the checkpoint "
                         "(informational: a resume with another global batch warns; 0 = unknown)",
                         0, 0, INT64_MAX / 4, &global_batch);
  static const char *const hf_dtypes[] = {"fp32", "bf16", NULL};
  int hf_dtype = 0;
  if (!err)
    err = FsdpOptsGetEnum(db, "fsdp-ckpt", "hf_dtype",
                          "export-hf: element type of model.safetensors (bf16 rounds to nearest even)",
                          hf_dtypes, 0, &hf_dtype);
  if (FsdpOptsHelpRequested(db)) {
    FsdpOptsPrintHelp(db, stdout, kHelp);
    FsdpOptsDestroy(&db);
    return FSDP_SUCCESS;
  }
  if (!err) err = FsdpOptsCheckUnknown(db);
  FsdpOptsDestroy(&db);
  FSDP_CALL(err);
  int size;
  FSDP_CALL_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size != 1)
    FSDP_ERROR(FSDP_ERR_USAGE, "fsdp-ckpt runs as one process (started on %d ranks): run it "
                               "without mpiexec", size);
  int c = -1;
  for (int k = 0; cmd && k < NCOMMANDS; k++)
    if (strcmp(cmd, kCommands[k].name) == 0) c = k;
  if (c < 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s%s%s: expected a subcommand: info, verify, export-llmc, import-llmc, "
               "import-hf or export-hf "
               "(fsdp-ckpt -help)",
               cmd ? "unknown subcommand '" : "no subcommand", cmd ? cmd : "", cmd ? "'" : "");
  if (nfiles != kCommands[c].nfiles)
    FSDP_ERROR(FSDP_ERR_USAGE, "fsdp-ckpt %s takes %d file%s, got %d (options go after the files; "
                               "fsdp-ckpt -help)",
               cmd, kCommands[c].nfiles, kCommands[c].nfiles > 1 ? "s" : "", nfiles);
  FsdpHdf5Init();
  switch (c) {
  case 0: FSDP_CALL(Info(files[0])); break;
  case 1: FSDP_CALL(Verify(files[0], weights_only)); break;
  case 2: FSDP_CALL(ExportLlmc(files[0], files[1])); break;
  case 3: FSDP_CALL(ImportLlmc(files[0], files[1], global_batch)); break;
  case 4: FSDP_CALL(ImportHf(files[0], files[1], global_batch)); break;
  default: FSDP_CALL(ExportHf(files[0], files[1], hf_dtype == 1)); break;
  }
  return FSDP_SUCCESS;
}

int main(int argc, char **argv)
{
  int err = FsdpInitialize(&argc, &argv);
  if (!err) err = Run(argc, argv);
  FsdpFinalize();
  return FsdpExitStatus(err);
}
