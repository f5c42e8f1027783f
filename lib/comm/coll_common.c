/* coll_common.c: what coll.c and the collective back-ends share
 * (coll_common.h): the kinds' and groups' names for messages, the split of
 * a reduction's scale, and how an MPI wait waits. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/coll_common.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"

/* declared in coll.h (public); defined here, where the back-ends find it */
const char *const FsdpCollKindNames[FSDP_COLL_NKINDS] = {"all-gather", "reduce-scatter",
                                                         "all-reduce"};

const char *FsdpCollGroupName(const FsdpGroup *g)
{
  return (g && g->name) ? g->name : "unnamed";
}

/* [Note: scaled reductions] A reduction with scale s (1/W for a gradient
 * mean) multiplies every input by pre before the sum and the sum by
 * post = s / pre after it, with pre = 2^-ceil(log2(1/s) / 2), a power of
 * two near sqrt(s): for W a power of two exactly PyTorch's gradient pre-
 * and post-division factors (W = 8: 1/4 and 1/2).  Sum-then-divide
 * overflows once the sum of W gradients passes the dtype's range (65504
 * in fp16, whatever the mean), divide-then-sum underflows small gradients
 * by the full 1/W; the split halves both exponents' exposure.  Both
 * back-ends use the rule for every dtype: MPI scales the send buffer in
 * place before the collective (so reduce-scatter's send is scratch) and
 * the result after it; NCCL uses ncclPreMulSum(pre) and scales the result
 * on the communication stream.  Multiplying by powers of two is exact, so
 * the result equals sum-then-scale bit for bit wherever neither overflows
 * nor underflows. */
void FsdpCollSplitScale(float scale, float *pre, float *post)
{
  *pre = 1.0f;
  *post = scale;
  if (!(scale > 0.0f && scale < 1.0f)) return; /* 1, >1, 0, negative, NaN: as given */
  int k = (int)ceil(-log2((double)scale) / 2.0);
  *pre = ldexpf(1.0f, -k);
  *post = ldexpf(scale, k); /* scale / pre, exact */
}

/* ---- [Note: waiting for a collective] (coll_common.h) ------------------- */

static const char *const coll_wait_names[] = {"adaptive", "block", "yield", "sleep", NULL};
#define COLL_WAIT_DEFAULT COLL_WAIT_ADAPTIVE
#define COLL_SLEEP_MIN_NS 2000L
#define COLL_SLEEP_MAX_NS 256000L
#define COLL_SPIN_S 1.0
#define COLL_IDLE_MIN_NS 50000L
#define COLL_IDLE_MAX_NS 1000000L

static void SleepNs(long ns)
{
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

int FsdpCollWaitRequest(CollWait wait, MPI_Request *req)
{
  if (wait == COLL_WAIT_BLOCK) return MPI_Wait(req, MPI_STATUS_IGNORE);
  long ns = wait == COLL_WAIT_SLEEP ? COLL_SLEEP_MIN_NS : COLL_IDLE_MIN_NS;
  double t0 = wait == COLL_WAIT_ADAPTIVE ? FsdpWallTime() : 0.0;
  int idle = 0; /* adaptive: past COLL_SPIN_S */
  for (unsigned polls = 1;; polls++) {
    int done = 0;
    int err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (err != MPI_SUCCESS || done) return err;
    if (wait == COLL_WAIT_YIELD) {
      sched_yield();
    } else if (wait == COLL_WAIT_SLEEP || idle) {
      SleepNs(ns);
      long max = wait == COLL_WAIT_SLEEP ? COLL_SLEEP_MAX_NS : COLL_IDLE_MAX_NS;
      if (ns < max) ns = 2 * ns < max ? 2 * ns : max;
    } else if (polls % 256 == 0) { /* the clock now and then: a test is cheaper */
      idle = FsdpWallTime() - t0 >= COLL_SPIN_S;
    }
  }
}

int FsdpCollMpiAllreduce(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op,
                         MPI_Comm comm, int adaptive)
{
  if (!adaptive) return MPI_Allreduce(send, recv, count, type, op, comm);
  MPI_Request req = MPI_REQUEST_NULL;
  int err = MPI_Iallreduce(send, recv, count, type, op, comm, &req);
  return err == MPI_SUCCESS ? FsdpCollWaitRequest(COLL_WAIT_ADAPTIVE, &req) : err;
}

static int CollWaitParse(const char *env, CollWait *out);

/* (A bad FSDP_COMM_WAIT is reported where the back-end is created.) */
int FsdpCollWaitIsAdaptive(void)
{
  CollWait w;
  return CollWaitParse(getenv("FSDP_COMM_WAIT"), &w) && w == COLL_WAIT_ADAPTIVE;
}

/* FSDP_COMM_WAIT: see [Note: waiting for a collective]. */
static int CollWaitParse(const char *env, CollWait *out)
{
  *out = COLL_WAIT_DEFAULT;
  if (!env || !env[0]) return 1;
  for (int i = 0; coll_wait_names[i]; i++)
    if (strcmp(env, coll_wait_names[i]) == 0) {
      *out = (CollWait)i;
      return 1;
    }
  return 0;
}

int FsdpCollWaitFromEnv(CollWait *out)
{
  const char *env = getenv("FSDP_COMM_WAIT");
  if (CollWaitParse(env, out)) return FSDP_SUCCESS;
  FSDP_ERROR(FSDP_ERR_USAGE,
             "environment variable FSDP_COMM_WAIT: '%s' is not adaptive, block, yield or sleep "
             "(how the communication thread waits for a collective; default %s)",
             env, coll_wait_names[COLL_WAIT_DEFAULT]);
}
