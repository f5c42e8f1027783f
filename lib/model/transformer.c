/* transformer.c: the decoder skeleton every family shares (transformer.h). */
#include "model/transformer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ---- the config as a description ---------------------------------------- */

int FsdpConfigDescribe(const void *cfg, const FsdpConfigField *f, int n, const char *family,
                       const char *preset, FsdpModelDesc *desc)
{
  FsdpModelDescInit(desc, family, preset);
  for (int i = 0; i < n; i++) {
    const char *p = (const char *)cfg + f[i].offset;
    if (f[i].type == FSDP_MODEL_ATTR_INT) {
      int v;
      memcpy(&v, p, sizeof v);
      FSDP_CALL(FsdpModelDescAddInt(desc, f[i].name, v));
    } else {
      double v;
      memcpy(&v, p, sizeof v);
      FSDP_CALL(FsdpModelDescAddReal(desc, f[i].name, v));
    }
  }
  return FSDP_SUCCESS;
}

int FsdpConfigFromDesc(const FsdpModelDesc *desc, const char *what, const FsdpConfigField *f, int n,
                       const char *family, void *cfg)
{
  if (strcmp(desc->family, family) != 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s holds a model of family %s, not %s", what, desc->family, family);
  char v[FSDP_MODEL_STRING_MAX + 32];
  for (int i = 0; i < n; i++) {
    const FsdpModelAttr *a = FsdpModelDescFind(desc, f[i].name);
    if (!a) FSDP_ERROR(FSDP_ERR_USAGE, "%s lacks the model attribute %s", what, f[i].name);
    FsdpModelAttrValueString(a, v, sizeof v);
    char *p = (char *)cfg + f[i].offset;
    if (f[i].type == FSDP_MODEL_ATTR_INT) {
      /* a cast would let 2^32 + 2 pass for 2 layers (found by tests/fuzz) */
      if (a->type != FSDP_MODEL_ATTR_INT || a->i < INT_MIN || a->i > INT_MAX)
        FSDP_ERROR(FSDP_ERR_USAGE, "%s has %s %s, not an integer in the range of an int", what,
                   f[i].name, v);
      int x = (int)a->i;
      memcpy(p, &x, sizeof x);
    } else {
      if (a->type != FSDP_MODEL_ATTR_REAL)
        FSDP_ERROR(FSDP_ERR_USAGE, "%s has %s %s, not a real number", what, f[i].name, v);
      memcpy(p, &a->r, sizeof a->r);
    }
  }
  for (int i = 0; i < desc->nattrs; i++) {
    int known = 0;
    for (int k = 0; k < n; k++) known |= strcmp(desc->attr[i].name, f[k].name) == 0;
    if (!known)
      FSDP_ERROR(FSDP_ERR_USAGE, "%s has the model attribute %s, which %s models do not have",
                 what, desc->attr[i].name, family);
  }
  return FSDP_SUCCESS;
}

/* ---- sizes ---------------------------------------------------------------- */

int FsdpDecoderSizeOptions(FsdpOpts db, int *n_layer, int *n_embd, int *n_head)
{
  int64_t v;
  FSDP_CALL(FsdpOptsGetInt(db, "Model", "n_layer", "transformer blocks", *n_layer, 1, 100000, &v));
  *n_layer = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, "Model", "n_embd", "channels C", *n_embd, 1, 1 << 20, &v));
  *n_embd = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, "Model", "n_head", "attention heads (must divide n_embd)", *n_head,
                           1, 1 << 16, &v));
  *n_head = (int)v;
  return FSDP_SUCCESS;
}

int FsdpDecoderCheckDims(int n_layer, int n_embd, int n_head)
{
  if (n_layer < 1) FSDP_ERROR(FSDP_ERR_USAGE, "option -n_layer: %d is not a positive integer", n_layer);
  if (n_embd < 1) FSDP_ERROR(FSDP_ERR_USAGE, "option -n_embd: %d is not a positive integer", n_embd);
  if (n_head < 1) FSDP_ERROR(FSDP_ERR_USAGE, "option -n_head: %d is not a positive integer", n_head);
  return FSDP_SUCCESS;
}

/* ---- the decoder's table -------------------------------------------------- */

int FsdpDecoderCheckSizes(int wrap, int B, int T, int seq_len)
{
  if (wrap < 1) FSDP_ERROR(FSDP_ERR_USAGE, "option -wrap: %d is not a positive integer", wrap);
  if (B < 1) FSDP_ERROR(FSDP_ERR_USAGE, "option -batch_size: %d is not a positive integer", B);
  if (T < 1 || T > seq_len)
    FSDP_ERROR(FSDP_ERR_USAGE, "sequence length %d must be in [1, seq_len = %d]", T, seq_len);
  /* Kernels take the row count B*T as an int ([Note: 64-bit element
   * counts] in kernels.h); its products with C, 4C and V are size_t. */
  if ((int64_t)B * T > INT_MAX)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -batch_size: %d sequences of %d tokens make %lld tokens per rank, "
               "more than %d",
               B, T, (long long)B * T, INT_MAX);
  return FSDP_SUCCESS;
}

int FsdpDecoderBuild(FsdpDecoder *d, void *ctx, FsdpModelTable *t)
{
  int L = d->n_layer, wrap = d->wrap;
  d->nunits = 1 + (L + wrap - 1) / wrap;
  d->units = calloc((size_t)d->nunits, sizeof *d->units);
  FSDP_CHECK_ALLOC(d->units, (size_t)d->nunits * sizeof *d->units);
  d->stages = calloc((size_t)d->nunits + 1, sizeof *d->stages);
  FSDP_CHECK_ALLOC(d->stages, ((size_t)d->nunits + 1) * sizeof *d->stages);
  FsdpModelUnit *root = &d->units[0];
  snprintf(root->name, sizeof root->name, "root");
  root->is_root = 1;
  root->nparams = d->nroot;
  root->params = d->root_specs;
  d->stages[0] = (FsdpModelStage){0, d->embed_forward, d->embed_backward, NULL};
  for (int u = 1, l = 0; l < L; u++, l += wrap) {
    int n = l + wrap > L ? L - l : wrap;
    FsdpModelUnit *x = &d->units[u];
    if (n == 1) snprintf(x->name, sizeof x->name, "%s%d", d->unit_prefix, l);
    else snprintf(x->name, sizeof x->name, "%s%d-%d", d->unit_prefix, l, l + n - 1);
    x->nparams = n * d->block_nparams;
    x->params = d->block_specs + (size_t)l * d->block_nparams;
    d->stages[u] = (FsdpModelStage){u, d->unit_forward, d->unit_backward, NULL};
  }
  d->stages[d->nunits] = (FsdpModelStage){0, d->head_forward, d->head_backward, NULL};
  t->ctx = ctx;
  t->nunits = d->nunits;
  t->units = d->units;
  t->nstages = d->nunits + 1;
  t->stages = d->stages;
  return FSDP_SUCCESS;
}

void FsdpDecoderFree(FsdpDecoder *d)
{
  free(d->units);
  free(d->stages);
  d->units = NULL;
  d->stages = NULL;
}

void FsdpDecoderStageLayers(const FsdpDecoder *d, int stage, int *first, int *last)
{
  *first = (stage - 1) * d->wrap;
  *last = *first + d->wrap - 1;
  if (*last >= d->n_layer) *last = d->n_layer - 1;
}

/* ---- batches and the loss -------------------------------------------------- */

int FsdpDecoderSetBatch(const FsdpKernelOps *k, int *dev_inputs, int *dev_targets,
                        const int *inputs, const int *targets, size_t BT, int V)
{
  if (!dev_inputs) FSDP_ERROR(FSDP_ERR_STATE, "a model's batch set before its set-up");
  for (size_t i = 0; i < BT; i++)
    if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V)
      FSDP_ERROR(FSDP_ERR_USAGE, "token %d at batch position %zu is outside [0, vocab_size = %d)",
                 inputs[i] < 0 || inputs[i] >= V ? inputs[i] : targets[i], i, V);
  FSDP_CALL(k->copy_from_host(dev_inputs, inputs, BT * sizeof(int)));
  FSDP_CALL(k->copy_from_host(dev_targets, targets, BT * sizeof(int)));
  return FSDP_SUCCESS;
}

int FsdpDecoderLogits(const FsdpKernelOps *k, const float *logits, int B, int T, int V, int b,
                      int t, float *out)
{
  if (!logits) FSDP_ERROR(FSDP_ERR_STATE, "the model's logits read before its set-up");
  if (b < 0 || b >= B || t < 0 || t >= T)
    FSDP_ERROR(FSDP_ERR_STATE, "the model's logits: position (%d, %d) outside the batch (%d, %d)",
               b, t, B, T);
  size_t v = (size_t)V;
  FSDP_CALL(k->copy_to_host(out, logits + ((size_t)b * T + t) * v, v * sizeof(float)));
  return FSDP_SUCCESS;
}

int FsdpDecoderMeanLoss(const FsdpKernelOps *k, const float *losses, float *host, int BT,
                        double *loss)
{
  FSDP_CALL(k->copy_to_host(host, losses, (size_t)BT * sizeof(float)));
  double sum = 0.0;
  for (int i = 0; i < BT; i++) sum += host[i];
  *loss = sum / BT;
  return FSDP_SUCCESS;
}
