// Whether the CUDA kernel tests run under the CPU emulator (tools/cuda_emu, `make test-cuda-emu`: a
// KVLM_CUDA_EMU build run with KVLM_CUDA_EMU=1). There the heaviest loops take a representative subset of
// their shapes - every kernel, dtype, GQA ratio, split/unsplit path and partial tile stays covered, with
// fewer long contexts - since emulation runs every GPU thread on one CPU core. Always false in GPU builds.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace kvlm::test {

inline bool cuda_emulated() {
#ifdef KVLM_CUDA_EMU
    const char* value = std::getenv("KVLM_CUDA_EMU");
    return value && std::strcmp(value, "0") != 0;
#else
    return false;
#endif
}

// Attention scratch rows for a test asking for `rows`: no more than `enough` (what the launcher can use for
// these arguments: n * n_heads * its largest split count). The split choice, hence the code path, is the
// same; a 1 GB scratch allocated and poisoned per call made three attention tests take minutes on an H200.
inline int64_t cuda_test_scratch_rows(int64_t rows, int64_t enough) {
    return enough < rows ? enough : rows;
}

}  // namespace kvlm::test
