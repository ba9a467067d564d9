#include "support/cuda_kernel_checks.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "support/random_model.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"

namespace kvlm::test {

bool have_cuda_device() {
    std::string why;
    if (cuda_test::device_available(&why)) return true;
    MESSAGE("SKIPPED: no CUDA device (" << why << ")");
    return false;
}

bool have_cuda_cublas() {
    std::string why;
    if (!have_cuda_device()) return false;
    if (cuda_test::cublas_available(&why)) return true;
    MESSAGE("SKIPPED: no CUDA device usable for GEMMs (" << why << ")");
    return false;
}

void check_close(const float* got, const float* want, size_t n, float atol, float rtol, const std::string& what) {
    size_t bad = 0;
    std::ostringstream first;
    double max_err = 0;
    for (size_t i = 0; i < n; i++) {
        float err = std::fabs(got[i] - want[i]);
        if (!(err <= atol + rtol * std::fabs(want[i]))) {
            if (bad < 5) first << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
            bad++;
        }
        if (err == err) max_err = std::max(max_err, double(err));
    }
    INFO(what << ": " << bad << " of " << n << " elements off (max abs error " << max_err << ")\n" << first.str());
    CHECK(bad == 0);
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol,
                 const std::string& what) {
    REQUIRE(got.size() == want.size());
    check_close(got.data(), want.data(), want.size(), atol, rtol, what);
}

std::vector<int32_t> random_tokens(int32_t n, int32_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = int32_t(rng() % uint32_t(n_vocab));
    return tokens;
}

std::vector<uint8_t> random_typed(size_t n, DType dtype, float lo, float hi, uint64_t seed) {
    std::vector<float> f = random_floats(n, lo, hi, seed);
    std::vector<uint8_t> out(dtype_bytes(dtype, n));  // quantized: n a multiple of 32
    convert_from_f32(dtype, f.data(), out.data(), n);
    return out;
}

}  // namespace kvlm::test
#endif  // KVLM_CUDA
