/* family.c: the model families' registry, the family-neutral model handle,
 * and the GPT-2 family's operations over gpt.h (see family.h). */
#include "model/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/gpt.h"

/* ---- GPT-2 ---------------------------------------------------------------- */

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
  FSDP_CALL(GptConfigFromDesc(desc, what, &c));
  return FSDP_SUCCESS;
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

const FsdpModelFamily FsdpGptFamily = {
    .name = GPT_FAMILY,
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
};

/* ---- registry ------------------------------------------------------------- */

/* The built-in families first, then those FsdpModelFamilyRegister adds
 * (a program's own model: examples/); g_family_names is -family's choices. */
#define MAX_FAMILIES 16
static const FsdpModelFamily *g_families[MAX_FAMILIES] = {&FsdpGptFamily, &FsdpLlamaFamily};
static int g_nfamilies = 2;
static const char *g_family_names[MAX_FAMILIES + 1] = {GPT_FAMILY, "llama", NULL};

const FsdpModelFamily *FsdpModelFamilyFind(const char *name)
{
  for (int i = 0; i < g_nfamilies; i++)
    if (strcmp(g_families[i]->name, name) == 0) return g_families[i];
  return NULL;
}

static const FsdpModelFamily *FamilyOfPreset(const char *preset);

int FsdpModelFamilyRegister(const FsdpModelFamily *f)
{
  if (!f || !f->name || !f->name[0] || strlen(f->name) >= FSDP_MODEL_NAME_MAX)
    FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: a family needs a name of 1 to %d "
               "characters", FSDP_MODEL_NAME_MAX - 1);
  if (FsdpModelFamilyFind(f->name))
    FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: a model family named '%s' is already "
               "registered", f->name);
  /* every operation but set_attention (optional: one kind) is called */
  if (!f->presets || !f->from_db || !f->check || !f->param_count || !f->activation_bytes ||
      !f->model_activation_bytes || !f->set_recompute || !f->matmul_shapes || !f->create ||
      !f->destroy || !f->table || !f->set_up || !f->set_batch || !f->loss || !f->logits ||
      !f->set_loss_scale)
    FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: family '%s' lacks an operation "
               "(FsdpModelFamily in model/family.h: all but set_attention are required)", f->name);
  /* -model names one family: a preset another family has is ambiguous */
  for (int i = 0; f->presets[i]; i++)
    if (FamilyOfPreset(f->presets[i]) || strcmp(f->presets[i], "custom") == 0)
      FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: family '%s': preset '%s' is already a "
                 "-model value", f->name, f->presets[i]);
  if (g_nfamilies == MAX_FAMILIES)
    FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: family '%s': %d families are "
               "registered, the most there can be", f->name, MAX_FAMILIES);
  g_family_names[g_nfamilies] = f->name;
  g_families[g_nfamilies++] = f;
  return FSDP_SUCCESS;
}

/* Every family's presets then "custom": -model's choices.  GPT's come
 * first, so the default (small) and the indices GPT had are unchanged. */
#define MAX_PRESETS 64
static const char *const *AllPresets(void)
{
  static const char *names[MAX_PRESETS + 2];
  int n = 0;
  for (int f = 0; f < g_nfamilies; f++)
    for (int i = 0; g_families[f]->presets[i] && n < MAX_PRESETS; i++)
      names[n++] = g_families[f]->presets[i];
  names[n++] = "custom";
  names[n] = NULL;
  return names;
}

static const FsdpModelFamily *FamilyOfPreset(const char *preset)
{
  for (int f = 0; f < g_nfamilies; f++)
    for (int i = 0; g_families[f]->presets[i]; i++)
      if (strcmp(g_families[f]->presets[i], preset) == 0) return g_families[f];
  return NULL;
}

int FsdpModelOptionsFromDb(FsdpOpts db, FsdpModelDesc *desc)
{
  const char *const *names = AllPresets();
  int idx = 0, fidx = 0;
  FSDP_CALL(FsdpOptsGetEnum(db, "Model", "model",
                            "model preset (custom: -family and its size options)", names, 1,
                            &idx));
  FSDP_CALL(FsdpOptsGetEnum(db, "Model", "family",
                            "model family of -model custom: gpt2 (GPT-2), llama (Llama 3)",
                            g_family_names, 0, &fidx));
  const char *preset = names[idx];
  int custom = strcmp(preset, "custom") == 0;
  const FsdpModelFamily *fam = custom ? g_families[fidx] : FamilyOfPreset(preset);
  if (!custom && FsdpOptsHas(db, "family") && fam != g_families[fidx])
    FSDP_ERROR(FSDP_ERR_USAGE, "option -family %s: -model %s is a %s model (-family applies to "
               "-model custom)", g_family_names[fidx], preset, fam->name);
  FSDP_CALL(fam->from_db(db, custom ? NULL : preset, desc));
  snprintf(desc->preset, sizeof desc->preset, "%s", preset);
  if (FsdpOptsHelpRequested(db))
    for (int f = 0; f < g_nfamilies; f++) {
      FsdpModelDesc other;
      if (g_families[f] != fam) (void)g_families[f]->from_db(db, NULL, &other);
    }
  return FSDP_SUCCESS;
}

int64_t FsdpModelDescInt(const FsdpModelDesc *desc, const char *name)
{
  const FsdpModelAttr *a = FsdpModelDescFind(desc, name);
  return a && a->type == FSDP_MODEL_ATTR_INT ? a->i : 0;
}

int FsdpModelDescCheck(const FsdpModelDesc *desc, const char *what)
{
  const FsdpModelFamily *fam = FsdpModelFamilyFind(desc->family);
  if (!fam) {
    char known[256] = "";
    for (int i = 0; i < g_nfamilies; i++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
               g_family_names[i]);
    FSDP_ERROR(FSDP_ERR_USAGE, "%s holds a model of family '%s', which fsdp does not know "
               "(known: %s)", what, desc->family, known);
  }
  FSDP_CALL(fam->check(desc, what));
  return FSDP_SUCCESS;
}

int64_t FsdpModelDescNumStages(const FsdpModelDesc *desc, int wrap)
{
  int64_t L = FsdpModelDescInt(desc, "n_layer");
  if (wrap < 1) wrap = 1;
  return 2 + (L + wrap - 1) / wrap;
}

int64_t FsdpModelDescParamCount(const FsdpModelDesc *desc)
{
  const FsdpModelFamily *fam = FsdpModelFamilyFind(desc->family);
  return fam ? fam->param_count(desc) : 0;
}

/* ---- the family-neutral handle -------------------------------------------- */

struct FsdpModel_ {
  const FsdpModelFamily *fam;
  void *impl;
};

int FsdpModelCreate(const FsdpModelDesc *desc, int wrap, int B, int T, const FsdpKernelOps *ops,
                    uint64_t seed, FsdpModel *out)
{
  *out = NULL;
  FSDP_CALL(FsdpModelDescCheck(desc, "the model description"));
  FsdpModel m = calloc(1, sizeof *m);
  FSDP_CHECK_ALLOC(m, sizeof *m);
  m->fam = FsdpModelFamilyFind(desc->family);
  int err = m->fam->create(desc, wrap, B, T, ops, seed, &m->impl);
  if (err) {
    free(m);
    return err;
  }
  *out = m;
  return FSDP_SUCCESS;
}

int FsdpModelDestroy(FsdpModel *pm)
{
  if (!pm || !*pm) return FSDP_SUCCESS;
  FsdpModel m = *pm;
  int err = m->fam->destroy(&m->impl);
  free(m);
  *pm = NULL;
  return err;
}

const FsdpModelTable *FsdpModelGetTable(FsdpModel m) { return m->fam->table(m->impl); }
int FsdpModelSetUp(FsdpModel m) { return m->fam->set_up(m->impl); }
int FsdpModelSetRecompute(FsdpModel m, int recompute)
{
  return m->fam->set_recompute(m->impl, recompute);
}
int FsdpModelSetAttention(FsdpModel m, FsdpAttention attention)
{
  if (!m->fam->set_attention) return FSDP_SUCCESS;
  return m->fam->set_attention(m->impl, attention);
}
uint64_t FsdpModelActivationBytes(FsdpModel m) { return m->fam->model_activation_bytes(m->impl); }

int FsdpModelDescMatmulShapes(const FsdpModelDesc *desc, int64_t shape[][2], int max)
{
  const FsdpModelFamily *fam = FsdpModelFamilyFind(desc->family);
  return fam ? fam->matmul_shapes(desc, shape, max) : 0;
}

uint64_t FsdpModelDescActivationBytes(const FsdpModelDesc *desc, int wrap, int B, int T,
                                      int recompute, FsdpAttention attention)
{
  const FsdpModelFamily *fam = FsdpModelFamilyFind(desc->family);
  return fam ? fam->activation_bytes(desc, wrap, B, T, recompute, attention) : 0;
}
int FsdpModelSetBatch(FsdpModel m, const int *inputs, const int *targets)
{
  return m->fam->set_batch(m->impl, inputs, targets);
}
double FsdpModelLoss(FsdpModel m) { return m->fam->loss(m->impl); }
int FsdpModelLogits(FsdpModel m, int b, int t, float *out)
{
  return m->fam->logits(m->impl, b, t, out);
}
void FsdpModelSetLossScale(FsdpModel m, float scale) { m->fam->set_loss_scale(m->impl, scale); }
const FsdpModelFamily *FsdpModelGetFamily(FsdpModel m) { return m->fam; }
void *FsdpModelImpl(FsdpModel m) { return m->impl; }
