/* family.c: the Llama family's operations over llama.h (family.h), the
 * table registry.c lists. */
#include "model/family.h"

#include <math.h>
#include <string.h>

#include "base/error.h"
#include "model/llama/llama.h"

static int FromDb(FsdpOpts db, const char *preset, FsdpModelDesc *desc)
{
  LlamaConfig c;
  FSDP_CALL(LlamaConfigFromDb(db, preset, &c));
  return LlamaConfigDescribe(&c, "", desc);
}

/* A description from a file: parsed, then validated with a message naming
 * the file (LlamaConfigValidate speaks of options). */
static int Check(const FsdpModelDesc *desc, const char *what)
{
  LlamaConfig c;
  FSDP_CALL(LlamaConfigFromDesc(desc, what, &c));
  int hd = c.n_head > 0 ? c.n_embd / c.n_head : 0;
  if (c.n_layer < 1 || c.n_embd < 1 || c.n_head < 1 || c.n_embd % c.n_head || hd % 2 ||
      c.n_kv_head < 1 || c.n_head % c.n_kv_head || c.ffn_hidden < 1 || c.vocab_size < 2 ||
      c.seq_len < 2 || (c.tie_embeddings != 0 && c.tie_embeddings != 1) ||
      !(c.rope_theta > 1.0) || !isfinite(c.rope_theta) || !(c.norm_eps > 0.0) ||
      !isfinite(c.norm_eps)) {
    char attrs[1024];
    FsdpModelDescFormat(desc, attrs, sizeof attrs);
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s holds an invalid llama model (%s): sizes must be positive, n_embd divisible "
               "by n_head into an even head size, n_kv_head dividing n_head, tie_embeddings 0 "
               "or 1, rope_theta > 1, norm_eps > 0",
               what, attrs);
  }
  return FSDP_SUCCESS;
}

static int64_t ParamCount(const FsdpModelDesc *desc)
{
  LlamaConfig c;
  return LlamaConfigFromDesc(desc, "description", &c) ? 0 : LlamaConfigParamCount(&c);
}

static uint64_t ActBytes(const FsdpModelDesc *desc, int wrap, int B, int T, int recompute,
                         FsdpAttention attention)
{
  LlamaConfig c;
  return LlamaConfigFromDesc(desc, "description", &c)
             ? 0
             : LlamaActivationBytes(&c, wrap, B, T, recompute, attention);
}

/* q and o projections, k and v, gate and up, down, head (in, out). */
static int MatmulShapes(const FsdpModelDesc *desc, int64_t shape[][2], int max)
{
  LlamaConfig c;
  if (LlamaConfigFromDesc(desc, "description", &c) || max < 5) return 0;
  int64_t C = c.n_embd, KC = (int64_t)c.n_kv_head * (C / c.n_head), H = c.ffn_hidden;
  const int64_t s[5][2] = {{C, C}, {C, KC}, {C, H}, {H, C}, {C, c.vocab_size}};
  memcpy(shape, s, sizeof s);
  return 5;
}

static uint64_t ModelActBytes(void *m) { return LlamaModelActivationBytes((LlamaModel)m); }
static int SetRecompute(void *m, int r) { return LlamaModelSetRecompute((LlamaModel)m, r); }

static int SetAttention(void *model, FsdpAttention attention)
{
  return LlamaModelSetAttention((LlamaModel)model, attention);
}

static int Create(const FsdpModelDesc *desc, int wrap, int B, int T, const FsdpKernelOps *ops,
                  uint64_t seed, void **model)
{
  LlamaConfig c;
  FSDP_CALL(LlamaConfigFromDesc(desc, "the model description", &c));
  LlamaModel m = NULL;
  int err = LlamaModelCreate(&c, wrap, B, T, ops, seed, &m);
  if (err) {
    LlamaModelDestroy(&m);
    return err;
  }
  *model = m;
  return FSDP_SUCCESS;
}

static int Destroy(void **model)
{
  LlamaModel m = (LlamaModel)*model;
  *model = NULL;
  return LlamaModelDestroy(&m);
}

static const FsdpModelTable *Table(void *m) { return LlamaModelTable((LlamaModel)m); }
static int SetUp(void *m) { return LlamaModelSetUp((LlamaModel)m); }
static int SetBatch(void *m, const int *in, const int *tg)
{
  return LlamaModelSetBatch((LlamaModel)m, in, tg);
}
static double Loss(void *m) { return LlamaModelLoss((LlamaModel)m); }
static int Logits(void *m, int b, int t, float *out)
{
  return LlamaModelLogits((LlamaModel)m, b, t, out);
}
static void SetLossScale(void *m, float s) { LlamaModelSetLossScale((LlamaModel)m, s); }

const FsdpModelFamily FsdpLlamaFamily = {
    .name = LLAMA_FAMILY,
    .title = "Llama 3",
    .presets = LlamaPresetNames,
    .from_db = FromDb,
    .check = Check,
    .param_count = ParamCount,
    .activation_bytes = ActBytes,
    .model_activation_bytes = ModelActBytes,
    .set_recompute = SetRecompute,
    .set_attention = SetAttention,
    .matmul_shapes = MatmulShapes,
    .create = Create,
    .destroy = Destroy,
    .table = Table,
    .set_up = SetUp,
    .set_batch = SetBatch,
    .loss = Loss,
    .logits = Logits,
    .set_loss_scale = SetLossScale,
    .convert_help = "Hugging Face (safetensors): Llama tensors keep LlamaForCausalLM's names\n"
                    "(model.embed_tokens.weight, model.layers.<i>.self_attn.q_proj.weight, ...,\n"
                    "lm_head.weight when untied).\n",
    .hf_model_type = "llama",
    .hf_architecture = "LlamaForCausalLM",
    .hf_read_config = LlamaHfReadConfig,
    .hf_write_config = LlamaHfWriteConfig,
    .hf_layout = LlamaHfLayout,
};
