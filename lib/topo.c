#include "topo.h"  /* placeholder: being written */
