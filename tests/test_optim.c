/* test_optim: AdamW on shards (lib/optim.h) against a double-precision
 * reference written here from the contract, element by element.
 *
 * A runtime with two units of GPT-named parameters (embeddings, LayerNorm,
 * biases, weights) is sharded at every F dividing the world size (hybrid
 * sharding where F < W), so parameters are cut into pieces across shards.
 * Four steps with known gradients whose global norm is above the clipping
 * threshold on some steps and below it on others; the optimizer must give,
 * on every element of every shard:
 *   - AdamW with bias correction of step t (1, 2, 3, 4),
 *   - weight decay on weights, never on biases or LayerNorm parameters, on
 *     wte/wpe only with decay_embeddings (checked with it on and off),
 *   - the global gradient norm (over the parameters, once: not R times
 *     under hybrid sharding) reported and used for clipping,
 *   - the same results when the gradients carry a loss scale the
 *     optimizer is told about (FsdpOptimSetGradScale),
 *   - the learning-rate schedule (linear warmup, cosine to lr_min).
 * Padding stays zero.  Tolerance: 2e-6 (1 + |ref|) per element, the fp32
 * arithmetic of four steps; every planted rule change moves elements by
 * 1e-4 or more.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfsdp.h"
#include "testutil.h"

#define NSTEPS 4

typedef struct {
  const char *name;
  int ndim;
  int64_t d0, d1;
} ParamDef;

/* Unit 0 is the root.  Shapes are odd so that pieces cut parameters at
 * shard boundaries in the middle. */
static const ParamDef kRoot[] = {
    {"wte", 2, 13, 7}, {"wpe", 2, 5, 7}, {"ln_f.weight", 1, 7, 0}, {"ln_f.bias", 1, 7, 0}};
static const ParamDef kBlock[] = {{"h.0.ln_1.weight", 1, 7, 0},
                                  {"h.0.ln_1.bias", 1, 7, 0},
                                  {"h.0.attn.c_attn.weight", 2, 21, 7},
                                  {"h.0.attn.c_attn.bias", 1, 21, 0},
                                  {"h.0.mlp.c_fc.weight", 2, 9, 7}};

/* Pseudo-random value in [-1, 1) from (salt, name, idx): the same on every
 * rank and at every F. */
static double hashed(uint64_t salt, const char *name, int64_t idx)
{
  uint64_t h = 1469598103934665603ULL ^ salt;
  for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ULL;
  h ^= (uint64_t)idx * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  return (double)(h & 0xFFFFFF) / (double)(1 << 23) - 1.0;
}

static float init_value(const char *name, int64_t idx) { return (float)hashed(1, name, idx); }

/* Gradient of step s: amplitudes chosen so the global norm (about
 * amp * sqrt(n / 3)) is above the clip of 1 on steps 0 and 2 and below it
 * on steps 1 and 3. */
static const double kAmp[NSTEPS] = {0.4, 0.01, 0.2, 0.03};
static float grad_value(int s, const char *name, int64_t idx)
{
  return (float)(kAmp[s] * hashed(100 + (uint64_t)s, name, idx));
}

static int init_rule(void *model, const FsdpParamSpec *spec, int64_t start, int64_t count,
                     float *out)
{
  (void)model;
  for (int64_t i = 0; i < count; i++) out[i] = init_value(spec->name, start + i);
  return FSDP_SUCCESS;
}

static int no_stage(void *model, int stage, const FsdpUnitTensors *t)
{
  (void)model, (void)stage, (void)t;
  return FSDP_SUCCESS;
}

/* The decay rule of the contract (optim.h, -weight_decay_embeddings). */
static int ref_decays(const char *name, int decay_embeddings)
{
  size_t n = strlen(name);
  if (n >= 5 && strcmp(name + n - 5, ".bias") == 0) return 0;
  if (strstr(name, "ln_")) return 0;
  if (!strcmp(name, "wte") || !strcmp(name, "wpe")) return decay_embeddings;
  return 1;
}

static double ref_lr(const FsdpOptimOptions *o, int64_t s)
{
  if (s < o->warmup) return o->lr * (double)(s + 1) / (double)o->warmup;
  double frac = (double)(s - o->warmup) / (double)(o->total_steps - o->warmup - 1);
  return o->lr_min + 0.5 * (1.0 + cos(M_PI * frac)) * (o->lr - o->lr_min);
}

static FsdpParamSpec make_spec(const ParamDef *d)
{
  FsdpParamSpec s;
  memset(&s, 0, sizeof s);
  snprintf(s.name, sizeof s.name, "%s", d->name);
  s.ndim = d->ndim;
  s.shape[0] = d->d0;
  s.shape[1] = d->d1;
  return s;
}

static int64_t numel(const ParamDef *d) { return d->ndim == 1 ? d->d0 : d->d0 * d->d1; }

/* One configuration: F, decay of embeddings, loss scale of the gradients. */
static void run_case(int F, int decay_embeddings, double scale)
{
  const ParamDef *defs[2] = {kRoot, kBlock};
  const int ndefs[2] = {4, 5};
  FsdpTopoOptions to = {0};
  to.sharding_factor = F;
  FsdpRuntimeOptions ro = {0};
  ro.reshard_after_forward = 1;
  ro.limit_all_gathers = 2;
  ro.prefetch = FSDP_PREFETCH_NONE;
  ro.grad_accum = 1;
  ro.accum_comm = 1;
  FsdpOptimOptions oo;
  memset(&oo, 0, sizeof oo);
  oo.lr = 1e-2;
  oo.lr_min = 1e-3;
  oo.weight_decay = 0.1;
  oo.beta1 = 0.9;
  oo.beta2 = 0.95;
  oo.eps = 1e-8;
  oo.grad_clip = 1.0;
  oo.warmup = 2;
  oo.total_steps = NSTEPS;
  oo.decay_embeddings = decay_embeddings;

  FsdpTopo topo;
  FsdpColl coll;
  FsdpRuntime rt;
  FsdpOptim opt;
  TCALL(FsdpTopoCreate(MPI_COMM_WORLD, &to, &topo));
  TCALL(FsdpCollCreate(FSDP_COLL_BACKEND_MPI, &coll));
  TCALL(FsdpRuntimeCreate(topo, coll, &ro, &rt));
  for (int u = 0; u < 2; u++) {
    FsdpParamSpec specs[8];
    for (int i = 0; i < ndefs[u]; i++) specs[i] = make_spec(&defs[u][i]);
    int unit;
    TCALL(FsdpRuntimeAddUnit(rt, u == 0 ? "root" : "h.0", u == 0, specs, ndefs[u], &unit));
    TCALL(FsdpRuntimeAddStage(rt, unit, no_stage, no_stage));
  }
  TCALL(FsdpRuntimeSetUp(rt));
  TCALL(FsdpRuntimeInitShards(rt, init_rule, NULL));
  TCALL(FsdpOptimCreate(rt, FsdpKernelsCpu(), &oo, GptParamDecays, &opt));
  FsdpOptimSetGradScale(opt, scale);
  char tag[96];
  snprintf(tag, sizeof tag, "F=%d decay_embeddings=%d scale=%g", F, decay_embeddings, scale);

  /* the reference: every element of every parameter, in double */
  int64_t total = 0;
  for (int u = 0; u < 2; u++)
    for (int i = 0; i < ndefs[u]; i++) total += numel(&defs[u][i]);
  double *p = malloc((size_t)total * sizeof *p), *m = calloc((size_t)total, sizeof *m),
         *v = calloc((size_t)total, sizeof *v);
  int64_t *base = malloc(9 * sizeof *base); /* first reference index of each parameter */
  if (!p || !m || !v || !base) MPI_Abort(MPI_COMM_WORLD, 1);
  int64_t at = 0;
  for (int u = 0, k = 0; u < 2; u++)
    for (int i = 0; i < ndefs[u]; i++, k++) {
      base[k] = at;
      for (int64_t e = 0; e < numel(&defs[u][i]); e++) p[at++] = init_value(defs[u][i].name, e);
    }

  for (int s = 0; s < NSTEPS; s++) {
    /* gradients into the shards (times the loss scale), padding 0 */
    double sq = 0.0;
    for (int u = 0; u < 2; u++) {
      FlatParam fp = FsdpRuntimeUnitFlatParam(rt, u);
      float *g = FsdpRuntimeUnitGradShard(rt, u);
      memset(g, 0, (size_t)FlatParamShardNumel(fp) * sizeof *g);
      const FlatParamPiece *pc;
      int np;
      TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
      for (int i = 0; i < np; i++) {
        const char *name = FlatParamSpec(fp, pc[i].param)->name;
        for (int64_t e = 0; e < pc[i].count; e++)
          g[pc[i].shard_offset + e] = (float)(scale * grad_value(s, name, pc[i].param_offset + e));
      }
      for (int i = 0; i < ndefs[u]; i++)
        for (int64_t e = 0; e < numel(&defs[u][i]); e++) {
          double x = grad_value(s, defs[u][i].name, e);
          sq += x * x;
        }
    }
    double norm_ref = sqrt(sq), clip = norm_ref > oo.grad_clip ? oo.grad_clip / (norm_ref + 1e-6) : 1.0;
    double lr_ref = ref_lr(&oo, s), norm = 0.0, lr = 0.0;
    TCALL(FsdpOptimStep(opt, s, &norm, &lr));
    CHECK(fabs(norm - norm_ref) <= 1e-9 * norm_ref, "%s step %d: gradient norm %.12g, expected %.12g",
          tag, s + 1, norm, norm_ref);
    CHECK(fabs(lr - lr_ref) <= 1e-15, "%s step %d: learning rate %.12g, expected %.12g", tag, s + 1,
          lr, lr_ref);
    CHECK(fabs(FsdpOptimLearningRate(&oo, s) - lr_ref) <= 1e-15, "%s: schedule at step %d", tag, s);
    CHECK((s % 2 == 0) == (norm_ref > oo.grad_clip),
          "test setup: steps 1 and 3 must clip, 2 and 4 not (step %d: norm %.4f)", s + 1, norm_ref);
    /* reference AdamW step t = s + 1 */
    double bc1 = 1.0 - pow(oo.beta1, s + 1), bc2 = 1.0 - pow(oo.beta2, s + 1);
    for (int u = 0, k = 0; u < 2; u++)
      for (int i = 0; i < ndefs[u]; i++, k++) {
        double wd = ref_decays(defs[u][i].name, decay_embeddings) ? oo.weight_decay : 0.0;
        for (int64_t e = 0; e < numel(&defs[u][i]); e++) {
          int64_t j = base[k] + e;
          double g = (double)grad_value(s, defs[u][i].name, e) * clip;
          m[j] = oo.beta1 * m[j] + (1 - oo.beta1) * g;
          v[j] = oo.beta2 * v[j] + (1 - oo.beta2) * g * g;
          p[j] -= lr_ref * ((m[j] / bc1) / (sqrt(v[j] / bc2) + oo.eps) + wd * p[j]);
        }
      }
    /* compare every element this rank holds; padding stays 0 */
    int bad = 0;
    for (int u = 0, k0 = 0; u < 2; k0 += ndefs[u], u++) {
      FlatParam fp = FsdpRuntimeUnitFlatParam(rt, u);
      const float *shard = FsdpRuntimeUnitShard(rt, u);
      const FlatParamPiece *pc;
      int np;
      TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
      char *mine = calloc((size_t)FlatParamShardNumel(fp), 1);
      if (!mine) MPI_Abort(MPI_COMM_WORLD, 1);
      for (int i = 0; i < np; i++) {
        memset(mine + pc[i].shard_offset, 1, (size_t)pc[i].count);
        for (int64_t e = 0; e < pc[i].count && bad < 5; e++) {
          double ref = p[base[k0 + pc[i].param] + pc[i].param_offset + e];
          double got = shard[pc[i].shard_offset + e];
          if (fabs(got - ref) > 2e-6 * (1.0 + fabs(ref))) {
            bad++;
            CHECK(0, "%s step %d: %s[%lld] = %.9g, expected %.9g", tag, s + 1,
                  FlatParamSpec(fp, pc[i].param)->name, (long long)(pc[i].param_offset + e), got,
                  ref);
          }
        }
      }
      for (int64_t e = 0; e < FlatParamShardNumel(fp); e++)
        if (!mine[e] && shard[e] != 0.0f) {
          CHECK(0, "%s step %d: padding element %lld of unit %d's shard is %g", tag, s + 1,
                (long long)e, u, shard[e]);
          break;
        }
      free(mine);
    }
  }
  CHECK(FsdpOptimStepCount(opt) == NSTEPS, "%s: step count %lld", tag,
        (long long)FsdpOptimStepCount(opt));
  free(p);
  free(m);
  free(v);
  free(base);
  TCALL(FsdpOptimDestroy(&opt));
  TCALL(FsdpRuntimeDestroy(&rt));
  TCALL(FsdpCollDestroy(&coll));
  TCALL(FsdpTopoDestroy(&topo));
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int W;
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  for (int F = 1; F <= W; F++) {
    if (W % F) continue;
    run_case(F, 1, 1.0);
    run_case(F, 0, 1024.0);
  }
  int rc = test_finish("test_optim");
  FsdpFinalize();
  return rc;
}
