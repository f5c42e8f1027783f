/* ckpt.h: reshardable checkpoints in parallel HDF5 (docs/design.md §7 "Checkpoint").
 *
 * File layout (format version FSDP_CKPT_VERSION; h5dump / h5py readable):
 *   /                      attributes: format_version, program, created
 *                          (ISO 8601), step, data_position, seed,
 *                          global_batch, world_size, sharding_factor,
 *                          ranks_per_node (the topology it was written at:
 *                          informational, a checkpoint loads at any)
 *   /model                 attributes: name (the preset), family
 *                          ("gpt2"), the model description's attributes
 *                          (model.h; GPT: n_layer, n_embd, n_head,
 *                          vocab_size, seq_len, integers), num_parameters
 *                          (tensors).  Every /model attribute but name,
 *                          family and num_parameters belongs to the
 *                          description: an integer, a float or a string.
 *                          A file without family (written before there
 *                          were families) is a gpt2 model.
 *   /model/<name>          one fp32 dataset per original parameter, in its
 *                          full logical shape (e.g. /model/wte [V, C])
 *   /optim                 attributes: type ("adamw"), step_count (AdamW t,
 *                          for bias correction), lr, lr_min, weight_decay,
 *                          beta1, beta2, eps, grad_clip, warmup, total_steps
 *   /optim/exp_avg/<name>     AdamW first moment, same shape as the parameter
 *   /optim/exp_avg_sq/<name>  second moment
 * Parameter names do not depend on -wrap, W or F: the same file loads at
 * any world size, sharding factor, ranks per node and unit wrapping.
 *
 * [Note: checkpoint I/O] A shard is a contiguous range of a unit's flat
 * parameter, so on each rank a parameter contributes at most one
 * contiguous flat range (a piece, flatparam.h).  Every rank writes and
 * reads exactly its pieces: the flat range is selected in the dataset's
 * logical shape as a union of hyperslabs (partial first row, full middle
 * rows, partial last row, recursively for higher ranks), which HDF5
 * iterates in row-major order, i.e. in flat order, against a 1-D memory
 * space pointing straight into the shard (no staging copy).  All transfers
 * are collective (H5FD_MPIO_COLLECTIVE, collective metadata too); a rank
 * with nothing for a dataset takes part with an empty selection.  With
 * replicas (F < W) the R ranks holding the same shard split it into R
 * equal sub-ranges and each writes one, so every element is written once
 * and all W ranks share the write bandwidth.  On load every rank reads its
 * whole shard (replicas read the same bytes; MPI-IO aggregates them).
 *
 * [Note: atomic checkpoints] Save writes `<path>.tmp-XXXXXX` (a unique
 * name made by rank 0 with mkstemp and broadcast), closes it on every
 * rank, then rank 0 fsyncs it, renames it to <path> and fsyncs the
 * directory.  So a file named ckpt_*.h5 is always complete: a job killed
 * while writing leaves only *.tmp-* files, which FsdpCkptFindLatest
 * ignores and the next periodic save's pruning removes.  A save that fails (a full
 * disk, an I/O error, on any rank) never hangs: all ranks agree on it,
 * the temporary file is removed and the previous checkpoints stay as they
 * were ([Note: failed saves] in ckpt.c).
 *
 * [Note: checkpoint validation] Load first validates on rank 0 alone with
 * serial HDF5 (file exists, opens as HDF5 -- HDF5 refuses a file shorter
 * than its recorded end, so a truncated copy fails here --, format
 * version, model description equal to the expected one, every parameter
 * present with the model's shape and nothing else: FsdpCkptCheck, whose
 * structured report the trainer and fsdp-ckpt word each their own way),
 * then broadcasts the
 * verdict: every rank raises the same FSDP_ERR_USAGE with a message naming
 * the file and the first problem, and no rank touches its shards or hangs.
 * Only then do all ranks open the file with MPI-IO and read.  A load never
 * writes to the file.
 *
 * [Note: checkpoint attributes] The root attributes say where a run
 * stands, and a resumed run computes with them: a negative step gave a
 * negative learning rate and a crash in the next save, a negative data
 * position an internal error, a step_count of -1 NaN.  So every reader
 * (FsdpCkptCheck: load, -resume auto, fsdp-ckpt, fsdp-sample) refuses a
 * file unless 0 <= step <= FSDP_CKPT_MAX_STEP, seed >= 0, global_batch >=
 * 0 (0: unknown), step <= data_position <= step * FSDP_CKPT_MAX_ACCUM
 * (each optimizer step consumes 1 to -grad_accum's maximum micro-batches;
 * the data itself wraps around, so any such position lies inside it),
 * world_size >= 1, 1 <= sharding_factor <= world_size dividing it,
 * ranks_per_node >= 1, and, with /optim, 0 <= step_count <= step (AdamW
 * counts the steps the fp16 scaler did not skip).
 *
 * [Note: finite checkpoints] A checkpoint never holds a NaN or an
 * infinity.  Saving: the save's own write pass checks each piece of a
 * shard (parameters and both moments) right before it is written -- on
 * every back-end the bytes sit in host memory there (device shards are
 * staged, [Note: device staging]), replicas split a shard so every element
 * is looked at once, and the agreement that precedes each collective
 * write ([Note: failed saves]) carries the verdict, so no pass over the
 * state and no collective is added.  (The optimizer's update pass would
 * see the values a step earlier, but on a GPU it runs in device kernels,
 * which would each need a reduction of their own.)  A refused save
 * removes its temporary file, names the first bad parameter, prunes
 * nothing, and the trainer stops with FSDP_EXIT_NONFINITE.  Reading:
 * FsdpCkptCheck with FSDP_CKPT_CHECK_VALUES reads every value of /model
 * (and the moments when they are wanted) on rank 0 before any shard is
 * touched, naming the dataset, the element and its index; the load,
 * -resume auto (which skips such files), fsdp-ckpt verify and export-hf,
 * and fsdp-sample all call it.  This reads the file once more than the
 * load itself (serially): a second or so per GiB.
 */
#ifndef FSDP_CKPT_H
#define FSDP_CKPT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/fsdp.h"
#include "model/model.h"
#include "base/opts.h"
#include "runtime/optim.h"

#define FSDP_CKPT_VERSION 1

/* [Note: checkpoint attributes]: the largest step (as -steps) and the
 * most micro-batches one step consumes (as -grad_accum) */
#define FSDP_CKPT_MAX_STEP (INT64_MAX / 4)
#define FSDP_CKPT_MAX_ACCUM ((int64_t)1 << 20)

/* fsdp-train's exit status when the training state became non-finite: a
 * loss, or a checkpoint save refused ([Note: finite checkpoints]) */
#define FSDP_EXIT_NONFINITE 65

/* What a checkpoint records besides tensors.  Save reads the fields marked
 * (in); Load fills all of them from the file. */
typedef struct {
  int64_t step;          /* (in) optimizer steps done */
  int64_t data_position; /* (in) micro-batches consumed: FsdpDataGetBatch's micro_step */
  int64_t seed;          /* (in) -seed (initialization, built-in task) */
  int64_t global_batch;  /* (in) sequences per optimizer step (informational) */
  FsdpModelDesc model;   /* (in) family, preset (informational; stored as
                            /model "name") and the attributes compared on load */
  FsdpOptimOptions optim; /* (in) hyperparameters (informational: a resumed
                             run uses its own options) */
  int64_t optim_step;    /* AdamW step count: Save takes it from opt, Load
                            sets it into opt and here */
  int world_size, sharding_factor, ranks_per_node; /* Save: from the
                            runtime's topology; Load: as written */
  int format_version;    /* Load only */
  char created[40];      /* Load only: ISO 8601 time of writing */
} FsdpCkptMeta;

/* Collective on the runtime's world (FsdpTopoWorld).  Write every
 * parameter shard (and, when opt is not NULL, the AdamW moments) to path,
 * atomically ([Note: atomic checkpoints]); an existing file of that name
 * is replaced only once the new one is complete.  meta: see above.  When
 * the file system fails on any rank, every rank returns FSDP_ERR_USAGE
 * with one message (printed by rank 0: path, errno text, bytes needed and
 * free) after removing the temporary file. */
int FsdpCkptSave(FsdpRuntime rt, FsdpOptim opt, const char *path, const FsdpCkptMeta *meta);

/* Collective on the runtime's world.  Validate path against the runtime's
 * parameters (and expect, when not NULL) as in [Note: checkpoint
 * validation], then read this rank's shard of every parameter (and of
 * both moments when opt is not NULL; a file without /optim is then a
 * usage error) and zero the shard padding; sets opt's step count.  *meta
 * (may be NULL) gets the file's metadata.  Any problem with the file is
 * FSDP_ERR_USAGE on every rank, before any shard is modified. */
int FsdpCkptLoad(FsdpRuntime rt, FsdpOptim opt, const char *path, const FsdpModelDesc *expect,
                 FsdpCkptMeta *meta);

/* The first problem FsdpCkptCheck found in a checkpoint file. */
typedef enum {
  FSDP_CKPT_GOOD = 0,
  FSDP_CKPT_BAD_FILE,   /* the file or its attributes: text holds the message */
  FSDP_CKPT_NO_GROUP,   /* group is missing (an /optim one: no optimizer state) */
  FSDP_CKPT_BAD_GROUP,  /* group is not a readable group */
  FSDP_CKPT_MISSING,    /* parameter name has no dataset in group */
  FSDP_CKPT_UNREADABLE, /* group/name is not a readable dataset */
  FSDP_CKPT_NOT_FLOAT,  /* group/name is not floating-point (elem_size bytes) */
  FSDP_CKPT_NOT_FP32,   /* floating-point of elem_size != 4 bytes (asked for fp32) */
  FSDP_CKPT_SHAPE,      /* group/name has shape[ndim], the model want_shape[want_ndim] */
  FSDP_CKPT_EXTRA,      /* group holds name, which is no parameter of the model */
  FSDP_CKPT_COUNT,      /* group holds entries links for expected parameters */
  FSDP_CKPT_NONFINITE   /* group/name holds value ("NaN", "+Inf", "-Inf") at flat
                           element `element`, index shape[ndim] */
} FsdpCkptFinding;

#define FSDP_CKPT_MAX_RANK 32 /* dimensions of a dataset a report can hold (HDF5's) */

typedef struct {
  FsdpCkptFinding finding;
  char text[1024];            /* BAD_FILE: the whole message, naming the file */
  char group[32];             /* "/model", "/optim/exp_avg", "/optim/exp_avg_sq" */
  char name[FSDP_MAX_NAME + 1]; /* the parameter or the extra entry */
  int ndim, want_ndim;
  int64_t shape[FSDP_CKPT_MAX_RANK], want_shape[FSDP_MAX_NDIM];
  size_t elem_size;
  int64_t entries, expected;
  int64_t element;            /* NONFINITE: flat (row-major) index in the dataset */
  char value[8];              /* NONFINITE: "NaN", "+Inf" or "-Inf" */
} FsdpCkptReport;

/* Which groups FsdpCkptCheck compares with the runtime's parameters. */
enum {
  FSDP_CKPT_CHECK_MODEL = 1, /* /model */
  FSDP_CKPT_CHECK_OPTIM = 2, /* /optim/exp_avg and /optim/exp_avg_sq */
  FSDP_CKPT_CHECK_FP32 = 4,  /* datasets must be 32-bit floats (else any float) */
  FSDP_CKPT_CHECK_VALUES = 8 /* every value of the checked groups is finite
                                ([Note: finite checkpoints]) */
};

/* Not collective: serial HDF5, path opened read-only ([Note: checkpoint
 * validation]).  Opens path and reads its metadata into *meta (may be
 * NULL), each attribute in range and consistent with the others
 * ([Note: checkpoint attributes]); compares the model description with
 * expect (when not NULL); then, when rt is not NULL, checks that each
 * group named in `checks` holds exactly the parameters rt registered
 * (FsdpRuntimeUnitSpecs: also before set-up), with their shapes; with
 * FSDP_CKPT_CHECK_VALUES, reads every dataset of those groups (of the
 * ones present when rt is NULL) and finds the first non-finite value.
 * *report gets the first problem (finding FSDP_CKPT_GOOD: none).  The
 * trainer's load, -resume auto and fsdp-ckpt verify all judge a file
 * here.  Returns an error code only when it could not look (out of
 * memory). */
int FsdpCkptCheck(const char *path, FsdpRuntime rt, const FsdpModelDesc *expect, unsigned checks,
                  FsdpCkptMeta *meta, FsdpCkptReport *report);

/* Not collective.  The report as the trainer words it (FsdpCkptLoad's
 * message): "checkpoint <path> has no parameter /model/wte", ... */
void FsdpCkptReportString(const FsdpCkptReport *r, const char *path, char *buf, size_t size);

/* "[64, 32]" into buf. */
void FsdpCkptShapeString(int ndim, const int64_t *shape, char *buf, size_t size);

/* Collective on comm.  Rank 0 reads the root, /model and /optim
 * attributes of path and broadcasts them (no tensors are read).  A
 * missing, non-HDF5 or non-checkpoint file is FSDP_ERR_USAGE on every
 * rank.  For tools (fsdp-ckpt info) and resume logic. */
int FsdpCkptReadMeta(MPI_Comm comm, const char *path, FsdpCkptMeta *meta);

/* Not collective.  "dir/ckpt_%08lld.h5" into buf; FSDP_ERR_USAGE if it
 * does not fit. */
int FsdpCkptPath(const char *dir, int64_t step, char *buf, size_t size);

/* Not collective.  Is name (no directory) one the checkpoints of a
 * directory take: ckpt_<digits>.h5, or a temporary or headroom file of a
 * save (ckpt_*.h5.tmp-*)?  A save renames onto such names and pruning
 * deletes them, so no other output may use one there. */
int FsdpCkptIsOwnName(const char *name);

/* Collective on comm.  Newest complete checkpoint in dir: the highest step
 * among files named exactly ckpt_<digits>.h5 that pass a quick check
 * (open as HDF5, a format_version this build reads); *.tmp-* files and
 * files failing the check are skipped (rank 0 warns about the latter).
 * *found = 0 (and path "") when there is none or dir does not exist. */
int FsdpCkptFindLatest(MPI_Comm comm, const char *dir, char *path, size_t size, int *found);

/* Options, group "Checkpoint". */
typedef struct {
  const char *dir;     /* -checkpoint_dir D (default "checkpoints") */
  int64_t every;       /* -checkpoint_every K: after every K-th step (0 = never) */
  int keep;            /* -checkpoint_keep N: newest kept (0 = all) */
  const char *resume;  /* -resume FILE|auto (NULL: start fresh) */
  int64_t test_abort;  /* -checkpoint_test_abort N (testing): abort the job
                          after N datasets of the next checkpoint */
  int on_error;        /* -checkpoint_on_error stop|continue: what a failed
                          save does (FSDP_CKPT_ON_ERROR_*) */
} FsdpCkptOptions;

enum { FSDP_CKPT_ON_ERROR_STOP, FSDP_CKPT_ON_ERROR_CONTINUE };

/* Not collective.  Reads the options above. */
int FsdpCkptOptionsFromDb(FsdpOpts db, FsdpCkptOptions *o);

/* Collective on comm.  Like FsdpCkptFindLatest, but each candidate must
 * also pass FsdpCkptCheck with every value (attributes, both groups,
 * FSDP_CKPT_CHECK_VALUES; rank 0 reads the files): the ones that fail are
 * skipped and named in a warning with their first problem.  -resume
 * auto's choice. */
int FsdpCkptFindResumable(MPI_Comm comm, const char *dir, char *path, size_t size, int *found);

/* Collective on comm.  What to resume from: -resume FILE gives FILE
 * (FsdpCkptLoad validates it); -resume auto gives the newest checkpoint
 * in the directory that passes verification (FsdpCkptFindResumable), or
 * *found = 0 to start fresh when there is none.  Without -resume, checkpointing (every > 0) into a directory that
 * already holds checkpoints is a usage error (it would mix two runs and
 * prune the other's files); *found = 0 otherwise.  fsdp-train calls it,
 * and loads what it chose, holding the directory's lock ([Note:
 * checkpoint directory lock], dirlock.h), so no other job's save or
 * pruning runs there meanwhile. */
int FsdpCkptResolveResume(MPI_Comm comm, const FsdpCkptOptions *o, char *path, size_t size,
                          int *found);

/* Collective on the runtime's world.  Periodic checkpoint: rank 0 creates
 * o->dir if needed, then FsdpCkptSave to FsdpCkptPath(o->dir, meta->step),
 * then prunes: rank 0 deletes the checkpoints in o->dir beyond the
 * o->keep newest by step (keep <= 0 keeps all), counting only files that
 * pass FsdpCkptFindLatest's quick check (others are left alone), and
 * leftover *.tmp-* files of interrupted saves; only after a save that
 * passed the finite check ([Note: finite checkpoints]), and never the
 * file it just wrote, even when newer ones exist (a run resumed from an
 * older -resume FILE): the newest checkpoint known good always stays.
 * path/size (may be NULL/0) get the file name, *seconds (may be NULL) the
 * wall time of the whole call.  A save
 * the file system refused (directory, disk full, I/O error) is, with
 * o->on_error STOP, FsdpCkptSave's FSDP_ERR_USAGE; with CONTINUE, rank 0
 * warns once, nothing is pruned, and the call succeeds with path set to
 * "" (not written).  A save refused because the state is not finite
 * ([Note: finite checkpoints]) is FSDP_ERR_USAGE whatever o->on_error
 * says, with *nonfinite (may be NULL) set to 1 and nothing pruned. */
int FsdpCkptWriteStep(FsdpRuntime rt, FsdpOptim opt, const FsdpCkptOptions *o,
                      const FsdpCkptMeta *meta, char *path, size_t size, double *seconds,
                      int *nonfinite);

/* [Note: streamed checkpoints] Converters (fsdp-ckpt import-hf,
 * import-llmc) write a checkpoint one tensor at a time without a runtime:
 * serial HDF5, the layout above with the attributes written by the same
 * code as FsdpCkptSave (written topology W = F = G = 1, AdamW step_count
 * 0, meta's hyperparameters), each parameter written in flat pieces in
 * order, and its two moments created as datasets that HDF5 fills with
 * zeros itself.  So a conversion holds what it chooses to hold (one
 * tensor), never the model; FsdpCkptLoad and FsdpCkptCheck read the
 * result as any checkpoint.  Not atomic: callers write a temporary name
 * and publish it (fileutil.h). */
typedef struct FsdpCkptWriter_ *FsdpCkptWriter;

/* Not collective.  Create path (truncating) for nparams parameters;
 * meta: step, data_position, seed, global_batch, model, optim (world
 * size, sharding factor and ranks per node are 1). */
int FsdpCkptWriterCreate(const char *path, const FsdpCkptMeta *meta, int nparams,
                         FsdpCkptWriter *w);
/* Start /model/<spec->name> (fp32, spec's shape) and its zero moments. */
int FsdpCkptWriterBegin(FsdpCkptWriter w, const FsdpParamSpec *spec);
/* Elements [start, start + count) of the current parameter (flat,
 * row-major); pieces come in order, each starting where the last ended. */
int FsdpCkptWriterWrite(FsdpCkptWriter w, int64_t start, int64_t count, const float *data);
/* Every element of the current parameter was written. */
int FsdpCkptWriterEnd(FsdpCkptWriter w);
/* nparams parameters were written; close the file. */
int FsdpCkptWriterClose(FsdpCkptWriter *w);
/* Close without the checks (after an error); the caller removes the file. */
void FsdpCkptWriterAbort(FsdpCkptWriter *w);

/* Not collective; testing only.  The next saves call MPI_Abort on the
 * runtime's world after writing this many datasets (0 = off), to emulate
 * a job killed mid-checkpoint.  (A failed write, e.g. a full disk, is
 * emulated with the environment variable FSDP_TEST_CKPT_FAULT: [Note:
 * storage fault injection] in ckpt.c.) */
void FsdpCkptSetTestAbort(int64_t after_datasets);

#endif
