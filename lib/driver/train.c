/* train.c: the training driver (see train.h). */
#include "driver/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "base/error.h"
#include "kernels/kernels.h"
#include "base/mem.h"
#include "comm/flight.h"
#include "driver/summary.h"
#include "io/dirlock.h"
#include "io/outputs.h"

static const char *const kSummaryNames[] = {"text", "json", NULL};
static const char *const kDeviceNames[] = {"cpu", "cuda", NULL};
static const char *const kDeviceCollNames[] = {"auto", "nccl", "mpi", NULL};
enum { DEVICE_COLL_AUTO, DEVICE_COLL_NCCL, DEVICE_COLL_MPI };

struct FsdpTrainer_ {
  MPI_Comm comm;
  FsdpTrainOptions o;
  int rank, W;
  FsdpTopo topo;
  FsdpColl coll;
  const char *coll_name; /* the summary's device_coll: nccl, mpi, mpi-staged */
  uint64_t allocs_step1; /* device allocations up to the end of the first step */
  FsdpRuntime rt;
  FsdpModel model;
  FsdpModelDesc desc; /* what checkpoints and the run file record and compare */
  FsdpData data;
  FsdpOptim optim;
  const FsdpKernelOps *k;
  FsdpKernelOps k_bf16; /* the table with bf16 matmuls (-compute_dtype bf16) */
  int B, T;
  int *inputs, *targets;
  int64_t step;        /* optimizer steps done */
  double *losses;      /* per step */
  double *step_ms;     /* per step */
  double *exposed_ms;  /* per step: rank 0's waits on communication */
  double last_norm, last_lr;
  FsdpCommCounters comm_total;
  FsdpTrace trace;
  char trace_path[4096]; /* where -trace goes ([Note: one job's files]: FILE.<k> when resumed) */
  double exposed_s, busy_s;      /* summed over steps */
  int scaler_on;                 /* fp16 anywhere: the sharded gradient scaler runs */
  double scale;                  /* current loss scale */
  int64_t good_steps, skipped;   /* scaler bookkeeping */
  int64_t first_step;            /* 0, or the step resumed from */
  int64_t data_base;             /* micro-batches consumed before first_step */
  uint64_t last_intra, last_inter; /* this step's node-local / cross-node bytes */
  FsdpMetrics metrics;
  int preempted;                 /* the signal that stopped the run, or 0 */
  int nonfinite;                 /* the state became non-finite: FSDP_EXIT_NONFINITE */
  char resumed_from[4096];       /* the checkpoint loaded, or "" */
  char preempt_ckpt[4096];       /* the checkpoint it wrote */
  FsdpData val;                  /* held-out data (-val_every > 0) */
  int64_t *val_steps;            /* [Note: validation] step of each validation */
  double *val_losses;            /* its mean loss */
  int nval;
  size_t cap_val_steps, cap_val_losses;
  int device_set; /* FsdpDeviceSetUp succeeded: finalize at destroy */
  int flight;     /* the flight recorder runs: stop it at destroy */
  FsdpDirLock ckpt_lock; /* [Note: checkpoint directory lock] (io/dirlock.h) */
};

int FsdpTrainOptionsFromDb(FsdpOpts db, FsdpTrainOptions *o)
{
  memset(o, 0, sizeof *o);
  int64_t v;
  int idx = 0;
  const char *g = "Training";
  FSDP_CALL(FsdpTopoOptionsFromDb(db, &o->topo));
  FSDP_CALL(FsdpModelOptionsFromDb(db, &o->model));
  snprintf(o->model_name, sizeof o->model_name, "%s", o->model.preset);
  FSDP_CALL(FsdpRuntimeWrapFromDb(db, &o->wrap));
  FSDP_CALL(FsdpRuntimeOptionsFromDb(db, &o->fsdp));
  FSDP_CALL(FsdpOptimOptionsFromDb(db, &o->optim));
  FSDP_CALL(FsdpOptsGetInt(db, g, "batch_size", "sequences per rank per micro-step (B)", 4, 1,
                           1 << 24, &v));
  o->batch_size = (int)v;
  FSDP_CALL(FsdpOptsGetInt(db, g, "steps", "optimizer steps to run", 300, 1, INT64_MAX / 4, &o->steps));
  FSDP_CALL(FsdpOptsGetInt(db, g, "seed", "seed of initialization and the built-in task", 1337, 0,
                           INT64_MAX, &o->seed));
  FSDP_CALL(FsdpOptsGetInt(db, g, "log_every", "print a progress line every N steps (0 = never)", 10,
                           0, INT64_MAX / 4, &v));
  o->log_every = (int)v;
  FSDP_CALL(FsdpOptsGetString(db, g, "data", "token file in llm.c .bin layout (default: built-in task)",
                              NULL, &o->data));
  if (o->data && !o->data[0]) o->data = NULL;
  FSDP_CALL(FsdpOptsGetEnum(db, g, "summary", "final summary: text, or json (one JSON object as the "
                            "last line of stdout)", kSummaryNames, 0, &idx));
  o->summary = (FsdpSummaryFormat)idx;
  FSDP_CALL(FsdpOptsGetEnum(db, g, "device", "compute device: cpu, or cuda (needs a CUDA build)",
                            kDeviceNames, 0, &o->device_cuda));
  FSDP_CALL(FsdpComputeDtypeForDevice(db, o->device_cuda, &o->fsdp));
  FSDP_CALL(FsdpOptsGetEnum(db, g, "device_coll",
                            "how collectives move -device cuda buffers: nccl (each rank its own "
                            "GPU), mpi (MPI through pinned host buffers; ranks may share a GPU), "
                            "or auto (nccl when every rank has a GPU of its own, else mpi)",
                            kDeviceCollNames, DEVICE_COLL_AUTO, &o->device_coll));
  if (!o->device_cuda && o->device_coll == DEVICE_COLL_NCCL)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -device_coll nccl: NCCL moves GPU buffers and -device is "
               "cpu; use -device cuda, or -device_coll auto or mpi");
  FSDP_CALL(FsdpOptsGetString(db, g, "trace",
                              "write a timeline (Chrome trace-event JSON, opens in Perfetto) of "
                              "compute and communication per rank to FILE (an existing FILE is "
                              "refused; a resumed run keeps it and writes FILE.1, FILE.2, ...)",
                              NULL, &o->trace));
  if (o->trace && !o->trace[0]) o->trace = NULL;
  FSDP_CALL(FsdpOptsGetDouble(db, g, "coll_timeout",
                              "seconds a collective may run before the hang watchdog names the "
                              "ranks that have not arrived, dumps the flight recorder and ends "
                              "the job (0 = never; SIGUSR2 dumps the recorder at any time)",
                              600.0, 0.0, 1e9, &o->coll_timeout));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "coll_warn",
                              "seconds a collective may run before the hang watchdog warns, once, "
                              "naming it, its unit and step and the ranks that have not arrived; "
                              "the job goes on until -coll_timeout (0 = never; below "
                              "-coll_timeout: a default not below it is off)",
                              60.0, 0.0, 1e9, &o->coll_warn));
  if (!FsdpOptsHas(db, "coll_warn") && o->coll_timeout > 0 && o->coll_warn >= o->coll_timeout)
    o->coll_warn = 0.0; /* the timeout comes first */
  FSDP_CALL(FsdpFlightCheckWarn(o->coll_timeout, o->coll_warn));
  FSDP_CALL(FsdpOptsGetDouble(db, "FSDP", "loss_scale",
                              "initial loss scale of the sharded gradient scaler (used when "
                              "-param_dtype or -reduce_dtype is fp16)",
                              65536.0, 1e-30, 1e38, &o->loss_scale));
  FSDP_CALL(FsdpOptsGetInt(db, "FSDP", "scaler_growth_interval",
                           "steps without overflow before the loss scale doubles", 200, 1,
                           INT64_MAX / 4, &o->scaler_growth_interval));
  FSDP_CALL(FsdpOptsGetEnum(db, "Optimizer", "optim_overlap",
                            "per-unit optimizer under the gradient tail: as each unit's gradient "
                            "reduction lands, its sum of squares, overflow check and (with "
                            "-grad_clip 0 and no fp16 scaler) its AdamW run while the other "
                            "reductions are in flight, on the compute thread between backward "
                            "stages (poll) or as a task on the reduce stream (stream); none: all "
                            "after the last reduction.  Results are bit-identical (CPU only)",
                            FsdpTailNames, FSDP_TAIL_POLL, &o->optim_overlap));
  FSDP_CALL(FsdpCkptOptionsFromDb(db, &o->ckpt));
  FSDP_CALL(FsdpMetricsOptionsFromDb(db, &o->metrics));
  FSDP_CALL(FsdpPreemptOptionsFromDb(db, &o->preempt));
  const char *gv = "Validation";
  FSDP_CALL(FsdpOptsGetString(db, gv, "val_data",
                              "held-out token file in llm.c .bin layout (default: the built-in "
                              "task's held-out stream)",
                              NULL, &o->val_data));
  if (o->val_data && !o->val_data[0]) o->val_data = NULL;
  FSDP_CALL(FsdpOptsGetInt(db, gv, "val_every",
                           "validate after every N-th step and after the last (0 = never)", 0, 0,
                           INT64_MAX / 4, &o->val_every));
  FSDP_CALL(FsdpOptsGetInt(db, gv, "val_batches",
                           "global batches (data-parallel ranks x -batch_size windows) of "
                           "held-out data per validation",
                           4, 1, 1 << 20, &v));
  o->val_batches = (int)v;
  if (o->val_data && o->val_every == 0)
    FSDP_ERROR(FSDP_ERR_USAGE, "option -val_data %s: validation is off (-val_every 0); give "
               "-val_every N to validate every N steps", o->val_data);
  /* last: every option is read (-help lists them all) */
  FSDP_CALL(FsdpRuntimeCheckWrap(&o->model, o->wrap));
  FsdpOptsToString(db, o->options_string, sizeof o->options_string);
  o->optim.total_steps = o->steps;
  return FSDP_SUCCESS;
}

int FsdpComputeDtypeForDevice(FsdpOpts db, int device_cuda, FsdpRuntimeOptions *fo)
{
  /* both back-ends have bf16 matmuls now; TF32 is a GPU choice only, so
   * the CPU's summary says it is off whatever -tf32 says */
  (void)db;
  if (!device_cuda) fo->tf32 = 0;
  return FSDP_SUCCESS;
}

int FsdpComputeKernels(const FsdpKernelOps *base, FsdpDtype compute, FsdpKernelOps *storage,
                       const FsdpKernelOps **out)
{
  *out = base;
  if (compute != FSDP_DTYPE_BF16) return FSDP_SUCCESS;
  if (!base->matmul_forward_bf16 || !base->matmul_backward_bf16)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "-compute_dtype bf16: the %s kernels have no bf16 matmul; use -compute_dtype fp32",
               base->name);
  *storage = *base;
  storage->matmul_forward = base->matmul_forward_bf16;
  storage->matmul_backward = base->matmul_backward_bf16;
  *out = storage;
  return FSDP_SUCCESS;
}

int FsdpTrainerCreate(MPI_Comm comm, const FsdpTrainOptions *o, FsdpTrainer *out)
{
  *out = NULL;
  FsdpTrainer tr = calloc(1, sizeof *tr);
  FSDP_CHECK_ALLOC(tr, sizeof *tr);
  *out = tr;
  tr->comm = comm;
  tr->o = *o;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &tr->rank));
  FSDP_CALL_MPI(MPI_Comm_size(comm, &tr->W));
  tr->B = o->batch_size;
  tr->T = (int)FsdpModelDescInt(&o->model, "seq_len");
  /* first: a signal that comes during set-up preempts after step 1 */
  FSDP_CALL(FsdpPreemptInstall(&o->preempt));
  FSDP_CALL(FsdpTopoCreate(comm, &o->topo, &tr->topo));
  /* [Note: one job's files] (io/outputs.h), then this job alone in the
   * checkpoint directory: before anything is read there (-resume auto
   * chooses and loads under the lock) or any work is done */
  int resume_auto = o->ckpt.resume && strcmp(o->ckpt.resume, "auto") == 0, ckpt_dir_in_use = 0;
  FsdpOutputs outs = {o->metrics, o->trace, o->ckpt.dir, o->ckpt.every > 0 || o->preempt.mask,
                      resume_auto, o->ckpt.resume != NULL,
                      {{"-resume", resume_auto ? NULL : o->ckpt.resume},
                       {"-data", o->data}, {"-val_data", o->val_data}}};
  FSDP_CALL(FsdpOutputsCheck(comm, &outs, &ckpt_dir_in_use, tr->trace_path,
                             sizeof tr->trace_path));
  if (ckpt_dir_in_use)
    FSDP_CALL(FsdpDirLockAcquire(comm, o->ckpt.dir, "-checkpoint_dir", &tr->ckpt_lock));
  /* [Note: hang watchdog] (comm/flight.h): records every collective */
  FSDP_CALL(FsdpFlightCreate(comm, o->coll_timeout, o->coll_warn, o->metrics));
  tr->flight = 1;
  /* the device first: without a usable GPU -device cuda is a usage error
   * on every rank before anything is allocated */
  int gpu_shared = 0;
  FSDP_CALL(FsdpDeviceSetUpShared(o->device_cuda ? FSDP_DEVICE_CUDA : FSDP_DEVICE_CPU,
                                  FsdpTopoWorld(tr->topo)->comm,
                                  o->device_coll != DEVICE_COLL_NCCL, &gpu_shared));
  tr->device_set = 1;
  tr->k = FsdpDeviceKernels();
  FSDP_CALL(FsdpComputeKernels(tr->k, o->fsdp.compute_dtype, &tr->k_bf16, &tr->k));
  int tf32_applied = 0; /* [Note: bf16 compute]: -tf32 on the CUDA back-end */
  FSDP_CALL(FsdpDeviceSetTF32(o->fsdp.tf32, &tf32_applied));
  /* [Note: device collectives] NCCL needs a GPU per rank; ranks that share
   * one (W=2 or 4 on a one-GPU machine: the GPU kit) move device buffers
   * over MPI through host staging buffers ([Note: MPI staging of device
   * buffers] in coll_staged.c).  auto picks NCCL unless some rank shares,
   * and says so.  FSDP_COLL_STAGED=1 (tests only) runs the staging with
   * -device cpu, where it must match plain MPI bit for bit. */
  int use_nccl = o->device_cuda && !gpu_shared && o->device_coll != DEVICE_COLL_MPI;
  int staged = o->device_cuda ? !use_nccl : getenv("FSDP_COLL_STAGED") != NULL &&
                                              strcmp(getenv("FSDP_COLL_STAGED"), "1") == 0;
  if (o->device_cuda && gpu_shared && o->device_coll == DEVICE_COLL_AUTO && tr->rank == 0)
    printf("-device cuda: ranks share a GPU (%d ranks), so collectives go over MPI through "
           "pinned host buffers (-device_coll mpi); NCCL needs one GPU per rank\n", tr->W);
  tr->coll_name = use_nccl ? "nccl" : staged ? "mpi-staged" : "mpi";
  if (use_nccl) {
    /* [Note: CUDA streams in the runtime] (device.h) */
    FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_NCCL, &tr->coll));
    FSDP_CALL(FsdpCollSetCudaStreams(tr->coll, NULL, FsdpDeviceComputeStream()));
    FSDP_CALL(FsdpCollAttach(tr->coll, FsdpTopoShard(tr->topo)));
    FSDP_CALL(FsdpCollAttach(tr->coll, FsdpTopoReplica(tr->topo)));
  } else {
    FSDP_CALL(FsdpCollCreate(staged ? FSDP_COLL_BACKEND_MPI_STAGED : FSDP_COLL_BACKEND_MPI,
                             &tr->coll));
  }
  FSDP_CALL(FsdpModelCreate(&o->model, o->wrap, tr->B, tr->T, tr->k, (uint64_t)o->seed, &tr->model));
  /* before the table is registered: it gives the block stages their
   * recompute callback ([Note: activation recomputation], fsdp.h) */
  FSDP_CALL(FsdpModelSetRecompute(tr->model, o->fsdp.recompute));
  /* [Note: flash attention]: before set-up, which sizes the buffers by it */
  FSDP_CALL(FsdpModelSetAttention(tr->model, o->fsdp.attention));
  tr->desc = o->model;
  /* data first: a bad file is a usage error before any big allocation */
  const int V = (int)FsdpModelDescInt(&o->model, "vocab_size");
  FSDP_CALL(FsdpDataCreate(comm, o->data, V, tr->T, tr->W * tr->B, (uint64_t)o->seed, &tr->data));
  if (o->val_every > 0) /* [Note: validation] */
    FSDP_CALL(FsdpDataCreateHeldOut(comm, o->val_data, V, tr->T, tr->W * tr->B,
                                    (uint64_t)o->seed, &tr->val));
  FSDP_CALL(FsdpRuntimeCreate(tr->topo, tr->coll, &o->fsdp, &tr->rt));
  /* the runtime and the optimizer see the model only through its table */
  const FsdpModelTable *table = FsdpModelGetTable(tr->model);
  FSDP_CALL(FsdpRuntimeAddModel(tr->rt, table));
  FSDP_CALL(FsdpRuntimeSetUp(tr->rt));
  FSDP_CALL(FsdpRuntimeInitShards(tr->rt, table->init, table->ctx));
  FSDP_CALL(FsdpModelSetUp(tr->model));
  FSDP_CALL(FsdpOptimCreate(tr->rt, table->kernels, &o->optim, table->decays, &tr->optim));
  /* the timeline is always measured (exposed comm time for the summary);
   * events are stored only with -trace */
  FSDP_CALL(FsdpTraceCreate(comm, o->trace != NULL, &tr->trace));
  FSDP_CALL(FsdpRuntimeSetTrace(tr->rt, tr->trace));
  tr->scaler_on = o->fsdp.param_dtype == FSDP_DTYPE_FP16 || o->fsdp.reduce_dtype == FSDP_DTYPE_FP16;
  tr->scale = tr->scaler_on ? o->loss_scale : 1.0;
  /* [Note: the gradient tail] (runtime/optim.c); on a GPU the hook's
   * kernels would need the reductions' device events: not done there */
  if (o->optim_overlap && FsdpDeviceGetKind() == FSDP_DEVICE_CPU)
    FSDP_CALL(FsdpRuntimeSetGradReady(tr->rt, FsdpOptimUnitLanded, tr->optim,
                                      (FsdpTailWhere)o->optim_overlap));
  /* resume: shards, moments and position from a checkpoint written at any
   * (W, F); validated before anything is modified */
  char path[4096];
  int found = 0;
  FsdpCkptOptions ro = o->ckpt;
  if (o->preempt.mask && ro.every == 0) ro.every = 1; /* a preempted run saves there too */
  FSDP_CALL(FsdpCkptResolveResume(comm, &ro, path, sizeof path, &found));
  if (found) {
    FsdpCkptMeta meta;
    FSDP_CALL(FsdpCkptLoad(tr->rt, tr->optim, path, &tr->desc, &meta));
    if (meta.step >= o->steps)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "checkpoint %s is at step %lld, not before -steps %lld: nothing to do (raise "
                 "-steps)",
                 path, (long long)meta.step, (long long)o->steps);
    /* 0: unknown (e.g. weights imported from llm.c) */
    if (meta.global_batch != 0 && meta.global_batch != (int64_t)tr->W * tr->B * o->fsdp.grad_accum)
      FsdpWarn(1, "checkpoint %s was written with a global batch of %lld sequences, this run uses "
                  "%lld: the data order and the trajectory will differ",
               path, (long long)meta.global_batch,
               (long long)tr->W * tr->B * o->fsdp.grad_accum);
    if (meta.seed != o->seed)
      FsdpWarn(1, "checkpoint %s was written with -seed %lld, this run uses -seed %lld: the "
                  "built-in task's data differ from the checkpoint's run (pass -seed %lld to "
                  "continue it)",
               path, (long long)meta.seed, (long long)o->seed, (long long)meta.seed);
    tr->step = tr->first_step = meta.step;
    tr->data_base = meta.data_position;
    snprintf(tr->resumed_from, sizeof tr->resumed_from, "%s", path);
    if (tr->rank == 0) printf("resumed from %s at step %lld\n", path, (long long)meta.step);
  }
  if (o->metrics) {
    char topo[512];
    FSDP_CALL(FsdpTopoSummary(tr->topo, topo, sizeof topo));
    /* a resumed run appends to its run file, dropping the rows after the
     * step it resumed at ([Note: run file after a resume], io/metrics.h);
     * a fresh one never overwrites */
    FsdpMetricsInfo mi = {o->options_string, topo, &tr->desc,
                          FsdpModelDescParamCount(&o->model),
                          (int64_t)tr->W * tr->B * tr->T * o->fsdp.grad_accum,
                          found ? &tr->first_step : NULL};
    FSDP_CALL(FsdpMetricsCreate(comm, o->metrics, &mi, found, &tr->metrics));
  }
  size_t BT = (size_t)tr->B * tr->T;
  FSDP_CALL(FsdpMalloc(FSDP_MEM_DATA, BT * sizeof(int), &tr->inputs));
  FSDP_CALL(FsdpMalloc(FSDP_MEM_DATA, BT * sizeof(int), &tr->targets));
  tr->losses = calloc((size_t)o->steps + 1, sizeof(double));
  tr->step_ms = calloc((size_t)o->steps + 1, sizeof(double));
  tr->exposed_ms = calloc((size_t)o->steps + 1, sizeof(double));
  FSDP_CHECK_ALLOC(tr->losses, sizeof(double));
  FSDP_CHECK_ALLOC(tr->step_ms, sizeof(double));
  FSDP_CHECK_ALLOC(tr->exposed_ms, sizeof(double));
  return FSDP_SUCCESS;
}

int FsdpTrainerDestroy(FsdpTrainer *ptr)
{
  if (!ptr || !*ptr) return FSDP_SUCCESS;
  FsdpTrainer tr = *ptr;
  FSDP_CALL(FsdpMetricsDestroy(&tr->metrics));
  FSDP_CALL(FsdpOptimDestroy(&tr->optim));
  FSDP_CALL(FsdpRuntimeDestroy(&tr->rt));
  FSDP_CALL(FsdpTraceDestroy(&tr->trace));
  FSDP_CALL(FsdpModelDestroy(&tr->model));
  FSDP_CALL(FsdpDataDestroy(&tr->data));
  FSDP_CALL(FsdpDataDestroy(&tr->val));
  free(tr->val_steps);
  free(tr->val_losses);
  FSDP_CALL(FsdpCollDestroy(&tr->coll));
  if (tr->flight) FSDP_CALL(FsdpFlightDestroy());
  if (tr->device_set) FSDP_CALL(FsdpDeviceFinalize());
  FSDP_CALL(FsdpTopoDestroy(&tr->topo));
  FSDP_CALL(FsdpDirLockRelease(&tr->ckpt_lock));
  FSDP_CALL(FsdpFree(&tr->inputs));
  FSDP_CALL(FsdpFree(&tr->targets));
  free(tr->losses);
  free(tr->step_ms);
  free(tr->exposed_ms);
  free(tr);
  *ptr = NULL;
  return FSDP_SUCCESS;
}

int FsdpTrainerStep(FsdpTrainer tr, double *loss)
{
  if (tr->step >= tr->o.steps)
    FSDP_ERROR(FSDP_ERR_STATE, "step %lld beyond -steps %lld", (long long)tr->step + 1,
               (long long)tr->o.steps);
  double t0 = FsdpWallTime();
  FsdpCommCounters before;
  FsdpCollGetCounters(tr->coll, &before);
  double wait0 = FsdpTraceWaitSeconds(tr->trace), busy0 = FsdpTraceCommBusySeconds(tr->trace);
  int K = tr->o.fsdp.grad_accum;
  FsdpRuntimeSetStep(tr->rt, tr->step);
  FSDP_CALL(FsdpRuntimeZeroGradShards(tr->rt));
  double l = 0.0;
  for (int m = 0; m < K; m++) {
    /* [Note: global batch] (data.h): micro-step m of step s reads global
     * micro-batch s*K + m, so K micro-steps of B see the samples of one
     * step of K*B */
    FSDP_CALL(FsdpDataGetBatch(tr->data, tr->data_base + (tr->step - tr->first_step) * K + m,
                               tr->rank, tr->W, tr->inputs, tr->targets));
    FSDP_CALL(FsdpModelSetBatch(tr->model, tr->inputs, tr->targets));
    FsdpModelSetLossScale(tr->model, (float)(tr->scale / K));
    /* [Note: the gradient tail] the last micro-step's reductions are final */
    if (m == K - 1 && tr->o.optim_overlap && FsdpDeviceGetKind() == FSDP_DEVICE_CPU)
      FSDP_CALL(FsdpOptimBeginTail(tr->optim, tr->step, tr->scaler_on));
    FSDP_CALL(FsdpRuntimeForwardBackward(tr->rt, FsdpModelGetTable(tr->model)->ctx, m, K));
    l += FsdpModelLoss(tr->model) / K;
  }
  FSDP_CALL(FsdpRuntimeFinishGradients(tr->rt));
  FsdpFlightSetPhase(FSDP_PHASE_OPTIM);
  double tb = FsdpTraceNow(tr->trace);
  int overflow = 0;
  if (tr->scaler_on) FSDP_CALL(FsdpOptimCheckOverflow(tr->optim, &overflow));
  if (overflow) {
    /* every rank saw the same reduced flag: all skip this step and halve */
    tr->skipped++;
    tr->good_steps = 0;
    tr->scale *= 0.5;
    tr->last_norm = NAN;
    tr->last_lr = FsdpOptimLearningRate(&tr->o.optim, tr->step);
  } else {
    FsdpOptimSetGradScale(tr->optim, tr->scale);
    FSDP_CALL(FsdpOptimStep(tr->optim, tr->step, &tr->last_norm, &tr->last_lr));
    if (tr->scaler_on && ++tr->good_steps >= tr->o.scaler_growth_interval) {
      tr->scale *= 2.0;
      tr->good_steps = 0;
    }
  }
  FsdpTraceCompute(tr->trace, overflow ? "optimizer (skipped: overflow)" : "optimizer", "optimizer",
                   tr->step, -1, tb, FsdpTraceNow(tr->trace));
  /* the loss is a mean over this rank's samples; the global batch mean is
   * the mean over ranks (equal batch sizes) */
  FSDP_CALL(FsdpCollScalarSum(tr->coll, FsdpTopoWorld(tr->topo), &l, 1));
  l /= tr->W;
  double t1 = FsdpWallTime();
  FsdpCommCounters after;
  FsdpCollGetCounters(tr->coll, &after);
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
    tr->comm_total.calls[k] += after.calls[k] - before.calls[k];
    tr->comm_total.bytes[k] += after.bytes[k] - before.bytes[k];
  }
  tr->last_intra = after.intra_bytes - before.intra_bytes;
  tr->last_inter = after.inter_bytes - before.inter_bytes;
  tr->comm_total.intra_bytes += tr->last_intra;
  tr->comm_total.inter_bytes += tr->last_inter;
  tr->comm_total.scalar_calls += after.scalar_calls - before.scalar_calls;
  double exposed = FsdpTraceWaitSeconds(tr->trace) - wait0;
  tr->exposed_s += exposed;
  tr->exposed_ms[tr->step] = exposed * 1e3;
  tr->busy_s += FsdpTraceCommBusySeconds(tr->trace) - busy0;
  tr->losses[tr->step] = l;
  tr->step_ms[tr->step] = (t1 - t0) * 1e3;
  tr->step++;
  if (tr->step == tr->first_step + 1) { /* device allocations of the set-up and step 1 */
    FsdpDeviceMemStats ds;
    if (FsdpDeviceGetMemStats(&ds)) tr->allocs_step1 = ds.num_allocs;
  }
  if (loss) *loss = l;
  if (!isfinite(l)) { /* [Note: finite checkpoints] (ckpt.h): no checkpoint of this state */
    tr->nonfinite = 1;
    if (tr->resumed_from[0] && tr->step == tr->first_step + 1)
      FSDP_ERROR(FSDP_ERR_USAGE,
                 "loss became %f at step %lld, the first step after resuming from %s: the "
                 "checkpoint's values are finite (checked when it loaded) but make the loss "
                 "overflow; resume from an earlier checkpoint",
                 l, (long long)tr->step, tr->resumed_from);
    long long good = (long long)(tr->step - tr->first_step - 1);
    FSDP_ERROR(FSDP_ERR_USAGE,
               "loss became %f at step %lld after %lld good step%s: the training diverged; lower "
               "-lr or clip gradients (-grad_clip), and continue from the newest checkpoint",
               l, (long long)tr->step, good, good == 1 ? "" : "s");
  }
  return FSDP_SUCCESS;
}

/* [Note: validation] Validation batch k is global batch k of the held-out
 * data ([Note: global batch] in data.h: W ranks with batch B take the
 * windows one rank with batch W*B takes), so -val_batches K validates the
 * same K*W*B windows at every (W, F) with the same global batch.  Each
 * rank runs the FSDP forward only (FsdpRuntimeForward: units gathered and
 * resharded as in training, no backward, no reductions) on its slice; the
 * result is the mean over every window: per-rank means (equal sizes)
 * summed over batches, then over the world, divided by K*W.  Parameters
 * equal across (W, F), the result agrees to fp32 reduction order (tests:
 * 1e-6 relative).  It runs between optimizer steps and is not part of a
 * step's time, bytes or loss. */
int FsdpTrainerValidate(FsdpTrainer tr, double *loss)
{
  if (!tr->val)
    FSDP_ERROR(FSDP_ERR_STATE, "FsdpTrainerValidate without held-out data (-val_every 0)");
  double sum = 0.0;
  for (int k = 0; k < tr->o.val_batches; k++) {
    FSDP_CALL(FsdpDataGetBatch(tr->val, k, tr->rank, tr->W, tr->inputs, tr->targets));
    FSDP_CALL(FsdpModelSetBatch(tr->model, tr->inputs, tr->targets));
    FSDP_CALL(FsdpRuntimeForward(tr->rt, FsdpModelGetTable(tr->model)->ctx));
    sum += FsdpModelLoss(tr->model);
  }
  FSDP_CALL(FsdpCollScalarSum(tr->coll, FsdpTopoWorld(tr->topo), &sum, 1));
  double l = sum / ((double)tr->W * tr->o.val_batches);
  size_t need = (size_t)tr->nval + 1;
  if (FsdpArrayReserve(&tr->val_steps, &tr->cap_val_steps, need, sizeof *tr->val_steps) ||
      FsdpArrayReserve(&tr->val_losses, &tr->cap_val_losses, need, sizeof *tr->val_losses))
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory recording validation %d", tr->nval + 1);
  tr->val_steps[tr->nval] = tr->step;
  tr->val_losses[tr->nval] = l;
  tr->nval++;
  if (loss) *loss = l;
  return FSDP_SUCCESS;
}

static double Median(const double *x, int64_t n)
{
  if (n <= 0) return 0.0;
  double *c = malloc((size_t)n * sizeof *c);
  if (!c) return 0.0;
  memcpy(c, x, (size_t)n * sizeof *c);
  for (int64_t i = 1; i < n; i++) { /* insertion sort: n is small */
    double v = c[i];
    int64_t j = i - 1;
    while (j >= 0 && c[j] > v) { c[j + 1] = c[j]; j--; }
    c[j + 1] = v;
  }
  double m = (n % 2) ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
  free(c);
  return m;
}

static void HumanCount(double v, char *buf, size_t n)
{
  if (v >= 1e9) snprintf(buf, n, "%.1fG", v / 1e9);
  else if (v >= 1e6) snprintf(buf, n, "%.1fM", v / 1e6);
  else if (v >= 1e3) snprintf(buf, n, "%.1fk", v / 1e3);
  else snprintf(buf, n, "%.0f", v);
}

/* Collective.  The checkpoint after step s (periodic or preempted); path
 * (may be NULL) gets its name, "" when the save failed and
 * -checkpoint_on_error continue let the run go on (warned). */
static int WriteCheckpoint(FsdpTrainer tr, int64_t s, FILE *out, char *path, size_t size)
{
  const FsdpCkptOptions *ck = &tr->o.ckpt;
  FsdpCkptMeta m;
  memset(&m, 0, sizeof m);
  m.step = s;
  m.data_position = tr->data_base + (s - tr->first_step) * tr->o.fsdp.grad_accum;
  m.seed = tr->o.seed;
  m.global_batch = (int64_t)tr->W * tr->B * tr->o.fsdp.grad_accum;
  m.model = tr->desc;
  m.optim = tr->o.optim;
  char p[4096];
  double secs = 0.0;
  int nonfinite = 0;
  int err = FsdpCkptWriteStep(tr->rt, tr->optim, ck, &m, p, sizeof p, &secs, &nonfinite);
  if (nonfinite) tr->nonfinite = 1; /* [Note: finite checkpoints] (ckpt.h) */
  FSDP_CALL(err);
  /* "": the save failed and -checkpoint_on_error continue (warned) */
  int written = p[0] != '\0';
  if (tr->metrics)
    FSDP_CALL(FsdpMetricsEvent(tr->metrics, s, written ? "checkpoint" : "ckpt_failed",
                               written ? p : ck->dir, secs));
  if (written && tr->rank == 0 && tr->o.log_every > 0) {
    fprintf(out, "checkpoint %s written in %.2f s\n", p, secs);
    fflush(out);
  }
  if (path) snprintf(path, size, "%s", p);
  return FSDP_SUCCESS;
}

/* Collective.  [Note: preemption] (preempt.h): after step s every rank
 * asks whether any rank got a preemption signal; all get the same answer
 * here, so all save and stop together (saved: the periodic checkpoint of
 * step s was just attempted, its path or "" -- not twice).  A signal after
 * the last step changes nothing: the run is complete. */
static int PreemptCheck(FsdpTrainer tr, int64_t s, const char *saved, FILE *out)
{
  int sig = 0;
  FSDP_CALL(FsdpPreemptAgree(tr->comm, &sig));
  if (!sig || s >= tr->o.steps) return FSDP_SUCCESS;
  char p[4096] = "";
  if (saved) snprintf(p, sizeof p, "%s", saved);
  else FSDP_CALL(WriteCheckpoint(tr, s, out, p, sizeof p));
  if (!p[0])
    FSDP_ERROR(FSDP_ERR_IO,
               "preempted by SIG%s after step %lld, but its checkpoint in %s could not be written "
               "(see the warning above): the progress since the last checkpoint is lost",
               FsdpPreemptSignalName(sig), (long long)s, tr->o.ckpt.dir);
  tr->preempted = sig;
  snprintf(tr->preempt_ckpt, sizeof tr->preempt_ckpt, "%s", p);
  if (tr->metrics) FSDP_CALL(FsdpMetricsEvent(tr->metrics, s, "preempted", p, 0.0));
  if (tr->rank == 0) {
    fprintf(out, "preempted by SIG%s after step %lld/%lld: checkpoint %s; exiting with status %d "
                 "(continue with -resume auto)\n",
            FsdpPreemptSignalName(sig), (long long)s, (long long)tr->o.steps, p,
            FSDP_EXIT_PREEMPTED);
    fflush(out);
  }
  return FSDP_SUCCESS;
}

int FsdpTrainerRun(FsdpTrainer tr, FILE *out)
{
  int64_t tokens_per_step = (int64_t)tr->W * tr->B * tr->T;
  while (tr->step < tr->o.steps) {
    double loss = 0.0;
    FSDP_CALL(FsdpTrainerStep(tr, &loss));
    int64_t s = tr->step;
    int log = tr->o.log_every > 0 && (s % tr->o.log_every == 0 || s == tr->first_step + 1 || s == tr->o.steps);
    double ms = tr->step_ms[s - 1];
    /* [Note: validation] after every val_every-th step and the last; such
     * a step is always logged so that its loss is on the progress line */
    int val = tr->o.val_every > 0 && (s % tr->o.val_every == 0 || s == tr->o.steps);
    double vloss = NAN;
    if (val) {
      FSDP_CALL(FsdpTrainerValidate(tr, &vloss));
      if (tr->metrics) FSDP_CALL(FsdpMetricsAppendValidation(tr->metrics, s, vloss));
      log |= tr->o.log_every > 0;
    }
    if (tr->metrics && log) { /* collective: every rank's memory goes into the row */
      FsdpMetricsRow row = {s, loss, tr->last_lr, tr->last_norm, ms * 1e-3,
                            tokens_per_step / (ms * 1e-3), (int64_t)tr->last_intra,
                            (int64_t)tr->last_inter};
      FSDP_CALL(FsdpMetricsAppendRow(tr->metrics, &row, NULL));
    }
    const FsdpCkptOptions *ck = &tr->o.ckpt;
    int saved = ck->every > 0 && (s % ck->every == 0 || s == tr->o.steps);
    char saved_path[4096] = "";
    if (saved) FSDP_CALL(WriteCheckpoint(tr, s, out, saved_path, sizeof saved_path));
    if (tr->rank == 0 && log) {
      char tps[32];
      HumanCount(tokens_per_step / (ms * 1e-3), tps, sizeof tps);
      char vtext[32] = "";
      if (val) snprintf(vtext, sizeof vtext, " | val %.4f", vloss);
      fprintf(out, "step %lld/%lld | loss %.4f%s | lr %.1e | %.1f ms | %s tok/s | mem %.1f MiB\n",
              (long long)s, (long long)tr->o.steps, loss, vtext, tr->last_lr, ms, tps,
              FsdpMemCurrentTotal() / 1048576.0);
      fflush(out);
    }
    if (tr->o.preempt.mask) {
      FSDP_CALL(PreemptCheck(tr, s, saved ? saved_path : NULL, out));
      if (tr->preempted) break;
    }
  }
  if (tr->o.trace) {
    FSDP_CALL(FsdpRuntimeFinishGradients(tr->rt)); /* the stream is idle */
    FSDP_CALL(FsdpTraceWrite(tr->trace, tr->trace_path));
    if (tr->rank == 0) fprintf(out, "trace written to %s\n", tr->trace_path);
  }
  return FSDP_SUCCESS;
}

void FsdpTrainerCommTotals(FsdpTrainer tr, FsdpCommCounters *c) { *c = tr->comm_total; }

int FsdpTrainerScaler(FsdpTrainer tr, double *scale, int64_t *skipped)
{
  if (scale) *scale = tr->scale;
  if (skipped) *skipped = tr->skipped;
  return tr->scaler_on;
}

FsdpTrace FsdpTrainerTrace(FsdpTrainer tr) { return tr->trace; }
int FsdpTrainerPreempted(FsdpTrainer tr) { return tr->preempted; }
int FsdpTrainerNonFinite(FsdpTrainer tr) { return tr->nonfinite; }

int FsdpTrainerSummary(FsdpTrainer tr, FILE *out)
{
  FsdpRuntimeMemory mem;
  FsdpRuntimeGetMemory(tr->rt, &mem);
  uint64_t peak_p = 0, peak_g = 0;
  FsdpRuntimePeakUnsharded(tr->rt, &peak_p, &peak_g);
  /* peak RSS: the largest over ranks is what a node must hold per rank */
  double rss = (double)FsdpMemPeakRSS();
  FSDP_CALL(FsdpCollScalarMax(tr->coll, FsdpTopoWorld(tr->topo), &rss, 1));
  if (tr->rank != 0) return FSDP_SUCCESS;
  /* this job's steps: a resumed run starts at first_step */
  int64_t n = tr->step - tr->first_step;
  const double *losses = tr->losses + tr->first_step;
  double med = Median(tr->step_ms + tr->first_step, n);
  double tokens_per_s =
      med > 0 ? (double)tr->W * tr->B * tr->T * tr->o.fsdp.grad_accum / (med * 1e-3) : 0.0;
  uint64_t steps = n > 0 ? (uint64_t)n : 1;
  const FsdpCommCounters *ct = &tr->comm_total;
  if (tr->o.summary == FSDP_SUMMARY_TEXT) {
    fprintf(out,
            "summary: %lld steps | final loss %.4f | median step %.1f ms | %.0f tok/s | W %d F %d "
            "R %d | params %lld | shard %.2f MiB/rank | gather buffers %.2f MiB/rank\n",
            (long long)n, n ? losses[n - 1] : 0.0, med, tokens_per_s,
            tr->W, FsdpTopoShard(tr->topo)->size, FsdpTopoReplica(tr->topo)->size,
            (long long)FsdpModelDescParamCount(&tr->o.model), mem.param_shard_bytes / 1048576.0,
            mem.gather_buffer_bytes / 1048576.0);
    if (tr->nval > 0)
      fprintf(out, "validation: loss %.4f after step %lld (%d validations)\n",
              tr->val_losses[tr->nval - 1], (long long)tr->val_steps[tr->nval - 1], tr->nval);
    return FSDP_SUCCESS;
  }
  /* [Note: one writer for the shared keys] (summary.h): the members
   * fsdp-plan also writes come from there, this run's own follow them */
  FsdpJson j = NULL;
  FSDP_CALL(FsdpJsonCreate(&j));
  FsdpJsonBeginObject(j, NULL);
  FsdpSummaryTopology topo = {tr->W, FsdpTopoShard(tr->topo)->size,
                              FsdpTopoReplica(tr->topo)->size, FsdpTopoRanksPerNode(tr->topo),
                              FsdpTopoNumNodes(tr->topo)};
  FsdpSummaryRunMembers(j, &tr->o, &topo);
  FsdpJsonBeginArray(j, "units");
  for (int u = 0; u < FsdpRuntimeNumUnits(tr->rt); u++)
    FsdpSummaryUnit(j, FsdpRuntimeUnitName(tr->rt, u), FsdpRuntimeUnitFlatParam(tr->rt, u));
  FsdpJsonEndArray(j);
  FsdpJsonInt(j, "first_step", tr->first_step);
  FsdpJsonInt(j, "steps", n);
  FsdpJsonBeginArray(j, "losses");
  for (int64_t i = 0; i < n; i++) FsdpJsonReal(j, NULL, losses[i]);
  FsdpJsonEndArray(j);
  FsdpJsonReal(j, "final_loss", n ? losses[n - 1] : 0.0);
  /* [Note: preemption] (preempt.h): stopped early with a checkpoint */
  FsdpJsonBool(j, "preempted", tr->preempted != 0);
  if (tr->preempted) {
    FsdpJsonString(j, "preempt_signal", FsdpPreemptSignalName(tr->preempted));
    FsdpJsonString(j, "preempt_checkpoint", tr->preempt_ckpt);
  }
  FsdpSummaryValLosses(j, tr->val_steps, tr->val_losses, tr->nval);
  FsdpJsonReal(j, "step_time_ms_median", med);
  FsdpJsonReal(j, "tokens_per_s", tokens_per_s);
  FsdpSummaryMemory sm = {mem.param_shard_bytes,   mem.grad_shard_bytes,
                          FsdpOptimStateBytes(tr->optim), mem.gather_buffer_bytes,
                          mem.grad_buffer_bytes,   mem.compute_buffer_bytes,
                          FsdpModelActivationBytes(tr->model)};
  FsdpSummaryBeginMemory(j, &sm);
  FsdpJsonUint(j, "peak_unsharded_param_bytes", peak_p);
  FsdpJsonUint(j, "peak_unsharded_grad_bytes", peak_g);
  FsdpJsonUint(j, "peak_rss_bytes", (uint64_t)rss);
  FsdpJsonEndObject(j);
  FsdpCommCounters per_step = *ct;
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
    per_step.bytes[k] /= steps;
    per_step.calls[k] /= steps;
  }
  per_step.intra_bytes /= steps;
  per_step.inter_bytes /= steps;
  per_step.scalar_calls /= steps;
  FsdpSummaryBeginComm(j, &per_step);
  FsdpJsonUint(j, "scalar_calls", per_step.scalar_calls);
  FsdpJsonEndObject(j);
  FsdpSummaryBeginCommTime(j, FsdpTraceMaxInFlight(tr->trace));
  FsdpJsonReal(j, "exposed_ms", tr->exposed_s * 1e3 / steps);
  /* as step_time_ms_median: a step the machine disturbed moves the mean */
  FsdpJsonReal(j, "exposed_ms_median", Median(tr->exposed_ms + tr->first_step, n));
  FsdpJsonReal(j, "busy_ms", tr->busy_s * 1e3 / steps);
  FsdpJsonReal(j, "overlap_fraction",
               tr->busy_s > 0 ? fmax(0.0, 1.0 - tr->exposed_s / tr->busy_s) : 0.0);
  FsdpJsonEndObject(j);
  FsdpSummaryBeginPrecision(j, &tr->o.fsdp, tr->o.device_cuda);
  FsdpJsonReal(j, "loss_scale", tr->scale);
  FsdpJsonInt(j, "skipped_steps", tr->skipped);
  FsdpJsonEndObject(j);
  FsdpDeviceMemStats cs;
  if (FsdpDeviceGetMemStats(&cs)) {
    /* memory planned before step 1 never needs a retry: show it */
    FsdpJsonBeginObject(j, "device_memory");
    FsdpJsonUint(j, "allocated_bytes", cs.allocated);
    FsdpJsonUint(j, "peak_bytes", cs.peak);
    FsdpJsonUint(j, "reserved_bytes", cs.reserved);
    FsdpJsonUint(j, "num_allocs", cs.num_allocs);
    FsdpJsonUint(j, "alloc_retries", cs.alloc_retries);
    FsdpJsonUint(j, "alloc_failures", cs.alloc_failures);
    /* [Note: device memory planned once]: 0 when nothing is allocated in
     * the steady state (the GPU kit checks it) */
    FsdpJsonUint(j, "allocs_after_step1", cs.num_allocs - tr->allocs_step1);
    FsdpJsonEndObject(j);
  }
  char dev[256];
  FsdpDeviceDescribe(dev, sizeof dev);
  FsdpJsonString(j, "device", dev);
  FsdpJsonString(j, "device_coll", tr->coll_name);
  FsdpJsonString(j, "blas_core", FsdpKernelsCpuBlasCore());
  FsdpJsonEndObject(j);
  FSDP_CALL(FsdpSummaryPrint(&j, out));
  return FSDP_SUCCESS;
}

FsdpRuntime FsdpTrainerRuntime(FsdpTrainer tr) { return tr->rt; }
FsdpModel FsdpTrainerModel(FsdpTrainer tr) { return tr->model; }
FsdpOptim FsdpTrainerOptim(FsdpTrainer tr) { return tr->optim; }
FsdpTopo FsdpTrainerTopo(FsdpTrainer tr) { return tr->topo; }
int64_t FsdpTrainerStepsDone(FsdpTrainer tr) { return tr->step; }
const double *FsdpTrainerLosses(FsdpTrainer tr) { return tr->losses; }
double FsdpTrainerLastGradNorm(FsdpTrainer tr) { return tr->last_norm; }
