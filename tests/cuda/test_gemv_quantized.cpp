// CUDA kernels over quantized weights (q8_0, q4_0, q4_1) vs the CPU on the same blocks: the decode GEMVs
// (cuda/gemv_quantized.cu: single output with norm/bias/residual, Q/K/V in one launch with mixed dtypes,
// rows of a warp straddling outputs, the vocab-sized head, x from global memory, SwiGLU), the quantized
// embedding lookup and the f16 dequantization (bit-identical to convert_to_f32), and the prefill GEMM over
// dequantized f16 tiles (cuda/matmul.cpp). The GEMV reference is the f32 composition of test_gemv.cpp over the
// weights as convert_to_f32 decodes them: the kernel keeps x_hat in f32 (the CPU's own quantized matmul rounds
// it to q8, a different computation checked at the model level in test_cuda_quantized.cpp). Without a CUDA
// device (or in CUDA=0 builds) each case says "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "compute/cpu_ops.h"
#include "support/cuda_emu.h"
#include "support/cuda_kernel_checks.h"
#include "support/random_model.h"
#include "util/error.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

namespace {

[[maybe_unused]] const DType kQuantTypes[] = {DType::q8_0, DType::q4_0, DType::q4_1};

// The tolerance of test_gemv.cpp: |got - want| <= 2e-6 sqrt(n_in) + 1e-4 |want|. The kernel multiplies the
// same weights (d * q, exact in f32; q4_1's d * nibble + m rounds once, as convert_to_f32 does) with the same
// f32 x_hat, but scales a quarter block's sum by d once instead of every element: a reordering of f32
// roundings of the size the tolerance already allows for (~100x headroom in test_gemv.cpp's replay).
float gemv_atol(int32_t n_in) { return 2e-6f * std::sqrt(float(n_in)); }
constexpr float kGemvRtol = 1e-4f;
constexpr float kEps = 1e-5f;

size_t count_off(const std::vector<float>& got, const std::vector<float>& want, int32_t n_in, std::string* first) {
    size_t bad = 0;
    std::ostringstream s;
    for (size_t i = 0; i < want.size(); i++)
        if (!(std::fabs(got[i] - want[i]) <= gemv_atol(n_in) + kGemvRtol * std::fabs(want[i]))) {
            if (bad < 5) s << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
            bad++;
        }
    if (first) *first = s.str();
    return bad;
}

std::vector<uint8_t> quantize(const std::vector<float>& f, DType dtype) {
    std::vector<uint8_t> out(size_t(dtype_bytes(dtype, f.size())));
    convert_from_f32(dtype, f.data(), out.data(), f.size());
    return out;
}

std::vector<float> dequantize(const std::vector<uint8_t>& q, DType dtype, size_t n) {
    std::vector<float> out(n);
    convert_to_f32(dtype, q.data(), out.data(), n);
    return out;
}

// [n_out, n_in] uniform in +-1/sqrt(n_in): outputs O(1) for every n_in.
std::vector<float> random_matrix(int32_t n_out, int32_t n_in, uint64_t seed) {
    const float a = 1.0f / std::sqrt(float(n_in));
    return random_floats(size_t(n_out) * size_t(n_in), -a, a, seed);
}

[[maybe_unused]] std::vector<float> x_hat_cpu(const std::vector<float>& x, const float* norm_weight) {  // CUDA builds only
    std::vector<float> x_hat = x;
    if (norm_weight) rmsnorm_cpu(x_hat.data(), x.data(), norm_weight, 1, int32_t(x.size()), kEps);
    return x_hat;
}

// W x_hat with W the f32 decoding of the blocks.
std::vector<float> product_cpu(const std::vector<float>& w_f32, int32_t n_out, const std::vector<float>& x_hat) {
    std::vector<float> y(static_cast<size_t>(n_out));
    matmul_cpu(y.data(), x_hat.data(), w_f32.data(), DType::f32, 1, int64_t(x_hat.size()), n_out, nullptr);
    return y;
}

// One output of a launch. Non-quantized dtypes (f32/f16/bf16) also allowed, for mixed launches.
struct Output {
    int32_t n_out = 0;
    DType dtype = DType::q8_0;
    std::vector<uint8_t> weight;  // [n_out, n_in] in dtype
    std::vector<float> decoded;   // [n_out, n_in]: weight as the CPU reads it
    std::vector<float> bias, init;
};

Output make_output(int32_t n_out, int32_t n_in, DType dtype, uint64_t seed) {
    Output o;
    o.n_out = n_out, o.dtype = dtype;
    const std::vector<float> w = random_matrix(n_out, n_in, seed);
    o.weight = quantize(w, dtype);  // convert_from_f32 handles every dtype
    o.decoded = dequantize(o.weight, dtype, w.size());
    o.bias = random_floats(size_t(n_out), -1, 1, seed + 1);
    o.init = random_floats(size_t(n_out), -1, 1, seed + 2);
    return o;
}

std::vector<float> reference_output(const Output& o, const std::vector<float>& x_hat, bool bias, bool accumulate) {
    std::vector<float> y = product_cpu(o.decoded, o.n_out, x_hat);
    if (bias) add_bias_cpu(y.data(), o.bias.data(), 1, o.n_out);
    if (!accumulate) return y;
    std::vector<float> out = o.init;
    add_cpu(out.data(), y.data(), o.n_out);
    return out;
}

}  // namespace

TEST_CASE("cuda kernels: quantized gemv tolerance rejects a wrong nibble order or a dropped block scale") {
    // CPU only: the parity tolerance must catch the likely layout mistakes - 4-bit elements read as
    // interleaved pairs (byte j holding elements 2j, 2j + 1) or q4_1's min ignored - on most rows.
    const int32_t n_in = 576, n_out = 192;
    const std::vector<float> x = random_floats(size_t(n_in), -1, 1, 7);
    for (DType dtype : {DType::q4_0, DType::q4_1}) {
        Output o = make_output(n_out, n_in, dtype, 11), wrong = o, no_min = o;
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

namespace {

// One launch_gemv over `outputs` (output i biased iff bit i of bias_mask) vs the CPU.
void check_gemv(const std::vector<Output>& outputs, const std::vector<float>& x, const float* norm_weight,
                unsigned bias_mask, bool accumulate, int32_t weight_offset, const std::string& what) {
    const int32_t n_in = int32_t(x.size());
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
    cuda_test::gemv_offset_weights(outs.data(), weights.data(), dtypes.data(), biases.data(), n_outs.data(),
                                   int32_t(outputs.size()), x.data(), n_in, norm_weight, kEps, accumulate,
                                   weight_offset);
    const std::vector<float> x_hat = x_hat_cpu(x, norm_weight);
    for (size_t i = 0; i < outputs.size(); i++) {
        const Output& o = outputs[i];
        std::string first;
        const size_t bad = count_off(got[i], reference_output(o, x_hat, bias_mask >> i & 1, accumulate), n_in, &first);
        INFO(what << " output " << i << " (" << dtype_name(o.dtype) << ", n_out " << o.n_out << ") n_in " << n_in
                  << (norm_weight ? " norm" : "") << (bias_mask >> i & 1 ? " bias" : "")
                  << (accumulate ? " accumulate" : "") << ": " << bad << " of " << o.n_out << " off (atol "
                  << gemv_atol(n_in) << ", rtol " << kGemvRtol << ")\n"
                  << first);
        CHECK(bad == 0);
    }
}

}  // namespace

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
                const std::vector<Output> outputs = {make_output(n_out, n_in, dtype, seed)};
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
    };
    uint64_t seed = 2000;
    for (const Case& c : kCases) {
        const std::vector<float> x = random_floats(size_t(c.n_in), -1, 1, seed++);
        const std::vector<float> nw = random_floats(size_t(c.n_in), 0.5f, 1.5f, seed++);
        std::vector<Output> outputs;
        for (size_t i = 0; i < c.n_outs.size(); i++, seed += 3)
            outputs.push_back(make_output(c.n_outs[i], c.n_in, c.dtypes[i], seed));
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
        if (cuda_emulated() && dtype != DType::q4_1) continue;  // the same kernel shape; the 16001-row case covers them
        check_gemv({make_output(n_out, n_in, dtype, 3001)}, x, nullptr, 0, false, 0, "quantized vocab gemv");
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
            const Output gate = make_output(s.n_ff, s.n_in, dtype, seed),
                         up = make_output(s.n_ff, s.n_in, dtype, seed + 3);
            seed += 6;
            for (bool norm : {false, true}) {
                const std::vector<float> x_hat = x_hat_cpu(x, norm ? nw.data() : nullptr);
                const std::vector<float> g = product_cpu(gate.decoded, s.n_ff, x_hat),
                                         u = product_cpu(up.decoded, s.n_ff, x_hat);
                std::vector<float> want(size_t(s.n_ff)), got(size_t(s.n_ff));
                swiglu_cpu(want.data(), g.data(), u.data(), 1, s.n_ff);
                cuda_test::gemv_swiglu(got.data(), x.data(), gate.weight.data(), up.weight.data(), dtype, s.n_in,
                                       s.n_ff, norm ? nw.data() : nullptr, kEps);
                std::string first;
                const size_t bad = count_off(got, want, s.n_in, &first);
                INFO("quantized gemv_swiglu " << dtype_name(dtype) << " n_in " << s.n_in << " n_ff " << s.n_ff
                                              << (norm ? " norm" : "") << ": " << bad << " off\n"
                                              << first);
                CHECK(bad == 0);
            }
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
        check_gemv({make_output(37, n_in, dtype, 6001)}, x, nullptr, 1u, true, 2, "2-byte aligned quantized gemv");
    check_gemv({make_output(37, n_in, DType::q4_1, 6002)}, x, nullptr, 0u, false, 4, "4-byte aligned q4_1 gemv");
    CHECK_THROWS_AS(check_gemv({make_output(37, n_in, DType::q8_0, 6003)}, x, nullptr, 0u, false, 1, ""), Error);
    CHECK_THROWS_AS(check_gemv({make_output(37, n_in, DType::q4_1, 6004)}, x, nullptr, 0u, false, 2, ""), Error);
    // Rows that are not whole blocks.
    const Output o = make_output(4, n_in, DType::q8_0, 6005);
    std::vector<float> out(4);
    float* outs[1] = {out.data()};
    const void* weights[1] = {o.weight.data()};
    const DType dtypes[1] = {DType::q8_0};
    const float* biases[1] = {nullptr};
    const int32_t n_outs[1] = {4};
    CHECK_THROWS_AS(cuda_test::gemv(outs, weights, dtypes, biases, n_outs, 1, x.data(), 48, nullptr, kEps, false),
                    Error);
    CHECK_THROWS_AS(cuda_test::gemv_swiglu(out.data(), x.data(), o.weight.data(), o.weight.data(), DType::q4_0, 40, 2,
                                           nullptr, kEps),
                    Error);
}

TEST_CASE("cuda kernels: quantized embedding and f16 dequantization are bit-identical to the CPU") {
    if (!have_cuda_device()) return;
    for (DType dtype : kQuantTypes) {
        const int32_t n = 7, dim = 96, n_vocab = 50;
        const std::vector<uint8_t> table = quantize(random_floats(size_t(n_vocab) * dim, -1, 1, 1), dtype);
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
    const Case kCases[] = {{2, 32, 1}, {3, 576, 100}, {17, 1024, 257}, {64, 96, 1000}};
    uint64_t seed = 7000;
    for (const Case& c : kCases) {
        const std::vector<float> x = random_floats(size_t(c.n) * c.n_in, -1, 1, seed++);
        for (DType dtype : kQuantTypes) {
            const Output o = make_output(c.n_out, c.n_in, dtype, seed);
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
