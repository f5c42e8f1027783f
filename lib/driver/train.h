/* train.h: the training driver -- options -> topology -> model -> runtime
 * -> loop -> summary (docs/design.md §2, §4).  fsdp-train is a thin main() around it;
 * tests drive it directly on any communicator (e.g. MPI_COMM_SELF for a
 * one-rank reference inside a 4-rank test). */
#ifndef FSDP_TRAIN_H
#define FSDP_TRAIN_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "io/ckpt.h"
#include "comm/coll.h"
#include "io/data.h"
#include "io/metrics.h"
#include "driver/preempt.h"
#include "runtime/fsdp.h"
#include "model/family.h"
#include "runtime/optim.h"
#include "comm/topo.h"

typedef enum { FSDP_SUMMARY_TEXT, FSDP_SUMMARY_JSON } FsdpSummaryFormat;

typedef struct {
  FsdpTopoOptions topo;
  FsdpRuntimeOptions fsdp;
  FsdpOptimOptions optim;
  FsdpModelDesc model; /* family, preset and attributes (family.h) */
  char model_name[32];   /* -model: the preset */
  int wrap, batch_size, log_every;
  int64_t steps, seed;
  const char *data; /* NULL: built-in task */
  FsdpSummaryFormat summary;
  int device_cuda;
  int device_coll;            /* -device_coll: 0 auto, 1 nccl, 2 mpi ([Note: device collectives]) */
  const char *trace;          /* -trace FILE: Chrome trace-event timeline */
  double coll_timeout;        /* -coll_timeout S: hang watchdog (0 = off; comm/flight.h) */
  double coll_warn;           /* -coll_warn S: its warning before that (0 = off) */
  double loss_scale;          /* -loss_scale: initial fp16 loss scale */
  int64_t scaler_growth_interval; /* -scaler_growth_interval: good steps before doubling */
  int optim_overlap;          /* -optim_overlap (FsdpTailWhere): [Note: the gradient tail] (runtime/optim.c) */
  FsdpCkptOptions ckpt;       /* -checkpoint_dir -checkpoint_every -checkpoint_keep -resume */
  const char *metrics;        /* -metrics FILE: HDF5 run file */
  FsdpPreemptOptions preempt; /* -preempt_signals ([Note: preemption]) */
  const char *val_data;       /* -val_data FILE: held-out tokens (NULL: built-in held-out stream) */
  int64_t val_every;          /* -val_every N: validate after every N-th step and the last (0 = never) */
  int val_batches;            /* -val_batches K: global batches of held-out windows per validation */
  char options_string[4096];  /* the options as given, for the run file */
} FsdpTrainOptions;

/* Not collective.  Reads every option of every component (so -help lists
 * them all and FsdpOptsCheckUnknown can run afterwards). */
int FsdpTrainOptionsFromDb(FsdpOpts db, FsdpTrainOptions *o);

typedef struct FsdpTrainer_ *FsdpTrainer;

/* [Note: bf16 compute] (runtime/fsdp.h), for every program that runs the
 * model.  FsdpComputeDtypeForDevice, after the options are read: both
 * back-ends have bf16 matmuls, so compute_dtype stands; -tf32 is a GPU
 * choice, so without -device cuda it becomes 0 (what the summary says).  FsdpComputeKernels: with compute bf16, a copy of base
 * in *storage whose matmul entries are its bf16 ones, else base itself (a
 * back-end without them: usage error); *out is what the model gets. */
int FsdpComputeDtypeForDevice(FsdpOpts db, int device_cuda, FsdpRuntimeOptions *fo);
int FsdpComputeKernels(const FsdpKernelOps *base, FsdpDtype compute, FsdpKernelOps *storage,
                       const FsdpKernelOps **out);

/* Collective on comm.  Builds topology, model, runtime, data, optimizer,
 * and initializes the parameter shards. */
int FsdpTrainerCreate(MPI_Comm comm, const FsdpTrainOptions *o, FsdpTrainer *tr);
/* Collective on comm. */
int FsdpTrainerDestroy(FsdpTrainer *tr);

/* Collective on comm.  One optimizer step; *loss gets the mean loss over
 * the global batch (same on every rank). */
int FsdpTrainerStep(FsdpTrainer tr, double *loss);

/* Collective on comm.  Run o->steps steps, printing progress on rank 0
 * every log_every steps to out.  Returns early, with success, when the run
 * was preempted (FsdpTrainerPreempted): the checkpoint is written. */
int FsdpTrainerRun(FsdpTrainer tr, FILE *out);

/* Collective on comm.  Rank 0 prints the summary (text, or one JSON line). */
int FsdpTrainerSummary(FsdpTrainer tr, FILE *out);

FsdpRuntime FsdpTrainerRuntime(FsdpTrainer tr);
FsdpModel FsdpTrainerModel(FsdpTrainer tr);
FsdpOptim FsdpTrainerOptim(FsdpTrainer tr);
FsdpTopo FsdpTrainerTopo(FsdpTrainer tr);
int64_t FsdpTrainerStepsDone(FsdpTrainer tr);
const double *FsdpTrainerLosses(FsdpTrainer tr);
double FsdpTrainerLastGradNorm(FsdpTrainer tr);
/* Collective counters summed over the steps run so far (rank-local). */
void FsdpTrainerCommTotals(FsdpTrainer tr, FsdpCommCounters *c);

/* The sharded gradient scaler (fp16): whether it is active, its current
 * scale and how many steps it skipped for an overflow. */
int FsdpTrainerScaler(FsdpTrainer tr, double *scale, int64_t *skipped);
FsdpTrace FsdpTrainerTrace(FsdpTrainer tr);
/* The signal that preempted the run (SIGUSR1, ...: FsdpTrainerRun stopped
 * after a checkpoint, fsdp-train exits with FSDP_EXIT_PREEMPTED), or 0. */
int FsdpTrainerPreempted(FsdpTrainer tr);

/* Not collective.  1 when the run stopped because the training state
 * became non-finite (a loss, or a checkpoint save refused: [Note: finite
 * checkpoints] in ckpt.h; fsdp-train exits with FSDP_EXIT_NONFINITE), else
 * 0.  Every rank agrees. */
int FsdpTrainerNonFinite(FsdpTrainer tr);
/* Collective on comm.  [Note: validation] (train.c): the mean loss over
 * -val_batches global batches of held-out windows, each rank its slice,
 * computed with the FSDP forward only (FsdpRuntimeForward); the same on
 * every rank.  Between steps; needs -val_every > 0 (the held-out data is
 * opened then). */
int FsdpTrainerValidate(FsdpTrainer tr, double *loss);

#endif
