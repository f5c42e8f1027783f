/* opts.h: PETSc-style options database.
 *
 * Sources, lowest precedence first (a later value of the same option wins):
 *   1. the environment variable FSDP_OPTIONS (split on white space),
 *   2. the command line, left to right; `-options_file FILE` is replaced
 *      by the options in FILE at the place where it appears, so options
 *      after it override the file and options before it are overridden.
 * An options file holds one option per line (`-name value` or `-flag`),
 * `#` starts a comment, blank lines are ignored; files may be given
 * several times and may not nest more than 8 deep.  Files are read by
 * rank 0 and broadcast, so every rank sees the same database.
 *
 * A token `-name` starts an option when name begins with a letter; the
 * next token is its value unless it too starts an option, so `-steps -3`
 * gives -steps the value "-3" (which the getter then rejects).
 *
 * Getters register the option (component group, name, default, help) and
 * return its value.  Parsing failures are FSDP_ERR_USAGE errors that name
 * the option, the value and the accepted form.  After a program has read
 * every option it understands it calls FsdpOptsCheckUnknown: an option
 * given but never registered is an error (a typo must not be silently
 * ignored).  `-help` makes FsdpOptsHelpRequested true; the program then
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

/* Insert or replace an option programmatically (value may be NULL for a
 * flag).  Used for built-in defaults of a program and by tests. */
int FsdpOptsSetValue(FsdpOpts db, const char *name, const char *value);

/* Typed getters.  group: component heading for -help (e.g. "Topology");
 * name without the leading dash; help: one line.  Each returns the given
 * value or the default.  Ranges are inclusive. */
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

/* 1 if the option was given (any source). */
int FsdpOptsHas(FsdpOpts db, const char *name);

/* Usage error naming the first option given but never registered. */
int FsdpOptsCheckUnknown(FsdpOpts db);

int FsdpOptsHelpRequested(FsdpOpts db);
/* Print every registered option grouped by component with its default,
 * current value and help (rank 0 of the creating comm prints). */
int FsdpOptsPrintHelp(FsdpOpts db, FILE *out, const char *program_help);

/* Print options given but never read (rank 0 prints); returns count in
 * *nleft when not NULL. */
int FsdpOptsReportLeft(FsdpOpts db, FILE *out, int *nleft);

/* Write "-name value" pairs of every given option, space separated, into
 * buf (for run files); truncates to size. */
int FsdpOptsToString(FsdpOpts db, char *buf, size_t size);

#endif
