/* profile.h: a measured machine profile (fsdp-probe writes it, fsdp-plan
 * reads it with -profile FILE).
 *
 * [Note: what a profile holds] Rates measured with the project's own
 * kernels and collectives on the ranks and nodes of the job:
 *   - compute: the sgemm rate of each matmul shape of the model (forward
 *     and backward together, N = B*T rows), the causal-attention kernel's
 *     rate, and the streaming rate of the memory-bound passes (residual
 *     add) and of the AdamW update;
 *   - collectives: time against size of all-gather, reduce-scatter and
 *     all-reduce at three levels: "node" (the G ranks of a node, all nodes
 *     at once), "cross" (one rank per node, all G such groups at once, so
 *     the node's link is shared as in a run) and "world" (all W ranks).
 *     Each (level, kind) curve is fitted to t = latency + v / bandwidth,
 *     v the volume a rank receives ([Note: byte accounting] in coll.h), so
 *     the fit applies directly to the byte counters fsdp-plan computes;
 *   - the memory a rank can allocate (MemAvailable / ranks on the node on
 *     CPU);
 *   - the probe's model itself, each stage's forward and backward timed on
 *     one rank (what the rates above leave out: LayerNorm, GELU, softmax,
 *     the loss), for fsdp-plan's compute when it plans that model;
 *   - the same stages timed again with a collective looping on a stream
 *     thread beside them (every rank at once), and the cores of a node:
 *     where the ranks' threads fill the cores, the communication thread
 *     (which polls inside a blocking collective) takes CPU from the
 *     compute thread ([Note: contended compute] in plan/steptime.h);
 *   - the wait of a collective issued right after each stage for the last
 *     rank to join it, and two collectives at once against one ([Note:
 *     joining a collective], [Note: two collectives at once]).
 * A level a job does not have (cross with one node, node with one rank
 * per node) has size 0 and no curve.
 * A profile may also be described instead of measured (fsdp-probe
 * -describe: a cluster on paper, each rate given as an option); its
 * "source" attribute says which.
 */
#ifndef FSDP_PROFILE_H
#define FSDP_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"

#define FSDP_PROFILE_MAX_SIZES 32
#define FSDP_PROFILE_MAX_GEMMS 16
#define FSDP_PROFILE_MAX_STAGES 256
#define FSDP_PROFILE_MAX_STAGE_BATCHES 6
#define FSDP_PROFILE_FORMAT_VERSION 1

typedef enum {
  FSDP_PROFILE_NODE,
  FSDP_PROFILE_CROSS,
  FSDP_PROFILE_WORLD,
  FSDP_PROFILE_NLEVELS
} FsdpProfileLevel;

extern const char *const FsdpProfileLevelNames[FSDP_PROFILE_NLEVELS];

/* One collective at one level: median seconds against received bytes,
 * and the fit t = latency_s + bytes / bandwidth (bytes/s). */
typedef struct {
  int n;
  double bytes[FSDP_PROFILE_MAX_SIZES];   /* received volume per rank */
  double seconds[FSDP_PROFILE_MAX_SIZES]; /* median over repetitions */
  double latency_s, bandwidth;
} FsdpProfileCurve;

typedef struct {
  char name[64];       /* the model's parameter it stands for: "h.0/attn.c_attn.weight" */
  int64_t N, C, OC;    /* out (N,OC) = inp (N,C) @ weight (OC,C)^T */
  double flops_per_s;  /* forward + backward: 6*N*C*OC FLOP over their time */
} FsdpProfileGemm;

typedef struct {
  /* where and how it was measured */
  char host[64], cpu[96], date[40], backend[16], blas_core[32], model[32];
  char source[16]; /* "measured" (fsdp-probe) or "described" (-describe) */
  int world_size, ranks_per_node, nodes, threads;
  int64_t mem_available; /* bytes one rank may allocate (the smallest rank's) */
  /* compute */
  int ngemm;
  FsdpProfileGemm gemm[FSDP_PROFILE_MAX_GEMMS];
  double gemm_flops_per_s;      /* matmuls of shapes not listed: all measured FLOP over their time */
  double peak_flops_per_s;      /* the device's peak, for MFU (0: not known) */
  double attention_flops_per_s; /* causal attention forward + backward */
  double stream_bytes_per_s;    /* residual add: 3 * 4 bytes per element */
  double adamw_bytes_per_s;     /* AdamW: 4 arrays read, 3 written, fp32 */
  /* the probe's model run stage by stage on one rank (every rank at once)
   * at each micro-batch stage_batch[b] (sequences of stage_seq_len): median
   * seconds of each stage's forward and backward, slowest rank ([Note:
   * stages measured] in plan/probe.c); nstages 0: not measured (a
   * described profile, a model too large for one rank, an older file) */
  int nstages, nstage_batches, stage_seq_len;
  /* [Note: micro-batches timed in turn] (plan/probe.c): the rounds of one
   * pass at every micro-batch each time is the median of; 0: timed one
   * micro-batch after the other (a file of before it, a described one) */
  int stage_rounds;
  int stage_batch[FSDP_PROFILE_MAX_STAGE_BATCHES];
  int64_t stage_params; /* the model's parameter count (with its name: which model) */
  double stage_fwd_s[FSDP_PROFILE_MAX_STAGE_BATCHES][FSDP_PROFILE_MAX_STAGES];
  double stage_bwd_s[FSDP_PROFILE_MAX_STAGE_BATCHES][FSDP_PROFILE_MAX_STAGES];
  /* [Note: contended compute] (plan/steptime.h): the stages at
   * stage_batch[0] timed while an all-reduce loops on a stream thread
   * beside them, over their time alone (the sum of forward and backward);
   * 0: not measured (a described profile, an older file: fsdp-plan takes
   * 1 and says so).  cores_per_node: the CPUs a node's ranks share (the
   * fewest any rank sees; 0: not recorded), its host's divided among
   * the nodes_per_host nodes on it ([Note: nodes sharing a host] in
   * plan/probe.c; 0: not recorded, a file of before it) */
  double contended_factor;
  int cores_per_node;
  int nodes_per_host;
  /* and the other side: the mean seconds of the world all-reduce that ran
   * beside those stages, and the volume a rank received in it (fsdp-plan
   * sets it against the world all-reduce curve measured alone); 0: not
   * measured */
  double contended_allreduce_s, contended_allreduce_bytes;
  /* [Note: joining a collective] (plan/steptime.h): the model's stages
   * with a one-element world all-reduce issued on a stream thread right
   * after each and waited for (every rank at once, as an on-demand gather
   * follows a stage in a run: the wait for the last rank to join, with the
   * thread wake-ups): the time that took beyond the slowest rank's mean
   * stage times, over them; the mean over ranks; 0: none, or not measured
   * (a described profile, an older file) */
  double join_fraction;
  /* [Note: sustained speed] (plan/probe.c): the stages at stage_batch[0],
   * the slowest rank's mean over the rounds against its median (the sums
   * over the stages): above 1 where the machine stopped the ranks for
   * stretches the medians leave out (a CPU quota, vCPUs shared with other
   * guests); fsdp-plan predicts at that sustained speed.  0: not measured
   * (a described profile without it, an older file: fsdp-plan takes 1) */
  double sustained_factor;
  /* [Note: two collectives at once] (plan/steptime.h): the time of
   * two equal world all-gathers run at once on two stream threads (each
   * its own communicator) over the time of one alone; 0: not measured
   * (fsdp-plan takes 1) */
  double concurrent_factor;
  /* collectives; level_size[l] == 0: not measured.  Rank 0's group of
   * each level, by where its members are: peers on rank 0's node and
   * elsewhere (what the level measures: node links, or the network) */
  int level_size[FSDP_PROFILE_NLEVELS];
  int level_peers_intra[FSDP_PROFILE_NLEVELS], level_peers_inter[FSDP_PROFILE_NLEVELS];
  FsdpProfileCurve coll[FSDP_PROFILE_NLEVELS][FSDP_COLL_NKINDS];
} FsdpProfile;

/* Not collective.  Fits c's points to t = a + v / b: b from the
 * large-message regime (the points within 32x of the largest, plain least
 * squares), a from the smaller messages over that slope (weighted 1/t^2,
 * at least 0) ([Note: the large-message regime] in profile.c).  A curve
 * that does not rise is one least-squares line over all points weighted
 * 1/t^2, a negative a or b (noise) refitting the other term alone (a = 0,
 * or b = infinity).  Sets c->latency_s and c->bandwidth (0 = infinite,
 * latency-only). */
void FsdpProfileFit(FsdpProfileCurve *c);

/* Not collective.  Predicted seconds of one call moving `bytes` (received
 * volume) on curve c: latency + bytes / bandwidth. */
double FsdpProfileCurveSeconds(const FsdpProfileCurve *c, double bytes);

/* Not collective.  [Note: sustained speed] (plan/probe.c): every time in
 * p (stage times, curve points and latencies, the contended all-reduce)
 * multiplied by factor and every rate (matmuls, attention, streaming,
 * AdamW, curve bandwidths) divided by it; fractions and factors of one
 * time over another, and the peak, unchanged.  A factor of at most 1 (or
 * not finite) changes nothing. */
void FsdpProfileScaleTimes(FsdpProfile *p, double factor);

/* Not collective.  Rank 0 calls it.  Writes p to path atomically (a
 * temporary name, then rename): an existing file is replaced only by a
 * complete one. */
int FsdpProfileWrite(const FsdpProfile *p, const char *path);

/* Not collective.  Reads path.  A missing file, a file that is not HDF5,
 * or an HDF5 file that is not an fsdp profile (a checkpoint, a run file)
 * is a usage error naming the file and what it is. */
int FsdpProfileRead(const char *path, FsdpProfile *p);

#endif
