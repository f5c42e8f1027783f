/* metrics.h: the HDF5 run file (docs/design.md §7 "Run file", -metrics FILE).
 *
 * Layout (format version FSDP_METRICS_VERSION; h5py / h5dump / h5watch):
 *   /            attributes: format_version, program, start_time (ISO
 *                8601), options (the options as given, FsdpOptsToString),
 *                topology (FsdpTopoSummary), world_size, hostnames (one
 *                string per rank), model_name (the preset), model_family
 *                ("gpt2"), the model description's attributes under their
 *                names (model.h; GPT: n_layer, n_embd, n_head, vocab_size,
 *                seq_len), param_count, tokens_per_step
 *   /metrics/<column>  1-D extendible chunked datasets, one row per logged
 *                step: step, world_size (int64); loss, lr, grad_norm,
 *                step_time_s, tokens_per_s (float64); comm_intra_bytes,
 *                comm_inter_bytes (int64: bytes this rank (rank 0)
 *                received in collectives during that step, intra-/inter-
 *                node, coll.h [Note: byte accounting]); plus any column
 *                registered with FsdpMetricsAddColumn (float64).
 *   /metrics/val_step, /metrics/val_loss  1-D, one row per validation
 *                (not per logged step): the step after which it ran
 *                (int64) and the mean held-out loss (float64); empty
 *                when the run does not validate ([Note: validation rows]
 *                in metrics.c).
 *   /memory/<name>     2-D int64 [rows, W]: column r is world rank r,
 *                gathered each row: allocated, peak (mem.h totals),
 *                shard_bytes (params + grads + optimizer shards),
 *                unsharded_bytes (gather ring + gradient buffers), rss
 *                (resident set size now).  -1 where a row had fewer ranks
 *                (an appended run at a smaller W).
 *   /events      compound rows {step int64, kind char[16], seconds float64,
 *                detail char[256]}: e.g. ("checkpoint", path, write time),
 *                and ("append", topology) with step -1 written by
 *                FsdpMetricsCreate when a resumed run appends.
 *
 * [Note: run file streaming] Rank 0 is the only writer (serial HDF5,
 * default driver; other ranks only take part in the gathers).  The file
 * uses the latest format and switches to single-writer/multiple-reader
 * mode at the first row: h5py (File(path, "r", swmr=True)) or h5watch can
 * follow a running job.  Every row and event is followed by H5Fflush, so a
 * job killed at any point keeps every row it logged; such a file still
 * carries the "open for SWMR writing" mark, so plain readers need SWMR
 * read mode (fsdp-report does this) or `h5clear -s FILE`, and append mode
 * clears it.  Columns and attributes can only be added before the first
 * row (SWMR forbids new objects).
 *
 * [Note: run file overwrite] An existing run file is never replaced:
 * FsdpMetricsCreate refuses it unless `append` is set (a resumed run),
 * which opens it and appends rows (widening /memory if W grew) and an
 * "append" event; root attributes keep the first run's values.
 *
 * [Note: run file after a resume] A run killed or preempted after its
 * last checkpoint logged rows for steps it will do again once resumed
 * from that checkpoint.  So a resumed run (info->resume_step) first cuts
 * /metrics/<column> and /memory/<name> back to the rows before the first
 * row of a later step, and /metrics/val_step, val_loss to the validations
 * up to that step (H5Dset_extent, before SWMR mode, which only grows
 * datasets): the file then holds one row per logged step, the series a
 * run without the interruption writes, for fsdp-report and h5py alike.
 * /events keep everything (they are a log: the "append" event says at
 * which step the run resumed and how many rows it dropped).
 *
 * [Note: run file on a full disk] A row or a validation row the file
 * system refuses (a full disk, a quota, an I/O error) stops the job
 * with one message naming the run file and the errno text, on every rank
 * (FSDP_ERR_USAGE, exit status 2, as a refused checkpoint save); HDF5's
 * account goes in the message only when the call left no errno.  The
 * file keeps the rows flushed before; it is then closed without further
 * complaint.  (An event is written by rank 0 alone, outside any
 * collective: its failure still ends the job through FsdpAbort.)
 */
#ifndef FSDP_METRICS_H
#define FSDP_METRICS_H

#include <mpi.h>
#include <stdint.h>

#include "model/model.h"
#include "base/opts.h"

#define FSDP_METRICS_VERSION 1

typedef struct {
  const char *options;    /* may be NULL */
  const char *topology;   /* may be NULL */
  const FsdpModelDesc *model; /* may be NULL (no model attributes) */
  int64_t param_count, tokens_per_step;
  const int64_t *resume_step; /* appending after a resume from this step:
                                 rows of later steps are dropped ([Note: run
                                 file after a resume]); NULL: keep every row */
} FsdpMetricsInfo;

/* The standard columns of a row. */
typedef struct {
  int64_t step;
  double loss, lr, grad_norm, step_time_s, tokens_per_s;
  int64_t comm_intra_bytes, comm_inter_bytes;
} FsdpMetricsRow;

/* One rank's memory at a logged row (bytes). */
typedef struct {
  int64_t allocated, peak, shard_bytes, unsharded_bytes, rss;
} FsdpMetricsMemory;

typedef struct FsdpMetrics_ *FsdpMetrics;

/* Not collective.  Reads -metrics FILE (group "Output"; default none):
 * *path is NULL when not given. */
int FsdpMetricsOptionsFromDb(FsdpOpts db, const char **path);

/* Collective on comm.  Rank 0 creates path ([Note: run file overwrite]:
 * an existing file is a usage error unless append, then it is opened and
 * extended; a file that is not a run file is refused either way) and
 * writes the root attributes (hostnames are gathered over comm).  Errors
 * are agreed on every rank. */
int FsdpMetricsCreate(MPI_Comm comm, const char *path, const FsdpMetricsInfo *info, int append,
                      FsdpMetrics *m);

/* Not collective, call on every rank alike, before the first row: add a
 * float64 column /metrics/<name>; *col (may be NULL) gets its index.  An
 * existing name gives its index; after the first row it is FSDP_ERR_STATE. */
int FsdpMetricsAddColumn(FsdpMetrics m, const char *name, int *col);

/* Index of a column by name, or -1. */
int FsdpMetricsColumn(FsdpMetrics m, const char *name);

/* Not collective.  Value of an added column for the next row (rank 0's
 * value is written; unset columns are written as NaN). */
int FsdpMetricsSet(FsdpMetrics m, int col, double value);

/* Collective on comm.  Append one row: row (rank 0's is written) and
 * every rank's memory (mem NULL: FsdpMetricsSampleMemory), gathered to
 * rank 0; then flush ([Note: run file streaming]). */
int FsdpMetricsAppendRow(FsdpMetrics m, const FsdpMetricsRow *row, const FsdpMetricsMemory *mem);

/* Collective on comm.  Rank 0 appends (step, loss) to /metrics/val_step
 * and /metrics/val_loss and flushes; every rank gets its outcome. */
int FsdpMetricsAppendValidation(FsdpMetrics m, int64_t step, double loss);

/* Not collective: call on every rank alike; rank 0 appends an event row
 * and flushes.  kind: at most 15 characters; detail truncated to 255. */
int FsdpMetricsEvent(FsdpMetrics m, int64_t step, const char *kind, const char *detail,
                     double seconds);

/* Rows written so far (including rows of the file appended to). */
int64_t FsdpMetricsNumRows(FsdpMetrics m);

/* Collective on comm.  Closes the file (clearing the SWMR mark) and frees
 * m; accepts NULL; sets *m = NULL.  Named Destroy like the end of every
 * fsdp object (Create/Destroy), although the object is an open file: the
 * pair is the handle's life; the file itself stays. */
int FsdpMetricsDestroy(FsdpMetrics *m);

/* Not collective.  This rank's memory now: mem.h tags (shard = params +
 * grads + optim, unsharded = gather + reduce) and RSS from /proc. */
void FsdpMetricsSampleMemory(FsdpMetricsMemory *mem);

#endif
