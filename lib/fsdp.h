/* fsdp.h: the public interface of libfsdp, one include for programs. */
#ifndef FSDP_H
#define FSDP_H

#include "error.h"
#include "init.h"
#include "mem.h"
#include "dtype.h"
#include "opts.h"
#include "topo.h"
#include "flatparam.h"
#include "stream.h"
#include "coll.h"
#include "data.h"

#endif
