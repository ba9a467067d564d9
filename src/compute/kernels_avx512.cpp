// The AVX-512 kernel set (F/BW/VL/DQ + VNNI flags; see kernels_x86.inc and the Makefile): the same 256-bit
// code as the AVX2 set with 32 vector registers (bigger tiles) and VNNI integer dot products.
#define KVLM_KERNELS_NAME kAvx512Kernels
#define KVLM_VNNI 1
#define KVLM_ROW_PAIRS 1
#define KVLM_FLOAT_TOKENS 4
#define KVLM_Q_TOKENS 8
#include "compute/kernels_x86.inc"
