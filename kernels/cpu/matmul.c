#include "kernels.h"  /* placeholder: being written */
