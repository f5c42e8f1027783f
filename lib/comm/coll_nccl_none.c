/* coll_nccl_none.c: the NCCL back-end's place in a build without CUDA
 * (configure without --with-cuda): there is none, and coll.c says so when
 * it is asked for ([Note: collective backends] in coll_backend.h). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comm/coll_backend.h"

const CollBackendOps *FsdpCollNcclOps(void) { return NULL; }
