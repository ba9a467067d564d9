// CUDA kernels over quantized weights (every quantized type) vs the CPU on the same blocks: the decode GEMVs
// (cuda/kernels/gemv_quantized.cu: single output with norm/bias/residual, Q/K/V in one launch with mixed dtypes,
// rows of a warp straddling outputs, the vocab-sized head, x from global memory, SwiGLU), the quantized
// embedding lookup and the f16 dequantization (bit-identical to convert_to_f32), and the prefill GEMM over
// dequantized f16 tiles (cuda/backend/matmul.cpp). The GEMV reference is the f32 composition of test_gemv.cpp over the
// weights as convert_to_f32 decodes them: the kernel keeps x_hat in f32 (the CPU's own quantized matmul rounds
// it to q8, a different computation checked at the model level in test_cuda_quantized.cpp). Without a CUDA
// device (or in CUDA=0 builds) each case says "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "compute/cpu_ops.h"
#include "support/cuda_emu.h"
#include "support/cuda_kernel_checks.h"
#include "support/gemv_checks.h"
#include "support/random_model.h"
#include "util/error.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

namespace {

// 32-element blocks, and 256-element super-blocks (rows of whole super-blocks: n_in a multiple of 256).
[[maybe_unused]] const DType kQuantTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1,
                                              DType::q5_0, DType::q5_1, DType::iq4_nl};
[[maybe_unused]] const DType kSuperBlockTypes[] = {DType::q2_k, DType::q3_k, DType::q4_k,
                                                   DType::q5_k, DType::q6_k, DType::iq4_xs};

[[maybe_unused]] std::vector<float> dequantize(const std::vector<uint8_t>& q, DType dtype, size_t n) {  // CUDA builds
    std::vector<float> out(n);
    convert_to_f32(dtype, q.data(), out.data(), n);
    return out;
}

}  // namespace

TEST_CASE("cuda kernels: quantized gemv tolerance rejects a wrong nibble order or a dropped block scale") {
    // CPU only: the parity tolerance must catch the likely layout mistakes - 4-bit elements read as
    // interleaved pairs (byte j holding elements 2j, 2j + 1) or q4_1's min ignored - on most rows.
    const int32_t n_in = 576, n_out = 192;
    const std::vector<float> x = random_floats(size_t(n_in), -1, 1, 7);
    for (DType dtype : {DType::q4_0, DType::q4_1}) {
        GemvOutput o = random_gemv_output(n_out, n_in, dtype, 11), wrong = o, no_min = o;
        const size_t block_bytes = dtype_block_bytes(dtype);
        for (size_t b = 0; b < o.weight.size() / block_bytes; b++) {
            const uint8_t* blk = &o.weight[b * block_bytes];
            float* dst = &wrong.decoded[b * 32];
            std::vector<float> right(32);
            convert_to_f32(dtype, blk, right.data(), 32);
            for (int j = 0; j < 16; j++) {  // element 2j is what the right order calls j, 2j + 1 is j + 16
                dst[2 * j] = right[size_t(j)];
                dst[2 * j + 1] = right[size_t(j) + 16];
            }
            if (dtype == DType::q4_1) {
                uint16_t m_bits;
                std::memcpy(&m_bits, blk + 2, 2);
                for (int j = 0; j < 32; j++) no_min.decoded[b * 32 + size_t(j)] -= f16_to_f32(m_bits);
            }
        }
        const std::vector<float> want = reference_output(o, x, false, false);
        CHECK(count_off(reference_output(wrong, x, false, false), want, n_in, nullptr) >= size_t(n_out) / 2);
        if (dtype == DType::q4_1)
            CHECK(count_off(reference_output(no_min, x, false, false), want, n_in, nullptr) >= size_t(n_out) / 2);
    }
}

#ifndef KVLM_CUDA

TEST_CASE("cuda kernels: quantized gemv, embedding and prefill GEMM parity with the CPU") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

TEST_CASE("cuda kernels: quantized gemv single output over shapes, types, norm, bias and accumulate") {
    if (!have_cuda_device()) return;
    // n_in: one block, 3 blocks (lanes past the row's end), SmolLM2/Llama widths, 14336 (x from global memory).
    const int32_t kInSizes[] = {32, 96, 576, 1024, 4096, 14336};
    const int32_t kOutSizes[] = {1, 3, 192, 1000};
    struct Flags {
        bool norm;
        unsigned bias;
        bool accumulate;
    };
    const Flags kFlags[] = {{false, 0, false}, {true, 1, true}, {true, 0, false}, {false, 1, true}};
    uint64_t seed = 100;
    for (int32_t n_in : kInSizes) {
        const std::vector<float> x = random_floats(size_t(n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(n_in), 0.5f, 1.5f, seed++);
        for (int32_t n_out : kOutSizes) {
            if (cuda_emulated() && n_in >= 4096 && n_out == 1000) continue;  // the 192-row case covers these paths
            for (DType dtype : kQuantTypes) {
                const std::vector<GemvOutput> outputs = {random_gemv_output(n_out, n_in, dtype, seed)};
                seed += 3;
                for (const Flags& f : kFlags)
                    check_gemv(outputs, x, f.norm ? nw.data() : nullptr, f.bias, f.accumulate, 0, "quantized gemv");
            }
        }
    }
}

TEST_CASE("cuda kernels: quantized gemv of 2 and 3 outputs, mixed types, rows of a warp straddling outputs") {
    if (!have_cuda_device()) return;
    struct Case {
        int32_t n_in;
        std::vector<int32_t> n_outs;
        std::vector<DType> dtypes;
    };
    const DType q8 = DType::q8_0, q40 = DType::q4_0, q41 = DType::q4_1, bf16 = DType::bf16;
    const Case kCases[] = {
        {576, {576, 192, 192}, {q8, q8, q8}},     // SmolLM2-135M QKV
        {576, {576, 192, 192}, {q41, q40, q8}},   // every quantized type: one launch each
        {1536, {9001, 3}, {q40, q40}},            // 2 rows per warp, one warp straddling the outputs
        {32, {16001, 1001, 5}, {q41, q41, q41}},  // 4 rows per warp, straddling, partial last warp
        {14336, {3, 577, 5}, {q8, q8, q8}},       // x from global memory
        {1024, {100, 50, 7}, {bf16, q40, q41}},   // 16-bit and quantized in one call
        // Super-blocks: Q4_K_M's attention (q6_k V beside q4_k Q/K) at Llama-3.2-1B's width, 4 rows per warp
        // straddling the outputs, and both block families beside a 16-bit matrix.
        {2048, {256, 64, 64}, {DType::q4_k, DType::q4_k, DType::q6_k}},
        {256, {5001, 1001, 5}, {DType::q3_k, DType::q3_k, DType::q3_k}},
        {512, {100, 50, 7}, {DType::iq4_xs, DType::q5_0, bf16}},
    };
    uint64_t seed = 2000;
    for (const Case& c : kCases) {
        const std::vector<float> x = random_floats(size_t(c.n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(c.n_in), 0.5f, 1.5f, seed++);
        std::vector<GemvOutput> outputs;
        for (size_t i = 0; i < c.n_outs.size(); i++, seed += 3)
            outputs.push_back(random_gemv_output(c.n_outs[i], c.n_in, c.dtypes[i], seed));
        const std::string what = std::to_string(outputs.size()) + "-output quantized gemv";
        check_gemv(outputs, x, nw.data(), 5u, false, 0, what);  // biases on the first and third outputs
        check_gemv(outputs, x, nullptr, 0u, true, 0, what);
    }
}

TEST_CASE("cuda kernels: quantized gemv vocab-sized head (4 rows per warp)") {
    if (!have_cuda_device()) return;
    const int32_t n_in = 576, n_out = 49152;  // SmolLM2-135M's tied LM head
    const std::vector<float> x = random_floats(size_t(n_in), -1, 1, 3000);
    for (DType dtype : kQuantTypes) {
        if (cuda_emulated() && dtype != DType::q5_1) continue;  // the same kernel shape; the 16001-row case covers them
        check_gemv({random_gemv_output(n_out, n_in, dtype, 3001)}, x, nullptr, 0, false, 0, "quantized vocab gemv");
    }
}

TEST_CASE("cuda kernels: quantized gemv swiglu over shapes, types and norm") {
    if (!have_cuda_device()) return;
    struct Shape {
        int32_t n_in, n_ff;
    };
    const Shape kShapes[] = {{32, 3}, {576, 1000}, {1536, 192}, {14336, 7}, {576, 9000}};  // 9000: 2 rows per warp
    uint64_t seed = 5000;
    for (Shape s : kShapes) {
        const std::vector<float> x = random_floats(size_t(s.n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(s.n_in), 0.5f, 1.5f, seed++);
        for (DType dtype : kQuantTypes) {
            const GemvOutput gate = random_gemv_output(s.n_ff, s.n_in, dtype, seed),
                             up = random_gemv_output(s.n_ff, s.n_in, dtype, seed + 3);
            seed += 6;
            for (bool norm : {false, true})
                check_gemv_swiglu(gate, up, x, norm ? nw.data() : nullptr, "quantized gemv_swiglu");
        }
    }
}

TEST_CASE("cuda kernels: super-block quantized gemv (k-quants, iq4_xs) over shapes, norm and swiglu") {
    if (!have_cuda_device()) return;
    // n_in: one super-block, 6 (a partial load step), 9 (a second step with lanes past the row's end), and
    // 14336 (x from global memory); every chunk of a super-block has its own scale bits, so rows see all 8.
    const int32_t kInSizes[] = {256, 1536, 2304, 14336};
    uint64_t seed = 9000;
    for (int32_t n_in : kInSizes) {
        const std::vector<float> x = random_floats(size_t(n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(n_in), 0.5f, 1.5f, seed++);
        for (DType dtype : kSuperBlockTypes) {
            for (int32_t n_out : {3, 192}) {
                if (cuda_emulated() && n_in == 14336 && n_out == 192) continue;  // the 3-row case covers the path
                const std::vector<GemvOutput> outputs = {random_gemv_output(n_out, n_in, dtype, seed)};
                seed += 3;
                check_gemv(outputs, x, nw.data(), 1u, true, 0, "super-block quantized gemv");
                check_gemv(outputs, x, nullptr, 0u, false, 0, "super-block quantized gemv");
            }
            const GemvOutput gate = random_gemv_output(100, n_in, dtype, seed),
                             up = random_gemv_output(100, n_in, dtype, seed + 3);
            seed += 6;
            check_gemv_swiglu(gate, up, x, nw.data(), "super-block quantized gemv_swiglu");
        }
    }
}

TEST_CASE("cuda kernels: quantized gemv alignment and shape errors") {
    if (!have_cuda_device()) return;
    const int32_t n_in = 64;
    const std::vector<float> x = random_floats(size_t(n_in), -1, 1, 6000);
    // 2-byte aligned q8_0/q4_0 matrices run (blocks never are 16-byte aligned anyway); odd ones, and q4_1 off
    // 4-byte alignment, are refused rather than read misaligned.
    for (DType dtype : {DType::q8_0, DType::q4_0})
        check_gemv({random_gemv_output(37, n_in, dtype, 6001)}, x, nullptr, 1u, true, 2,
                   "2-byte aligned quantized gemv");
    check_gemv({random_gemv_output(37, n_in, DType::q4_1, 6002)}, x, nullptr, 0u, false, 4, "4-byte aligned q4_1 gemv");
    CHECK_THROWS_AS(check_gemv({random_gemv_output(37, n_in, DType::q8_0, 6003)}, x, nullptr, 0u, false, 1, ""), Error);
    CHECK_THROWS_AS(check_gemv({random_gemv_output(37, n_in, DType::q4_1, 6004)}, x, nullptr, 0u, false, 2, ""), Error);
    // Super-blocks: q3_k (110 bytes) and q6_k (210) are only 2-byte aligned in a row; q4_k (144) is 4.
    const std::vector<float> x256 = random_floats(256, -1, 1, 6006);
    for (DType dtype : {DType::q3_k, DType::q6_k})
        check_gemv({random_gemv_output(9, 256, dtype, 6007)}, x256, nullptr, 0u, false, 2, "2-byte aligned gemv");
    CHECK_THROWS_AS(check_gemv({random_gemv_output(9, 256, DType::q4_k, 6008)}, x256, nullptr, 0u, false, 2, ""),
                    Error);
    // 64 elements are whole 32-element blocks but not a super-block: refused naming the type.
    CHECK_THROWS_WITH_AS(check_gemv({random_gemv_output(4, 64, DType::q4_k, 6009)}, x, nullptr, 0u, false, 0, ""),
                         "launch_gemv: q4_k rows must be whole 256-element blocks (n_in 64)", Error);
    // Rows that are not whole blocks.
    const GemvOutput o = random_gemv_output(4, n_in, DType::q8_0, 6005);
    std::vector<float> out(4);
    float* outs[1] = {out.data()};
    const void* weights[1] = {o.weight.data()};
    const DType dtypes[1] = {DType::q8_0};
    const float* biases[1] = {nullptr};
    const int32_t n_outs[1] = {4};
    CHECK_THROWS_AS(cuda_test::gemv(outs, weights, dtypes, biases, n_outs, 1, x.data(), 48, nullptr, kGemvEps, false),
                    Error);
    CHECK_THROWS_AS(cuda_test::gemv_swiglu(out.data(), x.data(), o.weight.data(), o.weight.data(), DType::q4_0, 40, 2,
                                           nullptr, kGemvEps),
                    Error);
}

TEST_CASE("cuda kernels: quantized embedding and f16 dequantization are bit-identical to the CPU") {
    if (!have_cuda_device()) return;
    std::vector<DType> all(std::begin(kQuantTypes), std::end(kQuantTypes));
    all.insert(all.end(), std::begin(kSuperBlockTypes), std::end(kSuperBlockTypes));
    for (DType dtype : all) {
        const int32_t n = 7, dim = dtype_block_elements(dtype) == 32 ? 96 : 512, n_vocab = 50;
        const std::vector<uint8_t> table = to_dtype(random_floats(size_t(n_vocab) * dim, -1, 1, 1), dtype);
        const std::vector<int32_t> tokens = {0, 49, 3, 3, 17, 48, 1};
        std::vector<float> want(size_t(n) * dim), got(want.size());
        embed_cpu(want.data(), tokens.data(), table.data(), dtype, n, dim);
        cuda_test::embed(got.data(), tokens.data(), table.data(), dtype, n, dim, n_vocab);
        check_close(got.data(), want.data(), want.size(), 0, 0, std::string("quantized embed ") + dtype_name(dtype));

        const size_t n_elements = size_t(n_vocab) * dim;
        const std::vector<float> decoded = dequantize(table, dtype, n_elements);
        std::vector<uint16_t> f16(n_elements);
        cuda_test::dequantize_f16(f16.data(), table.data(), dtype, int64_t(n_elements));
        size_t bad = 0;
        for (size_t i = 0; i < n_elements; i++) bad += f16[i] != f32_to_f16(decoded[i]);
        INFO("dequantize_f16 " << dtype_name(dtype) << ": " << bad << " of " << n_elements << " elements differ");
        CHECK(bad == 0);
    }
}

TEST_CASE("cuda kernels: quantized prefill GEMM over f16 tiles vs the CPU") {
    if (!have_cuda_cublas()) return;
    // out = W x over the f16-rounded operands the GEMM sees (x and the dequantized weights rounded to f16),
    // summed in double: what is left is the GEMM's f32 accumulation order. Tiles of 1 row, of a count that
    // does not divide n_out, and of the whole matrix; with and without accumulate.
    struct Case {
        int32_t n, n_in, n_out;
    };
    const Case kCases[] = {{2, 32, 1}, {3, 576, 100}, {17, 1024, 257}, {64, 96, 1000}, {5, 256, 3}, {17, 512, 66}};
    uint64_t seed = 7000;
    for (const Case& c : kCases) {
        const std::vector<float> x = random_floats(size_t(c.n) * c.n_in, -1, 1, seed++);
        std::vector<DType> types;
        for (DType dtype : kQuantTypes)
            if (!(cuda_emulated() && c.n_in % 256 == 0)) types.push_back(dtype);  // the other shapes cover them
        if (c.n_in % 256 == 0) types.insert(types.end(), std::begin(kSuperBlockTypes), std::end(kSuperBlockTypes));
        for (DType dtype : types) {
            const GemvOutput o = random_gemv_output(c.n_out, c.n_in, dtype, seed);
            seed += 3;
            std::vector<double> exact(size_t(c.n) * c.n_out);
            for (int32_t t = 0; t < c.n; t++)
                for (int32_t r = 0; r < c.n_out; r++) {
                    double sum = 0;
                    for (int32_t i = 0; i < c.n_in; i++)
                        sum += double(f16_to_f32(f32_to_f16(o.decoded[size_t(r) * c.n_in + i]))) *
                               double(f16_to_f32(f32_to_f16(x[size_t(t) * c.n_in + i])));
                    exact[size_t(t) * c.n_out + r] = sum;
                }
            for (int64_t tile_rows : {int64_t(1), int64_t(7), int64_t(c.n_out)}) {
                for (bool accumulate : {false, true}) {
                    std::vector<float> init = random_floats(exact.size(), -1, 1, seed++);
                    std::vector<float> got = accumulate ? init : std::vector<float>(exact.size()), want(exact.size());
                    for (size_t i = 0; i < exact.size(); i++) want[i] = float(exact[i] + (accumulate ? init[i] : 0.0));
                    cuda_test::matmul_quantized(got.data(), x.data(), o.weight.data(), dtype, c.n, c.n_in, c.n_out,
                                                tile_rows, accumulate);
                    std::ostringstream what;
                    what << "quantized GEMM " << dtype_name(dtype) << " n " << c.n << " n_in " << c.n_in << " n_out "
                         << c.n_out << " tile_rows " << tile_rows << (accumulate ? " accumulate" : "");
                    check_close(got.data(), want.data(), want.size(), 1e-4f, 1e-4f, what.str());
                }
            }
        }
    }
}

#endif  // KVLM_CUDA
