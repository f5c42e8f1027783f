/* coll_backend.h: what a collective back-end gives coll.c (not installed).
 *
 * [Note: collective backends] The backend is one of the two truly
 * polymorphic parts of fsdp, so it gets a small ops table (CollBackendOps),
 * one file per back-end: coll_mpi.c (host buffers, always built) and
 * coll_nccl.c (device buffers, built by configure --with-cuda; automake
 * conditional FSDP_CUDA).  Everything around the three blocking
 * collectives is shared in coll.c: argument checks, counting at issue
 * ([Note: byte accounting] in coll.h), the scalar reductions, and the
 * async variants, which by default enqueue a task that runs the blocking
 * op on the stream thread.  A back-end whose collectives are asynchronous
 * by themselves (NCCL) issues them its own way (issue_async) and may let a
 * device stream wait for them (wait_device); the public functions do not
 * change.  A build without CUDA links coll_nccl_none.c, whose
 * FsdpCollNcclOps() is NULL: coll.c turns that into the usage error for
 * the NCCL backend, with no #ifdef in shared code.  What coll.c and the
 * back-ends both need (names for messages, the scale split, MPI waits) is
 * in coll_common.h, below both ([Note: no calls back into coll.c]).
 */
#ifndef FSDP_COLL_BACKEND_H
#define FSDP_COLL_BACKEND_H

#include "comm/coll.h"

typedef struct {
  const char *name;
  /* Not collective.  *state: the back-end's own; on failure create leaves
   * nothing behind (*state NULL). */
  int (*create)(void **state);
  /* Best effort, every step attempted; the first failure is returned.
   * With NCCL: waits for the device and destroys the communicators. */
  int (*destroy)(void *state);
  /* The blocking collectives on raw buffers, arguments already checked
   * (coll.h gives their contracts). */
  int (*all_gather)(void *state, const FsdpGroup *g, const void *send, void *recv,
                    size_t count, FsdpDtype dt);
  int (*reduce_scatter)(void *state, const FsdpGroup *g, void *send, void *recv,
                        size_t count, FsdpDtype dt, float scale);
  int (*all_reduce)(void *state, const FsdpGroup *g, void *buf, size_t count, FsdpDtype dt,
                    float scale);
  /* Optional entries: NULL means the shared behaviour. */
  /* NULL: a task on s runs the blocking collective. */
  int (*issue_async)(void *state, FsdpCollKind kind, const FsdpGroup *g, const void *send,
                     void *recv, size_t count, FsdpDtype dt, float scale, FsdpStream s,
                     FsdpEvent *ev);
  /* NULL: nothing to do (FsdpCollSetCudaStreams, FsdpCollAttach). */
  int (*set_cuda_streams)(void *state, void *comm_stream, void *compute_stream);
  int (*attach)(void *state, const FsdpGroup *g);
  /* *handled = 1 when cuda_stream now waits on the device for ev; 0 lets
   * coll.c wait on the host (NULL: always the host). */
  int (*wait_device)(void *state, FsdpEvent ev, void *cuda_stream, int *handled);
  /* FsdpCollNcclCommCreate / Destroy (NULL: not this back-end's). */
  int (*nccl_comm_create)(const FsdpGroup *g, void **nccl_comm);
  int (*nccl_comm_destroy)(void **nccl_comm);
} CollBackendOps;

const CollBackendOps *FsdpCollMpiOps(void);  /* coll_mpi.c */
/* coll_staged.c: MPI on device buffers through host staging buffers */
const CollBackendOps *FsdpCollStagedOps(void);
/* coll_nccl.c; NULL from coll_nccl_none.c in a build without CUDA. */
const CollBackendOps *FsdpCollNcclOps(void);

#endif
