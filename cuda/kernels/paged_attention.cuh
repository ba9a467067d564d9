// Paged attention's block bodies (see paged_attention.cu for the layout and the launchers), shared by its
// kernels and the persistent decode kernel (decode_persistent.cu), so that both give the same bits. Device
// helpers only: the caller declares the shared arrays (an AttnShared); no launches.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda_ops.h"
#include "kernels/kv_cache_cuda.cuh"

namespace kvlm::attention_detail {
constexpr int kAttnThreads = 128;  // 4 warps
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnTile = 128;     // keys per tile
constexpr int kMaxGroupHeads = 8;  // query heads per thread block (grouped kernel)
constexpr int kLaneSlots = 8;      // row elements per lane in the score loop (8 * 32 = 256)
// K or V rows each thread has in flight: 8 in the one-head kernel, which runs where blocks are few and each
// is a latency chain (a decode step at a short context: 128 keys are then one round trip for K and one for V,
// the V one issued before the scores), 4 in the grouped kernel, whose registers go to its heads.
template <int MaxHeads>
constexpr int kLoadBatch = MaxHeads == 1 ? 8 : 4;
constexpr int kPartialStride = kCudaMaxHeadDim + 2;  // floats per partial row: acc, max, sum
constexpr int32_t kMaxSplits = 1024;
static_assert(kLaneSlots * 32 >= kCudaMaxHeadDim, "a K row must fit in one warp's lane slots");
// The key groups' accumulators of one head (at most kAttnThreads units of 8 elements) are summed in q_s.
constexpr int kSumElements = kAttnThreads * 8;

// How a launch maps heads and rows onto its blocks and threads (host-computed, uniform over the grid).
struct AttnGeometry {
    int32_t group;            // query heads per kv head
    int32_t heads_per_block;  // query heads a full chunk takes (1..kMaxGroupHeads)
    int32_t head_chunks;      // blocks per (kv head, split, token): ceil(group / heads_per_block)
    int32_t units;            // units per row: 16-byte chunks (vector path) or elements (scalar path)
    int32_t key_lanes;        // lanes per K row in the score loop: a power of two, >= min(units, 32)
    int32_t key_groups;       // V rows accumulated side by side: max(1, kAttnThreads / units)
};

// Query heads per block for a GQA group of `group` heads: ceil(group / kMaxGroupHeads) chunks of equal size,
// the last one possibly shorter.
inline int32_t heads_per_block(int32_t group) {
    const int32_t chunks = (group + kMaxGroupHeads - 1) / kMaxGroupHeads;
    return (group + chunks - 1) / chunks;
}
inline int32_t head_chunks(int32_t group) { return (group + heads_per_block(group) - 1) / heads_per_block(group); }

// one_head: a block per query head (the kernel compiled with MaxHeads = 1).
inline AttnGeometry attention_geometry(int32_t head_dim, int32_t n_heads, int32_t n_kv_heads, int32_t unit_elements,
                                       bool one_head) {
    AttnGeometry g;
    g.group = n_heads / n_kv_heads;
    g.heads_per_block = one_head ? 1 : heads_per_block(g.group);
    g.head_chunks = one_head ? g.group : head_chunks(g.group);
    g.units = head_dim / unit_elements;
    g.key_lanes = 1;
    while (g.key_lanes < g.units && g.key_lanes < 32) g.key_lanes *= 2;
    g.key_groups = std::max(1, kAttnThreads / g.units);
    return g;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}
// Element `half` (0: low, 1: high) of two 16-bit values packed in a 32-bit word (little-endian).
__device__ __forceinline__ float unpack_half(uint32_t word, int half, __half) {
    return __half2float(__ushort_as_half((unsigned short)(half ? word >> 16 : word & 0xffffu)));
}
__device__ __forceinline__ float unpack_half(uint32_t word, int half, __nv_bfloat16) {  // bf16: an f32's top half
    return __uint_as_float(half ? word & 0xffff0000u : word << 16);
}

// Elements of a vector-path unit: a 16-byte chunk of f32/f16/bf16 elements; for a q8_0 cache a quarter of
// a 34-byte block (8 int8 quants) with the block's scale.
template <typename T>
constexpr int kVecUnitElements = kIsQ8Kv<T> ? 8 : 16 / int(sizeof(T));

// A q8_0 unit (8 elements, u = 0..3 of the block at `block`) as raw: quants in x and y, the scale as f32 in
// z. A block record is only 2-byte aligned, so the quants come in four 2-byte loads (llama.cpp reads q8_0
// so too); 5 loads per 8 elements, where one element at a time took 16.
__device__ __forceinline__ uint4 load_q8_unit(const uint8_t* block, int u) {
    const uint16_t* scale = reinterpret_cast<const uint16_t*>(block);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(block + QuantBlock<DType::q8_0>::kQs + u * 8);
    return make_uint4(uint32_t(qs[0]) | uint32_t(qs[1]) << 16, uint32_t(qs[2]) | uint32_t(qs[3]) << 16,
                      __float_as_uint(f16_bits_to_f32(scale[0])), 0u);
}

// N units of one row held by one thread: units first, first + stride, ... as raw vector units (Vec) or
// f32 elements (load_kv: any KV dtype); units past the row's end read as zero (never loaded). The row
// starts at element `row` of the pool kv (a multiple of 32 for q8_0: rows start at multiples of head_dim).
template <typename T, bool Vec, int N>
struct RowFrag {
    static constexpr int kUnitElements = Vec ? kVecUnitElements<T> : 1;
    static constexpr int kElements = N * kUnitElements;
    std::conditional_t<Vec, uint4, float> raw[N];

    __device__ __forceinline__ void load(const T* kv, int64_t row, int first, int stride, int units) {
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int u = first + i * stride;
            if constexpr (Vec && kIsQ8Kv<T>)
                raw[i] = u < units
                             ? load_q8_unit(reinterpret_cast<const uint8_t*>(kv_at(kv, row + int64_t(u) * 8)), u & 3)
                             : make_uint4(0, 0, 0, 0);
            else if constexpr (Vec)
                raw[i] = u < units ? load_streaming16<true>(reinterpret_cast<const uint4*>(kv + row) + u)
                                   : make_uint4(0, 0, 0, 0);
            else
                raw[i] = u < units ? load_kv(kv, row + u) : 0.0f;
        }
    }
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < N; i++) {
            if constexpr (Vec)
                raw[i] = make_uint4(0, 0, 0, 0);
            else
                raw[i] = 0.0f;
        }
    }
    // Element e (0..kElements-1; a constant after unrolling) as f32: element e % kUnitElements of unit i = e /
    // kUnitElements, which is row element (first + i * stride) * kUnitElements + e % kUnitElements.
    __device__ __forceinline__ float get(int e) const {
        if constexpr (!Vec) {
            return raw[e];
        } else if constexpr (kIsQ8Kv<T>) {  // load_kv's value: d * q, exact in f32
            const uint32_t word = e % 8 < 4 ? raw[e / 8].x : raw[e / 8].y;
            return __fmul_rn(float(int8_t(word >> (8 * (e % 4)))), __uint_as_float(raw[e / 8].z));
        } else {
            const uint4& c = raw[e / kUnitElements];
            const int k = e % kUnitElements;
            if constexpr (sizeof(T) == 4)
                return __uint_as_float(word_of(c, k));
            else
                return unpack_half(word_of(c, k / 2), k % 2, T());
        }
    }
};

// MaxHeads: the most query heads a block takes (kMaxGroupHeads, or 1 for a block per head); registers and
// unrolled head loops are sized by it.
// The shared arrays of attention_block for MaxHeads, as one object its caller declares __shared__ (the emulator
// rewrites __shared__ declarations in .cu files only).
template <int MaxHeads>
struct AttnShared {
    // q_s: the heads' queries; after the key loop, the key groups' accumulators of one head.
    static constexpr int kQ = MaxHeads * kCudaMaxHeadDim > kSumElements ? MaxHeads* kCudaMaxHeadDim : kSumElements;
    static constexpr int kP = MaxHeads * kAttnTile;
    int64_t offset_s[kAttnTile];  // element offset of each tile key's K row (kv head, layer)
    float q_s[kQ];
    float p_s[kP];                // [head][key] scores, then probabilities, of the tile
    float corr_s[MaxHeads];       // per head, e^(old max - new max) of the current tile
    float m_s[MaxHeads];          // per head, after the key loop: max
    float l_s[MaxHeads];          // and sum
};

// Block (split, y = kv head x head chunk, token t) of an (n_splits, ., .) attention grid; every thread of a
// kAttnThreads block must call it.
template <typename T, bool Vec, int MaxHeads>
__device__ __forceinline__ void attention_block(
    AttnShared<MaxHeads>& sh, int32_t split, int32_t y, int32_t t, int32_t n_splits,
    float* out,       // [n, n_heads, head_dim] (when gridDim.x == 1)
    float* partials,  // [n, n_heads, n_splits, kPartialStride] (otherwise)
    const float* q,   // [n, n_heads, head_dim]
    const T* kv,      // [n_blocks] block records (16-byte aligned if Vec)
    KvLayout layout, int32_t layer,
    const int32_t* block_table,  // [>= max(positions) / block_size + 1]
    const int32_t* positions,    // [n]
    int32_t n_heads, AttnGeometry geo,
    int32_t keys_per_split,  // <= 0: ceil(n_keys / n_splits) rounded up to kAttnTile
    float scale,
    const int32_t* row_tables) {  // [n] offsets into block_table, or null
    // Units of a K row per lane in the score loop, of a V row per thread in the output loop (the scalar path
    // takes units tid and tid + kAttnThreads when head_dim > kAttnThreads).
    using KFrag = RowFrag<T, Vec, Vec ? kLaneSlots / kVecUnitElements<T> : kLaneSlots>;
    using VFrag = RowFrag<T, Vec, Vec ? 1 : 2>;
    static_assert(KFrag::kElements == kLaneSlots, "score fragments hold kLaneSlots elements");

    const int32_t kv_head = y / geo.head_chunks, chunk = y % geo.head_chunks;
    const int32_t head0 = kv_head * geo.group + chunk * geo.heads_per_block;  // first query head of the block
    const int32_t hc = min(geo.heads_per_block, geo.group - chunk * geo.heads_per_block);  // heads it takes
    const int32_t head_dim = layout.head_dim, block_size = layout.block_size;
    const int32_t n_keys = positions[t] + 1;
    if (row_tables) block_table += row_tables[t];
    int64_t split_keys = keys_per_split;
    if (split_keys <= 0) {
        split_keys = (int64_t(n_keys) + n_splits - 1) / n_splits;
        split_keys = (split_keys + kAttnTile - 1) / kAttnTile * kAttnTile;
    }
    const int64_t begin64 = split * split_keys;  // 64-bit: split * split_keys may pass INT32_MAX
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    auto partial_row = [&](int h) {
        return partials + ((int64_t(t) * n_heads + head0 + h) * n_splits + split) * kPartialStride;
    };
    if (begin64 >= n_keys) {
        // An empty split (more splits than this query's keys need) weighs nothing: max -inf, sum 0. The
        // combine kernel never reads the accumulator of a row with sum 0, so it is left unwritten.
        // The whole block returns here (the condition is uniform), before any barrier.
        if (n_splits > 1 && tid < hc) {
            float* part = partial_row(tid);
            part[kCudaMaxHeadDim] = -INFINITY;
            part[kCudaMaxHeadDim + 1] = 0.0f;
        }
        return;
    }
    const int32_t begin = int32_t(begin64);
    const int32_t end = int32_t(min(begin64 + split_keys, int64_t(n_keys)));

    // q_s: the heads' queries, zero past head_dim (lanes multiply them with K elements they did not load,
    // which read as zero); after the key loop, the buffer in which key groups' accumulators are summed.
    float* q_s = sh.q_s;
    float* p_s = sh.p_s;
    int64_t* offset_s = sh.offset_s;
    float *corr_s = sh.corr_s, *m_s = sh.m_s, *l_s = sh.l_s;

    for (int i = tid; i < hc * kCudaMaxHeadDim; i += kAttnThreads) {
        const int h = i / kCudaMaxHeadDim, d = i % kCudaMaxHeadDim;
        q_s[i] = d < head_dim ? q[(int64_t(t) * n_heads + head0 + h) * head_dim + d] : 0.0f;
    }
    const int64_t row = int64_t(layout.n_kv_heads) * head_dim;
    const int64_t block_elements = int64_t(layout.n_layers) * 2 * block_size * row;
    const int64_t head_offset = int64_t(layer) * 2 * block_size * row + int64_t(kv_head) * head_dim;
    const int64_t v_delta = int64_t(block_size) * row;  // a key's V row sits block_size rows after its K row
    // The tile's K row offsets, from the block table: the first tile's read beside q's, under one barrier.
    const auto tile_offsets = [&](int32_t tile) {
        const int32_t tile_n = min(kAttnTile, end - tile);
        if (tid < tile_n) {
            const int32_t j = tile + tid;
            offset_s[tid] =
                int64_t(block_table[j / block_size]) * block_elements + int64_t(j % block_size) * row + head_offset;
        }
    };
    tile_offsets(begin);
    constexpr int kBatch = kLoadBatch<MaxHeads>;

    // Score loop: lane gl of a group of key_lanes lanes; the group takes one K row at a time.
    const int key_lanes = geo.key_lanes, gl = lane & (key_lanes - 1);
    const int rows_per_step = kAttnWarps * (32 / key_lanes);  // K rows the block reads side by side
    const int first_row = warp * (32 / key_lanes) + lane / key_lanes;
    // Output loop: thread (key group vg, unit vu).
    const int units = geo.units, key_groups = geo.key_groups;
    const int vg = tid / units, vu = tid % units;

    // Online softmax state of head warp + i * kAttnWarps, kept by every lane of that warp.
    constexpr int kHeadsPerWarp = (MaxHeads + kAttnWarps - 1) / kAttnWarps;
    float m[kHeadsPerWarp], l[kHeadsPerWarp];
#pragma unroll
    for (int i = 0; i < kHeadsPerWarp; i++) m[i] = -INFINITY, l[i] = 0.0f;
    float acc[MaxHeads][VFrag::kElements];
#pragma unroll
    for (int h = 0; h < MaxHeads; h++)
#pragma unroll
        for (int e = 0; e < VFrag::kElements; e++) acc[h][e] = 0.0f;
    __syncthreads();

    for (int32_t tile = begin; tile < end; tile += kAttnTile) {
        const int32_t tile_n = min(kAttnTile, end - tile);
        if (tile != begin) {
            tile_offsets(tile);
            __syncthreads();
        }
        // The first batch of V rows, loaded before the scores when the one-head kernel's batch covers the tile
        // (they depend only on the offsets): its round trip overlaps the K rows' and the softmax.
        const auto load_v = [&](VFrag(&v)[kBatch], int base) {
#pragma unroll
            for (int b = 0; b < kBatch; b++) {
                const int jj = base + b * key_groups;
                if (vg < key_groups && jj < tile_n)
                    v[b].load(kv, offset_s[jj] + v_delta, vu, kAttnThreads, units);
                else
                    v[b].zero();
            }
        };
        constexpr bool kEarlyV = MaxHeads == 1;
        const bool v_early = kEarlyV && tile_n <= key_groups * kBatch;  // uniform
        VFrag v_first[kEarlyV ? kBatch : 1];
        if constexpr (kEarlyV) {
            if (v_early) load_v(v_first, vg);
        }

        {  // Scores. The query slice matching this lane's units, reloaded per tile (not live in the output loop).
            float qr[MaxHeads][kLaneSlots];
#pragma unroll
            for (int h = 0; h < MaxHeads; h++) {
                if (h < hc) {
#pragma unroll
                    for (int e = 0; e < kLaneSlots; e++) {
                        const int u = gl + e / KFrag::kUnitElements * key_lanes;  // < 8 * key_lanes <= 256 elements
                        qr[h][e] = q_s[h * kCudaMaxHeadDim + u * KFrag::kUnitElements + e % KFrag::kUnitElements];
                    }
                }
            }
            // Loop bounds and shuffles are uniform over the block; only the loads and stores depend on the row.
            for (int base = 0; base < tile_n; base += rows_per_step * kBatch) {
                KFrag k[kBatch];
#pragma unroll
                for (int b = 0; b < kBatch; b++) {
                    const int jj = base + b * rows_per_step + first_row;
                    if (jj < tile_n)
                        k[b].load(kv, offset_s[jj], gl, key_lanes, units);
                    else
                        k[b].zero();
                }
#pragma unroll
                for (int b = 0; b < kBatch; b++) {
                    float s[MaxHeads];
#pragma unroll
                    for (int h = 0; h < MaxHeads; h++) {
                        s[h] = 0.0f;
                        if (h < hc) {
#pragma unroll
                            for (int e = 0; e < kLaneSlots; e++) s[h] = fmaf(k[b].get(e), qr[h][e], s[h]);
                        }
                    }
                    for (int o = key_lanes / 2; o > 0; o /= 2) {
#pragma unroll
                        for (int h = 0; h < MaxHeads; h++)
                            if (h < hc) s[h] += __shfl_xor_sync(0xffffffffu, s[h], o);
                    }
                    const int jj = base + b * rows_per_step + first_row;
                    if (gl == 0 && jj < tile_n) {
#pragma unroll
                        for (int h = 0; h < MaxHeads; h++)
                            if (h < hc) p_s[h * kAttnTile + jj] = s[h] * scale;
                    }
                }
            }
        }
        __syncthreads();

        // Softmax: warp w updates heads w, w + kAttnWarps, ... (lanes over the tile's keys).
#pragma unroll
        for (int i = 0; i < kHeadsPerWarp; i++) {
            const int h = warp + i * kAttnWarps;
            if (h < hc) {  // uniform over the warp
                float* ph = p_s + h * kAttnTile;
                float tile_max = -INFINITY;
                for (int jj = lane; jj < tile_n; jj += 32) tile_max = fmaxf(tile_max, ph[jj]);
                for (int o = 16; o > 0; o /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
                const float new_m = fmaxf(m[i], tile_max);
                float tile_sum = 0.0f;
                for (int jj = lane; jj < tile_n; jj += 32) {
                    const float p = expf(ph[jj] - new_m);
                    ph[jj] = p;
                    tile_sum += p;
                }
                for (int o = 16; o > 0; o /= 2) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, o);
                const float correction = expf(m[i] - new_m);  // 0 on the first tile (m = -inf)
                l[i] = l[i] * correction + tile_sum;
                m[i] = new_m;
                if (lane == 0) corr_s[h] = correction;
            }
        }
        __syncthreads();

        // Output: every V row of the tile read once, accumulated into each head.
#pragma unroll
        for (int h = 0; h < MaxHeads; h++) {
            if (h < hc) {
                const float c = corr_s[h];
#pragma unroll
                for (int e = 0; e < VFrag::kElements; e++) acc[h][e] *= c;
            }
        }
        if (vg < key_groups) {
            for (int base = vg; base < tile_n; base += key_groups * kBatch) {
                VFrag v[kBatch];
                if (v_early) {
#pragma unroll
                    for (int b = 0; b < kBatch; b++) v[b] = v_first[kEarlyV ? b : 0];
                } else {
                    load_v(v, base);
                }
#pragma unroll
                for (int b = 0; b < kBatch; b++) {
                    const int jj = base + b * key_groups;
                    if (jj < tile_n) {
#pragma unroll
                        for (int h = 0; h < MaxHeads; h++) {
                            if (h < hc) {
                                const float p = p_s[h * kAttnTile + jj];
#pragma unroll
                                for (int e = 0; e < VFrag::kElements; e++) acc[h][e] = fmaf(p, v[b].get(e), acc[h][e]);
                            }
                        }
                    }
                }
            }
        }
        __syncthreads();  // p_s, offset_s and corr_s are rewritten by the next tile
    }

    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < kHeadsPerWarp; i++) {
            const int h = warp + i * kAttnWarps;
            if (h < hc) m_s[h] = m[i], l_s[h] = l[i];
        }
    }
    // Per head: the key groups' accumulators into q_s ([key group][head_dim]), summed in group order.
    float* sum_s = q_s;
#pragma unroll
    for (int h = 0; h < MaxHeads; h++) {
        if (h < hc) {  // uniform over the block: every thread reaches both barriers
            if (vg < key_groups) {
#pragma unroll
                for (int e = 0; e < VFrag::kElements; e++) {
                    const int u = vu + e / VFrag::kUnitElements * kAttnThreads;
                    if (u < units)
                        sum_s[vg * head_dim + u * VFrag::kUnitElements + e % VFrag::kUnitElements] = acc[h][e];
                }
            }
            __syncthreads();  // also publishes m_s, l_s
            float* dst = n_splits == 1 ? out + (int64_t(t) * n_heads + head0 + h) * head_dim : partial_row(h);
            const float inv_l = n_splits == 1 ? 1.0f / l_s[h] : 1.0f;
            for (int d = tid; d < head_dim; d += kAttnThreads) {
                float a = 0.0f;
                for (int g = 0; g < key_groups; g++) a += sum_s[g * head_dim + d];
                dst[d] = n_splits == 1 ? a * inv_l : a;
            }
            if (n_splits > 1 && tid == 0) {
                dst[kCudaMaxHeadDim] = m_s[h];
                dst[kCudaMaxHeadDim + 1] = l_s[h];
            }
            __syncthreads();  // sum_s is rewritten for the next head
        }
    }
}

// Merges the splits of each (token, head): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
// How a launch of n queries in n_splits splits runs: 16-byte units when every K/V row starts 16-byte aligned
// (rows start at multiples of head_dim elements; q8_0: units of 8 elements of a block, its rows whole
// blocks), and a block per query head when the grouped grid would have fewer blocks than n_sms
// (one_head_rule -1; 1: always, 0: never).
struct AttnPlan {
    bool vec;
    AttnGeometry geo;
};
template <typename T>
AttnPlan attention_plan(const KvLayout& layout, const T* kv, int32_t n, int32_t n_heads, int32_t n_splits,
                        int32_t n_sms, int32_t one_head_rule) {
    const bool vec =
        kIsQ8Kv<T> || ((int64_t(layout.head_dim) * sizeof(T)) % 16 == 0 && reinterpret_cast<uintptr_t>(kv) % 16 == 0);
    const int32_t unit_elements = vec ? kVecUnitElements<T> : 1;
    const int32_t group = n_heads / layout.n_kv_heads;
    const int64_t grouped_blocks = int64_t(n_splits) * n * layout.n_kv_heads * head_chunks(group);
    const bool one_head = group > 1 && (one_head_rule < 0 ? grouped_blocks < n_sms : one_head_rule == 1);
    return {vec, attention_geometry(layout.head_dim, n_heads, layout.n_kv_heads, unit_elements, one_head)};
}

// Head h of token t, by the block's threads.
__device__ __forceinline__ void combine_head(float* out,             // [n, n_heads, head_dim]
                                             const float* partials,  // [n, n_heads, n_splits, kPartialStride]
                                             int32_t n_heads, int32_t head_dim, int32_t n_splits, int32_t h,
                                             int32_t t) {
    const float* base = partials + (int64_t(t) * n_heads + h) * n_splits * kPartialStride;
    float max_all = -INFINITY;
    for (int32_t s = 0; s < n_splits; s++) max_all = fmaxf(max_all, base[s * kPartialStride + kCudaMaxHeadDim]);
    float den = 0.0f;
    for (int32_t s = 0; s < n_splits; s++) {
        float l = base[s * kPartialStride + kCudaMaxHeadDim + 1];
        if (l > 0.0f) den += expf(base[s * kPartialStride + kCudaMaxHeadDim] - max_all) * l;
    }
    const float inv_den = 1.0f / den;
    float* oh = out + (int64_t(t) * n_heads + h) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float num = 0.0f;
        for (int32_t s = 0; s < n_splits; s++) {
            const float* part = base + s * kPartialStride;
            if (part[kCudaMaxHeadDim + 1] > 0.0f) num += expf(part[kCudaMaxHeadDim] - max_all) * part[d];
        }
        oh[d] = num * inv_den;
    }
}

}  // namespace kvlm::attention_detail
