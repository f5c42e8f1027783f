/* flatparam.h: the FlatParameter layout of one unit (DESIGN §3).
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

#define FSDP_FLAT_ALIGN 32
#define FSDP_MAX_NDIM 4
#define FSDP_MAX_NAME 96

typedef struct {
  char name[FSDP_MAX_NAME];
  int ndim;
  int64_t shape[FSDP_MAX_NDIM];
} FsdpParamSpec;

typedef struct {
  int param;            /* index in registration order */
  int64_t param_offset; /* first element of the piece within the parameter */
  int64_t count;        /* elements */
  int64_t shard_offset; /* where the piece starts within the shard */
} FlatParamPiece;

typedef struct FlatParam_ *FlatParam;

/* Not collective.  Copies the specs.  F >= 1, 0 <= shard_rank < F. */
int FlatParamCreate(const FsdpParamSpec *specs, int nparams, int F,
                    int shard_rank, FlatParam *fp);
int FlatParamDestroy(FlatParam *fp);

int FlatParamNumParams(FlatParam fp);
const FsdpParamSpec *FlatParamSpec(FlatParam fp, int param);
int64_t FlatParamSpecNumel(const FsdpParamSpec *spec);
int64_t FlatParamNumel(FlatParam fp);       /* psi */
int64_t FlatParamPaddedNumel(FlatParam fp); /* P */
int64_t FlatParamShardNumel(FlatParam fp);  /* P / F */
int FlatParamShardFactor(FlatParam fp);
int FlatParamShardRank(FlatParam fp);
/* Offset of parameter `param` in the flat (unsharded) buffer. */
int64_t FlatParamOffset(FlatParam fp, int param);
/* Index of the parameter with that name, or -1. */
int FlatParamFind(FlatParam fp, const char *name);

/* Pieces of shard `shard_rank` (any rank of the group, not just mine):
 * *pieces points to storage owned by fp, valid until destroy. */
int FlatParamShardPieces(FlatParam fp, int shard_rank,
                         const FlatParamPiece **pieces, int *npieces);

/* View of parameter `param` inside an unsharded buffer of elements of
 * elem_size bytes (flat + offset * elem_size). */
void *FlatParamView(FlatParam fp, void *flat, size_t elem_size, int param);

#endif
