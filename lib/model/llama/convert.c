/* convert.c: Llama in Hugging Face folders (the family's conversions,
 * convert.h; fsdp-ckpt moves the tensors).
 *
 * fsdp's names are LlamaForCausalLM's (model.embed_tokens.weight,
 * model.layers.<i>.self_attn.q_proj.weight, ..., model.norm.weight,
 * lm_head.weight only when untied); nothing is transposed.  config.json:
 * transformers' LlamaConfig keys; plain RoPE only (a rope_scaling, or a
 * rope_parameters of another rope_type, is refused: the model would
 * compute something else).  Llama has no llm.c conversion here.
 */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/llama/llama.h"

int LlamaHfReadConfig(FsdpHfConfig cfg, FsdpModelDesc *desc)
{
  const char *path = FsdpHfConfigPath(cfg);
  int64_t L, C, H, K, F, V, T, hd;
  double theta, eps;
  int tie;
  static const char *const act[] = {"silu", NULL};
  FSDP_CALL(FsdpHfConfigInt(cfg, "num_hidden_layers", -1, &L));
  FSDP_CALL(FsdpHfConfigInt(cfg, "hidden_size", -1, &C));
  FSDP_CALL(FsdpHfConfigInt(cfg, "num_attention_heads", -1, &H));
  FSDP_CALL(FsdpHfConfigInt(cfg, "num_key_value_heads", H, &K));
  FSDP_CALL(FsdpHfConfigInt(cfg, "intermediate_size", -1, &F));
  FSDP_CALL(FsdpHfConfigInt(cfg, "vocab_size", -1, &V));
  FSDP_CALL(FsdpHfConfigInt(cfg, "max_position_embeddings", -1, &T));
  FSDP_CALL(FsdpHfConfigInt(cfg, "head_dim", H ? C / H : 0, &hd));
  FSDP_CALL(FsdpHfConfigReal(cfg, "rope_theta", 10000.0, &theta));
  FSDP_CALL(FsdpHfConfigReal(cfg, "rms_norm_eps", 1e-6, &eps));
  FSDP_CALL(FsdpHfConfigOneOf(cfg, "hidden_act", act, "SwiGLU MLP"));
  FSDP_CALL(FsdpHfConfigFlag(cfg, "attention_bias", 0, "no biases"));
  FSDP_CALL(FsdpHfConfigFlag(cfg, "mlp_bias", 0, "no biases"));
  FSDP_CALL(FsdpHfConfigBool(cfg, "tie_word_embeddings", 0, &tie));
  /* transformers 5 writes RoPE as rope_parameters {rope_theta, rope_type} */
  int scaled = FsdpHfConfigHas(cfg, "rope_scaling");
  FsdpHfConfig rp = FsdpHfConfigObject(cfg, "rope_parameters");
  if (rp) {
    const char *rt = FsdpHfConfigString(rp, "rope_type");
    if (FsdpHfConfigPresent(rp, "rope_type") && !(rt && strcmp(rt, "default") == 0)) scaled = 1;
    else FSDP_CALL(FsdpHfConfigReal(rp, "rope_theta", theta, &theta));
  }
  if (scaled)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s: rope_scaling (or a rope_parameters rope_type other than default) is "
               "set; fsdp's llama has plain RoPE (rope_theta only), "
               "so the converted model would compute something else",
               path);
  if (H && hd != C / H)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: head_dim %lld is not hidden_size / num_attention_heads = %lld",
               path, (long long)hd, (long long)(C / H));
  FsdpModelDescInit(desc, LLAMA_FAMILY, "custom");
  const char *const names[] = {"n_layer",    "n_embd",     "n_head",  "n_kv_head",
                               "ffn_hidden", "vocab_size", "seq_len", "tie_embeddings"};
  const int64_t vals[] = {L, C, H, K, F, V, T, tie};
  for (int k = 0; k < 8; k++) FSDP_CALL(FsdpModelDescAddInt(desc, names[k], vals[k]));
  FSDP_CALL(FsdpModelDescAddReal(desc, "rope_theta", theta));
  FSDP_CALL(FsdpModelDescAddReal(desc, "norm_eps", eps));
  return FSDP_SUCCESS;
}

/* An attribute as an integer or a real (-1 when absent): the layout reads
 * a description that has not been checked yet, to word its message. */
static int64_t AttrInt(const FsdpModelDesc *d, const char *name)
{
  const FsdpModelAttr *a = FsdpModelDescFind(d, name);
  return a ? (a->type == FSDP_MODEL_ATTR_INT ? a->i : (int64_t)a->r) : -1;
}

static double AttrReal(const FsdpModelDesc *d, const char *name)
{
  const FsdpModelAttr *a = FsdpModelDescFind(d, name);
  return a ? (a->type == FSDP_MODEL_ATTR_REAL ? a->r : (double)a->i) : -1.0;
}

int LlamaHfWriteConfig(const FsdpModelDesc *d, FsdpHfConfig j)
{
  FSDP_CALL(FsdpHfConfigSetStringList(j, "architectures", "LlamaForCausalLM"));
  FSDP_CALL(FsdpHfConfigSetString(j, "model_type", "llama"));
  FSDP_CALL(FsdpHfConfigSetInt(j, "num_hidden_layers", AttrInt(d, "n_layer")));
  FSDP_CALL(FsdpHfConfigSetInt(j, "hidden_size", AttrInt(d, "n_embd")));
  FSDP_CALL(FsdpHfConfigSetInt(j, "num_attention_heads", AttrInt(d, "n_head")));
  FSDP_CALL(FsdpHfConfigSetInt(j, "num_key_value_heads", AttrInt(d, "n_kv_head")));
  FSDP_CALL(FsdpHfConfigSetInt(j, "intermediate_size", AttrInt(d, "ffn_hidden")));
  FSDP_CALL(FsdpHfConfigSetInt(j, "vocab_size", AttrInt(d, "vocab_size")));
  FSDP_CALL(FsdpHfConfigSetInt(j, "max_position_embeddings", AttrInt(d, "seq_len")));
  FSDP_CALL(FsdpHfConfigSetBool(j, "tie_word_embeddings", AttrInt(d, "tie_embeddings") == 1));
  FSDP_CALL(FsdpHfConfigSetReal(j, "rope_theta", AttrReal(d, "rope_theta")));
  FSDP_CALL(FsdpHfConfigSetReal(j, "rms_norm_eps", AttrReal(d, "norm_eps")));
  FSDP_CALL(FsdpHfConfigSetString(j, "hidden_act", "silu"));
  FSDP_CALL(FsdpHfConfigSetBool(j, "attention_bias", 0));
  FSDP_CALL(FsdpHfConfigSetBool(j, "mlp_bias", 0));
  FSDP_CALL(FsdpHfConfigSetNull(j, "rope_scaling"));
  return FSDP_SUCCESS;
}

int LlamaHfLayout(const FsdpModelDesc *desc, const char *what, FsdpHfLayout *m)
{
  static const char *const ignored[] = {".rotary_emb.inv_freq", NULL};
  int64_t L = AttrInt(desc, "n_layer"), C = AttrInt(desc, "n_embd"), H = AttrInt(desc, "n_head"),
          K = AttrInt(desc, "n_kv_head"), F = AttrInt(desc, "ffn_hidden"),
          V = AttrInt(desc, "vocab_size"), T = AttrInt(desc, "seq_len"),
          tie = AttrInt(desc, "tie_embeddings");
  if (L < 1 || C < 1 || H < 1 || K < 1 || F < 1 || V < 2 || T < 1 || tie < 0 || tie > 1 ||
      C % H || H % K || AttrReal(desc, "rope_theta") <= 0 || AttrReal(desc, "norm_eps") <= 0 ||
      L > 100000)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s holds an invalid llama model description (n_layer %lld, n_embd %lld, n_head "
               "%lld, n_kv_head %lld, ffn_hidden %lld, vocab_size %lld, seq_len %lld, "
               "tie_embeddings %lld, rope_theta %g, norm_eps %g): n_embd must divide by n_head "
               "and n_head by n_kv_head",
               what, (long long)L, (long long)C, (long long)H, (long long)K, (long long)F,
               (long long)V, (long long)T, (long long)tie, AttrReal(desc, "rope_theta"),
               AttrReal(desc, "norm_eps"));
  int64_t hd = C / H;
  FSDP_CALL(FsdpHfLayoutCreate((int)(3 + 9 * L), m));
  m->ignored_suffixes = ignored;
  m->tied_head = tie ? "lm_head.weight" : NULL;
  FSDP_CALL(FsdpHfLayoutAdd(m, "model.embed_tokens.weight", "model.embed_tokens.weight", V, C, 0));
  const struct { const char *s; int64_t rows, cols; } blk[] = {
      {"input_layernorm.weight", C, 0},       {"self_attn.q_proj.weight", H * hd, C},
      {"self_attn.k_proj.weight", K * hd, C}, {"self_attn.v_proj.weight", K * hd, C},
      {"self_attn.o_proj.weight", C, H * hd}, {"post_attention_layernorm.weight", C, 0},
      {"mlp.gate_proj.weight", F, C},         {"mlp.up_proj.weight", F, C},
      {"mlp.down_proj.weight", C, F},
  };
  char name[FSDP_MAX_NAME];
  for (int64_t l = 0; l < L; l++)
    for (int k = 0; k < 9; k++) {
      snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, blk[k].s);
      FSDP_CALL(FsdpHfLayoutAdd(m, name, name, blk[k].rows, blk[k].cols, 0));
    }
  FSDP_CALL(FsdpHfLayoutAdd(m, "model.norm.weight", "model.norm.weight", C, 0, 0));
  if (!tie) FSDP_CALL(FsdpHfLayoutAdd(m, "lm_head.weight", "lm_head.weight", V, C, 0));
  return FSDP_SUCCESS;
}
