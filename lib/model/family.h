/* family.h: model families behind one interface (GPT-2, Llama, ...).
 *
 * The driver, fsdp-plan and fsdp-ckpt know a model only by its description
 * (FsdpModelDesc, model.h: family name and typed attributes) and reach the
 * family's code through a table of operations found by that name in the
 * registry (registry.c).  A description read from options, a checkpoint or
 * a run file goes through the same table, so a program never names a
 * family's config type or header (tests/test_layers.sh checks src/).
 *
 * [Note: adding a family] A family is one folder, lib/model/<name>/: its
 * config, parameter table and stages (most of them the decoder skeleton of
 * transformer.h), its FsdpModelFamily (family.c there) with the Hugging
 * Face and llm.c conversions it has (convert.h), plus one line in
 * registry.c's list and its tests.  A model built outside the library
 * (examples/) registers its table at run time with FsdpModelFamilyRegister.
 */
#ifndef FSDP_FAMILY_H
#define FSDP_FAMILY_H

#include <stdint.h>

#include "base/opts.h"
#include "kernels/kernels.h"
#include "model/convert.h"
#include "model/model.h"

/* [Note: model family operations] What a family provides.  `model` is the
 * family's own object (GptModel, LlamaModel) behind FsdpModel. */
typedef struct {
  const char *name;                   /* the description's family: "gpt2", "llama" */
  const char *title;                  /* for people: "GPT-2", "Llama 3" (NULL: the name) */
  const char *const *presets;         /* its -model presets, NULL terminated */
  /* Not collective.  Read the family's size options (group "Model") over
   * preset's values (NULL: the family's custom start), validate with usage
   * errors naming the option, and describe the result (desc->preset is
   * left to the caller). */
  int (*from_db)(FsdpOpts db, const char *preset, FsdpModelDesc *desc);
  /* Not collective.  A usage error naming `what` and the attribute when desc
   * is not a valid model of this family (file contents, fsdp-ckpt). */
  int (*check)(const FsdpModelDesc *desc, const char *what);
  int64_t (*param_count)(const FsdpModelDesc *desc);
  /* Bytes of activations and backward scratch set_up allocates for B
   * sequences of T tokens, -wrap and -recompute (fsdp-plan's memory plan),
   * and what a model's set_up did allocate (the summary). */
  uint64_t (*activation_bytes)(const FsdpModelDesc *desc, int wrap, int B, int T, int recompute,
                               FsdpAttention attention);
  uint64_t (*model_activation_bytes)(void *model);
  /* Activation recomputation ([Note: activation recomputation] in
   * runtime/fsdp.h): before the table is registered and before set_up.
   * A family whose stages give no recompute callback keeps everything
   * (the runtime then has nothing to recompute). */
  int (*set_recompute)(void *model, int recompute);
  /* -attention: which attention kernels the blocks call (FsdpAttention,
   * kernels.h); before set_up.  NULL: the family has one kind. */
  int (*set_attention)(void *model, FsdpAttention attention);
  /* The distinct matmul shapes of a forward, (in, out) channels with B*T
   * rows, at most max (fsdp-plan's bf16 scratch); returns the count. */
  int (*matmul_shapes)(const FsdpModelDesc *desc, int64_t shape[][2], int max);
  int (*create)(const FsdpModelDesc *desc, int wrap, int B, int T, const FsdpKernelOps *ops,
                uint64_t seed, void **model);
  int (*destroy)(void **model);
  const FsdpModelTable *(*table)(void *model);
  int (*set_up)(void *model);
  int (*set_batch)(void *model, const int *inputs, const int *targets);
  double (*loss)(void *model);
  /* The vocab_size logits of the last forward at sequence b, position t,
   * into host memory (fsdp-sample). */
  int (*logits)(void *model, int b, int t, float *out);
  void (*set_loss_scale)(void *model, float scale);

  /* ---- conversions (convert.h, fsdp-ckpt); NULL/0 where there are none ---- */
  /* fsdp-ckpt -help's paragraph on the family's file layouts */
  const char *convert_help;
  /* Hugging Face: config.json's model_type and the class export-hf names
   * in "architectures" ("gpt2", "GPT2LMHeadModel"). */
  const char *hf_model_type, *hf_architecture;
  /* Not collective.  config.json (model_type already matched) into a
   * description (preset "custom"), with usage errors naming the file and
   * key; and a description into the config.json transformers reads
   * (architectures and model_type first; fsdp-ckpt adds torch_dtype). */
  int (*hf_read_config)(FsdpHfConfig cfg, FsdpModelDesc *desc);
  int (*hf_write_config)(const FsdpModelDesc *desc, FsdpHfConfig cfg);
  /* Not collective.  Every parameter's Hugging Face name and layout
   * ([Note: Hugging Face names] in convert.h); a usage error naming `what`
   * when desc is not a valid model of the family. */
  int (*hf_layout)(const FsdpModelDesc *desc, const char *what, FsdpHfLayout *layout);
  /* llm.c: the magic of the family's model files (header[0]) */
  int32_t llmc_magic;
  /* Not collective.  A file's header (FSDP_LLMC_HEADER_INTS int32, magic
   * matched) and size in bytes into a description and the file's layout;
   * usage errors name path.  And a description into the header and layout
   * export-llmc writes (fp32). */
  int (*llmc_read)(const int32_t *header, int64_t file_bytes, const char *path,
                   FsdpModelDesc *desc, FsdpLlmcLayout *layout);
  int (*llmc_write)(const FsdpModelDesc *desc, int32_t *header, FsdpLlmcLayout *layout);
} FsdpModelFamily;

/* The family of that name (built in or registered), or NULL. */
const FsdpModelFamily *FsdpModelFamilyFind(const char *name);
/* Not collective (call before any model is described, e.g. at the top of
 * main).  Add a family defined outside the library; f must stay valid for
 * the program's life and give every model operation (the conversions may
 * be NULL).  A name that is taken, empty or too long, a preset another
 * family has (or "custom"), or a full registry, is a usage error.  Its presets then join -model's choices and its name
 * -family's. */
int FsdpModelFamilyRegister(const FsdpModelFamily *f);

/* The families known now, built-in ones first (for listing them). */
int FsdpModelNumFamilies(void);
const FsdpModelFamily *FsdpModelFamilyAt(int i);

/* The fsdp-train options that build the described model: "-model custom
 * [-family NAME] -n_layer 2 ..." in the description's order. */
void FsdpModelDescTrainOptions(const FsdpModelDesc *desc, char *buf, size_t size);

/* Not collective.  Reads -model (every family's presets, then "custom")
 * and, for custom, -family; then the family's size options.  desc gets
 * the family, the preset name and the attributes.  When -help is asked,
 * every family's options are read so that the help lists them all. */
int FsdpModelOptionsFromDb(FsdpOpts db, FsdpModelDesc *desc);

/* Not collective.  check of the description's family; a usage error for
 * an unknown family. */
int FsdpModelDescCheck(const FsdpModelDesc *desc, const char *what);
/* Parameters of a described model (0 for an unknown family). */
int64_t FsdpModelDescParamCount(const FsdpModelDesc *desc);

/* A model of any family, created from its description. */
typedef struct FsdpModel_ *FsdpModel;

int FsdpModelCreate(const FsdpModelDesc *desc, int wrap, int B, int T, const FsdpKernelOps *ops,
                    uint64_t seed, FsdpModel *m);
int FsdpModelDestroy(FsdpModel *m);
const FsdpModelTable *FsdpModelGetTable(FsdpModel m);
int FsdpModelSetUp(FsdpModel m);
int FsdpModelSetRecompute(FsdpModel m, int recompute);
int FsdpModelSetAttention(FsdpModel m, FsdpAttention attention);
uint64_t FsdpModelActivationBytes(FsdpModel m);
/* The plan's count for a description (0 for an unknown family). */
uint64_t FsdpModelDescActivationBytes(const FsdpModelDesc *desc, int wrap, int B, int T,
                                      int recompute, FsdpAttention attention);
int FsdpModelSetBatch(FsdpModel m, const int *inputs, const int *targets);
double FsdpModelLoss(FsdpModel m);
int FsdpModelLogits(FsdpModel m, int b, int t, float *out);
void FsdpModelSetLossScale(FsdpModel m, float scale);
/* The family's object (a GptModel for "gpt2", a LlamaModel for "llama"). */
void *FsdpModelImpl(FsdpModel m);

#define FSDP_MODEL_MAX_MATMULS 8
/* matmul_shapes of the description's family (0 for an unknown one). */
int FsdpModelDescMatmulShapes(const FsdpModelDesc *desc, int64_t shape[][2], int max);

#endif
