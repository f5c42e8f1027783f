/* family.h: model families behind one interface (GPT-2, Llama).
 *
 * The driver, fsdp-plan and fsdp-ckpt know a model only by its description
 * (FsdpModelDesc, model.h: family name and typed attributes) and reach the
 * family's code through a table of operations found by that name.  A
 * description read from options, a checkpoint or a run file goes through
 * the same table, so a program never names GptConfig or LlamaConfig.
 */
#ifndef FSDP_FAMILY_H
#define FSDP_FAMILY_H

#include <stdint.h>

#include "base/opts.h"
#include "kernels/kernels.h"
#include "model/model.h"

/* [Note: model family operations] What a family provides.  `model` is the
 * family's own object (GptModel, LlamaModel) behind FsdpModel. */
typedef struct {
  const char *name;                   /* the description's family: "gpt2", "llama" */
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
} FsdpModelFamily;

/* The family of that name, or NULL. */
const FsdpModelFamily *FsdpModelFamilyFind(const char *name);
/* Not collective (every rank registers the same families, before options
 * are read: -model and -family then offer the family's presets and name).
 * Adds a family of the program's own (examples/: a model built against
 * the installed library); f must live as long as the program.  A usage
 * error for a name already registered, a preset another family has, or a
 * missing operation. */
int FsdpModelFamilyRegister(const FsdpModelFamily *f);

/* Not collective.  Reads -model (every family's presets, then "custom")
 * and, for custom, -family; then the family's size options.  desc gets
 * the family, the preset name and the attributes.  When -help is asked,
 * every family's options are read so that the help lists them all. */
int FsdpModelOptionsFromDb(FsdpOpts db, FsdpModelDesc *desc);

/* An int attribute of a description (n_layer, seq_len, vocab_size, ...);
 * 0 when absent (descriptions checked by their family have them). */
int64_t FsdpModelDescInt(const FsdpModelDesc *desc, const char *name);

/* Not collective.  check of the description's family; a usage error for
 * an unknown family. */
int FsdpModelDescCheck(const FsdpModelDesc *desc, const char *what);
/* Parameters of a described model (0 for an unknown family). */
int64_t FsdpModelDescParamCount(const FsdpModelDesc *desc);
/* The stages of the table a model of desc registers with -wrap blocks per
 * unit: the root's embedding stage, one stage per unit of at most wrap
 * blocks, the root's head stage (every family's table has that shape:
 * GPT's and Llama's BuildTable). */
int64_t FsdpModelDescNumStages(const FsdpModelDesc *desc, int wrap);

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
const FsdpModelFamily *FsdpModelGetFamily(FsdpModel m);
/* The family's object (a GptModel for "gpt2", a LlamaModel for "llama"). */
void *FsdpModelImpl(FsdpModel m);

#define FSDP_MODEL_MAX_MATMULS 8
/* matmul_shapes of the description's family (0 for an unknown one). */
int FsdpModelDescMatmulShapes(const FsdpModelDesc *desc, int64_t shape[][2], int max);

/* The family tables (family.c, llama.c). */
extern const FsdpModelFamily FsdpGptFamily;
extern const FsdpModelFamily FsdpLlamaFamily;

#endif
