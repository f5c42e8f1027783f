/* transformer.h: what every decoder family (GPT-2, Llama, ...) shares,
 * written once: its config as description attributes, the checks of a
 * model's sizes, the table of units and stages, the token check and the
 * mean loss.  A family keeps its own parameters, init and decay rules,
 * activations and stage bodies ([Note: adding a family] in family.h).
 */
#ifndef FSDP_TRANSFORMER_H
#define FSDP_TRANSFORMER_H

#include <stddef.h>
#include <stdint.h>

#include "base/opts.h"
#include "kernels/kernels.h"
#include "model/model.h"

/* ---- the config as a description ---------------------------------------- */

/* One attribute of a family's config struct: its name in descriptions
 * (checkpoints, run files), its type (FSDP_MODEL_ATTR_INT: a C int;
 * FSDP_MODEL_ATTR_REAL: a double) and its offset in the struct. */
typedef struct {
  const char *name;
  FsdpModelAttrType type;
  size_t offset;
} FsdpConfigField;

/* Not collective.  desc: family, preset, and the n fields of cfg in order. */
int FsdpConfigDescribe(const void *cfg, const FsdpConfigField *f, int n, const char *family,
                       const char *preset, FsdpModelDesc *desc);
/* Not collective.  The fields of a description read from `what` into cfg:
 * a usage error naming what and the attribute when the family is not
 * `family`, a field is missing, an int that is not an integer in the range
 * of an int, a real that is not a real, or an attribute the family does
 * not have.  The values are not validated. */
int FsdpConfigFromDesc(const FsdpModelDesc *desc, const char *what, const FsdpConfigField *f, int n,
                       const char *family, void *cfg);

/* ---- sizes ---------------------------------------------------------------- */

/* Not collective.  The options every decoder has (group "Model"):
 * -n_layer -n_embd -n_head over the values passed in. */
int FsdpDecoderSizeOptions(FsdpOpts db, int *n_layer, int *n_embd, int *n_head);
/* Not collective.  n_layer, n_embd and n_head positive (usage errors
 * naming the option): the start of every family's validation. */
int FsdpDecoderCheckDims(int n_layer, int n_embd, int n_head);

/* ---- the decoder's table -------------------------------------------------- */

/* Not collective.  The sizes a decoder is created with: -wrap and
 * -batch_size positive, 1 <= T <= seq_len, B*T an int (the kernels' row
 * count, [Note: 64-bit element counts] in kernels.h); usage errors naming
 * the option. */
int FsdpDecoderCheckSizes(int wrap, int B, int T, int seq_len);

/* [Note: the decoder's table] Units: the root (embedding, final norm,
 * head) and one unit per `wrap` blocks, named prefix + first layer
 * ("h.0") or prefix + range ("h.0-1").  Stages in forward order: the
 * root's embedding stage, one per block unit, the root's head stage
 * (FsdpModelDescNumStages counts them). */
typedef struct {
  /* set by the family */
  const char *unit_prefix;  /* "h.", "model.layers." */
  int n_layer, wrap;
  int nroot;
  const FsdpParamSpec *root_specs;  /* [nroot] */
  int block_nparams;
  const FsdpParamSpec *block_specs; /* [n_layer * block_nparams], block by block */
  FsdpStageFn embed_forward, embed_backward, unit_forward, unit_backward, head_forward,
      head_backward;
  /* made by FsdpDecoderBuild (freed by FsdpDecoderFree) */
  int nunits;
  FsdpModelUnit *units;   /* [nunits] */
  FsdpModelStage *stages; /* [nunits + 1] */
} FsdpDecoder;

/* Not collective.  Build the units and stages and point the table at them
 * (t->ctx = ctx, t->nunits, t->units, t->nstages, t->stages); the family
 * sets the rest of the table. */
int FsdpDecoderBuild(FsdpDecoder *d, void *ctx, FsdpModelTable *t);
void FsdpDecoderFree(FsdpDecoder *d);
/* The layers [*first, *last] of block stage `stage`. */
void FsdpDecoderStageLayers(const FsdpDecoder *d, int stage, int *first, int *last);

/* ---- batches and the loss -------------------------------------------------- */

/* Not collective.  A micro-batch of BT token ids (host memory) into the
 * model's buffers dev_inputs, dev_targets (kernel memory; NULL before the
 * set-up: a state error): every id in [0, V), else a usage error naming
 * the position. */
int FsdpDecoderSetBatch(const FsdpKernelOps *k, int *dev_inputs, int *dev_targets,
                        const int *inputs, const int *targets, size_t BT, int V);
/* Not collective.  The V logits at sequence b, position t of the last
 * forward (logits: the (B,T,V) buffer in kernel memory, NULL before the
 * set-up) into host memory; a state error outside the batch. */
int FsdpDecoderLogits(const FsdpKernelOps *k, const float *logits, int B, int T, int V, int b,
                      int t, float *out);
/* The mean of the BT per-position losses (kernel memory), through the
 * host buffer host[BT]. */
int FsdpDecoderMeanLoss(const FsdpKernelOps *k, const float *losses, float *host, int BT,
                        double *loss);

#endif
