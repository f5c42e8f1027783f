/* gradcheck_mixer.c: check the mixer's backward stages against finite
 * differences of its forward, through the model table alone: what a
 * runtime does with a table (init each parameter, run the forward stages
 * in order and the backward stages in reverse, each with its unit's
 * tensors), here on one process with every unit whole -- no MPI
 * collective, no sharding.  Do this for a model of your own before
 * training it: a wrong backward still trains, only worse.
 *
 *   ./gradcheck_mixer        # one line per parameter; exit 1 if one is off
 *
 * For each parameter p (n elements) with gradient g, along the direction
 * v = sign(g) (random signs where g is 0, so a gradient dropped to 0
 * shows), with a step h v of length 0.02 (h = 0.02 / sqrt(n)):
 *   (L(p + h v) - L(p - h v)) / 2h  must equal  g . v  within 2%.
 */
#include <libfsdp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer.h"

typedef struct {
  void *model;
  const FsdpModelTable *table;
  float ***param, ***grad; /* [unit][param]: whole tensors, host memory */
} Net;

static int64_t Numel(const FsdpParamSpec *s)
{
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
  return n;
}

static int Stage(Net *net, int s, int backward)
{
  const FsdpModelStage *st = &net->table->stages[s];
  FsdpUnitTensors t = {st->unit, net->param[st->unit], net->grad[st->unit]};
  return (backward ? st->backward : st->forward)(net->table->ctx, s, &t);
}

/* The mean loss of a forward over the batch set before. */
static int Forward(Net *net, double *loss)
{
  for (int s = 0; s < net->table->nstages; s++) FSDP_CALL(Stage(net, s, 0));
  *loss = MixerFamily.loss(net->model);
  return FSDP_SUCCESS;
}

static int ForwardBackward(Net *net, double *loss)
{
  for (int u = 0; u < net->table->nunits; u++)
    for (int i = 0; i < net->table->units[u].nparams; i++)
      memset(net->grad[u][i], 0, (size_t)Numel(&net->table->units[u].params[i]) * sizeof(float));
  FSDP_CALL(Forward(net, loss));
  for (int s = net->table->nstages - 1; s >= 0; s--) FSDP_CALL(Stage(net, s, 1));
  return FSDP_SUCCESS;
}

/* Directional derivative check of parameter i of unit u; *bad += 1 when off. */
static int CheckParam(Net *net, int u, int i, int *bad)
{
  const FsdpParamSpec *spec = &net->table->units[u].params[i];
  int64_t n = Numel(spec);
  float *p = net->param[u][i];
  const float *g = net->grad[u][i];
  float *v = malloc((size_t)n * sizeof *v);
  FSDP_CHECK_ALLOC(v, (size_t)n * sizeof *v);
  double gv = 0.0, plus = 0.0, minus = 0.0;
  const double h = 0.02 / sqrt((double)n); /* a step of length 0.02 */
  for (int64_t j = 0; j < n; j++) {
    v[j] = g[j] > 0 ? 1.0f : g[j] < 0 ? -1.0f : ((j * 2654435761u) >> 7) & 1 ? 1.0f : -1.0f;
    gv += (double)g[j] * v[j];
  }
  int err = FSDP_SUCCESS;
  for (int64_t j = 0; j < n; j++) p[j] += (float)h * v[j];
  if (!err) err = Forward(net, &plus);
  for (int64_t j = 0; j < n; j++) p[j] -= 2.0f * (float)h * v[j];
  if (!err) err = Forward(net, &minus);
  for (int64_t j = 0; j < n; j++) p[j] += (float)h * v[j];
  free(v);
  FSDP_CALL(err);
  double fd = (plus - minus) / (2.0 * h), diff = fabs(fd - gv);
  int ok = diff <= 2e-2 * fabs(gv) + 1e-4;
  printf("%-26s backward %12.6e  finite difference %12.6e  %s\n", spec->name, gv, fd,
         ok ? "ok" : "WRONG");
  if (!ok) (*bad)++;
  return FSDP_SUCCESS;
}

static int Check(int *bad)
{
  const FsdpKernelOps *k = FsdpKernelsCpu();
  /* mixer-tiny's sizes, described as a checkpoint or the options would */
  const int B = 2, T = 16, V = 64;
  FsdpModelDesc desc;
  FsdpModelDescInit(&desc, MIXER_FAMILY, "mixer-tiny");
  FSDP_CALL(FsdpModelDescAddInt(&desc, "n_layer", 2));
  FSDP_CALL(FsdpModelDescAddInt(&desc, "n_embd", 32));
  FSDP_CALL(FsdpModelDescAddInt(&desc, "vocab_size", V));
  FSDP_CALL(FsdpModelDescAddInt(&desc, "seq_len", T));
  int err = FSDP_SUCCESS;
  Net net = {0};
  FSDP_CALL(MixerFamily.create(&desc, 1, B, T, k, 7, &net.model));
  net.table = MixerFamily.table(net.model);
  FSDP_CALL(MixerFamily.set_up(net.model));
  MixerFamily.set_loss_scale(net.model, 1.0f);
  const FsdpModelTable *tb = net.table;
  net.param = calloc((size_t)tb->nunits, sizeof *net.param);
  net.grad = calloc((size_t)tb->nunits, sizeof *net.grad);
  FSDP_CHECK_ALLOC(net.param && net.grad ? net.param : NULL, sizeof *net.param);
  for (int u = 0; u < tb->nunits; u++) {
    int np = tb->units[u].nparams;
    net.param[u] = calloc((size_t)np, sizeof(float *));
    net.grad[u] = calloc((size_t)np, sizeof(float *));
    FSDP_CHECK_ALLOC(net.param[u] && net.grad[u] ? net.param[u] : NULL, sizeof(float *));
    for (int i = 0; i < np; i++) {
      const FsdpParamSpec *spec = &tb->units[u].params[i];
      size_t bytes = (size_t)Numel(spec) * sizeof(float);
      net.param[u][i] = malloc(bytes);
      net.grad[u][i] = malloc(bytes);
      FSDP_CHECK_ALLOC(net.param[u][i] && net.grad[u][i] ? net.param[u][i] : NULL, bytes);
      FSDP_CALL(tb->init(tb->ctx, spec, 0, Numel(spec), net.param[u][i]));
    }
  }
  int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
  FSDP_CHECK_ALLOC(in && tg ? in : NULL, (size_t)B * T * sizeof *in);
  for (int j = 0; j < B * T; j++) {
    in[j] = (j * 7 + 3) % V;
    tg[j] = (j * 5 + 1) % V;
  }
  err = MixerFamily.set_batch(net.model, in, tg);
  free(in);
  free(tg);
  FSDP_CALL(err);
  double loss = 0.0;
  FSDP_CALL(ForwardBackward(&net, &loss));
  printf("mixer-tiny, %d sequences of %d tokens: loss %.6f\n", B, T, loss);
  for (int u = 0; u < tb->nunits; u++)
    for (int i = 0; i < tb->units[u].nparams; i++) FSDP_CALL(CheckParam(&net, u, i, bad));
  for (int u = 0; u < tb->nunits; u++) {
    for (int i = 0; i < tb->units[u].nparams; i++) {
      free(net.param[u][i]);
      free(net.grad[u][i]);
    }
    free(net.param[u]);
    free(net.grad[u]);
  }
  free(net.param);
  free(net.grad);
  FSDP_CALL(MixerFamily.destroy(&net.model));
  return FSDP_SUCCESS;
}

int main(int argc, char **argv)
{
  int bad = 0;
  int err = FsdpInitialize(&argc, &argv);
  if (!err) err = Check(&bad);
  FsdpFinalize();
  if (!err && bad) printf("%d parameter(s) with a wrong gradient\n", bad);
  return err ? FsdpExitStatus(err) : bad ? 1 : 0;
}
