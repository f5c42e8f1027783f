/* test_gpu_select: which GPU each rank uses (lib/device/gpu_select.h),
 * without a GPU: the devices are made-up UUIDs.
 *
 * FsdpGpuAssign (pure): 8 ranks seeing the same 8 GPUs get 0..7; ranks
 * that each see exactly one GPU (Slurm --gpus-per-task=1, per-rank
 * CUDA_VISIBLE_DEVICES) use it; two ranks seeing only the same GPU, or 4
 * ranks seeing 2, leave ranks without a device (NCCL would refuse
 * "Duplicate GPU"); a rank seeing {A, B} gives A up to a later rank that
 * sees only A; reordered lists still give distinct devices.
 * FsdpGpuSelect (MPI, every world size): the node is the real one
 * (MPI_COMM_TYPE_SHARED: all ranks of this test share one machine), so
 * ranks that see all the node's GPUs get distinct ones whatever their
 * emulated node would be; a shortage is FSDP_ERR_USAGE on every rank with
 * one message naming the ranks and the distinct GPUs, and the next call
 * works.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/init.h"
#include "device/gpu_select.h"
#include "testutil.h"

static void set_uuid(FsdpGpuList *l, int i, int id)
{
  memset(l->uuid[i], 0, FSDP_GPU_UUID_BYTES);
  l->uuid[i][0] = 0xab;
  l->uuid[i][5] = (unsigned char)id;
  l->uuid[i][15] = (unsigned char)(id * 7 + 1);
}

/* ids: n device ids in this rank's order */
static void make_list(FsdpGpuList *l, int n, const int *ids)
{
  memset(l, 0, sizeof *l);
  l->n = n;
  for (int i = 0; i < n; i++) set_uuid(l, i, ids[i]);
}

static int id_of(const FsdpGpuList *l, int i) { return l->uuid[i][5]; }

/* The picks name distinct devices and each is one its rank sees. */
static int distinct(int n, const FsdpGpuList *lists, const int *pick)
{
  for (int r = 0; r < n; r++) {
    if (pick[r] < 0 || pick[r] >= lists[r].n) return 0;
    for (int q = 0; q < r; q++)
      if (id_of(&lists[q], pick[q]) == id_of(&lists[r], pick[r])) return 0;
  }
  return 1;
}

static void test_assign(void)
{
  FsdpGpuList L[8];
  int pick[8], nd = -1;
  int all8[8] = {0, 1, 2, 3, 4, 5, 6, 7};

  for (int r = 0; r < 8; r++) make_list(&L[r], 8, all8);
  int un = FsdpGpuAssign(8, L, pick, &nd);
  CHECK(un == 0 && nd == 8, "8 ranks, 8 GPUs each: unplaced %d, distinct %d", un, nd);
  for (int r = 0; r < 8; r++) CHECK(pick[r] == r, "8 ranks see 8: rank %d got %d", r, pick[r]);

  for (int r = 0; r < 8; r++) make_list(&L[r], 1, &all8[r]);
  un = FsdpGpuAssign(8, L, pick, &nd);
  CHECK(un == 0 && nd == 8, "one GPU per rank: unplaced %d, distinct %d", un, nd);
  for (int r = 0; r < 8; r++)
    CHECK(pick[r] == 0, "one visible GPU per rank: rank %d got %d, expected its only one", r,
          pick[r]);

  /* emulated nodes on a 1-GPU machine: both ranks see only GPU 0 */
  make_list(&L[0], 1, all8), make_list(&L[1], 1, all8);
  un = FsdpGpuAssign(2, L, pick, &nd);
  CHECK(un == 1 && nd == 1 && pick[0] == 0 && pick[1] == -1,
        "two ranks, one shared GPU: unplaced %d distinct %d picks %d %d", un, nd, pick[0],
        pick[1]);

  for (int r = 0; r < 4; r++) make_list(&L[r], 2, all8);
  un = FsdpGpuAssign(4, L, pick, &nd);
  CHECK(un == 2 && nd == 2, "4 ranks, 2 GPUs: unplaced %d distinct %d", un, nd);

  /* rank 0 sees {A, B}, rank 1 only A: rank 0 must give A up */
  int ab[2] = {10, 11}, a[1] = {10};
  make_list(&L[0], 2, ab), make_list(&L[1], 1, a);
  un = FsdpGpuAssign(2, L, pick, &nd);
  CHECK(un == 0 && pick[0] == 1 && pick[1] == 0, "{A,B},{A}: unplaced %d picks %d %d", un,
        pick[0], pick[1]);

  /* the same devices listed in other orders (CUDA_VISIBLE_DEVICES=1,0) */
  int ba[2] = {11, 10};
  make_list(&L[0], 2, ab), make_list(&L[1], 2, ba), make_list(&L[2], 2, ba);
  un = FsdpGpuAssign(2, L, pick, &nd);
  CHECK(un == 0 && distinct(2, L, pick), "reordered lists: unplaced %d picks %d %d", un, pick[0],
        pick[1]);
  un = FsdpGpuAssign(3, L, pick, &nd);
  CHECK(un == 1 && nd == 2, "3 ranks over 2 GPUs in any order: unplaced %d distinct %d", un, nd);

  /* pairs of ranks, each pair with its own two GPUs */
  int p0[2] = {0, 1}, p1[2] = {2, 3};
  make_list(&L[0], 2, p0), make_list(&L[1], 2, p0), make_list(&L[2], 2, p1),
      make_list(&L[3], 2, p1);
  un = FsdpGpuAssign(4, L, pick, &nd);
  CHECK(un == 0 && nd == 4 && distinct(4, L, pick), "GPU pairs: unplaced %d distinct %d", un, nd);

  make_list(&L[0], 0, NULL);
  un = FsdpGpuAssign(1, L, pick, &nd);
  CHECK(un == 1 && nd == 0 && pick[0] == -1, "no GPU: unplaced %d distinct %d", un, nd);
}

static void test_select(int W, int me)
{
  int all[64];
  for (int i = 0; i < 64; i++) all[i] = i;
  FsdpGpuList mine;

  /* every rank sees every GPU of the machine: distinct picks, rank i of
   * the real node gets GPU i (not its rank in an emulated node) */
  make_list(&mine, W, all);
  int pick = -1, nr = -1, ns = -1;
  int err = FsdpGpuSelect(MPI_COMM_WORLD, &mine, "", &pick, &nr, &ns);
  CHECK(err == FSDP_SUCCESS && ns == W && nr == me && pick == me,
        "all see %d GPUs: code %d pick %d node rank %d of %d", W, err, pick, nr, ns);
  int *picks = malloc((size_t)W * sizeof *picks);
  MPI_Allgather(&pick, 1, MPI_INT, picks, 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < W; r++)
    for (int q = 0; q < r; q++)
      CHECK(picks[q] != picks[r], "ranks %d and %d both picked GPU %d", q, r, picks[r]);
  free(picks);

  /* one GPU per rank, each its own */
  make_list(&mine, 1, &all[10 + me]);
  err = FsdpGpuSelect(MPI_COMM_WORLD, &mine, "", &pick, NULL, NULL);
  CHECK(err == FSDP_SUCCESS && pick == 0, "its own GPU: code %d pick %d", err, pick);

  /* shortage: W ranks over W-1 GPUs (or none at W = 1) */
  make_list(&mine, W - 1, all);
  err = FsdpGpuSelect(MPI_COMM_WORLD, &mine, "no CUDA-capable device is detected", &pick, NULL,
                      NULL);
  const char *msg = FsdpErrorLastMessage();
  if (W == 1) {
    CHECK(err == FSDP_ERR_USAGE && pick == -1 && strstr(msg, "no usable GPU") &&
              strstr(msg, "no CUDA-capable device is detected"),
          "no GPU: code %d pick %d message '%s'", err, pick, msg);
  } else {
    char want[96];
    snprintf(want, sizeof want, "%d ranks on node", W);
    char want2[96];
    snprintf(want2, sizeof want2, "only %d distinct GPUs", W - 1);
    CHECK(err == FSDP_ERR_USAGE && pick == -1 && strstr(msg, want) && strstr(msg, want2) &&
              strstr(msg, "-device cpu"),
          "%d ranks over %d GPUs: code %d pick %d message '%s'", W, W - 1, err, pick, msg);
  }

  /* [Note: ranks sharing a GPU]: with sharing allowed, W ranks over one
   * GPU all take it and every rank learns that some share; with W GPUs
   * nobody shares; with no GPU it is still the usage error */
  int shared = -1;
  make_list(&mine, 1, &all[7]);
  err = FsdpGpuSelectShared(MPI_COMM_WORLD, &mine, "", 1, &pick, NULL, NULL, &shared);
  CHECK(err == FSDP_SUCCESS && pick == 0 && shared == (W > 1),
        "%d ranks sharing one GPU: code %d pick %d shared %d", W, err, pick, shared);
  make_list(&mine, W, all);
  err = FsdpGpuSelectShared(MPI_COMM_WORLD, &mine, "", 1, &pick, NULL, NULL, &shared);
  CHECK(err == FSDP_SUCCESS && pick == me && shared == 0,
        "sharing allowed, %d GPUs for %d ranks: code %d pick %d shared %d", W, W, err, pick,
        shared);
  if (W >= 2) { /* 2 GPUs: ranks spread over both, rank r on GPU r mod 2 */
    make_list(&mine, 2, all);
    err = FsdpGpuSelectShared(MPI_COMM_WORLD, &mine, "", 1, &pick, NULL, NULL, &shared);
    CHECK(err == FSDP_SUCCESS && pick == me % 2 && shared == (W > 2),
          "%d ranks over 2 GPUs: code %d pick %d shared %d", W, err, pick, shared);
  }
  make_list(&mine, 0, all);
  err = FsdpGpuSelectShared(MPI_COMM_WORLD, &mine, "", 1, &pick, NULL, NULL, &shared);
  CHECK(err == FSDP_ERR_USAGE && pick == -1, "sharing allowed, no GPU: code %d pick %d", err,
        pick);

  /* the next call still works (nobody left in a collective) */
  make_list(&mine, W, all);
  err = FsdpGpuSelect(MPI_COMM_WORLD, &mine, "", &pick, NULL, NULL);
  CHECK(err == FSDP_SUCCESS && pick == me, "after a failure: code %d pick %d", err, pick);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  int W = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  test_assign();
  test_select(W, me);
  int rc = test_finish("test_gpu_select");
  FsdpFinalize();
  return rc;
}
