#include "coll.h"  /* placeholder: being written */
