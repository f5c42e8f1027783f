/* json.h: a small JSON writer (the summaries of fsdp-train and fsdp-plan).
 *
 *   FsdpJson j;
 *   FSDP_CALL(FsdpJsonCreate(&j));
 *   FsdpJsonBeginObject(j, NULL);          top level: no key
 *   FsdpJsonInt(j, "world_size", 4);
 *   FsdpJsonBeginArray(j, "losses");
 *   FsdpJsonReal(j, NULL, 3.5);            in an array: no key
 *   FsdpJsonEndArray(j);
 *   FsdpJsonEndObject(j);
 *   FSDP_CALL(FsdpJsonFinish(j));          the document is complete and whole
 *   puts(FsdpJsonText(j));
 *   FSDP_CALL(FsdpJsonDestroy(&j));
 *
 * The text is one line in the style the summaries always had: ", " between
 * members, ": " after keys.  Commas are placed by the writer (before every
 * member but a container's first), so a trailing comma cannot be written.
 * Strings are escaped (quote, backslash, control characters; other bytes,
 * UTF-8 included, are written as they are).  Reals are written with the
 * fewest significant digits that read back to the same double, so a value
 * round-trips; JSON has no NaN or infinity, so a non-finite real is
 * written as null (what JavaScript's JSON.stringify does) and readers see
 * "no value" rather than a parse error.
 *
 * [Note: JSON errors at the end] The value functions return nothing: a
 * summary writes some fifty members and checking each would bury the keys
 * the reader wants to see.  The first failure (out of memory; a key inside
 * an array or at the top level, a value without a key inside an object, an
 * End that does not match its Begin, nesting deeper than FSDP_JSON_MAX_DEPTH,
 * a second top-level value) is remembered, later calls do nothing, and
 * FsdpJsonFinish returns it -- FSDP_ERR_MEM or FSDP_ERR_INTERNAL, with a
 * message naming the key -- as it does for a document left unclosed.
 */
#ifndef FSDP_JSON_H
#define FSDP_JSON_H

#include <stdint.h>

#define FSDP_JSON_MAX_DEPTH 16

typedef struct FsdpJson_ *FsdpJson;

int FsdpJsonCreate(FsdpJson *j);
/* Accepts NULL; sets *j = NULL. */
int FsdpJsonDestroy(FsdpJson *j);

/* key: the member's name inside an object, NULL at the top level and in
 * arrays ([Note: JSON errors at the end]). */
void FsdpJsonBeginObject(FsdpJson j, const char *key);
void FsdpJsonEndObject(FsdpJson j);
void FsdpJsonBeginArray(FsdpJson j, const char *key);
void FsdpJsonEndArray(FsdpJson j);
void FsdpJsonInt(FsdpJson j, const char *key, int64_t v);
void FsdpJsonUint(FsdpJson j, const char *key, uint64_t v);
/* true or false. */
void FsdpJsonBool(FsdpJson j, const char *key, int v);
/* Shortest round-trip digits; NaN and infinities as null. */
void FsdpJsonReal(FsdpJson j, const char *key, double v);
/* Escaped; NULL is written as null. */
void FsdpJsonString(FsdpJson j, const char *key, const char *v);

/* FSDP_SUCCESS when one complete value was written without error, else
 * the first error (raised with its message). */
int FsdpJsonFinish(FsdpJson j);

/* The text written so far, NUL-terminated, owned by j. */
const char *FsdpJsonText(FsdpJson j);

#endif
