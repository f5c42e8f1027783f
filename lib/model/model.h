/* model.h: what a model is to the rest of fsdp (the model layer's interface).
 *
 * A model knows nothing of MPI, NCCL, the runtime or device memory.  It is
 * described to the others by
 *   - a description (FsdpModelDesc): a family name ("gpt2", later "llama")
 *     and typed attributes (n_layer, n_embd, ... for GPT), which checkpoints,
 *     run files, fsdp-plan and fsdp-ckpt store and compare without knowing
 *     any family, and
 *   - a table (below): its units, each a list of parameter specs with shapes
 *     and init rules, and its stages with forward/backward callbacks over
 *     unsharded tensors, which the driver hands to the runtime.
 * Layer rule: files under lib/model/ include only model, base and kernel
 * headers (tests/test_layers.sh fails the build otherwise).
 */
#ifndef FSDP_MODEL_H
#define FSDP_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* ---- description: family and typed attributes -------------------------- */

#define FSDP_MODEL_NAME_MAX 32  /* family, preset and attribute names, with NUL */
#define FSDP_MODEL_STRING_MAX 64
#define FSDP_MODEL_MAX_ATTRS 32

typedef enum { FSDP_MODEL_ATTR_INT, FSDP_MODEL_ATTR_REAL, FSDP_MODEL_ATTR_STRING } FsdpModelAttrType;

typedef struct {
  char name[FSDP_MODEL_NAME_MAX];
  FsdpModelAttrType type;
  int64_t i;                   /* FSDP_MODEL_ATTR_INT */
  double r;                    /* FSDP_MODEL_ATTR_REAL */
  char s[FSDP_MODEL_STRING_MAX]; /* FSDP_MODEL_ATTR_STRING */
} FsdpModelAttr;

typedef struct {
  char family[FSDP_MODEL_NAME_MAX]; /* "gpt2" */
  char preset[FSDP_MODEL_NAME_MAX]; /* -model value: "small", "gpt2", "custom" */
  int nattrs;                       /* attributes that set the shapes, in order */
  FsdpModelAttr attr[FSDP_MODEL_MAX_ATTRS];
} FsdpModelDesc;

/* Not collective.  An empty description of a family ("gpt2") and preset. */
void FsdpModelDescInit(FsdpModelDesc *d, const char *family, const char *preset);
/* Append a typed attribute.  A name that is empty, too long or already
 * there, or a full table, is FSDP_ERR_INTERNAL (the model's bug). */
int FsdpModelDescAddInt(FsdpModelDesc *d, const char *name, int64_t v);
int FsdpModelDescAddReal(FsdpModelDesc *d, const char *name, double v);
int FsdpModelDescAddString(FsdpModelDesc *d, const char *name, const char *s);
/* The attribute called name, or NULL. */
const FsdpModelAttr *FsdpModelDescFind(const FsdpModelDesc *d, const char *name);
/* 0 when have and want describe the same model (family, and every
 * attribute by name, type and value; the order and the preset do not
 * matter); else 1 with msg naming the first difference, worded for
 * have = what the file `what` holds and want = the model that runs:
 * "<what> has n_layer 4 but the model has 2", "<what> lacks the model
 * attribute ...", "<what> holds a llama model but the model is gpt2". */
int FsdpModelDescCompare(const FsdpModelDesc *have, const FsdpModelDesc *want, const char *what,
                         char *msg, size_t size);
/* An attribute's value as text: 12, 2.0, "gelu". */
void FsdpModelAttrValueString(const FsdpModelAttr *a, char *buf, size_t size);
/* "n_layer 2, n_embd 32, ..." in the description's order. */
void FsdpModelDescFormat(const FsdpModelDesc *d, char *buf, size_t size);

#endif
