/* convert.c: config.json access over Jansson and the layouts a family's
 * conversions fill (convert.h). */
#include "model/convert.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"

struct FsdpHfConfig_ {
  json_t *j;
  char path[4200];
  /* the objects FsdpHfConfigObject handed out (freed with the root) */
  struct FsdpHfConfig_ *children, *next;
};

static int NewConfig(const char *path, json_t *j, FsdpHfConfig *cfg)
{
  FsdpHfConfig c = calloc(1, sizeof *c);
  if (!c) {
    json_decref(j);
    FSDP_CHECK_ALLOC(c, sizeof *c);
  }
  c->j = j;
  snprintf(c->path, sizeof c->path, "%s", path);
  *cfg = c;
  return FSDP_SUCCESS;
}

int FsdpHfConfigLoad(const char *path, FsdpHfConfig *cfg)
{
  *cfg = NULL;
  json_error_t je;
  json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!j)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s (line %d): a Hugging Face model folder has a config.json",
               path, je.text, je.line);
  return NewConfig(path, j, cfg);
}

int FsdpHfConfigCreate(const char *path, FsdpHfConfig *cfg)
{
  *cfg = NULL;
  json_t *j = json_object();
  FSDP_CHECK_ALLOC(j, sizeof(json_t));
  return NewConfig(path, j, cfg);
}

int FsdpHfConfigWrite(FsdpHfConfig cfg, const char *file)
{
  if (json_dump_file(cfg->j, file, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)))
    FSDP_ERROR(FSDP_ERR_IO, "writing %s failed: %s", file, strerror(errno));
  return FSDP_SUCCESS;
}

void FsdpHfConfigDestroy(FsdpHfConfig *pcfg)
{
  if (!pcfg || !*pcfg) return;
  FsdpHfConfig c = *pcfg;
  while (c->children) {
    FsdpHfConfig k = c->children;
    c->children = k->next;
    free(k); /* borrowed json */
  }
  json_decref(c->j);
  free(c);
  *pcfg = NULL;
}

const char *FsdpHfConfigPath(FsdpHfConfig cfg) { return cfg->path; }

const char *FsdpHfConfigString(FsdpHfConfig cfg, const char *key)
{
  json_t *j = json_object_get(cfg->j, key);
  return json_is_string(j) ? json_string_value(j) : NULL;
}

int FsdpHfConfigHas(FsdpHfConfig cfg, const char *key)
{
  json_t *j = json_object_get(cfg->j, key);
  return j && !json_is_null(j);
}

int FsdpHfConfigPresent(FsdpHfConfig cfg, const char *key)
{
  return json_object_get(cfg->j, key) != NULL;
}

FsdpHfConfig FsdpHfConfigObject(FsdpHfConfig cfg, const char *key)
{
  json_t *j = json_object_get(cfg->j, key);
  if (!json_is_object(j)) return NULL;
  FsdpHfConfig k = calloc(1, sizeof *k);
  if (!k) return NULL;
  k->j = j;
  snprintf(k->path, sizeof k->path, "%s", cfg->path);
  k->next = cfg->children;
  cfg->children = k;
  return k;
}

int FsdpHfConfigInt(FsdpHfConfig cfg, const char *key, int64_t def, int64_t *v)
{
  json_t *j = json_object_get(cfg->j, key);
  if ((!j || json_is_null(j)) && def >= 0) {
    *v = def;
    return FSDP_SUCCESS;
  }
  if (!json_is_integer(j) || json_integer_value(j) < 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s is %s, expected a non-negative integer", cfg->path, key,
               j ? "not an integer" : "missing");
  *v = (int64_t)json_integer_value(j);
  return FSDP_SUCCESS;
}

int FsdpHfConfigReal(FsdpHfConfig cfg, const char *key, double def, double *v)
{
  json_t *j = json_object_get(cfg->j, key);
  if (!j || json_is_null(j)) {
    *v = def;
    return FSDP_SUCCESS;
  }
  if (!json_is_number(j)) FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s is not a number", cfg->path, key);
  *v = json_number_value(j);
  return FSDP_SUCCESS;
}

int FsdpHfConfigBool(FsdpHfConfig cfg, const char *key, int def, int *v)
{
  json_t *j = json_object_get(cfg->j, key);
  if (!j) {
    *v = def;
    return FSDP_SUCCESS;
  }
  if (!json_is_boolean(j))
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s is not true or false", cfg->path, key);
  *v = json_is_true(j);
  return FSDP_SUCCESS;
}

int FsdpHfConfigOneOf(FsdpHfConfig cfg, const char *key, const char *const *ok, const char *why)
{
  json_t *j = json_object_get(cfg->j, key);
  if (!j || json_is_null(j)) return FSDP_SUCCESS;
  for (int k = 0; json_is_string(j) && ok[k]; k++)
    if (strcmp(json_string_value(j), ok[k]) == 0) return FSDP_SUCCESS;
  FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s is %s%s%s; fsdp's model supports %s%s%s (%s)", cfg->path, key,
             json_is_string(j) ? "\"" : "", json_is_string(j) ? json_string_value(j) : "not a string",
             json_is_string(j) ? "\"" : "", ok[0], ok[1] ? " or " : "", ok[1] ? ok[1] : "", why);
}

int FsdpHfConfigFlag(FsdpHfConfig cfg, const char *key, int want, const char *why)
{
  json_t *j = json_object_get(cfg->j, key);
  if (!j || json_is_null(j)) return FSDP_SUCCESS;
  if (!json_is_boolean(j) || json_is_true(j) != want)
    FSDP_ERROR(FSDP_ERR_USAGE, "%s: %s must be %s for fsdp's model (%s)", cfg->path, key,
               want ? "true" : "false", why);
  return FSDP_SUCCESS;
}

static int Set(FsdpHfConfig cfg, const char *key, json_t *v)
{
  if (!v || json_object_set_new(cfg->j, key, v) != 0)
    FSDP_ERROR(FSDP_ERR_MEM, "%s: cannot set %s (out of memory)", cfg->path, key);
  return FSDP_SUCCESS;
}

int FsdpHfConfigSetInt(FsdpHfConfig cfg, const char *key, int64_t v)
{
  return Set(cfg, key, json_integer((json_int_t)v));
}
int FsdpHfConfigSetReal(FsdpHfConfig cfg, const char *key, double v)
{
  return Set(cfg, key, json_real(v));
}
int FsdpHfConfigSetString(FsdpHfConfig cfg, const char *key, const char *s)
{
  return Set(cfg, key, json_string(s));
}
int FsdpHfConfigSetBool(FsdpHfConfig cfg, const char *key, int v)
{
  return Set(cfg, key, json_boolean(v));
}
int FsdpHfConfigSetNull(FsdpHfConfig cfg, const char *key) { return Set(cfg, key, json_null()); }
int FsdpHfConfigSetStringList(FsdpHfConfig cfg, const char *key, const char *s)
{
  return Set(cfg, key, json_pack("[s]", s));
}

/* ---- layouts ---------------------------------------------------------------- */

int FsdpHfLayoutCreate(int n, FsdpHfLayout *l)
{
  memset(l, 0, sizeof *l);
  l->t = calloc((size_t)n + 1, sizeof *l->t);
  FSDP_CHECK_ALLOC(l->t, ((size_t)n + 1) * sizeof *l->t);
  l->cap = n;
  return FSDP_SUCCESS;
}

int FsdpHfLayoutAdd(FsdpHfLayout *l, const char *fsdp, const char *hf, int64_t rows, int64_t cols,
                    int transpose)
{
  if (l->n >= l->cap)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "Hugging Face layout: more than the %d tensors it was made for",
               l->cap);
  FsdpHfTensor *t = &l->t[l->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->fsdp, sizeof t->fsdp, "%s", fsdp);
  snprintf(t->hf, sizeof t->hf, "%s", hf);
  t->ndim = cols > 0 ? 2 : 1;
  t->shape[0] = rows;
  t->shape[1] = cols;
  t->transpose = transpose;
  return FSDP_SUCCESS;
}

void FsdpHfLayoutDestroy(FsdpHfLayout *l)
{
  free(l->t);
  l->t = NULL;
  l->n = l->cap = 0;
}

int FsdpLlmcLayoutCreate(int n, FsdpLlmcLayout *l)
{
  memset(l, 0, sizeof *l);
  FSDP_ASSERT(n >= 0);
  l->t = calloc((size_t)n + 1, sizeof *l->t);
  FSDP_CHECK_ALLOC(l->t, ((size_t)n + 1) * sizeof *l->t);
  l->cap = n;
  return FSDP_SUCCESS;
}

void FsdpLlmcLayoutDestroy(FsdpLlmcLayout *l)
{
  free(l->t);
  l->t = NULL;
  l->n = l->cap = 0;
}

int64_t FsdpLlmcLayoutNumel(const FsdpLlmcLayout *l)
{
  int64_t n = 0;
  for (int i = 0; i < l->n; i++) n += l->t[i].numel + l->t[i].pad_rows * l->t[i].row;
  return n;
}
