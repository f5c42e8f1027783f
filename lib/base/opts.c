/* opts.c: the PETSc-style options database (see opts.h).
 *
 * [Note: one reader, one database] Rank 0 alone turns its environment
 * (FSDP_OPTIONS), its command line and every options file into one ordered
 * list of (name, value) records and broadcasts that list; every rank then
 * builds its database from the same bytes.  So ranks cannot disagree on an
 * option (a file that only rank 0 can see, a launcher that gives ranks
 * different environments), and an error found while reading (a missing
 * file) travels with the broadcast: every rank raises the same usage error
 * and none waits for a broadcast that never comes.  The broadcast is the
 * only collective operation in this file; everything after it is local.
 *
 * [Note: given versus registered] The database holds two lists.  "Given"
 * options come from the sources, one entry per name in order of first
 * appearance (a later source replaces the value in place).  "Registered"
 * options are those some getter asked for, with group, default, accepted
 * form and help, one entry per name in order of first registration (a
 * second component reading the same option adds nothing, so -help shows it
 * once).  An option given but not registered is unknown (a typo);
 * -options_left lists given options that no getter read.  Both lists stay
 * small (< 200), so lookups are linear scans.
 *
 * [Note: shared options] FSDP_OPTIONS is read by every fsdp program
 * (fsdp-train, fsdp-plan, fsdp-ckpt), so it may hold options that only
 * another program knows: those are not errors (-options_left lists them).
 * Each given option remembers whether it came from FSDP_OPTIONS (directly
 * or through an options file named there); FsdpOptsCheckUnknown skips such
 * a "shared" option unless it is one typo away from an option this program
 * registered (then it is a misspelling: error with "did you mean").  The
 * same name on the command line or in an options file named there is not
 * shared and stays an error.  This needs no list of other programs' names
 * that could fall out of date; tests/test_cli.sh checks that no option of
 * one program is a near miss of another's.
 *
 * [Note: option names] A name is letters, digits, '_' and '-'.  Quotes
 * group characters anywhere in a token, so without this check -a"b c"
 * would give an option named "ab c", which FsdpOptsToString cannot write
 * back (found by tests/fuzz: the run file's options string read back as
 * other options).
 *
 * [Note: options files are text] A file is read byte by byte: a NUL byte,
 * a control character, malformed UTF-8 or an overlong line is refused
 * naming FILE:LINE, so a binary file given by mistake is never truncated
 * at its first NUL or read as options.  Every error about an option from a
 * file leads with FILE:LINE (the origin kept with the option), also when
 * it is found later by a getter or by FsdpOptsCheckUnknown.
 */
#include "base/opts.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/mem.h"

#define OPTS_MAX_DEPTH 8            /* options files nested at most this deep */
#define OPTS_MAX_LINE 65536         /* longest line of an options file */
#define OPTS_MSG 1024               /* room for a message built on rank 0 */
#define OPTS_BUILTIN_GROUP "Options database"

typedef struct {
  char *name;   /* without the leading dash */
  char *value;  /* NULL: given as a bare flag */
  char *origin; /* where it was given, for messages: "FILE:LINE",
                   "FSDP_OPTIONS", or NULL (command line, SetValue) */
  int shared;   /* from FSDP_OPTIONS, which every fsdp program reads
                   ([Note: shared options]) */
  int used;     /* some getter read it */
} OptGiven;

typedef struct {
  char *group, *name, *help;
  char *brief;  /* value shape for -help, e.g. "<int in [1, 100]>" */
  char *def;    /* default as text */
  int is_bool;  /* a bare flag reads as true */
} OptReg;

struct FsdpOpts_ {
  int rank;  /* in the creating comm: who prints */
  OptGiven *given;
  int ngiven;
  size_t cgiven;
  OptReg *reg;
  int nreg;
  size_t creg;
  /* Values replaced by FsdpOptsSetValue stay alive until destroy, because
   * FsdpOptsGetString handed out pointers into them. */
  char **retired;
  int nretired;
  size_t cretired;
  int help, options_left, left_reported;
};

/* ---- small helpers ------------------------------------------------------ */

static int StrDupN(const char *s, size_t n, char **out)
{
  *out = malloc(n + 1);
  FSDP_CHECK_ALLOC(*out, n + 1);
  memcpy(*out, s, n);
  (*out)[n] = '\0';
  return FSDP_SUCCESS;
}

static int StrDup(const char *s, char **out)
{
  return StrDupN(s, strlen(s), out);
}

/* Grow an array of the database so that it holds at least need. */
static int Grow(void *arr, size_t *cap, int need, size_t elt)
{
  if (FsdpArrayReserve(arr, cap, (size_t)need, elt))
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory growing the options database to %d entries", need);
  return FSDP_SUCCESS;
}

/* Options are named without the dash; tolerate callers that include it. */
static const char *StripDash(const char *name)
{
  while (name[0] == '-') name++;
  return name;
}

/* A token starts an option when it is -name or --name and name begins with
 * a letter; then *name points at the name (which may hold "=value"). */
static int IsOptionStart(const char *tok, const char **name)
{
  if (tok[0] != '-') return 0;
  const char *s = tok + 1;
  if (s[0] == '-') s++;
  if (!isalpha((unsigned char)s[0])) return 0;
  if (name) *name = s;
  return 1;
}

static OptGiven *FindGiven(FsdpOpts db, const char *name)
{
  for (int i = 0; i < db->ngiven; i++)
    if (!strcmp(db->given[i].name, name)) return &db->given[i];
  return NULL;
}

static OptReg *FindReg(FsdpOpts db, const char *name)
{
  for (int i = 0; i < db->nreg; i++)
    if (!strcmp(db->reg[i].name, name)) return &db->reg[i];
  return NULL;
}

/* Insert or replace: name has length nlen (it may be followed by "=...").
 * origin (may be NULL or "") and shared describe the source, which a
 * replacing value takes over. */
static int SetValueN(FsdpOpts db, const char *name, size_t nlen,
                     const char *value, const char *origin, int shared)
{
  char *v = NULL, *o = NULL;
  int err = FSDP_SUCCESS;
  if (value) err = StrDup(value, &v);
  if (!err && origin && origin[0]) err = StrDup(origin, &o);
  OptGiven *g = NULL;
  for (int i = 0; i < db->ngiven && !g; i++)
    if (strlen(db->given[i].name) == nlen &&
        !strncmp(db->given[i].name, name, nlen))
      g = &db->given[i];
  if (!err && g && g->value)
    err = Grow(&db->retired, &db->cretired, db->nretired + 1,
               sizeof *db->retired);
  if (!err && !g) {
    err = Grow(&db->given, &db->cgiven, db->ngiven + 1, sizeof *db->given);
    char *n = NULL;
    if (!err) err = StrDupN(name, nlen, &n);
    if (!err) {
      g = &db->given[db->ngiven++];
      memset(g, 0, sizeof *g);
      g->name = n;
    }
  }
  if (err) {
    free(v);
    free(o);
    FSDP_CALL(err);
  }
  if (g->value) db->retired[db->nretired++] = g->value;
  g->value = v;
  free(g->origin);
  g->origin = o;
  g->shared = shared;
  return FSDP_SUCCESS;
}

/* A usage error about given option g, led by where it was given when that
 * was a file or FSDP_OPTIONS ("run.opts:3: option -lr: missing value"). */
__attribute__((format(printf, 5, 6)))
static int GivenError(const char *file, int line, const char *func,
                      const OptGiven *g, const char *fmt, ...)
{
  char msg[OPTS_MSG];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return FsdpErrorRaise(file, line, func, FSDP_ERR_USAGE, "%s%s%s",
                        g->origin ? g->origin : "", g->origin ? ": " : "",
                        msg);
}
#define GIVEN_ERROR(g, ...) \
  return GivenError(__FILE__, __LINE__, __func__, (g), __VA_ARGS__)

/* ---- reading the sources (rank 0 only) ---------------------------------- */

/* Rank 0 collects records here: 'F' name NUL, or 'V' name NUL value NUL.
 * Errors are not raised on rank 0 alone: code and message are broadcast
 * and raised on every rank ([Note: one reader, one database]). */
typedef struct {
  char origin[OPTS_MSG / 2]; /* recorded with each option: "FILE:LINE",
                                "FSDP_OPTIONS" or "" (command line) */
  char lead[OPTS_MSG / 2 + 2]; /* messages start with it: "FILE:LINE: " */
  const char *tail;          /* or end with it: " on the command line" */
  int shared;                /* [Note: shared options] */
} Source;

typedef struct {
  char *buf;
  size_t len, cap;
  int code;
  char msg[OPTS_MSG];
  Source src; /* of the tokens being walked */
} Builder;

__attribute__((format(printf, 3, 4)))
static int BuildFail(Builder *b, int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->msg, sizeof b->msg, fmt, ap);
  va_end(ap);
  b->code = code;
  return code;
}

static int BuildAppend(Builder *b, const char *s, size_t n)
{
  if (FsdpArrayReserve(&b->buf, &b->cap, b->len + n, 1))
    return BuildFail(b, FSDP_ERR_MEM, "out of memory reading options");
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  return FSDP_SUCCESS;
}

/* A record: kind ('V' value, 'F' flag), 'S' shared or 'L' local, origin
 * NUL, name NUL, and for 'V' value NUL. */
static int BuildRecord(Builder *b, const char *name, size_t nlen,
                       const char *value)
{
  int err = BuildAppend(b, value ? "V" : "F", 1);
  if (!err) err = BuildAppend(b, b->src.shared ? "S" : "L", 1);
  if (!err) err = BuildAppend(b, b->src.origin, strlen(b->src.origin) + 1);
  if (!err) err = BuildAppend(b, name, nlen);
  if (!err) err = BuildAppend(b, "", 1);
  if (!err && value) err = BuildAppend(b, value, strlen(value) + 1);
  return err;
}

/* Tokens of the environment variable or of one line of a file.  literal[i]
 * is set when token i was quoted: a quoted token is always a value, so a
 * string option can hold "-x" or "a b". */
typedef struct {
  char **tok;
  int *literal;
  int n;
  size_t cap_tok, cap_literal;
} TokenList;

static void TokenListFree(TokenList *t)
{
  for (int i = 0; i < t->n; i++) free(t->tok[i]);
  free(t->tok);
  free(t->literal);
  memset(t, 0, sizeof *t);
}

/* Split s at white space.  Quotes ('...' or "...") group characters and are
 * removed; a '#' that starts a token ends the line.  Sets *bad_quote for an
 * unterminated quote. */
static int SplitTokens(Builder *b, const char *s, TokenList *t, int *bad_quote)
{
  size_t len = strlen(s);
  char *cur = malloc(len + 1);
  *bad_quote = 0;
  if (!cur) return BuildFail(b, FSDP_ERR_MEM, "out of memory reading options");
  const char *p = s;
  for (;;) {
    while (*p && isspace((unsigned char)*p)) p++;
    if (!*p || *p == '#') break;
    size_t k = 0;
    int literal = (*p == '"' || *p == '\'');
    while (*p && !isspace((unsigned char)*p)) {
      if (*p == '"' || *p == '\'') {
        char q = *p++;
        while (*p && *p != q) cur[k++] = *p++;
        if (!*p) {
          *bad_quote = 1;
          free(cur);
          return FSDP_SUCCESS;
        }
        p++;
      } else {
        cur[k++] = *p++;
      }
    }
    cur[k] = '\0';
    size_t need = (size_t)t->n + 1;
    if (FsdpArrayReserve(&t->tok, &t->cap_tok, need, sizeof *t->tok) ||
        FsdpArrayReserve(&t->literal, &t->cap_literal, need, sizeof *t->literal)) {
      free(cur);
      return BuildFail(b, FSDP_ERR_MEM, "out of memory reading options");
    }
    t->tok[t->n] = malloc(k + 1);
    if (!t->tok[t->n]) {
      free(cur);
      return BuildFail(b, FSDP_ERR_MEM, "out of memory reading options");
    }
    memcpy(t->tok[t->n], cur, k + 1);
    t->literal[t->n] = literal;
    t->n++;
  }
  free(cur);
  return FSDP_SUCCESS;
}

static int BuildFile(Builder *b, const char *path, int depth);

/* Walk one token stream (the environment, the command line, a file line)
 * from source b->src; depth counts enclosing options files. */
static int BuildTokens(Builder *b, char *const *tok, const int *literal,
                       int n, int depth)
{
  for (int i = 0; i < n; i++) {
    const char *name;
    if ((literal && literal[i]) || !IsOptionStart(tok[i], &name))
      return BuildFail(b, FSDP_ERR_USAGE,
                       "%sunexpected argument '%s'%s (options have the form "
                       "-name value or -flag)",
                       b->src.lead, tok[i], b->src.tail);
    size_t nlen = strcspn(name, "=");
    /* [Note: option names] */
    size_t good = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789_-");
    if (good < nlen)
      return BuildFail(b, FSDP_ERR_USAGE,
                       "%sbad option name '-%.*s'%s: a name is letters, digits, "
                       "'_' and '-'",
                       b->src.lead, (int)nlen, name, b->src.tail);
    const char *value = NULL;
    if (name[nlen] == '=')
      value = name + nlen + 1;
    else if (i + 1 < n &&
             ((literal && literal[i + 1]) || !IsOptionStart(tok[i + 1], NULL)))
      value = tok[++i];
    if (nlen == strlen("options_file") && !strncmp(name, "options_file", nlen)) {
      if (!value)
        return BuildFail(b, FSDP_ERR_USAGE,
                         "%soption -options_file: missing value%s (expected a "
                         "file name)",
                         b->src.lead, b->src.tail);
      int err = BuildFile(b, value, depth + 1);
      if (err) return err;
      continue;
    }
    int err = BuildRecord(b, name, nlen, value);
    if (err) return err;
  }
  return FSDP_SUCCESS;
}

/* Text is what an editor writes: printable ASCII, white space and UTF-8
 * sequences ([Note: options files are text]). */
static int IsControl(unsigned c)
{
  return (c < 0x20 && !isspace((int)c)) || c == 0x7f;
}

static int NotTextFail(Builder *b, const char *path, unsigned char byte,
                       size_t column)
{
  return BuildFail(b, FSDP_ERR_USAGE,
                   "%sbyte 0x%02x at column %zu is not text (printable "
                   "characters, white space and UTF-8): is '%s' a binary file?",
                   b->src.lead, byte, column, path);
}

/* Returns 0 if line[0..n) is text, else 1 with the 0-based offset of the
 * first byte that is not. */
static int NotText(const unsigned char *line, size_t n, size_t *at)
{
  for (size_t i = 0; i < n;) {
    unsigned c = line[i];
    if (c < 0x80) {
      if (IsControl(c)) return *at = i, 1;
      i++;
      continue;
    }
    /* lead byte: sequence length and the smallest code point it may
     * encode (no overlong forms); surrogates and > U+10FFFF are not text */
    size_t len;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07, min = 0x10000;
    else return *at = i, 1;
    if (i + len > n) return *at = i, 1;
    for (size_t k = 1; k < len; k++) {
      if ((line[i + k] & 0xc0) != 0x80) return *at = i, 1;
      cp = cp << 6 | (line[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return *at = i, 1;
    i += len;
  }
  return 0;
}

/* Read the next line of f (without its newline) into *line, growing *cap;
 * *n gets its length.  Returns 1 for a line, 0 at the end of the file, or
 * fails (usage error in b) on a read error, a NUL byte (getline would hand
 * the parser a silently truncated string) or a line longer than
 * OPTS_MAX_LINE -- checked byte by byte, so -options_file /dev/zero fails
 * at once instead of filling memory.  Control characters fail here too,
 * so the first bad byte is the one named; UTF-8 is checked per line. */
static int ReadLine(Builder *b, FILE *f, const char *path, char **line,
                    size_t *cap, size_t *n)
{
  *n = 0;
  int c;
  while ((c = getc(f)) != EOF && c != '\n') {
    if (c == 0)
      return -BuildFail(b, FSDP_ERR_USAGE,
                        "%sNUL byte at column %zu: not a text file (an options "
                        "file holds lines of -name value)",
                        b->src.lead, *n + 1);
    if (IsControl((unsigned)c)) return -NotTextFail(b, path, (unsigned char)c, *n + 1);
    if (*n + 2 > OPTS_MAX_LINE)
      return -BuildFail(b, FSDP_ERR_USAGE,
                        "%sline longer than %d bytes: not an options file",
                        b->src.lead, OPTS_MAX_LINE - 1);
    if (FsdpArrayReserve(line, cap, *n + 2, 1))
      return -BuildFail(b, FSDP_ERR_MEM, "out of memory reading options");
    (*line)[(*n)++] = (char)c;
  }
  if (ferror(f))
    return -BuildFail(b, FSDP_ERR_USAGE,
                      "option -options_file: cannot read '%s': %s", path,
                      strerror(errno));
  if (c == EOF && *n == 0) return 0;
  if (*cap == 0) { /* an empty first line */
    *line = malloc(1);
    if (!*line)
      return -BuildFail(b, FSDP_ERR_MEM, "out of memory reading options");
    *cap = 1;
  }
  (*line)[*n] = '\0';
  return 1;
}

/* Expand one options file in place, from source b->src (the command line,
 * the environment, or an enclosing file's line). */
static int BuildFile(Builder *b, const char *path, int depth)
{
  if (depth > OPTS_MAX_DEPTH)
    return BuildFail(b, FSDP_ERR_USAGE,
                     "%soption -options_file: '%s'%s: options files nested "
                     "more than %d deep (does a file include itself?)",
                     b->src.lead, path, b->src.tail, OPTS_MAX_DEPTH);
  FILE *f = fopen(path, "r");
  if (!f)
    return BuildFail(b, FSDP_ERR_USAGE,
                     "%soption -options_file: cannot open '%s': %s",
                     b->src.lead, path, strerror(errno));
  const Source outer = b->src;
  char *line = NULL;
  size_t cap = 0, n = 0;
  int lineno = 0, err = FSDP_SUCCESS, more;
  errno = 0;
  while (!err) {
    /* every message about this line leads with FILE:LINE */
    snprintf(b->src.origin, sizeof b->src.origin, "%s:%d", path, ++lineno);
    snprintf(b->src.lead, sizeof b->src.lead, "%s: ", b->src.origin);
    b->src.tail = "";
    if ((more = ReadLine(b, f, path, &line, &cap, &n)) <= 0) {
      err = -more;
      break;
    }
    size_t bad;
    if (NotText((const unsigned char *)line, n, &bad)) {
      err = NotTextFail(b, path, (unsigned char)line[bad], bad + 1);
      break;
    }
    TokenList t = {0};
    int bad_quote = 0;
    err = SplitTokens(b, line, &t, &bad_quote);
    if (!err && bad_quote)
      err = BuildFail(b, FSDP_ERR_USAGE, "%sunterminated quote", b->src.lead);
    if (!err) err = BuildTokens(b, t.tok, t.literal, t.n, depth);
    TokenListFree(&t);
  }
  free(line);
  fclose(f);
  b->src = outer;
  return err;
}

/* Rank 0: everything, lowest precedence first. */
static int BuildAll(Builder *b, int argc, char **argv)
{
  const char *env = getenv("FSDP_OPTIONS");
  if (env) {
    snprintf(b->src.origin, sizeof b->src.origin, "FSDP_OPTIONS");
    b->src.lead[0] = '\0';
    b->src.tail = " in environment variable FSDP_OPTIONS";
    b->src.shared = 1;
    /* text only, as an options file: a control byte is named, never
     * echoed to the terminal ([Note: options files are text]) */
    size_t at = 0;
    if (NotText((const unsigned char *)env, strlen(env), &at))
      return BuildFail(b, FSDP_ERR_USAGE,
                       "environment variable FSDP_OPTIONS: byte 0x%02x at column %zu is not "
                       "text (printable characters, white space and UTF-8)",
                       (unsigned char)env[at], at + 1);
    TokenList t = {0};
    int bad_quote = 0;
    int err = SplitTokens(b, env, &t, &bad_quote);
    if (!err && bad_quote)
      err = BuildFail(b, FSDP_ERR_USAGE,
                      "unterminated quote in environment variable "
                      "FSDP_OPTIONS");
    if (!err) err = BuildTokens(b, t.tok, t.literal, t.n, 0);
    TokenListFree(&t);
    if (err) return err;
  }
  b->src.origin[0] = b->src.lead[0] = '\0';
  b->src.tail = " on the command line";
  b->src.shared = 0;
  if (argc > 1) return BuildTokens(b, argv + 1, NULL, argc - 1, 0);
  return FSDP_SUCCESS;
}

/* ---- create / destroy ---------------------------------------------------- */

static void OptsFree(FsdpOpts db)
{
  if (!db) return;
  for (int i = 0; i < db->ngiven; i++) {
    free(db->given[i].name);
    free(db->given[i].value);
    free(db->given[i].origin);
  }
  for (int i = 0; i < db->nreg; i++) {
    OptReg *r = &db->reg[i];
    free(r->group);
    free(r->name);
    free(r->help);
    free(r->brief);
    free(r->def);
  }
  for (int i = 0; i < db->nretired; i++) free(db->retired[i]);
  free(db->given);
  free(db->reg);
  free(db->retired);
  free(db);
}

static int Register(FsdpOpts db, const char *group, const char *name,
                    const char *help, const char *brief, const char *def,
                    int is_bool);

int FsdpOptsCreate(MPI_Comm comm, int argc, char **argv, FsdpOpts *db)
{
  int rank = 0;
  *db = NULL;
  FSDP_CALL_MPI(MPI_Comm_rank(comm, &rank));

  /* [Note: one reader, one database] */
  Builder b;
  memset(&b, 0, sizeof b);
  int hdr[2] = {FSDP_SUCCESS, 0};
  if (rank == 0) {
    hdr[0] = BuildAll(&b, argc, argv);
    if (!hdr[0] && b.len > (size_t)INT_MAX / 2)
      hdr[0] = BuildFail(&b, FSDP_ERR_USAGE, "options too long (%zu bytes)",
                         b.len);
    hdr[1] = (int)b.len;
  }
  int mpierr = MPI_Bcast(hdr, 2, MPI_INT, 0, comm);
  if (mpierr == MPI_SUCCESS && hdr[0] != FSDP_SUCCESS)
    mpierr = MPI_Bcast(b.msg, OPTS_MSG, MPI_CHAR, 0, comm);
  /* The records go in fixed chunks, so a rank that cannot allocate the
   * buffer still takes part in every broadcast (into scratch) and fails
   * only afterwards, locally. */
  int nomem = 0;
  if (mpierr == MPI_SUCCESS && hdr[0] == FSDP_SUCCESS && hdr[1] > 0) {
    char scratch[4096];
    if (rank != 0) {
      b.buf = malloc((size_t)hdr[1]);
      nomem = (b.buf == NULL);
    }
    for (int off = 0; mpierr == MPI_SUCCESS && off < hdr[1];
         off += (int)sizeof scratch) {
      int chunk = hdr[1] - off < (int)sizeof scratch ? hdr[1] - off
                                                      : (int)sizeof scratch;
      mpierr = MPI_Bcast(nomem ? scratch : b.buf + off, chunk, MPI_CHAR, 0,
                         comm);
    }
  }
  if (nomem)
    FSDP_ERROR(FSDP_ERR_MEM, "out of memory (%d bytes) receiving options",
               hdr[1]);
  if (mpierr != MPI_SUCCESS) {
    free(b.buf);
    FSDP_CALL_MPI(mpierr);
  }
  if (hdr[0] != FSDP_SUCCESS) {
    free(b.buf);
    b.msg[OPTS_MSG - 1] = '\0';
    FSDP_ERROR(hdr[0], "%s", b.msg);
  }

  /* Local from here on. */
  FsdpOpts o = calloc(1, sizeof *o);
  if (!o) free(b.buf);
  FSDP_CHECK_ALLOC(o, sizeof *o);
  o->rank = rank;
  int err = FSDP_SUCCESS;
  for (size_t pos = 0; !err && pos < (size_t)hdr[1];) {
    char kind = b.buf[pos++];
    int shared = b.buf[pos++] == 'S';
    const char *origin = b.buf + pos;
    pos += strlen(origin) + 1;
    const char *name = b.buf + pos;
    pos += strlen(name) + 1;
    const char *value = NULL;
    if (kind == 'V') {
      value = b.buf + pos;
      pos += strlen(value) + 1;
    }
    err = SetValueN(o, name, strlen(name), value, origin, shared);
  }
  free(b.buf);

  /* The options this file understands itself; registered first, so they
   * head -help and are never unknown. */
  if (!err)
    err = FsdpOptsGetBool(o, OPTS_BUILTIN_GROUP, "help",
                          "print every option with its default and meaning",
                          0, &o->help);
  if (!err)
    err = Register(o, OPTS_BUILTIN_GROUP, "options_file",
                   "read options from FILE, one per line, # comments; may "
                   "be repeated",
                   "<file>", "(none)", 0);
  if (!err)
    err = FsdpOptsGetBool(o, OPTS_BUILTIN_GROUP, "options_left",
                          "at the end, list options given but never read", 0,
                          &o->options_left);
  if (err) {
    OptsFree(o);
    FSDP_CALL(err);
  }
  *db = o;
  return FSDP_SUCCESS;
}

int FsdpOptsDestroy(FsdpOpts *db)
{
  if (!db || !*db) return FSDP_SUCCESS;
  FsdpOpts o = *db;
  int err = FSDP_SUCCESS;
  if (o->options_left && !o->left_reported)
    err = FsdpOptsReportLeft(o, stdout, NULL);
  OptsFree(o);
  *db = NULL;
  return err;
}

int FsdpOptsSetValue(FsdpOpts db, const char *name, const char *value)
{
  FSDP_ASSERT(db && name);
  name = StripDash(name);
  if (!name[0]) FSDP_ERROR(FSDP_ERR_USAGE, "option with an empty name");
  FSDP_CALL(SetValueN(db, name, strlen(name), value, NULL, 0));
  return FSDP_SUCCESS;
}

int FsdpOptsHas(FsdpOpts db, const char *name)
{
  return db && name && FindGiven(db, StripDash(name)) != NULL;
}

int FsdpOptsHelpRequested(FsdpOpts db) { return db ? db->help : 0; }

/* ---- registration and lookup --------------------------------------------- */

static int Register(FsdpOpts db, const char *group, const char *name,
                    const char *help, const char *brief, const char *def,
                    int is_bool)
{
  if (FindReg(db, name)) return FSDP_SUCCESS; /* a second reader */
  FSDP_CALL(Grow(&db->reg, &db->creg, db->nreg + 1, sizeof *db->reg));
  OptReg r;
  memset(&r, 0, sizeof r);
  r.is_bool = is_bool;
  int err = StrDup(group ? group : "Other", &r.group);
  if (!err) err = StrDup(name, &r.name);
  if (!err) err = StrDup(help ? help : "", &r.help);
  if (!err) err = StrDup(brief, &r.brief);
  if (!err) err = StrDup(def, &r.def);
  if (err) {
    free(r.group);
    free(r.name);
    free(r.help);
    free(r.brief);
    free(r.def);
    FSDP_CALL(err);
  }
  db->reg[db->nreg++] = r;
  return FSDP_SUCCESS;
}

/* Register name (once) and find its given entry (NULL if not given),
 * marking it read. */
static int Lookup(FsdpOpts db, const char *group, const char *name,
                  const char *help, const char *brief, const char *def,
                  int is_bool, OptGiven **given)
{
  *given = NULL;
  FSDP_CALL(Register(db, group, name, help, brief, def, is_bool));
  *given = FindGiven(db, name);
  if (*given) (*given)->used = 1;
  return FSDP_SUCCESS;
}

/* A numeric value outside the getter's [min, max]: the message says the
 * range (form, "an integer in [1, 8]"). */
static int OutOfRange(const OptGiven *g, const char *name, const char *form)
{
  GIVEN_ERROR(g, "option -%s: %s is out of range (expected %s)", name,
              g->value, form);
}

/* Lookup for an option that takes a value: *given is NULL when the option
 * was not given; given without a value it is a usage error that says what
 * was `expected`. */
static int LookupValue(FsdpOpts db, const char *group, const char *name,
                       const char *help, const char *brief, const char *def,
                       const char *expected, OptGiven **given)
{
  FSDP_CALL(Lookup(db, group, name, help, brief, def, 0, given));
  if (*given && !(*given)->value)
    GIVEN_ERROR(*given, "option -%s: missing value (expected %s)", name,
                expected);
  return FSDP_SUCCESS;
}

/* ---- parsing values ------------------------------------------------------- */

static int ParseInt(const char *s, int64_t *v)
{
  if (!s[0] || isspace((unsigned char)s[0])) return 0;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (*end == '\0') {
    if (errno == ERANGE) return 0;
    *v = (int64_t)x;
    return 1;
  }
  /* 1e6 and 2.0 are integers too, when they are exactly. */
  errno = 0;
  double d = strtod(s, &end);
  if (*end != '\0' || errno == ERANGE || !isfinite(d) || d != floor(d) ||
      d < -9.2e18 || d > 9.2e18)
    return 0;
  *v = (int64_t)d;
  return 1;
}

/* digits[.digits] then an optional k/M/G/T (case-insensitive), then an
 * optional B or iB. */
static int ParseSize(const char *s, size_t *v)
{
  const char *p = s;
  int digits = 0;
  while (isdigit((unsigned char)*p)) p++, digits++;
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p)) p++, digits++;
  }
  if (!digits) return 0;
  size_t mantissa_len = (size_t)(p - s);
  long double mult = 1;
  switch (tolower((unsigned char)*p)) {
    case 'k': mult = 1024.0L; p++; break;
    case 'm': mult = 1024.0L * 1024; p++; break;
    case 'g': mult = 1024.0L * 1024 * 1024; p++; break;
    case 't': mult = 1024.0L * 1024 * 1024 * 1024; p++; break;
    default: break;
  }
  if (mult > 1 && tolower((unsigned char)*p) == 'i') {
    p++;
    if (tolower((unsigned char)*p) != 'b') return 0;
  }
  if (tolower((unsigned char)*p) == 'b') p++;
  if (*p) return 0;
  char num[64];
  if (mantissa_len >= sizeof num) return 0;
  memcpy(num, s, mantissa_len);
  num[mantissa_len] = '\0';
  long double x = strtold(num, NULL) * mult;
  if (x != floorl(x) || x > (long double)SIZE_MAX) return 0;
  *v = (size_t)x;
  return 1;
}

static int ParseBool(const char *s, int *v)
{
  static const char *yes[] = {"1", "true", "yes", "on"};
  static const char *no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, yes[i])) return *v = 1, 1;
    if (!strcasecmp(s, no[i])) return *v = 0, 1;
  }
  return 0;
}

static void FormatSize(size_t x, char *buf, size_t n)
{
  static const char suffix[] = "kMGT";
  int k = -1;
  while (k < 3 && x >= 1024 && x % 1024 == 0) x /= 1024, k++;
  if (k < 0)
    snprintf(buf, n, "%zu", x);
  else
    snprintf(buf, n, "%zu%c", x, suffix[k]);
}

/* "an integer in [1, 100]", "an integer >= 0", "an integer"; brief is the
 * same for -help: "<int in [1, 100]>". */
static void IntForm(int64_t min, int64_t max, char *form, size_t nform,
                    char *brief, size_t nbrief)
{
  char range[96] = "";
  if (min != INT64_MIN && max != INT64_MAX)
    snprintf(range, sizeof range, " in [%" PRId64 ", %" PRId64 "]", min, max);
  else if (min != INT64_MIN)
    snprintf(range, sizeof range, " >= %" PRId64, min);
  else if (max != INT64_MAX)
    snprintf(range, sizeof range, " <= %" PRId64, max);
  snprintf(form, nform, "an integer%s", range);
  snprintf(brief, nbrief, "<int%s>", range);
}

static void DoubleForm(double min, double max, char *form, size_t nform,
                       char *brief, size_t nbrief)
{
  char range[96] = "";
  int lo = isfinite(min) && min != -DBL_MAX;
  int hi = isfinite(max) && max != DBL_MAX;
  if (lo && hi)
    snprintf(range, sizeof range, " in [%g, %g]", min, max);
  else if (lo)
    snprintf(range, sizeof range, " >= %g", min);
  else if (hi)
    snprintf(range, sizeof range, " <= %g", max);
  snprintf(form, nform, "a real number%s", range);
  snprintf(brief, nbrief, "<real%s>", range);
}

/* ---- typed getters --------------------------------------------------------- */

int FsdpOptsGetInt(FsdpOpts db, const char *group, const char *name,
                   const char *help, int64_t def, int64_t min, int64_t max,
                   int64_t *value)
{
  FSDP_ASSERT(db && name && value);
  name = StripDash(name);
  char form[128], brief[128], defs[32];
  IntForm(min, max, form, sizeof form, brief, sizeof brief);
  snprintf(defs, sizeof defs, "%" PRId64, def);
  OptGiven *g;
  /* the default also on error (opts.h) */
  *value = def;
  FSDP_CALL(LookupValue(db, group, name, help, brief, defs, form, &g));
  if (!g) return FSDP_SUCCESS;
  int64_t v;
  if (!ParseInt(g->value, &v))
    GIVEN_ERROR(g, "option -%s: '%s' is not an integer (expected %s)",
               name, g->value, form);
  if (v < min || v > max) return OutOfRange(g, name, form);
  *value = v;
  return FSDP_SUCCESS;
}

int FsdpOptsGetSize(FsdpOpts db, const char *group, const char *name,
                    const char *help, size_t def, size_t *value)
{
  static const char form[] =
      "a byte size such as 4096, 64k, 64M or 2G; k/M/G/T are powers of 1024";
  FSDP_ASSERT(db && name && value);
  name = StripDash(name);
  char defs[32];
  FormatSize(def, defs, sizeof defs);
  OptGiven *g;
  /* the default also on error (opts.h) */
  *value = def;
  FSDP_CALL(LookupValue(db, group, name, help, "<size>", defs, form, &g));
  if (!g) return FSDP_SUCCESS;
  size_t v;
  if (!ParseSize(g->value, &v))
    GIVEN_ERROR(g, "option -%s: '%s' is not a byte size (expected %s)",
               name, g->value, form);
  *value = v;
  return FSDP_SUCCESS;
}

int FsdpOptsGetDouble(FsdpOpts db, const char *group, const char *name,
                      const char *help, double def, double min, double max,
                      double *value)
{
  FSDP_ASSERT(db && name && value);
  name = StripDash(name);
  char form[128], brief[128], defs[32];
  DoubleForm(min, max, form, sizeof form, brief, sizeof brief);
  snprintf(defs, sizeof defs, "%g", def);
  OptGiven *g;
  /* the default also on error (opts.h) */
  *value = def;
  FSDP_CALL(LookupValue(db, group, name, help, brief, defs, form, &g));
  if (!g) return FSDP_SUCCESS;
  char *end;
  errno = 0;
  double v = strtod(g->value, &end);
  if (!g->value[0] || isspace((unsigned char)g->value[0]) || *end != '\0' ||
      isnan(v) || (errno == ERANGE && fabs(v) > 1))
    GIVEN_ERROR(g,
               "option -%s: '%s' is not a real number (expected %s)", name,
               g->value, form);
  if (v < min || v > max) return OutOfRange(g, name, form);
  *value = v;
  return FSDP_SUCCESS;
}

int FsdpOptsGetBool(FsdpOpts db, const char *group, const char *name,
                    const char *help, int def, int *value)
{
  FSDP_ASSERT(db && name && value);
  name = StripDash(name);
  OptGiven *g;
  FSDP_CALL(Lookup(db, group, name, help, "<bool>", def ? "true" : "false", 1,
                   &g));
  *value = def ? 1 : 0;
  if (!g) return FSDP_SUCCESS;
  if (!g->value) {
    *value = 1; /* a bare -flag */
    return FSDP_SUCCESS;
  }
  int v;
  if (!ParseBool(g->value, &v))
    GIVEN_ERROR(g,
               "option -%s: '%s' is not a boolean (expected -%s alone, or "
               "-%s followed by 1/0, true/false, yes/no or on/off)",
               name, g->value, name, name);
  *value = v;
  return FSDP_SUCCESS;
}

int FsdpOptsGetString(FsdpOpts db, const char *group, const char *name,
                      const char *help, const char *def, const char **value)
{
  FSDP_ASSERT(db && name && value);
  name = StripDash(name);
  char expected[160];
  snprintf(expected, sizeof expected, "-%s STRING", name);
  OptGiven *g;
  /* the default also on error (opts.h) */
  *value = def;
  FSDP_CALL(LookupValue(db, group, name, help, "<string>",
                        def ? def : "(none)", expected, &g));
  if (!g) return FSDP_SUCCESS;
  *value = g->value;
  return FSDP_SUCCESS;
}

int FsdpOptsGetEnum(FsdpOpts db, const char *group, const char *name,
                    const char *help, const char *const *choices,
                    int def_index, int *index)
{
  FSDP_ASSERT(db && name && choices && index);
  name = StripDash(name);
  int n = 0;
  while (choices[n]) n++;
  FSDP_ASSERT(n > 0);
  /* "none, backward, both" for messages, "<none|backward|both>" for -help */
  char list[512] = "", brief[512] = "<";
  for (int i = 0; i < n; i++) {
    size_t l = strlen(list), bl = strlen(brief);
    snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", choices[i]);
    snprintf(brief + bl, sizeof brief - bl, "%s%s", i ? "|" : "", choices[i]);
  }
  size_t bl = strlen(brief);
  snprintf(brief + bl, sizeof brief - bl, ">");
  const char *defs =
      (def_index >= 0 && def_index < n) ? choices[def_index] : "(none)";
  char expected[sizeof list + 16];
  snprintf(expected, sizeof expected, "one of: %s", list);
  OptGiven *g;
  /* the default also on error (opts.h) */
  *index = def_index;
  FSDP_CALL(LookupValue(db, group, name, help, brief, defs, expected, &g));
  if (!g) return FSDP_SUCCESS;
  for (int i = 0; i < n; i++)
    if (!strcasecmp(g->value, choices[i])) {
      *index = i;
      return FSDP_SUCCESS;
    }
  GIVEN_ERROR(g, "option -%s: '%s' is not one of: %s", name,
             g->value, list);
}

/* ---- unknown options, help, leftovers, run files ----------------------------- */

/* Optimal string alignment distance (a swap of neighbours counts 1, so
 * -stpes is one step from -steps). */
static int EditDistance(const char *a, const char *b)
{
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return INT_MAX;
  int d[65][65];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int cost = a[i - 1] != b[j - 1];
      int best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

int FsdpOptsCheckUnknown(FsdpOpts db)
{
  FSDP_ASSERT(db);
  for (int i = 0; i < db->ngiven; i++) {
    const OptGiven *g = &db->given[i];
    const char *name = g->name;
    if (FindReg(db, name)) continue;
    /* Suggest the closest registered name when it is close enough to be
     * a typo: one edit for short names, up to a third of the length. */
    size_t len = strlen(name);
    int limit = len <= 4 ? 1 : (int)(len / 3 > 2 ? len / 3 : 2);
    if (limit > 3) limit = 3;
    const char *best = NULL;
    int bestd = INT_MAX;
    for (int j = 0; j < db->nreg; j++) {
      int d = EditDistance(name, db->reg[j].name);
      if (d < bestd) bestd = d, best = db->reg[j].name;
    }
    if (best && bestd <= limit)
      GIVEN_ERROR(g,
                  "unknown option -%s (did you mean -%s?); -help lists every "
                  "option",
                  name, best);
    /* [Note: shared options] */
    if (g->shared) continue;
    GIVEN_ERROR(g, "unknown option -%s; -help lists every option", name);
  }
  return FSDP_SUCCESS;
}

int FsdpOptsPrintHelp(FsdpOpts db, FILE *out, const char *program_help)
{
  FSDP_ASSERT(db);
  if (db->rank != 0) return FSDP_SUCCESS;
  if (!out) out = stdout;
  if (program_help && program_help[0]) {
    fputs(program_help, out);
    if (program_help[strlen(program_help) - 1] != '\n') fputc('\n', out);
    fputc('\n', out);
  }
  fprintf(out,
          "Options (-name value or -flag; also read from FSDP_OPTIONS and "
          "-options_file;\nlater ones win), with default and, when given, "
          "current value:\n");
  /* Left column "-name <form>" aligned up to a width; longer ones put
   * their help on the next line. */
  const int maxw = 34;
  int width = 0;
  for (int i = 0; i < db->nreg; i++) {
    int w = 1 + (int)strlen(db->reg[i].name) + 1 + (int)strlen(db->reg[i].brief);
    if (w > width && w <= maxw) width = w;
  }
  for (int i = 0; i < db->nreg; i++) {
    const char *group = db->reg[i].group;
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = !strcmp(db->reg[j].group, group);
    if (seen) continue; /* its group was printed at its first member */
    fprintf(out, "\n%s:\n", group);
    for (int j = i; j < db->nreg; j++) {
      const OptReg *r = &db->reg[j];
      if (strcmp(r->group, group)) continue;
      char left[1024];
      snprintf(left, sizeof left, "-%s %s", r->name, r->brief);
      if ((int)strlen(left) > width)
        fprintf(out, "  %s\n  %-*s  ", left, width, "");
      else
        fprintf(out, "  %-*s  ", width, left);
      fprintf(out, "%s (default %s", r->help, r->def);
      const OptGiven *g = FindGiven(db, r->name);
      if (g) fprintf(out, "; current %s", g->value ? g->value : "true");
      fprintf(out, ")\n");
    }
  }
  fflush(out);
  return FSDP_SUCCESS;
}

int FsdpOptsReportLeft(FsdpOpts db, FILE *out, int *nleft)
{
  FSDP_ASSERT(db);
  int n = 0;
  for (int i = 0; i < db->ngiven; i++) n += !db->given[i].used;
  if (nleft) *nleft = n;
  db->left_reported = 1;
  if (db->rank != 0 || !out) return FSDP_SUCCESS;
  if (n == 0) {
    fprintf(out, "fsdp: every option given was read\n");
  } else {
    fprintf(out, "fsdp: %d option%s given but never read (misspelled, or "
            "meant for another program?):\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < db->ngiven; i++) {
      const OptGiven *g = &db->given[i];
      if (g->used) continue;
      fprintf(out, "  -%s%s%s", g->name, g->value ? " " : "",
              g->value ? g->value : "");
      if (g->origin) fprintf(out, "  (%s)", g->origin);
      fputc('\n', out);
    }
  }
  fflush(out);
  return FSDP_SUCCESS;
}

/* Append s to buf[*len..size), truncating; buf stays NUL-terminated. */
static void Append(char *buf, size_t size, size_t *len, const char *s)
{
  size_t n = strlen(s);
  if (*len + 1 >= size) return;
  if (n > size - 1 - *len) n = size - 1 - *len;
  memcpy(buf + *len, s, n);
  *len += n;
  buf[*len] = '\0';
}

int FsdpOptsToString(FsdpOpts db, char *buf, size_t size)
{
  FSDP_ASSERT(db && buf);
  if (size == 0) return FSDP_SUCCESS;
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < db->ngiven; i++) {
    const OptGiven *g = &db->given[i];
    if (i) Append(buf, size, &len, " ");
    Append(buf, size, &len, "-");
    Append(buf, size, &len, g->name);
    if (!g->value) continue;
    Append(buf, size, &len, " ");
    /* Quote what the tokenizer would otherwise split or read as an option,
     * so the string can go back in as FSDP_OPTIONS or an options file. */
    const char *v = g->value;
    int quote = !v[0] || v[0] == '#' || IsOptionStart(v, NULL) ||
                strpbrk(v, " \t\n\r\f\v\"'") != NULL;
    if (!quote) {
      Append(buf, size, &len, v);
    } else {
      const char *q = strchr(v, '"') ? "'" : "\"";
      Append(buf, size, &len, q);
      Append(buf, size, &len, v);
      Append(buf, size, &len, q);
    }
  }
  return FSDP_SUCCESS;
}
