/* flatparam.c: the FlatParameter layout of one unit (see flatparam.h).
 *
 * Everything here is metadata (a few hundred bytes per unit): offsets of
 * the parameters in the flat buffer and, for every shard rank of the
 * group, the pieces of parameters that lie in its shard.  The buffers
 * themselves belong to the runtime. */
#include "runtime/flatparam.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct FlatParam_ {
  int nparams;
  FsdpParamSpec *specs; /* [nparams], copies */
  int64_t *offset;      /* [nparams + 1]; offset[nparams] = psi */
  int64_t psi, padded, shard_numel;
  int F, shard_rank;
  /* Pieces of all shard ranks, rank by rank: shard r owns
   * pieces[piece_start[r] .. piece_start[r + 1]). */
  FlatParamPiece *pieces;
  int *piece_start; /* [F + 1] */
};

int64_t FlatParamSpecNumel(const FsdpParamSpec *spec)
{
  if (!spec || spec->ndim < 0 || spec->ndim > FSDP_MAX_NDIM) return -1;
  int64_t n = 1;
  for (int d = 0; d < spec->ndim; d++) {
    int64_t s = spec->shape[d];
    if (s < 0) return -1;
    if (s != 0 && n > INT64_MAX / s) return -1; /* overflow */
    n *= s;
  }
  return n;
}

/* Reject specs a model could only produce by mistake, naming the parameter. */
static int FlatparamCheckSpec(const FsdpParamSpec *s, int i)
{
  size_t len = strnlen(s->name, FSDP_MAX_NAME);
  if (len == 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "FlatParam: parameter %d has an empty name", i);
  if (len == FSDP_MAX_NAME)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: the name of parameter %d (%.40s...) is not "
               "terminated within %d characters",
               i, s->name, FSDP_MAX_NAME);
  if (s->ndim < 0 || s->ndim > FSDP_MAX_NDIM)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: parameter %d (%s) has ndim %d; it must be in "
               "0..%d",
               i, s->name, s->ndim, FSDP_MAX_NDIM);
  for (int d = 0; d < s->ndim; d++)
    if (s->shape[d] < 0)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "FlatParam: parameter %d (%s) has dimension %d of size "
                 "%lld; sizes must be >= 0",
                 i, s->name, d, (long long)s->shape[d]);
  if (FlatParamSpecNumel(s) < 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: parameter %d (%s) has more elements than fit in "
               "64 bits",
               i, s->name);
  return FSDP_SUCCESS;
}

typedef struct {
  const char *name;
  int index;
} NamedIndex;

static int CompareNamedIndex(const void *a, const void *b)
{
  const NamedIndex *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Parameters are addressed by name (FlatParamFind, checkpoints), so a
 * name may appear once.  Sorted, not compared pairwise: a unit of -wrap
 * blocks holds 12 * wrap parameters (fsdp-plan -wrap 100000 -n_layer
 * 100000: 1.2 million), where pairs took minutes. */
static int FlatparamCheckNamesUnique(const FsdpParamSpec *specs, int nparams)
{
  if (nparams < 2) return FSDP_SUCCESS;
  NamedIndex *by_name = malloc((size_t)nparams * sizeof *by_name);
  FSDP_CHECK_ALLOC(by_name, (size_t)nparams * sizeof *by_name);
  for (int i = 0; i < nparams; i++) by_name[i] = (NamedIndex){specs[i].name, i};
  qsort(by_name, (size_t)nparams, sizeof *by_name, CompareNamedIndex);
  int first = -1, second = -1;
  for (int k = 1; k < nparams && first < 0; k++)
    if (strcmp(by_name[k - 1].name, by_name[k].name) == 0) {
      first = by_name[k - 1].index;
      second = by_name[k].index;
    }
  free(by_name);
  if (first >= 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: parameter name %s is registered twice (parameters %d and %d)",
               specs[first].name, first, second);
  return FSDP_SUCCESS;
}

/* Cut parameter i ([off, off + n) of the flat buffer) at shard boundaries
 * and emit one piece per shard it touches.  With count == NULL it only
 * counts pieces per shard (first pass). */
static void FlatparamCut(const struct FlatParam_ *fp, int i, int *count,
                          int *fill)
{
  int64_t off = fp->offset[i], n = fp->offset[i + 1] - off,
          S = fp->shard_numel;
  if (n == 0) return; /* zero-element parameters own no elements */
  int r0 = (int)(off / S), r1 = (int)((off + n - 1) / S);
  for (int r = r0; r <= r1; r++) {
    int64_t lo = off > (int64_t)r * S ? off : (int64_t)r * S;
    int64_t hi = off + n < (int64_t)(r + 1) * S ? off + n : (int64_t)(r + 1) * S;
    if (count) {
      count[r]++;
    } else {
      FlatParamPiece *p = &fp->pieces[fp->piece_start[r] + fill[r]++];
      p->param = i;
      p->param_offset = lo - off;
      p->count = hi - lo;
      p->shard_offset = lo - (int64_t)r * S;
    }
  }
}

int FlatParamCreate(const FsdpParamSpec *specs, int nparams, int F,
                    int shard_rank, FlatParam *out)
{
  FSDP_ASSERT(out != NULL);
  *out = NULL;
  if (F < 1)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: sharding factor %d must be >= 1", F);
  if (shard_rank < 0 || shard_rank >= F)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: shard rank %d is outside 0..%d (sharding factor "
               "%d)",
               shard_rank, F - 1, F);
  if (nparams < 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "FlatParam: %d parameters (must be >= 0)",
               nparams);
  if (nparams > 0 && specs == NULL)
    FSDP_ERROR(FSDP_ERR_USAGE, "FlatParam: %d parameters but no specs",
               nparams);
  for (int i = 0; i < nparams; i++) FSDP_CALL(FlatparamCheckSpec(&specs[i], i));
  FSDP_CALL(FlatparamCheckNamesUnique(specs, nparams));

  int64_t psi = 0;
  for (int i = 0; i < nparams; i++) {
    int64_t n = FlatParamSpecNumel(&specs[i]);
    if (psi > INT64_MAX - n)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "FlatParam: the unit has more elements than fit in 64 bits");
    psi += n;
  }
  /* [Note: alignment] in flatparam.h: P is the smallest multiple of F*a. */
  int64_t unit = (int64_t)F * FSDP_FLAT_ALIGN;
  if (psi > INT64_MAX - unit)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: the unit has more elements than fit in 64 bits");
  int64_t padded = (psi + unit - 1) / unit * unit;

  struct FlatParam_ *fp = calloc(1, sizeof *fp);
  FSDP_CHECK_ALLOC(fp, sizeof *fp);
  fp->nparams = nparams;
  fp->F = F;
  fp->shard_rank = shard_rank;
  fp->psi = psi;
  fp->padded = padded;
  fp->shard_numel = padded / F;
  fp->specs = malloc((size_t)(nparams > 0 ? nparams : 1) * sizeof *fp->specs);
  fp->offset = malloc((size_t)(nparams + 1) * sizeof *fp->offset);
  fp->piece_start = calloc((size_t)F + 1, sizeof *fp->piece_start);
  int *fill = calloc((size_t)F, sizeof *fill);
  if (!fp->specs || !fp->offset || !fp->piece_start || !fill) {
    free(fill);
    FlatParamDestroy(&fp);
    FSDP_CHECK_ALLOC(NULL, sizeof(int64_t) * (size_t)(nparams + F));
  }
  if (nparams > 0) memcpy(fp->specs, specs, (size_t)nparams * sizeof *specs);
  fp->offset[0] = 0;
  for (int i = 0; i < nparams; i++)
    fp->offset[i + 1] = fp->offset[i] + FlatParamSpecNumel(&specs[i]);

  /* Two passes: count pieces per shard, then fill them in parameter order
   * (so each shard's pieces come out sorted by shard_offset). */
  for (int i = 0; i < nparams; i++) FlatparamCut(fp, i, fill, NULL);
  for (int r = 0; r < F; r++) fp->piece_start[r + 1] = fp->piece_start[r] + fill[r];
  int npieces = fp->piece_start[F];
  fp->pieces = malloc((size_t)(npieces > 0 ? npieces : 1) * sizeof *fp->pieces);
  if (!fp->pieces) {
    free(fill);
    FlatParamDestroy(&fp);
    FSDP_CHECK_ALLOC(NULL, (size_t)npieces * sizeof(FlatParamPiece));
  }
  memset(fill, 0, (size_t)F * sizeof *fill);
  for (int i = 0; i < nparams; i++) FlatparamCut(fp, i, NULL, fill);
  free(fill);
  *out = fp;
  return FSDP_SUCCESS;
}

int FlatParamDestroy(FlatParam *fp)
{
  if (!fp || !*fp) return FSDP_SUCCESS;
  free((*fp)->specs);
  free((*fp)->offset);
  free((*fp)->pieces);
  free((*fp)->piece_start);
  free(*fp);
  *fp = NULL;
  return FSDP_SUCCESS;
}

int FlatParamNumParams(FlatParam fp) { return fp->nparams; }

const FsdpParamSpec *FlatParamSpec(FlatParam fp, int param)
{
  if (param < 0 || param >= fp->nparams) return NULL;
  return &fp->specs[param];
}

int64_t FlatParamNumel(FlatParam fp) { return fp->psi; }
int64_t FlatParamPaddedNumel(FlatParam fp) { return fp->padded; }
int64_t FlatParamShardNumel(FlatParam fp) { return fp->shard_numel; }
int FlatParamShardFactor(FlatParam fp) { return fp->F; }
int FlatParamShardRank(FlatParam fp) { return fp->shard_rank; }

int64_t FlatParamOffset(FlatParam fp, int param)
{
  if (param < 0 || param >= fp->nparams) return -1;
  return fp->offset[param];
}

int FlatParamFind(FlatParam fp, const char *name)
{
  if (!name) return -1;
  for (int i = 0; i < fp->nparams; i++)
    if (strcmp(fp->specs[i].name, name) == 0) return i;
  return -1;
}

int FlatParamShardPieces(FlatParam fp, int shard_rank,
                         const FlatParamPiece **pieces, int *npieces)
{
  FSDP_ASSERT(fp && pieces && npieces);
  if (shard_rank < 0 || shard_rank >= fp->F)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "FlatParam: shard rank %d is outside 0..%d (sharding factor "
               "%d)",
               shard_rank, fp->F - 1, fp->F);
  *pieces = fp->pieces + fp->piece_start[shard_rank];
  *npieces = fp->piece_start[shard_rank + 1] - fp->piece_start[shard_rank];
  return FSDP_SUCCESS;
}

void *FlatParamView(FlatParam fp, void *flat, size_t elem_size, int param)
{
  if (!flat || param < 0 || param >= fp->nparams) return NULL;
  return (char *)flat + (size_t)fp->offset[param] * elem_size;
}
