/* test_opts: the options database (lib/base/opts.h).
 *
 * Databases are built from constructed argv arrays, FSDP_OPTIONS and
 * options files that rank 0 writes under /tmp (names carry rank 0's pid,
 * broadcast to the others).  Checks values, precedence, every usage error
 * and its message, -help and -options_left output, and that all ranks hold
 * the same database.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/init.h"
#include "base/opts.h"
#include "testutil.h"

static int g_rank, g_size;
static char g_dir_prefix[256]; /* /tmp/fsdp_test_opts_<pid> */

/* Build a database from a NULL-terminated token list (argv[0] added). */
static int create(const char *const *toks, FsdpOpts *db)
{
  char *argv[64];
  int argc = 0;
  argv[argc++] = "test_opts";
  for (int i = 0; toks && toks[i]; i++) argv[argc++] = (char *)toks[i];
  argv[argc] = NULL;
  return FsdpOptsCreate(MPI_COMM_WORLD, argc, argv, db);
}

/* Rank 0 writes a file; everyone learns its path. */
static void write_file(const char *tag, const char *text, char *path,
                       size_t n)
{
  snprintf(path, n, "%s_%s.opts", g_dir_prefix, tag);
  if (g_rank == 0) {
    FILE *f = fopen(path, "w");
    if (!f) {
      perror(path);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fputs(text, f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* err must be a usage error whose message holds every needle. */
static void expect_usage(int line, int err, const char *const *needles)
{
  const char *msg = FsdpErrorLastMessage();
  CHECK(err == FSDP_ERR_USAGE, "line %d: expected a usage error, got %d (%s)",
        line, err, msg);
  for (int i = 0; needles[i]; i++)
    CHECK(strstr(msg, needles[i]) != NULL,
          "line %d: message \"%s\" lacks \"%s\"", line, msg, needles[i]);
}
#define EXPECT_USAGE(err, ...) \
  expect_usage(__LINE__, (err), (const char *const[]){__VA_ARGS__, NULL})

/* What FsdpOptsReportLeft prints (rank 0; "" elsewhere); free it. */
static char *left_report(FsdpOpts db, int *nleft)
{
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  TCALL(FsdpOptsReportLeft(db, out, nleft));
  fclose(out);
  return text;
}

/* -------------------------------------------------------------------------- */

static void test_values(void)
{
  const char *a[] = {"-steps", "5", "-flag", "-off", "0", "-yes", "YES",
                     "-lr", "3e-4", "-neg", "-3.5", "-mem", "64M", "-small",
                     "2k", "-big", "1.5G", "-mib", "64MiB", "-kb", "4kB",
                     "-plain", "512", "-prefetch", "both", "-device", "CUDA",
                     "-title", "hello", "--dashes", "7", "-eq=11", "-million",
                     "1e6", "-minus", "-7", NULL};
  FsdpOpts db;
  TCALL(create(a, &db));
  int64_t i64;
  size_t sz;
  double d;
  int b, idx;
  const char *s;
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64));
  CHECK(i64 == 5, "steps %lld", (long long)i64);
  TCALL(FsdpOptsGetInt(db, "T", "absent", "h", 42, 0, 100, &i64));
  CHECK(i64 == 42, "absent int gives default, got %lld", (long long)i64);
  TCALL(FsdpOptsGetInt(db, "T", "dashes", "h", 0, 0, 100, &i64));
  CHECK(i64 == 7, "--dashes %lld", (long long)i64);
  TCALL(FsdpOptsGetInt(db, "T", "eq", "h", 0, 0, 100, &i64));
  CHECK(i64 == 11, "-eq=11 gives %lld", (long long)i64);
  TCALL(FsdpOptsGetInt(db, "T", "million", "h", 0, 0, INT64_MAX, &i64));
  CHECK(i64 == 1000000, "1e6 gives %lld", (long long)i64);
  TCALL(FsdpOptsGetInt(db, "T", "minus", "h", 0, INT64_MIN, INT64_MAX, &i64));
  CHECK(i64 == -7, "-minus -7 gives %lld", (long long)i64);

  TCALL(FsdpOptsGetBool(db, "T", "flag", "h", 0, &b));
  CHECK(b == 1, "bare -flag gives %d", b);
  TCALL(FsdpOptsGetBool(db, "T", "off", "h", 1, &b));
  CHECK(b == 0, "-off 0 gives %d", b);
  TCALL(FsdpOptsGetBool(db, "T", "yes", "h", 0, &b));
  CHECK(b == 1, "-yes YES gives %d", b);
  TCALL(FsdpOptsGetBool(db, "T", "nobool", "h", 1, &b));
  CHECK(b == 1, "absent bool default 1 gives %d", b);

  TCALL(FsdpOptsGetDouble(db, "T", "lr", "h", 1.0, 0.0, 1.0, &d));
  CHECK(d == 3e-4, "lr %.17g", d);
  TCALL(FsdpOptsGetDouble(db, "T", "neg", "h", 0, -INFINITY, INFINITY, &d));
  CHECK(d == -3.5, "neg %.17g", d);
  TCALL(FsdpOptsGetDouble(db, "T", "dabsent", "h", 0.25, 0, 1, &d));
  CHECK(d == 0.25, "absent double %.17g", d);

  struct { const char *name; size_t want; } sizes[] = {
      {"mem", 67108864}, {"small", 2048}, {"big", 1610612736},
      {"mib", 67108864}, {"kb", 4096}, {"plain", 512}};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    TCALL(FsdpOptsGetSize(db, "T", sizes[k].name, "h", 1, &sz));
    CHECK(sz == sizes[k].want, "-%s gives %zu, want %zu", sizes[k].name, sz,
          sizes[k].want);
  }
  TCALL(FsdpOptsGetSize(db, "T", "sabsent", "h", 123, &sz));
  CHECK(sz == 123, "absent size %zu", sz);

  const char *pf[] = {"none", "backward", "both", NULL};
  TCALL(FsdpOptsGetEnum(db, "T", "prefetch", "h", pf, 1, &idx));
  CHECK(idx == 2, "prefetch both gives index %d", idx);
  const char *dev[] = {"cpu", "cuda", NULL};
  TCALL(FsdpOptsGetEnum(db, "T", "device", "h", dev, 0, &idx));
  CHECK(idx == 1, "device CUDA (case-insensitive) gives index %d", idx);
  TCALL(FsdpOptsGetEnum(db, "T", "eabsent", "h", pf, 1, &idx));
  CHECK(idx == 1, "absent enum gives default index %d", idx);

  TCALL(FsdpOptsGetString(db, "T", "title", "h", NULL, &s));
  CHECK(s && !strcmp(s, "hello"), "title '%s'", s ? s : "(null)");
  TCALL(FsdpOptsGetString(db, "T", "sabs", "h", NULL, &s));
  CHECK(s == NULL, "absent string with NULL default gives %p", (void *)s);

  CHECK(FsdpOptsHas(db, "steps") == 1, "Has(steps)");
  CHECK(FsdpOptsHas(db, "-steps") == 1, "Has(-steps)");
  CHECK(FsdpOptsHas(db, "absent") == 0, "Has(absent)");
  CHECK(FsdpOptsHelpRequested(db) == 0, "no -help given");

  /* Same option read by two components: same value, and cheap. */
  for (int k = 0; k < 10000; k++) {
    TCALL(FsdpOptsGetInt(db, k % 2 ? "Other" : "T", "steps", "again", 9, 1,
                         1000000, &i64));
    if (i64 != 5) break;
  }
  CHECK(i64 == 5, "second reader of -steps gets %lld", (long long)i64);

  /* SetValue overrides; a string handed out earlier stays valid. */
  TCALL(FsdpOptsSetValue(db, "title", "world"));
  CHECK(!strcmp(s ? s : "hello", "hello"), "old string pointer still valid");
  TCALL(FsdpOptsGetString(db, "T", "title", "h", NULL, &s));
  CHECK(s && !strcmp(s, "world"), "title after SetValue '%s'", s ? s : "");
  TCALL(FsdpOptsSetValue(db, "-newflag", NULL));
  TCALL(FsdpOptsGetBool(db, "T", "newflag", "h", 0, &b));
  CHECK(b == 1, "SetValue flag gives %d", b);

  TCALL(FsdpOptsCheckUnknown(db));
  TCALL(FsdpOptsDestroy(&db));
  CHECK(db == NULL, "destroy sets NULL");
  TCALL(FsdpOptsDestroy(&db)); /* accepts NULL */
}

/* FSDP_OPTIONS < argv before -options_file < file < argv after. */
static void test_precedence(void)
{
  char f[512], a[512], bpath[512], nest[512];
  write_file("prec", "-p3 3\n-p4 3\n-p5 5\n", f, sizeof f);
  write_file("a",
             "# options file A\n"
             "\n"
             "   # indented comment\n"
             "-lr 3e-4   # trailing comment\n"
             "-steps 20\n"
             "-title \"hello world\"\n"
             "-dash '-x'\n"
             "-hash a#b\n"
             "-flag\n"
             "\t-mem 64M\n"
             "-prefetch both\n",
             a, sizeof a);
  write_file("b", "-steps 30\n-seed 7\n", bpath, sizeof bpath);
  char nest_text[600];
  snprintf(nest_text, sizeof nest_text, "-seed 8\n-options_file %s\n-depth 2\n",
           bpath);
  write_file("nest", nest_text, nest, sizeof nest);

  setenv("FSDP_OPTIONS", "-p1 1 -p2 1 -p3 1 -p4 1", 1);
  const char *args[] = {"-p2", "2", "-p3", "2", "-options_file", f,
                        "-p4", "4", NULL};
  FsdpOpts db;
  TCALL(create(args, &db));
  unsetenv("FSDP_OPTIONS");
  int64_t v[6];
  for (int k = 1; k <= 5; k++) {
    char name[8];
    snprintf(name, sizeof name, "p%d", k);
    TCALL(FsdpOptsGetInt(db, "P", name, "h", -1, INT64_MIN, INT64_MAX, &v[k]));
  }
  CHECK(v[1] == 1, "p1 (env only) = %lld", (long long)v[1]);
  CHECK(v[2] == 2, "p2 (argv over env) = %lld", (long long)v[2]);
  CHECK(v[3] == 3, "p3 (file over argv before it) = %lld", (long long)v[3]);
  CHECK(v[4] == 4, "p4 (argv after file over file) = %lld", (long long)v[4]);
  CHECK(v[5] == 5, "p5 (file only) = %lld", (long long)v[5]);
  TCALL(FsdpOptsCheckUnknown(db));
  CHECK(!FsdpOptsHas(db, "options_file"), "-options_file is expanded, not kept");
  TCALL(FsdpOptsDestroy(&db));

  /* Two files, comments, blank lines, quotes; later file wins. */
  const char *two[] = {"-options_file", a, "-options_file", bpath, NULL};
  TCALL(create(two, &db));
  int64_t steps, seed;
  double lr;
  size_t mem;
  int flag, pidx;
  const char *title, *dash, *hash;
  const char *pf[] = {"none", "backward", "both", NULL};
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 1000000, &steps));
  TCALL(FsdpOptsGetInt(db, "T", "seed", "h", 1, 0, INT64_MAX, &seed));
  TCALL(FsdpOptsGetDouble(db, "T", "lr", "h", 1, 0, 1, &lr));
  TCALL(FsdpOptsGetSize(db, "T", "mem", "h", 0, &mem));
  TCALL(FsdpOptsGetBool(db, "T", "flag", "h", 0, &flag));
  TCALL(FsdpOptsGetEnum(db, "T", "prefetch", "h", pf, 0, &pidx));
  TCALL(FsdpOptsGetString(db, "T", "title", "h", NULL, &title));
  TCALL(FsdpOptsGetString(db, "T", "dash", "h", NULL, &dash));
  TCALL(FsdpOptsGetString(db, "T", "hash", "h", NULL, &hash));
  CHECK(steps == 30, "steps from the second file = %lld", (long long)steps);
  CHECK(seed == 7, "seed = %lld", (long long)seed);
  CHECK(lr == 3e-4, "lr before a # comment = %.17g", lr);
  CHECK(mem == 67108864, "mem = %zu", mem);
  CHECK(flag == 1, "flag = %d", flag);
  CHECK(pidx == 2, "prefetch = %d", pidx);
  CHECK(title && !strcmp(title, "hello world"), "quoted title '%s'",
        title ? title : "(null)");
  CHECK(dash && !strcmp(dash, "-x"), "quoted '-x' is a value: '%s'",
        dash ? dash : "(null)");
  CHECK(hash && !strcmp(hash, "a#b"), "# inside a token is kept: '%s'",
        hash ? hash : "(null)");
  TCALL(FsdpOptsCheckUnknown(db));

  /* Identical on all ranks: rank 0's rendering against everyone's. */
  char mine[4096], root[4096];
  TCALL(FsdpOptsToString(db, mine, sizeof mine));
  memcpy(root, mine, sizeof root);
  MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
  CHECK(!strcmp(mine, root), "rank differs: '%s' vs rank 0 '%s'", mine, root);
  double lrs[2] = {lr, -lr}, ext[2];
  MPI_Allreduce(lrs, ext, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  CHECK(ext[0] == lr && -ext[1] == lr, "lr differs across ranks");
  long long st[2] = {steps, -steps}, sext[2];
  MPI_Allreduce(st, sext, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  CHECK(sext[0] == steps && -sext[1] == steps, "steps differ across ranks");
  TCALL(FsdpOptsDestroy(&db));

  /* Nested file; argv after it still wins. */
  const char *nested[] = {"-options_file", nest, "-seed", "9", NULL};
  TCALL(create(nested, &db));
  int64_t depth;
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 1000000, &steps));
  TCALL(FsdpOptsGetInt(db, "T", "seed", "h", 1, 0, INT64_MAX, &seed));
  TCALL(FsdpOptsGetInt(db, "T", "depth", "h", 1, 0, 9, &depth));
  CHECK(steps == 30 && seed == 9 && depth == 2,
        "nested: steps %lld seed %lld depth %lld (want 30 9 2)",
        (long long)steps, (long long)seed, (long long)depth);
  TCALL(FsdpOptsDestroy(&db));

  if (g_rank == 0) {
    unlink(f);
    unlink(a);
    unlink(bpath);
    unlink(nest);
  }
}

/* Each rank gets a different environment and argv; rank 0's wins. */
static void test_ranks_agree(void)
{
  char env[64], val[16];
  snprintf(env, sizeof env, "-from_env %d", g_rank);
  snprintf(val, sizeof val, "%d", 10 + g_rank);
  setenv("FSDP_OPTIONS", env, 1);
  const char *args[] = {"-from_argv", val, NULL};
  FsdpOpts db;
  TCALL(create(args, &db));
  unsetenv("FSDP_OPTIONS");
  int64_t e, a;
  TCALL(FsdpOptsGetInt(db, "T", "from_env", "h", -1, 0, 100, &e));
  TCALL(FsdpOptsGetInt(db, "T", "from_argv", "h", -1, 0, 100, &a));
  CHECK(e == 0 && a == 10, "rank %d sees from_env %lld from_argv %lld, want "
        "rank 0's 0 and 10", g_rank, (long long)e, (long long)a);
  TCALL(FsdpOptsDestroy(&db));
}

static void test_errors(void)
{
  FsdpOpts db;
  int64_t i64;
  double d;
  size_t sz;
  int b, idx;
  const char *s;
  const char *pf[] = {"none", "backward", "both", NULL};

  {
    const char *a[] = {"-steps", "ten", NULL};
    TCALL(create(a, &db));
    int err = FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64);
    EXPECT_USAGE(err, "-steps", "'ten'", "not an integer",
                 "an integer in [1, 1000000]");
    CHECK(i64 == 100, "value on error is the default, got %lld",
          (long long)i64);
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    const char *a[] = {"-steps", "-3", NULL};
    TCALL(create(a, &db));
    int err = FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64);
    EXPECT_USAGE(err, "-steps", "-3", "out of range",
                 "an integer in [1, 1000000]");
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    const char *a[] = {"-steps", "2.5", NULL};
    TCALL(create(a, &db));
    int err = FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64);
    EXPECT_USAGE(err, "-steps", "'2.5'", "not an integer");
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    const char *a[] = {"-lr", "0.1", "-steps", NULL};
    TCALL(create(a, &db));
    i64 = -1;
    int err = FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64);
    EXPECT_USAGE(err, "-steps", "missing value", "an integer in [1, 1000000]");
    /* opts.h: the default also on error (a reader goes on after a bad value) */
    CHECK(i64 == 100, "a missing -steps value left %lld, not the default 100", (long long)i64);
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    const char *a[] = {"-lr", "abc", "-wd", "2", "-m", NULL};
    TCALL(create(a, &db));
    int err = FsdpOptsGetDouble(db, "T", "lr", "h", 0.1, 0, 1, &d);
    EXPECT_USAGE(err, "-lr", "'abc'", "a real number in [0, 1]");
    err = FsdpOptsGetDouble(db, "T", "wd", "h", 0.1, 0, 1, &d);
    EXPECT_USAGE(err, "-wd", "out of range", "a real number in [0, 1]");
    d = -1;
    err = FsdpOptsGetDouble(db, "T", "m", "h", 0.1, 0, 1, &d);
    EXPECT_USAGE(err, "-m", "missing value", "a real number");
    CHECK(d == 0.1, "a missing -m value left %g, not the default 0.1", d);
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    const char *a[] = {"-prefetch", "al", "-pre2", NULL};
    TCALL(create(a, &db));
    int err = FsdpOptsGetEnum(db, "T", "prefetch", "h", pf, 1, &idx);
    EXPECT_USAGE(err, "-prefetch", "'al'", "none, backward, both");
    idx = -1;
    err = FsdpOptsGetEnum(db, "T", "pre2", "h", pf, 1, &idx);
    EXPECT_USAGE(err, "-pre2", "missing value", "none, backward, both");
    CHECK(idx == 1, "a missing -pre2 value left index %d, not the default 1", idx);
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    const char *a[] = {"-mem", "64X", "-mem2", "-5M", "-mem3", "1.3", NULL};
    TCALL(create(a, &db));
    int err = FsdpOptsGetSize(db, "T", "mem", "h", 0, &sz);
    EXPECT_USAGE(err, "-mem", "'64X'", "byte size", "64M");
    err = FsdpOptsGetSize(db, "T", "mem2", "h", 0, &sz);
    EXPECT_USAGE(err, "-mem2", "'-5M'", "byte size");
    err = FsdpOptsGetSize(db, "T", "mem3", "h", 0, &sz);
    EXPECT_USAGE(err, "-mem3", "'1.3'", "byte size");
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    const char *a[] = {"-verbose", "maybe", "-title", NULL};
    TCALL(create(a, &db));
    int err = FsdpOptsGetBool(db, "T", "verbose", "h", 0, &b);
    EXPECT_USAGE(err, "-verbose", "'maybe'", "true/false");
    err = FsdpOptsGetString(db, "T", "title", "h", "x", &s);
    EXPECT_USAGE(err, "-title", "missing value");
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    /* Unknown options, with and without a suggestion. */
    const char *a[] = {"-stpes", "3", NULL};
    TCALL(create(a, &db));
    TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64));
    TCALL(FsdpOptsGetInt(db, "T", "seed", "h", 1, 0, 100, &i64));
    EXPECT_USAGE(FsdpOptsCheckUnknown(db), "unknown option -stpes",
                 "did you mean -steps?");
    TCALL(FsdpOptsDestroy(&db));
    const char *c[] = {"-zzqqxx", "1", NULL};
    TCALL(create(c, &db));
    TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64));
    int err = FsdpOptsCheckUnknown(db);
    EXPECT_USAGE(err, "unknown option -zzqqxx");
    CHECK(!strstr(FsdpErrorLastMessage(), "did you mean"),
          "no suggestion expected: %s", FsdpErrorLastMessage());
    TCALL(FsdpOptsDestroy(&db));
  }
  {
    /* A missing options file fails on every rank, naming the file. */
    char path[512], want[700];
    snprintf(path, sizeof path, "%s_missing.opts", g_dir_prefix);
    snprintf(want, sizeof want,
             "option -options_file: cannot open '%s': No such file or "
             "directory", path);
    const char *a[] = {"-steps", "3", "-options_file", path, NULL};
    db = (FsdpOpts)&db; /* must be reset to NULL */
    int err = create(a, &db);
    EXPECT_USAGE(err, want);
    CHECK(db == NULL, "failed create leaves NULL");
    const char *c[] = {"-options_file", NULL};
    err = create(c, &db);
    EXPECT_USAGE(err, "-options_file", "missing value", "file name");
    /* The same failure from the environment. */
    char env[600];
    snprintf(env, sizeof env, "-options_file %s", path);
    setenv("FSDP_OPTIONS", env, 1);
    err = create(NULL, &db);
    unsetenv("FSDP_OPTIONS");
    EXPECT_USAGE(err, want);
  }
  {
    /* A file including itself is refused, naming the file. */
    char self[512], text[600];
    snprintf(self, sizeof self, "%s_self.opts", g_dir_prefix);
    snprintf(text, sizeof text, "-a 1\n-options_file %s\n", self);
    write_file("self", text, self, sizeof self);
    const char *a[] = {"-options_file", self, NULL};
    int err = create(a, &db);
    EXPECT_USAGE(err, "-options_file", self, "nested more than 8");
    /* A stray word in a file names file and line. */
    char bad[512];
    write_file("bad", "-a 1\n\n-b 2 stray extra\n", bad, sizeof bad);
    const char *c[] = {"-options_file", bad, NULL};
    err = create(c, &db);
    char where[600];
    snprintf(where, sizeof where, "%s:3", bad);
    EXPECT_USAGE(err, "'stray'", where);
    char quote[512];
    write_file("quote", "-a \"open\n", quote, sizeof quote);
    const char *q[] = {"-options_file", quote, NULL};
    err = create(q, &db);
    EXPECT_USAGE(err, "unterminated quote");
    if (g_rank == 0) {
      unlink(self);
      unlink(bad);
      unlink(quote);
    }
  }
  {
    const char *a[] = {"stray", "-steps", "3", NULL};
    int err = create(a, &db);
    EXPECT_USAGE(err, "'stray'", "-name value");
  }
  {
    /* The built-in options are never unknown. */
    char f[512];
    write_file("builtin", "-steps 4\n", f, sizeof f);
    const char *a[] = {"-help", "-options_left", "0", "-options_file", f, NULL};
    TCALL(create(a, &db));
    TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 100, 1, 1000000, &i64));
    CHECK(i64 == 4, "steps %lld", (long long)i64);
    CHECK(FsdpOptsHelpRequested(db) == 1, "-help requested");
    TCALL(FsdpOptsCheckUnknown(db));
    int nleft = -1;
    TCALL(FsdpOptsReportLeft(db, NULL, &nleft));
    CHECK(nleft == 0, "nothing left, got %d", nleft);
    TCALL(FsdpOptsDestroy(&db));
    const char *c[] = {"-options_left", "perhaps", NULL};
    int err = create(c, &db);
    EXPECT_USAGE(err, "-options_left", "'perhaps'");
    if (g_rank == 0) unlink(f);
  }
}

/* Rank 0 writes n raw bytes (NULs included); everyone learns the path. */
static void write_bytes(const char *tag, const char *bytes, size_t n,
                        char *path, size_t size)
{
  snprintf(path, size, "%s_%s.opts", g_dir_prefix, tag);
  if (g_rank == 0) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n) {
      perror(path);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Errors about options from a file name FILE:LINE, found while reading or
 * later by a getter or the unknown-option check. */
static void test_file_lines(void)
{
  char f[512], at2[600], at3[600], at4[600];
  write_file("lines", "# header\n-steps ten\n-lr\n-stpes 4\n", f, sizeof f);
  snprintf(at2, sizeof at2, "%s:2: option -steps: 'ten'", f);
  snprintf(at3, sizeof at3, "%s:3: option -lr: missing value", f);
  snprintf(at4, sizeof at4, "%s:4: unknown option -stpes (did you mean -steps?)", f);
  const char *a[] = {"-options_file", f, NULL};
  FsdpOpts db;
  int64_t i64;
  double d;
  TCALL(create(a, &db));
  EXPECT_USAGE(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &i64), at2,
               "not an integer");
  EXPECT_USAGE(FsdpOptsGetDouble(db, "T", "lr", "h", 0.1, 0, 1, &d), at3,
               "a real number in [0, 1]");
  EXPECT_USAGE(FsdpOptsCheckUnknown(db), at4);
  TCALL(FsdpOptsDestroy(&db));

  /* The command line overrides the file's value and its origin. */
  const char *c[] = {"-options_file", f, "-steps", "x", NULL};
  TCALL(create(c, &db));
  int err = FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &i64);
  EXPECT_USAGE(err, "option -steps: 'x'");
  CHECK(strncmp(FsdpErrorLastMessage(), "option -steps", 13) == 0,
        "a command-line value is not blamed on the file: %s",
        FsdpErrorLastMessage());
  TCALL(FsdpOptsReportLeft(db, NULL, NULL));
  TCALL(FsdpOptsDestroy(&db));

  /* Errors found while reading name the line too, in nested files the
   * inner one. */
  char inner[512], outer[512], text[700], want[700];
  write_file("inner", "-a 1\n-b 'open\n", inner, sizeof inner);
  snprintf(text, sizeof text, "-x 1\n-options_file %s\n", inner);
  write_file("outer", text, outer, sizeof outer);
  const char *n[] = {"-options_file", outer, NULL};
  err = create(n, &db);
  snprintf(want, sizeof want, "%s:2: unterminated quote", inner);
  EXPECT_USAGE(err, want);
  /* A name that FsdpOptsToString could not write back is refused. */
  write_file("inner", "-a 1\n-a\"b c\" 2\n", inner, sizeof inner);
  err = create(n, &db);
  snprintf(want, sizeof want, "%s:2: bad option name '-ab c'", inner);
  EXPECT_USAGE(err, want, "letters, digits");
  write_file("inner", "-a 1\n-options_file\n", inner, sizeof inner);
  err = create(n, &db);
  snprintf(want, sizeof want, "%s:2: option -options_file: missing value", inner);
  EXPECT_USAGE(err, want, "file name");
  if (g_rank == 0) {
    unlink(f);
    unlink(inner);
    unlink(outer);
  }
}

/* A file that is not text is refused naming file and line; nothing after
 * a NUL is silently dropped. */
static void test_file_not_text(void)
{
  FsdpOpts db;
  char f[512], want[700];
  static const char nul[] = "-a 1\n-title abc\0-steps 9\n-b 2\n";
  write_bytes("nul", nul, sizeof nul - 1, f, sizeof f);
  const char *a[] = {"-options_file", f, NULL};
  db = (FsdpOpts)&db;
  int err = create(a, &db);
  snprintf(want, sizeof want, "%s:2: NUL byte at column 11", f);
  EXPECT_USAGE(err, want, "not a text file");
  CHECK(db == NULL, "a file with a NUL byte gives no database");

  struct { const char *tag, *bytes; size_t n; const char *line_col; } bad[] = {
      {"ctl", "-a 1\n\n-b x\001y\n", 13, ":3: byte 0x01 at column 5"},
      {"latin1", "-title caf\xe9\n", 12, ":1: byte 0xe9 at column 11"},
      {"overlong", "-a 1\n-t \xc0\xaf\n", 10, ":2: byte 0xc0 at column 4"},
      {"cut", "-t \xe2\x82", 5, ":1: byte 0xe2 at column 4"},
      {"surrogate", "-t \xed\xa0\x80\n", 7, ":1: byte 0xed at column 4"},
      {"del", "-t a\x7f\n", 6, ":1: byte 0x7f at column 5"}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    write_bytes(bad[k].tag, bad[k].bytes, bad[k].n, f, sizeof f);
    snprintf(want, sizeof want, "%s%s", f, bad[k].line_col);
    err = create(a, &db);
    EXPECT_USAGE(err, want, "is not text", "binary file");
    if (err == FSDP_SUCCESS) TCALL(FsdpOptsDestroy(&db));
  }
  /* Text: UTF-8 of every length, tabs, CRLF line ends, no final newline. */
  static const char good[] =
      "-title \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"\r\n\t-steps\t9";
  write_bytes("good", good, sizeof good - 1, f, sizeof f);
  TCALL(create(a, &db));
  const char *s = NULL;
  int64_t steps = 0;
  TCALL(FsdpOptsGetString(db, "T", "title", "h", NULL, &s));
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &steps));
  CHECK(s && !strcmp(s, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") && steps == 9,
        "UTF-8 file: title '%s' steps %lld", s ? s : "(null)", (long long)steps);
  TCALL(FsdpOptsDestroy(&db));
  /* An overlong line stops the read (and /dev/zero does not fill memory). */
  const char *z[] = {"-options_file", "/dev/zero", NULL};
  err = create(z, &db);
  EXPECT_USAGE(err, "/dev/zero:1: NUL byte at column 1");
  size_t big = 70000;
  char *longline = malloc(big);
  CHECK(longline != NULL, "malloc");
  if (longline) {
    memset(longline, 'x', big);
    longline[0] = '-';
    write_bytes("long", longline, big, f, sizeof f);
    free(longline);
    err = create(a, &db);
    snprintf(want, sizeof want, "%s:1: line longer than 65535 bytes", f);
    EXPECT_USAGE(err, want);
  }
  if (g_rank == 0) {
    const char *tags[] = {"nul", "ctl", "latin1", "overlong", "cut", "surrogate",
                          "del", "good", "long"};
    for (size_t k = 0; k < sizeof tags / sizeof tags[0]; k++) {
      snprintf(f, sizeof f, "%s_%s.opts", g_dir_prefix, tags[k]);
      unlink(f);
    }
  }
}

/* FSDP_OPTIONS is read by every fsdp program: an option this program does
 * not know is left, not an error -- unless it is a near miss of one it
 * knows, or it is given on the command line or in a file named there. */
static void test_shared_env(void)
{
  FsdpOpts db;
  int64_t i64;
  char f[512], env[700];
  write_file("shared", "-from_shared_file 3\n", f, sizeof f);
  snprintf(env, sizeof env, "-sharding_factor 2 -stpes 5 -options_file %s", f);
  setenv("FSDP_OPTIONS", env, 1);
  TCALL(create(NULL, &db));
  TCALL(FsdpOptsGetInt(db, "T", "seed", "h", 1, 0, 100, &i64));
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &i64));
  EXPECT_USAGE(FsdpOptsCheckUnknown(db), "FSDP_OPTIONS: unknown option -stpes",
               "did you mean -steps?");
  TCALL(FsdpOptsDestroy(&db));

  snprintf(env, sizeof env, "-sharding_factor 2 -options_file %s -steps 4", f);
  setenv("FSDP_OPTIONS", env, 1);
  TCALL(create(NULL, &db));
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &i64));
  CHECK(i64 == 4, "steps from FSDP_OPTIONS %lld", (long long)i64);
  TCALL(FsdpOptsCheckUnknown(db));
  int nleft = -1;
  char *text = left_report(db, &nleft);
  CHECK(nleft == 2, "left %d, want 2 (-sharding_factor, -from_shared_file)", nleft);
  if (g_rank == 0) {
    char from_file[600];
    snprintf(from_file, sizeof from_file, "-from_shared_file 3  (%s:1)", f);
    CHECK(strstr(text, "-sharding_factor 2  (FSDP_OPTIONS)") && strstr(text, from_file),
          "left report lacks a shared option or its origin:\n%s", text);
  }
  free(text);
  TCALL(FsdpOptsDestroy(&db));

  /* A value error in FSDP_OPTIONS says so. */
  setenv("FSDP_OPTIONS", "-steps many", 1);
  TCALL(create(NULL, &db));
  EXPECT_USAGE(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &i64),
               "FSDP_OPTIONS: option -steps: 'many'");
  TCALL(FsdpOptsDestroy(&db));

  /* The same unknown name on the command line is an error, also when
   * FSDP_OPTIONS has it too (the command line's copy replaces it). */
  setenv("FSDP_OPTIONS", "-sharding_factor 2", 1);
  const char *a[] = {"-sharding_factor", "3", NULL};
  TCALL(create(a, &db));
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &i64));
  int err = FsdpOptsCheckUnknown(db);
  EXPECT_USAGE(err, "unknown option -sharding_factor");
  CHECK(!strstr(FsdpErrorLastMessage(), "FSDP_OPTIONS"), "blamed on the environment: %s",
        FsdpErrorLastMessage());
  TCALL(FsdpOptsDestroy(&db));
  unsetenv("FSDP_OPTIONS");
  /* ... and so is one from a file named on the command line. */
  const char *c[] = {"-options_file", f, NULL};
  TCALL(create(c, &db));
  char want[700];
  snprintf(want, sizeof want, "%s:1: unknown option -from_shared_file", f);
  EXPECT_USAGE(FsdpOptsCheckUnknown(db), want);
  TCALL(FsdpOptsDestroy(&db));
  if (g_rank == 0) unlink(f);
}

/* Read a memstream's text on rank 0; others must print nothing. */
static void test_help(void)
{
  const char *a[] = {"-steps", "50", "-verbose", NULL};
  FsdpOpts db;
  TCALL(create(a, &db));
  int64_t i64;
  double d;
  int b, idx;
  const char *dev[] = {"cpu", "cuda", NULL};
  TCALL(FsdpOptsGetInt(db, "Training", "steps", "number of optimizer steps",
                       100, 1, 1000000, &i64));
  TCALL(FsdpOptsGetDouble(db, "Training", "lr", "peak learning rate", 3e-4,
                          0, 1, &d));
  TCALL(FsdpOptsGetInt(db, "Topology", "sharding_factor",
                       "ranks that share one copy of the model", 0, 0,
                       INT64_MAX, &i64));
  TCALL(FsdpOptsGetEnum(db, "Topology", "device", "where to compute", dev, 0,
                        &idx));
  TCALL(FsdpOptsGetBool(db, "Training", "verbose", "print more", 0, &b));
  /* A second component reads -steps under another group. */
  TCALL(FsdpOptsGetInt(db, "Logging", "steps", "again", 7, 1, 1000000, &i64));
  CHECK(i64 == 50, "second registration returns %lld", (long long)i64);

  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  TCALL(FsdpOptsPrintHelp(db, out, "test_opts: checks the options database"));
  fclose(out);
  if (g_rank != 0) {
    CHECK(len == 0, "rank %d printed help: %s", g_rank, text);
  } else {
    const char *want[] = {
        "test_opts: checks the options database",
        "Options database:",
        "-help <bool>", "-options_file <file>", "-options_left <bool>",
        "Training:",
        "-steps <int in [1, 1000000]>", "number of optimizer steps",
        "(default 100; current 50)",
        "-lr <real in [0, 1]>", "peak learning rate", "(default 0.0003)",
        "-verbose <bool>", "(default false; current true)",
        "Topology:",
        "-sharding_factor <int >= 0>", "-device <cpu|cuda>",
        "(default cpu)", NULL};
    for (int k = 0; want[k]; k++)
      CHECK(strstr(text, want[k]) != NULL, "help lacks \"%s\":\n%s", want[k],
            text);
    /* Headings in order of first registration; -verbose, registered after
     * Topology's options, is listed under Training, before Topology. */
    const char *o = strstr(text, "Options database:");
    const char *t = strstr(text, "Training:");
    const char *v = strstr(text, "-verbose");
    const char *p = strstr(text, "Topology:");
    CHECK(o && t && v && p && o < t && t < v && v < p,
          "order of groups/options wrong:\n%s", text);
    /* Registered twice, printed once; the second group has no heading. */
    const char *first = strstr(text, "-steps ");
    CHECK(first && !strstr(first + 1, "-steps "), "-steps listed twice:\n%s",
          text);
    CHECK(!strstr(text, "Logging:"), "empty group heading printed:\n%s", text);
    CHECK(!strstr(text, "again"), "second help text printed:\n%s", text);
  }
  free(text);
  TCALL(FsdpOptsDestroy(&db));
}

static void test_left_and_string(void)
{
  const char *a[] = {"-options_left", "-steps", "5", "-unused", "7",
                     "-unflag", "-title", "a b", NULL};
  FsdpOpts db;
  TCALL(create(a, &db));
  int64_t i64;
  TCALL(FsdpOptsGetInt(db, "T", "steps", "h", 1, 1, 100, &i64));
  int nleft = -1;
  char *text = left_report(db, &nleft);
  CHECK(nleft == 3, "left %d, want 3 (-unused -unflag -title)", nleft);
  if (g_rank == 0) {
    CHECK(strstr(text, "-unused 7") && strstr(text, "-unflag") &&
              strstr(text, "-title a b"),
          "left report lacks an option:\n%s", text);
    CHECK(!strstr(text, "-steps") && !strstr(text, "-options_left"),
          "left report names a read option:\n%s", text);
  } else {
    CHECK(!text[0], "rank %d printed: %s", g_rank, text);
  }
  free(text);

  char buf[256];
  TCALL(FsdpOptsToString(db, buf, sizeof buf));
  const char *want = "-options_left -steps 5 -unused 7 -unflag -title \"a b\"";
  CHECK(!strcmp(buf, want), "ToString '%s', want '%s'", buf, want);
  char small[12];
  TCALL(FsdpOptsToString(db, small, sizeof small));
  CHECK(strlen(small) == sizeof small - 1 && !strncmp(small, want, 11),
        "truncated ToString '%s'", small);
  TCALL(FsdpOptsSetValue(db, "dash", "-x"));
  TCALL(FsdpOptsToString(db, buf, sizeof buf));
  TCALL(FsdpOptsDestroy(&db));

  /* The rendering reads back as FSDP_OPTIONS to the same database. */
  setenv("FSDP_OPTIONS", buf, 1);
  TCALL(create(NULL, &db));
  unsetenv("FSDP_OPTIONS");
  char again[256];
  TCALL(FsdpOptsToString(db, again, sizeof again));
  CHECK(!strcmp(buf, again), "round trip '%s' vs '%s'", buf, again);
  const char *s = NULL;
  TCALL(FsdpOptsGetString(db, "T", "title", "h", NULL, &s));
  CHECK(s && !strcmp(s, "a b"), "round-trip title '%s'", s ? s : "(null)");
  TCALL(FsdpOptsGetString(db, "T", "dash", "h", NULL, &s));
  CHECK(s && !strcmp(s, "-x"), "round-trip dash '%s'", s ? s : "(null)");
  TCALL(FsdpOptsReportLeft(db, NULL, NULL)); /* keep destroy quiet */
  TCALL(FsdpOptsDestroy(&db));
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  unsetenv("FSDP_OPTIONS");
  long pid = (long)getpid();
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  snprintf(g_dir_prefix, sizeof g_dir_prefix, "/tmp/fsdp_test_opts_%ld", pid);

  test_values();
  test_precedence();
  test_ranks_agree();
  test_errors();
  test_file_lines();
  test_file_not_text();
  test_shared_env();
  test_help();
  test_left_and_string();

  int status = test_finish("test_opts");
  TCALL(FsdpFinalize());
  return status;
}
