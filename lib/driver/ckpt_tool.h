/* ckpt_tool.h: fsdp-ckpt's subcommands (info, verify, the llm.c and
 * Hugging Face conversions) as library functions, for any model family
 * (model/family.h): the program src/fsdp-ckpt.c is their table.  Not
 * installed (the program's own, like driver/summary.h).
 *
 * None is collective: each runs in one process (its runtime lives on
 * MPI_COMM_SELF), after FsdpHdf5Init.  Each returns FSDP_SUCCESS or an
 * error code with the message already reported (FSDP_ERR_USAGE for a
 * file that is missing, bad or would be overwritten).  Reports go to
 * stdout.  The converters never overwrite an output (ckpt_tool.c
 * [Note: never overwrite]).
 */
#ifndef FSDP_CKPT_TOOL_H
#define FSDP_CKPT_TOOL_H

#include <stdint.h>

/* Prints the checkpoint's step, format, model, optimizer state, written
 * topology, data position, creation time and parameters with shapes. */
int FsdpCkptToolInfo(const char *path);

/* Checks the checkpoint as fsdp-train's load does (attributes, every
 * parameter of its model in /model and /optim with its shape, fp32, all
 * finite; /optim may be missing when weights_only); returns FSDP_SUCCESS
 * and prints "ok" if good, else an error naming the first problem. */
int FsdpCkptToolVerify(const char *path, int weights_only);

/* Writes the checkpoint's /model as the family's llm.c file out. */
int FsdpCkptToolExportLlmc(const char *path, const char *out);

/* Writes the llm.c file in as a checkpoint out at step 0 with zero AdamW
 * moments, recording global_batch (0 = unknown). */
int FsdpCkptToolImportLlmc(const char *in, const char *out, int64_t global_batch);

/* Writes the Hugging Face folder dir (config.json, safetensors) as a
 * checkpoint out at step 0 with zero AdamW moments, recording global_batch,
 * and prints the fsdp-train line that loads it. */
int FsdpCkptToolImportHf(const char *dir, const char *out, int64_t global_batch);

/* Writes the checkpoint's /model as a Hugging Face folder outdir
 * (config.json, model.safetensors in fp32, or bf16 when bf16 is set). */
int FsdpCkptToolExportHf(const char *path, const char *outdir, int bf16);

#endif
