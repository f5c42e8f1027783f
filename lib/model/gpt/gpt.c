/* gpt.c: GPT-2 forward and backward as FSDP stages (see gpt.h). */
#include "model/gpt/gpt.h"

#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "model/transformer.h"

const char *const GptPresetNames[] = {"tiny",     "small",       "gpt2",
                                      "gpt2-medium", "gpt2-large", "gpt2-xl",
                                      "gpt-175b", "custom",      NULL};

/* n_layer, n_embd, n_head, vocab_size, seq_len per preset (custom last). */
static const GptConfig kPresets[] = {
    {2, 32, 4, 64, 16},          /* tiny: tests */
    {4, 128, 4, 256, 64},        /* small: the demo */
    {12, 768, 12, 50257, 1024},  /* gpt2 (124M) */
    {24, 1024, 16, 50257, 1024}, /* gpt2-medium (350M) */
    {36, 1280, 20, 50257, 1024}, /* gpt2-large (774M) */
    {48, 1600, 25, 50257, 1024}, /* gpt2-xl (1.5B) */
    {96, 12288, 96, 50257, 2048}, /* gpt-175b */
};

/* Parameters of one block, in registration order (see gpt.h). */
enum {
  BLK_LN1W, BLK_LN1B, BLK_QKVW, BLK_QKVB, BLK_ATTPROJW, BLK_ATTPROJB,
  BLK_LN2W, BLK_LN2B, BLK_FCW, BLK_FCB, BLK_FCPROJW, BLK_FCPROJB, BLK_NPARAMS
};
enum { ROOT_WTE, ROOT_WPE, ROOT_LNFW, ROOT_LNFB, ROOT_NPARAMS };

static const char *const kBlockParamNames[BLK_NPARAMS] = {
    "ln_1.weight",      "ln_1.bias",         "attn.c_attn.weight",
    "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight",      "ln_2.bias",         "mlp.c_fc.weight",
    "mlp.c_fc.bias",    "mlp.c_proj.weight", "mlp.c_proj.bias"};

/* Activations of one block kept from forward for backward. */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd; /* (B,T,C) (B,T) (B,T) */
  float *qkv;                       /* (B,T,3C) */
  float *atty;                      /* (B,T,C) */
  float *preatt, *att;              /* naive: (B,NH,T,T); flash: preatt is lse (B,NH,T), att NULL */
  float *res2;                      /* (B,T,C) x + attn */
  float *ln2, *ln2_mean, *ln2_rstd; /* (B,T,C) (B,T) (B,T) */
  float *fch, *fch_gelu;            /* (B,T,4C) */
  float *res3;                      /* (B,T,C) block output */
} BlockActs;

struct GptModel_ {
  GptConfig cfg;
  int wrap, B, T, nunits;
  const FsdpKernelOps *k;
  uint64_t seed;
  float loss_scale;
  /* specs: root then blocks (block i at 1 + i's unit) */
  FsdpParamSpec root_specs[ROOT_NPARAMS];
  FsdpParamSpec *unit_specs; /* per block: BLK_NPARAMS */
  /* the table (GptModelTable): units [root, blocks...], stages [embed,
   * blocks..., head] ([Note: the decoder's table] in transformer.h) */
  FsdpDecoder dec;
  FsdpModelTable table;
  /* batch */
  int *inputs, *targets; /* (B,T) */
  /* activations */
  float *encoded;  /* (B,T,C) */
  BlockActs *acts; /* per layer */
  float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C) (B,T) (B,T) */
  float *logits, *probs;            /* (B,T,V); probs only without a fused classifier */
  float *losses;                    /* (B,T) */
  float *losses_host;               /* (B,T) host copy for the mean */
  double loss;
  /* [Note: fused classifier] (kernels.h): 1 when the last HeadForward ran
   * k->crossentropy_fused, so logits holds d(loss)/d(logits) */
  int head_fused;
  /* backward scratch (shared by all blocks) */
  float *dres;     /* (B,T,C) gradient flowing down the residual stream */
  float *dln;      /* (B,T,C) */
  float *datty;    /* (B,T,C) */
  float *dqkv;     /* (B,T,3C) */
  float *dpreatt, *datt; /* naive: (B,NH,T,T); flash: dpreatt (B,NH,T), datt NULL */
  float *dfch, *dfch_gelu; /* (B,T,4C) */
  float *dlogits;  /* (B,T,V), only without a fused classifier */
  /* [Note: GPT recomputation] */
  int recompute;   /* GptModelSetRecompute */
  FsdpAttention attention; /* GptModelSetAttention; default (0) flash */
  BlockActs *ws;   /* working set: one unit's blocks, res3 excluded; NULL without */
  int nws;         /* its blocks: min(wrap, n_layer) */
  int ws_stage;    /* the stage whose activations the working set holds, -1 */
  uint64_t act_bytes; /* bytes Alloc allocated (GptModelActivationBytes) */
};


int GptConfigValidate(const GptConfig *c)
{
  FSDP_CALL(FsdpDecoderCheckDims(c->n_layer, c->n_embd, c->n_head));
  if (c->n_embd % c->n_head != 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -n_embd %d is not divisible by -n_head %d (each head "
               "gets n_embd/n_head channels)",
               c->n_embd, c->n_head);
  if (c->vocab_size < 2 || c->vocab_size > 65536)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -vocab_size: %d is out of range (expected 2..65536: "
               "tokens are stored as uint16)",
               c->vocab_size);
  if (c->seq_len < 2) FSDP_ERROR(FSDP_ERR_USAGE, "option -seq_len: %d is too small (expected >= 2)", c->seq_len);
  return FSDP_SUCCESS;
}

int GptConfigFromDb(FsdpOpts db, const char *preset, GptConfig *cfg)
{
  int idx = 0;
  while (preset && GptPresetNames[idx] && strcmp(GptPresetNames[idx], preset) != 0) idx++;
  GptConfig c = kPresets[preset && idx < 7 ? idx : 0];
  int64_t v;
  /* Sizes may be overridden for any preset; custom starts from tiny. */
  FSDP_CALL(FsdpDecoderSizeOptions(db, &c.n_layer, &c.n_embd, &c.n_head));
  FSDP_CALL(FsdpOptsGetInt(db, "Model", "vocab_size", "vocabulary size V", c.vocab_size, 2, 65536, &v));
  c.vocab_size = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, "Model", "seq_len", "maximum sequence length (positions in wpe)", c.seq_len, 2, 1 << 20, &v));
  c.seq_len = (int)v;
  FSDP_CALL(GptConfigValidate(&c));
  *cfg = c;
  return FSDP_SUCCESS;
}

int64_t GptConfigParamCount(const GptConfig *c)
{
  int64_t C = c->n_embd, V = c->vocab_size, T = c->seq_len, L = c->n_layer;
  return V * C + T * C + 2 * C + L * (12 * C * C + 13 * C);
}

/* ---- initialization ------------------------------------------------------- */

static int EndsWith(const char *s, const char *suffix)
{
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

int GptModelInit(void *model, const FsdpParamSpec *spec, int64_t start, int64_t count, float *out)
{
  GptModel m = (GptModel)model;
  const char *name = spec->name;
  if (EndsWith(name, ".bias")) {
    for (int64_t i = 0; i < count; i++) out[i] = 0.0f;
    return FSDP_SUCCESS;
  }
  if (strstr(name, "ln_") != NULL) { /* ln_1/ln_2/ln_f weights */
    for (int64_t i = 0; i < count; i++) out[i] = 1.0f;
    return FSDP_SUCCESS;
  }
  double std = 0.02;
  if (EndsWith(name, "c_proj.weight")) std = 0.02 / sqrt(2.0 * m->cfg.n_layer);
  FsdpInitNormal(m->seed, name, std, start, count, out); /* [Note: counter-based init] */
  return FSDP_SUCCESS;
}

int GptParamDecays(const char *name, int decay_embeddings)
{
  if (EndsWith(name, ".bias")) return 0;
  if (strstr(name, "ln_") != NULL) return 0;
  if (strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0) return decay_embeddings;
  return 1;
}

/* ---- model ---------------------------------------------------------------- */

static int EmbedForward(void *model, int stage, const FsdpUnitTensors *t);
static int EmbedBackward(void *model, int stage, const FsdpUnitTensors *t);
static int UnitForward(void *model, int stage, const FsdpUnitTensors *t);
static int UnitRecompute(void *model, int stage, const FsdpUnitTensors *t);
static int UnitBackward(void *model, int stage, const FsdpUnitTensors *t);
static int HeadForward(void *model, int stage, const FsdpUnitTensors *t);
static int HeadBackward(void *model, int stage, const FsdpUnitTensors *t);

/* Units [root, one per `wrap` blocks] and stages [root: embed, one per
 * block unit, root: head] (gpt.h), over the specs made by GptModelCreate. */
static int BuildTable(GptModel m)
{
  m->dec = (FsdpDecoder){.unit_prefix = "h.",
                         .n_layer = m->cfg.n_layer,
                         .wrap = m->wrap,
                         .nroot = ROOT_NPARAMS,
                         .root_specs = m->root_specs,
                         .block_nparams = BLK_NPARAMS,
                         .block_specs = m->unit_specs,
                         .embed_forward = EmbedForward,
                         .embed_backward = EmbedBackward,
                         .unit_forward = UnitForward,
                         .unit_backward = UnitBackward,
                         .head_forward = HeadForward,
                         .head_backward = HeadBackward};
  FsdpModelTable *t = &m->table;
  FSDP_CALL(FsdpDecoderBuild(&m->dec, m, t));
  /* the preset name is the driver's (-model); the table describes shapes */
  FSDP_CALL(GptConfigDescribe(&m->cfg, "", &t->desc));
  t->init = GptModelInit;
  t->decays = GptParamDecays;
  t->kernels = m->k;
  return FSDP_SUCCESS;
}

const FsdpModelTable *GptModelTable(GptModel m) { return &m->table; }

int GptModelCreate(const GptConfig *cfg, int wrap, int B, int T, const FsdpKernelOps *ops,
                   uint64_t seed, GptModel *out)
{
  *out = NULL;
  FSDP_CALL(GptConfigValidate(cfg));
  FSDP_CALL(FsdpDecoderCheckSizes(wrap, B, T, cfg->seq_len));
  GptModel m = calloc(1, sizeof *m);
  FSDP_CHECK_ALLOC(m, sizeof *m);
  m->cfg = *cfg;
  m->wrap = wrap;
  m->B = B;
  m->T = T;
  m->k = ops;
  m->seed = seed;
  m->loss_scale = 1.0f;
  int C = cfg->n_embd, L = cfg->n_layer;
  m->nunits = 1 + (L + wrap - 1) / wrap;
  FsdpParamSpecSet(&m->root_specs[ROOT_WTE], "wte", 2, cfg->vocab_size, C);
  FsdpParamSpecSet(&m->root_specs[ROOT_WPE], "wpe", 2, cfg->seq_len, C);
  FsdpParamSpecSet(&m->root_specs[ROOT_LNFW], "ln_f.weight", 1, C, 0);
  FsdpParamSpecSet(&m->root_specs[ROOT_LNFB], "ln_f.bias", 1, C, 0);
  m->unit_specs = calloc((size_t)L * BLK_NPARAMS, sizeof *m->unit_specs);
  FSDP_CHECK_ALLOC(m->unit_specs, (size_t)L * BLK_NPARAMS * sizeof *m->unit_specs);
  const int64_t shapes[BLK_NPARAMS][2] = {
      {C, 0}, {C, 0}, {3 * C, C}, {3 * C, 0}, {C, C}, {C, 0},
      {C, 0}, {C, 0}, {4 * C, C}, {4 * C, 0}, {C, 4 * C}, {C, 0}};
  for (int l = 0; l < L; l++)
    for (int p = 0; p < BLK_NPARAMS; p++) {
      char name[FSDP_MAX_NAME];
      snprintf(name, sizeof name, "h.%d.%s", l, kBlockParamNames[p]);
      FsdpParamSpecSet(&m->unit_specs[l * BLK_NPARAMS + p], name, shapes[p][1] ? 2 : 1, shapes[p][0],
              shapes[p][1]);
    }
  *out = m;
  FSDP_CALL(BuildTable(m));
  return FSDP_SUCCESS;
}

/* Free a block's buffers; with only_res3 only res3 (the others are
 * the working set's, [Note: GPT recomputation]). */
static int FreeBlockActs(GptModel m, BlockActs *a, int only_res3)
{
  float **bufs[] = {&a->res3,    &a->ln1,      &a->ln1_mean, &a->ln1_rstd, &a->qkv,
                    &a->atty,    &a->preatt,   &a->att,      &a->res2,     &a->ln2,
                    &a->ln2_mean, &a->ln2_rstd, &a->fch,     &a->fch_gelu};
  size_t n = only_res3 ? 1 : sizeof bufs / sizeof bufs[0];
  for (size_t i = 0; i < n; i++) FSDP_CALL(m->k->free(bufs[i]));
  return FSDP_SUCCESS;
}

static int FreeActs(GptModel m)
{
  if (m->acts) {
    for (int l = 0; l < m->cfg.n_layer; l++) FSDP_CALL(FreeBlockActs(m, &m->acts[l], m->ws != NULL));
    free(m->acts);
    m->acts = NULL;
  }
  if (m->ws) {
    for (int j = 0; j < m->nws; j++) FSDP_CALL(FreeBlockActs(m, &m->ws[j], 0));
    free(m->ws);
    m->ws = NULL;
  }
  float **bufs[] = {&m->encoded, &m->lnf, &m->lnf_mean, &m->lnf_rstd, &m->logits, &m->probs,
                    &m->losses, &m->dres, &m->dln, &m->datty, &m->dqkv, &m->dpreatt,
                    &m->datt, &m->dfch, &m->dfch_gelu, &m->dlogits};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) FSDP_CALL(m->k->free(bufs[i]));
  int **ibufs[] = {&m->inputs, &m->targets};
  for (size_t i = 0; i < 2; i++) FSDP_CALL(m->k->free(ibufs[i]));
  FSDP_CALL(FsdpFree(&m->losses_host));
  return FSDP_SUCCESS;
}

int GptModelDestroy(GptModel *pm)
{
  if (!pm || !*pm) return FSDP_SUCCESS;
  GptModel m = *pm;
  FSDP_CALL(FreeActs(m));
  FsdpDecoderFree(&m->dec);
  free(m->unit_specs);
  free(m);
  *pm = NULL;
  return FSDP_SUCCESS;
}

/* Activations live where the kernels run: the kernel table allocates them. */
static int Alloc(GptModel m, float **p, size_t n)
{
  FSDP_CALL(m->k->alloc(FSDP_MEM_ACTS, n * sizeof(float), p));
  m->act_bytes += n * sizeof(float);
  return FSDP_SUCCESS;
}

/* [Note: GPT recomputation] Without recomputation every block keeps all
 * its activations (BlockActs) from forward to backward.  With it, block l
 * keeps only its output res3 (the input of block l + 1; block 0's input is
 * `encoded`), and its other buffers are those of working-set slot l % wrap:
 * the blocks of one unit share nothing, the units share the slots.  So the
 * block code is the same in both modes; what changes is that a unit's
 * forward overwrites the previous unit's working set, and the runtime
 * calls the unit's forward again (the stage's recompute callback) before
 * its backward.  Recomputing also rewrites the unit's res3 buffers with
 * the same values: by then the blocks that read them as input have run
 * their backward.  Bytes: GptActivationBytes. */
uint64_t GptActivationBytes(const GptConfig *c, int wrap, int B, int T, int recompute,
                            FsdpAttention attention)
{
  uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, V = (uint64_t)c->vocab_size;
  uint64_t L = (uint64_t)c->n_layer;
  /* attention's own buffers, per block and again as backward scratch:
   * naive preatt and att (B,NH,T,T) each; flash the lse (B,NH,T) alone
   * ([Note: flash attention] in kernels/cpu/attention.c) */
  uint64_t att = attention == FSDP_ATTENTION_NAIVE ? 2 * (uint64_t)B * c->n_head * T * T
                                                   : (uint64_t)B * c->n_head * T;
  /* a block: res3 (BT C) and the rest: ln1 qkv atty res2 ln2 fch fch_gelu
   * (15 BT C), four (B,T) statistics, attention's */
  uint64_t rest = 15 * BT * C + 4 * BT + att;
  uint64_t blocks = L * (BT * C + rest);
  if (recompute) blocks = L * BT * C + (uint64_t)(wrap < c->n_layer ? wrap : c->n_layer) * rest;
  /* shared: encoded lnf dres dln datty (5 BT C) dqkv (3) dfch dfch_gelu
   * (4 + 4); lnf_mean lnf_rstd losses; logits; attention's scratch
   * (dpreatt datt, or flash's row sums).  probs and dlogits are not needed
   * with the fused classifier, which both back-ends have ([Note: fused
   * classifier] in kernels.h); a table without it (as fsdp-sample's)
   * allocates 2 BT V more than this says. */
  uint64_t shared = 16 * BT * C + 3 * BT + BT * V + att;
  return 4 * (blocks + shared);
}

uint64_t GptModelActivationBytes(GptModel m) { return m->act_bytes; }

int GptModelSetAttention(GptModel m, FsdpAttention attention)
{
  if (m->acts) FSDP_ERROR(FSDP_ERR_STATE, "GptModelSetAttention after GptModelSetUp");
  FSDP_CALL(FsdpModelCheckAttention(m->k, attention));
  m->attention = attention;
  return FSDP_SUCCESS;
}

int GptModelSetRecompute(GptModel m, int recompute)
{
  if (m->acts) FSDP_ERROR(FSDP_ERR_STATE, "GptModelSetRecompute after GptModelSetUp");
  m->recompute = recompute != 0;
  for (int s = 1; s < m->nunits; s++) m->dec.stages[s].recompute = m->recompute ? UnitRecompute : NULL;
  return FSDP_SUCCESS;
}

/* A block's buffers other than res3 (the working set's or a layer's own). */
static int AllocBlockRest(GptModel m, BlockActs *a)
{
  size_t B = (size_t)m->B, T = (size_t)m->T, C = (size_t)m->cfg.n_embd;
  size_t NH = (size_t)m->cfg.n_head, BT = B * T;
  FSDP_CALL(Alloc(m, &a->ln1, BT * C));
  FSDP_CALL(Alloc(m, &a->ln1_mean, BT));
  FSDP_CALL(Alloc(m, &a->ln1_rstd, BT));
  FSDP_CALL(Alloc(m, &a->qkv, BT * 3 * C));
  FSDP_CALL(Alloc(m, &a->atty, BT * C));
  if (m->attention == FSDP_ATTENTION_NAIVE) {
    FSDP_CALL(Alloc(m, &a->preatt, B * NH * T * T));
    FSDP_CALL(Alloc(m, &a->att, B * NH * T * T));
  } else {
    FSDP_CALL(Alloc(m, &a->preatt, B * NH * T)); /* lse */
  }
  FSDP_CALL(Alloc(m, &a->res2, BT * C));
  FSDP_CALL(Alloc(m, &a->ln2, BT * C));
  FSDP_CALL(Alloc(m, &a->ln2_mean, BT));
  FSDP_CALL(Alloc(m, &a->ln2_rstd, BT));
  FSDP_CALL(Alloc(m, &a->fch, BT * 4 * C));
  FSDP_CALL(Alloc(m, &a->fch_gelu, BT * 4 * C));
  return FSDP_SUCCESS;
}

int GptModelSetUp(GptModel m)
{
  size_t B = (size_t)m->B, T = (size_t)m->T, C = (size_t)m->cfg.n_embd;
  size_t NH = (size_t)m->cfg.n_head, V = (size_t)m->cfg.vocab_size, BT = B * T;
  if (m->acts) FSDP_ERROR(FSDP_ERR_STATE, "GptModelSetUp called twice");
  m->ws_stage = -1;
  m->acts = calloc((size_t)m->cfg.n_layer, sizeof *m->acts);
  FSDP_CHECK_ALLOC(m->acts, sizeof *m->acts);
  if (m->recompute) { /* [Note: GPT recomputation] */
    m->nws = m->wrap < m->cfg.n_layer ? m->wrap : m->cfg.n_layer;
    m->ws = calloc((size_t)m->nws, sizeof *m->ws);
    FSDP_CHECK_ALLOC(m->ws, (size_t)m->nws * sizeof *m->ws);
    for (int j = 0; j < m->nws; j++) FSDP_CALL(AllocBlockRest(m, &m->ws[j]));
  }
  for (int l = 0; l < m->cfg.n_layer; l++) {
    BlockActs *a = &m->acts[l];
    /* with recomputation all but res3 are the working-set slot's (whose
     * res3 is NULL) */
    if (m->ws) *a = m->ws[l % m->wrap];
    else FSDP_CALL(AllocBlockRest(m, a));
    FSDP_CALL(Alloc(m, &a->res3, BT * C));
  }
  FSDP_CALL(Alloc(m, &m->encoded, BT * C));
  FSDP_CALL(Alloc(m, &m->lnf, BT * C));
  FSDP_CALL(Alloc(m, &m->lnf_mean, BT));
  FSDP_CALL(Alloc(m, &m->lnf_rstd, BT));
  FSDP_CALL(Alloc(m, &m->logits, BT * V));
  if (!m->k->crossentropy_fused) /* [Note: fused classifier]: else unused */
    FSDP_CALL(Alloc(m, &m->probs, BT * V));
  FSDP_CALL(Alloc(m, &m->losses, BT));
  FSDP_CALL(Alloc(m, &m->dres, BT * C));
  FSDP_CALL(Alloc(m, &m->dln, BT * C));
  FSDP_CALL(Alloc(m, &m->datty, BT * C));
  FSDP_CALL(Alloc(m, &m->dqkv, BT * 3 * C));
  if (m->attention == FSDP_ATTENTION_NAIVE) {
    FSDP_CALL(Alloc(m, &m->dpreatt, B * NH * T * T));
    FSDP_CALL(Alloc(m, &m->datt, B * NH * T * T));
  } else {
    FSDP_CALL(Alloc(m, &m->dpreatt, B * NH * T)); /* flash backward's row sums */
  }
  FSDP_CALL(Alloc(m, &m->dfch, BT * 4 * C));
  FSDP_CALL(Alloc(m, &m->dfch_gelu, BT * 4 * C));
  if (!m->k->crossentropy_fused) FSDP_CALL(Alloc(m, &m->dlogits, BT * V));
  FSDP_CALL(m->k->alloc(FSDP_MEM_DATA, BT * sizeof(int), &m->inputs));
  FSDP_CALL(m->k->alloc(FSDP_MEM_DATA, BT * sizeof(int), &m->targets));
  FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, BT * sizeof(float), &m->losses_host));
  return FSDP_SUCCESS;
}

int GptModelSetBatch(GptModel m, const int *inputs, const int *targets)
{
  return FsdpDecoderSetBatch(m->k, m->inputs, m->targets, inputs, targets, (size_t)m->B * m->T,
                             m->cfg.vocab_size);
}

double GptModelLoss(GptModel m) { return m->loss; }

int GptModelLogits(GptModel m, int b, int t, float *out)
{
  if (m->head_fused)
    FSDP_ERROR(FSDP_ERR_STATE, "GptModelLogits: the fused classifier wrote the logits' gradient "
                               "over them; give the model a kernel table without "
                               "crossentropy_fused to read logits (fsdp-sample does)");
  /* the head's logits stay in the buffer after the loss (crossentropy
   * writes probs, not logits) */
  return FsdpDecoderLogits(m->k, m->logits, m->B, m->T, m->cfg.vocab_size, b, t, out);
}
void GptModelSetLossScale(GptModel m, float scale) { m->loss_scale = scale; }
const GptConfig *GptModelConfig(GptModel m) { return &m->cfg; }
int GptModelBatch(GptModel m, int *B, int *T)
{
  *B = m->B;
  *T = m->T;
  return FSDP_SUCCESS;
}

/* ---- stages --------------------------------------------------------------- */

/* Input to layer l of the residual stream. */
static float *LayerInput(GptModel m, int l) { return l == 0 ? m->encoded : m->acts[l - 1].res3; }

static int EmbedForward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  GptModel m = (GptModel)model;
  m->k->encoder_forward(m->encoded, m->inputs, t->param[ROOT_WTE], t->param[ROOT_WPE], m->B, m->T,
                        m->cfg.n_embd);
  return FSDP_SUCCESS;
}

static int EmbedBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  GptModel m = (GptModel)model;
  m->k->encoder_backward(t->grad[ROOT_WTE], t->grad[ROOT_WPE], m->dres, m->inputs, m->B, m->T,
                         m->cfg.n_embd);
  return FSDP_SUCCESS;
}

static int HeadForward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  GptModel m = (GptModel)model;
  int BT = m->B * m->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
  const FsdpKernelOps *k = m->k;
  k->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, LayerInput(m, m->cfg.n_layer),
                       t->param[ROOT_LNFW], t->param[ROOT_LNFB], BT, C);
  k->matmul_forward(m->logits, m->lnf, t->param[ROOT_WTE], NULL, BT, C, V);
  /* [Note: fused classifier]: the loss and, over the logits, their
   * gradient in one pass (the loss scale is set before the forward); the
   * head's backward then starts from them.  Without it, probs now and the
   * softmax backward later.  The logits buffer is unpadded (Vp = V): the
   * head's matmul goes through the table, which has no row stride. */
  m->head_fused = k->crossentropy_fused != NULL;
  if (m->head_fused)
    k->crossentropy_fused(m->losses, m->logits, m->targets, m->loss_scale / (float)BT, BT, V, V);
  else
    k->crossentropy_forward(m->losses, m->probs, m->logits, m->targets, BT, V);
  return FsdpDecoderMeanLoss(k, m->losses, m->losses_host, BT, &m->loss);
}

static int HeadBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  GptModel m = (GptModel)model;
  int BT = m->B * m->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
  const FsdpKernelOps *k = m->k;
  FSDP_CALL(k->zero(m->dln, (size_t)BT * C * sizeof(float)));
  FSDP_CALL(k->zero(m->dres, (size_t)BT * C * sizeof(float)));
  float *dlogits = m->logits; /* [Note: fused classifier]: HeadForward wrote them */
  if (!m->head_fused) {
    dlogits = m->dlogits;
    FSDP_CALL(k->zero(m->dlogits, (size_t)BT * (size_t)V * sizeof(float)));
    k->crossentropy_softmax_backward(m->dlogits, m->probs, m->targets, m->loss_scale / (float)BT,
                                     BT, V);
  }
  k->matmul_backward(m->dln, t->grad[ROOT_WTE], NULL, dlogits, m->lnf, t->param[ROOT_WTE], BT, C,
                     V);
  k->layernorm_backward(m->dres, t->grad[ROOT_LNFW], t->grad[ROOT_LNFB], m->dln,
                        LayerInput(m, m->cfg.n_layer), t->param[ROOT_LNFW], m->lnf_mean,
                        m->lnf_rstd, BT, C);
  return FSDP_SUCCESS;
}

static void BlockForward(GptModel m, int l, float *const *p)
{
  int B = m->B, T = m->T, C = m->cfg.n_embd, NH = m->cfg.n_head, BT = B * T;
  const FsdpKernelOps *k = m->k;
  BlockActs *a = &m->acts[l];
  const float *x = LayerInput(m, l);
  size_t nC = (size_t)BT * C; /* [Note: 64-bit element counts] in kernels.h */
  k->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p[BLK_LN1W], p[BLK_LN1B], BT, C);
  k->matmul_forward(a->qkv, a->ln1, p[BLK_QKVW], p[BLK_QKVB], BT, C, 3 * C);
  if (m->attention == FSDP_ATTENTION_NAIVE)
    k->attention_forward(a->atty, a->preatt, a->att, a->qkv, B, T, C, NH);
  else
    k->flash_attention_forward(a->atty, a->preatt, a->qkv, B, T, C, NH);
  /* attproj goes straight into res2, then x is added: saves a buffer */
  k->matmul_forward(a->res2, a->atty, p[BLK_ATTPROJW], p[BLK_ATTPROJB], BT, C, C);
  if (k->residual_layernorm_forward) { /* [Note: fused residual and LayerNorm] */
    k->residual_layernorm_forward(a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, x,
                                  p[BLK_LN2W], p[BLK_LN2B], BT, C);
  } else {
    k->residual_forward(a->res2, a->res2, x, nC);
    k->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p[BLK_LN2W], p[BLK_LN2B], BT,
                         C);
  }
  k->matmul_forward(a->fch, a->ln2, p[BLK_FCW], p[BLK_FCB], BT, C, 4 * C);
  k->gelu_forward(a->fch_gelu, a->fch, 4 * nC);
  k->matmul_forward(a->res3, a->fch_gelu, p[BLK_FCPROJW], p[BLK_FCPROJB], BT, 4 * C, C);
  k->residual_forward(a->res3, a->res3, a->res2, nC);
}

/* [Note: in-place residual gradient] m->dres holds d(block output) on entry
 * and d(block input) on exit: a residual connection passes its gradient
 * through unchanged, so each branch's backward only ADDS its contribution
 * to the same buffer (kernels accumulate), after the branch has read it. */
static int BlockBackward(GptModel m, int l, float *const *p, float *const *g)
{
  int B = m->B, T = m->T, C = m->cfg.n_embd, NH = m->cfg.n_head, BT = B * T;
  const FsdpKernelOps *k = m->k;
  BlockActs *a = &m->acts[l];
  const float *x = LayerInput(m, l);
  size_t nC = (size_t)BT * C, n4C = 4 * nC;
  /* MLP branch: dres holds d(res3) */
  FSDP_CALL(k->zero(m->dfch_gelu, n4C * sizeof(float)));
  FSDP_CALL(k->zero(m->dfch, n4C * sizeof(float)));
  FSDP_CALL(k->zero(m->dln, nC * sizeof(float)));
  k->matmul_backward(m->dfch_gelu, g[BLK_FCPROJW], g[BLK_FCPROJB], m->dres, a->fch_gelu,
                     p[BLK_FCPROJW], BT, 4 * C, C);
  k->gelu_backward(m->dfch, a->fch, m->dfch_gelu, n4C);
  k->matmul_backward(m->dln, g[BLK_FCW], g[BLK_FCB], m->dfch, a->ln2, p[BLK_FCW], BT, C, 4 * C);
  k->layernorm_backward(m->dres, g[BLK_LN2W], g[BLK_LN2B], m->dln, a->res2, p[BLK_LN2W],
                        a->ln2_mean, a->ln2_rstd, BT, C);
  /* attention branch: dres now holds d(res2) */
  FSDP_CALL(k->zero(m->datty, nC * sizeof(float)));
  FSDP_CALL(k->zero(m->dqkv, 3 * nC * sizeof(float)));
  /* dpreatt and datt need no zeroing: attention_backward overwrites them
   * (scratch, kernels.h) */
  FSDP_CALL(k->zero(m->dln, nC * sizeof(float)));
  k->matmul_backward(m->datty, g[BLK_ATTPROJW], g[BLK_ATTPROJB], m->dres, a->atty,
                     p[BLK_ATTPROJW], BT, C, C);
  if (m->attention == FSDP_ATTENTION_NAIVE)
    k->attention_backward(m->dqkv, m->dpreatt, m->datt, m->datty, a->qkv, a->att, B, T, C, NH);
  else
    k->flash_attention_backward(m->dqkv, m->dpreatt, m->datty, a->qkv, a->atty, a->preatt, B, T,
                                C, NH);
  k->matmul_backward(m->dln, g[BLK_QKVW], g[BLK_QKVB], m->dqkv, a->ln1, p[BLK_QKVW], BT, C, 3 * C);
  k->layernorm_backward(m->dres, g[BLK_LN1W], g[BLK_LN1B], m->dln, x, p[BLK_LN1W], a->ln1_mean,
                        a->ln1_rstd, BT, C);
  return FSDP_SUCCESS;
}

static int UnitForward(void *model, int stage, const FsdpUnitTensors *t)
{
  GptModel m = (GptModel)model;
  int first, last;
  FsdpDecoderStageLayers(&m->dec, stage, &first, &last);
  for (int l = first; l <= last; l++) BlockForward(m, l, t->param + (l - first) * BLK_NPARAMS);
  m->ws_stage = stage;
  return FSDP_SUCCESS;
}

/* The stage's recompute callback ([Note: GPT recomputation]): the forward
 * again, from the unit's kept input, into the working set. */
static int UnitRecompute(void *model, int stage, const FsdpUnitTensors *t)
{
  return UnitForward(model, stage, t);
}

static int UnitBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  GptModel m = (GptModel)model;
  int first, last;
  FsdpDecoderStageLayers(&m->dec, stage, &first, &last);
  /* the working set must hold this unit's activations: a runtime without
   * -recompute 1 would run backward on another unit's */
  if (m->ws && m->ws_stage != stage)
    FSDP_ERROR(FSDP_ERR_STATE,
               "backward of stage %d (unit %s) without recomputing its forward: a model set "
               "up with GptModelSetRecompute needs a runtime with -recompute 1",
               stage, m->dec.units[m->dec.stages[stage].unit].name);
  for (int l = last; l >= first; l--)
    FSDP_CALL(BlockBackward(m, l, t->param + (l - first) * BLK_NPARAMS,
                            t->grad + (l - first) * BLK_NPARAMS));
  return FSDP_SUCCESS;
}

/* ---- the model's description ---------------------------------------------- */

/* The attributes, in the order they are described and stored. */
static const FsdpConfigField kGptFields[] = {
    {"n_layer", FSDP_MODEL_ATTR_INT, offsetof(GptConfig, n_layer)},
    {"n_embd", FSDP_MODEL_ATTR_INT, offsetof(GptConfig, n_embd)},
    {"n_head", FSDP_MODEL_ATTR_INT, offsetof(GptConfig, n_head)},
    {"vocab_size", FSDP_MODEL_ATTR_INT, offsetof(GptConfig, vocab_size)},
    {"seq_len", FSDP_MODEL_ATTR_INT, offsetof(GptConfig, seq_len)},
};
#define GPT_NATTRS ((int)(sizeof kGptFields / sizeof kGptFields[0]))

int GptConfigDescribe(const GptConfig *cfg, const char *preset, FsdpModelDesc *desc)
{
  return FsdpConfigDescribe(cfg, kGptFields, GPT_NATTRS, GPT_FAMILY, preset, desc);
}

int GptConfigFromDesc(const FsdpModelDesc *desc, const char *what, GptConfig *cfg)
{
  GptConfig c;
  FSDP_CALL(FsdpConfigFromDesc(desc, what, kGptFields, GPT_NATTRS, GPT_FAMILY, &c));
  *cfg = c;
  return FSDP_SUCCESS;
}

int GptConfigCheckFile(const FsdpModelDesc *desc, const char *what, GptConfig *c)
{
  FSDP_CALL(GptConfigFromDesc(desc, what, c));
  if (c->n_layer < 1 || c->n_embd < 1 || c->n_head < 1 || c->seq_len < 2 || c->n_layer > 100000)
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
