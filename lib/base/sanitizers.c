/* sanitizers.c: built into libfsdp by configure --enable-sanitizers only.
 *
 * LeakSanitizer reports leaks at exit, with the stack of each allocation,
 * and tests/sanitizers/lsan.supp suppresses those made inside OpenMPI and
 * HDF5 by the library they were made in.  OpenMPI dlopens its components
 * and dlcloses them (in MPI_Init for those not selected, in MPI_Finalize
 * for the rest): by exit their frames read "<unknown module>", which no
 * suppression can name.  So in this build dlclose keeps every library
 * loaded: this definition takes the place of libc's for the whole process
 * (libfsdp comes before libc in the lookup order).  Nothing in fsdp relies
 * on a library being unloaded. */
#include <dlfcn.h>

int dlclose(void *handle)
{
  (void)handle;
  return 0;
}
