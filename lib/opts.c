#include "opts.h"  /* placeholder: being written */
