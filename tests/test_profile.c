/* test_profile: the machine profile's fit and file (plan/profile.h).
 *
 *   - FsdpProfileFit recovers latency and bandwidth from exact points of
 *     t = a + v / b (to 1e-9), from points with +-5% noise where the
 *     latency is small beside the large messages' noise (to 10%), a
 *     latency-only curve (bandwidth 0 = infinite), a bandwidth-only curve
 *     (latency 0), a single point (all of it latency), two points (a
 *     described link: the line through them), and a link with a burst
 *     regime (tc tbf: small messages 33x faster per byte), whose bandwidth
 *     is the large messages' sustained rate to 2% ([Note: the large-message
 *     regime] in plan/profile.c);
 *   - FsdpProfileCurveSeconds is a + v / b;
 *   - a profile written and read back is the same in every field (with
 *     the stages' contended factor, the cores per node, the all-reduce
 *     timed beside the stages and the stage rounds);
 *   - a profile of before the contended factor and the micro-batches timed
 *     in turn (its three attributes deleted) still loads, with factor 0
 *     (not measured), 0 cores and 0 stage rounds; a negative factor and a
 *     negative round count are refused naming them;
 *   - a file that is not a profile, and a missing file, are usage errors
 *     naming the file.
 */
#include <hdf5.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "libfsdp.h"
#include "plan/profile.h"
#include "testutil.h"

static void Points(FsdpProfileCurve *c, double a, double b, const double *noise, int n)
{
  memset(c, 0, sizeof *c);
  c->n = n;
  for (int i = 0; i < n; i++) {
    c->bytes[i] = 1024.0 * (double)(1 << i);
    c->seconds[i] = (a + c->bytes[i] / b) * (noise ? 1.0 + noise[i] : 1.0);
  }
}

static int Near(double x, double want, double rel) { return fabs(x - want) <= rel * fabs(want); }

static void TestFit(void)
{
  FsdpProfileCurve c;
  Points(&c, 25e-6, 3e9, NULL, 12);
  FsdpProfileFit(&c);
  CHECK(Near(c.latency_s, 25e-6, 1e-9), "exact latency %g", c.latency_s);
  CHECK(Near(c.bandwidth, 3e9, 1e-9), "exact bandwidth %g", c.bandwidth);
  CHECK(Near(FsdpProfileCurveSeconds(&c, 1e6), 25e-6 + 1e6 / 3e9, 1e-9), "seconds %g",
        FsdpProfileCurveSeconds(&c, 1e6));

  /* latency small beside the large messages' noise: only the 1/t^2
   * weights (relative error) recover it; plain least squares is off 30x */
  const double noise[16] = {0.014, -0.023, -0.046, -0.048, 0.031, 0.041, 0.011, 0.023,
                            0.004, 0.044,  0.032,  -0.05,  0.02,  -0.03, 0.05,  -0.04};
  Points(&c, 2e-6, 1e9, noise, 16);
  FsdpProfileFit(&c);
  CHECK(Near(c.latency_s, 2e-6, 0.1), "noisy latency %g", c.latency_s);
  CHECK(Near(c.bandwidth, 1e9, 0.1), "noisy bandwidth %g", c.bandwidth);

  /* constant time: all latency, infinite bandwidth */
  memset(&c, 0, sizeof c);
  c.n = 6;
  const double flat[6] = {1.02e-4, 0.99e-4, 1.01e-4, 0.98e-4, 1.0e-4, 0.97e-4};
  for (int i = 0; i < 6; i++) {
    c.bytes[i] = 1024.0 * (double)(1 << i);
    c.seconds[i] = flat[i];
  }
  FsdpProfileFit(&c);
  CHECK(c.bandwidth == 0.0, "a falling flat curve has infinite bandwidth, got %g", c.bandwidth);
  CHECK(Near(c.latency_s, 1e-4, 0.03), "flat latency %g", c.latency_s);

  /* pure bandwidth with a slight downward intercept: latency 0, refitted slope */
  Points(&c, 0.0, 1e9, NULL, 8);
  for (int i = 0; i < 8; i++) c.seconds[i] -= 1e-9;
  FsdpProfileFit(&c);
  CHECK(c.latency_s == 0.0, "a negative intercept is refitted as latency 0, got %g", c.latency_s);
  CHECK(Near(c.bandwidth, 1e9, 0.01), "bandwidth-only %g", c.bandwidth);

  /* a shaped link with a burst (tc tbf): messages up to 256 KiB ride the
   * bucket at 1 GB/s, larger ones see the sustained 30 MB/s plus the
   * drained burst.  The bandwidth is the large messages' slope (the old
   * 1/t^2 fit over all points said 24x too fast, and an 8 MiB gather 5x
   * too quick); the latency stays small and non-negative. */
  memset(&c, 0, sizeof c);
  c.n = 11;
  for (int i = 0; i < c.n; i++) {
    double v = 32768.0 * (double)(1 << i), burst = 262144.0;
    c.bytes[i] = v;
    c.seconds[i] = 50e-6 + (v <= burst ? v / 1e9 : burst / 1e9 + (v - burst) / 30e6);
  }
  FsdpProfileFit(&c);
  CHECK(Near(c.bandwidth, 30e6, 0.02), "burst: sustained bandwidth %g, want 30e6", c.bandwidth);
  CHECK(c.latency_s >= 0.0 && c.latency_s <= 100e-6, "burst: latency %g", c.latency_s);
  CHECK(Near(FsdpProfileCurveSeconds(&c, 8388608.0), c.seconds[8], 0.05),
        "burst: an 8 MiB message %g s, measured %g", FsdpProfileCurveSeconds(&c, 8388608.0),
        c.seconds[8]);

  /* two points (a described link): the line through them */
  memset(&c, 0, sizeof c);
  c.n = 2;
  c.bytes[0] = 1 << 20;
  c.bytes[1] = 1 << 30;
  for (int i = 0; i < 2; i++) c.seconds[i] = 20e-6 + c.bytes[i] / 50e9;
  FsdpProfileFit(&c);
  CHECK(Near(c.latency_s, 20e-6, 1e-6) && Near(c.bandwidth, 50e9, 1e-9),
        "two points: latency %g bandwidth %g", c.latency_s, c.bandwidth);

  Points(&c, 5e-6, 1e9, NULL, 1);
  FsdpProfileFit(&c);
  CHECK(c.bandwidth == 0.0 && Near(c.latency_s, c.seconds[0], 1e-12),
        "one point: latency %g bandwidth %g", c.latency_s, c.bandwidth);
}

/* p written to path reads back as a usage error naming attr. */
static void ExpectRefused(const FsdpProfile *p, const char *path, const char *attr)
{
  FsdpProfile q;
  TCALL(FsdpProfileWrite(p, path));
  int err = FsdpProfileRead(path, &q);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), attr),
        "a damaged %s: err %d, %s", attr, err, FsdpErrorLastMessage());
}

/* The same with one double of p set to `bad` (restored after). */
static void ExpectRefusedDouble(FsdpProfile *p, const char *path, double *field, double bad,
                                const char *attr)
{
  double keep = *field;
  *field = bad;
  ExpectRefused(p, path, attr);
  *field = keep;
}

static void TestFile(void)
{
  char dir[] = "/tmp/fsdp_test_profile.XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp failed");
    return;
  }
  char path[256], other[256];
  snprintf(path, sizeof path, "%s/p.h5", dir);
  snprintf(other, sizeof other, "%s/none.h5", dir);
  static FsdpProfile p, q;
  int err0 = 0;
  memset(&p, 0, sizeof p);
  snprintf(p.host, sizeof p.host, "node017");
  snprintf(p.cpu, sizeof p.cpu, "Some CPU @ 2.0GHz");
  snprintf(p.date, sizeof p.date, "2026-12-01T12:00:00Z");
  snprintf(p.backend, sizeof p.backend, "mpi");
  snprintf(p.blas_core, sizeof p.blas_core, "SkylakeX");
  snprintf(p.model, sizeof p.model, "gpt2");
  snprintf(p.source, sizeof p.source, "measured");
  p.gemm_flops_per_s = 1.4e11;
  p.peak_flops_per_s = 3e12;
  p.world_size = 16;
  p.ranks_per_node = 8;
  p.nodes = 2;
  p.threads = 4;
  p.mem_available = (int64_t)3 << 33;
  p.ngemm = 2;
  p.gemm[0] = (FsdpProfileGemm){"h.0/h.0.attn.c_attn.weight", 4096, 768, 2304, 1.5e11};
  p.gemm[1] = (FsdpProfileGemm){"root/wte", 4096, 768, 50257, 1.25e11};
  p.attention_flops_per_s = 2e10;
  p.stream_bytes_per_s = 1e10;
  p.adamw_bytes_per_s = 8e9;
  p.nstages = 3;
  p.nstage_batches = 2;
  p.stage_batch[0] = 4;
  p.stage_batch[1] = 2;
  p.stage_seq_len = 1024;
  p.stage_params = 124475904;
  p.stage_rounds = 7;
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 3; i++) {
      p.stage_fwd_s[b][i] = 0.01 * (i + 1) / (b + 1);
      p.stage_bwd_s[b][i] = 0.025 * (i + 1) / (b + 1);
    }
  p.contended_factor = 1.27;
  p.cores_per_node = 48;
  p.contended_allreduce_s = 0.0123;
  p.contended_allreduce_bytes = 8388608;
  p.join_fraction = 0.031;
  p.concurrent_factor = 1.9;
  p.level_size[FSDP_PROFILE_NODE] = 8;
  p.level_size[FSDP_PROFILE_CROSS] = 2;
  p.level_size[FSDP_PROFILE_WORLD] = 16;
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++)
    for (int k = 0; k < FSDP_COLL_NKINDS; k++) {
      Points(&p.coll[l][k], 1e-5 * (l + 1), 1e9 * (k + 1), NULL, 3 + l + k);
      FsdpProfileFit(&p.coll[l][k]);
    }
  TCALL(FsdpProfileWrite(&p, path));
  TCALL(FsdpProfileRead(path, &q));
  CHECK(memcmp(&p, &q, sizeof p) == 0, "the profile read back differs from the one written");
  CHECK(strcmp(q.gemm[1].name, "root/wte") == 0 && q.gemm[1].OC == 50257, "gemm 1: %s %lld",
        q.gemm[1].name, (long long)q.gemm[1].OC);
  CHECK(q.contended_factor == 1.27 && q.cores_per_node == 48, "contended factor %g, %d cores",
        q.contended_factor, q.cores_per_node);
  CHECK(q.stage_rounds == 7, "stage rounds %d", q.stage_rounds);
  CHECK(q.join_fraction == 0.031 && q.concurrent_factor == 1.9, "join %g, two at once x%g",
        q.join_fraction, q.concurrent_factor);

  /* [Note: contended compute]: a file written before it has neither
   * attribute; it loads as not measured.  A negative factor is damage. */
  {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = f >= 0 ? H5Gopen2(f, "compute", H5P_DEFAULT) : -1;
    CHECK(g >= 0 && H5Adelete(g, "contended_factor") >= 0 && H5Adelete(g, "cores_per_node") >= 0 &&
              H5Adelete(g, "stage_rounds") >= 0 && H5Adelete(g, "join_fraction") >= 0,
          "deleting the contended attributes, stage_rounds and join_fraction");
    if (g >= 0) H5Gclose(g);
    g = f >= 0 ? H5Gopen2(f, "collectives", H5P_DEFAULT) : -1;
    CHECK(g >= 0 && H5Adelete(g, "concurrent_factor") >= 0, "deleting concurrent_factor");
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    err0 = FsdpProfileRead(path, &q);
    CHECK(err0 == FSDP_SUCCESS && q.contended_factor == 0.0 && q.cores_per_node == 0 &&
              q.nstages == 3 && q.stage_bwd_s[1][2] == p.stage_bwd_s[1][2],
          "an older profile: err %d, factor %g, cores %d, %d stages", err0, q.contended_factor,
          q.cores_per_node, q.nstages);
    /* [Note: micro-batches timed in turn]: older files timed them in
     * sequence (0 rounds); a negative count is damage */
    CHECK(err0 == FSDP_SUCCESS && q.stage_rounds == 0, "an older profile: %d stage rounds",
          q.stage_rounds);
    /* [Note: joining a collective], [Note: two collectives at once]:
     * older files have neither (0: not measured); negative is damage */
    CHECK(err0 == FSDP_SUCCESS && q.join_fraction == 0.0 && q.concurrent_factor == 0.0,
          "an older profile: join %g, two at once x%g", q.join_fraction, q.concurrent_factor);
    ExpectRefusedDouble(&p, path, &p.join_fraction, -0.5, "join_fraction");
    ExpectRefusedDouble(&p, path, &p.concurrent_factor, -2.0, "concurrent_factor");
    p.stage_rounds = -1;
    ExpectRefused(&p, path, "stage_rounds");
    p.stage_rounds = 7;
    ExpectRefusedDouble(&p, path, &p.contended_factor, -1.0, "contended_factor");
  }

  /* overwrite: the old file is replaced whole */
  p.nodes = 4;
  TCALL(FsdpProfileWrite(&p, path));
  TCALL(FsdpProfileRead(path, &q));
  CHECK(q.nodes == 4, "rewritten profile has %d nodes", q.nodes);

  int err = FsdpProfileRead(other, &q);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "none.h5: cannot read"),
        "missing file: %d %s", err, FsdpErrorLastMessage());
  FILE *f = fopen(other, "w");
  if (f) {
    fputs("plain text\n", f);
    fclose(f);
  }
  err = FsdpProfileRead(other, &q);
  CHECK(err == FSDP_ERR_USAGE && strstr(FsdpErrorLastMessage(), "is not an HDF5 file"),
        "text file: %d %s", err, FsdpErrorLastMessage());
  unlink(other);
  unlink(path);
  rmdir(dir);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  TestFit();
  TestFile();
  int st = test_finish("test_profile");
  FsdpFinalize();
  return st;
}
