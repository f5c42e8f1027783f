/* flatparam.h: the FlatParameter layout of one unit (docs/design.md §4).
 *
 * The unit's parameters are flattened and concatenated in registration
 * order (numel psi), then padded on the right to P, the smallest multiple
 * of F*FSDP_FLAT_ALIGN that is >= psi, and split into F equal shards of
 * P/F elements.  Rank r of the sharding group owns elements
 * [r*P/F, (r+1)*P/F).  The unsharded buffer is exactly what all-gather of
 * the shards produces, and the unsharded gradient is exactly what
 * reduce-scatter consumes: no copies around collectives.
 *
 * [Note: alignment] FSDP_FLAT_ALIGN = 32 elements: every shard then starts
 * on a 128-byte boundary in fp32 and 64 bytes in bf16/fp16 (a cache line,
 * and what vector loads and NCCL like), while the padding stays below
 * F*32 elements per unit -- negligible next to any real layer.
 *
 * A shard may cut through parameters: FlatParamShardPieces lists, for a
 * shard rank, the (parameter, element range, offset in shard) pieces that
 * lie in it, in order; optimizer and checkpoints work piece by piece.
 */
#ifndef FSDP_FLATPARAM_H
#define FSDP_FLATPARAM_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h" /* FsdpParamSpec */

#define FSDP_FLAT_ALIGN 32

typedef struct {
  int param;            /* index in registration order */
  int64_t param_offset; /* first element of the piece within the parameter */
  int64_t count;        /* elements */
  int64_t shard_offset; /* where the piece starts within the shard */
} FlatParamPiece;

typedef struct FlatParam_ *FlatParam;

/* Not collective.  Copies the specs.  F >= 1, 0 <= shard_rank < F.
 * A spec has a non-empty name (unique within the unit), 0 <= ndim <=
 * FSDP_MAX_NDIM (ndim 0 is a scalar of one element) and sizes >= 0; a
 * parameter of zero elements is allowed and lies in no piece.  Anything
 * else is FSDP_ERR_USAGE naming the parameter.  nparams may be 0 (P = 0). */
int FlatParamCreate(const FsdpParamSpec *specs, int nparams, int F,
                    int shard_rank, FlatParam *fp);
/* Not collective.  Accepts NULL; sets *fp = NULL. */
int FlatParamDestroy(FlatParam *fp);

int FlatParamNumParams(FlatParam fp);
/* NULL for an index out of range. */
const FsdpParamSpec *FlatParamSpec(FlatParam fp, int param);
/* Product of the sizes (1 for ndim 0); -1 for an invalid spec. */
int64_t FlatParamSpecNumel(const FsdpParamSpec *spec);
int64_t FlatParamNumel(FlatParam fp);       /* psi */
int64_t FlatParamPaddedNumel(FlatParam fp); /* P */
int64_t FlatParamShardNumel(FlatParam fp);  /* P / F */
int FlatParamShardFactor(FlatParam fp);
int FlatParamShardRank(FlatParam fp);
/* Offset of parameter `param` in the flat (unsharded) buffer; -1 for an
 * index out of range. */
int64_t FlatParamOffset(FlatParam fp, int param);
/* Index of the parameter with that name, or -1. */
int FlatParamFind(FlatParam fp, const char *name);

/* Pieces of shard `shard_rank` (any rank of the group, not just mine),
 * sorted by shard_offset (= by param): *pieces points to storage owned by
 * fp, valid until destroy.  A piece covers elements [param_offset,
 * param_offset + count) of the parameter, stored at [shard_offset,
 * shard_offset + count) of the shard; elements of the shard in no piece
 * are padding.  A bad shard_rank is FSDP_ERR_USAGE. */
int FlatParamShardPieces(FlatParam fp, int shard_rank,
                         const FlatParamPiece **pieces, int *npieces);

/* View of parameter `param` inside an unsharded buffer of elements of
 * elem_size bytes (flat + offset * elem_size); NULL for a NULL buffer or
 * an index out of range. */
void *FlatParamView(FlatParam fp, void *flat, size_t elem_size, int param);

#endif
