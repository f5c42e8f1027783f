/* llama.c: Llama forward and backward as FSDP stages (see llama.h). */
#include "model/llama/llama.h"

#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "model/transformer.h"

const char *const LlamaPresetNames[] = {"llama-tiny", "llama3.2-1b", "llama3-8b", NULL};

/* Preset shapes; multiple_of and ffn_dim_multiplier are Meta's params.json
 * values, from which ffn_hidden follows (8192, 14336). */
typedef struct {
  LlamaConfig c;
  int multiple_of;
  double ffn_dim_multiplier;
} LlamaPreset;

static const LlamaPreset kPresets[] = {
    /* llama-tiny: tests (GQA with 2 heads per kv head, untied head) */
    {{2, 32, 4, 2, 96, 64, 16, 0, 500000.0, 1e-5}, 32, 0.0},
    /* llama3.2-1b: tied head (rope_scaling of the release not modelled) */
    {{16, 2048, 32, 8, 8192, 128256, 2048, 1, 500000.0, 1e-5}, 256, 1.5},
    /* llama3-8b */
    {{32, 4096, 32, 8, 14336, 128256, 2048, 0, 500000.0, 1e-5}, 1024, 1.3},
};

enum {
  BLK_LN1, BLK_Q, BLK_K, BLK_V, BLK_O, BLK_LN2, BLK_GATE, BLK_UP, BLK_DOWN, BLK_NPARAMS
};
enum { ROOT_EMBED, ROOT_NORM, ROOT_HEAD, ROOT_MAXPARAMS };

static const char *const kBlockParamNames[BLK_NPARAMS] = {
    "input_layernorm.weight",          "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",         "self_attn.o_proj.weight",
    "post_attention_layernorm.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
    "mlp.down_proj.weight"};

typedef struct {
  float *ln1, *rstd1;   /* (B,T,C) (B,T) */
  float *qkv;           /* (B,T,3C) after RoPE, kv heads repeated */
  float *preatt, *att;  /* naive: (B,NH,T,T); flash: preatt is lse (B,NH,T), att NULL */
  float *atty;          /* (B,T,C) */
  float *res2;          /* (B,T,C) */
  float *ln2, *rstd2;   /* (B,T,C) (B,T) */
  float *gate, *up, *hmid; /* (B,T,H) */
  float *res3;          /* (B,T,C) */
} BlockActs;

struct LlamaModel_ {
  LlamaConfig cfg;
  int wrap, B, T, nunits, hd, kc; /* kc = n_kv_head * hd */
  const FsdpKernelOps *k;
  uint64_t seed;
  float loss_scale;
  FsdpParamSpec root_specs[ROOT_MAXPARAMS];
  FsdpParamSpec *unit_specs;
  FsdpDecoder dec; /* units and stages ([Note: the decoder's table] in transformer.h) */
  FsdpModelTable table;
  int *inputs, *targets;
  BlockActs *acts;
  int recompute;  /* [Note: Llama recomputation] */
  FsdpAttention attention; /* SetAttention; default (0) flash */
  float *encoded, *zero_pos, *dpos; /* (B,T,C) (T,C) (T,C): see EmbedForward */
  float *lnf, *rstdf, *logits, *probs, *losses, *losses_host;
  double loss;
  /* forward scratch */
  float *q, *kk, *v, *qr, *kr;
  /* backward scratch */
  float *dres, *dln, *datty, *dqkv, *dpreatt, *datt, *dqr, *dkr, *dv, *dq, *dk;
  float *dhmid, *dgate, *dup, *dlogits;
};

int LlamaFfnHidden(int n_embd, int multiple_of, double ffn_dim_multiplier)
{
  int64_t h = 2 * (4 * (int64_t)n_embd) / 3;
  if (ffn_dim_multiplier > 0) h = (int64_t)(ffn_dim_multiplier * (double)h);
  if (multiple_of < 1) multiple_of = 1;
  h = multiple_of * ((h + multiple_of - 1) / multiple_of);
  return h > INT_MAX ? INT_MAX : (int)h;
}

int LlamaConfigValidate(const LlamaConfig *c)
{
  FSDP_CALL(FsdpDecoderCheckDims(c->n_layer, c->n_embd, c->n_head));
  if (c->n_embd % c->n_head != 0 || (c->n_embd / c->n_head) % 2 != 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -n_embd %d is not divisible by -n_head %d into an even head size (RoPE "
               "rotates channel pairs)",
               c->n_embd, c->n_head);
  if (c->n_kv_head < 1 || c->n_head % c->n_kv_head != 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "option -n_kv_head %d does not divide -n_head %d (grouped-query attention shares "
               "each kv head among n_head/n_kv_head heads)",
               c->n_kv_head, c->n_head);
  if (c->ffn_hidden < 1)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -ffn_hidden: %d is not a positive integer", c->ffn_hidden);
  if (c->vocab_size < 2)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -vocab_size: %d is too small (expected >= 2)", c->vocab_size);
  if (c->seq_len < 2)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -seq_len: %d is too small (expected >= 2)", c->seq_len);
  if (c->tie_embeddings != 0 && c->tie_embeddings != 1)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -tie_embeddings: %d is not 0 or 1", c->tie_embeddings);
  if (!(c->rope_theta > 1.0) || !isfinite(c->rope_theta))
    FSDP_ERROR(FSDP_ERR_USAGE, "option -rope_theta: %g is not a finite number above 1", c->rope_theta);
  if (!(c->norm_eps > 0.0) || !isfinite(c->norm_eps))
    FSDP_ERROR(FSDP_ERR_USAGE, "option -norm_eps: %g is not a positive number", c->norm_eps);
  return FSDP_SUCCESS;
}

int LlamaConfigFromDb(FsdpOpts db, const char *preset, LlamaConfig *cfg)
{
  int idx = 0;
  while (preset && LlamaPresetNames[idx] && strcmp(LlamaPresetNames[idx], preset) != 0) idx++;
  if (!preset || !LlamaPresetNames[idx]) idx = 0; /* custom starts from llama-tiny */
  const LlamaPreset *p = &kPresets[idx];
  LlamaConfig c = p->c;
  const char *g = "Model";
  int64_t v;
  double d;
  FSDP_CALL(FsdpDecoderSizeOptions(db, &c.n_layer, &c.n_embd, &c.n_head));
  FSDP_CALL(FsdpOptsGetInt(db, g, "n_kv_head",
                           "Llama: key/value heads of grouped-query attention (must divide "
                           "n_head; n_head: multi-head, 1: multi-query)",
                           c.n_kv_head, 1, 1 << 16, &v));
  c.n_kv_head = (int)v;
  int64_t mo;
  FSDP_CALL(FsdpOptsGetInt(db, g, "multiple_of",
                           "Llama: the MLP hidden size is rounded up to a multiple of this",
                           p->multiple_of, 1, 1 << 20, &mo));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "ffn_dim_multiplier",
                              "Llama: factor on 2/3 of 4 n_embd for the MLP hidden size (0: none)",
                              p->ffn_dim_multiplier, 0.0, 1e6, &d));
  /* the hidden size follows n_embd, multiple_of and ffn_dim_multiplier
   * unless given (for the presets the formula gives their values) */
  FSDP_CALL(FsdpOptsGetInt(db, g, "ffn_hidden",
                           "Llama: MLP hidden size H (0: from n_embd, -multiple_of and "
                           "-ffn_dim_multiplier as Llama computes it)",
                           0, 0, INT_MAX, &v));
  c.ffn_hidden = v > 0 ? (int)v : LlamaFfnHidden(c.n_embd, (int)mo, d);
  FSDP_CALL(FsdpOptsGetInt(db, g, "vocab_size", "vocabulary size V", c.vocab_size, 2, 1 << 24, &v));
  c.vocab_size = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, g, "seq_len",
                           "sequence length T (tokens per sequence; RoPE has no position table)",
                           c.seq_len, 2, 1 << 20, &v));
  c.seq_len = (int)v;
  FSDP_CALL(FsdpOptsGetBool(db, g, "tie_embeddings",
                            "Llama: the LM head is the token embedding (no lm_head.weight)",
                            c.tie_embeddings, &c.tie_embeddings));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "rope_theta", "Llama: RoPE base", c.rope_theta, 1.0, 1e12,
                              &c.rope_theta));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "norm_eps", "Llama: RMSNorm epsilon", c.norm_eps, 1e-30, 1.0,
                              &c.norm_eps));
  FSDP_CALL(LlamaConfigValidate(&c));
  *cfg = c;
  return FSDP_SUCCESS;
}

int64_t LlamaConfigParamCount(const LlamaConfig *c)
{
  int64_t C = c->n_embd, V = c->vocab_size, L = c->n_layer, H = c->ffn_hidden;
  int64_t KC = (int64_t)c->n_kv_head * (C / c->n_head);
  int64_t block = 2 * C + 2 * C * C + 2 * KC * C + 3 * H * C;
  return V * C * (c->tie_embeddings ? 1 : 2) + C + L * block;
}

/* ---- description ---------------------------------------------------------- */

/* The attributes, in the order they are described and stored. */
static const FsdpConfigField kLlamaFields[] = {
    {"n_layer", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, n_layer)},
    {"n_embd", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, n_embd)},
    {"n_head", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, n_head)},
    {"n_kv_head", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, n_kv_head)},
    {"ffn_hidden", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, ffn_hidden)},
    {"vocab_size", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, vocab_size)},
    {"seq_len", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, seq_len)},
    {"tie_embeddings", FSDP_MODEL_ATTR_INT, offsetof(LlamaConfig, tie_embeddings)},
    {"rope_theta", FSDP_MODEL_ATTR_REAL, offsetof(LlamaConfig, rope_theta)},
    {"norm_eps", FSDP_MODEL_ATTR_REAL, offsetof(LlamaConfig, norm_eps)},
};
#define LLAMA_NATTRS ((int)(sizeof kLlamaFields / sizeof kLlamaFields[0]))

int LlamaConfigDescribe(const LlamaConfig *cfg, const char *preset, FsdpModelDesc *desc)
{
  return FsdpConfigDescribe(cfg, kLlamaFields, LLAMA_NATTRS, LLAMA_FAMILY, preset, desc);
}

int LlamaConfigFromDesc(const FsdpModelDesc *desc, const char *what, LlamaConfig *cfg)
{
  LlamaConfig c;
  FSDP_CALL(FsdpConfigFromDesc(desc, what, kLlamaFields, LLAMA_NATTRS, LLAMA_FAMILY, &c));
  *cfg = c;
  return FSDP_SUCCESS;
}

/* ---- initialization: [Note: counter-based init] (model.h) ---- */

static int IsNorm(const char *name) { return strstr(name, "norm.weight") != NULL; }

static int LlamaInit(void *model, const FsdpParamSpec *spec, int64_t start, int64_t count,
                     float *out)
{
  LlamaModel m = (LlamaModel)model;
  if (IsNorm(spec->name)) {
    for (int64_t i = 0; i < count; i++) out[i] = 1.0f;
    return FSDP_SUCCESS;
  }
  FsdpInitNormal(m->seed, spec->name, 0.02, start, count, out);
  return FSDP_SUCCESS;
}

int LlamaParamDecays(const char *name, int decay_embeddings)
{
  if (IsNorm(name)) return 0;
  if (strcmp(name, "model.embed_tokens.weight") == 0) return decay_embeddings;
  return 1;
}

/* ---- model ---------------------------------------------------------------- */

static int EmbedForward(void *model, int stage, const FsdpUnitTensors *t);
static int EmbedBackward(void *model, int stage, const FsdpUnitTensors *t);
static int UnitForward(void *model, int stage, const FsdpUnitTensors *t);
static int UnitBackward(void *model, int stage, const FsdpUnitTensors *t);
static int HeadForward(void *model, int stage, const FsdpUnitTensors *t);
static int HeadBackward(void *model, int stage, const FsdpUnitTensors *t);


int LlamaModelCreate(const LlamaConfig *cfg, int wrap, int B, int T, const FsdpKernelOps *ops,
                     uint64_t seed, LlamaModel *out)
{
  *out = NULL;
  FSDP_CALL(LlamaConfigValidate(cfg));
  FSDP_CALL(FsdpDecoderCheckSizes(wrap, B, T, cfg->seq_len));
  if (!ops->rmsnorm_forward || !ops->rope_forward || !ops->swiglu_forward || !ops->gqa_pack_forward)
    FSDP_ERROR(FSDP_ERR_USAGE, "the %s kernels do not implement the Llama kernels (RMSNorm, "
               "RoPE, SwiGLU, GQA): use -device cpu", ops->name);
  LlamaModel m = calloc(1, sizeof *m);
  FSDP_CHECK_ALLOC(m, sizeof *m);
  m->cfg = *cfg;
  m->wrap = wrap;
  m->B = B;
  m->T = T;
  m->k = ops;
  m->seed = seed;
  m->loss_scale = 1.0f;
  int C = cfg->n_embd, L = cfg->n_layer, H = cfg->ffn_hidden;
  m->hd = C / cfg->n_head;
  m->kc = cfg->n_kv_head * m->hd;
  m->nunits = 1 + (L + wrap - 1) / wrap;
  FsdpParamSpecSet(&m->root_specs[ROOT_EMBED], "model.embed_tokens.weight", 2, cfg->vocab_size, C);
  FsdpParamSpecSet(&m->root_specs[ROOT_NORM], "model.norm.weight", 1, C, 0);
  FsdpParamSpecSet(&m->root_specs[ROOT_HEAD], "lm_head.weight", 2, cfg->vocab_size, C);
  m->unit_specs = calloc((size_t)L * BLK_NPARAMS, sizeof *m->unit_specs);
  if (!m->unit_specs) {
    free(m);
    FSDP_CHECK_ALLOC(NULL, (size_t)L * BLK_NPARAMS * sizeof(FsdpParamSpec));
  }
  *out = m;
  const int64_t shapes[BLK_NPARAMS][2] = {{C, 0}, {C, C}, {m->kc, C}, {m->kc, C}, {C, C},
                                          {C, 0}, {H, C}, {H, C},     {C, H}};
  for (int l = 0; l < L; l++)
    for (int p = 0; p < BLK_NPARAMS; p++) {
      char name[FSDP_MAX_NAME];
      snprintf(name, sizeof name, "model.layers.%d.%s", l, kBlockParamNames[p]);
      FsdpParamSpecSet(&m->unit_specs[l * BLK_NPARAMS + p], name, shapes[p][1] ? 2 : 1, shapes[p][0],
              shapes[p][1]);
    }
  m->dec = (FsdpDecoder){.unit_prefix = "model.layers.",
                         .n_layer = L,
                         .wrap = wrap,
                         .nroot = cfg->tie_embeddings ? ROOT_HEAD : ROOT_MAXPARAMS,
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
  FSDP_CALL(LlamaConfigDescribe(cfg, "", &t->desc));
  t->init = LlamaInit;
  t->decays = LlamaParamDecays;
  t->kernels = ops;
  return FSDP_SUCCESS;
}

const FsdpModelTable *LlamaModelTable(LlamaModel m) { return &m->table; }

/* The buffers SetUp allocates, with their sizes in floats (one list for
 * allocation, freeing and fsdp-plan's count). */
typedef struct {
  float **p;
  size_t n;
} Buf;

static int ListBuffers(LlamaModel m, const LlamaConfig *c, int Bi, int Ti, FsdpAttention attn,
                       Buf *out)
{
  size_t B = (size_t)Bi, T = (size_t)Ti, C = (size_t)c->n_embd, NH = (size_t)c->n_head;
  size_t V = (size_t)c->vocab_size, H = (size_t)c->ffn_hidden, BT = B * T;
  size_t KC = (size_t)c->n_kv_head * (C / NH);
  /* naive: preatt and att (B,NH,T,T), and the same as backward scratch;
   * flash ([Note: flash attention], kernels/cpu/attention.c): preatt is
   * the lse (B,NH,T), dpreatt the row sums, att and datt empty (NULL) */
  size_t pre = attn == FSDP_ATTENTION_NAIVE ? B * NH * T * T : B * NH * T;
  size_t att = attn == FSDP_ATTENTION_NAIVE ? B * NH * T * T : 0;
  int n = 0;
#define BUF(ptr, count) (out[n++] = (Buf){m ? (ptr) : NULL, (count)})
  for (int l = 0; l < c->n_layer; l++) {
    BlockActs *a = m ? &m->acts[l] : NULL;
    BUF(&a->ln1, BT * C);
    BUF(&a->rstd1, BT);
    BUF(&a->qkv, 3 * BT * C);
    BUF(&a->preatt, pre);
    BUF(&a->att, att);
    BUF(&a->atty, BT * C);
    BUF(&a->res2, BT * C);
    BUF(&a->ln2, BT * C);
    BUF(&a->rstd2, BT);
    BUF(&a->gate, BT * H);
    BUF(&a->up, BT * H);
    BUF(&a->hmid, BT * H);
    BUF(&a->res3, BT * C);
  }
  BUF(&m->encoded, BT * C);
  BUF(&m->zero_pos, T * C);
  BUF(&m->dpos, T * C);
  BUF(&m->lnf, BT * C);
  BUF(&m->rstdf, BT);
  BUF(&m->logits, BT * V);
  BUF(&m->probs, BT * V);
  BUF(&m->losses, BT);
  BUF(&m->q, BT * C);
  BUF(&m->kk, BT * KC);
  BUF(&m->v, BT * KC);
  BUF(&m->qr, BT * C);
  BUF(&m->kr, BT * KC);
  BUF(&m->dres, BT * C);
  BUF(&m->dln, BT * C);
  BUF(&m->datty, BT * C);
  BUF(&m->dqkv, 3 * BT * C);
  BUF(&m->dpreatt, pre);
  BUF(&m->datt, att);
  BUF(&m->dqr, BT * C);
  BUF(&m->dkr, BT * KC);
  BUF(&m->dv, BT * KC);
  BUF(&m->dq, BT * C);
  BUF(&m->dk, BT * KC);
  BUF(&m->dhmid, BT * H);
  BUF(&m->dgate, BT * H);
  BUF(&m->dup, BT * H);
  BUF(&m->dlogits, BT * V);
#undef BUF
  return n;
}

#define NSHARED_BUFS 28
#define NLAYER_BUFS 13

/* [Note: Llama recomputation] As GPT's ([Note: GPT recomputation] in
 * gpt.c): with -recompute 1 block l keeps only its output res3 (the last
 * of its buffers in ListBuffers), and its other buffers are those of block
 * l % wrap -- the first unit's blocks are the working set, every later
 * block's pointers alias them -- so the block code is unchanged; a unit's
 * forward overwrites the working set and the runtime runs it again (the
 * stage's recompute callback, UnitForward) right before its backward. */
static int NumSlots(const LlamaConfig *c, int wrap) { return wrap < c->n_layer ? wrap : c->n_layer; }

uint64_t LlamaActivationBytes(const LlamaConfig *c, int wrap, int B, int T, int recompute,
                              FsdpAttention attention)
{
  /* per layer the same sizes: count one layer and the shared ones */
  LlamaConfig one = *c;
  one.n_layer = 1;
  Buf bufs[NLAYER_BUFS + NSHARED_BUFS];
  int n = ListBuffers(NULL, &one, B, T, attention, bufs);
  uint64_t layer = 0, shared = 0, res3 = bufs[NLAYER_BUFS - 1].n;
  for (int i = 0; i < n; i++) *(i < NLAYER_BUFS ? &layer : &shared) += bufs[i].n;
  uint64_t L = (uint64_t)c->n_layer;
  uint64_t blocks = recompute ? L * res3 + (uint64_t)NumSlots(c, wrap) * (layer - res3) : L * layer;
  return 4 * (blocks + shared + 2 * (uint64_t)B * T); /* + token ids */
}

static int ForEachBuffer(LlamaModel m, int alloc)
{
  int nb = m->cfg.n_layer * NLAYER_BUFS + NSHARED_BUFS;
  Buf *bufs = malloc((size_t)nb * sizeof *bufs);
  FSDP_CHECK_ALLOC(bufs, (size_t)nb * sizeof *bufs);
  int n = ListBuffers(m, &m->cfg, m->B, m->T, m->attention, bufs), err = FSDP_SUCCESS;
  int nlayer = m->cfg.n_layer * NLAYER_BUFS, slots = NumSlots(&m->cfg, m->wrap);
  for (int i = 0; i < n && !err; i++) {
    int l = i / NLAYER_BUFS, k = i % NLAYER_BUFS;
    if (m->recompute && i < nlayer && l >= slots && k != NLAYER_BUFS - 1) {
      /* [Note: Llama recomputation]: the working set's buffer, aliased */
      *bufs[i].p = alloc ? *bufs[(l % slots) * NLAYER_BUFS + k].p : NULL;
      continue;
    }
    err = alloc ? m->k->alloc(FSDP_MEM_ACTS, bufs[i].n * sizeof(float), bufs[i].p)
                : m->k->free(bufs[i].p);
  }
  free(bufs);
  return err;
}

int LlamaModelSetUp(LlamaModel m)
{
  if (m->acts) FSDP_ERROR(FSDP_ERR_STATE, "LlamaModelSetUp called twice");
  m->acts = calloc((size_t)m->cfg.n_layer, sizeof *m->acts);
  FSDP_CHECK_ALLOC(m->acts, sizeof *m->acts);
  FSDP_CALL(ForEachBuffer(m, 1));
  size_t BT = (size_t)m->B * m->T;
  FSDP_CALL(m->k->alloc(FSDP_MEM_DATA, BT * sizeof(int), &m->inputs));
  FSDP_CALL(m->k->alloc(FSDP_MEM_DATA, BT * sizeof(int), &m->targets));
  FSDP_CALL(FsdpMalloc(FSDP_MEM_OTHER, BT * sizeof(float), &m->losses_host));
  return FSDP_SUCCESS;
}

int LlamaModelDestroy(LlamaModel *pm)
{
  if (!pm || !*pm) return FSDP_SUCCESS;
  LlamaModel m = *pm;
  if (m->acts) {
    FSDP_CALL(ForEachBuffer(m, 0));
    free(m->acts);
    FSDP_CALL(m->k->free(&m->inputs));
    FSDP_CALL(m->k->free(&m->targets));
    FSDP_CALL(FsdpFree(&m->losses_host));
  }
  FsdpDecoderFree(&m->dec);
  free(m->unit_specs);
  free(m);
  *pm = NULL;
  return FSDP_SUCCESS;
}

int LlamaModelSetBatch(LlamaModel m, const int *inputs, const int *targets)
{
  return FsdpDecoderSetBatch(m->k, m->inputs, m->targets, inputs, targets, (size_t)m->B * m->T,
                             m->cfg.vocab_size);
}

double LlamaModelLoss(LlamaModel m) { return m->loss; }

int LlamaModelLogits(LlamaModel m, int b, int t, float *out)
{
  /* crossentropy writes probs, so the head's logits stay in their buffer */
  return FsdpDecoderLogits(m->k, m->logits, m->B, m->T, m->cfg.vocab_size, b, t, out);
}
void LlamaModelSetLossScale(LlamaModel m, float scale) { m->loss_scale = scale; }

/* ---- stages --------------------------------------------------------------- */

static float *LayerInput(LlamaModel m, int l) { return l == 0 ? m->encoded : m->acts[l - 1].res3; }

/* The token embedding is GPT's encoder with a zero position table
 * (zero_pos, never written): one kernel pair for both families; its
 * position gradient goes to the scratch dpos and is dropped. */
static int EmbedForward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  LlamaModel m = (LlamaModel)model;
  m->k->encoder_forward(m->encoded, m->inputs, t->param[ROOT_EMBED], m->zero_pos, m->B, m->T,
                        m->cfg.n_embd);
  return FSDP_SUCCESS;
}

static int EmbedBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  LlamaModel m = (LlamaModel)model;
  FSDP_CALL(m->k->zero(m->dpos, (size_t)m->T * m->cfg.n_embd * sizeof(float)));
  m->k->encoder_backward(t->grad[ROOT_EMBED], m->dpos, m->dres, m->inputs, m->B, m->T,
                         m->cfg.n_embd);
  return FSDP_SUCCESS;
}

static int HeadForward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  LlamaModel m = (LlamaModel)model;
  int BT = m->B * m->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
  const FsdpKernelOps *k = m->k;
  const float *W = t->param[m->cfg.tie_embeddings ? ROOT_EMBED : ROOT_HEAD];
  k->rmsnorm_forward(m->lnf, m->rstdf, LayerInput(m, m->cfg.n_layer), t->param[ROOT_NORM], BT, C,
                     (float)m->cfg.norm_eps);
  k->matmul_forward(m->logits, m->lnf, W, NULL, BT, C, V);
  k->crossentropy_forward(m->losses, m->probs, m->logits, m->targets, BT, V);
  return FsdpDecoderMeanLoss(k, m->losses, m->losses_host, BT, &m->loss);
}

static int HeadBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  LlamaModel m = (LlamaModel)model;
  int BT = m->B * m->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
  const FsdpKernelOps *k = m->k;
  int w = m->cfg.tie_embeddings ? ROOT_EMBED : ROOT_HEAD;
  FSDP_CALL(k->zero(m->dlogits, (size_t)BT * (size_t)V * sizeof(float)));
  FSDP_CALL(k->zero(m->dln, (size_t)BT * C * sizeof(float)));
  FSDP_CALL(k->zero(m->dres, (size_t)BT * C * sizeof(float)));
  k->crossentropy_softmax_backward(m->dlogits, m->probs, m->targets, m->loss_scale / (float)BT, BT,
                                   V);
  k->matmul_backward(m->dln, t->grad[w], NULL, m->dlogits, m->lnf, t->param[w], BT, C, V);
  k->rmsnorm_backward(m->dres, t->grad[ROOT_NORM], m->dln, LayerInput(m, m->cfg.n_layer),
                      t->param[ROOT_NORM], m->rstdf, BT, C);
  return FSDP_SUCCESS;
}

static void BlockForward(LlamaModel m, int l, float *const *p)
{
  const LlamaConfig *c = &m->cfg;
  int B = m->B, T = m->T, C = c->n_embd, NH = c->n_head, KVH = c->n_kv_head, HD = m->hd;
  int BT = B * T, H = c->ffn_hidden, KC = m->kc;
  float eps = (float)c->norm_eps, theta = (float)c->rope_theta;
  const FsdpKernelOps *k = m->k;
  BlockActs *a = &m->acts[l];
  const float *x = LayerInput(m, l);
  size_t nC = (size_t)BT * C;
  k->rmsnorm_forward(a->ln1, a->rstd1, x, p[BLK_LN1], BT, C, eps);
  k->matmul_forward(m->q, a->ln1, p[BLK_Q], NULL, BT, C, C);
  k->matmul_forward(m->kk, a->ln1, p[BLK_K], NULL, BT, C, KC);
  k->matmul_forward(m->v, a->ln1, p[BLK_V], NULL, BT, C, KC);
  k->rope_forward(m->qr, m->q, B, T, NH, HD, theta);
  k->rope_forward(m->kr, m->kk, B, T, KVH, HD, theta);
  k->gqa_pack_forward(a->qkv, m->qr, m->kr, m->v, B, T, NH, KVH, HD);
  if (m->attention == FSDP_ATTENTION_NAIVE)
    k->attention_forward(a->atty, a->preatt, a->att, a->qkv, B, T, C, NH);
  else
    k->flash_attention_forward(a->atty, a->preatt, a->qkv, B, T, C, NH);
  k->matmul_forward(a->res2, a->atty, p[BLK_O], NULL, BT, C, C);
  k->residual_forward(a->res2, a->res2, x, nC);
  k->rmsnorm_forward(a->ln2, a->rstd2, a->res2, p[BLK_LN2], BT, C, eps);
  k->matmul_forward(a->gate, a->ln2, p[BLK_GATE], NULL, BT, C, H);
  k->matmul_forward(a->up, a->ln2, p[BLK_UP], NULL, BT, C, H);
  k->swiglu_forward(a->hmid, a->gate, a->up, (size_t)BT * H);
  k->matmul_forward(a->res3, a->hmid, p[BLK_DOWN], NULL, BT, H, C);
  k->residual_forward(a->res3, a->res3, a->res2, nC);
}

/* [Note: in-place residual gradient] in gpt.c: m->dres holds d(block
 * output) on entry and d(block input) on exit. */
static int BlockBackward(LlamaModel m, int l, float *const *p, float *const *g)
{
  const LlamaConfig *c = &m->cfg;
  int B = m->B, T = m->T, C = c->n_embd, NH = c->n_head, KVH = c->n_kv_head, HD = m->hd;
  int BT = B * T, H = c->ffn_hidden, KC = m->kc;
  float theta = (float)c->rope_theta;
  const FsdpKernelOps *k = m->k;
  BlockActs *a = &m->acts[l];
  const float *x = LayerInput(m, l);
  size_t nC = (size_t)BT * C, nH = (size_t)BT * H, nK = (size_t)BT * KC;
  /* MLP branch */
  FSDP_CALL(k->zero(m->dhmid, nH * sizeof(float)));
  FSDP_CALL(k->zero(m->dgate, nH * sizeof(float)));
  FSDP_CALL(k->zero(m->dup, nH * sizeof(float)));
  FSDP_CALL(k->zero(m->dln, nC * sizeof(float)));
  k->matmul_backward(m->dhmid, g[BLK_DOWN], NULL, m->dres, a->hmid, p[BLK_DOWN], BT, H, C);
  k->swiglu_backward(m->dgate, m->dup, m->dhmid, a->gate, a->up, nH);
  k->matmul_backward(m->dln, g[BLK_GATE], NULL, m->dgate, a->ln2, p[BLK_GATE], BT, C, H);
  k->matmul_backward(m->dln, g[BLK_UP], NULL, m->dup, a->ln2, p[BLK_UP], BT, C, H);
  k->rmsnorm_backward(m->dres, g[BLK_LN2], m->dln, a->res2, p[BLK_LN2], a->rstd2, BT, C);
  /* attention branch: dres holds d(res2) */
  FSDP_CALL(k->zero(m->datty, nC * sizeof(float)));
  FSDP_CALL(k->zero(m->dqkv, 3 * nC * sizeof(float)));
  FSDP_CALL(k->zero(m->dqr, nC * sizeof(float)));
  FSDP_CALL(k->zero(m->dkr, nK * sizeof(float)));
  FSDP_CALL(k->zero(m->dv, nK * sizeof(float)));
  FSDP_CALL(k->zero(m->dq, nC * sizeof(float)));
  FSDP_CALL(k->zero(m->dk, nK * sizeof(float)));
  FSDP_CALL(k->zero(m->dln, nC * sizeof(float)));
  k->matmul_backward(m->datty, g[BLK_O], NULL, m->dres, a->atty, p[BLK_O], BT, C, C);
  if (m->attention == FSDP_ATTENTION_NAIVE)
    k->attention_backward(m->dqkv, m->dpreatt, m->datt, m->datty, a->qkv, a->att, B, T, C, NH);
  else
    k->flash_attention_backward(m->dqkv, m->dpreatt, m->datty, a->qkv, a->atty, a->preatt, B, T,
                                C, NH);
  k->gqa_pack_backward(m->dqr, m->dkr, m->dv, m->dqkv, B, T, NH, KVH, HD);
  k->rope_backward(m->dq, m->dqr, B, T, NH, HD, theta);
  k->rope_backward(m->dk, m->dkr, B, T, KVH, HD, theta);
  k->matmul_backward(m->dln, g[BLK_Q], NULL, m->dq, a->ln1, p[BLK_Q], BT, C, C);
  k->matmul_backward(m->dln, g[BLK_K], NULL, m->dk, a->ln1, p[BLK_K], BT, C, KC);
  k->matmul_backward(m->dln, g[BLK_V], NULL, m->dv, a->ln1, p[BLK_V], BT, C, KC);
  k->rmsnorm_backward(m->dres, g[BLK_LN1], m->dln, x, p[BLK_LN1], a->rstd1, BT, C);
  return FSDP_SUCCESS;
}

static int UnitForward(void *model, int stage, const FsdpUnitTensors *t)
{
  LlamaModel m = (LlamaModel)model;
  int first, last;
  FsdpDecoderStageLayers(&m->dec, stage, &first, &last);
  for (int l = first; l <= last; l++) BlockForward(m, l, t->param + (l - first) * BLK_NPARAMS);
  return FSDP_SUCCESS;
}

/* The stage's recompute callback ([Note: Llama recomputation]): its
 * forward again, from the unit's input that every layer keeps. */
static int UnitRecompute(void *model, int stage, const FsdpUnitTensors *t)
{
  return UnitForward(model, stage, t);
}

static int UnitBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  LlamaModel m = (LlamaModel)model;
  int first, last;
  FsdpDecoderStageLayers(&m->dec, stage, &first, &last);
  for (int l = last; l >= first; l--)
    FSDP_CALL(BlockBackward(m, l, t->param + (l - first) * BLK_NPARAMS,
                            t->grad + (l - first) * BLK_NPARAMS));
  return FSDP_SUCCESS;
}

/* ---- set-up options ---------------------------------------------------------- */

uint64_t LlamaModelActivationBytes(LlamaModel m)
{
  return m->acts ? LlamaActivationBytes(&m->cfg, m->wrap, m->B, m->T, m->recompute, m->attention)
                 : 0;
}

int LlamaModelSetRecompute(LlamaModel m, int recompute)
{
  if (m->acts) FSDP_ERROR(FSDP_ERR_STATE, "Llama recompute set after LlamaModelSetUp");
  m->recompute = recompute != 0;
  for (int s = 1; s < m->nunits; s++) m->dec.stages[s].recompute = m->recompute ? UnitRecompute : NULL;
  return FSDP_SUCCESS;
}

int LlamaModelSetAttention(LlamaModel m, FsdpAttention attention)
{
  if (m->acts) FSDP_ERROR(FSDP_ERR_STATE, "LlamaModelSetAttention after LlamaModelSetUp");
  FSDP_CALL(FsdpModelCheckAttention(m->k, attention));
  m->attention = attention;
  return FSDP_SUCCESS;
}
