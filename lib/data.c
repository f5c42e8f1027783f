#include "data.h"  /* placeholder: being written */
