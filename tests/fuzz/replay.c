/* replay.c: run a fuzz harness (linked with it) on fixed inputs -- the
 * checked-in corpus and the regression inputs of bugs the fuzzer found --
 * without libFuzzer, so ctest checks them in every normal build.
 *   usage: replay_NAME FILE|DIR...   (a directory: every file in it) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mem.h"
#include "fuzz.h"

static int replay_file(const char *path)
{
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return 1;
  }
  size_t cap = 0, n = 0, got = 1;
  uint8_t *buf = NULL;
  int oom = 0;
  while (got > 0 && !(oom = FsdpArrayReserve(&buf, &cap, n + 4096, 1))) {
    got = fread(buf + n, 1, cap - n, f);
    n += got;
  }
  fclose(f);
  if (oom) {
    free(buf);
    fprintf(stderr, "%s: out of memory\n", path);
    return 1;
  }
  LLVMFuzzerTestOneInput(buf, n); /* a failure aborts */
  free(buf);
  printf("ok: %s (%zu bytes)\n", path, n);
  return 0;
}

static int cmp_names(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
  LLVMFuzzerInitialize(&argc, &argv);
  int bad = 0, count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      bad++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += replay_file(argv[i]);
      count++;
      continue;
    }
    struct dirent **list;
    int n = scandir(argv[i], &list, NULL, NULL);
    if (n < 0) {
      perror(argv[i]);
      bad++;
      continue;
    }
    char **names = malloc((size_t)n * sizeof *names);
    int m = 0;
    for (int k = 0; k < n; k++) {
      if (names && list[k]->d_name[0] != '.') {
        size_t len = strlen(argv[i]) + strlen(list[k]->d_name) + 2;
        names[m] = malloc(len);
        if (names[m]) snprintf(names[m], len, "%s/%s", argv[i], list[k]->d_name), m++;
      }
      free(list[k]);
    }
    free(list);
    if (names) qsort(names, (size_t)m, sizeof *names, cmp_names);
    for (int k = 0; k < m; k++) {
      bad += replay_file(names[k]);
      count++;
      free(names[k]);
    }
    free(names);
  }
  printf("replay: %d inputs, %d unreadable\n", count, bad);
  FsdpFinalize();
  return bad || count == 0 ? 1 : 0;
}
