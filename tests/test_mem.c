/* test_mem: the tagged allocations and the growing arrays (base/mem.h).
 *
 *   - FsdpMalloc/FsdpFree: zeroed, 64-byte aligned blocks; the per-tag
 *     current bytes and the total's current and peak follow them; FsdpFree
 *     takes NULL and sets the pointer to NULL;
 *   - FsdpArrayReserve: the capacity doubles from 16 until it holds what is
 *     needed (1 -> 16, 17 -> 32, 100 -> 128), a need within the capacity
 *     changes nothing (same block), the elements already there survive a
 *     growth, and a need no size_t can hold is FSDP_ERR_MEM with the array
 *     and the capacity unchanged.
 */
#include <stdint.h>
#include <string.h>

#include "libfsdp.h"
#include "testutil.h"

static void TestTagged(void)
{
  size_t params0 = FsdpMemCurrent(FSDP_MEM_PARAMS), total0 = FsdpMemCurrentTotal();
  unsigned char *p = NULL;
  TCALL(FsdpMalloc(FSDP_MEM_PARAMS, 1000, &p));
  CHECK(p != NULL && (uintptr_t)p % 64 == 0, "block %p not 64-byte aligned", (void *)p);
  int zero = 1;
  for (int i = 0; i < 1000; i++) zero &= p[i] == 0;
  CHECK(zero, "block not zeroed");
  CHECK(FsdpMemCurrent(FSDP_MEM_PARAMS) == params0 + 1000, "params current %zu, expected %zu",
        FsdpMemCurrent(FSDP_MEM_PARAMS), params0 + 1000);
  CHECK(FsdpMemCurrentTotal() == total0 + 1000, "total %zu, expected %zu", FsdpMemCurrentTotal(),
        total0 + 1000);
  CHECK(FsdpMemPeakTotal() >= total0 + 1000, "peak total %zu below %zu", FsdpMemPeakTotal(),
        total0 + 1000);
  TCALL(FsdpFree(&p));
  CHECK(p == NULL, "FsdpFree left the pointer set");
  CHECK(FsdpMemCurrent(FSDP_MEM_PARAMS) == params0, "params current %zu after free, expected %zu",
        FsdpMemCurrent(FSDP_MEM_PARAMS), params0);
  CHECK(FsdpMemPeakTotal() >= total0 + 1000, "peak total fell to %zu after a free",
        FsdpMemPeakTotal());
  TCALL(FsdpFree(&p)); /* NULL: nothing */
}

static void TestArrayReserve(void)
{
  int *a = NULL;
  size_t cap = 0;
  TCALL(FsdpArrayReserve(&a, &cap, 1, sizeof *a));
  CHECK(a != NULL && cap == 16, "reserve 1 from empty: cap %zu, expected 16", cap);
  for (int i = 0; i < 16; i++) a[i] = 3 * i + 1;
  int *before = a;
  TCALL(FsdpArrayReserve(&a, &cap, 16, sizeof *a));
  CHECK(a == before && cap == 16, "a need within the capacity changed it: cap %zu", cap);
  TCALL(FsdpArrayReserve(&a, &cap, 17, sizeof *a));
  CHECK(cap == 32, "reserve 17 from 16: cap %zu, expected 32", cap);
  int kept = 1;
  for (int i = 0; i < 16; i++) kept &= a[i] == 3 * i + 1;
  CHECK(kept, "the elements did not survive the growth");
  TCALL(FsdpArrayReserve(&a, &cap, 100, sizeof *a));
  CHECK(cap == 128, "reserve 100 from 32: cap %zu, expected 128", cap);
  before = a;
  int err = FsdpArrayReserve(&a, &cap, SIZE_MAX / 2, sizeof *a);
  CHECK(err == FSDP_ERR_MEM && a == before && cap == 128,
        "a need of SIZE_MAX/2 ints: error %d (expected %d), cap %zu (expected 128 unchanged)", err,
        FSDP_ERR_MEM, cap);
  err = FsdpArrayReserve(&a, &cap, SIZE_MAX, 1);
  CHECK(err == FSDP_ERR_MEM && a == before && cap == 128,
        "a need of SIZE_MAX bytes: error %d (expected %d), cap %zu (expected 128 unchanged)", err,
        FSDP_ERR_MEM, cap);
  free(a);

  char *s = NULL;
  size_t scap = 0;
  TCALL(FsdpArrayReserve(&s, &scap, 1000, 1));
  CHECK(scap == 1024, "reserve 1000 bytes from empty: cap %zu, expected 1024", scap);
  free(s);
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  TestTagged();
  TestArrayReserve();
  int status = test_finish("test_mem");
  FsdpFinalize();
  return status;
}
