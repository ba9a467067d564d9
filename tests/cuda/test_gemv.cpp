// CUDA decode GEMVs (cuda/kernels/gemv.cu) vs the CPU composition they replace: rmsnorm_cpu (when normed) +
// matmul_cpu (one token) + add_bias_cpu + add_cpu (residual), or swiglu_cpu of the gate and up products.
// Random inputs over awkward n_in (1, 7, 577, 1004: scalar paths; 14336: x read from global memory), 1-3
// outputs of different n_out and dtypes in one launch, every launch shape (rows per warp 1/2/4, rows of a
// warp straddling outputs), and weights off 16-byte alignment. Outputs start poisoned (NaN) behind guard
// bands (cuda/testing/cuda_test_guard.h). Without a CUDA device (or in CUDA=0 builds) each case says
// "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "compute/cpu_ops.h"
#include "support/cuda_kernel_checks.h"
#include "support/gemv_checks.h"
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

const DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};
const int32_t kInSizes[] = {1, 7, 64, 576, 577, 1004, 1536, 4096, 14336};
const int32_t kOutSizes[] = {1, 3, 192, 576, 1000};

// One launch_gemv_swiglu of gate and up (f32 [n_ff, n_in]) stored in dtype.
void check_gemv_swiglu(const std::vector<float>& gate_f32, const std::vector<float>& up_f32, DType dtype, int32_t n_ff,
                       const std::vector<float>& x, const float* norm_weight) {
    kvlm::test::check_gemv_swiglu(make_gemv_output(gate_f32, n_ff, dtype, 0), make_gemv_output(up_f32, n_ff, dtype, 0),
                                  x, norm_weight, "gemv_swiglu");
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
    cuda_test::gemv_tokens(outs, weights, dtypes, biases, n_outs, 2, x.data(), n_tokens, n_in, nw.data(), kGemvEps,
                           true);
    // ... against one launch per token.
    for (int32_t t = 0; t < n_tokens; t++) {
        std::vector<float> one[2];
        for (int o = 0; o < 2; o++)
            one[o].assign(init[o].begin() + ptrdiff_t(t) * n_outs[o], init[o].begin() + ptrdiff_t(t + 1) * n_outs[o]);
        float* one_outs[2] = {one[0].data(), one[1].data()};
        cuda_test::gemv(one_outs, weights, dtypes, biases, n_outs, 2, x.data() + size_t(t) * n_in, n_in, nw.data(),
                        kGemvEps, true);
        for (int o = 0; o < 2; o++)
            CHECK(std::memcmp(one[o].data(), all[o].data() + size_t(t) * n_outs[o], one[o].size() * 4) == 0);
    }
    // SwiGLU, gate and up in the same dtype.
    const int32_t n_ff = 16;  // rows of both matrices
    std::vector<float> swiglu_all(size_t(n_tokens) * n_ff), swiglu_one(static_cast<size_t>(n_ff));
    cuda_test::gemv_swiglu_tokens(swiglu_all.data(), x.data(), n_tokens, w[0].data(), w[1].data(), dtype, n_in, n_ff,
                                  nw.data(), kGemvEps);
    for (int32_t t = 0; t < n_tokens; t++) {
        cuda_test::gemv_swiglu(swiglu_one.data(), x.data() + size_t(t) * n_in, w[0].data(), w[1].data(), dtype, n_in,
                               n_ff, nw.data(), kGemvEps);
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
                GemvOutput o = make_gemv_output(w, n_out, DType::bf16, seed), dropped = o;
                seed += 2;
                for (int32_t r = 0; r < n_out; r++) dropped.decoded[size_t(r) * n_in + n_in - 1] = 0;
                const std::vector<float> x_hat = x_hat_cpu(x, norm ? nw.data() : nullptr);
                std::vector<float> want = reference_output(o, x_hat, true, true);
                std::vector<float> wrong = reference_output(dropped, x_hat, true, true);
                size_t bad = count_off(wrong, want, n_in, nullptr);
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
                const std::vector<GemvOutput> outputs = {make_gemv_output(w, n_out, dtype, seed)};
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
        std::vector<GemvOutput> outputs;
        for (size_t i = 0; i < c.n_outs.size(); i++, seed += 3)  // random_gemv_output uses seed .. seed + 2
            outputs.push_back(random_gemv_output(c.n_outs[i], c.n_in, c.dtypes[i], seed));
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
        const std::vector<GemvOutput> outputs = {make_gemv_output(w, n_out, dtype, 3003)};
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
            std::vector<GemvOutput> outputs;
            for (int32_t n_out : {192, 3}) {
                outputs.push_back(random_gemv_output(n_out, n_in, dtype, seed));
                seed += 3;  // random_gemv_output uses seed .. seed + 2
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
        cuda_test::gemv(outs, weights, dtypes, biases, sizes, n_outputs, x.data(), in, nullptr, kGemvEps, false);
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
    CHECK_THROWS_AS(
        cuda_test::gemv_swiglu(out.data(), x.data(), w.data(), w.data(), DType::f32, 0, 4, nullptr, kGemvEps), Error);
    CHECK_THROWS_AS(
        cuda_test::gemv_swiglu(out.data(), x.data(), w.data(), w.data(), DType::f32, n_in, -1, nullptr, kGemvEps),
        Error);
    CHECK_NOTHROW(
        cuda_test::gemv_swiglu(out.data(), x.data(), w.data(), w.data(), DType::f32, n_in, 0, nullptr, kGemvEps));
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
            std::vector<GemvOutput> outputs;
            for (int32_t n_out : c.n_outs) {
                outputs.push_back(random_gemv_output(n_out, c.n_in, c.dtype, seed));
                seed += 3;  // random_gemv_output uses seed .. seed + 2
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
                                rx.data(), rope_in, rnorm.data(), kGemvEps, pool.data(), n_blocks, layout, 0,
                                table.data(), 2, 21, inv_freq.data(), n_heads);
        CHECK(std::memcmp(q_fused.data(), q_plain.data(), q_fused.size() * 4) == 0);
        CHECK(kv_fused == kv_plain);
        CHECK(kv_plain != pool);
    }
}

#endif  // KVLM_CUDA
