#include "stream.h"  /* placeholder: being written */
