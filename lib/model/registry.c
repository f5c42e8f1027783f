/* registry.c: the model families' registry and the family-neutral model
 * handle (family.h). */
#include "model/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ---- registry ------------------------------------------------------------- */

/* The built-in families, one line each: the table each family's folder
 * defines (lib/model/<name>/family.c; [Note: adding a family] in family.h).
 * The first is -family's default. */
#define FSDP_BUILTIN_FAMILIES(X) \
  X(FsdpGptFamily)               \
  X(FsdpLlamaFamily)

#define DECLARE(f) extern const FsdpModelFamily f;
FSDP_BUILTIN_FAMILIES(DECLARE)
#undef DECLARE
#define ADDRESS(f) &f,
static const FsdpModelFamily *const kBuiltin[] = {FSDP_BUILTIN_FAMILIES(ADDRESS)};
#undef ADDRESS
#define NBUILTIN ((int)(sizeof kBuiltin / sizeof kBuiltin[0]))

/* Families registered at run time (FsdpModelFamilyRegister). */
#define MAX_REGISTERED 16
static const FsdpModelFamily *registered[MAX_REGISTERED];
static int nregistered;

int FsdpModelNumFamilies(void) { return NBUILTIN + nregistered; }

const FsdpModelFamily *FsdpModelFamilyAt(int i)
{
  if (i < 0 || i >= NBUILTIN + nregistered) return NULL;
  return i < NBUILTIN ? kBuiltin[i] : registered[i - NBUILTIN];
}
#define NFAMILIES FsdpModelNumFamilies()

const FsdpModelFamily *FsdpModelFamilyFind(const char *name)
{
  for (int i = 0; i < NFAMILIES; i++)
    if (strcmp(FsdpModelFamilyAt(i)->name, name) == 0) return FsdpModelFamilyAt(i);
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
  if (!f->presets || !f->from_db || !f->check || !f->param_count || !f->activation_bytes ||
      !f->model_activation_bytes || !f->set_recompute || !f->matmul_shapes || !f->create ||
      !f->destroy || !f->table || !f->set_up || !f->set_batch || !f->loss || !f->logits ||
      !f->set_loss_scale)
    FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: family '%s' lacks a model operation "
               "(family.h: only set_attention and the conversions may be NULL)", f->name);
  /* the conversions come whole or not at all: fsdp-ckpt calls every
   * operation of a format it finds one of (import and export alike) */
  int hf = !!f->hf_layout + !!f->hf_read_config + !!f->hf_write_config + !!f->hf_model_type +
           !!f->hf_architecture;
  int llmc = !!f->llmc_read + !!f->llmc_write + !!f->llmc_magic;
  if ((hf != 0 && hf != 5) || (llmc != 0 && llmc != 3))
    FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: family '%s' gives part of a conversion "
               "(family.h: hf_layout, hf_read_config, hf_write_config, hf_model_type and "
               "hf_architecture together; llmc_read, llmc_write and llmc_magic together)", f->name);
  /* -model names one family: a preset another family has is ambiguous */
  for (int i = 0; f->presets[i]; i++)
    if (FamilyOfPreset(f->presets[i]) || strcmp(f->presets[i], "custom") == 0)
      FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: family '%s': preset '%s' is already a "
                 "-model value", f->name, f->presets[i]);
  if (nregistered >= MAX_REGISTERED)
    FSDP_ERROR(FSDP_ERR_USAGE, "FsdpModelFamilyRegister: more than %d families registered "
               "(adding '%s')", MAX_REGISTERED, f->name);
  registered[nregistered++] = f;
  return FSDP_SUCCESS;
}

/* Family names, NULL terminated: -family's choices. */
static const char *const *FamilyNames(void)
{
  /* room for every family there can be: no name is ever left out */
  static const char *names[NBUILTIN + MAX_REGISTERED + 1];
  int n = 0;
  for (int i = 0; i < NFAMILIES; i++) names[n++] = FsdpModelFamilyAt(i)->name;
  names[n] = NULL;
  return names;
}

/* "gpt2, llama": every family's name, for messages. */
static void FamilyList(char *buf, size_t size)
{
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < NFAMILIES && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", FsdpModelFamilyAt(i)->name);
}

/* Every family's presets then "custom": -model's choices.  GPT's come
 * first, so the default (small) and the indices GPT had are unchanged. */
#define MAX_PRESETS 64
static const char *const *AllPresets(void)
{
  static const char *names[MAX_PRESETS + 2];
  int n = 0;
  for (int f = 0; f < NFAMILIES; f++)
    for (int i = 0; FsdpModelFamilyAt(f)->presets[i] && n < MAX_PRESETS; i++)
      names[n++] = FsdpModelFamilyAt(f)->presets[i];
  names[n++] = "custom";
  names[n] = NULL;
  return names;
}

static const FsdpModelFamily *FamilyOfPreset(const char *preset)
{
  for (int f = 0; f < NFAMILIES; f++)
    for (int i = 0; FsdpModelFamilyAt(f)->presets[i]; i++)
      if (strcmp(FsdpModelFamilyAt(f)->presets[i], preset) == 0) return FsdpModelFamilyAt(f);
  return NULL;
}

int FsdpModelOptionsFromDb(FsdpOpts db, FsdpModelDesc *desc)
{
  const char *const *names = AllPresets(), *const *families = FamilyNames();
  int idx = 0, fidx = 0;
  FSDP_CALL(FsdpOptsGetEnum(db, "Model", "model",
                            "model preset (custom: -family and its size options)", names, 1,
                            &idx));
  /* "model family of -model custom: gpt2 (GPT-2), llama (Llama 3)" */
  char help[1024];
  size_t n = (size_t)snprintf(help, sizeof help, "model family of -model custom: ");
  for (int f = 0; f < NFAMILIES && n < sizeof help; f++)
    n += (size_t)snprintf(help + n, sizeof help - n, "%s%s (%s)", f ? ", " : "",
                          FsdpModelFamilyAt(f)->name,
                          FsdpModelFamilyAt(f)->title ? FsdpModelFamilyAt(f)->title
                                                      : FsdpModelFamilyAt(f)->name);
  FSDP_CALL(FsdpOptsGetEnum(db, "Model", "family", help, families, 0, &fidx));
  const char *preset = names[idx];
  int custom = strcmp(preset, "custom") == 0;
  const FsdpModelFamily *fam = custom ? FsdpModelFamilyAt(fidx) : FamilyOfPreset(preset);
  if (!custom && FsdpOptsHas(db, "family") && fam != FsdpModelFamilyAt(fidx))
    FSDP_ERROR(FSDP_ERR_USAGE, "option -family %s: -model %s is a %s model (-family applies to "
               "-model custom)", families[fidx], preset, fam->name);
  FSDP_CALL(fam->from_db(db, custom ? NULL : preset, desc));
  snprintf(desc->preset, sizeof desc->preset, "%s", preset);
  if (FsdpOptsHelpRequested(db))
    for (int f = 0; f < NFAMILIES; f++) {
      FsdpModelDesc other;
      if (FsdpModelFamilyAt(f) != fam) (void)FsdpModelFamilyAt(f)->from_db(db, NULL, &other);
    }
  return FSDP_SUCCESS;
}

int FsdpModelDescCheck(const FsdpModelDesc *desc, const char *what)
{
  const FsdpModelFamily *fam = FsdpModelFamilyFind(desc->family);
  if (!fam) {
    char known[512];
    FamilyList(known, sizeof known);
    FSDP_ERROR(FSDP_ERR_USAGE, "%s holds a model of family '%s', which fsdp does not know "
               "(known: %s)", what, desc->family, known);
  }
  FSDP_CALL(fam->check(desc, what));
  return FSDP_SUCCESS;
}

void FsdpModelDescTrainOptions(const FsdpModelDesc *d, char *buf, size_t size)
{
  size_t n = (size_t)snprintf(buf, size, "-model custom");
  if (strcmp(d->family, FsdpModelFamilyAt(0)->name) != 0 && n < size)
    n += (size_t)snprintf(buf + n, size - n, " -family %s", d->family);
  for (int k = 0; k < d->nattrs && n < size; k++) {
    char v[80];
    FsdpModelAttrValueString(&d->attr[k], v, sizeof v);
    n += (size_t)snprintf(buf + n, size - n, " -%s %s", d->attr[k].name, v);
  }
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
void *FsdpModelImpl(FsdpModel m) { return m->impl; }
