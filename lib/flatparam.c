#include "flatparam.h"  /* placeholder: being written */
