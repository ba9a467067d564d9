// CUDA kernels of the decode step vs their CPU twins: attention with a caller-fixed split count (split
// length derived on the device per query, empty splits when there are more splits than keys) vs
// paged_attention_cpu and vs launch_paged_attention with the same split choice; the fused RoPE + KV write vs
// rope_cpu + kv_write_cpu and vs launch_rope. Shuffled block tables, partial last blocks, every KV dtype.
// Without a CUDA device (or in CUDA=0 builds) each case says "SKIPPED: no CUDA device (...)" and passes.
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

TEST_CASE("cuda kernels: decode-step kernels vs the CPU twins") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}

#else

namespace {

// Bit-for-bit equality of n floats; reports the first differences.
void check_same(const float* got, const float* want, size_t n, const std::string& what) {
    size_t bad = 0;
    std::ostringstream first;
    for (size_t i = 0; i < n; i++) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (bad < 5) first << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
            bad++;
        }
    }
    INFO(what << ": " << bad << " of " << n << " elements not bit-identical\n" << first.str());
    CHECK(bad == 0);
}

struct Heads { int32_t n_heads, n_kv_heads; };

// A random pool holding max_keys positions of every layer behind a shuffled block table, with two extra
// blocks the table does not address.
struct Pool {
    KvLayout layout;
    std::vector<int32_t> table;  // [ceil(max_keys / block_size)]
    std::vector<uint8_t> bytes;  // [n_blocks] block records
    int32_t n_blocks = 0;
};

Pool make_pool(DType dtype, int32_t head_dim, int32_t n_kv_heads, int32_t block_size, int32_t max_keys,
               uint64_t seed) {
    Pool p;
    p.layout.n_layers = 2, p.layout.block_size = block_size, p.layout.n_kv_heads = n_kv_heads;
    p.layout.head_dim = head_dim, p.layout.dtype = dtype;
    const int32_t n_table = (max_keys + block_size - 1) / block_size;
    p.n_blocks = n_table + 2;
    p.table.resize(size_t(p.n_blocks));
    std::iota(p.table.begin(), p.table.end(), 0);
    std::shuffle(p.table.begin(), p.table.end(), std::mt19937(uint32_t(seed)));
    p.table.resize(size_t(n_table));
    p.bytes = random_typed(size_t(p.n_blocks) * size_t(p.layout.block_elements()), dtype, -1, 1, seed);
    return p;
}

// The query batches tried at context length n_keys (the longest query attends n_keys keys): a decode
// step; a prefill chunk ending at the context; positions spread over the whole context (queries with very
// different key counts, so different derived split lengths and empty splits in one launch).
std::vector<std::vector<int32_t>> query_batches(int32_t n_keys) {
    std::vector<std::vector<int32_t>> batches = {{n_keys - 1}};
    if (n_keys < 2) return batches;
    const int32_t n_chunk = std::min(n_keys, 6), n_spread = std::min(n_keys, 5);
    std::vector<int32_t> chunk(static_cast<size_t>(n_chunk)), spread;
    std::iota(chunk.begin(), chunk.end(), n_keys - n_chunk);
    batches.push_back(chunk);
    for (int32_t i = 0; i < n_spread; i++) spread.push_back(int32_t(int64_t(i) * (n_keys - 1) / (n_spread - 1)));
    std::reverse(spread.begin(), spread.end());  // the longest query first: order must not matter
    batches.push_back(spread);
    return batches;
}

std::string describe(const Pool& p, int32_t n_heads, const std::vector<int32_t>& positions) {
    std::ostringstream s;
    s << dtype_name(p.layout.dtype) << " head_dim " << p.layout.head_dim << " heads " << n_heads << "/"
      << p.layout.n_kv_heads << " block_size " << p.layout.block_size << " n " << positions.size()
      << " max position " << *std::max_element(positions.begin(), positions.end());
    return s.str();
}

const DType kDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::q8_0};
// Types that take one GQA ratio only where the full product would be slow.
bool sampled_dtype(DType dtype) { return dtype == DType::f16 || dtype == DType::q8_0; }
const Heads kHeads[] = {{4, 4}, {4, 2}, {8, 2}, {8, 1}};  // GQA 1, 2, 4, 8
const int32_t kContexts[] = {1, 37, 255, 256, 257, 3000};
const int32_t kMaxContext = 3000;

}  // namespace

TEST_CASE("cuda kernels: fixed-split paged attention vs paged_attention_cpu") {
    if (!have_cuda_device()) return;
    const int32_t kSplits[] = {1, 2, 7, 30, 1024};  // 1024 > any context here: most splits empty
    const int32_t layer = 1;
    uint64_t seed = 300;
    for (DType dtype : kDTypes) {
        for (int32_t head_dim : {64, 128}) {
            for (const Heads& heads : kHeads) {
                for (int32_t block_size : {16, 5, 1}) {
                    // Every dtype x heads x block size would be slow: f16 and block size 1 take one GQA ratio.
                    if ((sampled_dtype(dtype) || block_size == 1) && (heads.n_heads != 8 || heads.n_kv_heads != 2))
                        continue;
                    // Emulated: the GQA ratios at head_dim 128 only.
                    if (cuda_emulated() && head_dim == 64 && (heads.n_heads != 8 || heads.n_kv_heads != 2)) continue;
                    Pool pool = make_pool(dtype, head_dim, heads.n_kv_heads, block_size, kMaxContext, seed++);
                    for (int32_t n_keys : kContexts) {
                        // Emulated: 257 keeps the tile and split boundaries (and 1024 splits, most empty).
                        if (cuda_emulated() && (n_keys == 255 || n_keys == 256 || n_keys == 3000)) continue;
                        for (const std::vector<int32_t>& positions : query_batches(n_keys)) {
                            const int32_t n = int32_t(positions.size());
                            // Scaled so softmaxes are neither flat nor one-hot.
                            auto q = random_floats(size_t(n) * heads.n_heads * head_dim, -0.6f, 0.6f, seed++);
                            std::vector<float> want(q.size());
                            paged_attention_cpu(want.data(), q.data(), pool.bytes.data(), pool.layout, layer,
                                                pool.table.data(), positions.data(), n, heads.n_heads, nullptr);
                            for (int32_t n_splits : kSplits) {
                                // Emulated: 1, 7 and 64 (past every context here too: most splits empty, and
                                // each empty block still starts 128 CPU fibers).
                                if (cuda_emulated() && (n_splits == 2 || n_splits == 30)) continue;
                                if (cuda_emulated() && n_splits == 1024) n_splits = 64;
                                std::vector<float> got(q.size());
                                cuda_test::paged_attention_splits(got.data(), q.data(), pool.bytes.data(),
                                                                  pool.n_blocks, pool.layout, layer, pool.table.data(),
                                                                  int32_t(pool.table.size()), positions.data(), n,
                                                                  heads.n_heads, n_splits, 132);
                                check_close(got.data(), want.data(), want.size(), 2e-5f, 1e-4f,
                                            "attention " + describe(pool, heads.n_heads, positions) + " n_splits " +
                                                std::to_string(n_splits));
                            }
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("cuda kernels: fixed-split attention with paged_attention_split_count's choice == launch_paged_attention") {
    if (!have_cuda_device()) return;
    // (n_sms, scratch rows): no scratch (never split); few multiprocessors; a typical GPU; maximal splitting.
    const std::pair<int32_t, int64_t> kChoices[] = {{132, 0}, {8, 1 << 14}, {132, 1 << 14}, {1 << 20, 1 << 20}};
    const int32_t layer = 1;
    uint64_t seed = 400;
    for (DType dtype : {DType::f32, DType::bf16}) {
        for (int32_t block_size : {16, 5}) {
            const Heads heads{8, 2};
            Pool pool = make_pool(dtype, 128, heads.n_kv_heads, block_size, kMaxContext, seed++);
            for (int32_t n_keys : kContexts) {
                if (cuda_emulated() && (n_keys == 255 || n_keys == 3000)) continue;  // 257: 2 splits
                for (const std::vector<int32_t>& positions : query_batches(n_keys)) {
                    const int32_t n = int32_t(positions.size());
                    auto q = random_floats(size_t(n) * heads.n_heads * 128, -0.6f, 0.6f, seed++);
                    for (auto [n_sms, asked_rows] : kChoices) {
                        // Splits are at least 256 keys (paged_attention.cu's kMinKeysPerSplit).
                        const int64_t rows =
                            cuda_test_scratch_rows(asked_rows, int64_t(n) * heads.n_heads * ((n_keys + 255) / 256 + 1));
                        const int32_t n_splits = cuda_test::paged_attention_split_count(
                            n, heads.n_heads, heads.n_kv_heads, n_keys, n_sms, rows);
                        std::vector<float> want(q.size()), got(q.size());
                        cuda_test::paged_attention(want.data(), q.data(), pool.bytes.data(), pool.n_blocks,
                                                   pool.layout, layer, pool.table.data(), int32_t(pool.table.size()),
                                                   positions.data(), n, heads.n_heads, n_sms, rows);
                        cuda_test::paged_attention_splits(got.data(), q.data(), pool.bytes.data(), pool.n_blocks,
                                                          pool.layout, layer, pool.table.data(),
                                                          int32_t(pool.table.size()), positions.data(), n,
                                                          heads.n_heads, n_splits, n_sms);
                        const std::string what = "split choice " + describe(pool, heads.n_heads, positions) +
                                                 " n_sms " + std::to_string(n_sms) + " scratch " +
                                                 std::to_string(rows) + " n_splits " + std::to_string(n_splits);
                        // The longest query gets the same split length both ways (the count came from that
                        // rounding), so the same arithmetic in the same order; shorter queries of a batch get
                        // shorter device-derived splits, so only rounding-level agreement.
                        const size_t row = size_t(heads.n_heads) * 128;
                        for (int32_t t = 0; t < n; t++) {
                            const float* g = got.data() + size_t(t) * row;
                            const float* w = want.data() + size_t(t) * row;
                            if (positions[size_t(t)] + 1 == n_keys) check_same(g, w, row, what + " longest query");
                            else check_close(g, w, row, 2e-5f, 1e-4f, what);
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("cuda kernels: decode-step attention over GQA group sizes and head sizes vs paged_attention_cpu") {
    if (!have_cuda_device()) return;
    struct Case { DType dtype; int32_t head_dim; Heads heads; int32_t block_size; };
    std::vector<Case> cases;
    // Group sizes 3, 7, 1, 4, 8 (one thread block per group) and 16, 20 (more than paged_attention.cu's
    // kMaxGroupHeads = 8 heads: 2 blocks of 8, 3 blocks of 7 + 7 + 6), dtypes and head_dims 128/64 in turn.
    const Heads kGroups[] = {{9, 3}, {14, 2}, {12, 12}, {32, 8}, {16, 2}, {32, 2}, {20, 1}};
    int32_t turn = 0;
    for (const Heads& heads : kGroups) {
        cases.push_back({kDTypes[turn % 3], turn % 2 ? 64 : 128, heads, turn % 2 ? 5 : 16});
        turn++;
    }
    // Row shapes. 16-byte loads: 1 unit per row (16-bit 8), 2, 3, 12, 24, 25, 32 units (f32 8, 12, 96, 100;
    // 16-bit 96, 256) and 64 (f32 256: two per lane). Element loads where head_dim * sizeof(T) is not a
    // multiple of 16: 1, 16-bit 12 and 100, and 202 in every dtype (more elements than threads: two per
    // thread in the output loop).
    for (int32_t head_dim : {1, 8, 12, 96, 100, 202, 256}) {
        for (DType dtype : kDTypes) {
            if (dtype == DType::q8_0 && head_dim % 32 != 0) continue;  // whole 32-element blocks per head
            cases.push_back({dtype, head_dim, turn % 2 ? Heads{9, 3} : Heads{20, 1}, 7});
            turn++;
        }
    }
    const int32_t kContextsHere[] = {1, 37, 300};  // 300: three key tiles, splits of 128 and 256 keys
    const int32_t layer = 1;
    uint64_t seed = 600;
    for (const Case& c : cases) {
        Pool pool = make_pool(c.dtype, c.head_dim, c.heads.n_kv_heads, c.block_size, 300, seed++);
        for (int32_t n_keys : kContextsHere) {
            if (cuda_emulated() && n_keys == 1) continue;
            for (const std::vector<int32_t>& positions : query_batches(n_keys)) {
                // Emulated: the decode step and the spread batch (whose shorter queries get empty splits).
                if (cuda_emulated() && positions.size() == 6) continue;
                const int32_t n = int32_t(positions.size());
                auto q = random_floats(size_t(n) * c.heads.n_heads * c.head_dim, -0.6f, 0.6f, seed++);
                std::vector<float> want(q.size());
                paged_attention_cpu(want.data(), q.data(), pool.bytes.data(), pool.layout, layer, pool.table.data(),
                                    positions.data(), n, c.heads.n_heads, nullptr);
                for (int32_t n_splits : {1, 2, 5, 64}) {
                    if (cuda_emulated() && (n_splits == 2 || n_splits == 64)) continue;
                    // A block per GQA group (n_sms 1), then a block per query head (n_sms huge): the same bits.
                    std::vector<float> grouped(q.size()), per_head(q.size());
                    const std::string what = "attention " + describe(pool, c.heads.n_heads, positions) +
                                             " n_splits " + std::to_string(n_splits);
                    cuda_test::paged_attention_splits(grouped.data(), q.data(), pool.bytes.data(), pool.n_blocks,
                                                      pool.layout, layer, pool.table.data(),
                                                      int32_t(pool.table.size()), positions.data(), n,
                                                      c.heads.n_heads, n_splits, 1);
                    check_close(grouped.data(), want.data(), want.size(), 2e-5f, 1e-4f, what + " grouped");
                    if (cuda_emulated() && n_splits != 1) continue;
                    cuda_test::paged_attention_splits(per_head.data(), q.data(), pool.bytes.data(), pool.n_blocks,
                                                      pool.layout, layer, pool.table.data(),
                                                      int32_t(pool.table.size()), positions.data(), n,
                                                      c.heads.n_heads, n_splits, 1 << 20);
                    check_same(per_head.data(), grouped.data(), want.size(), what + " a block per head vs grouped");
                }
            }
        }
    }
}

TEST_CASE("cuda kernels: fused rope + kv_write == rope_cpu + kv_write_cpu and launch_rope") {
    if (!have_cuda_device()) return;
    // Batches of positions: decode steps far apart (huge angles, llama3-scaled), and a prefill chunk
    // crossing several blocks (partial first and last block).
    std::vector<int32_t> chunk(30);
    std::iota(chunk.begin(), chunk.end(), 5);
    const std::vector<int32_t> kBatches[] = {{0}, {4095}, {131071}, chunk, {0, 1, 17, 4095, 65536, 131071}};
    const Heads kRopeHeads[] = {{4, 4}, {6, 3}, {8, 2}, {8, 1}};
    uint64_t seed = 500;
    int32_t n_configs = 0;
    for (DType dtype : kDTypes) {
        for (int32_t head_dim : {64, 96, 128, 256}) {  // 256: two pairs per thread
            for (const Heads& heads : kRopeHeads) {
                for (int32_t block_size : {1, 5, 16}) {
                    if (sampled_dtype(dtype) && (heads.n_heads != 8 || heads.n_kv_heads != 2)) continue;
                    RopeScaling scaling;
                    if (n_configs++ % 2 == 1) scaling.type = "llama3", scaling.factor = 8.0f;
                    std::vector<float> inv_freq(size_t(head_dim / 2));
                    rope_inv_freq(inv_freq.data(), head_dim, 500000.0f, scaling);
                    for (const std::vector<int32_t>& positions : kBatches) {
                        KvLayout layout;
                        layout.n_layers = 3, layout.block_size = block_size, layout.n_kv_heads = heads.n_kv_heads;
                        layout.head_dim = head_dim, layout.dtype = dtype;
                        const int32_t n = int32_t(positions.size()), layer = 1;
                        // Table entries no position addresses are -1: reading one would write far outside the
                        // pool. The addressed ones map to distinct shuffled blocks; 3 blocks stay unaddressed.
                        const int32_t max_pos = *std::max_element(positions.begin(), positions.end());
                        std::vector<int32_t> table(size_t(max_pos / block_size + 1), -1), used;
                        for (int32_t pos : positions) used.push_back(pos / block_size);
                        std::sort(used.begin(), used.end());
                        used.erase(std::unique(used.begin(), used.end()), used.end());
                        const int32_t n_blocks = int32_t(used.size()) + 3;
                        std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
                        std::iota(blocks.begin(), blocks.end(), 0);
                        std::shuffle(blocks.begin(), blocks.end(), std::mt19937(uint32_t(seed)));
                        for (size_t i = 0; i < used.size(); i++) table[size_t(used[i])] = blocks[i];

                        auto q = random_floats(size_t(n) * heads.n_heads * head_dim, -2, 2, seed++);
                        auto k = random_floats(size_t(n) * layout.row_elements(), -2, 2, seed++);
                        auto v = random_floats(size_t(n) * layout.row_elements(), -2, 2, seed++);
                        auto pool = random_typed(size_t(n_blocks) * size_t(layout.block_elements()), dtype, -1, 1,
                                                 seed++);
                        std::vector<float> got_q = q, got_k = k;
                        std::vector<uint8_t> got_pool = pool;
                        cuda_test::rope_kv_write(got_q.data(), got_k.data(), v.data(), got_pool.data(), n_blocks,
                                                 layout, layer, table.data(), int32_t(table.size()),
                                                 positions.data(), inv_freq.data(), n, heads.n_heads);

                        std::ostringstream what;
                        what << "rope_kv_write " << dtype_name(dtype) << " head_dim " << head_dim << " heads "
                             << heads.n_heads << "/" << heads.n_kv_heads << " block_size " << block_size << " n " << n
                             << " max position " << max_pos << (scaling.type == "llama3" ? " llama3" : "");
                        // launch_rope runs the same device arithmetic: bit-identical.
                        std::vector<float> gpu_q = q, gpu_k = k;
                        cuda_test::rope(gpu_q.data(), positions.data(), inv_freq.data(), n, heads.n_heads, head_dim);
                        cuda_test::rope(gpu_k.data(), positions.data(), inv_freq.data(), n, heads.n_kv_heads,
                                        head_dim);
                        check_same(got_q.data(), gpu_q.data(), q.size(), what.str() + " q vs launch_rope");
                        check_same(got_k.data(), gpu_k.data(), k.size(), what.str() + " k vs launch_rope");
                        // rope_cpu: the device's double sincos and fused multiply-adds may differ from the
                        // host's in the last bit, so the rope test's tolerance.
                        std::vector<float> cpu_q = q, cpu_k = k;
                        rope_cpu(cpu_q.data(), positions.data(), inv_freq.data(), n, heads.n_heads, head_dim);
                        rope_cpu(cpu_k.data(), positions.data(), inv_freq.data(), n, heads.n_kv_heads, head_dim);
                        check_close(got_q.data(), cpu_q.data(), q.size(), 1e-5f, 1e-5f, what.str() + " q vs rope_cpu");
                        check_close(got_k.data(), cpu_k.data(), k.size(), 1e-5f, 1e-5f, what.str() + " k vs rope_cpu");
                        // Pool: exactly kv_write_cpu's bytes for the device-rotated k (so a last-bit RoPE
                        // difference cannot hide a store bug), the whole pool compared: other layers, other
                        // slots and unaddressed blocks unchanged.
                        std::vector<uint8_t> want_pool = pool;
                        kv_write_cpu(want_pool.data(), layout, layer, gpu_k.data(), v.data(), table.data(),
                                     positions.data(), n);
                        size_t first_diff = 0;
                        while (first_diff < pool.size() && got_pool[first_diff] == want_pool[first_diff]) first_diff++;
                        INFO(what.str() << ": first differing pool byte " << first_diff << " of " << pool.size());
                        CHECK(first_diff == pool.size());
                    }
                }
            }
        }
    }
}

TEST_CASE("cuda kernels: decode-step Q/K/V gemv with RoPE and the pool write in its epilogue == gemv + rope_kv_write") {
    if (!have_cuda_device()) return;
    // The decode step's fused launch must give the bits of the two launches it replaces (the batched decode
    // rows and prefill still use those): q and the whole pool compared byte for byte, over every weight type,
    // f32/f16/bf16 pools, GQA groupings, biases, norm, and positions in the first, a middle and a far block.
    struct Shape { int32_t n_heads, n_kv_heads, head_dim, n_in; };
    const Shape kShapes[] = {{9, 3, 64, 576}, {4, 4, 128, 256}, {8, 2, 32, 96}};
    const DType kWeightTypes[] = {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1};
    const DType kPoolTypes[] = {DType::f32, DType::f16, DType::bf16};
    uint64_t seed = 900;
    for (int wi = 0; wi < 6; wi++) {
        const DType weight_dtype = kWeightTypes[wi];
        for (int ki = 0; ki < 3; ki++) {
            const DType kv_dtype = kPoolTypes[ki];
            for (int si = 0; si < 3; si++) {
                const Shape& shape = kShapes[si];
                if (cuda_emulated() && si != (wi + ki) % 3) continue;  // emulated: one shape per pair of types
                KvLayout layout;
                layout.n_layers = 2, layout.block_size = 16, layout.n_kv_heads = shape.n_kv_heads;
                layout.head_dim = shape.head_dim, layout.dtype = kv_dtype;
                const int32_t layer = 1, n_blocks = 6;
                const std::vector<int32_t> table = {4, 0, 5, 2, 1, 3};  // positions 0..95, shuffled blocks
                std::vector<float> inv_freq(size_t(shape.head_dim / 2));
                rope_inv_freq(inv_freq.data(), shape.head_dim, 10000.0f, RopeScaling{});
                const int32_t rows[3] = {shape.n_heads * shape.head_dim, int32_t(layout.row_elements()),
                                         int32_t(layout.row_elements())};
                std::vector<std::vector<uint8_t>> weights;
                std::vector<std::vector<float>> biases;
                for (int i = 0; i < 3; i++) {
                    const float a = 1.0f / std::sqrt(float(shape.n_in));
                    weights.push_back(random_typed(size_t(rows[i]) * size_t(shape.n_in), weight_dtype, -a, a, seed++));
                    biases.push_back(random_floats(size_t(rows[i]), -0.5f, 0.5f, seed++));
                }
                const auto x = random_floats(size_t(shape.n_in), -2, 2, seed++);
                const auto norm = random_floats(size_t(shape.n_in), 0.5f, 1.5f, seed++);
                const auto pool = random_typed(size_t(n_blocks) * size_t(layout.block_elements()), kv_dtype, -1, 1,
                                               seed++);
                for (int32_t position : {0, 37, 95}) {
                    for (bool with_bias : {false, true}) {
                        const void* w[3] = {weights[0].data(), weights[1].data(), weights[2].data()};
                        const float* b[3] = {nullptr, nullptr, nullptr};
                        if (with_bias) b[0] = biases[0].data(), b[1] = biases[1].data(), b[2] = biases[2].data();
                        std::vector<float> q_fused(static_cast<size_t>(rows[0])), q_plain(static_cast<size_t>(rows[0]));
                        std::vector<uint8_t> kv_fused(pool.size()), kv_plain(pool.size());
                        cuda_test::gemv_rope_kv(q_fused.data(), kv_fused.data(), q_plain.data(), kv_plain.data(), w,
                                                weight_dtype, b, x.data(), shape.n_in, norm.data(), 1e-5f, pool.data(),
                                                n_blocks, layout, layer, table.data(), int32_t(table.size()), position,
                                                inv_freq.data(), shape.n_heads);
                        std::ostringstream what;
                        what << "gemv_rope_kv " << dtype_name(weight_dtype) << " weights, " << dtype_name(kv_dtype)
                             << " pool, heads " << shape.n_heads << "/" << shape.n_kv_heads << " x " << shape.head_dim
                             << ", position " << position << (with_bias ? ", bias" : "");
                        check_same(q_fused.data(), q_plain.data(), q_fused.size(), what.str() + " q");
                        size_t first_diff = 0;
                        while (first_diff < pool.size() && kv_fused[first_diff] == kv_plain[first_diff]) first_diff++;
                        INFO(what.str() << ": first differing pool byte " << first_diff << " of " << pool.size());
                        CHECK(first_diff == pool.size());
                        CHECK(kv_plain != pool);  // the step's K and V rows were written
                    }
                }
            }
        }
    }
}

#endif  // KVLM_CUDA
