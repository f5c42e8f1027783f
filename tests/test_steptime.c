/* test_steptime: the step replayed on a virtual clock (plan/steptime.h)
 * against timelines worked out by hand.
 *
 * Model: root unit 0 and two blocks 1, 2; stages [root, 1, 2, root];
 * every stage 1 s forward and 2 s backward; a gather takes 0.5 s, a
 * reduction 0.25 s, the optimizer 0.1 s; F = 2, no replicas.  Compute is
 * 4 + 8 + 0.1 = 12.1 s in every case; what changes is the exposed wait:
 *   - prefetch none (ring of 1): every non-root gather twice and the root's
 *     once are waited for in full (5 x 0.5) plus the last reduction
 *     (0.25): step 14.85 s, exposed 2.75 s;
 *   - prefetch backward (ring of 2): backward gathers hide behind the
 *     previous backward stage, forward ones do not (3 x 0.5 + 0.25): step
 *     13.85 s, exposed 1.75 s;
 *   - prefetch both: from the second step forward gathers hide too; only
 *     the root's first gather and the last reduction stay exposed
 *     (0.5 + 0.25): step 12.85 s, exposed 0.75 s;
 *   - a limiter of 1 with prefetch both changes nothing here (at most one
 *     gather is ahead anyway); NRAF (ring of 2) gathers each block once:
 *     exposed 0.5 x 3 + 0.25 with prefetch none;
 *   - -grad_accum 2 -accum_comm 0 reduces once per step, in the last
 *     micro-step; -accum_comm 1 in both.
 * The events of prefetch both are checked in full order.
 * The gradient ring: three blocks, two gradient slots, reductions of 3 s
 * behind 2 s backward stages, the root's last backward stage 10 s: block 1
 * waits 1 s for its slot (block 3's reduction) before its backward, which
 * delays the root's long stage: step 27 s, exposed 4 s (1 s + the last
 * reduction's 3 s); without the wait it would be 26 s.
 * [Note: contended compute]: F = 1 with 2 replicas (an all-reduce of 0.25 s
 * per unit after its backward), a factor of 2: block 1's backward starts
 * as block 2's all-reduce starts, runs its first 0.25 s at half rate and
 * ends 0.125 s late, the root's backward likewise beside block 1's: step
 * 12.6 s (12.1 + 0.25 contention + 0.25 the root's reduction exposed),
 * compute 12.35 s; factor 1: 12.35 s.  Without replicas (nothing
 * reduced) 12.1 s at either factor.  -grad_accum 2: with -accum_comm 1
 * micro-step 1's root reduction also runs under micro-step 2's first
 * forward stage (0.125 s more), 0.625 s of contention, step 24.975 s;
 * with -accum_comm 0 only the last micro-step's, 0.25 s: step 24.6 s;
 * at factor 1 both are 24.35 s.  The collectives beside compute twice as
 * long (comm x2): blocks 2 and 1 reduce in 0.5 s each, the root's last
 * reduction alone in 0.25 s (reduce stream busy 1.25 s); at compute factor
 * 1 they stay hidden (12.35 s); at 2 each block's backward beside them
 * loses 0.25 s: 12.85 s.
 * Event by event: blocks' gathers of 3 s, prefetch backward with L 1, the
 * collectives beside compute twice as long (comm x2), compute factor 1.
 * Forward: the root's gather 0.5 s and each block's 3 s on demand, alone
 * (6.5 s exposed).  Backward: block 2's gather, issued as the root's 2 s
 * backward starts, moves 1 s of its 3 beside it and the other 2 s alone
 * while the compute thread waits (2 s exposed); block 1's likewise behind
 * block 2's backward (2 s); the root's last reduction 0.25 s: step 22.85 s,
 * exposed 10.75 s, gather stream busy 0.5 + 3 + 3 + 4 + 4 = 14.5 s.  A
 * gather timed at the contended rate when issued would take 6 s and
 * expose 4 s each: 26.85 s.
 * [Note: joining a collective] and [Note: two collectives at once]: each
 * case worked out at its check below.
 */
#include <math.h>
#include <string.h>

#include "libfsdp.h"
#include "plan/steptime.h"
#include "testutil.h"

static const int kIsRoot[3] = {1, 0, 0};
static const int kStageUnit[4] = {0, 1, 2, 0};
static const double kFwd[4] = {1, 1, 1, 1}, kBwd[4] = {2, 2, 2, 2};
static const double kGather[3] = {0.5, 0.5, 0.5}, kReduce[3] = {0.25, 0.25, 0.25};

/* The runtime options the replay reads, fp32 throughout. */
static FsdpRuntimeOptions Opts(FsdpPrefetch pf, int raf, int L, int K, int accum_comm)
{
  FsdpRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.prefetch = pf;
  o.reshard_after_forward = raf;
  o.limit_all_gathers = L;
  o.grad_accum = K;
  o.accum_comm = accum_comm;
  o.param_dtype = o.reduce_dtype = FSDP_DTYPE_FP32;
  return o;
}

static void Run(FsdpPrefetch pf, int raf, int L, int K, int accum_comm, int gather_slots,
                FsdpStepTimeResult *r, FsdpStepEvent *ev, int maxev, int *nev)
{
  FsdpRuntimeOptions o = Opts(pf, raf, L, K, accum_comm);
  FsdpStepTimeInput in = {&o,    2,       1,      3,      4,   kIsRoot, kStageUnit, kFwd,
                          kBwd,  kGather, kReduce, 0.1, gather_slots, 2, 0, 0, NULL, 1.0, 1.0,
                          0.0,   1.0, NULL, NULL};
  TCALL(FsdpStepTimeSimulate(&in, r, ev, maxev, nev));
}

static int Near(double x, double y) { return fabs(x - y) < 1e-12; }

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  FsdpStepTimeResult r;
  FsdpStepEvent ev[64];
  int n = 0;

  Run(FSDP_PREFETCH_NONE, 1, 0, 1, 1, 1, &r, NULL, 0, &n);
  CHECK(Near(r.step_s, 14.85) && Near(r.exposed_s, 2.75) && Near(r.compute_s, 12.1),
        "prefetch none: step %g exposed %g compute %g", r.step_s, r.exposed_s, r.compute_s);
  CHECK(r.max_in_flight == 1, "prefetch none: %d in flight", r.max_in_flight);
  CHECK(Near(r.gather_busy_s, 2.5) && Near(r.reduce_busy_s, 0.75), "busy %g %g", r.gather_busy_s,
        r.reduce_busy_s);

  Run(FSDP_PREFETCH_BACKWARD, 1, 0, 1, 1, 2, &r, NULL, 0, &n);
  CHECK(Near(r.step_s, 13.85) && Near(r.exposed_s, 1.75), "prefetch backward: step %g exposed %g",
        r.step_s, r.exposed_s);

  Run(FSDP_PREFETCH_BOTH, 1, 0, 1, 1, 2, &r, ev, 64, &n);
  CHECK(Near(r.step_s, 12.85) && Near(r.exposed_s, 0.75), "prefetch both: step %g exposed %g",
        r.step_s, r.exposed_s);
  /* G = gather, F = forward, B = backward, R = reduce; unit; virtual time */
  static const struct {
    FsdpStepEventKind k;
    int unit;
    double t;
  /* L = 0: both blocks ahead of the root at each phase's start */
  } want[] = {{FSDP_STEP_EV_GATHER, 0, 0.0},    {FSDP_STEP_EV_GATHER, 1, 0.5},
              {FSDP_STEP_EV_GATHER, 2, 0.5},    {FSDP_STEP_EV_FORWARD, 0, 0.5},
              {FSDP_STEP_EV_FORWARD, 1, 1.5},   {FSDP_STEP_EV_FORWARD, 2, 2.5},
              {FSDP_STEP_EV_FORWARD, 0, 3.5},   {FSDP_STEP_EV_GATHER, 2, 4.5},
              {FSDP_STEP_EV_GATHER, 1, 4.5},    {FSDP_STEP_EV_BACKWARD, 0, 4.5},
              {FSDP_STEP_EV_BACKWARD, 2, 6.5},  {FSDP_STEP_EV_REDUCE, 2, 8.5},
              {FSDP_STEP_EV_BACKWARD, 1, 8.5},  {FSDP_STEP_EV_REDUCE, 1, 10.5},
              {FSDP_STEP_EV_BACKWARD, 0, 10.5}, {FSDP_STEP_EV_REDUCE, 0, 12.5}};
  int nwant = (int)(sizeof want / sizeof want[0]);
  CHECK(n == nwant, "prefetch both: %d events, expected %d", n, nwant);
  for (int i = 0; i < n && i < nwant; i++)
    CHECK(ev[i].kind == want[i].k && ev[i].unit == want[i].unit && Near(ev[i].t, want[i].t),
          "event %d: %s unit %d at %g, expected %s unit %d at %g", i, FsdpStepEventNames[ev[i].kind],
          ev[i].unit, ev[i].t, FsdpStepEventNames[want[i].k], want[i].unit, want[i].t);

  CHECK(r.max_in_flight == 2, "prefetch both, L 0: %d in flight", r.max_in_flight);

  Run(FSDP_PREFETCH_BOTH, 1, 1, 1, 1, 2, &r, NULL, 0, &n);
  CHECK(Near(r.step_s, 12.85) && r.max_in_flight == 1, "both, L 1: step %g, %d in flight",
        r.step_s, r.max_in_flight);

  /* [Note: prefetch and the limiter]: root + 4 blocks, the first block's
   * compute long and the others' short, gathers 1 each; the ring 1 + L.
   * At each phase's start L gathers go ahead: L = 1, 2, 3 give 1, 2, 3 in
   * flight; before block 1's forward the blocks 1..L+1 are gathered (the
   * top-up at block 1 precedes its compute); the deeper the prefetch, the
   * more of the short blocks' gathers hide under the long block. */
  {
    static const int is_root[5] = {1, 0, 0, 0, 0}, stage_unit[6] = {0, 1, 2, 3, 4, 0};
    static const double fwd[6] = {1, 6, 0.25, 0.25, 0.25, 1}, bwd[6] = {2, 2, 2, 2, 2, 2};
    static const double gather[5] = {1, 1, 1, 1, 1}, reduce[5] = {0, 0, 0, 0, 0};
    double exposed[4] = {0};
    for (int L = 1; L <= 3; L++) {
      FsdpRuntimeOptions o;
      memset(&o, 0, sizeof o);
      o.prefetch = FSDP_PREFETCH_BOTH;
      o.reshard_after_forward = 1;
      o.limit_all_gathers = L;
      o.grad_accum = 1;
      o.accum_comm = 1;
      o.param_dtype = o.reduce_dtype = FSDP_DTYPE_FP32;
      FsdpStepTimeInput in = {&o,  2,      1,      5,   6, is_root, stage_unit, fwd,
                              bwd, gather, reduce, 0.0, 1 + L, 2, 0, 0, NULL, 1.0, 1.0, 0.0, 1.0, NULL, NULL};
      TCALL(FsdpStepTimeSimulate(&in, &r, ev, 64, &n));
      exposed[L] = r.exposed_s;
      CHECK(r.max_in_flight == L, "L %d: %d gathers in flight", L, r.max_in_flight);
      /* forward: the gathers of blocks 1..L precede block 1's forward */
      int gathers_before = 0;
      for (int i = 0; i < n && !(ev[i].kind == FSDP_STEP_EV_FORWARD && ev[i].unit == 1); i++)
        gathers_before += ev[i].kind == FSDP_STEP_EV_GATHER && ev[i].unit > 0;
      CHECK(gathers_before == L + 1, "L %d: %d block gathers before block 1's forward", L,
            gathers_before);
    }
    /* the root's on-demand gather (1) in every case; L = 1: blocks 3 and 4
     * each wait 0.75 behind a 0.25 compute; L = 2: block 4 waits 0.5;
     * L = 3: all three short blocks' gathers ran under block 1 */
    CHECK(Near(exposed[1], 2.5) && Near(exposed[2], 1.5) && Near(exposed[3], 1.0),
          "deeper prefetch exposes less: L 1, 2, 3 expose %g %g %g, expected 2.5 1.5 1", exposed[1],
          exposed[2], exposed[3]);
  }

  Run(FSDP_PREFETCH_NONE, 0, 0, 1, 1, 2, &r, NULL, 0, &n);
  CHECK(Near(r.exposed_s, 1.75) && Near(r.step_s, 13.85), "NRAF, none: step %g exposed %g",
        r.step_s, r.exposed_s);

  for (int ac = 0; ac <= 1; ac++) {
    Run(FSDP_PREFETCH_BACKWARD, 1, 0, 2, ac, 2, &r, ev, 64, &n);
    int reduces[2] = {0, 0};
    for (int i = 0; i < n; i++)
      if (ev[i].kind == FSDP_STEP_EV_REDUCE) reduces[ev[i].micro]++;
    CHECK(reduces[0] == (ac ? 3 : 0) && reduces[1] == 3,
          "accum_comm %d: reductions %d then %d per micro-step", ac, reduces[0], reduces[1]);
    CHECK(Near(r.compute_s, 24.1), "accum_comm %d: compute %g", ac, r.compute_s);
  }

  {
    static const int is_root[4] = {1, 0, 0, 0}, stage_unit[5] = {0, 1, 2, 3, 0};
    static const double fwd[5] = {1, 1, 1, 1, 1}, bwd[5] = {10, 2, 2, 2, 2};
    static const double gather[4] = {0, 0, 0, 0}, reduce[4] = {3, 3, 3, 3};
    FsdpRuntimeOptions o = Opts(FSDP_PREFETCH_NONE, 1, 0, 1, 1);
    FsdpStepTimeInput in = {&o,  2,      1,      4,   5, is_root, stage_unit, fwd,
                            bwd, gather, reduce, 0.0, 1, 2, 0, 0, NULL, 1.0, 1.0, 0.0, 1.0, NULL, NULL};
    TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
    CHECK(Near(r.step_s, 27.0) && Near(r.exposed_s, 4.0) && Near(r.compute_s, 23.0),
          "gradient ring: step %g exposed %g compute %g", r.step_s, r.exposed_s, r.compute_s);
    /* [Note: the gradient tail] the same step with an optimizer of 0.1 s
     * per unit.  Unfused, or gated by clipping: after the last reduction
     * (27 + 0.4).  poll: h.2's share runs after stage 1 (it landed at 12),
     * delaying the root's backward and reduction by 0.1; h.1's and h.0's
     * run after it while the root's reduction is in flight (ends 27.1),
     * the root's share after that: 27.2.  stream: each share runs behind
     * its reduction on the stream, which is idle before the root's
     * reduction (issued at 24): only the root's share is exposed, 27.1. */
    static const double share[4] = {0.1, 0.1, 0.1, 0.1};
    static const struct {
      int tail, early;
      double step;
    } tc[] = {{FSDP_TAIL_NONE, 1, 27.4}, {FSDP_TAIL_POLL, 0, 27.4}, {FSDP_TAIL_POLL, 1, 27.2},
              {FSDP_TAIL_STREAM, 1, 27.1}, {FSDP_TAIL_STREAM, 0, 27.4}};
    for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++) {
      in.optimizer_s = 0.4;
      in.tail = tc[i].tail;
      in.tail_early = tc[i].early;
      in.optim_unit_s = share;
      TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
      CHECK(Near(r.step_s, tc[i].step) && Near(r.compute_s, 23.4),
            "gradient tail %s early %d: step %g (want %g), compute %g (want 23.4)",
            FsdpTailNames[tc[i].tail], tc[i].early, r.step_s, tc[i].step, r.compute_s);
    }
    /* AdamW gated (clipping): the hook still runs each unit's sum of
     * squares as it lands; shares of 0.1 run where the early AdamW's ran
     * (27.2 poll, 27.1 stream), the rest of the optimizer after the last
     * (none left here); unhooked (none) all of it after the last: 27.4 */
    static const struct {
      int tail;
      double step;
    } gated[] = {{FSDP_TAIL_POLL, 27.2}, {FSDP_TAIL_STREAM, 27.1}, {FSDP_TAIL_NONE, 27.4}};
    for (size_t i = 0; i < sizeof gated / sizeof gated[0]; i++) {
      in.tail = gated[i].tail;
      in.tail_early = 0;
      in.optim_unit_s = NULL;
      in.check_unit_s = share;
      TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
      CHECK(Near(r.step_s, gated[i].step) && Near(r.compute_s, 23.4),
            "sums of squares in the tail (%s, AdamW gated): step %g (want %g), compute %g (want "
            "23.4)", FsdpTailNames[gated[i].tail], r.step_s, gated[i].step, r.compute_s);
    }
    in.check_unit_s = NULL;
    in.tail = FSDP_TAIL_NONE;
    /* UnitAcquireGrad zeroes each unit's gradient buffer before its
     * backward, 0.5 s each on the compute thread: the root's (before its
     * head's backward), block 3's and 2's, block 1's after the wait for its
     * slot: compute 23 + 4 x 0.5.  Block 3's reduction is issued 1 s later
     * (10), block 1 reaches its slot 1.5 s later (12.5) and waits 0.5 s
     * for it; the root's reduction ends the step: 25.5 + 3 = 28.5, exposed
     * 0.5 + 3 (without the zeroing 27 and 4) */
    static const double zero[4] = {0.5, 0.5, 0.5, 0.5};
    in.optimizer_s = 0.0;
    in.zero_unit_s = zero;
    TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
    CHECK(Near(r.compute_s, 25.0) && Near(r.step_s, 28.5) && Near(r.exposed_s, 3.5),
          "gradient buffers zeroed: compute %g (want 25), step %g (want 28.5), exposed %g (want 3.5)",
          r.compute_s, r.step_s, r.exposed_s);
  }

  /* The zeroing where the buffer is persistent (-grad_accum 2 -accum_comm
   * 0: once, at micro-step 0), a ring slot (-accum_comm 1: every
   * micro-step) or the gradient shard itself (F = 1, fp32: none here, the
   * step's start zeroes it within optimizer_s) */
  {
    static const double zero[3] = {0.5, 0.5, 0.5};
    static const struct {
      int F, ac;
      double extra;
    } zc[] = {{2, 0, 1.5}, {2, 1, 3.0}, {1, 0, 0.0}};
    for (size_t i = 0; i < sizeof zc / sizeof zc[0]; i++) {
      FsdpRuntimeOptions o = Opts(FSDP_PREFETCH_BACKWARD, 1, 0, 2, zc[i].ac);
      FsdpStepTimeInput in = {&o,   zc[i].F, 1,   3, 4, kIsRoot, kStageUnit, kFwd, kBwd, kGather,
                              kReduce, 0.1, 2, 2, 0, 0, NULL, 1.0, 1.0, 0.0, 1.0, NULL, NULL};
      TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
      double base = r.compute_s;
      in.zero_unit_s = zero;
      TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
      CHECK(Near(r.compute_s - base, zc[i].extra),
            "F %d, -grad_accum 2 -accum_comm %d: zeroing adds %g s of compute (want %g)", zc[i].F,
            zc[i].ac, r.compute_s - base, zc[i].extra);
    }
  }

  /* [Note: contended compute] */
  {
    static const struct {
      int R, K, ac;
      double f, fb, step, compute, contention, rbusy;
    } cc[] = {{2, 1, 1, 2.0, 1.0, 12.6, 12.35, 0.25, 0.75},
              {2, 1, 1, 1.0, 1.0, 12.35, 12.1, 0.0, 0.75},
              {1, 1, 1, 2.0, 1.0, 12.1, 12.1, 0.0, 0.0},
              {1, 1, 1, 1.0, 1.0, 12.1, 12.1, 0.0, 0.0},
              {2, 2, 1, 2.0, 1.0, 24.975, 24.725, 0.625, 1.5},
              {2, 2, 0, 2.0, 1.0, 24.6, 24.35, 0.25, 0.75},
              {2, 2, 1, 1.0, 1.0, 24.35, 24.1, 0.0, 1.5},
              {2, 2, 0, 1.0, 1.0, 24.35, 24.1, 0.0, 0.75},
              /* the reductions beside compute twice as long, the last alone */
              {2, 1, 1, 1.0, 2.0, 12.35, 12.1, 0.0, 1.25},
              {2, 1, 1, 2.0, 2.0, 12.85, 12.6, 0.5, 1.25}};
    for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) {
      FsdpRuntimeOptions o = Opts(FSDP_PREFETCH_BACKWARD, 1, 0, cc[i].K, cc[i].ac);
      FsdpStepTimeInput in = {&o,    1,       cc[i].R, 3,   4, kIsRoot, kStageUnit, kFwd,
                              kBwd,  kGather, kReduce, 0.1, 1, 2, 0, 0, NULL, cc[i].f,
                              cc[i].fb, 0.0, 1.0, NULL, NULL};
      TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
      CHECK(Near(r.step_s, cc[i].step) && Near(r.compute_s, cc[i].compute) &&
                Near(r.contention_s, cc[i].contention) && Near(r.reduce_busy_s, cc[i].rbusy),
            "contended x%g (comm x%g), R %d, K %d, accum_comm %d: step %g (want %g), compute %g "
            "(want %g), contention %g (want %g), reduce stream busy %g (want %g)", cc[i].f,
            cc[i].fb, cc[i].R, cc[i].K, cc[i].ac, r.step_s, cc[i].step, r.compute_s,
            cc[i].compute, r.contention_s, cc[i].contention, r.reduce_busy_s, cc[i].rbusy);
    }
  }

  /* event by event: a prefetched gather waited for runs alone */
  {
    static const double long_gather[3] = {0.5, 3, 3};
    FsdpRuntimeOptions o = Opts(FSDP_PREFETCH_BACKWARD, 1, 1, 1, 1);
    FsdpStepTimeInput in = {&o,   2,           1,       3,   4, kIsRoot, kStageUnit, kFwd, kBwd,
                            long_gather, kReduce, 0.1, 2, 2, 0, 0, NULL, 1.0, 2.0, 0.0, 1.0, NULL, NULL};
    TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
    CHECK(Near(r.step_s, 22.85) && Near(r.exposed_s, 10.75) && Near(r.compute_s, 12.1) &&
              Near(r.gather_busy_s, 14.5),
          "gathers shared event by event: step %g (want 22.85), exposed %g (want 10.75), "
          "compute %g (want 12.1), gather stream busy %g (want 14.5)",
          r.step_s, r.exposed_s, r.compute_s, r.gather_busy_s);
  }

  /* [Note: joining a collective], [Note: two collectives at once] */
  {
    static const struct {
      FsdpPrefetch pf;
      int slots;
      double join, conc, step, exposed, gbusy, rbusy;
    } jc[] = {/* none, joins 0.05 of the compute before: the root's first
               * gather waits 0.005 more (after the 0.1 optimizer), the
               * forward gathers 0.05 (after 1 s stages), the backward ones
               * and the reductions 0.1 (after 2 s): 14.85 + 0.405 */
              {FSDP_PREFETCH_NONE, 1, 0.05, 1.0, 15.255, 3.155, 2.805, 1.05},
              /* none: block 1's backward gather runs beside block 2's
               * reduction, both at half rate for 0.5 s, then alone for
               * its last 0.25: 0.25 more exposed */
              {FSDP_PREFETCH_NONE, 1, 0.0, 2.0, 15.1, 3.0, 2.75, 1.0},
              /* both: from 0.1 after issue, reduction done 0.5 later, the
               * gather's last 0.25 alone (0.85 in all) */
              {FSDP_PREFETCH_NONE, 1, 0.05, 2.0, 15.505, 3.405, 3.055, 1.3},
              /* both, L 0: the root's first gather waits 0.005 more, the
               * last reduction 0.1 (12.85 + 0.105); the blocks' forward
               * gathers follow the wait for the root's: no join (0.5
               * each); in backward block 1's gather, issued with block
               * 2's after a forward stage, joins while block 2's runs:
               * busy 0.5, not 0.55: 0.505 + 0.5 + 0.5 + 0.55 + 0.5 */
              {FSDP_PREFETCH_BOTH, 2, 0.05, 1.0, 12.955, 0.855, 2.555, 1.05}};
    for (size_t i = 0; i < sizeof jc / sizeof jc[0]; i++) {
      FsdpRuntimeOptions o = Opts(jc[i].pf, 1, 0, 1, 1);
      FsdpStepTimeInput in = {&o,   2,       1,       3,   4,           kIsRoot, kStageUnit, kFwd,
                              kBwd, kGather, kReduce, 0.1, jc[i].slots, 2,       0,          0,
                              NULL, 1.0,     1.0,     jc[i].join, jc[i].conc, NULL, NULL};
      TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
      CHECK(Near(r.step_s, jc[i].step) && Near(r.exposed_s, jc[i].exposed) &&
                Near(r.gather_busy_s, jc[i].gbusy) && Near(r.reduce_busy_s, jc[i].rbusy),
            "%s, join %g of the compute before, two at once x%g: step %g (want %g), exposed %g "
            "(want %g), gather stream busy %g (want %g), reduce stream busy %g (want %g)",
            FsdpPrefetchNames[jc[i].pf], jc[i].join, jc[i].conc, r.step_s, jc[i].step,
            r.exposed_s, jc[i].exposed, r.gather_busy_s, jc[i].gbusy, r.reduce_busy_s,
            jc[i].rbusy);
    }
    /* -optim_overlap stream: block 2's tail share (0.1, compute on the
     * reduce stream) follows its reduction at 10.5, beside block 1's
     * gather, which now runs alone (its last 0.25 in 0.25): block 1's
     * backward starts at 10.75, the root's reduction and share end the
     * step at 15.1 (15.15 were the share a second collective) */
    static const double share[3] = {0.1, 0.1, 0.1};
    FsdpRuntimeOptions o = Opts(FSDP_PREFETCH_NONE, 1, 0, 1, 1);
    FsdpStepTimeInput in = {&o,   2,       1,       3,   4, kIsRoot, kStageUnit, kFwd,
                            kBwd, kGather, kReduce, 0.3, 1, 2,       0,          0,
                            NULL, 1.0,     1.0,     0.0, 2.0, NULL, NULL};
    in.tail = FSDP_TAIL_STREAM;
    in.tail_early = 1;
    in.optim_unit_s = share;
    TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
    CHECK(Near(r.step_s, 15.1) && Near(r.compute_s, 12.3),
          "a tail share beside a gather is not a second collective: step %g (want 15.1), "
          "compute %g (want 12.3)", r.step_s, r.compute_s);
    /* F = 1 without replicas: no collective, each share runs on the idle
     * stream at once (no join): the root's last one after its backward,
     * the step 12 + 0.1 */
    in.F = 1;
    in.join_fraction = 0.05;
    TCALL(FsdpStepTimeSimulate(&in, &r, NULL, 0, &n));
    CHECK(Near(r.step_s, 12.1), "a tail share waits for no join: step %g (want 12.1)", r.step_s);
  }

  int st = test_finish("test_steptime");
  FsdpFinalize();
  return st;
}
