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

#endif
