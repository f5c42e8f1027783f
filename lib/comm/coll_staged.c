/* coll_staged.c: collectives over MPI on device buffers, staged through
 * host memory (always built; [Note: collective backends] in
 * coll_backend.h).
 *
 * [Note: MPI staging of device buffers] NCCL refuses two ranks on one
 * GPU, so ranks that share a GPU (gpu_select.c, [Note: ranks sharing a
 * GPU]; -device_coll mpi) move device buffers over MPI instead: each
 * collective copies its input from the device into a host staging buffer
 * (FsdpDeviceCopyToHost: in compute-stream order, so after every kernel
 * that wrote it was launched, and waiting for them), runs the MPI
 * back-end's collective on the host copies (coll_mpi.c: the same
 * chunking, bf16/fp16 sums and scale split), and copies the result back
 * (FsdpDeviceCopyFromHost, on the compute stream, before anything the
 * compute thread launches after it waited for the collective's event).
 * Every step goes through the device back-end's interface, so with
 * -device cpu (FSDP_COLL_STAGED=1, tests only) the same code runs with
 * memcpy for the copies and gives bit-identical results to plain MPI
 * (tests/test_coll.c, tests/test_device_coll.sh).
 *
 * Staging buffers are host memory from FsdpDeviceHostAlloc (pinned with
 * CUDA), one pair per calling thread: all-gathers and reduce-scatters run
 * on two stream threads at once, and a lock held across an MPI call would
 * deadlock two ranks that reached the two collectives in opposite orders.
 * A pair grows to the largest collective its thread has run (step 1 runs
 * every size, so nothing is allocated afterwards) and is freed by destroy.
 *
 * A CUDA-aware MPI is not used directly on device buffers: the reductions
 * scale their inputs and sum bf16/fp16 in user-defined MPI ops on the host
 * (coll_mpi.c), which cannot read device memory.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "comm/coll_backend.h"
#include "device/device.h"

#define STAGED_MAX_THREADS 8

typedef struct {
  pthread_t owner;
  int used;
  void *send, *recv; /* host staging buffers */
  size_t send_cap, recv_cap;
} StagedSlot;

typedef struct {
  const CollBackendOps *mpi;
  void *mpi_state;
  pthread_mutex_t mu; /* guards slot ownership only, never held across MPI */
  StagedSlot slot[STAGED_MAX_THREADS];
} CollStaged;

/* This thread's pair of staging buffers, claimed on first use. */
static int StagedSlotOf(CollStaged *s, StagedSlot **out)
{
  *out = NULL;
  pthread_t me = pthread_self();
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < STAGED_MAX_THREADS; i++)
    if (s->slot[i].used && pthread_equal(s->slot[i].owner, me)) *out = &s->slot[i];
  for (int i = 0; i < STAGED_MAX_THREADS && !*out; i++)
    if (!s->slot[i].used) {
      s->slot[i].used = 1;
      s->slot[i].owner = me;
      *out = &s->slot[i];
    }
  pthread_mutex_unlock(&s->mu);
  if (!*out)
    FSDP_ERROR(FSDP_ERR_INTERNAL, "MPI staging: more than %d threads issue collectives",
               STAGED_MAX_THREADS);
  return FSDP_SUCCESS;
}

/* Grows *buf (capacity *cap) to bytes; the old contents are not kept. */
static int StagedReserve(void **buf, size_t *cap, size_t bytes)
{
  if (bytes <= *cap) return FSDP_SUCCESS;
  FSDP_CALL(FsdpDeviceHostFree(buf));
  *cap = 0;
  FSDP_CALL(FsdpDeviceHostAlloc(bytes, buf));
  *cap = bytes;
  return FSDP_SUCCESS;
}

static int StagedAllGather(void *state, const FsdpGroup *g, const void *send, void *recv,
                           size_t count, FsdpDtype dt)
{
  CollStaged *s = state;
  StagedSlot *sl = NULL;
  FSDP_CALL(StagedSlotOf(s, &sl));
  size_t k = FsdpDtypeSize(dt), shard = count * k, total = (size_t)g->size * shard;
  if (!total) return FSDP_SUCCESS;
  FSDP_CALL(StagedReserve(&sl->recv, &sl->recv_cap, total));
  /* this rank's shard lands where the MPI all-gather reads it in place */
  char *mine = (char *)sl->recv + (size_t)g->rank * shard;
  FSDP_CALL(FsdpDeviceCopyToHost(mine, send, shard));
  FSDP_CALL(s->mpi->all_gather(s->mpi_state, g, mine, sl->recv, count, dt));
  FSDP_CALL(FsdpDeviceCopyFromHost(recv, sl->recv, total));
  return FSDP_SUCCESS;
}

static int StagedReduceScatter(void *state, const FsdpGroup *g, void *send, void *recv,
                               size_t count, FsdpDtype dt, float scale)
{
  CollStaged *s = state;
  StagedSlot *sl = NULL;
  FSDP_CALL(StagedSlotOf(s, &sl));
  size_t k = FsdpDtypeSize(dt), shard = count * k, total = (size_t)g->size * shard;
  if (!total) return FSDP_SUCCESS;
  FSDP_CALL(StagedReserve(&sl->send, &sl->send_cap, total));
  FSDP_CALL(StagedReserve(&sl->recv, &sl->recv_cap, shard));
  FSDP_CALL(FsdpDeviceCopyToHost(sl->send, send, total));
  FSDP_CALL(s->mpi->reduce_scatter(s->mpi_state, g, sl->send, sl->recv, count, dt, scale));
  FSDP_CALL(FsdpDeviceCopyFromHost(recv, sl->recv, shard));
  return FSDP_SUCCESS;
}

static int StagedAllReduce(void *state, const FsdpGroup *g, void *buf, size_t count,
                           FsdpDtype dt, float scale)
{
  CollStaged *s = state;
  StagedSlot *sl = NULL;
  FSDP_CALL(StagedSlotOf(s, &sl));
  size_t bytes = count * FsdpDtypeSize(dt);
  if (!bytes) return FSDP_SUCCESS;
  FSDP_CALL(StagedReserve(&sl->recv, &sl->recv_cap, bytes));
  FSDP_CALL(FsdpDeviceCopyToHost(sl->recv, buf, bytes));
  FSDP_CALL(s->mpi->all_reduce(s->mpi_state, g, sl->recv, count, dt, scale));
  FSDP_CALL(FsdpDeviceCopyFromHost(buf, sl->recv, bytes));
  return FSDP_SUCCESS;
}

static int StagedDestroy(void *state)
{
  CollStaged *s = state;
  if (!s) return FSDP_SUCCESS;
  int err = FSDP_SUCCESS, e;
  for (int i = 0; i < STAGED_MAX_THREADS; i++) {
    if ((e = FsdpDeviceHostFree(&s->slot[i].send)) && !err) err = e;
    if ((e = FsdpDeviceHostFree(&s->slot[i].recv)) && !err) err = e;
  }
  if (s->mpi_state && (e = s->mpi->destroy(s->mpi_state)) && !err) err = e;
  pthread_mutex_destroy(&s->mu);
  free(s);
  if (err) return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  return FSDP_SUCCESS;
}

static int StagedCreate(void **state)
{
  *state = NULL;
  CollStaged *s = calloc(1, sizeof *s);
  FSDP_CHECK_ALLOC(s, sizeof *s);
  s->mpi = FsdpCollMpiOps();
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    free(s);
    FSDP_ERROR(FSDP_ERR_INTERNAL, "MPI staging: pthread_mutex_init failed");
  }
  int err = s->mpi->create(&s->mpi_state);
  if (err) {
    StagedDestroy(s);
    return FsdpErrorTrace(__FILE__, __LINE__, __func__, err);
  }
  *state = s;
  return FSDP_SUCCESS;
}

static const CollBackendOps coll_ops_staged = {
    .name = "MPI (staged through host memory)",
    .create = StagedCreate,
    .destroy = StagedDestroy,
    .all_gather = StagedAllGather,
    .reduce_scatter = StagedReduceScatter,
    .all_reduce = StagedAllReduce,
};

const CollBackendOps *FsdpCollStagedOps(void) { return &coll_ops_staged; }
