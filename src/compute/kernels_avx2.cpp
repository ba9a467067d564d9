// The AVX2/FMA/F16C kernel set (compiled with those flags only; see kernels_x86.inc and the Makefile).
#define KVLM_KERNELS_NAME kAvx2Kernels
#define KVLM_VNNI 0
#define KVLM_ROW_PAIRS 0
#define KVLM_FLOAT_TOKENS 3
#define KVLM_Q_TOKENS 2
#include "compute/kernels_x86.inc"
