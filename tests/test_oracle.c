/* test_oracle: the C GPT against PyTorch's float64 golden loss and
 * gradients (tests/oracle/tiny_gpt2.bin, see tests/oracle/README.md), with
 * the parameters sharded over the ranks of the run; plus a finite-difference
 * check of the whole model's gradient through the FSDP runtime. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fsdp_test_model.h"

typedef struct {
  GptConfig cfg;
  int B, T;
  int *inputs, *targets;
  float *params, *grads;
  int64_t n;
  double loss;
} Golden;

static int read_golden(const char *path, Golden *g)
{
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); return 1; }
  int32_t h[256];
  if (fread(h, 4, 256, f) != 256 || h[0] != 20261130 || h[1] != 1) {
    fprintf(stderr, "%s: bad header\n", path);
    fclose(f);
    return 1;
  }
  g->cfg = (GptConfig){h[2], h[4], h[3], h[5], h[6]};
  g->B = h[7];
  g->T = h[8];
  g->n = GptConfigParamCount(&g->cfg);
  size_t BT = (size_t)g->B * g->T;
  g->inputs = malloc(BT * sizeof(int));
  g->targets = malloc(BT * sizeof(int));
  g->params = malloc((size_t)g->n * sizeof(float));
  g->grads = malloc((size_t)g->n * sizeof(float));
  int ok = fread(g->inputs, 4, BT, f) == BT && fread(g->targets, 4, BT, f) == BT &&
           fread(g->params, 4, (size_t)g->n, f) == (size_t)g->n &&
           fread(&g->loss, 8, 1, f) == 1 && fread(g->grads, 4, (size_t)g->n, f) == (size_t)g->n;
  fclose(f);
  if (!ok) fprintf(stderr, "%s: truncated\n", path);
  return !ok;
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int rank, W;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char *src = getenv("FSDP_SRCDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/oracle/tiny_gpt2.bin", src ? src : ".");
  Golden gd;
  if (read_golden(path, &gd)) MPI_Abort(MPI_COMM_WORLD, 1);

  /* Every rank runs the same batch (data parallel over identical data), so
   * the 1/W-scaled reduced gradient equals the one-rank gradient. */
  int Fs[2] = {W, 1};
  for (int fi = 0; fi < (W > 1 ? 2 : 1); fi++) {
    for (int raf = 0; raf <= 1; raf++) {
      TestGpt g;
      test_gpt_create(MPI_COMM_WORLD, &gd.cfg, gd.B, gd.T, Fs[fi], raf, &g);
      test_gpt_load(&g, gd.params);
      double loss = test_gpt_step(&g, gd.inputs, gd.targets);
      double rel = fabs(loss - gd.loss) / fabs(gd.loss);
      CHECK(rel <= 1e-5, "F=%d raf=%d: loss %.9f vs golden %.9f (rel %.2e)", Fs[fi], raf, loss,
            gd.loss, rel);
      /* per-tensor max|diff| / max|gold| over the tensors of my shard:
       * gather the bound over all tensors (simplest: whole-model max) and
       * per parameter via the pieces */
      int64_t base = 0;
      double worst_ratio = 0.0;
      for (int u = 0; u < FsdpRuntimeNumUnits(g.rt); u++) {
        FlatParam fp = FsdpRuntimeUnitFlatParam(g.rt, u);
        for (int p = 0; p < FlatParamNumParams(fp); p++) {
          int64_t off = base + FlatParamOffset(fp, p);
          int64_t n = FlatParamSpecNumel(FlatParamSpec(fp, p));
          double mx = 0.0;
          for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(gd.grads[off + i]));
          /* compare the pieces of this parameter in my shard */
          const FlatParamPiece *pc;
          int np;
          TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
          double md = 0.0;
          const float *gs = FsdpRuntimeUnitGradShard(g.rt, u);
          for (int k = 0; k < np; k++) {
            if (pc[k].param != p) continue;
            for (int64_t i = 0; i < pc[k].count; i++)
              md = fmax(md, fabs((double)gs[pc[k].shard_offset + i] -
                                 gd.grads[off + pc[k].param_offset + i]));
          }
          double ratio = mx > 0 ? md / mx : md;
          if (ratio > worst_ratio) worst_ratio = ratio;
          CHECK(ratio <= 1e-5, "F=%d raf=%d: gradient of %s: max|diff| %.3e / max|gold| %.3e = %.2e",
                Fs[fi], raf, FlatParamSpec(fp, p)->name, md, mx, ratio);
        }
        base += FlatParamNumel(fp);
      }
      if (rank == 0)
        printf("F=%d raf=%d: loss %.9f (golden %.9f), worst gradient ratio %.2e\n", Fs[fi], raf,
               loss, gd.loss, worst_ratio);
      test_gpt_destroy(&g);
    }
  }

  /* Finite differences through the runtime (sharded at F = W): perturb the
   * largest-gradient elements of every tensor on the rank that owns them. */
  {
    TestGpt g;
    test_gpt_create(MPI_COMM_WORLD, &gd.cfg, gd.B, gd.T, W, 1, &g);
    test_gpt_load(&g, gd.params);
    test_gpt_step(&g, gd.inputs, gd.targets);
    int checked = 0;
    for (int u = 0; u < FsdpRuntimeNumUnits(g.rt); u++) {
      FlatParam fp = FsdpRuntimeUnitFlatParam(g.rt, u);
      int64_t S = FlatParamShardNumel(fp);
      /* the same global element index on every rank: pick from golden */
      float *shard = FsdpRuntimeUnitShard(g.rt, u);
      float *gshard = FsdpRuntimeUnitGradShard(g.rt, u);
      for (int p = 0; p < FlatParamNumParams(fp); p++) {
        int64_t flat = FlatParamOffset(fp, p);
        int64_t n = FlatParamSpecNumel(FlatParamSpec(fp, p));
        /* element with the largest |analytic| gradient in this tensor,
         * found identically on every rank by a max-loc reduction */
        struct { double v; int idx; } loc = {0.0, -1}, best;
        const FlatParamPiece *pc;
        int np;
        TCALL(FlatParamShardPieces(fp, FlatParamShardRank(fp), &pc, &np));
        for (int k = 0; k < np; k++)
          if (pc[k].param == p)
            for (int64_t i = 0; i < pc[k].count; i++)
              if (fabs(gshard[pc[k].shard_offset + i]) > loc.v) {
                loc.v = fabs(gshard[pc[k].shard_offset + i]);
                loc.idx = (int)(flat + pc[k].param_offset + i);
              }
        MPI_Allreduce(&loc, &best, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        if (best.idx < 0 || best.v < 1e-3) continue;
        (void)n;
        int owner = (int)(best.idx / S);
        int64_t local = best.idx % S;
        float analytic = 0.0f, orig = 0.0f;
        const float h = 1e-2f;
        if (FlatParamShardRank(fp) == owner) { analytic = gshard[local]; orig = shard[local]; }
        double lp, lm;
        if (FlatParamShardRank(fp) == owner) shard[local] = orig + h;
        lp = test_gpt_step(&g, gd.inputs, gd.targets);
        if (FlatParamShardRank(fp) == owner) shard[local] = orig - h;
        lm = test_gpt_step(&g, gd.inputs, gd.targets);
        if (FlatParamShardRank(fp) == owner) {
          shard[local] = orig;
          double fd = (lp - lm) / (2.0 * h);
          double rel = fabs(fd - analytic) / fmax(fabs(analytic), 1e-6);
          CHECK(rel < 3e-2, "finite difference of %s[%lld]: fd %.6f analytic %.6f rel %.2e",
                FlatParamSpec(fp, p)->name, (long long)(best.idx - flat), fd, analytic, rel);
          checked++;
        }
        test_gpt_step(&g, gd.inputs, gd.targets); /* restore gradients */
      }
    }
    int total = 0;
    MPI_Allreduce(&checked, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(total >= 20, "only %d tensors were finite-difference checked", total);
    if (rank == 0) printf("finite differences: %d tensors checked\n", total);
    test_gpt_destroy(&g);
  }
  free(gd.inputs);
  free(gd.targets);
  free(gd.params);
  free(gd.grads);
  int rc = test_finish("test_oracle");
  FsdpFinalize();
  return rc;
}
