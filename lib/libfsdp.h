/* libfsdp.h: the public interface of libfsdp, one include for programs. */
#ifndef LIBFSDP_H
#define LIBFSDP_H

#include "base/error.h"
#include "base/init.h"
#include "base/mem.h"
#include "base/dtype.h"
#include "device/device.h"
#include "device/cuda_util.h"
#include "base/opts.h"
#include "comm/topo.h"
#include "runtime/flatparam.h"
#include "comm/stream.h"
#include "comm/coll.h"
#include "io/data.h"
#include "runtime/fsdp.h"
#include "model/gpt.h"
#include "runtime/optim.h"
#include "io/ckpt.h"
#include "io/metrics.h"
#include "comm/trace.h"
#include "driver/train.h"

#endif
