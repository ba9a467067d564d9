// CUDA decode GEMVs (cuda/gemv.cu) vs the CPU composition they replace: rmsnorm_cpu (when normed) +
// matmul_cpu (one token) + add_bias_cpu + add_cpu (residual), or swiglu_cpu of the gate and up products.
// Random inputs over awkward n_in (1, 7, 577, 1004: scalar paths; 14336: x read from global memory), 1-3
// outputs of different n_out and dtypes in one launch, every launch shape (rows per warp 1/2/4, rows of a
// warp straddling outputs), and weights off 16-byte alignment. Outputs start poisoned (NaN) behind guard
// bands (cuda/cuda_test_guard.h). Without a CUDA device (or in CUDA=0 builds) each case says
// "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "compute/cpu_ops.h"
#include "support/cuda_kernel_checks.h"
#include "support/random_model.h"
#include "util/error.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

#ifndef KVLM_CUDA

TEST_CASE("cuda kernels: gemv parity with the CPU composition") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

namespace {

constexpr float kEps = 1e-5f;
const DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};
const int32_t kInSizes[] = {1, 7, 64, 576, 577, 1004, 1536, 4096, 14336};
const int32_t kOutSizes[] = {1, 3, 192, 576, 1000};

// Tolerance |got - want| <= gemv_atol(n_in) + kGemvRtol * |want|. Both sides multiply the same f32 values
// (f16/bf16 weights convert exactly, x stays f32) with fused multiply-adds, so they differ only in the
// order of summation (CPU: 8 strided lanes; GPU: 32 lanes over 16-byte chunks, then a butterfly), in the
// rms scale's own sum of squares and in expf vs std::exp (SwiGLU). Weights are U(-1, 1) / sqrt(n_in) and
// x_hat is O(1), so outputs are O(1) for every n_in. Replaying the kernel's summation order on the CPU
// gave errors of at most 1% of this tolerance (2.4e-6 at n_in 14336 with norm, bias and residual), so a
// correct kernel passes with ~100x headroom; a kernel that drops one product |w x| (0.25 / sqrt(n_in) on
// average, 2e-3 at n_in 14336) fails on 80-100% of the rows: the "tolerance" case below checks that.
float gemv_atol(int32_t n_in) { return 2e-6f * std::sqrt(float(n_in)); }
constexpr float kGemvRtol = 1e-4f;

// Elements off the tolerance (NaN never passes); the first few go into *first.
size_t count_off(const float* got, const float* want, size_t n, int32_t n_in, std::string* first) {
    const float atol = gemv_atol(n_in);
    size_t bad = 0;
    std::ostringstream s;
    for (size_t i = 0; i < n; i++) {
        if (!(std::fabs(got[i] - want[i]) <= atol + kGemvRtol * std::fabs(want[i]))) {
            if (bad < 5) s << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
            bad++;
        }
    }
    if (first) *first = s.str();
    return bad;
}

void check_gemv_close(const std::vector<float>& got, const std::vector<float>& want, int32_t n_in,
                      const std::string& what) {
    REQUIRE(got.size() == want.size());
    std::string first;
    size_t bad = count_off(got.data(), want.data(), got.size(), n_in, &first);
    INFO(what << ": " << bad << " of " << got.size() << " elements off (atol " << gemv_atol(n_in) << ", rtol "
              << kGemvRtol << ")\n"
              << first);
    CHECK(bad == 0);
}

std::vector<uint8_t> to_dtype(const std::vector<float>& f, DType dtype) {
    std::vector<uint8_t> out(f.size() * dtype_size(dtype));
    convert_from_f32(dtype, f.data(), out.data(), f.size());
    return out;
}

// [n_out, n_in] uniform in +-1/sqrt(n_in), so each product is O(1) whatever n_in.
std::vector<float> random_matrix(int32_t n_out, int32_t n_in, uint64_t seed) {
    const float a = 1.0f / std::sqrt(float(n_in));
    return random_floats(size_t(n_out) * size_t(n_in), -a, a, seed);
}

// x_hat = rmsnorm_cpu(x) * norm_weight, or x when norm_weight is null.
std::vector<float> x_hat_cpu(const std::vector<float>& x, const float* norm_weight) {
    std::vector<float> x_hat = x;
    if (norm_weight) rmsnorm_cpu(x_hat.data(), x.data(), norm_weight, 1, int32_t(x.size()), kEps);
    return x_hat;
}

std::vector<float> product_cpu(const std::vector<uint8_t>& w, DType dtype, int32_t n_out,
                               const std::vector<float>& x_hat) {
    std::vector<float> y(static_cast<size_t>(n_out));
    matmul_cpu(y.data(), x_hat.data(), w.data(), dtype, 1, int64_t(x_hat.size()), n_out, nullptr);
    return y;
}

// One output of a launch: its weights and the host data around it.
struct Output {
    int32_t n_out = 0;
    DType dtype = DType::f32;
    std::vector<uint8_t> weight;  // [n_out, n_in] in dtype
    std::vector<float> bias;      // [n_out]
    std::vector<float> init;      // [n_out]: out before an accumulating launch
};

Output make_output(const std::vector<float>& weight_f32, int32_t n_out, DType dtype, uint64_t seed) {
    Output o;
    o.n_out = n_out, o.dtype = dtype;
    o.weight = to_dtype(weight_f32, dtype);
    o.bias = random_floats(size_t(n_out), -1, 1, seed);
    o.init = random_floats(size_t(n_out), -1, 1, seed + 1);
    return o;
}

// The CPU composition for output o: [init +] (W x_hat [+ bias]).
std::vector<float> reference_output(const Output& o, const std::vector<float>& x_hat, bool bias, bool accumulate) {
    std::vector<float> y = product_cpu(o.weight, o.dtype, o.n_out, x_hat);
    if (bias) add_bias_cpu(y.data(), o.bias.data(), 1, o.n_out);
    if (!accumulate) return y;
    std::vector<float> out = o.init;
    add_cpu(out.data(), y.data(), o.n_out);
    return out;
}

// One launch_gemv over `outputs` (output i has a bias iff bit i of bias_mask), checked against the CPU.
void check_gemv(const std::vector<Output>& outputs, const std::vector<float>& x, const float* norm_weight,
                unsigned bias_mask, bool accumulate, int32_t weight_offset, const std::string& what) {
    const int32_t n_in = int32_t(x.size()), n_outputs = int32_t(outputs.size());
    std::vector<std::vector<float> > got(outputs.size());
    std::vector<float*> outs;
    std::vector<const void*> weights;
    std::vector<DType> dtypes;
    std::vector<const float*> biases;
    std::vector<int32_t> n_outs;
    for (size_t i = 0; i < outputs.size(); i++) {
        const Output& o = outputs[i];
        got[i] = accumulate ? o.init : std::vector<float>(size_t(o.n_out));
        outs.push_back(got[i].data());
        weights.push_back(o.weight.data());
        dtypes.push_back(o.dtype);
        biases.push_back(bias_mask >> i & 1 ? o.bias.data() : nullptr);
        n_outs.push_back(o.n_out);
    }
    cuda_test::gemv_offset_weights(outs.data(), weights.data(), dtypes.data(), biases.data(), n_outs.data(), n_outputs,
                                   x.data(), n_in, norm_weight, kEps, accumulate, weight_offset);
    const std::vector<float> x_hat = x_hat_cpu(x, norm_weight);
    for (size_t i = 0; i < outputs.size(); i++) {
        const Output& o = outputs[i];
        std::ostringstream s;
        s << what << " output " << i << " (" << dtype_name(o.dtype) << ", n_out " << o.n_out << ") n_in " << n_in
          << (norm_weight ? " norm" : "") << (bias_mask >> i & 1 ? " bias" : "") << (accumulate ? " accumulate" : "")
          << (weight_offset ? " weights offset " + std::to_string(weight_offset) : "");
        check_gemv_close(got[i], reference_output(o, x_hat, bias_mask >> i & 1, accumulate), n_in, s.str());
    }
}

// One launch_gemv_swiglu vs swiglu_cpu(W_gate x_hat, W_up x_hat).
void check_gemv_swiglu(const std::vector<float>& gate_f32, const std::vector<float>& up_f32, DType dtype, int32_t n_ff,
                       const std::vector<float>& x, const float* norm_weight) {
    const int32_t n_in = int32_t(x.size());
    const std::vector<uint8_t> gate = to_dtype(gate_f32, dtype), up = to_dtype(up_f32, dtype);
    const std::vector<float> x_hat = x_hat_cpu(x, norm_weight);
    const std::vector<float> g = product_cpu(gate, dtype, n_ff, x_hat), u = product_cpu(up, dtype, n_ff, x_hat);
    std::vector<float> want(static_cast<size_t>(n_ff)), got(static_cast<size_t>(n_ff));
    swiglu_cpu(want.data(), g.data(), u.data(), 1, n_ff);
    cuda_test::gemv_swiglu(got.data(), x.data(), gate.data(), up.data(), dtype, n_in, n_ff, norm_weight, kEps);
    std::ostringstream s;
    s << "gemv_swiglu " << dtype_name(dtype) << " n_in " << n_in << " n_ff " << n_ff << (norm_weight ? " norm" : "");
    check_gemv_close(got, want, n_in, s.str());
}

// launch_gemv_tokens of two outputs (weights w[o] [n_outs[o], n_in] in dtype, biases or null, accumulating
// into init[o] [n_tokens, n_outs[o]], normed) over x [n_tokens, n_in] against one launch per token, then
// launch_gemv_swiglu_tokens over the first 16 rows of both matrices likewise: each token's outputs bit for bit.
void check_tokens_as_own_launches(const std::vector<uint8_t> (&w)[2], DType dtype, const float* const (&biases)[2],
                                  const int32_t (&n_outs)[2], const std::vector<float> (&init)[2],
                                  const std::vector<float>& x, int32_t n_tokens, int32_t n_in,
                                  const std::vector<float>& nw) {
    const void* weights[2] = {w[0].data(), w[1].data()};
    const DType dtypes[2] = {dtype, dtype};
    // All tokens at once ...
    std::vector<float> all[2] = {init[0], init[1]};
    float* outs[2] = {all[0].data(), all[1].data()};
    cuda_test::gemv_tokens(outs, weights, dtypes, biases, n_outs, 2, x.data(), n_tokens, n_in, nw.data(), kEps, true);
    // ... against one launch per token.
    for (int32_t t = 0; t < n_tokens; t++) {
        std::vector<float> one[2];
        for (int o = 0; o < 2; o++)
            one[o].assign(init[o].begin() + ptrdiff_t(t) * n_outs[o], init[o].begin() + ptrdiff_t(t + 1) * n_outs[o]);
        float* one_outs[2] = {one[0].data(), one[1].data()};
        cuda_test::gemv(one_outs, weights, dtypes, biases, n_outs, 2, x.data() + size_t(t) * n_in, n_in, nw.data(),
                        kEps, true);
        for (int o = 0; o < 2; o++)
            CHECK(std::memcmp(one[o].data(), all[o].data() + size_t(t) * n_outs[o], one[o].size() * 4) == 0);
    }
    // SwiGLU, gate and up in the same dtype.
    const int32_t n_ff = 16;  // rows of both matrices
    std::vector<float> swiglu_all(size_t(n_tokens) * n_ff), swiglu_one(static_cast<size_t>(n_ff));
    cuda_test::gemv_swiglu_tokens(swiglu_all.data(), x.data(), n_tokens, w[0].data(), w[1].data(), dtype, n_in, n_ff,
                                  nw.data(), kEps);
    for (int32_t t = 0; t < n_tokens; t++) {
        cuda_test::gemv_swiglu(swiglu_one.data(), x.data() + size_t(t) * n_in, w[0].data(), w[1].data(), dtype, n_in,
                               n_ff, nw.data(), kEps);
        CHECK(std::memcmp(swiglu_one.data(), swiglu_all.data() + size_t(t) * n_ff, size_t(n_ff) * 4) == 0);
    }
}

}  // namespace

TEST_CASE("cuda kernels: gemv tolerance rejects a dropped input element") {
    // CPU only: the parity tolerance must catch a kernel that skips the last product of each row (a
    // tail bug), on most rows, for every n_in and the loosest setting (norm, bias and residual).
    uint64_t seed = 500;
    for (int32_t n_in : kInSizes) {
        for (int32_t n_out : {192, 1000}) {
            for (bool norm : {false, true}) {
                std::vector<float> w = random_matrix(n_out, n_in, seed++),
                                   x = random_floats(size_t(n_in), -1, 1, seed++);
                std::vector<float> nw = random_floats(size_t(n_in), 0.5f, 1.5f, seed++);
                Output o = make_output(w, n_out, DType::bf16, seed), dropped = o;
                seed += 2;
                for (int32_t r = 0; r < n_out; r++)  // zero bytes are 0.0 in every dtype
                    std::memset(&dropped.weight[(size_t(r) * n_in + n_in - 1) * 2], 0, 2);
                const std::vector<float> x_hat = x_hat_cpu(x, norm ? nw.data() : nullptr);
                std::vector<float> want = reference_output(o, x_hat, true, true);
                std::vector<float> wrong = reference_output(dropped, x_hat, true, true);
                size_t bad = count_off(wrong.data(), want.data(), want.size(), n_in, nullptr);
                INFO("n_in " << n_in << " n_out " << n_out << (norm ? " norm" : "") << ": " << bad << " rows caught");
                CHECK(bad >= size_t(n_out) / 2);
            }
        }
    }
}

TEST_CASE("cuda kernels: gemv single output over shapes, dtypes, norm, bias and accumulate") {
    if (!have_cuda_device()) return;
    uint64_t seed = 1000;
    for (int32_t n_in : kInSizes) {
        const std::vector<float> x = random_floats(size_t(n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(n_in), 0.5f, 1.5f, seed++);
        for (int32_t n_out : kOutSizes) {
            const std::vector<float> w = random_matrix(n_out, n_in, seed++);
            for (DType dtype : kDTypes) {
                const std::vector<Output> outputs = {make_output(w, n_out, dtype, seed)};
                seed += 2;
                for (bool norm : {false, true})
                    for (unsigned bias_mask : {0u, 1u})
                        for (bool accumulate : {false, true})
                            check_gemv(outputs, x, norm ? nw.data() : nullptr, bias_mask, accumulate, 0, "gemv");
            }
        }
    }
}

TEST_CASE("cuda kernels: gemv of 2 and 3 outputs (Q, K, V) in one launch") {
    if (!have_cuda_device()) return;
    struct Case {
        int32_t n_in;
        std::vector<int32_t> n_outs;
        std::vector<DType> dtypes;
    };
    const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
    const Case kCases[] = {
        {576, {576, 192, 192}, {bf16, bf16, bf16}},      // SmolLM2-135M QKV: 128-thread blocks
        {4096, {4096, 1024, 1024}, {bf16, bf16, bf16}},  // Llama-3-8B QKV: 256-thread blocks
        {577, {1000, 3}, {f16, f16}},
        {64, {1, 7, 192}, {f32, f32, f32}},
        {1536, {9001, 3}, {bf16, bf16}},           // 2 rows per warp, one warp straddles the outputs
        {7, {16001, 1001, 5}, {f32, f32, f32}},    // 4 rows per warp, straddling, partial last warp
        {14336, {3, 577, 5}, {f16, f16, f16}},     // x from global memory
        {576, {576, 192, 192}, {f32, bf16, f16}},  // mixed dtypes: one launch each
        {1004, {100, 50}, {bf16, f32}},            // f32 vectorized, bf16 scalar
    };
    uint64_t seed = 2000;
    for (const Case& c : kCases) {
        const std::vector<float> x = random_floats(size_t(c.n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(c.n_in), 0.5f, 1.5f, seed++);
        std::vector<Output> outputs;
        for (size_t i = 0; i < c.n_outs.size(); i++, seed += 3)  // make_output uses seed + 1 and seed + 2
            outputs.push_back(
                make_output(random_matrix(c.n_outs[i], c.n_in, seed), c.n_outs[i], c.dtypes[i], seed + 1));
        const std::string what = std::to_string(outputs.size()) + "-output gemv";
        for (bool norm : {false, true})
            for (unsigned bias_mask : {0u, 5u})  // biases on the first and third outputs only
                for (bool accumulate : {false, true})
                    check_gemv(outputs, x, norm ? nw.data() : nullptr, bias_mask, accumulate, 0, what);
    }
}

TEST_CASE("cuda kernels: gemv vocab-sized output (4 rows per warp)") {
    if (!have_cuda_device()) return;
    const int32_t n_in = 576, n_out = 49152;  // SmolLM2-135M's tied LM head
    const std::vector<float> x = random_floats(size_t(n_in), -1, 1, 3000);
    const std::vector<float> nw = random_floats(size_t(n_in), 0.5f, 1.5f, 3001);
    const std::vector<float> w = random_matrix(n_out, n_in, 3002);
    for (DType dtype : kDTypes) {
        const std::vector<Output> outputs = {make_output(w, n_out, dtype, 3003)};
        check_gemv(outputs, x, nw.data(), 0, false, 0, "vocab gemv");
        check_gemv(outputs, x, nullptr, 1, true, 0, "vocab gemv");
    }
}

TEST_CASE("cuda kernels: gemv with weights off 16-byte alignment (scalar path)") {
    if (!have_cuda_device()) return;
    uint64_t seed = 4000;
    for (int32_t n_in : {64, 576, 4096, 14336}) {  // would take 16-byte loads if aligned
        const std::vector<float> x = random_floats(size_t(n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(n_in), 0.5f, 1.5f, seed++);
        for (DType dtype : kDTypes) {
            std::vector<Output> outputs;
            for (int32_t n_out : {192, 3}) {
                outputs.push_back(make_output(random_matrix(n_out, n_in, seed), n_out, dtype, seed + 1));
                seed += 3;  // make_output uses seed + 1 and seed + 2
            }
            check_gemv(outputs, x, nw.data(), 1u, true, 1, "offset gemv");
            check_gemv(outputs, x, nullptr, 0u, false, 3, "offset gemv");
        }
    }
}

TEST_CASE("cuda kernels: gemv swiglu over shapes, dtypes and norm") {
    if (!have_cuda_device()) return;
    uint64_t seed = 5000;
    struct Shape {
        int32_t n_in, n_ff;
    };
    std::vector<Shape> shapes;
    for (int32_t n_in : kInSizes)
        for (int32_t n_ff : kOutSizes) shapes.push_back({n_in, n_ff});
    shapes.push_back({576, 9000});  // 2 rows (4 weight rows) per warp
    for (Shape s : shapes) {
        const std::vector<float> x = random_floats(size_t(s.n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(s.n_in), 0.5f, 1.5f, seed++);
        const std::vector<float> gate = random_matrix(s.n_ff, s.n_in, seed++),
                                 up = random_matrix(s.n_ff, s.n_in, seed++);
        for (DType dtype : kDTypes)
            for (bool norm : {false, true}) check_gemv_swiglu(gate, up, dtype, s.n_ff, x, norm ? nw.data() : nullptr);
    }
}

TEST_CASE("cuda kernels: gemv bad arguments throw, empty outputs launch nothing") {
    if (!have_cuda_device()) return;
    const int32_t n_in = 8;
    std::vector<float> x(n_in, 1.0f), w(4 * n_in, 0.5f), out(4 * 4, 0.0f);
    float* outs[4] = {&out[0], &out[4], &out[8], &out[12]};
    const void* weights[4] = {w.data(), w.data(), w.data(), w.data()};
    const DType dtypes[4] = {DType::f32, DType::f32, DType::f32, DType::f32};
    const float* biases[4] = {nullptr, nullptr, nullptr, nullptr};
    const int32_t n_outs[4] = {4, 4, 4, 4};
    auto gemv = [&](int32_t n_outputs, int32_t in, const int32_t* sizes) {
        cuda_test::gemv(outs, weights, dtypes, biases, sizes, n_outputs, x.data(), in, nullptr, kEps, false);
    };
    CHECK_THROWS_AS(gemv(0, n_in, n_outs), Error);
    CHECK_THROWS_AS(gemv(4, n_in, n_outs), Error);
    CHECK_THROWS_AS(gemv(1, 0, n_outs), Error);
    const int32_t negative[2] = {4, -1};
    CHECK_THROWS_AS(gemv(2, n_in, negative), Error);
    const int32_t empty[3] = {0, 0, 0};
    CHECK_NOTHROW(gemv(3, n_in, empty));
    CHECK_NOTHROW(gemv(3, n_in, n_outs));
    CHECK(out[0] == doctest::Approx(4.0));  // 8 * 0.5 * 1
    CHECK_THROWS_AS(cuda_test::gemv_swiglu(out.data(), x.data(), w.data(), w.data(), DType::f32, 0, 4, nullptr, kEps),
                    Error);
    CHECK_THROWS_AS(
        cuda_test::gemv_swiglu(out.data(), x.data(), w.data(), w.data(), DType::f32, n_in, -1, nullptr, kEps), Error);
    CHECK_NOTHROW(cuda_test::gemv_swiglu(out.data(), x.data(), w.data(), w.data(), DType::f32, n_in, 0, nullptr, kEps));
}

// The batched exact forward's GEMVs: n_tokens inputs in launches of up to 8, each token's outputs the bits of
// a one-token launch, whichever path the group takes (x staged in shared memory for one token but read from
// global memory for 8 at n_in 2048; the scalar path at n_in 100 for 16-bit weights), for every weight dtype,
// with norm, bias and the residual accumulate, Q/K/V-style multi-output launches and SwiGLU.
TEST_CASE("cuda kernels: gemv over several tokens gives each token the bits of its own launch") {
    if (!have_cuda_device()) return;
    uint64_t seed = 9000;
    const DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1};
    for (int32_t n_in : {64, 100, 2048}) {
        for (DType dtype : kAll) {
            if (dtype_is_quantized(dtype) && n_in % 32 != 0) continue;
            CAPTURE(n_in);
            CAPTURE(dtype_name(dtype));
            const int32_t n_tokens = 11;  // a group of 8, then one of 3
            const int32_t n_outs[2] = {40, 17};
            std::vector<uint8_t> w[2];
            std::vector<float> bias[2], init[2];
            for (int o = 0; o < 2; o++) {
                const std::vector<float> f = random_matrix(n_outs[o], n_in, seed++);
                w[o].resize(size_t(dtype_bytes(dtype, f.size())));
                convert_from_f32(dtype, f.data(), w[o].data(), f.size());
                bias[o] = random_floats(size_t(n_outs[o]), -1, 1, seed++);
                init[o] = random_floats(size_t(n_tokens) * n_outs[o], -1, 1, seed++);
            }
            const std::vector<float> x = random_floats(size_t(n_tokens) * n_in, -1, 1, seed++);
            const std::vector<float> nw = random_floats(size_t(n_in), 0.5f, 1.5f, seed++);
            const float* biases[2] = {bias[0].data(), bias[1].data()};
            check_tokens_as_own_launches(w, dtype, biases, n_outs, init, x, n_tokens, n_in, nw);
        }
    }
}

// Puts the process-wide GEMV launch rules back to the defaults when a case ends, however it ends.
struct GemvRulesGuard {
    explicit GemvRulesGuard(const GemvLaunchRules& rules) { cuda_test::use_gemv_launch_rules(rules); }
    ~GemvRulesGuard() { cuda_test::use_gemv_launch_rules(GemvLaunchRules{}); }
    GemvRulesGuard(const GemvRulesGuard&) = delete;
    GemvRulesGuard& operator=(const GemvRulesGuard&) = delete;
};

// A sweep's split rule (KVLM_CUDA_GEMV_SPLIT): the rows of a launch with few warps per SM are split across 2
// or 4 warps of a block, each summing its interleaved share of the row's chunks, the group's first warp adding
// theirs. Against the CPU over the vector, scalar (unaligned and odd-length rows) and global-x paths, several
// outputs, SwiGLU; and the summation order kept where decode needs the same bits: several tokens against one
// launch each, the RoPE-pair launch against the plain one. Then the same with x read from global memory.
TEST_CASE("cuda kernels: gemv rows split across warps match the CPU and keep one order for tokens and RoPE pairs") {
    if (!have_cuda_device()) return;
    GemvLaunchRules rules;
    rules.split_warps_per_sm = 64;  // split while rows x splits stay within 64 x 132
    const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
    for (int32_t stage_x : {1, 0}) {
        CAPTURE(stage_x);
        rules.stage_x = stage_x;
        const GemvRulesGuard guard(rules);
        // A warp keeps at least one full step (4 KiB of one row, or of gate and up together).
        CHECK(cuda_test::gemv_split_count(2048, 8192, bf16, false) == 4);
        CHECK(cuda_test::gemv_split_count(2048, 4096, bf16, false) == 2);
        CHECK(cuda_test::gemv_split_count(2048, 2048, bf16, false) == 1);
        CHECK(cuda_test::gemv_split_count(2048, 4096, bf16, true) == 4);
        CHECK(cuda_test::gemv_split_count(3000, 8192, bf16, false) == 2);  // 3000 x 4 warps would pass 64 x 132
        CHECK(cuda_test::gemv_split_count(9000, 8192, bf16, false) == 1);
        CHECK(cuda_test::gemv_split_count(100, 8192, DType::q4_0, false) == 1);  // quantized rows stay whole

        struct Case {
            int32_t n_in;
            std::vector<int32_t> n_outs;
            DType dtype;
            int splits;
        };
        const Case kCases[] = {
            {8192, {100}, bf16, 4},     {4096, {37, 5}, f32, 4},
            {5000, {64, 3, 9}, f16, 2},  // 625 chunks a row: the groups' last steps are partial
            {14336, {19}, bf16, 4},      // x read from global memory whatever the rule
            {4100, {33}, bf16, 2},       // rows of 8200 bytes: the scalar path
        };
        uint64_t seed = 9500;
        for (const Case& c : kCases) {
            int32_t n_rows = 0;
            for (int32_t n : c.n_outs) n_rows += n;
            CHECK(cuda_test::gemv_split_count(n_rows, c.n_in, c.dtype, false) == c.splits);
            const std::vector<float> x = random_floats(size_t(c.n_in), -1, 1, seed++);
            const std::vector<float> nw = random_floats(size_t(c.n_in), 0.5f, 1.5f, seed++);
            std::vector<Output> outputs;
            for (int32_t n_out : c.n_outs) {
                outputs.push_back(make_output(random_matrix(n_out, c.n_in, seed), n_out, c.dtype, seed + 1));
                seed += 3;  // make_output uses seed + 1 and seed + 2
            }
            const std::string what = "split " + std::to_string(c.splits) + " gemv";
            check_gemv(outputs, x, nw.data(), 1u, false, 0, what);
            check_gemv(outputs, x, nullptr, 0u, true, 0, what);
            check_gemv(outputs, x, nw.data(), 1u, true, 1, what);  // weights off alignment: the scalar path
        }
        const std::vector<float> x = random_floats(4096, -1, 1, seed++), nw = random_floats(4096, 0.5f, 1.5f, seed++);
        check_gemv_swiglu(random_matrix(50, 4096, seed), random_matrix(50, 4096, seed + 1), bf16, 50, x, nw.data());
        seed += 2;

        // Several tokens: each gets the bits of its own (split) launch.
        const int32_t n_in = 4096, n_tokens = 11, n_outs[2] = {40, 17};
        REQUIRE(cuda_test::gemv_split_count(57, n_in, bf16, false) == 2);
        std::vector<uint8_t> w[2];
        std::vector<float> init[2];
        for (int o = 0; o < 2; o++) {
            w[o] = to_dtype(random_matrix(n_outs[o], n_in, seed++), bf16);
            init[o] = random_floats(size_t(n_tokens) * n_outs[o], -1, 1, seed++);
        }
        const std::vector<float> xs = random_floats(size_t(n_tokens) * n_in, -1, 1, seed++);
        const float* no_bias[2] = {nullptr, nullptr};
        check_tokens_as_own_launches(w, bf16, no_bias, n_outs, init, xs, n_tokens, n_in, nw);

        // The decode step's Q/K/V launch with RoPE pairs: the bits of the plain launch and rope_kv_write.
        KvLayout layout;
        layout.n_layers = 1, layout.block_size = 16, layout.n_kv_heads = 2, layout.head_dim = 64, layout.dtype = bf16;
        const int32_t n_heads = 4, rope_in = 8192, n_blocks = 2;
        REQUIRE(cuda_test::gemv_split_count(n_heads * 64 + 2 * 128, rope_in, bf16, false) == 4);
        const int32_t rows[3] = {n_heads * 64, 128, 128};
        std::vector<std::vector<uint8_t> > qkv;
        for (int i = 0; i < 3; i++) qkv.push_back(to_dtype(random_matrix(rows[i], rope_in, seed++), bf16));
        const std::vector<float> rx = random_floats(size_t(rope_in), -2, 2, seed++);
        const std::vector<float> rnorm = random_floats(size_t(rope_in), 0.5f, 1.5f, seed++);
        const std::vector<uint8_t> pool =
            random_typed(size_t(n_blocks) * size_t(layout.block_elements()), bf16, -1, 1, seed++);
        std::vector<float> inv_freq(32);
        rope_inv_freq(inv_freq.data(), 64, 10000.0f, RopeScaling{});
        const std::vector<int32_t> table = {1, 0};
        const void* qkv_w[3] = {qkv[0].data(), qkv[1].data(), qkv[2].data()};
        const float* qkv_b[3] = {nullptr, nullptr, nullptr};
        std::vector<float> q_fused(static_cast<size_t>(rows[0])), q_plain(static_cast<size_t>(rows[0]));
        std::vector<uint8_t> kv_fused(pool.size()), kv_plain(pool.size());
        cuda_test::gemv_rope_kv(q_fused.data(), kv_fused.data(), q_plain.data(), kv_plain.data(), qkv_w, bf16, qkv_b,
                                rx.data(), rope_in, rnorm.data(), kEps, pool.data(), n_blocks, layout, 0, table.data(),
                                2, 21, inv_freq.data(), n_heads);
        CHECK(std::memcmp(q_fused.data(), q_plain.data(), q_fused.size() * 4) == 0);
        CHECK(kv_fused == kv_plain);
        CHECK(kv_plain != pool);
    }
}

#endif  // KVLM_CUDA
