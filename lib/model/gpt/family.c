/* family.c: the GPT-2 family's operations over gpt.h (family.h), the
 * table registry.c lists. */
#include "model/family.h"

#include <string.h>

#include "base/error.h"
#include "model/gpt/gpt.h"

static int GptFromDb(FsdpOpts db, const char *preset, FsdpModelDesc *desc)
{
  GptConfig c;
  FSDP_CALL(GptConfigFromDb(db, preset, &c));
  FSDP_CALL(GptConfigDescribe(&c, "", desc));
  return FSDP_SUCCESS;
}

static int GptCheck(const FsdpModelDesc *desc, const char *what)
{
  GptConfig c;
  return GptConfigCheckFile(desc, what, &c);
}

static int64_t GptParamCountDesc(const FsdpModelDesc *desc)
{
  GptConfig c;
  if (GptConfigFromDesc(desc, "description", &c)) return 0;
  return GptConfigParamCount(&c);
}

/* What GptModelSetUp allocates: gpt.c's own count. */
static uint64_t GptActivationBytesDesc(const FsdpModelDesc *desc, int wrap, int B, int T,
                                       int recompute, FsdpAttention attention)
{
  GptConfig c;
  if (GptConfigFromDesc(desc, "description", &c)) return 0;
  return GptActivationBytes(&c, wrap, B, T, recompute, attention);
}

/* qkv, attention projection, fc, fc projection, head (in, out). */
static int GptMatmulShapes(const FsdpModelDesc *desc, int64_t shape[][2], int max)
{
  GptConfig c;
  if (GptConfigFromDesc(desc, "description", &c) || max < 5) return 0;
  int64_t C = c.n_embd, V = c.vocab_size;
  const int64_t s[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}};
  memcpy(shape, s, sizeof s);
  return 5;
}

static int GptCreateDesc(const FsdpModelDesc *desc, int wrap, int B, int T,
                         const FsdpKernelOps *ops, uint64_t seed, void **model)
{
  GptConfig c;
  FSDP_CALL(GptConfigFromDesc(desc, "the model description", &c));
  GptModel m = NULL;
  FSDP_CALL(GptModelCreate(&c, wrap, B, T, ops, seed, &m));
  *model = m;
  return FSDP_SUCCESS;
}

static int GptDestroyV(void **model)
{
  GptModel m = (GptModel)*model;
  FSDP_CALL(GptModelDestroy(&m));
  *model = NULL;
  return FSDP_SUCCESS;
}

static const FsdpModelTable *GptTableV(void *m) { return GptModelTable((GptModel)m); }
static int GptSetUpV(void *m) { return GptModelSetUp((GptModel)m); }
static int GptSetBatchV(void *m, const int *in, const int *tg)
{
  return GptModelSetBatch((GptModel)m, in, tg);
}
static double GptLossV(void *m) { return GptModelLoss((GptModel)m); }
static uint64_t GptModelActBytesV(void *m) { return GptModelActivationBytes((GptModel)m); }
static int GptSetRecomputeV(void *m, int r) { return GptModelSetRecompute((GptModel)m, r); }
static int GptSetAttentionV(void *m, FsdpAttention a) { return GptModelSetAttention((GptModel)m, a); }
static int GptLogitsV(void *m, int b, int t, float *out)
{
  return GptModelLogits((GptModel)m, b, t, out);
}
static void GptSetLossScaleV(void *m, float s) { GptModelSetLossScale((GptModel)m, s); }

/* GptPresetNames without its trailing "custom" (FsdpModelOptionsFromDb adds
 * one custom for all families). */
static const char *const kGptPresets[] = {"tiny",       "small",   "gpt2", "gpt2-medium",
                                          "gpt2-large", "gpt2-xl", "gpt-175b", NULL};

static const char kGptConvertHelp[] =
    "llm.c GPT-2 checkpoint: little-endian; 256 int32 header: [0] 20240326,\n"
    "[1] version 3 (fp32) or 5 (bf16), [2] maxT = seq_len, [3] V, [4] L, [5] NH,\n"
    "[6] C, [7] Vp = ceil(V/128)*128; then, back to back: wte (Vp,C) with rows\n"
    "V..Vp-1 zero, wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb\n"
    "(L,3C), attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw\n"
    "(L,4C,C), fcb (L,4C), fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C):\n"
    "h.<l>.<tensor> is layer l of the stacked tensor; weights are (out, in) on\n"
    "both sides.  An imported file loads with\n"
    "  fsdp-train -model custom -n_layer L -n_embd C -n_head NH -vocab_size V\n"
    "             -seq_len maxT -resume OUT.h5 ...\n"
    "\n"
    "Hugging Face (safetensors): GPT-2 tensors are GPT2LMHeadModel's,\n"
    "transformer.<fsdp name> (wte.weight, wpe.weight, h.<i>.attn.c_attn.weight, ...);\n"
    "its Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out] and transposed;\n"
    "lm_head is tied to wte.\n";

const FsdpModelFamily FsdpGptFamily = {
    .name = GPT_FAMILY,
    .title = "GPT-2",
    .presets = kGptPresets,
    .from_db = GptFromDb,
    .check = GptCheck,
    .param_count = GptParamCountDesc,
    .activation_bytes = GptActivationBytesDesc,
    .model_activation_bytes = GptModelActBytesV,
    .set_recompute = GptSetRecomputeV,
    .set_attention = GptSetAttentionV,
    .matmul_shapes = GptMatmulShapes,
    .create = GptCreateDesc,
    .destroy = GptDestroyV,
    .table = GptTableV,
    .set_up = GptSetUpV,
    .set_batch = GptSetBatchV,
    .loss = GptLossV,
    .logits = GptLogitsV,
    .set_loss_scale = GptSetLossScaleV,
    .convert_help = kGptConvertHelp,
    .hf_model_type = "gpt2",
    .hf_architecture = "GPT2LMHeadModel",
    .hf_read_config = GptHfReadConfig,
    .hf_write_config = GptHfWriteConfig,
    .hf_layout = GptHfLayout,
    .llmc_magic = GPT_LLMC_MAGIC,
    .llmc_read = GptLlmcRead,
    .llmc_write = GptLlmcWrite,
};
