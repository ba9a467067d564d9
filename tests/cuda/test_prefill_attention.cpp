// Tensor-core prefill attention (launch_prefill_attention) vs paged_attention_cpu and vs the CUDA paged
// attention kernel on the same pool: f16 and bf16 KV, shuffled block tables with block sizes 1, 5 and 16,
// batches from position 0 and mid-context, query counts around the 64-query tile (partial tiles, one
// query), head_dim 64/128 (plus 256 and 80), GQA 1-8. The launcher runs through cuda/testing/cuda_test_api.h, which
// poisons the output and checks guard bands. Without a CUDA device (or in CUDA=0 builds) each case says
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
#include "util/thread_pool.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

#ifndef KVLM_CUDA

TEST_CASE("cuda kernels: prefill attention on tensor cores vs the CPU twin") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

namespace kvlm {
// Defined in cuda/kernels/prefill_attention.cu and declared in cuda/kernels/cuda_ops.h, which tests cannot include (it
// pulls in cuda_runtime.h); a plain host function.
bool prefill_attention_supports(const KvLayout& layout);
}  // namespace kvlm

namespace {

// The kernel rounds q and the softmax probabilities P to the KV dtype before its MMAs (K and V are exact:
// they are stored in it); accumulation and the softmax are f32. Outputs are weighted means of V rows with
// |v| <= 1, so the error is a fraction of one rounding: bf16 keeps 8 significant bits (unit roundoff
// 2^-8 ~ 3.9e-3), f16 11 (2^-11 ~ 4.9e-4). A host emulation of the kernel over this test's shapes stayed
// under 1.7e-3 (bf16) and 2.1e-4 (f16); the bounds leave ~6-10x headroom. A q8_0 cache is staged as f16
// (d * q rounded once more), so K and V take one f16 rounding too: f16's bound still leaves ~4x.
float tolerance(DType dtype) { return dtype == DType::bf16 ? 1e-2f : 2e-3f; }

struct Heads {
    int32_t n_heads, n_kv_heads;
};

// One batch of n queries at positions pos0 .. pos0 + n - 1 over a random pool (block table shuffled, two
// spare blocks): prefill attention vs paged_attention_cpu and vs the CUDA paged attention kernel.
void check_prefill(DType dtype, int32_t head_dim, Heads heads, int32_t block_size, int32_t n, int32_t pos0,
                   uint64_t seed, ThreadPool* pool) {
    KvLayout layout;
    layout.n_layers = 2, layout.block_size = block_size, layout.n_kv_heads = heads.n_kv_heads;
    layout.head_dim = head_dim, layout.dtype = dtype;
    const int32_t layer = 1, end = pos0 + n;
    const int32_t n_table = (end + block_size - 1) / block_size, n_blocks = n_table + 2;
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(uint32_t(seed)));
    table.resize(size_t(n_table));
    std::vector<int32_t> positions(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), pos0);
    auto kv = random_typed(size_t(n_blocks) * size_t(layout.block_elements()), dtype, -1, 1, seed + 1);
    // Scaled so softmaxes are neither flat nor one-hot.
    auto q = random_floats(size_t(n) * heads.n_heads * head_dim, -0.6f, 0.6f, seed + 2);

    std::vector<float> want(q.size()), got(q.size()), paged(q.size());
    paged_attention_cpu(want.data(), q.data(), kv.data(), layout, layer, table.data(), positions.data(), n,
                        heads.n_heads, pool);
    cuda_test::prefill_attention(got.data(), q.data(), kv.data(), n_blocks, layout, layer, table.data(), n_table,
                                 positions.data(), n, heads.n_heads);
    // The existing kernel (f32 q and probabilities) with a typical GPU's split choice; emulated, only for small
    // batches (it costs far more than the prefill kernel there, and has its own tests).
    const bool cross_check = !cuda_emulated() || n <= 17;
    if (cross_check)
        cuda_test::paged_attention(paged.data(), q.data(), kv.data(), n_blocks, layout, layer, table.data(), n_table,
                                   positions.data(), n, heads.n_heads, 132, 1 << 14);

    std::ostringstream what;
    what << dtype_name(dtype) << " head_dim " << head_dim << " heads " << heads.n_heads << "/" << heads.n_kv_heads
         << " block_size " << block_size << " n " << n << " pos0 " << pos0;
    const float tol = tolerance(dtype);
    check_close(got.data(), want.data(), want.size(), tol, tol, "prefill vs cpu: " + what.str());
    if (cross_check)
        check_close(got.data(), paged.data(), paged.size(), tol, tol, "prefill vs paged kernel: " + what.str());
}

}  // namespace

TEST_CASE("cuda kernels: prefill attention on tensor cores vs the CPU twin and the paged kernel") {
    if (!have_cuda_device()) return;
    ThreadPool pool(0);
    const Heads kHeads[] = {{4, 4}, {8, 4}, {8, 2}, {32, 4}};  // GQA 1, 2, 4, 8
    // Around the 64-query tile: one query, partial tiles, exact tiles, one past, many tiles.
    const int32_t kCounts[] = {1, 15, 16, 17, 64, 65, 200, 513};
    const int32_t kStarts[] = {0, 37, 300};  // position 0 and mid-context (unaligned to any tile)
    const int32_t kBlockSizes[] = {16, 5, 1};
    uint64_t seed = 500;
    // Not the full product: over the 12 (dtype, head_dim, start) groups each query count meets every
    // (GQA ratio, block size) pair once.
    int group = 0;
    for (DType dtype : {DType::bf16, DType::f16}) {
        for (int32_t head_dim : {64, 128}) {
            for (int32_t pos0 : kStarts) {
                for (int i = 0; i < 8; i++) {
                    // Emulated: 200 queries (4 query tiles) in 3 of the 12 groups, which cover both dtypes and
                    // head_dims, and 513 (9 tiles) in one.
                    if (cuda_emulated() && ((kCounts[i] == 200 && group % 4 != 0) || (kCounts[i] == 513 && group != 0)))
                        continue;
                    check_prefill(dtype, head_dim, kHeads[(i + group) % 4], kBlockSizes[(i + 2 * group) % 3],
                                  kCounts[i], pos0, seed += 3, &pool);
                }
                group++;
            }
        }
    }
}

TEST_CASE("cuda kernels: prefill attention with head_dim 256 and 80") {
    if (!have_cuda_device()) return;
    ThreadPool pool(0);
    // 256: the largest tiles' shared memory (the launcher shrinks the key tile where a device has less);
    // 80: a head_dim that is a multiple of 16 but not of 32 or 64.
    check_prefill(DType::bf16, 256, {8, 4}, 16, 200, 37, 900, &pool);
    check_prefill(DType::f16, 256, {4, 1}, 5, 65, 0, 901, &pool);
    check_prefill(DType::bf16, 80, {6, 2}, 7, 100, 300, 902, &pool);
}

TEST_CASE("cuda kernels: prefill attention over a q8_0 KV cache") {
    if (!have_cuda_device()) return;
    ThreadPool pool(0);
    {  // Staged as f16: the very bits of the same attention over an f16 cache holding d * q rounded to f16.
        KvLayout layout;
        layout.n_layers = 2, layout.block_size = 16, layout.n_kv_heads = 2, layout.head_dim = 64;
        layout.dtype = DType::q8_0;
        const int32_t n = 40, n_heads = 4, n_blocks = 4;
        const std::vector<int32_t> table = {2, 0, 3};
        std::vector<int32_t> positions(static_cast<size_t>(n));
        std::iota(positions.begin(), positions.end(), 3);
        const size_t n_elements = size_t(n_blocks) * size_t(layout.block_elements());
        auto q8 = random_typed(n_elements, DType::q8_0, -1, 1, 960);
        std::vector<float> values(n_elements);
        convert_to_f32(DType::q8_0, q8.data(), values.data(), n_elements);
        std::vector<uint8_t> f16(n_elements * 2);
        convert_from_f32(DType::f16, values.data(), f16.data(), n_elements);
        auto q = random_floats(size_t(n) * n_heads * 64, -0.6f, 0.6f, 961);
        std::vector<float> got(q.size()), want(q.size());
        cuda_test::prefill_attention(got.data(), q.data(), q8.data(), n_blocks, layout, 1, table.data(), 3,
                                     positions.data(), n, n_heads);
        KvLayout f16_layout = layout;
        f16_layout.dtype = DType::f16;
        cuda_test::prefill_attention(want.data(), q.data(), f16.data(), n_blocks, f16_layout, 1, table.data(), 3,
                                     positions.data(), n, n_heads);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    }
    check_prefill(DType::q8_0, 64, {8, 2}, 16, 65, 37, 950, &pool);
    check_prefill(DType::q8_0, 128, {4, 1}, 5, 17, 0, 951, &pool);
    check_prefill(DType::q8_0, 256, {4, 4}, 1, 16, 300, 952, &pool);
    if (!cuda_emulated()) check_prefill(DType::q8_0, 128, {6, 2}, 7, 513, 300, 953, &pool);
}

TEST_CASE("cuda kernels: prefill attention supports f16/bf16/q8_0 KV and head_dim multiples of 16 (32 for q8_0)") {
    KvLayout layout;
    layout.n_layers = 1, layout.block_size = 16, layout.n_kv_heads = 2, layout.head_dim = 128;
    for (DType dtype : {DType::f16, DType::bf16}) {
        layout.dtype = dtype;
        for (int32_t head_dim : {16, 64, 80, 128, 256}) {
            layout.head_dim = head_dim;
            CHECK(prefill_attention_supports(layout));
        }
        for (int32_t head_dim : {0, 8, 72, 100, 272}) {
            layout.head_dim = head_dim;
            CHECK_FALSE(prefill_attention_supports(layout));
        }
    }
    layout.dtype = DType::q8_0;  // staged as f16: whole 32-element blocks per head
    for (int32_t head_dim : {32, 64, 128, 256}) {
        layout.head_dim = head_dim;
        CHECK(prefill_attention_supports(layout));
    }
    for (int32_t head_dim : {16, 80, 272}) {
        layout.head_dim = head_dim;
        CHECK_FALSE(prefill_attention_supports(layout));
    }
    layout.dtype = DType::f32, layout.head_dim = 128;
    CHECK_FALSE(prefill_attention_supports(layout));

    if (!have_cuda_device()) return;
    // The launcher rejects what it does not support, and bad shapes, before launching anything.
    auto run = [](const KvLayout& l, int32_t n, int32_t n_heads) {
        const int32_t n_blocks = 2;
        std::vector<int32_t> table = {1, 0}, positions(static_cast<size_t>(std::max(n, 0)));
        std::iota(positions.begin(), positions.end(), 0);
        auto kv = random_typed(size_t(n_blocks) * size_t(l.block_elements()), l.dtype, -1, 1, 7);
        auto q = random_floats(size_t(std::max(n, 0)) * n_heads * l.head_dim, -1, 1, 8);
        std::vector<float> out(q.size());
        cuda_test::prefill_attention(out.data(), q.data(), kv.data(), n_blocks, l, 0, table.data(), 2, positions.data(),
                                     n, n_heads);
    };
    KvLayout good = layout;
    good.dtype = DType::bf16, good.head_dim = 64;
    CHECK_NOTHROW(run(good, 20, 4));
    CHECK_THROWS(run(layout, 20, 4));  // f32 KV
    KvLayout odd = good;
    odd.head_dim = 72;
    CHECK_THROWS(run(odd, 20, 4));
    CHECK_THROWS(run(good, 0, 4));   // n < 1
    CHECK_THROWS(run(good, 20, 3));  // 3 heads over 2 KV heads
}

#endif  // KVLM_CUDA
