/* libfsdp.h: the public interface of libfsdp, one include for programs.
 *
 * Installed as $(includedir)/fsdp/libfsdp.h with the headers below in their
 * layer folders; a program compiles with the MPI compiler wrapper and
 * pkg-config (fsdp.pc):  mpicc prog.c $(pkg-config --cflags --libs fsdp).
 * Only public headers belong here: one that is not installed (e.g.
 * device/cuda_util.h, io/h5util.h) would break every program outside the
 * tree (tests/test_install.sh builds one). */
#ifndef LIBFSDP_H
#define LIBFSDP_H

#include "base/error.h"
#include "base/init.h"
#include "base/mem.h"
#include "base/dtype.h"
#include "device/device.h"
#include "base/opts.h"
#include "comm/topo.h"
#include "runtime/flatparam.h"
#include "comm/stream.h"
#include "comm/coll.h"
#include "io/data.h"
#include "runtime/fsdp.h"
#include "model/model.h"
#include "model/convert.h"
#include "model/family.h"
#include "model/transformer.h"
#include "model/gpt/gpt.h"
#include "model/llama/llama.h"
#include "runtime/optim.h"
#include "io/ckpt.h"
#include "io/metrics.h"
#include "io/tokenizer.h"
#include "comm/trace.h"
#include "comm/flight.h"
#include "plan/profile.h"
#include "plan/steptime.h"
#include "plan/probe.h"
#include "plan/describe.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "driver/train.h"
#include "driver/program.h"

#endif
