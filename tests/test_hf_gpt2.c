/* test_hf_gpt2 CKPT ORACLE_JSON: fsdp's GPT forward on a checkpoint that
 * fsdp-ckpt import-hf made from a Hugging Face GPT2LMHeadModel folder,
 * against transformers' float64 results on the same weights
 * (tests/oracle/hf/<folder>/oracle.json, written by hf_oracle.py): the
 * loss for the golden targets and, for every token v, the loss with all
 * targets v -- V + 1 numbers that pin every logit of every position
 * (up to a per-position constant) -- each within 1e-5 relative.  The
 * checkpoint loads through FsdpCkptLoad, sharded over the ranks of the run.
 * Run by tests/test_hf.sh. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fsdp_test_model.h"

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  if (argc != 3) {
    fprintf(stderr, "usage: test_hf_gpt2 CKPT ORACLE_JSON\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  json_error_t je;
  json_t *o = json_load_file(argv[2], 0, &je);
  if (!o) {
    fprintf(stderr, "%s: %s\n", argv[2], je.text);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  json_t *jt = json_object_get(o, "tokens"), *jg = json_object_get(o, "targets"),
         *jc = json_object_get(o, "loss_const");
  int T = (int)json_array_size(jt), V = (int)json_array_size(jc);
  int *tokens = calloc((size_t)T, sizeof *tokens), *targets = calloc((size_t)T, sizeof *targets);
  for (int t = 0; t < T; t++) {
    tokens[t] = (int)json_integer_value(json_array_get(jt, (size_t)t));
    targets[t] = (int)json_integer_value(json_array_get(jg, (size_t)t));
  }
  FsdpCkptMeta meta;
  TCALL(FsdpCkptReadMeta(MPI_COMM_WORLD, argv[1], &meta));
  GptConfig cfg;
  TCALL(GptConfigFromDesc(&meta.model, argv[1], &cfg));
  CHECK(cfg.vocab_size == V && cfg.seq_len >= T, "config V %d seq_len %d vs oracle V %d T %d",
        cfg.vocab_size, cfg.seq_len, V, T);
  TestGpt g;
  test_gpt_create(MPI_COMM_WORLD, &cfg, 1, T, 0, 1, &g);
  TCALL(FsdpCkptLoad(g.rt, NULL, argv[1], &meta.model, NULL));
  double loss = test_gpt_step(&g, tokens, targets), want = json_real_value(json_object_get(o, "loss"));
  double rel = fabs(loss - want) / fabs(want), worst = rel;
  CHECK(rel <= 1e-5, "loss %.10f vs transformers %.10f (rel %.2e)", loss, want, rel);
  for (int v = 0; v < V; v++) {
    int *c = calloc((size_t)T, sizeof *c);
    for (int t = 0; t < T; t++) c[t] = v;
    double l = test_gpt_step(&g, tokens, c), w = json_real_value(json_array_get(jc, (size_t)v));
    double r = fabs(l - w) / fabs(w);
    if (r > worst) worst = r;
    CHECK(r <= 1e-5, "loss with all targets %d: %.10f vs transformers %.10f (rel %.2e)", v, l, w, r);
    free(c);
  }
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("%s: loss %.10f (transformers %.10f); %d losses, worst relative difference %.2e\n",
           argv[1], loss, want, V + 1, worst);
  test_gpt_destroy(&g);
  free(tokens);
  free(targets);
  json_decref(o);
  int rc = test_finish("test_hf_gpt2");
  FsdpFinalize();
  return rc;
}
