/* convert.c: GPT-2 in Hugging Face folders and llm.c checkpoints (the
 * family's conversions, convert.h; fsdp-ckpt moves the tensors).
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
 *   are, no transposes.  fsdp-ckpt checks the layout against the model's
 *   parameter list ([Note: the model's parameter list] there): every
 *   parameter used exactly once with the element count llm.c gives it.
 *
 * Hugging Face ([Note: Hugging Face names] in convert.h): GPT2LMHeadModel's
 * transformer.<fsdp name> (wte and wpe with .weight); its Conv1D layers
 * (c_attn, c_proj, c_fc) keep weights as [in, out], fsdp as [out, in], so
 * those are transposed; the LM head is tied to wte (lm_head.weight, when a
 * file has it, must equal wte).  Files saved from GPT2Model name tensors
 * without "transformer.", and old ones carry the attention mask buffers
 * h.<i>.attn.bias / masked_bias: both are accepted.  The vocabulary is
 * never padded (fsdp's wte and Hugging Face's both have vocab_size rows;
 * only llm.c's file pads to Vp).
 */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/gpt/gpt.h"

/* ---- Hugging Face ------------------------------------------------------------ */

int GptHfReadConfig(FsdpHfConfig cfg, FsdpModelDesc *desc)
{
  const char *path = FsdpHfConfigPath(cfg);
  int64_t L, C, H, V, T, inner;
  static const char *const act[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
  double eps;
  FSDP_CALL(FsdpHfConfigInt(cfg, "n_layer", -1, &L));
  FSDP_CALL(FsdpHfConfigInt(cfg, "n_embd", -1, &C));
  FSDP_CALL(FsdpHfConfigInt(cfg, "n_head", -1, &H));
  FSDP_CALL(FsdpHfConfigInt(cfg, "vocab_size", -1, &V));
  FSDP_CALL(FsdpHfConfigInt(cfg, "n_positions", -1, &T));
  FSDP_CALL(FsdpHfConfigInt(cfg, "n_inner", 4 * C, &inner));
  FSDP_CALL(FsdpHfConfigReal(cfg, "layer_norm_epsilon", 1e-5, &eps));
  FSDP_CALL(FsdpHfConfigOneOf(cfg, "activation_function", act, "GELU, tanh approximation"));
  FSDP_CALL(FsdpHfConfigFlag(cfg, "scale_attn_weights", 1, "scores scaled by 1/sqrt(head size)"));
  FSDP_CALL(FsdpHfConfigFlag(cfg, "scale_attn_by_inverse_layer_idx", 0, "no per-layer scaling"));
  if (inner != 4 * C || eps != 1e-5 || L > INT32_MAX || C > INT32_MAX || H > INT32_MAX ||
      V > INT32_MAX || T > INT32_MAX)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s: n_inner %lld and layer_norm_epsilon %g: fsdp's GPT-2 has an MLP of "
               "4 n_embd = %lld and LayerNorm eps 1e-5 (and sizes in int range)",
               path, (long long)inner, eps, (long long)(4 * C));
  GptConfig c = {(int)L, (int)C, (int)H, (int)V, (int)T};
  return GptConfigDescribe(&c, "custom", desc);
}

int GptHfWriteConfig(const FsdpModelDesc *desc, FsdpHfConfig j)
{
  GptConfig c;
  FSDP_CALL(GptConfigFromDesc(desc, "the model description", &c));
  FSDP_CALL(FsdpHfConfigSetStringList(j, "architectures", "GPT2LMHeadModel"));
  FSDP_CALL(FsdpHfConfigSetString(j, "model_type", "gpt2"));
  FSDP_CALL(FsdpHfConfigSetInt(j, "n_layer", c.n_layer));
  FSDP_CALL(FsdpHfConfigSetInt(j, "n_embd", c.n_embd));
  FSDP_CALL(FsdpHfConfigSetInt(j, "n_head", c.n_head));
  FSDP_CALL(FsdpHfConfigSetInt(j, "vocab_size", c.vocab_size));
  FSDP_CALL(FsdpHfConfigSetInt(j, "n_positions", c.seq_len));
  FSDP_CALL(FsdpHfConfigSetInt(j, "n_ctx", c.seq_len));
  FSDP_CALL(FsdpHfConfigSetNull(j, "n_inner"));
  FSDP_CALL(FsdpHfConfigSetString(j, "activation_function", "gelu_new"));
  FSDP_CALL(FsdpHfConfigSetReal(j, "layer_norm_epsilon", 1e-5));
  FSDP_CALL(FsdpHfConfigSetBool(j, "tie_word_embeddings", 1));
  return FSDP_SUCCESS;
}

int GptHfLayout(const FsdpModelDesc *desc, const char *what, FsdpHfLayout *m)
{
  static const char *const ignored[] = {".attn.bias", ".attn.masked_bias", NULL};
  GptConfig c;
  FSDP_CALL(GptConfigCheckFile(desc, what, &c));
  int64_t C = c.n_embd;
  char name[FSDP_MAX_NAME], hf[FSDP_HF_NAME_MAX];
  FSDP_CALL(FsdpHfLayoutCreate(4 + 12 * c.n_layer, m));
  m->optional_prefix = "transformer.";
  m->ignored_suffixes = ignored;
  m->tied_head = "lm_head.weight";
  FSDP_CALL(FsdpHfLayoutAdd(m, "wte", "transformer.wte.weight", c.vocab_size, C, 0));
  FSDP_CALL(FsdpHfLayoutAdd(m, "wpe", "transformer.wpe.weight", c.seq_len, C, 0));
  FSDP_CALL(FsdpHfLayoutAdd(m, "ln_f.weight", "transformer.ln_f.weight", C, 0, 0));
  FSDP_CALL(FsdpHfLayoutAdd(m, "ln_f.bias", "transformer.ln_f.bias", C, 0, 0));
  static const struct { const char *s; int rows, cols, tr; } blk[] = {
      {"ln_1.weight", 1, 0, 0},        {"ln_1.bias", 1, 0, 0},
      {"attn.c_attn.weight", 3, 1, 1}, {"attn.c_attn.bias", 3, 0, 0},
      {"attn.c_proj.weight", 1, 1, 1}, {"attn.c_proj.bias", 1, 0, 0},
      {"ln_2.weight", 1, 0, 0},        {"ln_2.bias", 1, 0, 0},
      {"mlp.c_fc.weight", 4, 1, 1},    {"mlp.c_fc.bias", 4, 0, 0},
      {"mlp.c_proj.weight", 1, 4, 1},  {"mlp.c_proj.bias", 1, 0, 0},
  };
  for (int l = 0; l < c.n_layer; l++)
    for (int k = 0; k < 12; k++) {
      snprintf(name, sizeof name, "h.%d.%s", l, blk[k].s);
      snprintf(hf, sizeof hf, "transformer.%s", name);
      FSDP_CALL(FsdpHfLayoutAdd(m, name, hf, blk[k].rows * C, blk[k].cols * C, blk[k].tr));
    }
  return FSDP_SUCCESS;
}

/* ---- llm.c ---------------------------------------------------------------------- */

#define LLMC_MAGIC 20240326

/* The llm.c tensor order: the fsdp name (per-layer ones under h.<l>.) and
 * the per-layer element count llm.c gives it as multiples of (rows, cols)
 * in units of C, maxT, Vp. */
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

/* The file's tensors in order; each names the fsdp parameter it is with
 * the element count llm.c gives it (wte: V of its Vp rows, then the pad). */
static int LlmcLayout(const LlmcHeader *h, FsdpLlmcLayout *l)
{
  FSDP_ASSERT(h->L >= 1 && h->L <= 100000);
  FSDP_CALL(FsdpLlmcLayoutCreate(4 + 12 * h->L, l));
  l->version = h->version;
  l->elem_bytes = h->version == 3 ? 4 : 2;
  snprintf(l->sizes, sizeof l->sizes, "maxT %d, V %d (Vp %d), L %d, NH %d, C %d", h->maxT, h->V,
           h->Vp, h->L, h->NH, h->C);
  for (int t = 0; t < NLLMC; t++)
    for (int layer = 0; layer < (kLlmc[t].per_layer ? h->L : 1); layer++) {
      FSDP_ASSERT(l->n < l->cap);
      FsdpLlmcTensor *x = &l->t[l->n++];
      snprintf(x->llmc, sizeof x->llmc, "%s", kLlmc[t].llmc);
      x->layer = kLlmc[t].per_layer ? layer : -1;
      if (kLlmc[t].per_layer) snprintf(x->name, sizeof x->name, "h.%d.%s", layer, kLlmc[t].name);
      else snprintf(x->name, sizeof x->name, "%s", kLlmc[t].name);
      int64_t rows = kLlmc[t].rows == DIM_VP ? h->V : LlmcDimSize(h, kLlmc[t].rows);
      x->numel = rows * LlmcDimSize(h, kLlmc[t].cols);
      if (kLlmc[t].rows == DIM_VP) { /* wte rows V..Vp-1: llm.c keeps them zero */
        x->pad_rows = h->Vp - h->V;
        x->row = h->C;
        x->first_pad_row = h->V;
      }
    }
  return FSDP_SUCCESS;
}

int GptLlmcRead(const int32_t *hdr, int64_t file_bytes, const char *path, FsdpModelDesc *desc,
                FsdpLlmcLayout *layout)
{
  if (hdr[1] != 3 && hdr[1] != 5)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "llm.c checkpoint %s has version %d; fsdp-ckpt reads version 3 (fp32) and 5 (bf16)",
               path, (int)hdr[1]);
  LlmcHeader h = {hdr[1], hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7]};
  /* the bounds keep the element counts below in int64 and the layout's
   * tensor count in int (a crafted header must not wrap either) */
  if (h.maxT < 1 || h.V < 1 || h.L < 1 || h.NH < 1 || h.C < 1 || h.Vp < h.V ||
      h.L > 100000 || h.C > (1 << 20) || h.maxT > (1 << 24) || h.Vp > (1 << 20))
    FSDP_ERROR(FSDP_ERR_USAGE,
               "llm.c checkpoint %s has an invalid header: maxT %d, V %d, L %d, NH %d, C %d, Vp %d",
               path, h.maxT, h.V, h.L, h.NH, h.C, h.Vp);
  int elem = h.version == 3 ? 4 : 2;
  int64_t want = FSDP_LLMC_HEADER_INTS * 4 + LlmcNumel(&h) * elem;
  if (file_bytes != want)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "llm.c checkpoint %s is %lld bytes, but its header (version %d, maxT %d, V %d, "
               "Vp %d, L %d, C %d) makes %lld: truncated or not a GPT-2 checkpoint",
               path, (long long)file_bytes, h.version, h.maxT, h.V, h.Vp, h.L, h.C,
               (long long)want);
  GptConfig c = {h.L, h.C, h.NH, h.V, h.maxT};
  char what[4200];
  snprintf(what, sizeof what, "llm.c checkpoint %s", path);
  FSDP_CALL(GptConfigDescribe(&c, "custom", desc));
  FSDP_CALL(GptConfigCheckFile(desc, what, &c));
  if (h.Vp != PaddedVocab(h.V))
    FsdpWarn(0, "llm.c checkpoint %s pads its vocabulary to %d rows, not %d: exported files "
                "will use %d",
             path, h.Vp, PaddedVocab(h.V), PaddedVocab(h.V));
  return LlmcLayout(&h, layout);
}

int GptLlmcWrite(const FsdpModelDesc *desc, int32_t *hdr, FsdpLlmcLayout *layout)
{
  GptConfig c;
  FSDP_CALL(GptConfigFromDesc(desc, "the model description", &c));
  LlmcHeader h = {3, c.seq_len, c.vocab_size, c.n_layer, c.n_head, c.n_embd,
                  PaddedVocab(c.vocab_size)};
  memset(hdr, 0, FSDP_LLMC_HEADER_INTS * sizeof *hdr);
  hdr[0] = LLMC_MAGIC;
  hdr[1] = h.version;
  hdr[2] = h.maxT;
  hdr[3] = h.V;
  hdr[4] = h.L;
  hdr[5] = h.NH;
  hdr[6] = h.C;
  hdr[7] = h.Vp;
  return LlmcLayout(&h, layout);
}
