// CUDA kernels vs their CPU twins (cpu_ops.h, matmul_cpu.h) on random inputs over awkward shapes: odd
// widths, partial last blocks, contexts spanning hundreds of blocks, head_dim 64/128, GQA ratios 1-8, every
// KV dtype, split and unsplit attention. The shipped launchers run through cuda/testing/cuda_test_api.h, which
// poisons outputs and checks guard bands. Without a CUDA device (or in CUDA=0 builds) each case says
// "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compute/cpu_ops.h"
#include "support/cuda_emu.h"
#include "support/cuda_kernel_checks.h"
#include "support/random_model.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

#ifndef KVLM_CUDA

TEST_CASE("cuda kernels: parity with the CPU twins") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

namespace {

const DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("cuda kernels: embed, rmsnorm, swiglu, add, add_bias") {
    if (!have_cuda_device()) return;
    for (DType dtype : kDTypes) {
        const int32_t n = 7, dim = 67, n_vocab = 50;
        auto table = random_typed(size_t(n_vocab) * dim, dtype, -1, 1, 1);
        std::vector<int32_t> tokens = {0, 49, 3, 3, 17, 48, 1};
        std::vector<float> want(size_t(n) * dim), got(want.size());
        embed_cpu(want.data(), tokens.data(), table.data(), dtype, n, dim);
        cuda_test::embed(got.data(), tokens.data(), table.data(), dtype, n, dim, n_vocab);
        check_close(got.data(), want.data(), want.size(), 0, 0, std::string("embed ") + dtype_name(dtype));
    }
    for (int32_t dim : {1, 63, 64, 1000, 4096}) {
        const int32_t n = 5;
        auto x = random_floats(size_t(n) * dim, -3, 3, 2), w = random_floats(size_t(dim), 0.5f, 1.5f, 3);
        std::vector<float> want(x.size()), got(x.size());
        rmsnorm_cpu(want.data(), x.data(), w.data(), n, dim, 1e-5f);
        cuda_test::rmsnorm(got.data(), x.data(), w.data(), n, dim, 1e-5f);
        check_close(got.data(), want.data(), want.size(), 1e-6f, 1e-5f, "rmsnorm dim " + std::to_string(dim));
    }
    for (int32_t n_ff : {1, 96, 1001}) {
        const int32_t n = 3;
        auto gate = random_floats(size_t(n) * n_ff, -8, 8, 4), up = random_floats(size_t(n) * n_ff, -2, 2, 5);
        std::vector<float> want(gate.size()), got(gate.size());
        swiglu_cpu(want.data(), gate.data(), up.data(), n, n_ff);
        cuda_test::swiglu(got.data(), gate.data(), up.data(), n, n_ff);
        check_close(got.data(), want.data(), want.size(), 1e-6f, 1e-5f, "swiglu n_ff " + std::to_string(n_ff));

        auto x = random_floats(size_t(n) * n_ff, -1, 1, 6), bias = random_floats(size_t(n_ff), -1, 1, 7);
        std::vector<float> want_add = x, got_add = x, want_bias = x, got_bias = x;
        add_cpu(want_add.data(), up.data(), int64_t(x.size()));
        cuda_test::add(got_add.data(), up.data(), int64_t(x.size()));
        check_close(got_add.data(), want_add.data(), x.size(), 0, 0, "add");
        add_bias_cpu(want_bias.data(), bias.data(), n, n_ff);
        cuda_test::add_bias(got_bias.data(), bias.data(), n, n_ff);
        check_close(got_bias.data(), want_bias.data(), x.size(), 0, 0, "add_bias");
    }
}

TEST_CASE("cuda kernels: rope with and without llama3 scaling") {
    if (!have_cuda_device()) return;
    for (int32_t head_dim : {64, 128, 96}) {
        for (bool llama3 : {false, true}) {
            RopeScaling scaling;
            if (llama3) scaling.type = "llama3", scaling.factor = 8.0f;
            std::vector<float> inv_freq(size_t(head_dim / 2));
            rope_inv_freq(inv_freq.data(), head_dim, 500000.0f, scaling);
            const int32_t n = 6, n_heads = 3;
            std::vector<int32_t> positions = {0, 1, 17, 4095, 65536, 131071};
            auto x = random_floats(size_t(n) * n_heads * head_dim, -2, 2, 8);
            std::vector<float> want = x, got = x;
            rope_cpu(want.data(), positions.data(), inv_freq.data(), n, n_heads, head_dim);
            cuda_test::rope(got.data(), positions.data(), inv_freq.data(), n, n_heads, head_dim);
            check_close(got.data(), want.data(), want.size(), 1e-5f, 1e-5f,
                        "rope head_dim " + std::to_string(head_dim) + (llama3 ? " llama3" : ""));
        }
    }
}

TEST_CASE("cuda kernels: kv_write stores the same bytes through the block table") {
    if (!have_cuda_device()) return;
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {  // q8_0: the CPU's quantizer's bytes
        for (int32_t block_size : {1, 7, 16}) {
            KvLayout layout;
            layout.n_layers = 3, layout.block_size = block_size, layout.n_kv_heads = 2, layout.head_dim = 64;
            layout.dtype = dtype;
            const int32_t n = 30, pos0 = 5, layer = 1;
            const int32_t n_table = (pos0 + n + block_size - 1) / block_size, n_blocks = n_table + 3;
            std::vector<int32_t> table(static_cast<size_t>(n_blocks));
            std::iota(table.begin(), table.end(), 0);
            std::shuffle(table.begin(), table.end(), std::mt19937(11));
            table.resize(size_t(n_table));
            std::vector<int32_t> positions(static_cast<size_t>(n));
            std::iota(positions.begin(), positions.end(), pos0);
            auto k = random_floats(size_t(n) * layout.row_elements(), -2, 2, 9);
            auto v = random_floats(size_t(n) * layout.row_elements(), -2, 2, 10);
            auto pool = random_typed(size_t(n_blocks) * size_t(layout.block_elements()), dtype, -1, 1, 12);
            std::vector<uint8_t> want = pool, got = pool;
            kv_write_cpu(want.data(), layout, layer, k.data(), v.data(), table.data(), positions.data(), n);
            cuda_test::kv_write(got.data(), n_blocks, layout, layer, k.data(), v.data(), table.data(), n_table,
                                positions.data(), n);
            INFO("dtype " << dtype_name(dtype) << " block_size " << block_size);
            CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
        }
    }
}

TEST_CASE("cuda kernels: paged attention (decode and prefill, GQA, split and unsplit)") {
    if (!have_cuda_device()) return;
    struct Heads { int32_t n_heads, n_kv_heads; };
    const Heads kHeads[] = {{4, 4}, {6, 3}, {8, 2}, {8, 1}};
    struct Shape { int32_t n, pos0; };  // n queries at positions pos0 .. pos0 + n - 1
    // {300, 0} split maximally leaves the second split empty for the first 256 queries.
    const Shape kShapes[] = {{1, 0}, {1, 36}, {1, 2999}, {40, 0}, {33, 200}, {3, 1500}, {300, 0}};
    uint64_t seed = 100;
    for (int32_t head_dim : {64, 128}) {
        for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::q8_0}) {
            for (const Heads& heads : kHeads) {
                for (int32_t block_size : {16, 5}) {
                    for (const Shape& shape : kShapes) {
                        // Every combination of dtype x heads would be slow; f16, q8_0 and block_size 5 cover a
                        // subset.
                        if ((dtype == DType::f16 || dtype == DType::q8_0) && (heads.n_heads != 8 || heads.n_kv_heads != 2))
                            continue;
                        // Emulated: the long contexts and the 300-query batch for one head_dim, block size
                        // and GQA ratio (every dtype; the 300-query batch in bf16).
                        if (cuda_emulated() && shape.pos0 + shape.n > 100 &&
                            (head_dim != 64 || block_size != 16 || heads.n_heads != 8 || heads.n_kv_heads != 2 ||
                             (shape.n == 300 && dtype != DType::bf16)))
                            continue;
                        KvLayout layout;
                        layout.n_layers = 2, layout.block_size = block_size, layout.n_kv_heads = heads.n_kv_heads;
                        layout.head_dim = head_dim, layout.dtype = dtype;
                        const int32_t layer = 1, n = shape.n, end = shape.pos0 + shape.n;
                        const int32_t n_table = (end + block_size - 1) / block_size, n_blocks = n_table + 2;
                        std::vector<int32_t> table(static_cast<size_t>(n_blocks));
                        std::iota(table.begin(), table.end(), 0);
                        std::shuffle(table.begin(), table.end(), std::mt19937(uint32_t(seed)));
                        table.resize(size_t(n_table));
                        std::vector<int32_t> positions(static_cast<size_t>(n));
                        std::iota(positions.begin(), positions.end(), shape.pos0);
                        auto pool = random_typed(size_t(n_blocks) * size_t(layout.block_elements()), dtype, -1, 1, seed++);
                        // Scaled so softmaxes are neither flat nor one-hot.
                        auto q = random_floats(size_t(n) * heads.n_heads * head_dim, -0.6f, 0.6f, seed++);
                        std::vector<float> want(q.size());
                        paged_attention_cpu(want.data(), q.data(), pool.data(), layout, layer, table.data(),
                                            positions.data(), n, heads.n_heads, nullptr);
                        // (n_sms, scratch rows): no scratch; a typical GPU; forced maximal splitting.
                        const std::pair<int32_t, int64_t> kSplits[] = {{132, 0}, {132, 1 << 14}, {1 << 20, 1 << 20}};
                        for (auto [n_sms, asked_rows] : kSplits) {
                            // Splits are at least 256 keys (paged_attention.cu's kMinKeysPerSplit).
                            const int64_t rows = cuda_test_scratch_rows(
                                asked_rows, int64_t(n) * heads.n_heads * ((end + 255) / 256 + 1));
                            std::vector<float> got(q.size());
                            cuda_test::paged_attention(got.data(), q.data(), pool.data(), n_blocks, layout, layer,
                                                       table.data(), n_table, positions.data(), n, heads.n_heads,
                                                       n_sms, rows);
                            std::ostringstream what;
                            what << "attention " << dtype_name(dtype) << " head_dim " << head_dim << " heads "
                                 << heads.n_heads << "/" << heads.n_kv_heads << " block_size " << block_size << " n "
                                 << n << " pos0 " << shape.pos0 << " n_sms " << n_sms << " scratch " << rows;
                            check_close(got.data(), want.data(), want.size(), 2e-5f, 1e-4f, what.str());
                        }
                    }
                }
            }
        }
    }
}

// |got - want| <= tol * max(1, |want|) after widening got from `dtype` (16-bit outputs: one rounding).
static void check_typed(const std::vector<uint8_t>& got, DType dtype, const std::vector<float>& want, float tol,
                 const std::string& what) {
    std::vector<float> wide(want.size());
    convert_to_f32(dtype, got.data(), wide.data(), want.size());
    check_close(wide.data(), want.data(), want.size(), tol, tol, what);
}

TEST_CASE("cuda kernels: rmsnorm and swiglu straight into a 16-bit GEMM input") {
    if (!have_cuda_device()) return;
    for (DType dtype : kDTypes) {
        // f32 must equal launch_rmsnorm / launch_swiglu bit for bit; 16-bit outputs are one rounding away
        // (2^-8 relative for bf16, 2^-11 for f16, plus the f32 kernels' own 1e-5).
        const float tol = dtype == DType::f32 ? 0.0f : dtype == DType::bf16 ? 4e-3f : 6e-4f;
        for (int32_t dim : {1, 63, 576, 4096}) {
            const int32_t n = 5;
            auto x = random_floats(size_t(n) * dim, -3, 3, 30), w = random_floats(size_t(dim), 0.5f, 1.5f, 31);
            std::vector<float> want(x.size());
            cuda_test::rmsnorm(want.data(), x.data(), w.data(), n, dim, 1e-5f);  // the f32 kernel
            std::vector<uint8_t> got(x.size() * dtype_size(dtype));
            cuda_test::rmsnorm_to(got.data(), x.data(), w.data(), n, dim, 1e-5f, dtype);
            check_typed(got, dtype, want, tol, std::string("rmsnorm_to ") + dtype_name(dtype) + " dim " + std::to_string(dim));
        }
        for (int32_t n_ff : {1, 1001, 14336}) {
            const int32_t n = 3;
            auto gate = random_floats(size_t(n) * n_ff, -8, 8, 32), up = random_floats(size_t(n) * n_ff, -2, 2, 33);
            std::vector<float> want(gate.size());
            swiglu_cpu(want.data(), gate.data(), up.data(), n, n_ff);
            std::vector<uint8_t> got(gate.size() * dtype_size(dtype));
            cuda_test::swiglu_to(got.data(), gate.data(), up.data(), n, n_ff, dtype);
            check_typed(got, dtype, want, std::max(tol, 1e-5f),
                        std::string("swiglu_to ") + dtype_name(dtype) + " n_ff " + std::to_string(n_ff));
        }
    }
}

TEST_CASE("cuda kernels: cuBLAS matmul accumulating into its output (the fused residual add)") {
    if (!have_cuda_cublas()) return;
    for (DType dtype : kDTypes) {
        const int64_t n = 9, n_in = 320, n_out = 130;
        auto x = random_floats(size_t(n * n_in), -1, 1, 40);
        float scale = 1.0f / std::sqrt(float(n_in));
        auto w = random_typed(size_t(n_out * n_in), dtype, -scale, scale, 41);
        auto residual = random_floats(size_t(n * n_out), -4, 4, 42);
        std::vector<float> want(residual.size()), got = residual;
        matmul_cpu(want.data(), x.data(), w.data(), dtype, n, n_in, n_out, nullptr);
        for (size_t i = 0; i < want.size(); i++) want[i] += residual[i];
        cuda_test::matmul_accumulate(got.data(), x.data(), w.data(), dtype, n, n_in, n_out);
        float tol = dtype == DType::f32 ? 1e-4f : dtype == DType::f16 ? 3e-3f : 1.5e-2f;
        check_close(got.data(), want.data(), want.size(), tol, tol, std::string("matmul accumulate ") + dtype_name(dtype));
    }
}

TEST_CASE("cuda kernels: cuBLAS matmul vs matmul_cpu") {
    if (!have_cuda_cublas()) return;
    struct Shape { int64_t n, n_in, n_out; };
    for (Shape s : {Shape{1, 64, 100}, Shape{7, 288, 768}, Shape{33, 1000, 513}, Shape{512, 256, 96}}) {
        for (DType dtype : kDTypes) {
            auto x = random_floats(size_t(s.n * s.n_in), -1, 1, 20);
            float scale = 1.0f / std::sqrt(float(s.n_in));
            auto w = random_typed(size_t(s.n_out * s.n_in), dtype, -scale, scale, 21);
            std::vector<float> want(size_t(s.n * s.n_out)), got(want.size());
            matmul_cpu(want.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out, nullptr);
            cuda_test::matmul(got.data(), x.data(), w.data(), dtype, s.n, s.n_in, s.n_out);
            // f32: tight; f16/bf16: the GPU also rounds x to the weight dtype.
            float tol = dtype == DType::f32 ? 1e-4f : dtype == DType::f16 ? 3e-3f : 1.5e-2f;
            std::ostringstream what;
            what << "matmul " << dtype_name(dtype) << " n " << s.n << " n_in " << s.n_in << " n_out " << s.n_out;
            check_close(got.data(), want.data(), want.size(), tol, tol, what.str());
        }
    }
}

#endif  // KVLM_CUDA
