/* json.c: the JSON writer (see json.h). */
#include "base/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

struct FsdpJson_ {
  char *text;
  size_t len, cap;
  int depth;                          /* open containers */
  char kind[FSDP_JSON_MAX_DEPTH];     /* '{' or '[' per open container */
  int members[FSDP_JSON_MAX_DEPTH];   /* values written in it so far */
  int top_values;                     /* values written at the top level */
  int err;                            /* first failure ([Note: JSON errors at the end]) */
  char why[256];
};

int FsdpJsonCreate(FsdpJson *out)
{
  *out = NULL;
  FsdpJson j = calloc(1, sizeof *j);
  FSDP_CHECK_ALLOC(j, sizeof *j);
  j->cap = 256;
  j->text = malloc(j->cap);
  if (!j->text) {
    free(j);
    FSDP_CHECK_ALLOC(NULL, (size_t)256);
  }
  j->text[0] = '\0';
  *out = j;
  return FSDP_SUCCESS;
}

int FsdpJsonDestroy(FsdpJson *pj)
{
  if (!pj || !*pj) return FSDP_SUCCESS;
  free((*pj)->text);
  free(*pj);
  *pj = NULL;
  return FSDP_SUCCESS;
}

static void Fail(FsdpJson j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void Fail(FsdpJson j, int code, const char *fmt, ...)
{
  if (j->err) return; /* the first failure is the cause */
  j->err = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->why, sizeof j->why, fmt, ap);
  va_end(ap);
}

static void Append(FsdpJson j, const char *s, size_t n)
{
  if (j->err) return;
  if (FsdpArrayReserve(&j->text, &j->cap, j->len + n + 1, 1)) {
    Fail(j, FSDP_ERR_MEM, "out of memory growing a JSON text to %zu bytes", j->len + n + 1);
    return;
  }
  memcpy(j->text + j->len, s, n);
  j->len += n;
  j->text[j->len] = '\0';
}

static void AppendStr(FsdpJson j, const char *s) { Append(j, s, strlen(s)); }

/* s as a JSON string: quote, backslash and the control characters escaped
 * (RFC 8259 §7); every other byte as it is. */
static void AppendQuoted(FsdpJson j, const char *s)
{
  Append(j, "\"", 1);
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    char esc[8];
    const char *e = NULL;
    switch (c) {
      case '"': e = "\\\""; break;
      case '\\': e = "\\\\"; break;
      case '\b': e = "\\b"; break;
      case '\f': e = "\\f"; break;
      case '\n': e = "\\n"; break;
      case '\r': e = "\\r"; break;
      case '\t': e = "\\t"; break;
      default:
        if (c < 0x20) {
          snprintf(esc, sizeof esc, "\\u%04x", c);
          e = esc;
        }
    }
    if (e) AppendStr(j, e);
    else Append(j, p, 1);
  }
  Append(j, "\"", 1);
}

/* The separator and key a value needs where it stands; 0 if the call is
 * misplaced (the failure is recorded). */
static int Place(FsdpJson j, const char *key)
{
  if (j->err) return 0;
  if (j->depth == 0) {
    if (key) {
      Fail(j, FSDP_ERR_INTERNAL, "JSON: key \"%s\" at the top level, outside any object", key);
      return 0;
    }
    if (j->top_values++) {
      Fail(j, FSDP_ERR_INTERNAL, "JSON: a second top-level value");
      return 0;
    }
    return 1;
  }
  int d = j->depth - 1;
  if (j->kind[d] == '{' && !key) {
    Fail(j, FSDP_ERR_INTERNAL, "JSON: a value without a key inside an object");
    return 0;
  }
  if (j->kind[d] == '[' && key) {
    Fail(j, FSDP_ERR_INTERNAL, "JSON: key \"%s\" inside an array", key);
    return 0;
  }
  if (j->members[d]++) AppendStr(j, ", ");
  if (key) {
    AppendQuoted(j, key);
    AppendStr(j, ": ");
  }
  return 1;
}

static void Begin(FsdpJson j, const char *key, char kind)
{
  if (!Place(j, key)) return;
  if (j->depth == FSDP_JSON_MAX_DEPTH) {
    Fail(j, FSDP_ERR_INTERNAL, "JSON: \"%s\" nests deeper than %d", key ? key : "(no key)",
         FSDP_JSON_MAX_DEPTH);
    return;
  }
  j->kind[j->depth] = kind;
  j->members[j->depth] = 0;
  j->depth++;
  Append(j, &kind, 1);
}

static void End(FsdpJson j, char kind)
{
  if (j->err) return;
  if (j->depth == 0 || j->kind[j->depth - 1] != kind) {
    Fail(j, FSDP_ERR_INTERNAL, "JSON: End%s without its Begin%s", kind == '{' ? "Object" : "Array",
         kind == '{' ? "Object" : "Array");
    return;
  }
  j->depth--;
  Append(j, kind == '{' ? "}" : "]", 1);
}

void FsdpJsonBeginObject(FsdpJson j, const char *key) { Begin(j, key, '{'); }
void FsdpJsonEndObject(FsdpJson j) { End(j, '{'); }
void FsdpJsonBeginArray(FsdpJson j, const char *key) { Begin(j, key, '['); }
void FsdpJsonEndArray(FsdpJson j) { End(j, '['); }

void FsdpJsonInt(FsdpJson j, const char *key, int64_t v)
{
  char buf[32];
  if (!Place(j, key)) return;
  snprintf(buf, sizeof buf, "%" PRId64, v);
  AppendStr(j, buf);
}

void FsdpJsonBool(FsdpJson j, const char *key, int v)
{
  if (!Place(j, key)) return;
  AppendStr(j, v ? "true" : "false");
}

void FsdpJsonUint(FsdpJson j, const char *key, uint64_t v)
{
  char buf[32];
  if (!Place(j, key)) return;
  snprintf(buf, sizeof buf, "%" PRIu64, v);
  AppendStr(j, buf);
}

void FsdpJsonReal(FsdpJson j, const char *key, double v)
{
  if (!Place(j, key)) return;
  if (!isfinite(v)) {
    AppendStr(j, "null");
    return;
  }
  /* the fewest digits that read back to v: 17 always do (IEEE double) */
  char buf[40];
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  AppendStr(j, buf);
}

void FsdpJsonString(FsdpJson j, const char *key, const char *v)
{
  if (!Place(j, key)) return;
  if (v) AppendQuoted(j, v);
  else AppendStr(j, "null");
}

int FsdpJsonFinish(FsdpJson j)
{
  if (!j->err && j->depth > 0)
    Fail(j, FSDP_ERR_INTERNAL, "JSON: %d container%s left open", j->depth, j->depth > 1 ? "s" : "");
  if (!j->err && j->top_values == 0) Fail(j, FSDP_ERR_INTERNAL, "JSON: nothing was written");
  if (j->err) FSDP_ERROR(j->err, "%s", j->why);
  return FSDP_SUCCESS;
}

const char *FsdpJsonText(FsdpJson j) { return j->text; }
