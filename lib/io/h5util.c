/* h5util.c: HDF5 error adapter and attribute helpers (see h5util.h). */
#include "io/h5util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void FsdpHdf5Init(void)
{
  static int done = 0;
  if (done) return;
  /* [Note: HDF5 errors] */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  done = 1;
}

typedef struct {
  int n;
  char first[256], last[256];
} StackWalk;

static herr_t WalkEntry(unsigned n, const H5E_error2_t *e, void *ctx)
{
  StackWalk *w = ctx;
  char minor[128] = "";
  H5Eget_msg(e->min_num, NULL, minor, sizeof minor);
  char *dst = n == 0 ? w->first : w->last;
  snprintf(dst, sizeof w->first, "%s: %s%s%s", e->func_name ? e->func_name : "?",
           e->desc ? e->desc : "", minor[0] ? " -- " : "", minor);
  w->n = (int)n + 1;
  return 0;
}

void FsdpHdf5ErrorSummary(char *buf, size_t size)
{
  if (!size) return;
  buf[0] = '\0';
  /* walk a copy: most API calls clear the default stack on entry */
  hid_t stack = H5Eget_current_stack();
  if (stack < 0) return;
  StackWalk w;
  memset(&w, 0, sizeof w);
  H5Ewalk2(stack, H5E_WALK_DOWNWARD, WalkEntry, &w);
  H5Eclose_stack(stack);
  if (w.n == 0) return;
  if (w.n == 1) snprintf(buf, size, "%s", w.first);
  else snprintf(buf, size, "%s (innermost: %s)", w.first, w.last);
}

int FsdpHdf5Raise(const char *file, int line, const char *func, const char *expr)
{
  char stack[600];
  FsdpHdf5ErrorSummary(stack, sizeof stack);
  return FsdpErrorRaise(file, line, func, FSDP_ERR_HDF5, "%s failed%s%s", expr,
                        stack[0] ? ": " : "", stack);
}

herr_t FsdpHdf5Close(hid_t *id)
{
  if (*id < 0) return 0;
  herr_t r = 0;
  switch (H5Iget_type(*id)) {
  case H5I_FILE: r = H5Fclose(*id); break;
  case H5I_GROUP: r = H5Gclose(*id); break;
  case H5I_DATASET: r = H5Dclose(*id); break;
  case H5I_DATASPACE: r = H5Sclose(*id); break;
  case H5I_DATATYPE: r = H5Tclose(*id); break;
  case H5I_ATTR: r = H5Aclose(*id); break;
  case H5I_GENPROP_LST: r = H5Pclose(*id); break;
  default: r = -1; break;
  }
  *id = -1;
  return r;
}

static herr_t AttrWrite(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
  herr_t r = -1;
  hid_t space = H5Screate(H5S_SCALAR), a = -1;
  if (space < 0) return -1;
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  a = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0) r = H5Awrite(a, mtype, v);
  if (a >= 0 && H5Aclose(a) < 0) r = -1;
  H5Sclose(space);
  return r;
}

herr_t FsdpHdf5AttrWriteInt64(hid_t obj, const char *name, int64_t v)
{
  return AttrWrite(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

herr_t FsdpHdf5AttrWriteDouble(hid_t obj, const char *name, double v)
{
  return AttrWrite(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

herr_t FsdpHdf5AttrWriteString(hid_t obj, const char *name, const char *s)
{
  /* fixed length, NUL padded, UTF-8: h5py reads it as bytes/str, h5dump
   * shows it as a string */
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) return -1;
  herr_t r = H5Tset_size(t, strlen(s) + 1);
  if (r >= 0) r = H5Tset_strpad(t, H5T_STR_NULLTERM);
  if (r >= 0) r = H5Tset_cset(t, H5T_CSET_UTF8);
  if (r >= 0) r = AttrWrite(obj, name, t, t, s);
  H5Tclose(t);
  return r;
}

static herr_t AttrRead(hid_t obj, const char *name, H5T_class_t cls, hid_t mtype, void *v)
{
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return -1;
  herr_t r = -1;
  hid_t t = H5Aget_type(a), s = H5Aget_space(a);
  if (t >= 0 && s >= 0 && H5Tget_class(t) == cls && H5Sget_simple_extent_npoints(s) == 1)
    r = H5Aread(a, mtype, v);
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  H5Aclose(a);
  return r;
}

herr_t FsdpHdf5AttrReadInt64(hid_t obj, const char *name, int64_t *v)
{
  return AttrRead(obj, name, H5T_INTEGER, H5T_NATIVE_INT64, v);
}

herr_t FsdpHdf5AttrReadDouble(hid_t obj, const char *name, double *v)
{
  return AttrRead(obj, name, H5T_FLOAT, H5T_NATIVE_DOUBLE, v);
}

herr_t FsdpHdf5AttrReadString(hid_t obj, const char *name, char *buf, size_t size)
{
  if (size == 0) return -1;
  buf[0] = '\0';
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return -1;
  herr_t r = -1;
  hid_t t = H5Aget_type(a), mt = -1, s = H5Aget_space(a);
  /* one string: H5Aread writes every element, and the buffers below hold
   * one (an array of strings overflowed them: found by tests/fuzz) */
  if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_STRING &&
      H5Sget_simple_extent_npoints(s) == 1) {
    if (H5Tis_variable_str(t) > 0) {
      char *s = NULL;
      mt = H5Tcopy(H5T_C_S1);
      if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &s) >= 0) {
        snprintf(buf, size, "%s", s ? s : "");
        H5free_memory(s);
        r = 0;
      }
    } else {
      size_t n = H5Tget_size(t);
      char *tmp = malloc(n + 1);
      mt = H5Tcopy(t);
      if (tmp && mt >= 0 && H5Aread(a, mt, tmp) >= 0) {
        tmp[n] = '\0';
        snprintf(buf, size, "%s", tmp);
        r = 0;
      }
      free(tmp);
    }
  }
  if (mt >= 0) H5Tclose(mt);
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  H5Aclose(a);
  return r;
}

void FsdpIsoTime(char *buf, size_t size)
{
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  if (!strftime(buf, size, "%Y-%m-%dT%H:%M:%S%z", &tm) && size) buf[0] = '\0';
}
