/* opts.h: PETSc-style options database.
 *
 * Sources, lowest precedence first (a later value of the same option wins):
 *   1. the environment variable FSDP_OPTIONS (split on white space),
 *   2. the command line, left to right; `-options_file FILE` is replaced
 *      by the options in FILE at the place where it appears, so options
 *      after it override the file and options before it are overridden.
 * An options file holds one option per line (`-name value` or `-flag`),
 * `#` starts a comment, blank lines are ignored; files may be given
 * several times and may not nest more than 8 deep.  A file must be text
 * (no NUL or control bytes, valid UTF-8, lines below 64 KiB): anything
 * else is a usage error naming FILE:LINE.  Every error about an option
 * given in a file leads with its FILE:LINE, also one a getter or
 * FsdpOptsCheckUnknown finds later.  Rank 0 reads all of
 * it (its environment, its command line, the files) and broadcasts the
 * result, so every rank sees the same database.
 *
 * A token `-name` (or `--name`) starts an option when name begins with a
 * letter; the next token is its value unless it too starts an option, so
 * `-steps -3` gives -steps the value "-3" (which the getter then rejects).
 * `-name=value` also works.  Any other token where an option should start
 * (a stray positional argument) is a usage error.  In FSDP_OPTIONS and in
 * files, quotes ('...' or "...") group a value with spaces and make it a
 * value even if it starts with a dash; `#` starting a token ends the line.
 *
 * Getters register the option (component group, name, default, help) and
 * return its value.  Parsing failures are FSDP_ERR_USAGE errors that name
 * the option, the value and the accepted form.  After a program has read
 * every option it understands it calls FsdpOptsCheckUnknown: an option
 * given but never registered is an error (a typo must not be silently
 * ignored) -- except one from FSDP_OPTIONS, which every fsdp program reads:
 * there an option this program does not know is left for the others
 * (-options_left lists it) unless it is a near miss of one it knows
 * (opts.c [Note: shared options]).  `-help` makes FsdpOptsHelpRequested true; the program then
 * calls FsdpOptsPrintHelp after registering everything.  `-options_left`
 * makes FsdpOptsDestroy/FsdpOptsReportLeft list options given but never
 * read.
 */
#ifndef FSDP_OPTS_H
#define FSDP_OPTS_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct FsdpOpts_ *FsdpOpts;

/* Collective on comm: build the database from FSDP_OPTIONS and argv
 * (argv[0] is skipped); files are read on rank 0 and broadcast.  A missing
 * or unreadable options file is a usage error naming the file. */
int FsdpOptsCreate(MPI_Comm comm, int argc, char **argv, FsdpOpts *db);

/* Not collective.  Frees the database; accepts NULL; sets *db = NULL. */
int FsdpOptsDestroy(FsdpOpts *db);

/* Not collective.  Insert or replace an option programmatically (value
 * may be NULL for a flag; a leading dash on name is ignored).  Used for
 * built-in defaults of a program and by tests.  Strings returned earlier
 * by FsdpOptsGetString stay valid. */
int FsdpOptsSetValue(FsdpOpts db, const char *name, const char *value);

/* Typed getters, not collective (all ranks hold the same database, so a
 * usage error is raised identically on every rank).  group: component
 * heading for -help (e.g. "Topology"); name without the leading dash; help:
 * one line.  Each returns the given value or the default (also on error).
 * Ranges are inclusive.  Integers also accept exact forms such as 1e6.
 * Reading an option again, from any component, is cheap and returns the
 * same value; -help lists it once, under its first group. */
int FsdpOptsGetInt(FsdpOpts db, const char *group, const char *name,
                   const char *help, int64_t def, int64_t min, int64_t max,
                   int64_t *value);
/* Byte sizes: an integer with optional suffix k, M, G, T (powers of 1024,
 * case-insensitive, optional trailing B/iB), e.g. 64M. */
int FsdpOptsGetSize(FsdpOpts db, const char *group, const char *name,
                    const char *help, size_t def, size_t *value);
int FsdpOptsGetDouble(FsdpOpts db, const char *group, const char *name,
                      const char *help, double def, double min, double max,
                      double *value);
/* Booleans: `-name` alone is true; values 1/0, true/false, yes/no, on/off. */
int FsdpOptsGetBool(FsdpOpts db, const char *group, const char *name,
                    const char *help, int def, int *value);
/* Strings: *value points into the database (valid until destroy) or is
 * def.  def may be NULL (shown as "(none)"). */
int FsdpOptsGetString(FsdpOpts db, const char *group, const char *name,
                      const char *help, const char *def, const char **value);
/* Enumerations: choices is a NULL-terminated list; *index gets the chosen
 * position.  Errors list every allowed value. */
int FsdpOptsGetEnum(FsdpOpts db, const char *group, const char *name,
                    const char *help, const char *const *choices,
                    int def_index, int *index);

/* 1 if the option was given (any source).  Does not register the option
 * nor count as reading it. */
int FsdpOptsHas(FsdpOpts db, const char *name);

/* Usage error naming the first option given but never registered. */
int FsdpOptsCheckUnknown(FsdpOpts db);

int FsdpOptsHelpRequested(FsdpOpts db);
/* Print every registered option grouped by component with its default,
 * current value and help (rank 0 of the creating comm prints). */
int FsdpOptsPrintHelp(FsdpOpts db, FILE *out, const char *program_help);

/* Print options given but never read (rank 0 prints; out NULL: count
 * only); returns count in *nleft when not NULL.  After this, destroy does
 * not print them again. */
int FsdpOptsReportLeft(FsdpOpts db, FILE *out, int *nleft);

/* Write "-name value" pairs of every given option, space separated, into
 * buf (for run files); truncates to size.  Values that need it are quoted,
 * so the string reads back as FSDP_OPTIONS or an options file line. */
int FsdpOptsToString(FsdpOpts db, char *buf, size_t size);

#endif
