/* safetensors.h: Hugging Face safetensors files, read and written tensor by
 * tensor (fsdp-ckpt import-hf / export-hf).
 *
 * Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
 * unsigned header length N, N bytes of JSON (an object; a key per tensor
 * whose value is {"dtype": "F32"|"BF16"|"F16"|..., "shape": [d0, ...],
 * "data_offsets": [begin, end]}, plus an optional "__metadata__" object of
 * strings), then the data: each tensor row-major little-endian at
 * [8 + N + begin, 8 + N + end).
 *
 * [Note: safetensors validation] The header is parsed with Jansson (never by
 * hand) and checked before any tensor is read, the way the reference
 * implementation checks it: N fits in the file; the JSON is an object
 * without duplicate keys; every tensor has a dtype this reader knows, a
 * shape of non-negative integers and two offsets with begin <= end; end -
 * begin is the shape's element count times the dtype's size; taken in
 * offset order the tensors tile the data without gaps or overlaps and end
 * exactly at the end of the file (shorter: truncated; longer: trailing
 * bytes).  Every defect is FSDP_ERR_USAGE with one message naming the file,
 * the tensor (when there is one) and the problem.
 *
 * [Note: streaming conversion] Nothing here holds more than the caller asks
 * for: FsdpStRead converts any element range of one tensor straight into
 * the caller's fp32 buffer (bf16 and f16 widen exactly, in place), and the
 * writer takes fp32 values in any pieces, converting through a fixed
 * buffer.  So a converter's peak memory is what it chooses to hold (one
 * tensor), never the file.
 */
#ifndef FSDP_SAFETENSORS_H
#define FSDP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

#define FSDP_ST_MAX_NDIM 8
#define FSDP_ST_NAME_MAX 256 /* tensor names, with NUL */

typedef struct {
  char name[FSDP_ST_NAME_MAX];
  FsdpDtype dtype; /* F32, BF16 or F16 */
  int ndim;
  int64_t shape[FSDP_ST_MAX_NDIM];
  int64_t numel;
  int64_t offset; /* absolute byte offset of the data in the file */
  int64_t bytes;
} FsdpStTensor;

typedef struct FsdpStFile_ *FsdpStFile;

/* Not collective.  Open path and validate its header ([Note: safetensors
 * validation]); any defect is FSDP_ERR_USAGE naming path, tensor and
 * problem.  Tensors are listed in offset order. */
int FsdpStOpen(const char *path, FsdpStFile *f);
int FsdpStClose(FsdpStFile *f);
const char *FsdpStPath(FsdpStFile f);
int FsdpStNumTensors(FsdpStFile f);
const FsdpStTensor *FsdpStTensorAt(FsdpStFile f, int i);
/* The tensor called name, or NULL. */
const FsdpStTensor *FsdpStFind(FsdpStFile f, const char *name);
/* Elements [start, start + count) of t (flat, row-major) as fp32 into out:
 * F32 copied, BF16 and F16 widened exactly.  A short read (the file changed
 * since it was opened) is FSDP_ERR_USAGE naming file and tensor. */
int FsdpStRead(FsdpStFile f, const FsdpStTensor *t, int64_t start, int64_t count, float *out);
/* "F32", "BF16", "F16" */
const char *FsdpStDtypeName(FsdpDtype dt);

/* ---- a model folder: model.safetensors or a sharded set --------------- */

/* [Note: safetensors sets] A Hugging Face folder holds either one
 * model.safetensors or shards listed by model.safetensors.index.json
 * ({"weight_map": {tensor: file}}).  A set opens every file it names (each
 * validated as above) and checks the index against them: each tensor of
 * the map is in its file, no file holds a tensor the map does not send
 * there, no name is in two files. */
typedef struct FsdpStSet_ *FsdpStSet;

/* Not collective.  dir: the folder. */
int FsdpStSetOpen(const char *dir, FsdpStSet *s);
int FsdpStSetClose(FsdpStSet *s);
/* The tensor called name and its file, or *t = NULL. */
void FsdpStSetFind(FsdpStSet s, const char *name, FsdpStFile *f, const FsdpStTensor **t);
int FsdpStSetNumTensors(FsdpStSet s);
/* Tensor i over all files (files in index order, tensors in offset order). */
void FsdpStSetTensorAt(FsdpStSet s, int i, FsdpStFile *f, const FsdpStTensor **t);
int FsdpStSetNumFiles(FsdpStSet s);
/* The dtype of the set's tensors when they all share one, else -1. */
int FsdpStSetDtype(FsdpStSet s);

/* ---- writer -------------------------------------------------------------- */

typedef struct {
  const char *name;
  int ndim;
  const int64_t *shape;
} FsdpStDecl;

typedef struct FsdpStWriter_ *FsdpStWriter;

/* Not collective.  Create path (truncating it: callers write a temporary
 * name and publish it) for the n tensors decl (names unique), all of dtype
 * dt (FP32 or BF16: fp32 values are rounded to nearest even), in that
 * order; metadata: "__metadata__" key/value strings (pairs, NULL-ended;
 * may be NULL).  The header is written now. */
int FsdpStWriterCreate(const char *path, FsdpDtype dt, int n, const FsdpStDecl *decl,
                       const char *const *metadata, FsdpStWriter *w);
/* Append the next count fp32 values (tensors in declaration order, each
 * row-major; pieces of any size). */
int FsdpStWriterPut(FsdpStWriter w, const float *data, int64_t count);
/* Check that every declared element was written, flush, fsync, close.
 * FsdpStWriterAbort closes without the checks (after an error). */
int FsdpStWriterClose(FsdpStWriter *w);
void FsdpStWriterAbort(FsdpStWriter *w);

#endif
