#include "fsdp.h"
int main(void) { return 0; }
