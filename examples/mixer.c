/* mixer.c: a causal MLP-mixer language model as an fsdp model family (see
 * mixer.h), using only libfsdp's public model API.
 *
 * The model, for B sequences of T tokens, C channels, vocabulary V:
 *
 *   x = wte[token] + wpe[position]                  root unit, embed stage
 *   per block l (unit "mix.l", or "mix.l-m" with -wrap > 1):
 *     x = x + TokenMix(LN1(x))                      mixes positions s <= t
 *     x = x + proj(gelu(fc(LN2(x))))                mixes channels (C -> 4C -> C)
 *   logits = LNf(x) @ wte^T, loss = mean cross-entropy   root unit, head stage
 *
 * TokenMix is the mixer's replacement for attention: one learned (T, T)
 * matrix shared by all channels, out[t] = sum_{s <= t} W[t, s] in[s].
 * Only its lower triangle is used (a token sees no later one), so the
 * upper triangle starts at 0 and gets no gradient: it stays 0.  It has no
 * bias: a shift of a whole row is what every LayerNorm after it removes,
 * so its gradient would be 0.
 *
 * What the library sees of it is the table (model/model.h): the parameter
 * specs of each unit, the init rule, the decay rule, and the stages whose
 * callbacks get the unit's unsharded parameters and gradients.  The
 * runtime gathers a unit's shards before its stage, and reduce-scatters the
 * gradients the backward callback accumulated; the model only computes.
 *
 * The channel parts run through the kernel table (layernorm, matmul, gelu,
 * cross-entropy); TokenMix is plain C loops over host memory, so the
 * family refuses a kernel table other than the CPU's (-device cuda).
 */
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The description's attributes, in the order they are stored. */
typedef struct {
  int n_layer, n_embd, vocab_size, seq_len;
} MixerConfig;

static const char *const kPresetNames[] = {"mixer-tiny", "mixer-small", NULL};
static const MixerConfig kPresets[] = {
    {2, 32, 64, 16},  /* mixer-tiny: the test's */
    {4, 64, 256, 64}, /* mixer-small */
};

enum { ROOT_WTE, ROOT_WPE, ROOT_LNFW, ROOT_LNFB, ROOT_NPARAMS };
enum {
  BLK_LN1W, BLK_LN1B, BLK_MIXW, BLK_LN2W, BLK_LN2B,
  BLK_FCW, BLK_FCB, BLK_PROJW, BLK_PROJB, BLK_NPARAMS
};
static const char *const kBlockParamNames[BLK_NPARAMS] = {
    "ln_1.weight", "ln_1.bias", "token_mix.weight", "ln_2.weight", "ln_2.bias",
    "fc.weight",   "fc.bias",   "proj.weight",      "proj.bias"};

/* What a block's forward keeps for its backward. */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd; /* (B,T,C), (B,T), (B,T) */
  float *res1;                      /* x + TokenMix(LN1(x)) (B,T,C) */
  float *ln2, *ln2_mean, *ln2_rstd; /* (B,T,C), (B,T), (B,T) */
  float *fc, *fc_gelu;              /* (B,T,4C) */
  float *out;                       /* the block's output (B,T,C) */
} BlockActs;

typedef struct {
  MixerConfig cfg;
  int wrap, B, T;
  uint64_t seed;
  const FsdpKernelOps *k;
  float loss_scale;
  double loss;
  /* the table and what it points at */
  FsdpParamSpec root_specs[ROOT_NPARAMS];
  FsdpParamSpec *block_specs; /* [n_layer * BLK_NPARAMS] */
  int nunits;
  FsdpModelUnit *units;   /* [nunits]: root, then one per -wrap blocks */
  FsdpModelStage *stages; /* [nunits + 1]: embed, the blocks' units, head */
  FsdpModelTable table;
  /* activations (set_up) */
  BlockActs *acts; /* [n_layer] */
  float *encoded;                  /* (B,T,C) */
  float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T), (B,T) */
  float *logits, *probs, *losses;  /* (B,T,V), (B,T,V), (B,T) */
  float *dres, *dln;               /* (B,T,C): the residual stream's gradient, scratch */
  float *dfc, *dfc_gelu;           /* (B,T,4C) */
  float *dlogits;                  /* (B,T,V) */
  int *inputs, *targets;           /* (B,T) */
  uint64_t act_bytes;
} Mixer;

/* ---- description ------------------------------------------------------------ */

static int Describe(const MixerConfig *c, FsdpModelDesc *desc)
{
  FsdpModelDescInit(desc, MIXER_FAMILY, "");
  FSDP_CALL(FsdpModelDescAddInt(desc, "n_layer", c->n_layer));
  FSDP_CALL(FsdpModelDescAddInt(desc, "n_embd", c->n_embd));
  FSDP_CALL(FsdpModelDescAddInt(desc, "vocab_size", c->vocab_size));
  FSDP_CALL(FsdpModelDescAddInt(desc, "seq_len", c->seq_len));
  return FSDP_SUCCESS;
}

/* Attribute `name` of a description into *out, at least min. */
static int ReadAttr(const FsdpModelDesc *desc, const char *what, const char *name, int min,
                    int *out)
{
  const FsdpModelAttr *a = FsdpModelDescFind(desc, name);
  if (!a || a->type != FSDP_MODEL_ATTR_INT)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s lacks the integer model attribute %s", what, name);
  if (a->i < min || a->i > (1 << 24))
    FSDP_ERROR(FSDP_ERR_USAGE, "%s has %s %lld: outside [%d, %d]", what, name, (long long)a->i,
               min, 1 << 24);
  *out = (int)a->i;
  return FSDP_SUCCESS;
}

/* A description from options, a checkpoint or a run file, checked; the
 * messages name `what` (the file). */
static int FromDesc(const FsdpModelDesc *desc, const char *what, MixerConfig *c)
{
  if (strcmp(desc->family, MIXER_FAMILY) != 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s holds a %s model, not a %s one", what, desc->family,
               MIXER_FAMILY);
  FSDP_CALL(ReadAttr(desc, what, "n_layer", 1, &c->n_layer));
  FSDP_CALL(ReadAttr(desc, what, "n_embd", 1, &c->n_embd));
  FSDP_CALL(ReadAttr(desc, what, "vocab_size", 2, &c->vocab_size));
  FSDP_CALL(ReadAttr(desc, what, "seq_len", 2, &c->seq_len));
  return FSDP_SUCCESS;
}

/* The size options over a preset's values (NULL: custom, from mixer-tiny).
 * GPT and Llama read the same names with their own defaults. */
static int OptionsFromDb(FsdpOpts db, const char *preset, FsdpModelDesc *desc)
{
  int idx = 0;
  while (preset && kPresetNames[idx] && strcmp(kPresetNames[idx], preset) != 0) idx++;
  MixerConfig c = kPresets[preset && kPresetNames[idx] ? idx : 0];
  const char *g = "Model";
  int64_t v;
  FSDP_CALL(FsdpOptsGetInt(db, g, "n_layer", "blocks", c.n_layer, 1, 100000, &v));
  c.n_layer = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, g, "n_embd", "channels C", c.n_embd, 1, 1 << 16, &v));
  c.n_embd = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, g, "vocab_size", "vocabulary size V", c.vocab_size, 2, 1 << 20, &v));
  c.vocab_size = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, g, "seq_len", "sequence length T", c.seq_len, 2, 1 << 14, &v));
  c.seq_len = (int)v;
  return Describe(&c, desc);
}

static int Check(const FsdpModelDesc *desc, const char *what)
{
  MixerConfig c;
  return FromDesc(desc, what, &c);
}

static int64_t ParamCountOf(const MixerConfig *c)
{
  int64_t C = c->n_embd, V = c->vocab_size, T = c->seq_len, L = c->n_layer;
  int64_t block = 2 * C + T * T + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
  return V * C + T * C + 2 * C + L * block;
}

static int64_t ParamCount(const FsdpModelDesc *desc)
{
  MixerConfig c;
  return FromDesc(desc, "description", &c) ? 0 : ParamCountOf(&c);
}

/* Floats set_up allocates (Alloc below counts the same ones). */
static uint64_t ActivationFloats(const MixerConfig *c, int B, int T)
{
  uint64_t BT = (uint64_t)B * T, C = (uint64_t)c->n_embd, V = (uint64_t)c->vocab_size;
  uint64_t block = 12 * BT * C + 4 * BT;
  return (uint64_t)c->n_layer * block + 12 * BT * C + 3 * BT + 3 * BT * V;
}

static uint64_t ActivationBytes(const FsdpModelDesc *desc, int wrap, int B, int T, int recompute,
                                FsdpAttention attention)
{
  (void)wrap, (void)recompute, (void)attention; /* all kept; no attention */
  MixerConfig c;
  return FromDesc(desc, "description", &c) ? 0 : ActivationFloats(&c, B, T) * sizeof(float);
}

/* fc, proj and the head: (in, out) with B*T rows. */
static int MatmulShapes(const FsdpModelDesc *desc, int64_t shape[][2], int max)
{
  MixerConfig c;
  if (FromDesc(desc, "description", &c) || max < 3) return 0;
  int64_t C = c.n_embd, V = c.vocab_size;
  const int64_t s[3][2] = {{C, 4 * C}, {4 * C, C}, {C, V}};
  memcpy(shape, s, sizeof s);
  return 3;
}

/* ---- init and decay rules --------------------------------------------------- */

static int EndsWith(const char *s, const char *suffix)
{
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* [Note: counter-based init] (model/model.h): every value is a function of
 * (seed, name, index) alone, so each rank fills its own shard.  TokenMix
 * starts as a causal running mean: W[t, s] = 1/(t+1) for s <= t, else 0. */
static int Init(void *model, const FsdpParamSpec *spec, int64_t start, int64_t count, float *out)
{
  Mixer *m = model;
  const char *name = spec->name;
  if (EndsWith(name, "token_mix.weight")) {
    int64_t T = spec->shape[1];
    for (int64_t i = 0; i < count; i++) {
      int64_t t = (start + i) / T, s = (start + i) % T;
      out[i] = s <= t ? 1.0f / (float)(t + 1) : 0.0f;
    }
  } else if (EndsWith(name, ".bias")) {
    for (int64_t i = 0; i < count; i++) out[i] = 0.0f;
  } else if (strstr(name, "ln_")) {
    for (int64_t i = 0; i < count; i++) out[i] = 1.0f;
  } else {
    double std = EndsWith(name, "proj.weight") ? 0.02 / sqrt(2.0 * m->cfg.n_layer) : 0.02;
    FsdpInitNormal(m->seed, name, std, start, count, out);
  }
  return FSDP_SUCCESS;
}

static int Decays(const char *name, int decay_embeddings)
{
  if (EndsWith(name, ".bias") || strstr(name, "ln_")) return 0;
  if (strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0) return decay_embeddings;
  return 1;
}

/* ---- TokenMix: plain C over host memory ------------------------------------- */

/* out (B,T,C) = sum_{s <= t} w[t, s] inp[b, s, :]; w has row stride ldw
 * (seq_len: a run may use fewer positions). */
static void TokenMixForward(float *out, const float *inp, const float *w, int B, int T, int C,
                            int ldw)
{
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; c++) o[c] = 0.0f;
      for (int s = 0; s <= t; s++) {
        const float wts = w[(size_t)t * ldw + s], *x = inp + ((size_t)b * T + s) * C;
        for (int c = 0; c < C; c++) o[c] += wts * x[c];
      }
    }
}

/* [Note: backward accumulates] (kernels.h): dinp, dw += .  Only the lower
 * triangle of dw is touched (the upper one is not used). */
static void TokenMixBackward(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, int B, int T, int C, int ldw)
{
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      for (int s = 0; s <= t; s++) {
        const float wts = w[(size_t)t * ldw + s], *x = inp + ((size_t)b * T + s) * C;
        float *dx = dinp + ((size_t)b * T + s) * C, dwts = 0.0f;
        for (int c = 0; c < C; c++) {
          dx[c] += wts * d[c];
          dwts += d[c] * x[c];
        }
        dw[(size_t)t * ldw + s] += dwts;
      }
    }
}

/* ---- stages ----------------------------------------------------------------- */

/* The residual stream entering block l. */
static float *BlockInput(Mixer *m, int l) { return l == 0 ? m->encoded : m->acts[l - 1].out; }

static int EmbedForward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  Mixer *m = model;
  m->k->encoder_forward(m->encoded, m->inputs, t->param[ROOT_WTE], t->param[ROOT_WPE], m->B, m->T,
                        m->cfg.n_embd);
  return FSDP_SUCCESS;
}

/* m->dres holds d(encoded): the blocks' backward left it there. */
static int EmbedBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  Mixer *m = model;
  m->k->encoder_backward(t->grad[ROOT_WTE], t->grad[ROOT_WPE], m->dres, m->inputs, m->B, m->T,
                         m->cfg.n_embd);
  return FSDP_SUCCESS;
}

/* LNf, the head tied to wte, the loss: the root unit's second stage (the
 * root stays gathered from the embed stage to here, so wte is one tensor
 * for both). */
static int HeadForward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  Mixer *m = model;
  const FsdpKernelOps *k = m->k;
  int N = m->B * m->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
  k->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, BlockInput(m, m->cfg.n_layer),
                       t->param[ROOT_LNFW], t->param[ROOT_LNFB], N, C);
  k->matmul_forward(m->logits, m->lnf, t->param[ROOT_WTE], NULL, N, C, V);
  k->crossentropy_forward(m->losses, m->probs, m->logits, m->targets, N, V);
  double sum = 0.0;
  for (int i = 0; i < N; i++) sum += m->losses[i];
  m->loss = sum / N;
  return FSDP_SUCCESS;
}

/* The first backward stage: d(loss) down to d(x) of the last block's
 * output, into m->dres.  The driver's loss scale (fp16 scaler, gradient
 * accumulation) multiplies d(mean loss). */
static int HeadBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)stage;
  Mixer *m = model;
  const FsdpKernelOps *k = m->k;
  int N = m->B * m->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
  size_t NC = (size_t)N * C;
  FSDP_CALL(k->zero(m->dlogits, (size_t)N * V * sizeof(float)));
  FSDP_CALL(k->zero(m->dln, NC * sizeof(float)));
  FSDP_CALL(k->zero(m->dres, NC * sizeof(float)));
  k->crossentropy_softmax_backward(m->dlogits, m->probs, m->targets, m->loss_scale / (float)N, N,
                                   V);
  k->matmul_backward(m->dln, t->grad[ROOT_WTE], NULL, m->dlogits, m->lnf, t->param[ROOT_WTE], N, C,
                     V);
  k->layernorm_backward(m->dres, t->grad[ROOT_LNFW], t->grad[ROOT_LNFB], m->dln,
                        BlockInput(m, m->cfg.n_layer), t->param[ROOT_LNFW], m->lnf_mean,
                        m->lnf_rstd, N, C);
  return FSDP_SUCCESS;
}

static void BlockForward(Mixer *m, int l, float *const *p)
{
  const FsdpKernelOps *k = m->k;
  int B = m->B, T = m->T, C = m->cfg.n_embd, N = B * T;
  size_t NC = (size_t)N * C;
  BlockActs *a = &m->acts[l];
  const float *x = BlockInput(m, l);
  k->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p[BLK_LN1W], p[BLK_LN1B], N, C);
  TokenMixForward(a->res1, a->ln1, p[BLK_MIXW], B, T, C, m->cfg.seq_len);
  k->residual_forward(a->res1, a->res1, x, NC);
  k->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, p[BLK_LN2W], p[BLK_LN2B], N, C);
  k->matmul_forward(a->fc, a->ln2, p[BLK_FCW], p[BLK_FCB], N, C, 4 * C);
  k->gelu_forward(a->fc_gelu, a->fc, 4 * NC);
  k->matmul_forward(a->out, a->fc_gelu, p[BLK_PROJW], p[BLK_PROJB], N, 4 * C, C);
  k->residual_forward(a->out, a->out, a->res1, NC);
}

/* m->dres holds d(block output) on entry and d(block input) on exit: each
 * residual branch adds its part to it (the kernels accumulate). */
static int BlockBackward(Mixer *m, int l, float *const *p, float *const *g)
{
  const FsdpKernelOps *k = m->k;
  int B = m->B, T = m->T, C = m->cfg.n_embd, N = B * T;
  size_t NC = (size_t)N * C;
  BlockActs *a = &m->acts[l];
  const float *x = BlockInput(m, l);
  /* channel MLP: dres is d(out) = d(res1) through the residual */
  FSDP_CALL(k->zero(m->dfc_gelu, 4 * NC * sizeof(float)));
  FSDP_CALL(k->zero(m->dfc, 4 * NC * sizeof(float)));
  FSDP_CALL(k->zero(m->dln, NC * sizeof(float)));
  k->matmul_backward(m->dfc_gelu, g[BLK_PROJW], g[BLK_PROJB], m->dres, a->fc_gelu, p[BLK_PROJW], N,
                     4 * C, C);
  k->gelu_backward(m->dfc, a->fc, m->dfc_gelu, 4 * NC);
  k->matmul_backward(m->dln, g[BLK_FCW], g[BLK_FCB], m->dfc, a->ln2, p[BLK_FCW], N, C, 4 * C);
  k->layernorm_backward(m->dres, g[BLK_LN2W], g[BLK_LN2B], m->dln, a->res1, p[BLK_LN2W],
                        a->ln2_mean, a->ln2_rstd, N, C);
  /* token mixing: dres is now d(res1) = d(x) through the residual */
  FSDP_CALL(k->zero(m->dln, NC * sizeof(float)));
  TokenMixBackward(m->dln, g[BLK_MIXW], m->dres, a->ln1, p[BLK_MIXW], B, T, C, m->cfg.seq_len);
  k->layernorm_backward(m->dres, g[BLK_LN1W], g[BLK_LN1B], m->dln, x, p[BLK_LN1W], a->ln1_mean,
                        a->ln1_rstd, N, C);
  return FSDP_SUCCESS;
}

/* A block unit's stage: its -wrap blocks, whose parameters come in spec
 * order, BLK_NPARAMS per block. */
static int FirstBlock(Mixer *m, int stage) { return (stage - 1) * m->wrap; }

static int UnitForward(void *model, int stage, const FsdpUnitTensors *t)
{
  Mixer *m = model;
  int first = FirstBlock(m, stage);
  for (int j = 0; j < m->wrap && first + j < m->cfg.n_layer; j++)
    BlockForward(m, first + j, t->param + j * BLK_NPARAMS);
  return FSDP_SUCCESS;
}

static int UnitBackward(void *model, int stage, const FsdpUnitTensors *t)
{
  Mixer *m = model;
  int first = FirstBlock(m, stage), last = first + m->wrap - 1;
  if (last >= m->cfg.n_layer) last = m->cfg.n_layer - 1;
  for (int l = last; l >= first; l--)
    FSDP_CALL(BlockBackward(m, l, t->param + (l - first) * BLK_NPARAMS,
                            t->grad + (l - first) * BLK_NPARAMS));
  return FSDP_SUCCESS;
}

/* ---- the model -------------------------------------------------------------- */

/* Units [root, one per -wrap blocks] and stages [embed (root), one per
 * block unit, head (root)]: the shape the driver's stage count assumes
 * (FsdpModelDescNumStages). */
static int BuildTable(Mixer *m)
{
  int L = m->cfg.n_layer;
  m->units = calloc((size_t)m->nunits, sizeof *m->units);
  m->stages = calloc((size_t)m->nunits + 1, sizeof *m->stages);
  FSDP_CHECK_ALLOC(m->units, (size_t)m->nunits * sizeof *m->units);
  FSDP_CHECK_ALLOC(m->stages, ((size_t)m->nunits + 1) * sizeof *m->stages);
  FsdpModelUnit *root = &m->units[0];
  snprintf(root->name, sizeof root->name, "root");
  root->is_root = 1;
  root->nparams = ROOT_NPARAMS;
  root->params = m->root_specs;
  /* no recompute callback: the stages keep what their backward needs */
  m->stages[0] = (FsdpModelStage){0, EmbedForward, EmbedBackward, NULL};
  for (int u = 1, l = 0; l < L; u++, l += m->wrap) {
    int n = l + m->wrap > L ? L - l : m->wrap;
    FsdpModelUnit *x = &m->units[u];
    if (n == 1) snprintf(x->name, sizeof x->name, "mix.%d", l);
    else snprintf(x->name, sizeof x->name, "mix.%d-%d", l, l + n - 1);
    x->nparams = n * BLK_NPARAMS;
    x->params = m->block_specs + (size_t)l * BLK_NPARAMS;
    m->stages[u] = (FsdpModelStage){u, UnitForward, UnitBackward, NULL};
  }
  m->stages[m->nunits] = (FsdpModelStage){0, HeadForward, HeadBackward, NULL};
  FsdpModelTable *t = &m->table;
  FSDP_CALL(Describe(&m->cfg, &t->desc));
  t->ctx = m;
  t->nunits = m->nunits;
  t->units = m->units;
  t->nstages = m->nunits + 1;
  t->stages = m->stages;
  t->init = Init;
  t->decays = Decays;
  t->kernels = m->k;
  return FSDP_SUCCESS;
}

static int Destroy(void **model);

static int Create(const FsdpModelDesc *desc, int wrap, int B, int T, const FsdpKernelOps *ops,
                  uint64_t seed, void **model)
{
  *model = NULL;
  MixerConfig c;
  FSDP_CALL(FromDesc(desc, "the model description", &c));
  if (strcmp(ops->name, "cpu") != 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "the %s model mixes tokens in plain C over host memory: it runs "
               "on -device cpu, not on the %s kernels", MIXER_FAMILY, ops->name);
  if (wrap < 1 || wrap > c.n_layer)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -wrap %d: the model has %d blocks", wrap, c.n_layer);
  if (B < 1 || T < 1 || T > c.seq_len || (int64_t)B * T > (1 << 30))
    FSDP_ERROR(FSDP_ERR_USAGE, "batch of %d sequences of %d tokens: need T in [1, seq_len = %d] "
               "and B*T at most 2^30", B, T, c.seq_len);
  Mixer *m = calloc(1, sizeof *m);
  FSDP_CHECK_ALLOC(m, sizeof *m);
  *model = m;
  m->cfg = c;
  m->wrap = wrap;
  m->B = B;
  m->T = T;
  m->seed = seed;
  m->k = ops;
  m->loss_scale = 1.0f;
  m->nunits = 1 + (c.n_layer + wrap - 1) / wrap;
  int C = c.n_embd;
  FsdpParamSpecSet(&m->root_specs[ROOT_WTE], "wte", 2, c.vocab_size, C);
  FsdpParamSpecSet(&m->root_specs[ROOT_WPE], "wpe", 2, c.seq_len, C);
  FsdpParamSpecSet(&m->root_specs[ROOT_LNFW], "ln_f.weight", 1, C, 0);
  FsdpParamSpecSet(&m->root_specs[ROOT_LNFB], "ln_f.bias", 1, C, 0);
  m->block_specs = calloc((size_t)c.n_layer * BLK_NPARAMS, sizeof *m->block_specs);
  if (!m->block_specs) {
    Destroy(model);
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory for %d blocks' parameter specs", c.n_layer);
  }
  const int64_t shapes[BLK_NPARAMS][2] = {{C, 0},     {C, 0}, {c.seq_len, c.seq_len},
                                          {C, 0},     {C, 0}, {4 * C, C},
                                          {4 * C, 0}, {C, 4 * C}, {C, 0}};
  for (int l = 0; l < c.n_layer; l++)
    for (int p = 0; p < BLK_NPARAMS; p++) {
      char name[FSDP_MAX_NAME];
      snprintf(name, sizeof name, "mix.%d.%s", l, kBlockParamNames[p]);
      FsdpParamSpecSet(&m->block_specs[l * BLK_NPARAMS + p], name, shapes[p][1] ? 2 : 1,
                       shapes[p][0], shapes[p][1]);
    }
  int err = BuildTable(m);
  if (err) Destroy(model);
  return err;
}

/* A zeroed activation buffer of n floats, counted in act_bytes. */
static int Alloc(Mixer *m, float **p, size_t n)
{
  FSDP_CALL(m->k->alloc(FSDP_MEM_ACTS, n * sizeof(float), p));
  m->act_bytes += n * sizeof(float);
  return FSDP_SUCCESS;
}

static int SetUp(void *model)
{
  Mixer *m = model;
  size_t BT = (size_t)m->B * m->T, C = (size_t)m->cfg.n_embd, V = (size_t)m->cfg.vocab_size;
  if (m->acts) FSDP_ERROR(FSDP_ERR_STATE, "the %s model is set up already", MIXER_FAMILY);
  m->acts = calloc((size_t)m->cfg.n_layer, sizeof *m->acts);
  FSDP_CHECK_ALLOC(m->acts, (size_t)m->cfg.n_layer * sizeof *m->acts);
  for (int l = 0; l < m->cfg.n_layer; l++) {
    BlockActs *a = &m->acts[l];
    float **bt_c[] = {&a->ln1, &a->res1, &a->ln2, &a->out};
    float **bt[] = {&a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd};
    for (int i = 0; i < 4; i++) FSDP_CALL(Alloc(m, bt_c[i], BT * C));
    for (int i = 0; i < 4; i++) FSDP_CALL(Alloc(m, bt[i], BT));
    FSDP_CALL(Alloc(m, &a->fc, BT * 4 * C));
    FSDP_CALL(Alloc(m, &a->fc_gelu, BT * 4 * C));
  }
  FSDP_CALL(Alloc(m, &m->encoded, BT * C));
  FSDP_CALL(Alloc(m, &m->lnf, BT * C));
  FSDP_CALL(Alloc(m, &m->lnf_mean, BT));
  FSDP_CALL(Alloc(m, &m->lnf_rstd, BT));
  FSDP_CALL(Alloc(m, &m->logits, BT * V));
  FSDP_CALL(Alloc(m, &m->probs, BT * V));
  FSDP_CALL(Alloc(m, &m->losses, BT));
  FSDP_CALL(Alloc(m, &m->dres, BT * C));
  FSDP_CALL(Alloc(m, &m->dln, BT * C));
  FSDP_CALL(Alloc(m, &m->dfc, BT * 4 * C));
  FSDP_CALL(Alloc(m, &m->dfc_gelu, BT * 4 * C));
  FSDP_CALL(Alloc(m, &m->dlogits, BT * V));
  FSDP_CALL(m->k->alloc(FSDP_MEM_DATA, BT * sizeof(int), &m->inputs));
  FSDP_CALL(m->k->alloc(FSDP_MEM_DATA, BT * sizeof(int), &m->targets));
  return FSDP_SUCCESS;
}

static int Destroy(void **model)
{
  Mixer *m = *model;
  if (!m) return FSDP_SUCCESS;
  int err = FSDP_SUCCESS;
  for (int l = 0; m->acts && l < m->cfg.n_layer; l++) {
    BlockActs *a = &m->acts[l];
    float **all[] = {&a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->res1,    &a->ln2,
                     &a->ln2_mean, &a->ln2_rstd, &a->fc, &a->fc_gelu, &a->out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
      int e = m->k->free(all[i]);
      if (!err) err = e;
    }
  }
  void *bufs[] = {&m->encoded, &m->lnf,  &m->lnf_mean, &m->lnf_rstd, &m->logits,
                  &m->probs,   &m->losses, &m->dres,   &m->dln,      &m->dfc,
                  &m->dfc_gelu, &m->dlogits, &m->inputs, &m->targets};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    int e = m->k->free(bufs[i]);
    if (!err) err = e;
  }
  free(m->acts);
  free(m->block_specs);
  free(m->units);
  free(m->stages);
  free(m);
  *model = NULL;
  return err;
}

static const FsdpModelTable *Table(void *model) { return &((Mixer *)model)->table; }

static int SetBatch(void *model, const int *inputs, const int *targets)
{
  Mixer *m = model;
  size_t BT = (size_t)m->B * m->T;
  if (!m->inputs) FSDP_ERROR(FSDP_ERR_STATE, "the %s model's set_batch before set_up", MIXER_FAMILY);
  for (size_t i = 0; i < BT; i++)
    if (inputs[i] < 0 || inputs[i] >= m->cfg.vocab_size || targets[i] < 0 ||
        targets[i] >= m->cfg.vocab_size)
      FSDP_ERROR(FSDP_ERR_USAGE, "token at batch position %zu is outside [0, vocab_size = %d)",
                 i, m->cfg.vocab_size);
  FSDP_CALL(m->k->copy_from_host(m->inputs, inputs, BT * sizeof(int)));
  FSDP_CALL(m->k->copy_from_host(m->targets, targets, BT * sizeof(int)));
  return FSDP_SUCCESS;
}

static int Logits(void *model, int b, int t, float *out)
{
  Mixer *m = model;
  if (!m->logits || b < 0 || b >= m->B || t < 0 || t >= m->T)
    FSDP_ERROR(FSDP_ERR_STATE, "the %s model's logits at (%d, %d): not set up, or outside the "
               "batch (%d, %d)", MIXER_FAMILY, b, t, m->B, m->T);
  size_t V = (size_t)m->cfg.vocab_size;
  return m->k->copy_to_host(out, m->logits + ((size_t)b * m->T + t) * V, V * sizeof(float));
}

static int SetRecompute(void *model, int recompute)
{
  (void)model, (void)recompute; /* no recompute callbacks: everything is kept */
  return FSDP_SUCCESS;
}

static double Loss(void *model) { return ((Mixer *)model)->loss; }
static uint64_t ModelActivationBytes(void *model) { return ((Mixer *)model)->act_bytes; }
static void SetLossScale(void *model, float scale) { ((Mixer *)model)->loss_scale = scale; }

const FsdpModelFamily MixerFamily = {
    .name = MIXER_FAMILY,
    .presets = kPresetNames,
    .from_db = OptionsFromDb,
    .check = Check,
    .param_count = ParamCount,
    .activation_bytes = ActivationBytes,
    .model_activation_bytes = ModelActivationBytes,
    .set_recompute = SetRecompute,
    .set_attention = NULL, /* no attention: -attention does not apply */
    .matmul_shapes = MatmulShapes,
    .create = Create,
    .destroy = Destroy,
    .table = Table,
    .set_up = SetUp,
    .set_batch = SetBatch,
    .loss = Loss,
    .logits = Logits,
    .set_loss_scale = SetLossScale,
};
