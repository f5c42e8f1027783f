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

#include "kernels/kernels.h"

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
/* An int attribute of a description (n_layer, seq_len, vocab_size, ...);
 * 0 when absent (descriptions checked by their family have them). */
int64_t FsdpModelDescInt(const FsdpModelDesc *desc, const char *name);
/* The stages of the table a model of desc registers with -wrap blocks per
 * unit: the root's embedding stage, one stage per unit of at most wrap
 * blocks, the root's head stage (every family's table has that shape:
 * the decoder skeleton's, transformer.h). */
int64_t FsdpModelDescNumStages(const FsdpModelDesc *desc, int wrap);
/* An attribute's value as text: 12, 2.0, "gelu". */
void FsdpModelAttrValueString(const FsdpModelAttr *a, char *buf, size_t size);
/* "n_layer 2, n_embd 32, ..." in the description's order. */
void FsdpModelDescFormat(const FsdpModelDesc *d, char *buf, size_t size);
/* [Note: flash attention] Whether kernel table k can run attention kind a
 * (usage error naming -attention otherwise); every family's set-attention
 * calls it before any buffer is sized. */
int FsdpModelCheckAttention(const FsdpKernelOps *k, FsdpAttention a);

/* ---- table: units, parameter specs, stages ------------------------------ */

#define FSDP_MAX_NDIM 4
#define FSDP_MAX_NAME 96      /* parameter names, with NUL */
#define FSDP_UNIT_NAME_MAX 64 /* unit names, with NUL */

/* One parameter: a name unique in its unit and a shape (ndim 0: a scalar). */
typedef struct {
  char name[FSDP_MAX_NAME];
  int ndim;
  int64_t shape[FSDP_MAX_NDIM];
} FsdpParamSpec;

/* What a stage callback sees: the unit's unsharded parameters and
 * gradients, one pointer per parameter in the unit's spec order, in the
 * memory of the table's kernels (host or device). */
typedef struct {
  int unit;
  float *const *param; /* param[i]: parameter i, full logical shape */
  float *const *grad;  /* grad[i]: its gradient (accumulate into it) */
} FsdpUnitTensors;

/* model: the table's ctx; stage: index in the table's stages. */
typedef int (*FsdpStageFn)(void *model, int stage, const FsdpUnitTensors *t);

/* Initial value rule: fill out[0..count) with the initial values of
 * elements [start, start + count) of parameter spec (flat index in its
 * full logical shape), in host memory.  Must be a pure function of (seed,
 * name, index): each rank fills only the pieces of its own shard. */
typedef int (*FsdpInitFn)(void *model, const FsdpParamSpec *spec, int64_t start,
                          int64_t count, float *out);

/* [Note: counter-based init] Each element's value is a pure function of
 * (seed, parameter name, element index): the name is hashed (FNV-1a) and
 * mixed with the seed into a key, and splitmix64 of (key, index) gives two
 * uniforms for a Box-Muller normal.  No state is carried from element to
 * element, so a rank can fill any slice of any parameter -- its shard --
 * and get the values a one-rank run gets.  Every family draws its normal
 * initial values this way. */
void FsdpInitNormal(uint64_t seed, const char *name, double std, int64_t start, int64_t count,
                    float *out);

/* A spec of ndim (0-2) dimensions d0 x d1. */
void FsdpParamSpecSet(FsdpParamSpec *s, const char *name, int ndim, int64_t d0, int64_t d1);

/* Whether AdamW applies weight decay to the parameter of that name. */
typedef int (*FsdpDecayRule)(const char *name, int decay_embeddings);

/* A unit: the parameters sharded, gathered and reduced together.  At most
 * one unit of a table is the root (it stays unsharded from its first
 * forward stage to the end of backward, so it may own several stages). */
typedef struct {
  char name[FSDP_UNIT_NAME_MAX]; /* "root", "h.0", "h.0-1" */
  int is_root;
  int nparams;
  const FsdpParamSpec *params; /* [nparams], owned by the model */
} FsdpModelUnit;

/* A stage, in forward order: the runtime runs forward over stages in
 * order and backward in reverse, with `unit` unsharded.  The stages of a
 * non-root unit are consecutive. */
typedef struct {
  int unit; /* index in the table's units */
  FsdpStageFn forward, backward;
  /* Optional ([Note: activation recomputation] in runtime/fsdp.h): with
   * -recompute 1 the runtime calls it in backward, with the unit
   * unsharded, right before `backward`: the stage computes its forward
   * again from the stage input it kept.  NULL: the stage keeps what its
   * backward needs. */
  FsdpStageFn recompute;
} FsdpModelStage;

/* [Note: the model table] All a runtime, an optimizer and a driver need to
 * train a model, and nothing that needs them: shapes, callbacks over
 * unsharded tensors, and the kernels those callbacks launch (whose alloc,
 * zero and copy entries are the model's only way to device memory).  Built
 * by the model (GptModelTable), read-only afterwards and valid while the
 * model lives; FsdpRuntimeAddModel registers it, unit i of the table
 * becoming unit i of the runtime. */
typedef struct {
  FsdpModelDesc desc;           /* family and attributes, for the files */
  void *ctx;                    /* first argument of every callback */
  int nunits;
  const FsdpModelUnit *units;   /* [nunits] */
  int nstages;
  const FsdpModelStage *stages; /* [nstages], forward order */
  FsdpInitFn init;              /* initial values (FsdpRuntimeInitShards) */
  FsdpDecayRule decays;         /* weight decay rule (FsdpOptimCreate) */
  const FsdpKernelOps *kernels; /* what the stages run on */
} FsdpModelTable;

#endif
