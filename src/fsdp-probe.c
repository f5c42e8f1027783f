/* fsdp-probe: measure the machine a job runs on, for fsdp-plan -profile.
 *
 *   mpiexec -n 8 fsdp-probe -model gpt2 -batch_size 4 -profile_out m.h5
 *   srun fsdp-probe -options_file run.opts -profile_out m.h5
 *   fsdp-plan -options_file run.opts -world_size 64 -profile m.h5
 *
 * Launched like fsdp-train (same options, same ranks and nodes), it
 * measures with the project's own kernels and collectives (what and how:
 * plan/probe.h), or, with -describe, writes the profile of a cluster on
 * paper (plan/describe.h).  This program reads the options, calls the plan
 * layer, and on rank 0 writes the profile (HDF5, atomic) and prints the
 * fitted latency and bandwidth per level and kind.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libfsdp.h"
#include "driver/train.h"
#include "io/fileutil.h"
#include "plan/describe.h"
#include "plan/probe.h"

static const char kHelp[] =
    "fsdp-probe: measure compute rates (the model's matmul shapes, attention,\n"
    "memory-bound passes), collective time against size (node, cross-node and\n"
    "world groups) and available memory on the ranks of a job, and write them\n"
    "to an HDF5 profile that fsdp-plan reads with -profile FILE.\n"
    "Usage: mpiexec -n W fsdp-probe -profile_out FILE [fsdp-train options]\n";

/* A cluster on paper (-describe): every rate given, nothing measured. */
typedef struct {
  int on;
  FsdpProfileDescription d;
} Description;

typedef struct {
  FsdpTrainOptions t;
  const char *out;
  int64_t min_bytes, max_bytes;
  int reps, compute;
  double peak_flops;
  Description d;
} ProbeOptions;

static const char *const kBackendNames[] = {"mpi", "nccl", NULL};

static int DescriptionFromDb(FsdpOpts db, Description *desc)
{
  const char *g = "Describe";
  int idx = 0;
  FsdpProfileDescription *d = &desc->d;
  FSDP_CALL(FsdpOptsGetBool(db, g, "describe", "write a profile of a cluster described by the "
                            "-describe_* options instead of measuring this one (one process)", 0,
                            &desc->on));
  FSDP_CALL(FsdpOptsGetInt(db, g, "describe_nodes", "nodes of the described cluster", 1, 1,
                           1 << 20, &d->nodes));
  FSDP_CALL(FsdpOptsGetInt(db, g, "describe_ranks_per_node", "ranks (GPUs) per node", 8, 1,
                           1 << 12, &d->ranks_per_node));
  FSDP_CALL(FsdpOptsGetEnum(db, g, "describe_backend", "collectives back-end the rates are for",
                            kBackendNames, 1, &idx));
  d->backend = kBackendNames[idx];
  FSDP_CALL(FsdpOptsGetString(db, g, "describe_host", "name of the described cluster",
                              "described", &d->host));
  FSDP_CALL(FsdpOptsGetString(db, g, "describe_device", "the device of a rank (CPU or GPU model)",
                              "unknown", &d->device));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_gemm_flops", "sustained matmul rate of one rank, "
                              "FLOP/s", 0, 0, 1e18, &d->gemm_flops));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_attention_flops", "sustained attention rate of one "
                              "rank, FLOP/s (0: the matmul rate)", 0, 0, 1e18, &d->attention_flops));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_stream_bw", "memory bandwidth of one rank for "
                              "streaming passes, bytes/s", 0, 0, 1e16, &d->stream_bw));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_adamw_bw", "memory bandwidth of the AdamW update, "
                              "bytes/s (0: the streaming bandwidth)", 0, 0, 1e16, &d->adamw_bw));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_memory", "bytes one rank may allocate", 0, 0,
                              1e16, &d->mem));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_node_latency", "latency of a collective inside a "
                              "node, s", 10e-6, 0, 10, &d->node_latency));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_node_bw", "bandwidth at which one rank receives "
                              "from peers on its node, bytes/s", 0, 0, 1e16, &d->node_bw));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_net_latency", "latency of a collective across "
                              "nodes, s", 20e-6, 0, 10, &d->net_latency));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_net_bw_per_node", "bandwidth of a node's links "
                              "to the other nodes, bytes/s, shared by its ranks", 0, 0, 1e16,
                              &d->net_bw_per_node));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_contended_factor", "a stage's time beside a "
                              "collective over its time alone, where the ranks fill a node's "
                              "cores (0: not known, taken as 1)", 0, 0, 100, &d->contended));
  FSDP_CALL(FsdpOptsGetInt(db, g, "describe_cores_per_node", "cores a node's ranks share (0: not "
                           "known)", 0, 0, 1 << 20, &d->cores));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_join_fraction", "a collective's wait for the "
                              "last rank of its group to join it, over the compute before it "
                              "(0: none)", 0, 0, 10, &d->join));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_concurrent_factor", "a collective's time while "
                              "another runs on the other stream, over its time alone (0: not "
                              "known, taken as 1)", 0, 0, 100, &d->concurrent));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "describe_sustained_factor", "the machine's time over a "
                              "stretch of work, over the typical time of its pieces (a CPU "
                              "quota, shared vCPUs; 0: not known, taken as 1)", 0, 0, 99,
                              &d->sustained));
  return FSDP_SUCCESS;
}

static int ProbeOptionsFromDb(FsdpOpts db, ProbeOptions *po)
{
  memset(po, 0, sizeof *po);
  const char *g = "Probe";
  int64_t v;
  FSDP_CALL(FsdpTrainOptionsFromDb(db, &po->t));
  FSDP_CALL(FsdpOptsGetString(db, g, "profile_out", "HDF5 file the profile is written to "
                              "(required; replaced atomically)", "", &po->out));
  FSDP_CALL(FsdpOptsGetInt(db, g, "probe_min_bytes", "smallest collective message (bytes of the "
                           "whole buffer, per call)", 4096, 64, (int64_t)1 << 40, &po->min_bytes));
  FSDP_CALL(FsdpOptsGetInt(db, g, "probe_max_bytes", "largest collective message (bytes of the "
                           "whole buffer); sizes double from the smallest (0: up to the model's "
                           "largest unit in fp32, at least 1 MiB: the messages a step moves)", 0,
                           0, (int64_t)1 << 40, &po->max_bytes));
  FSDP_CALL(FsdpOptsGetInt(db, g, "probe_reps", "timed repetitions per point (the median is "
                           "kept)", 5, 1, 1000, &v));
  po->reps = (int)v;
  FSDP_CALL(FsdpOptsGetBool(db, g, "probe_compute", "measure the compute rates (0: "
                            "collectives and memory only)", 1, &po->compute));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "probe_peak_flops", "the device's peak FLOP/s, recorded "
                              "for fsdp-plan's MFU (0: not known)", 0, 0, 1e18, &po->peak_flops));
  FSDP_CALL(DescriptionFromDb(db, &po->d));
  return FSDP_SUCCESS;
}

static int CheckProbeOptions(const ProbeOptions *po)
{
  if (!po->out[0])
    FSDP_ERROR(FSDP_ERR_USAGE, "fsdp-probe needs -profile_out FILE (the HDF5 profile to write)");
  if (po->max_bytes > 0 && po->max_bytes < 64)
    FSDP_ERROR(FSDP_ERR_USAGE, "-probe_max_bytes %lld: expected 0 (the model's largest unit) or "
               "at least 64", (long long)po->max_bytes);
  if (po->max_bytes > 0 && po->min_bytes > po->max_bytes)
    FSDP_ERROR(FSDP_ERR_USAGE, "-probe_min_bytes %lld is larger than -probe_max_bytes %lld",
               (long long)po->min_bytes, (long long)po->max_bytes);
  const FsdpProfileDescription *d = &po->d.d;
  if (po->d.on) {
    const struct {
      const char *name;
      double v;
    } need[] = {{"-describe_gemm_flops", d->gemm_flops}, {"-describe_stream_bw", d->stream_bw},
                {"-describe_memory", d->mem}, {"-describe_node_bw", d->node_bw},
                {"-describe_net_bw_per_node", d->net_bw_per_node}};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
      if (!(need[i].v > 0) && !(i >= 3 && (i == 3 ? d->ranks_per_node == 1 : d->nodes == 1)))
        FSDP_ERROR(FSDP_ERR_USAGE, "-describe needs %s (a positive rate)", need[i].name);
    return FSDP_SUCCESS;
  }
  if (po->t.device_cuda)
    FSDP_ERROR(FSDP_ERR_USAGE, "-device cuda: fsdp-probe measures the CPU back-end (MPI "
               "collectives, CPU kernels) in this version; run it with -device cpu");
  return FSDP_SUCCESS;
}

/* Collective on world.  Rank 0 checks before anything is measured that
 * the profile can be written where asked, so a bad -profile_out is a usage
 * error on every rank, not a failure after minutes of probing. */
static int CheckOutputPath(const char *path)
{
  int rank = 0, bad = 0;
  char msg[512] = "";
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (rank == 0) {
    char dir[4096];
    FsdpDirName(path, dir, sizeof dir);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      bad = 1;
      FsdpMsgf(msg, sizeof msg, "-profile_out %s is a directory (expected a file name)", path);
    } else if (access(dir, W_OK) != 0) {
      bad = 1;
      FsdpMsgf(msg, sizeof msg, "-profile_out %s: its directory %s is not writable: %s", path, dir,
               strerror(errno));
    }
  }
  FSDP_CALL_MPI(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (bad) FSDP_ERROR(FSDP_ERR_USAGE, "%s", msg);
  return FSDP_SUCCESS;
}

static void PrintProfile(const FsdpProfile *p, const char *path)
{
  printf("fsdp-probe: %s (%s), %d ranks (%d nodes x %d), %d threads per rank, BLAS core %s, %s\n",
         p->host, p->source, p->world_size, p->nodes, p->ranks_per_node, p->threads, p->blas_core,
         p->cpu);
  for (int i = 0; i < p->ngemm; i++)
    printf("  matmul %-34s N %6lld C %6lld OC %6lld  %8.2f GFLOP/s\n", p->gemm[i].name,
           (long long)p->gemm[i].N, (long long)p->gemm[i].C, (long long)p->gemm[i].OC,
           p->gemm[i].flops_per_s / 1e9);
  printf("  matmuls (all shapes) %.2f GFLOP/s; peak %.2f GFLOP/s\n", p->gemm_flops_per_s / 1e9,
         p->peak_flops_per_s / 1e9);
  if (p->gemm_flops_per_s > 0)
    printf("  attention %.2f GFLOP/s | streaming %.2f GB/s | AdamW %.2f GB/s\n",
           p->attention_flops_per_s / 1e9, p->stream_bytes_per_s / 1e9, p->adamw_bytes_per_s / 1e9);
  printf("  memory available per rank: %.2f GiB\n", p->mem_available / 1073741824.0);
  if (p->contended_factor > 0)
    printf("  the stages beside an all-reduce on a stream thread: x%.3f their time alone "
           "(%d cores per node, %d ranks x %d threads)\n", p->contended_factor,
           p->cores_per_node, p->ranks_per_node, p->threads);
  if (p->nodes_per_host > 1)
    printf("  %d nodes share one host (the same boot id): its cores and memory divided among "
           "them\n", p->nodes_per_host);
  if (p->sustained_factor > 0)
    printf("  the stages' mean over their median: x%.3f%s\n", p->sustained_factor,
           p->sustained_factor >= 1.2 ? " (the machine stopped the ranks for stretches: a CPU "
                                        "quota, or vCPUs shared with other guests; fsdp-plan "
                                        "predicts at this sustained speed)" : "");
  if (p->join_fraction > 0)
    printf("  a collective issued after each stage (the ranks in lockstep) costs %.4f of the "
           "stages' time (the slowest rank's) for the last rank to join it\n", p->join_fraction);
  if (p->concurrent_factor > 0)
    printf("  two world all-gathers at once on two stream threads: x%.3f the time of one alone\n",
           p->concurrent_factor);
  for (int k = 0; k < p->nstage_batches; k++) {
    double f = 0, b = 0;
    for (int i = 0; i < p->nstages; i++) {
      f += p->stage_fwd_s[k][i];
      b += p->stage_bwd_s[k][i];
    }
    printf("  the model's %d stages at %d x %d tokens: forward %.2f ms, backward %.2f ms\n",
           p->nstages, p->stage_batch[k], p->stage_seq_len, 1e3 * f, 1e3 * b);
  }
  if (p->nstage_batches > 1)
    printf("  (the micro-batches timed in turn, %d rounds of one pass each)\n", p->stage_rounds);
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++)
    if (p->level_size[l] && p->coll[l][0].n > 0) {
      const FsdpProfileCurve *c = &p->coll[l][0];
      printf("  messages %.0f to %.0f bytes received per rank (%s all-gather); bandwidth fitted on "
             "the large ones\n", c->bytes[0], c->bytes[c->n - 1], FsdpProfileLevelNames[l]);
      break;
    }
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++) {
    if (!p->level_size[l]) {
      printf("  %-6s (not measured: a group of one rank, or one node)\n", FsdpProfileLevelNames[l]);
      continue;
    }
    for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
      const FsdpProfileCurve *c = &p->coll[l][k];
      printf("  %-6s %2d ranks %-15s latency %9.2f us  bandwidth %9.3f GB/s (received)\n",
             FsdpProfileLevelNames[l], p->level_size[l], FsdpCollKindNames[k], c->latency_s * 1e6,
             c->bandwidth / 1e9);
    }
  }
  printf("fsdp-probe: profile written to %s\n", path);
}

static int ReadOptions(FsdpOpts db, void *state) { return ProbeOptionsFromDb(db, state); }

/* Collective on MPI_COMM_WORLD: measure (or describe) the machine; rank 0
 * writes the profile. */
static int Probe(FsdpProgramRun *r)
{
  ProbeOptions *po = r->state;
  FsdpTopo topo = NULL;
  int err = CheckProbeOptions(po);
  if (!err) err = CheckOutputPath(po->out);
  FsdpProfile *p = calloc(1, sizeof *p);
  if (!err && !p) err = FsdpErrorRaise(__FILE__, __LINE__, __func__, FSDP_ERR_MEM,
                                       "out of memory for a profile (%zu bytes)", sizeof *p);
  if (!err && po->d.on) {
    FsdpProfileDescribe(&po->d.d, po->t.model_name, po->peak_flops, p);
  } else if (!err) {
    err = FsdpTopoCreate(MPI_COMM_WORLD, &po->t.topo, &topo);
    FsdpProbeOptions o = {&po->t.model, po->t.model_name, po->t.batch_size, po->t.wrap, po->t.seed,
                          po->t.fsdp.attention, po->min_bytes, po->max_bytes, po->reps, po->compute,
                          po->peak_flops};
    if (!err) err = FsdpProbeMachine(&o, topo, p);
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!err && rank == 0) {
    err = FsdpProfileWrite(p, po->out);
    if (!err) PrintProfile(p, po->out);
    fflush(stdout);
  }
  free(p);
  if (topo) FsdpTopoDestroy(&topo);
  return err;
}

static ProbeOptions options;

/* A usage error is found alike on every rank; anything else (rank 0's
 * write failing) may leave the others waiting: main aborts the job. */
static const FsdpProgram kProgram = {.name = "fsdp-probe",
                                     .help = kHelp,
                                     .on_failure = FSDP_PROGRAM_ABORT_ON_FAILURE,
                                     .computes = 1,
                                     .state = &options,
                                     .read_options = ReadOptions,
                                     .run = Probe};

int main(int argc, char **argv) { return FsdpProgramMain(argc, argv, &kProgram); }
