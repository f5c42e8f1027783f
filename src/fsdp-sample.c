/* fsdp-sample: generate tokens from a checkpoint with the FSDP forward.
 *
 *   fsdp-sample -resume ckpt_00000300.h5 -max_new_tokens 64 -tokenizer builtin
 *   mpiexec -n 4 fsdp-sample -resume gpt2.h5 -tokenizer gpt2_tokenizer.bin \
 *       -prompt_tokens 50256,464,3290 -temperature 0.8 -top_k 40 -seed 7
 *
 * [Note: sampling] The model comes from the checkpoint's description (or
 * from the model options, as for fsdp-train, when any is given; the load
 * then checks they agree).  Every rank builds the runtime as training does
 * (the sharding options apply: one rank holds everything, W ranks each a
 * shard) and loads its shard; each new token is one FsdpRuntimeForward
 * over a batch of one sequence: the context (the last seq_len tokens at
 * most) at positions 0..L-1, the rest padding that causal attention never
 * lets position L-1 see.  The logits at L-1 pick the token: argmax with
 * -temperature 0 (lowest id on ties), else softmax(logits / temperature)
 * over the -top_k largest (0: all), drawn with a counter-based uniform of
 * (-seed, token index), so a seed gives the same tokens at any W and F.
 * Every rank computes the same logits; rank 0's choice is broadcast so the
 * ranks can never disagree on the context.  Rank 0 prints: with
 * -tokenizer FILE (llm.c's gpt2_tokenizer.bin) the prompt and the
 * continuation as text, with -tokenizer builtin the built-in task's
 * alphabet, else the new token ids on one line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"

static const char kHelp[] =
    "fsdp-sample: generate tokens from an fsdp checkpoint with the FSDP forward\n"
    "(one rank, or the model sharded over the ranks launched).\n"
    "Usage: [mpiexec -n W] fsdp-sample -resume CKPT [-option value ...]\n"
    "The model comes from the checkpoint unless model options are given.\n";

static const char *const kDeviceNames[] = {"cpu", "cuda", NULL};

typedef struct {
  FsdpTopoOptions topo;
  FsdpRuntimeOptions fsdp;
  FsdpModelDesc model; /* from the model options (family.h) */
  int model_from_options;
  int wrap, device_cuda;
  const char *resume, *prompt, *tokenizer;
  int64_t max_new, top_k, seed;
  double temperature;
} SampleOptions;

static int ReadOptions(FsdpOpts db, SampleOptions *o)
{
  memset(o, 0, sizeof *o);
  const char *g = "Sampling";
  FSDP_CALL(FsdpTopoOptionsFromDb(db, &o->topo));
  FSDP_CALL(FsdpModelOptionsFromDb(db, &o->model));
  static const char *const kModelOpts[] = {
      "model",      "family",      "n_layer",     "n_embd",    "n_head",
      "vocab_size", "seq_len",     "n_kv_head",   "ffn_hidden", "multiple_of",
      "ffn_dim_multiplier", "tie_embeddings", "rope_theta", "norm_eps"};
  for (size_t i = 0; i < sizeof kModelOpts / sizeof kModelOpts[0]; i++)
    o->model_from_options |= FsdpOptsHas(db, kModelOpts[i]);
  FSDP_CALL(FsdpRuntimeWrapFromDb(db, &o->wrap));
  FSDP_CALL(FsdpRuntimeOptionsFromDb(db, &o->fsdp));
  FSDP_CALL(FsdpOptsGetEnum(db, g, "device", "compute device: cpu, or cuda (needs a CUDA build)",
                            kDeviceNames, 0, &o->device_cuda));
  FSDP_CALL(FsdpComputeDtypeForDevice(db, o->device_cuda, &o->fsdp));
  FSDP_CALL(FsdpOptsGetString(db, g, "resume", "checkpoint to sample from (required)", NULL,
                              &o->resume));
  FSDP_CALL(FsdpOptsGetString(db, g, "prompt_tokens",
                              "prompt token ids, comma separated (default: the tokenizer's "
                              "end-of-text id, else 0)",
                              NULL, &o->prompt));
  FSDP_CALL(FsdpOptsGetInt(db, g, "max_new_tokens", "tokens to generate", 32, 0, 1 << 24,
                           &o->max_new));
  FSDP_CALL(FsdpOptsGetDouble(db, g, "temperature",
                              "softmax temperature (0 = greedy: always the most likely token)",
                              1.0, 0.0, 1e6, &o->temperature));
  FSDP_CALL(FsdpOptsGetInt(db, g, "top_k", "sample among the k most likely tokens (0 = all)", 0, 0,
                           1 << 24, &o->top_k));
  FSDP_CALL(FsdpOptsGetInt(db, g, "seed", "seed of the sampling draws", 1337, 0, INT64_MAX, &o->seed));
  FSDP_CALL(FsdpOptsGetString(db, g, "tokenizer",
                              "decode to text: FILE (llm.c gpt2_tokenizer.bin) or builtin (the "
                              "built-in task's alphabet); default: print token ids",
                              NULL, &o->tokenizer));
  if (o->tokenizer && !o->tokenizer[0]) o->tokenizer = NULL;
  return FSDP_SUCCESS;
}

/* The -prompt_tokens list: ids separated by commas or blanks, each in
 * [0, V).  *out is malloc'ed with room for n + extra ids. */
static int ParsePrompt(const char *s, int V, int64_t extra, int **out, int64_t *n)
{
  size_t cap = strlen(s) / 2 + 2;
  int *ids = malloc((cap + (size_t)extra) * sizeof *ids);
  FSDP_CHECK_ALLOC(ids, (cap + (size_t)extra) * sizeof *ids);
  int64_t k = 0;
  const char *p = s;
  for (;;) {
    while (*p == ',' || *p == ' ' || *p == '\t') p++;
    if (!*p) break;
    char *end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p || (*end && *end != ',' && *end != ' ' && *end != '\t')) {
      free(ids);
      FSDP_ERROR(FSDP_ERR_USAGE, "option -prompt_tokens: '%s' is not a list of token ids (e.g. "
                 "50256,464,3290)", s);
    }
    if (v < 0 || v >= V) {
      free(ids);
      FSDP_ERROR(FSDP_ERR_USAGE, "option -prompt_tokens: token %lld is outside [0, vocab_size = %d)",
                 v, V);
    }
    ids[k++] = (int)v;
    p = end;
  }
  if (k == 0) {
    free(ids);
    FSDP_ERROR(FSDP_ERR_USAGE, "option -prompt_tokens: '%s' holds no token id", s);
  }
  *out = ids;
  *n = k;
  return FSDP_SUCCESS;
}

/* splitmix64's finalizer: the counter-based uniform of (seed, index). */
static uint64_t Mix64(uint64_t z)
{
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* [Note: sampling] the next token from the logits (V of them). */
static int PickToken(const float *logits, int V, const SampleOptions *o, int64_t index, double *w,
                     int *order)
{
  int best = 0;
  for (int i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  if (o->temperature == 0.0 || o->top_k == 1) return best;
  /* top-k: the k largest by selection (ties: lower id first) */
  int k = (o->top_k == 0 || o->top_k > V) ? V : (int)o->top_k;
  for (int i = 0; i < V; i++) order[i] = i;
  for (int j = 0; j < k && k < V; j++) {
    int m = j;
    for (int i = j + 1; i < V; i++)
      if (logits[order[i]] > logits[order[m]] ||
          (logits[order[i]] == logits[order[m]] && order[i] < order[m]))
        m = i;
    int t = order[j];
    order[j] = order[m];
    order[m] = t;
  }
  double zmax = logits[best] / o->temperature, sum = 0.0;
  for (int j = 0; j < k; j++) {
    w[j] = exp(logits[order[j]] / o->temperature - zmax);
    sum += w[j];
  }
  double u = (double)(Mix64(Mix64((uint64_t)o->seed) ^ (uint64_t)index) >> 11) * 0x1.0p-53 * sum;
  for (int j = 0; j < k; j++) {
    if (u < w[j]) return order[j];
    u -= w[j];
  }
  return order[k - 1];
}

/* llm.c's safe_printf: a single byte that is not printable or blank is
 * left out (a lone control byte would garble the terminal). */
static void PrintPiece(const char *b, size_t len)
{
  if (len == 1 && !((unsigned char)b[0] >= 32 && (unsigned char)b[0] < 127) && b[0] != '\n' &&
      b[0] != '\t' && b[0] != ' ')
    return;
  fwrite(b, 1, len, stdout);
}

static void PrintTokens(const int *ids, int64_t n, FsdpTokenizer tok, int builtin)
{
  for (int64_t i = 0; i < n; i++) {
    if (builtin) {
      char b[32];
      FsdpDataBuiltinTokenText(ids[i], b, sizeof b);
      fputs(b, stdout);
    } else {
      size_t len = 0;
      const char *b = FsdpTokenizerDecode(tok, ids[i], &len);
      if (b) PrintPiece(b, len);
      else printf("<%d>", ids[i]);
    }
  }
}

/* Rank 0 loads the tokenizer; every rank raises its verdict (a usage
 * error everywhere, printed once). */
static int LoadTokenizer(const char *path, FsdpTokenizer *tok)
{
  int rank = 0;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  struct { int code; char msg[1200]; } r;
  memset(&r, 0, sizeof r);
  if (rank == 0) r.code = FsdpTokenizerLoad(path, tok, r.msg, sizeof r.msg);
  FSDP_CALL_MPI(MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, 0, MPI_COMM_WORLD));
  if (r.code) FSDP_ERROR(r.code, "option -tokenizer: %s", r.msg);
  return FSDP_SUCCESS;
}

typedef struct {
  FsdpTopo topo;
  FsdpColl coll;
  FsdpRuntime rt;
  FsdpModel model;
  FsdpKernelOps k_bf16; /* the model's table: bf16 matmuls (-compute_dtype bf16), no fused classifier */
  FsdpTokenizer tok;
  int device_set;
  int *ids, *inputs, *targets, *order;
  float *logits;
  double *w;
} Sampler;

static int Generate(const SampleOptions *o, Sampler *s)
{
  int rank = 0, W = 1;
  FSDP_CALL_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  FSDP_CALL_MPI(MPI_Comm_size(MPI_COMM_WORLD, &W));
  if (!o->resume || !o->resume[0])
    FSDP_ERROR(FSDP_ERR_USAGE, "option -resume: fsdp-sample needs a checkpoint (-resume CKPT)");
  int builtin = o->tokenizer && strcmp(o->tokenizer, "builtin") == 0;
  if (o->tokenizer && !builtin) FSDP_CALL(LoadTokenizer(o->tokenizer, &s->tok));
  /* the model: the checkpoint's description unless model options were given */
  FsdpCkptMeta meta;
  FSDP_CALL(FsdpCkptReadMeta(MPI_COMM_WORLD, o->resume, &meta));
  FsdpModelDesc desc = o->model;
  if (!o->model_from_options) {
    char what[4200];
    snprintf(what, sizeof what, "checkpoint %s", o->resume);
    FSDP_CALL(FsdpModelDescCheck(&meta.model, what));
    desc = meta.model;
    if (!desc.preset[0]) snprintf(desc.preset, sizeof desc.preset, "custom");
  }
  FSDP_CALL(FsdpRuntimeCheckWrap(&desc, o->wrap));
  const char *preset = desc.preset;
  const int V = (int)FsdpModelDescInt(&desc, "vocab_size");
  const int seq_len = (int)FsdpModelDescInt(&desc, "seq_len");
  const char *prompt = o->prompt;
  char def[32];
  if (!prompt || !prompt[0]) {
    snprintf(def, sizeof def, "%d", s->tok && FsdpTokenizerEot(s->tok) >= 0 ? FsdpTokenizerEot(s->tok) : 0);
    prompt = def;
  }
  int64_t n = 0;
  FSDP_CALL(ParsePrompt(prompt, V, o->max_new, &s->ids, &n));
  /* a batch of one sequence, no longer than needed */
  int T = (int)(n + o->max_new < seq_len ? n + o->max_new : seq_len);
  if (T < 1) T = 1;
  FSDP_CALL(FsdpTopoCreate(MPI_COMM_WORLD, &o->topo, &s->topo));
  FSDP_CALL(FsdpDeviceSetUp(o->device_cuda ? FSDP_DEVICE_CUDA : FSDP_DEVICE_CPU,
                            FsdpTopoWorld(s->topo)->comm));
  s->device_set = 1;
  const FsdpKernelOps *k = NULL; /* [Note: bf16 compute]: as fsdp-train */
  FSDP_CALL(FsdpComputeKernels(FsdpDeviceKernels(), o->fsdp.compute_dtype, &s->k_bf16, &k));
  /* sampling reads the logits: no fused classifier, which overwrites them
   * with their gradient ([Note: fused classifier] in kernels.h) */
  FsdpKernelOps copy = *k; /* k may be &s->k_bf16 already */
  copy.crossentropy_fused = NULL;
  s->k_bf16 = copy;
  k = &s->k_bf16;
  int tf32_applied = 0; /* -tf32, as fsdp-train */
  FSDP_CALL(FsdpDeviceSetTF32(o->fsdp.tf32, &tf32_applied));
  if (o->device_cuda) { /* as fsdp-train: [Note: CUDA streams in the runtime] */
    FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_NCCL, &s->coll));
    FSDP_CALL(FsdpCollSetCudaStreams(s->coll, NULL, FsdpDeviceComputeStream()));
    FSDP_CALL(FsdpCollAttach(s->coll, FsdpTopoShard(s->topo)));
    FSDP_CALL(FsdpCollAttach(s->coll, FsdpTopoReplica(s->topo)));
  } else {
    FSDP_CALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &s->coll));
  }
  FSDP_CALL(FsdpModelCreate(&desc, o->wrap, 1, T, k, 0, &s->model));
  FSDP_CALL(FsdpRuntimeCreate(s->topo, s->coll, &o->fsdp, &s->rt));
  const FsdpModelTable *table = FsdpModelGetTable(s->model);
  FSDP_CALL(FsdpRuntimeAddModel(s->rt, table));
  FSDP_CALL(FsdpRuntimeSetUp(s->rt));
  FSDP_CALL(FsdpModelSetUp(s->model));
  FSDP_CALL(FsdpCkptLoad(s->rt, NULL, o->resume, &desc, NULL));
  if (rank == 0)
    fprintf(stderr, "fsdp-sample: %s (%lld parameters) from %s (step %lld) on %d ranks, sharding "
            "factor %d\n", preset, (long long)FsdpModelDescParamCount(&desc), o->resume,
            (long long)meta.step, W, FsdpTopoShard(s->topo)->size);
  s->inputs = calloc((size_t)T, sizeof *s->inputs);
  s->targets = calloc((size_t)T, sizeof *s->targets);
  s->order = calloc((size_t)V, sizeof *s->order);
  s->logits = calloc((size_t)V, sizeof *s->logits);
  s->w = calloc((size_t)V, sizeof *s->w);
  if (!s->inputs || !s->targets || !s->order || !s->logits || !s->w)
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory for sampling buffers (vocab_size %d)", V);
  int64_t n0 = n;
  for (int64_t i = 0; i < o->max_new; i++) {
    int64_t L = n < T ? n : T; /* the context: the last T tokens at most */
    memcpy(s->inputs, s->ids + (n - L), (size_t)L * sizeof *s->inputs);
    memset(s->inputs + L, 0, (size_t)(T - L) * sizeof *s->inputs);
    FSDP_CALL(FsdpModelSetBatch(s->model, s->inputs, s->targets));
    FSDP_CALL(FsdpRuntimeForward(s->rt, table->ctx));
    FSDP_CALL(FsdpModelLogits(s->model, 0, (int)L - 1, s->logits));
    int next = PickToken(s->logits, V, o, i, s->w, s->order);
    FSDP_CALL_MPI(MPI_Bcast(&next, 1, MPI_INT, 0, MPI_COMM_WORLD));
    s->ids[n++] = next;
  }
  if (rank == 0) {
    if (s->tok || builtin) {
      PrintTokens(s->ids, n, s->tok, builtin);
      printf("\n");
    } else {
      for (int64_t i = n0; i < n; i++) printf("%s%d", i > n0 ? " " : "", s->ids[i]);
      printf("\n");
    }
    fflush(stdout);
  }
  return FSDP_SUCCESS;
}

static int Destroy(Sampler *s)
{
  int err = FsdpRuntimeDestroy(&s->rt);
  int e = FsdpModelDestroy(&s->model);
  if (!err) err = e;
  e = FsdpCollDestroy(&s->coll);
  if (!err) err = e;
  if (s->device_set) {
    e = FsdpDeviceFinalize();
    if (!err) err = e;
  }
  e = FsdpTopoDestroy(&s->topo);
  if (!err) err = e;
  FsdpTokenizerDestroy(&s->tok);
  free(s->ids);
  free(s->inputs);
  free(s->targets);
  free(s->order);
  free(s->logits);
  free(s->w);
  return err;
}

static int ReadSampleOptions(FsdpOpts db, void *state) { return ReadOptions(db, state); }

/* Sampling, after the options were read and checked; returns an error code. */
static int Sample(FsdpProgramRun *r)
{
  const SampleOptions *o = r->state;
  Sampler s;
  memset(&s, 0, sizeof s);
  int err = Generate(o, &s);
  if (err && err != FSDP_ERR_USAGE && o->device_cuda) {
    /* as fsdp-train: main aborts NCCL and the job rather than tearing
     * down collectives a failed peer never joins ([Note: aborting NCCL
     * with the job], coll_nccl.c) */
    return err;
  }
  int derr = Destroy(&s);
  return err ? err : derr;
}

static SampleOptions options;

static const FsdpProgram kProgram = {.name = "fsdp-sample",
                                     .help = kHelp,
                                     .on_failure = FSDP_PROGRAM_ABORT_ON_FAILURE,
                                     .computes = 1,
                                     .state = &options,
                                     .read_options = ReadSampleOptions,
                                     .run = Sample};

int main(int argc, char **argv) { return FsdpProgramMain(argc, argv, &kProgram); }
