/* fsdp-ckpt: inspect, verify and convert fsdp checkpoints.
 *
 *   fsdp-ckpt info ckpt_00000100.h5
 *   fsdp-ckpt verify ckpt_00000100.h5          # exit 0 good, 2 bad (as a load judges it)
 *   fsdp-ckpt export-llmc ckpt_00000100.h5 model.bin
 *   fsdp-ckpt import-llmc gpt2_124M.bin gpt2.h5
 *   fsdp-train -model custom -n_layer 12 -n_embd 768 -n_head 12 \
 *              -vocab_size 50257 -seq_len 1024 -resume gpt2.h5 -steps ...
 *   fsdp-ckpt import-hf ./gpt2-hf gpt2.h5        # Hugging Face folder
 *   fsdp-ckpt export-hf ckpt_00000100.h5 ./out -hf_dtype bf16
 *
 * One process (no mpiexec needed; MPI starts as a singleton).  Options are
 * PETSc style and come after the subcommand and its files.
 *
 * What each subcommand does, and the files it reads and writes
 * ([Note: the model's parameter list], [Note: import through the engine],
 * [Note: never overwrite]): lib/driver/ckpt_tool.c.  This file is the
 * help, the options and the subcommand table.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "driver/ckpt_tool.h"
#include "io/h5util.h"
#include "libfsdp.h"

static const char kHelp[] =
    "fsdp-ckpt: inspect, verify and convert fsdp checkpoints (one process).\n"
    "Usage:\n"
    "  fsdp-ckpt info FILE                 step, format, model config, optimizer state,\n"
    "                                      written topology (W, F, G), data position,\n"
    "                                      creation time, parameters with shapes\n"
    "  fsdp-ckpt verify FILE               root and /optim attributes in range and\n"
    "                                      consistent, every parameter of the file's model\n"
    "                                      config present in /model and /optim/exp_avg[_sq]\n"
    "                                      with its shape, fp32, no NaN/Inf (the checks\n"
    "                                      fsdp-train's load makes); exit 0 if good, 2\n"
    "                                      naming the first problem\n"
    "  fsdp-ckpt export-llmc FILE OUT.bin  llm.c GPT-2 checkpoint (version 3, fp32)\n"
    "                                      from /model\n"
    "  fsdp-ckpt import-llmc IN.bin OUT.h5 fsdp checkpoint at step 0 with zero AdamW\n"
    "                                      moments from an llm.c GPT-2 checkpoint\n"
    "                                      (version 3 fp32, or 5 bf16 converted exactly)\n"
    "  fsdp-ckpt import-hf DIR OUT.h5      fsdp checkpoint at step 0 with zero AdamW\n"
    "                                      moments from a Hugging Face folder: config.json\n"
    "                                      (model_type gpt2 or llama) and model.safetensors\n"
    "                                      or shards with model.safetensors.index.json;\n"
    "                                      F32, BF16, F16 converted exactly to fp32; prints\n"
    "                                      the fsdp-train line that loads it\n"
    "  fsdp-ckpt export-hf FILE OUTDIR     config.json and model.safetensors (fp32, or\n"
    "                                      bf16 with -hf_dtype bf16) for transformers'\n"
    "                                      from_pretrained\n"
    "Options follow the files.  Outputs are never overwritten.\n"
    "\n"
    "fsdp checkpoint (HDF5): root attributes format_version, program, created,\n"
    "step, data_position, seed, global_batch, world_size, sharding_factor,\n"
    "ranks_per_node; /model (attributes name, family, n_layer, n_embd, n_head,\n"
    "vocab_size, seq_len, num_parameters) with one fp32 dataset per parameter\n"
    "in its full shape (wte [V,C], wpe [seq_len,C], ln_f.weight/bias [C],\n"
    "h.<i>.ln_1.weight/bias [C], h.<i>.attn.c_attn.weight [3C,C]/bias [3C],\n"
    "h.<i>.attn.c_proj.weight [C,C]/bias [C], h.<i>.ln_2.weight/bias [C],\n"
    "h.<i>.mlp.c_fc.weight [4C,C]/bias [4C], h.<i>.mlp.c_proj.weight [C,4C]/bias\n"
    "[C]); /optim (attributes type, step_count and the AdamW hyperparameters)\n"
    "with /optim/exp_avg/<name> and /optim/exp_avg_sq/<name> of the same shapes.\n"
    "\n";
/* then each family's layouts (its convert_help, family.h) and: */
static const char kHelpTail[] = "Conversions hold one tensor at a time.\n";

/* ------------------------------------------------------------------ */
/* driver                                                              */

static const struct {
  const char *name;
  int nfiles;
} kCommands[] = {{"info", 1},        {"verify", 1},    {"export-llmc", 2},
                 {"import-llmc", 2}, {"import-hf", 2}, {"export-hf", 2}};
#define NCOMMANDS ((int)(sizeof kCommands / sizeof kCommands[0]))

/* The options of every subcommand, and the -help text (kHelp, each
 * family's conversion paragraph, kHelpTail) put together once the
 * families are known. */
typedef struct {
  int weights_only;
  int64_t global_batch;
  int hf_dtype;
} CkptOptions;

static char help_text[16384];

static int ReadOptions(FsdpOpts db, void *state)
{
  CkptOptions *o = state;
  size_t n = (size_t)snprintf(help_text, sizeof help_text, "%s", kHelp);
  for (int f = 0; f < FsdpModelNumFamilies() && n < sizeof help_text; f++)
    if (FsdpModelFamilyAt(f)->convert_help)
      n += (size_t)snprintf(help_text + n, sizeof help_text - n, "%s\n",
                            FsdpModelFamilyAt(f)->convert_help);
  if (n < sizeof help_text) snprintf(help_text + n, sizeof help_text - n, "%s", kHelpTail);
  int err = FsdpOptsGetBool(db, "fsdp-ckpt", "weights_only",
                            "verify: accept a checkpoint without /optim (weights only)", 0,
                            &o->weights_only);
  if (!err)
    err = FsdpOptsGetInt(db, "fsdp-ckpt", "global_batch",
                         "import-llmc, import-hf: sequences per optimizer step to record in the checkpoint "
                         "(informational: a resume with another global batch warns; 0 = unknown)",
                         0, 0, INT64_MAX / 4, &o->global_batch);
  static const char *const hf_dtypes[] = {"fp32", "bf16", NULL};
  if (!err)
    err = FsdpOptsGetEnum(db, "fsdp-ckpt", "hf_dtype",
                          "export-hf: element type of model.safetensors (bf16 rounds to nearest even)",
                          hf_dtypes, 0, &o->hf_dtype);
  return err;
}

/* One process: the subcommand (the first positional argument) on its
 * files (the next ones). */
static int Convert(FsdpProgramRun *r)
{
  const CkptOptions *o = r->state;
  const char *cmd = r->npositional > 0 ? r->positional[0] : NULL;
  const char *files[2] = {r->npositional > 1 ? r->positional[1] : NULL,
                          r->npositional > 2 ? r->positional[2] : NULL};
  int nfiles = r->npositional > 0 ? r->npositional - 1 : 0;
  int size;
  FSDP_CALL_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size != 1)
    FSDP_ERROR(FSDP_ERR_USAGE, "fsdp-ckpt runs as one process (started on %d ranks): run it "
                               "without mpiexec", size);
  int c = -1;
  for (int k = 0; cmd && k < NCOMMANDS; k++)
    if (strcmp(cmd, kCommands[k].name) == 0) c = k;
  if (c < 0)
    FSDP_ERROR(FSDP_ERR_USAGE,
               "%s%s%s: expected a subcommand: info, verify, export-llmc, import-llmc, "
               "import-hf or export-hf "
               "(fsdp-ckpt -help)",
               cmd ? "unknown subcommand '" : "no subcommand", cmd ? cmd : "", cmd ? "'" : "");
  if (nfiles != kCommands[c].nfiles)
    FSDP_ERROR(FSDP_ERR_USAGE, "fsdp-ckpt %s takes %d file%s, got %d (options go after the files; "
                               "fsdp-ckpt -help)",
               cmd, kCommands[c].nfiles, kCommands[c].nfiles > 1 ? "s" : "", nfiles);
  FsdpHdf5Init();
  switch (c) {
  case 0: FSDP_CALL(FsdpCkptToolInfo(files[0])); break;
  case 1: FSDP_CALL(FsdpCkptToolVerify(files[0], o->weights_only)); break;
  case 2: FSDP_CALL(FsdpCkptToolExportLlmc(files[0], files[1])); break;
  case 3: FSDP_CALL(FsdpCkptToolImportLlmc(files[0], files[1], o->global_batch)); break;
  case 4: FSDP_CALL(FsdpCkptToolImportHf(files[0], files[1], o->global_batch)); break;
  default: FSDP_CALL(FsdpCkptToolExportHf(files[0], files[1], o->hf_dtype == 1)); break;
  }
  return FSDP_SUCCESS;
}

static CkptOptions options;

/* One process: every failure ends with MPI_Finalize. */
static const FsdpProgram kProgram = {.name = "fsdp-ckpt",
                                     .help = help_text,
                                     .max_positional = 3,
                                     .on_failure = FSDP_PROGRAM_FINALIZE_ON_FAILURE,
                                     .state = &options,
                                     .read_options = ReadOptions,
                                     .run = Convert};

int main(int argc, char **argv) { return FsdpProgramMain(argc, argv, &kProgram); }
