/* llama.h: a Llama 3 style transformer as a list of FSDP units.
 *
 * Parameters (Hugging Face transformers' names and shapes; linear weights
 * are [out, in], no biases; hd = n_embd / n_head, H = ffn_hidden):
 *   model.embed_tokens.weight [V, C]  model.norm.weight [C]
 *   lm_head.weight [V, C] (untied only)                               (root)
 *   model.layers.{i}.input_layernorm.weight [C]
 *   model.layers.{i}.self_attn.q_proj.weight [n_head*hd, C]
 *   model.layers.{i}.self_attn.k_proj.weight [n_kv_head*hd, C]
 *   model.layers.{i}.self_attn.v_proj.weight [n_kv_head*hd, C]
 *   model.layers.{i}.self_attn.o_proj.weight [C, n_head*hd]
 *   model.layers.{i}.post_attention_layernorm.weight [C]
 *   model.layers.{i}.mlp.gate_proj.weight [H, C]
 *   model.layers.{i}.mlp.up_proj.weight [H, C]
 *   model.layers.{i}.mlp.down_proj.weight [C, H]
 * Block: x += o_proj(attn(rope(q), rope(k), v)) of rmsnorm(x);
 *        x += down(silu(gate(h)) * up(h)), h = rmsnorm(x).
 * Attention is causal, grouped-query (n_kv_head divides n_head; kv head
 * j serves heads j*n_head/n_kv_head ..), scores scaled by 1/sqrt(hd);
 * RoPE rotate-half with base rope_theta (transformers' default rope, no
 * rope_scaling).  Final RMSNorm, then logits = h @ W^T with W the
 * embedding (tied) or lm_head.
 *
 * Units: the root (embedding, final norm and, when untied, lm_head) and one
 * unit per `wrap` blocks ("model.layers.0" or "model.layers.0-1").  The
 * untied head stays in the root on purpose: the runtime sizes every gather
 * slot for the largest non-root unit, so a head unit of V*C parameters
 * (525M at llama3-8b, 2.4x a block) would enlarge each of the 2-3 slots to
 * its size, costing more memory than holding it unsharded in the root.
 *
 * Initialization: N(0, 0.02) for embeddings and linear weights (the
 * transformers initializer_range), RMSNorm weights 1; counter-based as for
 * GPT ([Note: counter-based init] in model.h).
 */
#ifndef FSDP_LLAMA_H
#define FSDP_LLAMA_H

#include <stdint.h>

#include "base/opts.h"
#include "kernels/kernels.h"
#include "model/convert.h"
#include "model/model.h"

#define LLAMA_FAMILY "llama"

typedef struct {
  int n_layer, n_embd, n_head, n_kv_head, ffn_hidden, vocab_size, seq_len, tie_embeddings;
  double rope_theta, norm_eps;
} LlamaConfig;

/* Presets accepted by -model (family.h adds "custom"). */
extern const char *const LlamaPresetNames[];

/* Llama's hidden size: 2/3 of 4C, times ffn_dim_multiplier when > 0,
 * rounded up to a multiple of multiple_of. */
int LlamaFfnHidden(int n_embd, int multiple_of, double ffn_dim_multiplier);

/* Not collective.  The preset's config (NULL: custom, starting from
 * llama-tiny) overridden by -n_layer -n_embd -n_head -n_kv_head
 * -ffn_hidden -multiple_of -ffn_dim_multiplier -vocab_size -seq_len
 * -tie_embeddings -rope_theta -norm_eps; validated. */
int LlamaConfigFromDb(FsdpOpts db, const char *preset, LlamaConfig *cfg);
int LlamaConfigValidate(const LlamaConfig *cfg);
int64_t LlamaConfigParamCount(const LlamaConfig *cfg);
/* family "llama"; int n_layer, n_embd, n_head, n_kv_head, ffn_hidden,
 * vocab_size, seq_len, tie_embeddings; real rope_theta, norm_eps (in that
 * order). */
int LlamaConfigDescribe(const LlamaConfig *cfg, const char *preset, FsdpModelDesc *desc);
int LlamaConfigFromDesc(const FsdpModelDesc *desc, const char *what, LlamaConfig *cfg);

typedef struct LlamaModel_ *LlamaModel;

/* As GptModelCreate (gpt.h): B sequences of T <= seq_len per micro-batch. */
int LlamaModelCreate(const LlamaConfig *cfg, int wrap, int B, int T, const FsdpKernelOps *ops,
                     uint64_t seed, LlamaModel *m);
int LlamaModelDestroy(LlamaModel *m);
const FsdpModelTable *LlamaModelTable(LlamaModel m);
int LlamaModelSetUp(LlamaModel m);
int LlamaModelSetBatch(LlamaModel m, const int *inputs, const int *targets);
double LlamaModelLoss(LlamaModel m);
/* As GptModelLogits: the logits of the last forward at (b, t), to host. */
int LlamaModelLogits(LlamaModel m, int b, int t, float *out);
void LlamaModelSetLossScale(LlamaModel m, float scale);
/* Bytes LlamaModelSetUp allocates for wrap, B, T, with or without
 * recomputation ([Note: Llama recomputation] in llama.c). */
uint64_t LlamaActivationBytes(const LlamaConfig *cfg, int wrap, int B, int T, int recompute,
                              FsdpAttention attention);
/* As GptModelSetAttention (gpt.h): -attention flash (default) or naive;
 * before LlamaModelSetUp.  Grouped-query attention reaches either kernel
 * through gqa_pack (the kv heads repeated into qkv). */
int LlamaModelSetAttention(LlamaModel m, FsdpAttention attention);
int LlamaParamDecays(const char *name, int decay_embeddings);
/* As GptModelSetRecompute and GptModelActivationBytes (gpt.h). */
int LlamaModelSetRecompute(LlamaModel m, int recompute);
uint64_t LlamaModelActivationBytes(LlamaModel m);

/* ---- conversions (convert.c; the family's operations, family.h) ---------- */

int LlamaHfReadConfig(FsdpHfConfig cfg, FsdpModelDesc *desc);
int LlamaHfWriteConfig(const FsdpModelDesc *desc, FsdpHfConfig cfg);
int LlamaHfLayout(const FsdpModelDesc *desc, const char *what, FsdpHfLayout *layout);

#endif
