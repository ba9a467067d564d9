// CPU ops against naive double-precision references on random inputs over awkward shapes, with guard
// bands around outputs; plus the bit-identity properties the backend relies on (batching, threads, SIMD).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include "compute/cpu_ops.h"
#include "format/quant_blocks.h"
#include "compute/matmul_cpu.h"
#include "support/random_model.h"
#include "util/thread_pool.h"

using namespace kvlm;
using kvlm::test::random_floats;

namespace {

constexpr size_t kGuard = 16;
constexpr float kSentinel = -12345.5f;

// A float buffer with sentinel guard bands on both sides.
struct Guarded {
    std::vector<float> storage;
    explicit Guarded(size_t n) : storage(n + 2 * kGuard, kSentinel) {}
    float* data() { return storage.data() + kGuard; }
    size_t size() const { return storage.size() - 2 * kGuard; }
    bool guards_intact() const {
        for (size_t i = 0; i < kGuard; i++)
            if (storage[i] != kSentinel || storage[storage.size() - 1 - i] != kSentinel) return false;
        return true;
    }
};

// Values as they are after a round trip through dtype.
std::vector<float> round_through(const std::vector<float>& v, DType dtype) {
    std::vector<uint8_t> bytes(dtype_bytes(dtype, v.size()));  // quantized: v.size() a multiple of 32
    convert_from_f32(dtype, v.data(), bytes.data(), v.size());
    std::vector<float> out(v.size());
    convert_to_f32(dtype, bytes.data(), out.data(), v.size());
    return out;
}

std::vector<uint8_t> encode(const std::vector<float>& v, DType dtype) {
    std::vector<uint8_t> bytes(dtype_bytes(dtype, v.size()));
    convert_from_f32(dtype, v.data(), bytes.data(), v.size());
    return bytes;
}

// Checks |got - want| <= atol + rtol |want| and reports the first few mismatches.
void check_close(const float* got, const std::vector<double>& want, double atol, double rtol, const char* what) {
    int n_bad = 0;
    for (size_t i = 0; i < want.size(); i++) {
        double err = std::fabs(double(got[i]) - want[i]);
        if (!(err <= atol + rtol * std::fabs(want[i]))) {
            if (n_bad < 5) MESSAGE(what << ": element " << i << " = " << got[i] << ", expected " << want[i]);
            n_bad++;
        }
    }
    CHECK_MESSAGE(n_bad == 0, what << ": " << n_bad << " of " << want.size() << " elements out of tolerance");
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

}  // namespace

TEST_CASE("cpu_ops: matmul matches a double reference for f32/f16/bf16 weights and awkward shapes") {
    ThreadPool pool3(3);
    struct Shape { int64_t n, n_in, n_out; };
    const Shape shapes[] = {{1, 1, 1}, {1, 7, 5}, {2, 8, 4}, {3, 63, 17}, {1, 64, 33}, {5, 100, 9}, {35, 72, 21}, {37, 130, 45}, {1, 1000, 70}};
    uint64_t seed = 1;
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        for (const Shape& s : shapes) {
            CAPTURE(dtype_name(dtype));
            CAPTURE(s.n);
            CAPTURE(s.n_in);
            CAPTURE(s.n_out);
            std::vector<float> x = random_floats(size_t(s.n * s.n_in), -1.0f, 1.0f, seed++);
            std::vector<float> w_values = round_through(random_floats(size_t(s.n_out * s.n_in), -1.0f, 1.0f, seed++), dtype);
            std::vector<uint8_t> w = encode(w_values, dtype);
            std::vector<double> want(size_t(s.n * s.n_out));
            for (int64_t t = 0; t < s.n; t++)
                for (int64_t r = 0; r < s.n_out; r++) {
                    double sum = 0;
                    for (int64_t i = 0; i < s.n_in; i++) sum += double(w_values[size_t(r * s.n_in + i)]) * x[size_t(t * s.n_in + i)];
                    want[size_t(t * s.n_out + r)] = sum;
                }
            Guarded out(want.size());
            matmul_cpu(out.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, nullptr);
            CHECK(out.guards_intact());
            check_close(out.data(), want, 1e-5, 1e-5, "matmul");

            // Same bits token by token, with 3 threads, and on every SIMD path the CPU has.
            Guarded single(want.size()), threaded(want.size());
            for (int64_t t = 0; t < s.n; t++)
                matmul_cpu(single.data() + t * s.n_out, x.data() + t * s.n_in, w.data(), dtype, 1, s.n_in, s.n_out, nullptr);
            matmul_cpu(threaded.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, &pool3);
            CHECK(same_bits(out.data(), single.data(), want.size()));
            CHECK(same_bits(out.data(), threaded.data(), want.size()));
            CHECK(threaded.guards_intact());
            test::for_each_cpu_path([&](CpuPath path) {
                CAPTURE(cpu_path_name(path));
                Guarded other(want.size());
                matmul_cpu(other.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, &pool3);
                CHECK(same_bits(out.data(), other.data(), want.size()));
                CHECK(other.guards_intact());
            });
        }
    }
}

namespace {

// Raw quantized rows with arbitrary bytes (any int8 including -128, any nibble), small random f16 scales, and
// one all-zero block: the kernels must handle every bit pattern a GGUF file can hold.
std::vector<uint8_t> random_quantized_rows(DType dtype, int64_t n_rows, int64_t n_in, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const size_t block_bytes = dtype_block_bytes(dtype);
    std::vector<uint8_t> bytes(size_t(dtype_bytes(dtype, uint64_t(n_rows * n_in))));
    for (size_t b = 0; b < bytes.size() / block_bytes; b++) {
        uint8_t* block = bytes.data() + b * block_bytes;
        for (size_t i = 0; i < block_bytes; i++) block[i] = uint8_t(rng());
        auto scale = [&](uint8_t* at, float lo, float hi) {
            uint16_t h = f32_to_f16(lo + (hi - lo) * float(rng() % 1000) / 1000.0f);
            std::memcpy(at, &h, 2);
        };
        scale(block, 0.0005f, 0.01f);
        if (dtype == DType::q4_1) scale(block + 2, -0.05f, 0.05f);
        if (b == 1) std::memset(block, 0, block_bytes);
    }
    return bytes;
}

// The canonical order of compute/cpu_kernels.h, written out independently of the kernels from the block
// layouts of format/dtype.h. Also returns the bound on the error that 16-bit activations allow: half a
// quantization step of each activation block times the weight's magnitude.
float canonical_quantized_dot(const uint8_t* w_raw, DType dtype, const float* x, int64_t n_in, double* error_bound) {
    float acc = 0.0f, bias = 0.0f;
    *error_bound = 0;
    const size_t block_bytes = dtype_block_bytes(dtype);
    for (int64_t b = 0; b < n_in / 32; b++) {
        const float* xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(xb[j]));
        const float dx = amax / 32767.0f, inv = dx != 0.0f ? 1.0f / dx : 0.0f;
        const uint8_t* block = w_raw + size_t(b) * block_bytes;
        uint16_t d_bits, m_bits;
        std::memcpy(&d_bits, block, 2);
        std::memcpy(&m_bits, block + 2, 2);
        const float dw = f16_to_f32(d_bits), m = f16_to_f32(m_bits);
        int64_t sum = 0, q_sum = 0;
        for (int j = 0; j < 32; j++) {
            int32_t weight;
            if (dtype == DType::q8_0) {
                weight = int8_t(block[2 + j]);
            } else {
                const uint8_t* qs = block + (dtype == DType::q4_1 ? 4 : 2);
                int32_t nibble = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
                weight = dtype == DType::q4_0 ? nibble - 8 : nibble;
            }
            const int32_t q = int32_t(std::nearbyint(xb[j] * inv));
            sum += int64_t(weight) * q;
            q_sum += q;
            double w = double(weight) * dw + (dtype == DType::q4_1 ? m : 0.0f);
            *error_bound += std::fabs(w) * dx * 0.5;
        }
        acc = std::fma(float(sum), dw * dx, acc);
        if (dtype == DType::q4_1) bias = std::fma(m, dx * float(q_sum), bias);
    }
    return acc + bias;
}

}  // namespace

TEST_CASE("cpu_ops: quantized matmul follows the canonical order on every path and is close to exact") {
    ThreadPool pool3(3);
    struct Shape { int64_t n, n_in, n_out; };
    const Shape shapes[] = {{1, 32, 1},    {1, 64, 5},  {3, 96, 17},   {5, 576, 9},
                            {37, 160, 45}, {2, 1536, 7}, {4, 160, 13}, {6, 64, 72},
                            // Many tokens: passes of 48 with a partial one, several 64-row tiles, and leftover
                            // rows whose token scales outgrow the unpacked rows' scratch.
                            {100, 64, 200}, {700, 64, 13}};
    uint64_t seed = 100;
    for (DType dtype : {DType::q8_0, DType::q4_0, DType::q4_1}) {
        for (const Shape& s : shapes) {
            CAPTURE(dtype_name(dtype));
            CAPTURE(s.n);
            CAPTURE(s.n_in);
            CAPTURE(s.n_out);
            std::vector<uint8_t> w = random_quantized_rows(dtype, s.n_out, s.n_in, seed++);
            std::vector<float> w_values(size_t(s.n_out * s.n_in));
            convert_to_f32(dtype, w.data(), w_values.data(), w_values.size());
            std::vector<float> x = random_floats(size_t(s.n * s.n_in), -1.0f, 1.0f, seed++);
            std::fill(x.begin(), x.begin() + std::min<int64_t>(32, s.n_in), 0.0f);  // an all-zero block
            x[size_t(s.n_in / 2)] = 40.0f;                                         // and an outlier
            std::vector<float> canonical(size_t(s.n * s.n_out));
            std::vector<double> exact(canonical.size()), bound(canonical.size());
            for (int64_t t = 0; t < s.n; t++)
                for (int64_t r = 0; r < s.n_out; r++) {
                    const size_t i = size_t(t * s.n_out + r);
                    const float* xt = x.data() + t * s.n_in;
                    canonical[i] = canonical_quantized_dot(w.data() + dtype_bytes(dtype, uint64_t(r * s.n_in)), dtype,
                                                           xt, s.n_in, &bound[i]);
                    for (int64_t k = 0; k < s.n_in; k++) exact[i] += double(w_values[size_t(r * s.n_in + k)]) * xt[k];
                }
            Guarded out(canonical.size());
            matmul_cpu(out.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, &pool3);
            CHECK(out.guards_intact());
            CHECK(same_bits(out.data(), canonical.data(), canonical.size()));
            size_t n_outside = 0;
            for (size_t i = 0; i < exact.size(); i++)
                n_outside += !(std::fabs(out.data()[i] - exact[i]) <= bound[i] * 1.001 + 1e-4 * std::fabs(exact[i]) + 1e-6);
            CHECK(n_outside == 0);
            for (int64_t t = 0; t < s.n; t++) {
                std::vector<float> one(size_t(s.n_out));
                matmul_cpu(one.data(), x.data() + t * s.n_in, w.data(), dtype, 1, s.n_in, s.n_out, nullptr);
                CHECK(same_bits(one.data(), out.data() + t * s.n_out, one.size()));
            }
            test::for_each_cpu_path([&](CpuPath path) {
                CAPTURE(cpu_path_name(path));
                Guarded other(canonical.size());
                matmul_cpu(other.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, &pool3);
                CHECK(same_bits(other.data(), canonical.data(), canonical.size()));
            });
        }
    }
}

namespace {

// The canonical order of compute/cpu_kernels.h for these types, written out here from QuantChunks (whose
// values tests/import/test_gguf.cpp checks against the gguf package), with the 16-bit activations' error bound.
float canonical_other_quant_dot(const uint8_t* w_raw, DType dtype, const float* x, int64_t n_in, double* error_bound) {
    float acc[2][4] = {}, bias[2][4] = {};  // [half][lane]: chunk b in lane b % 4, per half for the per-16 types
    *error_bound = 0;
    const int chunks = int(dtype_block_elements(dtype) / 32);
    const bool per_16 = quant_scale_per_16(dtype), has_min = quant_has_min(dtype);
    for (int64_t b = 0; b < n_in / 32; b++) {
        const float* xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(xb[j]));
        const float dx = amax / 32767.0f, inv = dx != 0.0f ? 1.0f / dx : 0.0f;
        QuantChunk c;
        decode_quant_chunk(dtype, w_raw + size_t(b / chunks) * dtype_block_bytes(dtype), int(b % chunks), &c);
        int32_t q[32], q_sum = 0;
        for (int j = 0; j < 32; j++) {
            q[j] = int32_t(std::nearbyint(xb[j] * inv));
            q_sum += q[j];
            *error_bound += std::fabs(double(c.scale[j / 16]) * c.w[j] + c.min[j / 16]) * dx * 0.5;
        }
        for (int h = 0; h < (per_16 ? 2 : 1); h++) {
            const int begin = per_16 ? 16 * h : 0, end = per_16 ? begin + 16 : 32;
            int64_t sum = 0, half_q = 0;
            for (int j = begin; j < end; j++) sum += int64_t(c.w[j]) * q[j], half_q += q[j];
            float& a = acc[h][b % 4];
            a = std::fma(float(sum), c.scale[h] * dx, a);
            float& m = bias[h][b % 4];
            if (has_min) m = std::fma(c.min[h], per_16 ? dx * float(half_q) : dx * float(q_sum), m);
        }
    }
    const auto sum4 = [](const float* l) { return (l[0] + l[1]) + (l[2] + l[3]); };
    return per_16 ? (sum4(acc[0]) + sum4(acc[1])) + (sum4(bias[0]) + sum4(bias[1])) : sum4(acc[0]) + sum4(bias[0]);
}

}  // namespace

TEST_CASE("cpu_ops: q5_0, q5_1, iq4_nl, k-quant and iq4_xs matmul follow the canonical order on every path") {
    ThreadPool pool3(3);
    struct Shape { int64_t n, n_in, n_out; };
    // Rows of 1-4 tokens are read as stored, more unpacked in groups of 8 rows (the rest as stored); blocks of
    // 32 also come in rows of chunks that are not whole fours (576 = 18 chunks: SmolLM2's width).
    const Shape shapes[] = {{1, 256, 1}, {1, 512, 5}, {3, 768, 17}, {7, 1536, 9}, {60, 256, 33}, {4, 256, 8}};
    const Shape shapes_of_32[] = {{1, 32, 3}, {2, 96, 9}, {1, 576, 4}, {5, 576, 17}, {9, 160, 8}};
    uint64_t seed = 900;
    for (DType dtype : {DType::q5_0, DType::q5_1, DType::iq4_nl, DType::q2_k, DType::q3_k, DType::q4_k,
                        DType::q5_k, DType::q6_k, DType::iq4_xs}) {
        std::vector<Shape> all(std::begin(shapes), std::end(shapes));
        if (dtype_block_elements(dtype) == 32) all.insert(all.end(), std::begin(shapes_of_32), std::end(shapes_of_32));
        for (const Shape& s : all) {
            CAPTURE(dtype_name(dtype));
            CAPTURE(s.n);
            CAPTURE(s.n_in);
            CAPTURE(s.n_out);
            std::vector<uint8_t> w = test::random_quant_blocks(dtype, s.n_out * s.n_in, 8.0f, seed++);
            std::vector<float> w_values(size_t(s.n_out * s.n_in));
            convert_to_f32(dtype, w.data(), w_values.data(), w_values.size());
            std::vector<float> x = random_floats(size_t(s.n * s.n_in), -1.0f, 1.0f, seed++);
            std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero chunk
            x[size_t(s.n_in / 2)] = 40.0f;               // and an outlier
            std::vector<float> canonical(size_t(s.n * s.n_out));
            std::vector<double> exact(canonical.size()), bound(canonical.size());
            for (int64_t t = 0; t < s.n; t++)
                for (int64_t r = 0; r < s.n_out; r++) {
                    const size_t i = size_t(t * s.n_out + r);
                    const float* xt = x.data() + t * s.n_in;
                    canonical[i] = canonical_other_quant_dot(w.data() + dtype_bytes(dtype, uint64_t(r * s.n_in)), dtype,
                                                             xt, s.n_in, &bound[i]);
                    for (int64_t k = 0; k < s.n_in; k++) exact[i] += double(w_values[size_t(r * s.n_in + k)]) * xt[k];
                }
            Guarded out(canonical.size());
            matmul_cpu(out.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, &pool3);
            CHECK(out.guards_intact());
            CHECK(same_bits(out.data(), canonical.data(), canonical.size()));
            size_t n_outside = 0;
            for (size_t i = 0; i < exact.size(); i++)
                n_outside += !(std::fabs(out.data()[i] - exact[i]) <= bound[i] * 1.001 + 1e-4 * std::fabs(exact[i]) + 1e-6);
            CHECK(n_outside == 0);
            test::for_each_cpu_path([&](CpuPath path) {
                CAPTURE(cpu_path_name(path));
                Guarded other(canonical.size());
                matmul_cpu(other.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, &pool3);
                CHECK(same_bits(other.data(), canonical.data(), canonical.size()));
            });
        }
    }
}

TEST_CASE("cpu_ops: a shared-input matmul gives each matrix matmul_cpu's bits, for mixed types and splits") {
    ThreadPool pool3(3);
    const int64_t n_in = 96;
    const DType dtypes[] = {DType::f16, DType::q4_1, DType::f32, DType::q8_0};
    const int64_t n_outs[] = {13, 40, 7, 24};
    std::vector<std::vector<uint8_t>> weights;
    for (int i = 0; i < 4; i++)
        weights.push_back(dtype_is_quantized(dtypes[i])
                              ? random_quantized_rows(dtypes[i], n_outs[i], n_in, 700 + uint64_t(i))
                              : encode(random_floats(size_t(n_outs[i] * n_in), -1, 1, 800 + uint64_t(i)), dtypes[i]));
    for (int64_t n : {1, 5, 33}) {
        CAPTURE(n);
        std::vector<float> x = random_floats(size_t(n * n_in), -1, 1, 900 + uint64_t(n));
        std::vector<std::vector<float>> shared(4), separate(4);
        std::vector<MatmulOutput> outputs;
        for (int i = 0; i < 4; i++) {
            shared[size_t(i)].assign(size_t(n * n_outs[i]), 0.0f);
            separate[size_t(i)].assign(size_t(n * n_outs[i]), 0.0f);
            outputs.push_back({shared[size_t(i)].data(), weights[size_t(i)].data(), dtypes[i], n_outs[i]});
            matmul_cpu(separate[size_t(i)].data(), x.data(), weights[size_t(i)].data(), dtypes[i], n, n_in, n_outs[i],
                       nullptr);
        }
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
            matmul_cpu_shared_input(outputs.data(), 4, x.data(), n, n_in, pool);
            for (int i = 0; i < 4; i++) {
                CAPTURE(i);
                CHECK(same_bits(shared[size_t(i)].data(), separate[size_t(i)].data(), shared[size_t(i)].size()));
            }
        }
    }
}

TEST_CASE("cpu_ops: dot_cpu equals the matmul element and axpy is an fma per element") {
    std::vector<float> a = random_floats(77, -1, 1, 11), b = random_floats(77, -1, 1, 12);
    float out = 0;
    matmul_cpu(&out, b.data(), a.data(), DType::f32, 1, 77, 1, nullptr);
    CHECK(dot_cpu(a.data(), DType::f32, b.data(), 77) == out);
    std::vector<float> y = random_floats(77, -1, 1, 13), y2 = y;
    axpy_cpu(y.data(), 0.37f, a.data(), DType::f32, 77);
    for (size_t i = 0; i < 77; i++) CHECK(y[i] == std::fma(0.37f, a[i], y2[i]));
}

TEST_CASE("cpu_ops: rmsnorm, bias, residual add and swiglu match double references") {
    const int32_t n = 3, dim = 67;
    std::vector<float> x = random_floats(size_t(n * dim), -2, 2, 21), w = random_floats(size_t(dim), 0.5f, 1.5f, 22);
    Guarded out(size_t(n * dim));
    rmsnorm_cpu(out.data(), x.data(), w.data(), n, dim, 1e-5f);
    std::vector<double> want(size_t(n * dim));
    for (int32_t t = 0; t < n; t++) {
        double ss = 0;
        for (int32_t i = 0; i < dim; i++) ss += double(x[size_t(t * dim + i)]) * x[size_t(t * dim + i)];
        double scale = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (int32_t i = 0; i < dim; i++) want[size_t(t * dim + i)] = w[size_t(i)] * x[size_t(t * dim + i)] * scale;
    }
    CHECK(out.guards_intact());
    check_close(out.data(), want, 1e-6, 1e-5, "rmsnorm");

    std::vector<float> g = random_floats(size_t(n * dim), -6, 6, 23), u = random_floats(size_t(n * dim), -2, 2, 24);
    Guarded sw(size_t(n * dim));
    swiglu_cpu(sw.data(), g.data(), u.data(), n, dim);
    for (size_t i = 0; i < want.size(); i++) want[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
    CHECK(sw.guards_intact());
    check_close(sw.data(), want, 1e-6, 1e-5, "swiglu");

    // exp_sum (a softmax's denominator, -v's token probability) on every path, lengths off the vector width.
    for (int64_t len : {int64_t(1), int64_t(7), int64_t(8), int64_t(67), int64_t(49152)}) {
        std::vector<float> logits = random_floats(size_t(len), -100, 20, 26);
        const float max_logit = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float l : logits) sum += std::exp(double(l) - max_logit);
        test::for_each_cpu_path([&](CpuPath path) {
            CAPTURE(cpu_path_name(path));
            CAPTURE(len);
            CHECK(exp_sum_cpu(logits.data(), len, max_logit) == doctest::Approx(sum).epsilon(1e-6));
        });
    }

    std::vector<float> b = random_floats(size_t(dim), -1, 1, 25), xb = x;
    add_bias_cpu(xb.data(), b.data(), n, dim);
    add_cpu(xb.data(), g.data(), int64_t(n) * dim);
    for (size_t i = 0; i < want.size(); i++) want[i] = double(x[i]) + b[i % size_t(dim)] + g[i];
    check_close(xb.data(), want, 1e-5, 1e-6, "bias + add");
}

TEST_CASE("cpu_ops: embed converts rows of the table") {
    std::vector<float> table = round_through(random_floats(10 * 6, -1, 1, 31), DType::bf16);
    std::vector<uint8_t> bytes = encode(table, DType::bf16);
    int32_t tokens[] = {9, 0, 4};
    Guarded out(18);
    embed_cpu(out.data(), tokens, bytes.data(), DType::bf16, 3, 6);
    CHECK(out.guards_intact());
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 6; i++) CHECK(out.data()[t * 6 + i] == table[size_t(tokens[t] * 6 + i)]);
}

TEST_CASE("cpu_ops: rope inverse frequencies, plain and llama3-scaled") {
    std::vector<float> inv(64);
    rope_inv_freq(inv.data(), 128, 10000.0f, RopeScaling{});
    for (int i = 0; i < 64; i++) CHECK(inv[size_t(i)] == doctest::Approx(std::pow(10000.0, -2.0 * i / 128)).epsilon(1e-6));

    // Expected values from Hugging Face's _compute_llama3_parameters (Llama 3.2: theta 500000, factor 32,
    // low 1, high 4, original context 8192, head_dim 64), computed in float32 with numpy.
    const double want[32] = {1, 0.66360122, 0.440366626, 0.292227805, 0.193922758, 0.128687382, 0.0853971019,
                             0.0566696189, 0.0376060307, 0.0249554086, 0.0165604409, 0.0109895291, 0.00729266508,
                             0.00483942125, 0.00321144611, 0.00129054801, 0.000429556705, 9.70828623e-05,
                             1.94616387e-05, 1.29147684e-05, 8.57025589e-06, 5.68723181e-06, 3.77405445e-06,
                             2.50446692e-06, 1.66196764e-06, 1.10288363e-06, 7.31874934e-07, 4.85673127e-07,
                             3.22293289e-07, 2.1387423e-07, 1.41927202e-07, 9.4183072e-08};
    RopeScaling llama3;
    llama3.type = "llama3";
    llama3.factor = 32;
    llama3.low_freq_factor = 1;
    llama3.high_freq_factor = 4;
    llama3.original_max_position = 8192;
    std::vector<float> scaled(32);
    rope_inv_freq(scaled.data(), 64, 500000.0f, llama3);
    for (int i = 0; i < 32; i++) {
        CAPTURE(i);
        CHECK(scaled[size_t(i)] == doctest::Approx(want[i]).epsilon(2e-6));
    }
}

TEST_CASE("cpu_ops: rope rotates dim i with i + head_dim/2 (rotate_half)") {
    for (int32_t head_dim : {8, 64, 128}) {
        CAPTURE(head_dim);
        const int32_t n = 3, n_heads = 2, half = head_dim / 2;
        int32_t positions[n] = {0, 7, 1000};
        std::vector<float> inv(static_cast<size_t>(half));
        rope_inv_freq(inv.data(), head_dim, 10000.0f, RopeScaling{});
        std::vector<float> x = random_floats(size_t(n * n_heads * head_dim), -1, 1, 40 + uint64_t(head_dim));
        Guarded y(x.size());
        std::copy(x.begin(), x.end(), y.data());
        rope_cpu(y.data(), positions, inv.data(), n, n_heads, head_dim);
        std::vector<double> want(x.size());
        for (int32_t t = 0; t < n; t++)
            for (int32_t h = 0; h < n_heads; h++)
                for (int32_t i = 0; i < half; i++) {
                    size_t base = size_t((t * n_heads + h) * head_dim);
                    double angle = double(positions[t]) * inv[size_t(i)];
                    double x0 = x[base + size_t(i)], x1 = x[base + size_t(i + half)];
                    want[base + size_t(i)] = x0 * std::cos(angle) - x1 * std::sin(angle);
                    want[base + size_t(i + half)] = x0 * std::sin(angle) + x1 * std::cos(angle);
                }
        CHECK(y.guards_intact());
        check_close(y.data(), want, 2e-4, 1e-5, "rope");
        // Position 0 is the identity.
        CHECK(same_bits(y.data(), x.data(), size_t(n_heads * head_dim)));
    }
}

namespace {

struct AttentionCase {
    int32_t head_dim, group, n_kv_heads;
    DType dtype;
};

// Writes K/V for positions 0..n_ctx-1 of layer 1 (layer 0 gets other data) through a shuffled block table,
// runs attention for queries at `query_positions`, and returns the output ([n_q, n_heads, head_dim]).
// Checks guard bands and that nothing outside the written slots changed.
std::vector<float> run_attention(const AttentionCase& c, int32_t block_size, int32_t n_ctx,
                                 const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& q,
                                 const std::vector<int32_t>& query_positions, ThreadPool* pool) {
    KvLayout layout;
    layout.n_layers = 2;
    layout.block_size = block_size;
    layout.n_kv_heads = c.n_kv_heads;
    layout.head_dim = c.head_dim;
    layout.dtype = c.dtype;
    const int32_t n_heads = c.n_kv_heads * c.group;
    const int32_t n_table = (n_ctx + block_size - 1) / block_size, n_blocks = n_table + 3;
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(uint32_t(block_size * 7 + n_ctx)));
    table.resize(size_t(n_table));

    const size_t kv_bytes = size_t(n_blocks) * layout.block_bytes();
    std::vector<uint8_t> kv(kv_bytes + 2 * 64, 0xA5);
    uint8_t* kv_data = kv.data() + 64;
    const int64_t row = layout.row_elements();
    std::vector<int32_t> positions(static_cast<size_t>(n_ctx));
    std::iota(positions.begin(), positions.end(), 0);
    // Layer 0 gets negated data so mixing layers up would show.
    std::vector<float> k0(k.size()), v0(v.size());
    for (size_t i = 0; i < k.size(); i++) k0[i] = -k[i], v0[i] = -v[i];
    kv_write_cpu(kv_data, layout, 0, k0.data(), v0.data(), table.data(), positions.data(), n_ctx);
    // Layer 1 in two calls: a prefix, then the rest.
    int32_t split = n_ctx * 2 / 3;
    kv_write_cpu(kv_data, layout, 1, k.data(), v.data(), table.data(), positions.data(), split);
    kv_write_cpu(kv_data, layout, 1, k.data() + split * row, v.data() + split * row, table.data(), positions.data() + split,
                 n_ctx - split);
    for (size_t i = 0; i < 64; i++) {
        CHECK(kv[i] == 0xA5);
        CHECK(kv[kv.size() - 1 - i] == 0xA5);
    }
    // Slots past n_ctx in the last block and unused blocks are untouched.
    for (int32_t b = 0; b < n_blocks; b++) {
        bool used = std::find(table.begin(), table.end(), b) != table.end();
        for (int32_t layer = 0; layer < 2; layer++)
            for (int32_t kind = 0; kind < 2; kind++)
                for (int32_t slot = 0; slot < block_size; slot++) {
                    int32_t idx = int32_t(std::find(table.begin(), table.end(), b) - table.begin());
                    bool written = used && idx * block_size + slot < n_ctx;
                    if (written) continue;
                    const uint8_t* p = kv_data + layout.row_byte_offset(b, layer, kind, slot);
                    bool intact = std::all_of(p, p + layout.bytes_of(row), [](uint8_t byte) { return byte == 0xA5; });
                    CHECK(intact);
                }
    }

    const int32_t n_q = int32_t(query_positions.size());
    Guarded out(size_t(n_q * n_heads * c.head_dim));
    paged_attention_cpu(out.data(), q.data(), kv_data, layout, 1, table.data(), query_positions.data(), n_q, n_heads,
                        pool);
    CHECK(out.guards_intact());
    return std::vector<float>(out.data(), out.data() + out.size());
}

}  // namespace

TEST_CASE("cpu_ops: kv_write + paged_attention == contiguous causal GQA attention (double reference)") {
    ThreadPool pool3(3);
    // Keys span three chunks of kAttentionChunk; queries sit on both sides of chunk and block boundaries and
    // in runs longer than a query tile (positions must not decrease).
    const int32_t n_ctx = 75;
    std::vector<int32_t> query_positions = {0, 5, 16, 24, 31, 32, 33, 36, 36};
    for (int32_t p = 50; p < n_ctx; p++) query_positions.push_back(p);
    uint64_t seed = 100;
    for (int32_t head_dim : {8, 12, 40, 64, 128})  // 12 and 40: vector tails
        for (int32_t group : {1, 2, 4, 8})
            for (int32_t n_kv_heads : {1, 2})
                for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {
                    if (dtype == DType::q8_0 && head_dim % 32 != 0) continue;  // whole blocks per head
                    AttentionCase c{head_dim, group, n_kv_heads, dtype};
                    CAPTURE(head_dim);
                    CAPTURE(group);
                    CAPTURE(n_kv_heads);
                    CAPTURE(dtype_name(dtype));
                    const int32_t n_heads = n_kv_heads * group, n_q = int32_t(query_positions.size());
                    const size_t row = size_t(n_kv_heads * head_dim);
                    std::vector<float> k = random_floats(size_t(n_ctx) * row, -1, 1, seed++);
                    std::vector<float> v = random_floats(size_t(n_ctx) * row, -1, 1, seed++);
                    // Larger queries make the softmax peaky, which exercises the max subtraction.
                    std::vector<float> q = random_floats(size_t(n_q * n_heads * head_dim), -3, 3, seed++);
                    std::vector<float> kr = round_through(k, dtype), vr = round_through(v, dtype);

                    std::vector<double> want(size_t(n_q * n_heads * head_dim));
                    for (int32_t t = 0; t < n_q; t++)
                        for (int32_t h = 0; h < n_heads; h++) {
                            int32_t p = query_positions[size_t(t)], kvh = h / group;
                            const float* qh = q.data() + (t * n_heads + h) * head_dim;
                            std::vector<double> s(size_t(p + 1));
                            double mx = -1e300, sum = 0;
                            for (int32_t j = 0; j <= p; j++) {
                                double d = 0;
                                for (int32_t i = 0; i < head_dim; i++) d += double(qh[i]) * kr[size_t(j) * row + size_t(kvh * head_dim + i)];
                                s[size_t(j)] = d / std::sqrt(double(head_dim));
                                mx = std::max(mx, s[size_t(j)]);
                            }
                            for (auto& e : s) sum += (e = std::exp(e - mx));
                            for (int32_t i = 0; i < head_dim; i++) {
                                double o = 0;
                                for (int32_t j = 0; j <= p; j++) o += s[size_t(j)] / sum * vr[size_t(j) * row + size_t(kvh * head_dim + i)];
                                want[size_t((t * n_heads + h) * head_dim + i)] = o;
                            }
                        }

                    std::vector<float> first;
                    for (int32_t block_size : {1, 3, 16}) {
                        CAPTURE(block_size);
                        std::vector<float> got = run_attention(c, block_size, n_ctx, k, v, q, query_positions,
                                                               block_size == 3 ? &pool3 : nullptr);
                        check_close(got.data(), want, 2e-5, 1e-4, "paged attention");
                        // Identical bits for any block size, block order and thread count.
                        if (first.empty()) first = got;
                        else CHECK(same_bits(first.data(), got.data(), got.size()));
                    }
                    // The same bits on every SIMD path (each path has its own ways through a chunk: per query,
                    // or widened once for a tile of queries and heads).
                    test::for_each_cpu_path([&](CpuPath path) {
                        CAPTURE(cpu_path_name(path));
                        std::vector<float> got = run_attention(c, 16, n_ctx, k, v, q, query_positions, &pool3);
                        CHECK(same_bits(first.data(), got.data(), got.size()));
                    });
                    // Each query alone (as in decode) gives the bits it has in the batch.
                    const size_t per_query = size_t(n_heads * head_dim);
                    for (size_t t = 0; t < query_positions.size(); t += 7) {
                        std::vector<float> q_one(q.begin() + long(t * per_query), q.begin() + long((t + 1) * per_query));
                        std::vector<float> alone = run_attention(c, 16, n_ctx, k, v, q_one, {query_positions[t]}, nullptr);
                        CHECK(same_bits(alone.data(), first.data() + t * per_query, per_query));
                    }
                }
}

TEST_CASE("cpu_ops: a q8_0 KV cache holds ggml's q8_0 blocks, and attention over it gives an f32 cache's bits") {
    // Attention reads q8_0 elements as the exact products d * q, so it must give the very bits of an f32 cache
    // that holds those products, on every SIMD path.
    ThreadPool pool3(3);
    const int32_t n_ctx = 70;
    std::vector<int32_t> query_positions = {0, 9, 31, 32, 33};
    for (int32_t p = 60; p < n_ctx; p++) query_positions.push_back(p);
    uint64_t seed = 900;
    for (int32_t head_dim : {32, 64, 128})
        for (int32_t group : {1, 3})
            for (int32_t n_kv_heads : {1, 2}) {
                CAPTURE(head_dim);
                CAPTURE(group);
                CAPTURE(n_kv_heads);
                const int32_t n_heads = n_kv_heads * group, n_q = int32_t(query_positions.size());
                const size_t row = size_t(n_kv_heads * head_dim);
                std::vector<float> k = random_floats(size_t(n_ctx) * row, -2, 2, seed++);
                std::vector<float> v = random_floats(size_t(n_ctx) * row, -2, 2, seed++);
                k[5] = 0.0f, v[row + 3] = 30.0f;  // a zero and an outlier inside blocks
                std::fill(k.begin() + long(row), k.begin() + long(row + 32), 0.0f);  // an all-zero block (d = 0)
                std::vector<float> q = random_floats(size_t(n_q * n_heads * head_dim), -3, 3, seed++);
                const std::vector<float> k_dequantized = round_through(k, DType::q8_0);
                const std::vector<float> v_dequantized = round_through(v, DType::q8_0);

                // The pool's bytes for one row are convert_from_f32's q8_0 blocks (ggml's quantizer).
                KvLayout layout{1, 4, n_kv_heads, head_dim, DType::q8_0};
                std::vector<uint8_t> pool(layout.block_bytes());
                const int32_t table[] = {0}, position[] = {2};
                kv_write_cpu(pool.data(), layout, 0, k.data() + 7 * row, v.data() + 7 * row, table, position, 1);
                const std::vector<uint8_t> k_blocks = encode(std::vector<float>(k.begin() + long(7 * row),
                                                                                k.begin() + long(8 * row)),
                                                             DType::q8_0);
                CHECK(std::memcmp(pool.data() + layout.row_byte_offset(0, 0, 0, 2), k_blocks.data(),
                                  k_blocks.size()) == 0);
                CHECK(k_blocks.size() == row / 32 * 34);

                const AttentionCase quantized{head_dim, group, n_kv_heads, DType::q8_0};
                const AttentionCase widened{head_dim, group, n_kv_heads, DType::f32};
                const std::vector<float> want =
                    run_attention(widened, 16, n_ctx, k_dequantized, v_dequantized, q, query_positions, nullptr);
                for (int32_t block_size : {1, 16, 32}) {
                    CAPTURE(block_size);
                    std::vector<float> got = run_attention(quantized, block_size, n_ctx, k, v, q, query_positions,
                                                           block_size == 1 ? &pool3 : nullptr);
                    CHECK(same_bits(got.data(), want.data(), want.size()));
                }
                test::for_each_cpu_path([&](CpuPath path) {
                    CAPTURE(cpu_path_name(path));
                    std::vector<float> got = run_attention(quantized, 16, n_ctx, k, v, q, query_positions, &pool3);
                    CHECK(same_bits(got.data(), want.data(), want.size()));
                });
            }
}

TEST_CASE("cpu_ops: thread pool runs every chunk exactly once") {
    for (int32_t n_threads : {1, 2, 3, 5}) {
        ThreadPool pool(n_threads);
        for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
            for (int64_t grain : {1, 4}) {
                std::vector<int> hits(size_t(n), 0);
                pool.parallel_for(n, [&](int64_t b, int64_t e) {
                    CHECK_MESSAGE(b % grain == 0, "chunk start not aligned to grain");
                    for (int64_t i = b; i < e; i++) hits[size_t(i)]++;
                }, grain);
                CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
            }
        }
        std::vector<int> seen(size_t(n_threads), 0);
        pool.run([&](int32_t index) { seen[size_t(index)]++; });
        CHECK(std::all_of(seen.begin(), seen.end(), [](int h) { return h == 1; }));
        CHECK_THROWS_AS(pool.run([&](int32_t index) {
            if (index == n_threads - 1) throw std::runtime_error("boom");
        }), std::runtime_error);
        // Still usable after an exception.
        int64_t total = 0;
        std::mutex m;
        pool.parallel_for(10, [&](int64_t b, int64_t e) {
            std::lock_guard<std::mutex> lock(m);
            total += e - b;
        });
        CHECK(total == 10);
    }
}
