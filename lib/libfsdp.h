/* libfsdp.h: the public interface of libfsdp, one include for programs. */
#ifndef LIBFSDP_H
#define LIBFSDP_H

#include "error.h"
#include "init.h"
#include "mem.h"
#include "dtype.h"
#include "device.h"
#include "cuda_util.h"
#include "opts.h"
#include "topo.h"
#include "flatparam.h"
#include "stream.h"
#include "coll.h"
#include "data.h"
#include "fsdp.h"
#include "gpt.h"
#include "optim.h"
#include "ckpt.h"
#include "metrics.h"
#include "trace.h"
#include "train.h"

#endif
