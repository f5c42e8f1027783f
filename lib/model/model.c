/* model.c: the model description's helpers and what every family shares: the
 * counter-based initial values and the parameter specs (model.h). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

void FsdpModelDescInit(FsdpModelDesc *d, const char *family, const char *preset)
{
  memset(d, 0, sizeof *d);
  snprintf(d->family, sizeof d->family, "%s", family ? family : "");
  snprintf(d->preset, sizeof d->preset, "%s", preset ? preset : "");
}

const FsdpModelAttr *FsdpModelDescFind(const FsdpModelDesc *d, const char *name)
{
  for (int i = 0; i < d->nattrs; i++)
    if (strcmp(d->attr[i].name, name) == 0) return &d->attr[i];
  return NULL;
}

/* The next free attribute slot for name, or an FSDP_ERR_INTERNAL: a model
 * that describes itself wrongly is a bug, not a user's mistake. */
static int NewAttr(FsdpModelDesc *d, const char *name, FsdpModelAttrType type, FsdpModelAttr **a)
{
  if (strlen(name) == 0 || strlen(name) >= FSDP_MODEL_NAME_MAX)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "model attribute name '%s' is empty or longer than %d characters",
               name, FSDP_MODEL_NAME_MAX - 1);
  if (FsdpModelDescFind(d, name))
    FSDP_ERROR(FSDP_ERR_INTERNAL, "model attribute %s is described twice", name);
  if (d->nattrs >= FSDP_MODEL_MAX_ATTRS)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "model %s has more than %d attributes (adding %s)", d->family,
               FSDP_MODEL_MAX_ATTRS, name);
  *a = &d->attr[d->nattrs++];
  memset(*a, 0, sizeof **a);
  snprintf((*a)->name, sizeof (*a)->name, "%s", name);
  (*a)->type = type;
  return FSDP_SUCCESS;
}

int FsdpModelDescAddInt(FsdpModelDesc *d, const char *name, int64_t v)
{
  FsdpModelAttr *a;
  FSDP_CALL(NewAttr(d, name, FSDP_MODEL_ATTR_INT, &a));
  a->i = v;
  return FSDP_SUCCESS;
}

int FsdpModelDescAddReal(FsdpModelDesc *d, const char *name, double v)
{
  FsdpModelAttr *a;
  FSDP_CALL(NewAttr(d, name, FSDP_MODEL_ATTR_REAL, &a));
  a->r = v;
  return FSDP_SUCCESS;
}

int FsdpModelDescAddString(FsdpModelDesc *d, const char *name, const char *s)
{
  if (strlen(s) >= FSDP_MODEL_STRING_MAX)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "model attribute %s: value longer than %d characters", name,
               FSDP_MODEL_STRING_MAX - 1);
  FsdpModelAttr *a;
  FSDP_CALL(NewAttr(d, name, FSDP_MODEL_ATTR_STRING, &a));
  snprintf(a->s, sizeof a->s, "%s", s);
  return FSDP_SUCCESS;
}

int64_t FsdpModelDescInt(const FsdpModelDesc *desc, const char *name)
{
  const FsdpModelAttr *a = FsdpModelDescFind(desc, name);
  return a && a->type == FSDP_MODEL_ATTR_INT ? a->i : 0;
}

int64_t FsdpModelDescNumStages(const FsdpModelDesc *desc, int wrap)
{
  int64_t L = FsdpModelDescInt(desc, "n_layer");
  if (wrap < 1) wrap = 1;
  return 2 + (L + wrap - 1) / wrap;
}

void FsdpModelAttrValueString(const FsdpModelAttr *a, char *buf, size_t size)
{
  switch (a->type) {
  case FSDP_MODEL_ATTR_INT: snprintf(buf, size, "%lld", (long long)a->i); break;
  case FSDP_MODEL_ATTR_REAL:
    /* a real that happens to be whole still reads as a real ("2.0"), so a
     * mismatch of type alone is visible in a message */
    snprintf(buf, size, isfinite(a->r) && a->r == floor(a->r) && fabs(a->r) < 1e15 ? "%.1f" : "%.17g",
             a->r);
    break;
  default: snprintf(buf, size, "\"%s\"", a->s); break;
  }
}

static int SameValue(const FsdpModelAttr *x, const FsdpModelAttr *y)
{
  if (x->type != y->type) return 0;
  switch (x->type) {
  case FSDP_MODEL_ATTR_INT: return x->i == y->i;
  case FSDP_MODEL_ATTR_REAL: return x->r == y->r;
  default: return strcmp(x->s, y->s) == 0;
  }
}

int FsdpModelDescCompare(const FsdpModelDesc *have, const FsdpModelDesc *want, const char *what,
                         char *msg, size_t size)
{
  if (strcmp(have->family, want->family) != 0) {
    snprintf(msg, size, "%s holds a %s model but the model is %s", what, have->family, want->family);
    return 1;
  }
  char hv[FSDP_MODEL_STRING_MAX + 32], wv[FSDP_MODEL_STRING_MAX + 32];
  for (int i = 0; i < want->nattrs; i++) {
    const FsdpModelAttr *w = &want->attr[i], *h = FsdpModelDescFind(have, w->name);
    FsdpModelAttrValueString(w, wv, sizeof wv);
    if (!h) {
      snprintf(msg, size, "%s lacks the model attribute %s (the model has %s %s)", what, w->name,
           w->name, wv);
      return 1;
    }
    if (!SameValue(h, w)) {
      FsdpModelAttrValueString(h, hv, sizeof hv);
      snprintf(msg, size, "%s has %s %s but the model has %s", what, w->name, hv, wv);
      return 1;
    }
  }
  for (int i = 0; i < have->nattrs; i++)
    if (!FsdpModelDescFind(want, have->attr[i].name)) {
      snprintf(msg, size, "%s has the model attribute %s, which the %s model does not have", what,
           have->attr[i].name, want->family);
      return 1;
    }
  return 0;
}

void FsdpModelDescFormat(const FsdpModelDesc *d, char *buf, size_t size)
{
  if (size == 0) return;
  buf[0] = '\0';
  size_t n = 0;
  char v[FSDP_MODEL_STRING_MAX + 32];
  for (int i = 0; i < d->nattrs && n < size; i++) {
    FsdpModelAttrValueString(&d->attr[i], v, sizeof v);
    n += (size_t)snprintf(buf + n, size - n, "%s%s %s", i ? ", " : "", d->attr[i].name, v);
  }
}

int FsdpModelCheckAttention(const FsdpKernelOps *k, FsdpAttention a)
{
  if (a != FSDP_ATTENTION_FLASH && a != FSDP_ATTENTION_NAIVE)
    FSDP_ERROR(FSDP_ERR_USAGE, "attention kind %d is neither flash nor naive", (int)a);
  if (a == FSDP_ATTENTION_FLASH && !k->flash_attention_forward)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -attention flash: the %s kernels have no flash attention",
               k->name);
  return FSDP_SUCCESS;
}

/* [Note: counter-based init] in model.h */
static uint64_t Mix64(uint64_t z)
{
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t HashName(const char *s)
{
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static double NormalAt(uint64_t key, int64_t index)
{
  uint64_t a = Mix64(key ^ Mix64(2 * (uint64_t)index));
  uint64_t b = Mix64(key ^ Mix64(2 * (uint64_t)index + 1));
  double u1 = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0,1) */
  double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void FsdpInitNormal(uint64_t seed, const char *name, double std, int64_t start, int64_t count,
                    float *out)
{
  uint64_t key = Mix64(seed ^ HashName(name));
  for (int64_t i = 0; i < count; i++) out[i] = (float)(std * NormalAt(key, start + i));
}

void FsdpParamSpecSet(FsdpParamSpec *s, const char *name, int ndim, int64_t d0, int64_t d1)
{
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->ndim = ndim;
  s->shape[0] = d0;
  s->shape[1] = d1;
}
