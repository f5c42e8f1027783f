/* h5util.h: the HDF5 adapter of fsdp's error convention (error.h), and
 * small helpers the checkpoint (ckpt.c) and run file (metrics.c) share.
 *
 * [Note: HDF5 errors] HDF5 prints its whole error stack to stderr by
 * default on every failing call, including calls we expect to fail (probing
 * whether a file is HDF5, whether an attribute exists).  fsdp turns that
 * off once (FsdpHdf5Init: H5Eset_auto2(H5E_DEFAULT, NULL, NULL)) and every
 * HDF5 return code goes through FSDP_CALL_HDF5 / FSDP_HDF5_GOTO instead,
 * which raise FSDP_ERR_HDF5 with the failed call and a one-line summary of
 * the stack (the API function and the innermost cause).  The summary must
 * be taken right after the failed call: the next HDF5 API call clears the
 * stack.
 */
#ifndef FSDP_H5UTIL_H
#define FSDP_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Not collective; idempotent.  Turns HDF5's automatic error printing off
 * (see [Note: HDF5 errors]). */
void FsdpHdf5Init(void);

/* One line summarising the current HDF5 error stack into buf ("" when the
 * stack is empty). */
void FsdpHdf5ErrorSummary(char *buf, size_t size);

/* Raise FSDP_ERR_HDF5 for the failed call `expr` (text) with the stack
 * summary; returns the code.  Use through the macros below. */
int FsdpHdf5Raise(const char *file, int line, const char *func, const char *expr);

/* Relay a negative HDF5 return (herr_t or hid_t) as FSDP_ERR_HDF5.
 * expr may be an assignment: FSDP_CALL_HDF5(f = H5Fopen(...)). */
#define FSDP_CALL_HDF5(expr)                                               \
  do {                                                                     \
    if ((expr) < 0) return FsdpHdf5Raise(__FILE__, __LINE__, __func__, #expr); \
  } while (0)

/* Same, for functions that hold handles: sets the int `err` in scope and
 * jumps to the label `done`, where the function closes what it opened. */
#define FSDP_HDF5_GOTO(expr)                                               \
  do {                                                                     \
    if ((expr) < 0) {                                                      \
      err = FsdpHdf5Raise(__FILE__, __LINE__, __func__, #expr);            \
      goto done;                                                           \
    }                                                                      \
  } while (0)

/* Relay an fsdp error code the same way (sets err, goes to done). */
#define FSDP_GOTO(expr)                                                    \
  do {                                                                     \
    int fsdp_goto_err_ = (expr);                                           \
    if (fsdp_goto_err_ != FSDP_SUCCESS) {                                  \
      err = FsdpErrorTrace(__FILE__, __LINE__, __func__, fsdp_goto_err_);  \
      goto done;                                                           \
    }                                                                      \
  } while (0)

/* Close any kind of HDF5 identifier if it is valid (>= 0) and set it to
 * -1; returns a negative value if closing failed.  For cleanup paths. */
herr_t FsdpHdf5Close(hid_t *id);

/* Attribute helpers on an object (file, group or dataset).  Writers create
 * the attribute (scalar, or a fixed-length string); readers return a
 * negative value when the attribute is missing or of another class, with
 * the HDF5 error stack set (callers that probe use them without the
 * macros).  In parallel HDF5, writers are collective on the file's comm
 * and every rank passes the same value. */
herr_t FsdpHdf5AttrWriteInt64(hid_t obj, const char *name, int64_t v);
herr_t FsdpHdf5AttrWriteDouble(hid_t obj, const char *name, double v);
herr_t FsdpHdf5AttrWriteString(hid_t obj, const char *name, const char *s);
herr_t FsdpHdf5AttrReadInt64(hid_t obj, const char *name, int64_t *v);
herr_t FsdpHdf5AttrReadDouble(hid_t obj, const char *name, double *v);
/* Reads a fixed- or variable-length string attribute holding one string
 * (scalar or one element) into buf (truncated to size, always
 * terminated). */
herr_t FsdpHdf5AttrReadString(hid_t obj, const char *name, char *buf, size_t size);

/* Current time as ISO 8601 with the UTC offset, e.g.
 * 2025-05-01T12:34:56+0200. */
void FsdpIsoTime(char *buf, size_t size);

#endif
