// Helpers shared by the CUDA parity tests (tests/cuda/: the kernel cases and the backend-against-CPU ones): the skip-or-run device checks and the element-wise comparison. CUDA builds only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace kvlm::test {

// True when a CUDA device can run the kernels; otherwise prints "SKIPPED: no CUDA device (why)".
bool have_cuda_device();
// have_cuda_device() and cuBLAS loadable (the GEMM cases); otherwise prints why they are skipped.
bool have_cuda_cublas();
// |got - want| <= atol + rtol * |want| everywhere (NaN never passes); reports the first mismatches.
void check_close(const float* got, const float* want, size_t n, float atol, float rtol, const std::string& what);
// The same over two vectors of the same size (logits of the two backends).
void check_close(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol,
                 const std::string& what);
// n token ids below n_vocab (std::mt19937 with `seed`).
std::vector<int32_t> random_tokens(int32_t n, int32_t n_vocab, uint32_t seed);
// n uniform values in [lo, hi) stored in `dtype` (random_floats, then rounded).
std::vector<uint8_t> random_typed(size_t n, DType dtype, float lo, float hi, uint64_t seed);

}  // namespace kvlm::test
