/* convert.h: what a model family states about foreign files (Hugging Face
 * folders, llm.c checkpoints), for fsdp-ckpt's generic converters.
 *
 * A family knows its names, shapes, transposes and config keys; the
 * converter (lib/driver/ckpt_tool.c) knows the files: it opens them, checks a
 * family's layout against the parameter list of the family's model, and
 * streams one tensor at a time ([Note: streamed conversion] there).  So a
 * family owns all of its conversions without touching HDF5, safetensors or
 * MPI (the model layer's rule, model.h), and fsdp-ckpt never names a
 * family.  The family operations that produce these are in family.h.
 */
#ifndef FSDP_CONVERT_H
#define FSDP_CONVERT_H

#include <stdint.h>

#include "model/model.h"

/* ---- Hugging Face config.json ------------------------------------------- */

/* A config.json object (read from a folder, or being written), with the
 * path it is named by in messages.  The accessors below are what a family
 * reads and writes it with; the representation (Jansson) stays inside. */
typedef struct FsdpHfConfig_ *FsdpHfConfig;

/* Not collective.  Load path (usage error naming it when it is missing or
 * not JSON), or create an empty object to be written. */
int FsdpHfConfigLoad(const char *path, FsdpHfConfig *cfg);
int FsdpHfConfigCreate(const char *path, FsdpHfConfig *cfg);
/* Write the object to file (indented, keys in the order they were set). */
int FsdpHfConfigWrite(FsdpHfConfig cfg, const char *file);
void FsdpHfConfigDestroy(FsdpHfConfig *cfg);
const char *FsdpHfConfigPath(FsdpHfConfig cfg);

/* The string value of key, or NULL when absent or not a string. */
const char *FsdpHfConfigString(FsdpHfConfig cfg, const char *key);
/* Whether key is present and not null; present at all (null too). */
int FsdpHfConfigHas(FsdpHfConfig cfg, const char *key);
int FsdpHfConfigPresent(FsdpHfConfig cfg, const char *key);
/* The object value of key (borrowed: valid while cfg lives), or NULL when
 * absent or not an object. */
FsdpHfConfig FsdpHfConfigObject(FsdpHfConfig cfg, const char *key);
/* A non-negative integer field (def when absent or null and def >= 0; a
 * usage error naming the file and key otherwise). */
int FsdpHfConfigInt(FsdpHfConfig cfg, const char *key, int64_t def, int64_t *v);
/* A number (def when absent or null). */
int FsdpHfConfigReal(FsdpHfConfig cfg, const char *key, double def, double *v);
/* true/false (def when absent; a usage error for another type, null too). */
int FsdpHfConfigBool(FsdpHfConfig cfg, const char *key, int def, int *v);
/* A string that, when present, must be one of ok (NULL-ended); why says
 * what fsdp's model has instead. */
int FsdpHfConfigOneOf(FsdpHfConfig cfg, const char *key, const char *const *ok, const char *why);
/* A boolean that, when present, must be want. */
int FsdpHfConfigFlag(FsdpHfConfig cfg, const char *key, int want, const char *why);

int FsdpHfConfigSetInt(FsdpHfConfig cfg, const char *key, int64_t v);
int FsdpHfConfigSetReal(FsdpHfConfig cfg, const char *key, double v);
int FsdpHfConfigSetString(FsdpHfConfig cfg, const char *key, const char *s);
int FsdpHfConfigSetBool(FsdpHfConfig cfg, const char *key, int v);
int FsdpHfConfigSetNull(FsdpHfConfig cfg, const char *key);
/* key: a list of one string (transformers' "architectures"). */
int FsdpHfConfigSetStringList(FsdpHfConfig cfg, const char *key, const char *s);

/* ---- Hugging Face tensors ------------------------------------------------ */

#define FSDP_HF_NAME_MAX 256 /* safetensors tensor names, with NUL */

/* [Note: Hugging Face names] One parameter: its fsdp name and shape, its
 * Hugging Face name, and whether Hugging Face stores the matrix
 * transposed (GPT-2's Conv1D keeps [in, out]; fsdp is [out, in]). */
typedef struct {
  char fsdp[FSDP_MAX_NAME];
  char hf[FSDP_HF_NAME_MAX];
  int ndim;
  int64_t shape[2]; /* fsdp's shape; Hugging Face's is reversed when transposed */
  int transpose;
} FsdpHfTensor;

/* Every parameter of a described model as Hugging Face names it, and how
 * to read a folder saved by other classes of the same family. */
typedef struct {
  int n, cap;
  FsdpHfTensor *t; /* [n]; t[0] is the token embedding */
  /* A prefix a file may leave off every name ("transformer." of GPT-2:
   * GPT2Model saves without it), or NULL. */
  const char *optional_prefix;
  /* Tensors a file may hold that are not parameters (buffers such as
   * GPT-2's attention masks), by name suffix; NULL-ended, or NULL. */
  const char *const *ignored_suffixes;
  /* The output head's name when the model ties it to the embedding t[0]
   * (a file holding it must hold the same values), or NULL. */
  const char *tied_head;
} FsdpHfLayout;

/* Not collective.  An empty layout with room for n tensors; append with
 * FsdpHfLayoutAdd (rows x cols, cols 0: a vector). */
int FsdpHfLayoutCreate(int n, FsdpHfLayout *l);
int FsdpHfLayoutAdd(FsdpHfLayout *l, const char *fsdp, const char *hf, int64_t rows, int64_t cols,
                    int transpose);
void FsdpHfLayoutDestroy(FsdpHfLayout *l);

/* ---- llm.c checkpoints ---------------------------------------------------- */

#define FSDP_LLMC_HEADER_INTS 256 /* int32 header of every llm.c model file */

/* One tensor of an llm.c file, in file order: the fsdp parameter it is (its
 * whole element count), then `pad_rows` rows of `row` zero elements that
 * llm.c adds (GPT-2's vocabulary padded to Vp) and fsdp does not keep. */
typedef struct {
  char llmc[32];            /* llm.c's name: "qkvw" */
  int layer;                /* -1: not per layer */
  char name[FSDP_MAX_NAME]; /* fsdp's */
  int64_t numel;
  int64_t pad_rows, row, first_pad_row;
} FsdpLlmcTensor;

/* A file's layout from its header: element type and tensors in order. */
typedef struct {
  int version;
  int elem_bytes; /* 4: fp32, 2: bf16 */
  int n, cap; /* tensors filled, and room for (FsdpLlmcLayoutCreate's n) */
  FsdpLlmcTensor *t;
  /* the header's sizes in llm.c's words, for messages: "maxT 8, V 37 (Vp
   * 128), L 2, NH 2, C 12" */
  char sizes[160];
} FsdpLlmcLayout;

int FsdpLlmcLayoutCreate(int n, FsdpLlmcLayout *l);
void FsdpLlmcLayoutDestroy(FsdpLlmcLayout *l);
/* Elements of the file after its header (tensors and padding). */
int64_t FsdpLlmcLayoutNumel(const FsdpLlmcLayout *l);

#endif
