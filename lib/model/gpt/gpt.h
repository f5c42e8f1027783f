/* gpt.h: a GPT-2 style transformer as a list of FSDP units (docs/design.md,
 * "Model as a table").
 *
 * Parameters (GPT-2 naming; linear weights are [out, in]):
 *   wte [V, C]  wpe [maxT, C]  ln_f.weight [C]  ln_f.bias [C]        (root)
 *   h.{i}.ln_1.weight [C]          h.{i}.ln_1.bias [C]
 *   h.{i}.attn.c_attn.weight [3C, C]  h.{i}.attn.c_attn.bias [3C]
 *   h.{i}.attn.c_proj.weight [C, C]   h.{i}.attn.c_proj.bias [C]
 *   h.{i}.ln_2.weight [C]          h.{i}.ln_2.bias [C]
 *   h.{i}.mlp.c_fc.weight [4C, C]    h.{i}.mlp.c_fc.bias [4C]
 *   h.{i}.mlp.c_proj.weight [C, 4C]  h.{i}.mlp.c_proj.bias [C]
 * Units: the root unit (wte, wpe, ln_f: the LM head is tied to wte, so the
 * root stays unsharded for the whole step) and one unit per `wrap` blocks
 * (named "h.0" or "h.0-1").  Stages in forward order: root (embeddings),
 * one per unit of blocks, root (final norm, head, loss).
 *
 * Initialization (GPT-2 rules, counter-based so every element depends only
 * on (seed, parameter name, index)): N(0, 0.02) for wte, wpe, c_attn and
 * c_fc weights; N(0, 0.02/sqrt(2 n_layer)) for the residual projections
 * (attn.c_proj.weight, mlp.c_proj.weight); biases 0; LayerNorm weights 1.
 */
#ifndef FSDP_GPT_H
#define FSDP_GPT_H

#include <stdint.h>

#include "base/opts.h"
#include "kernels/kernels.h"
#include "model/convert.h"
#include "model/model.h"

typedef struct {
  int n_layer, n_embd, n_head, vocab_size, seq_len;
} GptConfig;

/* Preset names accepted by -model, NULL terminated ("custom" last). */
extern const char *const GptPresetNames[];

/* Not collective.  The config of a preset (by name; NULL or "custom":
 * tiny's), overridden by -n_layer -n_embd -n_head -vocab_size -seq_len
 * (group "Model"); validates (n_embd divisible by n_head, ...) with usage
 * errors naming the option.  (-model itself: FsdpModelOptionsFromDb.) */
int GptConfigFromDb(FsdpOpts db, const char *preset, GptConfig *cfg);
int GptConfigValidate(const GptConfig *cfg);
/* Total parameter count of a config (unpadded). */
int64_t GptConfigParamCount(const GptConfig *cfg);

typedef struct GptModel_ *GptModel;

/* Not collective.  B: sequences per micro-batch on this rank, T <= seq_len.
 * ops: the kernels the stages run, and where the activations live (their
 * alloc, zero and copy entries). */
int GptModelCreate(const GptConfig *cfg, int wrap, int B, int T,
                   const FsdpKernelOps *ops, uint64_t seed, GptModel *m);
int GptModelDestroy(GptModel *m);

/* The model's table ([Note: the model table] in model.h): units, stages,
 * init and weight decay rules, kernels; ctx is m.  Valid until
 * GptModelDestroy; the driver registers it with FsdpRuntimeAddModel. */
const FsdpModelTable *GptModelTable(GptModel m);

/* Allocate activations for backward (tag FSDP_MEM_ACTS, through the
 * kernel table's alloc); call once. */
int GptModelSetUp(GptModel m);

/* Not collective.  Activation recomputation ([Note: activation
 * recomputation] in runtime/fsdp.h, [Note: GPT recomputation] in gpt.c):
 * keep only each block's output (the next block's input) through forward
 * and one unit's other activations as a working set, and give the block
 * stages a recompute callback in the table.  Call before the table is
 * registered (FsdpRuntimeAddModel copies the stages) and before
 * GptModelSetUp; the runtime must then run with -recompute 1 (a backward
 * without its recompute is FSDP_ERR_STATE). */
int GptModelSetRecompute(GptModel m, int recompute);

/* Not collective.  Which attention kernels the blocks call (-attention,
 * [Note: flash attention] in kernels/cpu/attention.c): flash (the default)
 * keeps a (B,NH,T) log-sum-exp per block, naive the (B,NH,T,T) scores and
 * probabilities.  Before GptModelSetUp; a usage error when the kernel
 * table has no flash attention. */
int GptModelSetAttention(GptModel m, FsdpAttention attention);

/* Bytes of activations and backward scratch GptModelSetUp allocates for
 * cfg, wrap, B sequences of T, with or without recomputation: a pure
 * function, for fsdp-plan.  GptModelActivationBytes: what SetUp did
 * allocate (counted at each allocation). */
uint64_t GptActivationBytes(const GptConfig *cfg, int wrap, int B, int T, int recompute,
                            FsdpAttention attention);
uint64_t GptModelActivationBytes(GptModel m);

/* Set the micro-batch (B*T token ids each) the next forward/backward uses. */
int GptModelSetBatch(GptModel m, const int *inputs, const int *targets);

/* Mean loss of the last forward over this rank's B*T positions. */
double GptModelLoss(GptModel m);

/* Not collective.  The vocab_size logits of the last forward at sequence
 * b, position t of the batch, into host memory (sampling: the next-token
 * distribution after position t). */
int GptModelLogits(GptModel m, int b, int t, float *out);

/* Scale of the loss gradient for each position: the backward uses
 * d(total)/d(loss_pos) = dloss_scale / (B*T).  1 by default; gradient
 * accumulation over K micro-steps sets 1/K. */
void GptModelSetLossScale(GptModel m, float scale);

/* The init rule (the table's init). */
int GptModelInit(void *model, const FsdpParamSpec *spec, int64_t start,
                 int64_t count, float *out);

/* Whether AdamW applies weight decay to this parameter: not to biases or
 * LayerNorm weights; embeddings only when decay_embeddings (the table's
 * decays). */
int GptParamDecays(const char *name, int decay_embeddings);

const GptConfig *GptModelConfig(GptModel m);
int GptModelBatch(GptModel m, int *B, int *T);

/* ---- the model's description (model.h) ---------------------------------- */

#define GPT_FAMILY "gpt2"

/* Not collective.  desc: family GPT_FAMILY, the preset name, and the int
 * attributes n_layer, n_embd, n_head, vocab_size, seq_len (in that order:
 * checkpoints and run files store them under these names). */
int GptConfigDescribe(const GptConfig *cfg, const char *preset, FsdpModelDesc *desc);
/* Not collective.  The config a description holds (one read from a file
 * named in `what`, e.g. "checkpoint ckpt_00000100.h5"): a usage error
 * naming what and the attribute when the family is not GPT_FAMILY, an
 * attribute is missing, not an integer that fits an int, or one GPT does
 * not have.  (The values are not validated: GptConfigValidate.) */
int GptConfigFromDesc(const FsdpModelDesc *desc, const char *what, GptConfig *cfg);
/* GptConfigFromDesc, then the values checked with messages naming `what`
 * (GptConfigValidate speaks of options): the family's check. */
int GptConfigCheckFile(const FsdpModelDesc *desc, const char *what, GptConfig *cfg);

/* ---- conversions (convert.c; the family's operations, family.h) ---------- */

#define GPT_LLMC_MAGIC 20240326
int GptHfReadConfig(FsdpHfConfig cfg, FsdpModelDesc *desc);
int GptHfWriteConfig(const FsdpModelDesc *desc, FsdpHfConfig cfg);
int GptHfLayout(const FsdpModelDesc *desc, const char *what, FsdpHfLayout *layout);
int GptLlmcRead(const int32_t *header, int64_t file_bytes, const char *path, FsdpModelDesc *desc,
                FsdpLlmcLayout *layout);
int GptLlmcWrite(const FsdpModelDesc *desc, int32_t *header, FsdpLlmcLayout *layout);

#endif
