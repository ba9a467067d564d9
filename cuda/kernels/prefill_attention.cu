// Prefill attention on tensor cores, flash-attention style: thread block (head, query tile) holds Q_TILE
// consecutive queries of one head and streams keys 0..(its last query's position) through shared memory in
// tiles of K_TILE, each key's K/V row read once per query tile through the block table. Warp w owns query
// rows 16w..16w+15 for the whole block: S = Q K^T (WMMA, 16-bit inputs, f32 accumulation) -> online softmax
// in f32 -> P (16-bit) -> O += P V, with O kept in shared memory as f32 so plain threads can rescale its rows.
// A q8_0 cache is dequantized to f16 (d * q rounded to nearest even) as its rows are staged in shared memory.
// Invariant: only the two barriers per key tile separate the block-shared K/V/offset buffers' writers and
// readers; everything else a warp touches (its rows of S, P, O) is its own, ordered by __syncwarp.
#include <mma.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "kernels/cuda_ops.h"
#include "kernels/kv_cache_cuda.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kFrag = 16;        // WMMA tile edge (16x16x16)
constexpr int kMaxDevices = 64;  // devices whose opt-in shared memory limit is cached
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory of one thread block; every region starts 128-byte aligned (WMMA needs 32). Row paddings
// keep the leading dimensions multiples of 8 (16-bit) and 4 (f32) elements, as WMMA requires, and shift
// consecutive rows by 4 banks.
struct PrefillSmem {
    int32_t ld_h = 0;                                               // Q, K, V rows (16-bit): head_dim + 8
    int32_t ld_s = 0;                                               // S rows (f32): k_tile + 4
    int32_t ld_p = 0;                                               // P rows (16-bit): k_tile + 8
    int32_t ld_o = 0;                                               // O rows (f32): head_dim + 4
    int32_t q = 0, k = 0, v = 0, s = 0, p = 0, o = 0, offsets = 0;  // byte offsets of the regions
    int32_t bytes = 0;                                              // total
};

__host__ __device__ inline int32_t take_smem(int32_t& bytes, int32_t size) {
    int32_t at = bytes;
    bytes += (size + 127) / 128 * 128;
    return at;
}

__host__ __device__ inline PrefillSmem prefill_smem(int32_t head_dim, int32_t q_tile, int32_t k_tile) {
    PrefillSmem m;
    m.ld_h = head_dim + 8, m.ld_s = k_tile + 4, m.ld_p = k_tile + 8, m.ld_o = head_dim + 4;
    m.q = take_smem(m.bytes, q_tile * m.ld_h * 2);                          // [q_tile][ld_h]   16-bit q (unscaled)
    m.k = take_smem(m.bytes, k_tile * m.ld_h * 2);                          // [k_tile][ld_h]   16-bit
    m.v = take_smem(m.bytes, k_tile * m.ld_h * 2);                          // [k_tile][ld_h]   16-bit
    m.s = take_smem(m.bytes, q_tile * m.ld_s * 4);                          // [q_tile][ld_s]   f32 scores
    m.p = take_smem(m.bytes, q_tile * m.ld_p * 2);                          // [q_tile][ld_p]   16-bit probabilities
    m.o = take_smem(m.bytes, q_tile * m.ld_o * 4);                          // [q_tile][ld_o]   f32 unnormalised output
    m.offsets = take_smem(m.bytes, 2 * k_tile * int32_t(sizeof(int64_t)));  // [2][k_tile] key row offsets
    return m;
}

// nvcc 13 emits the bf16 WMMA loads with generic addresses (four LD.E per fragment from shared memory)
// where the f16 ones get the shared state space (one LDSM each). load_frag issues the very PTX instruction
// wmma::load_matrix_sync does for bf16, plus .shared; false falls back to wmma::load_matrix_sync.
constexpr bool kBf16SharedLoads = true;

template <typename Frag, typename T>
__device__ __forceinline__ void load_frag(Frag& f, const T* p, unsigned ldm) {
    wmma::load_matrix_sync(f, p, ldm);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// A bf16 16x16x16 fragment (A or B) is four .b32 registers, two elements each (PTX ISA, wmma.load).
#define KVLM_BF16_SHARED_LOAD(USE, LAYOUT, PTX)                                                                      \
    __device__ __forceinline__ void load_frag(wmma::fragment<wmma::USE, 16, 16, 16, __nv_bfloat16, wmma::LAYOUT>& f, \
                                              const __nv_bfloat16* p, unsigned ldm) {                                \
        if (!kBf16SharedLoads) return wmma::load_matrix_sync(f, p, ldm);                                             \
        static_assert(sizeof(f.x) == 4 * sizeof(uint32_t), "bf16 fragment of four registers");                       \
        uint32_t r[4];                                                                                               \
        const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));                                    \
        asm volatile(PTX " {%0, %1, %2, %3}, [%4], %5;"                                                              \
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                                \
                     : "r"(addr), "r"(ldm)                                                                           \
                     : "memory");                                                                                    \
        memcpy(f.x, r, sizeof(r));                                                                                   \
    }
KVLM_BF16_SHARED_LOAD(matrix_a, row_major, "wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16")
KVLM_BF16_SHARED_LOAD(matrix_b, col_major, "wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16")
KVLM_BF16_SHARED_LOAD(matrix_b, row_major, "wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16")
#undef KVLM_BF16_SHARED_LOAD
#endif

// Elements e .. e + 7 of a KV cache (e a multiple of 8) as eight T in one 16-byte word: the bytes of a
// 16-bit cache, or q8_0 elements (all in one block) converted to T.
template <typename T, typename KV>
__device__ __forceinline__ uint4 load8_as(const KV* kv, int64_t e) {
    if constexpr (kIsQ8Kv<KV>) {
        static_assert(std::is_same_v<T, __half>, "a q8_0 cache is staged as f16");
        uint32_t w[4];  // built from the bits (no type punning through memory)
#pragma unroll
        for (int i = 0; i < 4; i++)
            w[i] = uint32_t(__half_as_ushort(__float2half_rn(load_kv(kv, e + 2 * i)))) |
                   uint32_t(__half_as_ushort(__float2half_rn(load_kv(kv, e + 2 * i + 1)))) << 16;
        return make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        static_assert(sizeof(KV) == 2, "a 16-bit cache is staged as it is");
        return *reinterpret_cast<const uint4*>(kv + e);
    }
}

}  // namespace

// Grid (n_heads, ceil(n / Q_TILE)); Q_TILE / 16 warps. Query tiles run in reverse order so the ones with the
// most keys start first. positions[t] = positions[0] + t (a prefill batch).
template <typename T, typename KV, int Q_TILE, int K_TILE>
__global__ void __launch_bounds__(Q_TILE / 16 * 32)
    prefill_attention_kernel(float* out,      // [n, n_heads, head_dim]
                             const float* q,  // [n, n_heads, head_dim]
                             const KV* kv,    // [n_blocks] block records, 16-byte aligned (KV: T, or KvQ8)
                             KvLayout layout, int32_t layer,
                             const int32_t* block_table,  // [>= positions[n - 1] / block_size + 1]
                             const int32_t* positions,    // [n], consecutive
                             int32_t n, int32_t n_heads,
                             float scale_log2) {  // log2(e) / sqrt(head_dim): softmax in base 2
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // 16-bit WMMA with bf16 needs sm_80; launchers never get here (device_available checks it)
#else
    constexpr int kWarps = Q_TILE / 16, kThreads = kWarps * 32;
    constexpr int kVec = 8;  // 16-bit elements per 16-byte load
    static_assert(Q_TILE % 16 == 0 && K_TILE % 16 == 0 && K_TILE <= kThreads, "tile shapes");

    const int32_t head_dim = layout.head_dim, block_size = layout.block_size;
    const int32_t h = blockIdx.x;
    const int32_t q0 = (int32_t(gridDim.y) - 1 - int32_t(blockIdx.y)) * Q_TILE;  // first query of the tile
    const int32_t n_rows = min(Q_TILE, n - q0);                                  // valid query rows
    const int32_t pos0 = positions[q0];                                          // position of row 0
    const int32_t last = pos0 + n_rows - 1;                                      // last key any valid row attends
    const int32_t n_key_tiles = last / K_TILE + 1;
    const int32_t kv_head = h / (n_heads / layout.n_kv_heads);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    const int64_t row = int64_t(layout.n_kv_heads) * head_dim;  // elements of one token's K (or V) row
    const int64_t block_elements = int64_t(layout.n_layers) * 2 * block_size * row;
    const int64_t head_offset = int64_t(layer) * 2 * block_size * row + int64_t(kv_head) * head_dim;
    const int64_t v_delta = int64_t(block_size) * row;  // a key's V row sits block_size rows after its K row

    extern __shared__ __align__(128) unsigned char prefill_smem_bytes[];
    const PrefillSmem L = prefill_smem(head_dim, Q_TILE, K_TILE);
    T* q_s = reinterpret_cast<T*>(prefill_smem_bytes + L.q);
    T* k_s = reinterpret_cast<T*>(prefill_smem_bytes + L.k);
    T* v_s = reinterpret_cast<T*>(prefill_smem_bytes + L.v);
    float* s_s = reinterpret_cast<float*>(prefill_smem_bytes + L.s);
    T* p_s = reinterpret_cast<T*>(prefill_smem_bytes + L.p);
    float* o_s = reinterpret_cast<float*>(prefill_smem_bytes + L.o);
    // Element offset of each tile key's K row (this layer, kv head); -1 past `last`. Double-buffered so the
    // next tile's offsets are computed while the current tile is in use.
    int64_t* offset_s = reinterpret_cast<int64_t*>(prefill_smem_bytes + L.offsets);

    // q rounded to T (padding rows past n are zeros), O zeroed, offsets of key tile 0.
    for (int32_t i = tid; i < Q_TILE * head_dim; i += kThreads) {
        const int32_t r = i / head_dim, d = i - r * head_dim;
        const float x = r < n_rows ? q[(int64_t(q0 + r) * n_heads + h) * head_dim + d] : 0.0f;
        store_f32(q_s, int64_t(r) * L.ld_h + d, x);
    }
    for (int32_t i = tid; i < Q_TILE * L.ld_o; i += kThreads) o_s[i] = 0.0f;
    auto key_offset = [&](int32_t j) -> int64_t {
        if (j > last) return -1;
        return int64_t(block_table[j / block_size]) * block_elements + int64_t(j % block_size) * row + head_offset;
    };
    if (tid < K_TILE) offset_s[tid] = key_offset(tid);

    // This lane's softmax row (two lanes per row, each taking every other pair of columns) and its state.
    const int32_t my_row = warp * 16 + lane / 2, half = lane % 2;
    const int32_t my_pos = pos0 + my_row;
    float m = -INFINITY;  // running max of the row's scores (base-2 units)
    float l = 0.0f;       // running sum of exp2(score - m), of the probabilities as rounded to T
    // Rows 16w.. of padding (past n) need no work; nor do key tiles past the warp's last valid position.
    const int32_t warp_rows = min(16, n_rows - warp * 16);
    const int32_t warp_last = warp_rows > 0 ? pos0 + warp * 16 + warp_rows - 1 : -1;

    for (int32_t tile = 0; tile < n_key_tiles; tile++) {
        const int32_t k0 = tile * K_TILE;
        const int64_t* offsets = offset_s + (tile & 1) * K_TILE;
        __syncthreads();  // (A) this tile's offsets are visible; every warp is done with the last K/V tile
        // K and V rows of keys k0.. into shared memory, 16 bytes a load; keys past `last` become zeros so
        // that masked products stay finite (0 * NaN would poison O).
        const int32_t vecs = head_dim / kVec;
        for (int32_t i = tid; i < K_TILE * vecs; i += kThreads) {
            const int32_t key = i / vecs, c = (i - key * vecs) * kVec;
            const int64_t off = offsets[key];
            uint4 kx = make_uint4(0, 0, 0, 0), vx = make_uint4(0, 0, 0, 0);
            if (off >= 0) {
                kx = load8_as<T>(kv, off + c);
                vx = load8_as<T>(kv, off + v_delta + c);
            }
            *reinterpret_cast<uint4*>(k_s + key * L.ld_h + c) = kx;
            *reinterpret_cast<uint4*>(v_s + key * L.ld_h + c) = vx;
        }
        __syncthreads();  // (B) K/V visible; the other offset buffer is free (last read before (A))
        if (tid < K_TILE && tile + 1 < n_key_tiles)
            offset_s[((tile + 1) & 1) * K_TILE + tid] = key_offset(k0 + K_TILE + tid);

        if (k0 > warp_last) continue;  // warp-uniform: every key of the tile is masked for this warp's rows

        // S (this warp's 16 rows x K_TILE keys) = Q K^T; K^T is K read column-major.
        wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> s_frag[K_TILE / 16];
#pragma unroll
        for (int j = 0; j < K_TILE / 16; j++) wmma::fill_fragment(s_frag[j], 0.0f);
        for (int32_t d = 0; d < head_dim; d += kFrag) {
            wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, T, wmma::row_major> a;
            load_frag(a, q_s + warp * 16 * L.ld_h + d, L.ld_h);
#pragma unroll
            for (int j = 0; j < K_TILE / 16; j++) {
                wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, T, wmma::col_major> b;
                load_frag(b, k_s + j * 16 * L.ld_h + d, L.ld_h);
                wmma::mma_sync(s_frag[j], a, b, s_frag[j]);
            }
        }
        float* s_rows = s_s + warp * 16 * L.ld_s;
#pragma unroll
        for (int j = 0; j < K_TILE / 16; j++)
            wmma::store_matrix_sync(s_rows + j * 16, s_frag[j], L.ld_s, wmma::mem_row_major);
        __syncwarp();  // S rows visible to the lanes that own them

        // Online softmax of row my_row over this tile: this lane takes columns 4i + 2*half, 4i + 2*half + 1
        // (8-byte loads, conflict-free per half-warp). Masked: keys after the row's position.
        float sv[K_TILE / 2];
        float tile_max = -INFINITY;
#pragma unroll
        for (int i = 0; i < K_TILE / 4; i++) {
            const int c = 4 * i + 2 * half;
            const float2 s2 = *reinterpret_cast<const float2*>(s_s + my_row * L.ld_s + c);
            sv[2 * i] = k0 + c <= my_pos ? s2.x * scale_log2 : -INFINITY;
            sv[2 * i + 1] = k0 + c + 1 <= my_pos ? s2.y * scale_log2 : -INFINITY;
            tile_max = fmaxf(tile_max, fmaxf(sv[2 * i], sv[2 * i + 1]));
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        const float m_new = fmaxf(m, tile_max);
        // Key 0 is never masked, so m_new is finite from the first tile on; the guard keeps a fully masked
        // row from computing -inf - -inf = NaN all the same.
        const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = exp2f(m - m_ref);  // rescale of the old O and l; 0 on the first tile
        float tile_sum = 0.0f;
        T* p_row = p_s + my_row * L.ld_p;
#pragma unroll
        for (int i = 0; i < K_TILE / 4; i++) {
            const int c = 4 * i + 2 * half;
            T p2[2];  // rounded to T: l sums the very weights the MMA uses
            store_f32(p2, 0, exp2f(sv[2 * i] - m_ref));
            store_f32(p2, 1, exp2f(sv[2 * i + 1] - m_ref));
            p_row[c] = p2[0], p_row[c + 1] = p2[1];
            tile_sum += load_f32(p2, 0) + load_f32(p2, 1);
        }
        tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);  // a + b == b + a: both lanes agree
        l = l * alpha + tile_sum;
        m = m_new;
        // O row *= alpha, skipped when no row of the warp changed its max (and on the first tile, O = 0).
        if (tile > 0 && !__all_sync(0xffffffffu, alpha == 1.0f)) {
            float* o_row = o_s + my_row * L.ld_o;
            for (int32_t c = 4 * half; c < head_dim; c += 8) {
                float4 o4 = *reinterpret_cast<float4*>(o_row + c);
                o4.x *= alpha, o4.y *= alpha, o4.z *= alpha, o4.w *= alpha;
                *reinterpret_cast<float4*>(o_row + c) = o4;
            }
        }
        __syncwarp();  // P and the rescaled O visible to the warp's MMAs

        // O (this warp's 16 rows) += P V, one 16-column slab of O at a time through accumulator fragments.
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, T, wmma::row_major> p_frag[K_TILE / 16];
#pragma unroll
        for (int kk = 0; kk < K_TILE / 16; kk++) load_frag(p_frag[kk], p_s + warp * 16 * L.ld_p + kk * 16, L.ld_p);
        float* o_rows = o_s + warp * 16 * L.ld_o;
        for (int32_t d = 0; d < head_dim; d += kFrag) {
            wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> o_frag;
            wmma::load_matrix_sync(o_frag, o_rows + d, L.ld_o, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < K_TILE / 16; kk++) {
                wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, T, wmma::row_major> b;
                load_frag(b, v_s + kk * 16 * L.ld_h + d, L.ld_h);
                wmma::mma_sync(o_frag, p_frag[kk], b, o_frag);
            }
            wmma::store_matrix_sync(o_rows + d, o_frag, L.ld_o, wmma::mem_row_major);
        }
    }
    __syncthreads();  // O complete (each warp reads back only its own rows; a barrier orders it all the same)

    // out = O / l, one row at a time, lanes over head_dim (coalesced); padding rows are not written.
    const float inv_l = 1.0f / l;             // inf for rows never computed (padding), which are not written
    for (int rr = 0; rr < warp_rows; rr++) {  // warp-uniform bound
        const float inv = __shfl_sync(0xffffffffu, inv_l, 2 * rr);
        const int32_t r = warp * 16 + rr;
        float* orow = out + (int64_t(q0 + r) * n_heads + h) * head_dim;
        for (int32_t d = lane; d < head_dim; d += 32) orow[d] = o_s[r * L.ld_o + d] * inv;
    }
#endif
}

namespace {

// The device's opt-in shared memory limit per block, queried once per device (no synchronization).
int32_t smem_optin_limit(int device) {
    static std::atomic<int32_t> cached[kMaxDevices] = {};
    if (device >= 0 && device < kMaxDevices) {
        if (int32_t bytes = cached[device].load(std::memory_order_relaxed)) return bytes;
    }
    int bytes = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (device >= 0 && device < kMaxDevices) cached[device].store(bytes, std::memory_order_relaxed);
    return bytes;
}

template <typename T, typename KV, int Q_TILE, int K_TILE>
void launch_prefill_typed(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                          const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads, int device,
                          int32_t smem_bytes, cudaStream_t stream) {
    const int32_t n_tiles = (n + Q_TILE - 1) / Q_TILE;
    if (n_tiles > 65535) cuda_throw("launch_prefill_attention: more than 65535 query tiles in a batch");
    auto kernel = prefill_attention_kernel<T, KV, Q_TILE, K_TILE>;
    // Above the 48 KB default a kernel must opt in to its dynamic shared memory, per instantiation and
    // device; raised only when a launch needs more than already granted (a host-side call, no sync).
    static std::mutex mutex;
    static int32_t granted[kMaxDevices] = {};
    if (smem_bytes > 48 * 1024) {
        std::lock_guard<std::mutex> lock(mutex);
        if (device >= kMaxDevices || granted[device] < smem_bytes) {
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
            if (device < kMaxDevices) granted[device] = smem_bytes;
        }
    }
    const float scale_log2 = kLog2e / std::sqrt(float(layout.head_dim));
    const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_tiles));
    const dim3 block(Q_TILE / 16 * 32);
    kernel<<<grid, block, smem_bytes, stream>>>(out, q, static_cast<const KV*>(kv), layout, layer, block_table,
                                                positions, n, n_heads, scale_log2);
    CUDA_CHECK_LAUNCH();
}

template <int Q_TILE, int K_TILE>
void launch_prefill_tiles(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                          const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads, int device,
                          int32_t smem_bytes, cudaStream_t stream) {
    if (layout.dtype == DType::f16)
        launch_prefill_typed<__half, __half, Q_TILE, K_TILE>(out, q, kv, layout, layer, block_table, positions, n,
                                                             n_heads, device, smem_bytes, stream);
    else if (layout.dtype == DType::q8_0)
        launch_prefill_typed<__half, KvQ8, Q_TILE, K_TILE>(out, q, kv, layout, layer, block_table, positions, n,
                                                           n_heads, device, smem_bytes, stream);
    else
        launch_prefill_typed<__nv_bfloat16, __nv_bfloat16, Q_TILE, K_TILE>(out, q, kv, layout, layer, block_table,
                                                                           positions, n, n_heads, device, smem_bytes,
                                                                           stream);
}

// Query and key tile shapes, largest first; the first whose shared memory fits the device is used (on an
// H100, 64 x 64 for every head_dim; smaller key tiles, then query tiles, where the opt-in limit is lower).
struct PrefillTiles {
    int32_t q_tile, k_tile;
    decltype(&launch_prefill_tiles<64, 64>) launch;
};
constexpr PrefillTiles kPrefillTiles[] = {{64, 64, launch_prefill_tiles<64, 64>},
                                          {64, 32, launch_prefill_tiles<64, 32>},
                                          {32, 32, launch_prefill_tiles<32, 32>}};

}  // namespace

bool prefill_attention_supports(const KvLayout& layout) {
    const bool q8_0 = layout.dtype == DType::q8_0 && layout.head_dim % 32 == 0;
    return (layout.dtype == DType::f16 || layout.dtype == DType::bf16 || q8_0) && layout.head_dim > 0 &&
           layout.head_dim % 16 == 0 && layout.head_dim <= kCudaMaxHeadDim;
}

void launch_prefill_attention(float* out, const float* q, const void* kv, const KvLayout& layout, int32_t layer,
                              const int32_t* block_table, const int32_t* positions, int32_t n, int32_t n_heads,
                              cudaStream_t stream) {
    auto fail = [](const char* what) { cuda_throw((std::string("launch_prefill_attention: ") + what).c_str()); };
    if (!prefill_attention_supports(layout))
        fail("needs an f16, bf16 or q8_0 KV cache and head_dim a multiple of 16 (32 for q8_0) up to "
             "kCudaMaxHeadDim (256)");
    if (n < 1) fail("n must be at least 1");
    if (n_heads < 1 || layout.n_kv_heads < 1 || n_heads % layout.n_kv_heads != 0)
        fail("n_heads is not a positive multiple of n_kv_heads");
    if (layout.block_size < 1 || layer < 0 || layer >= layout.n_layers) fail("bad block_size or layer");
    if (reinterpret_cast<uintptr_t>(kv) % 16 != 0) fail("the KV pool is not 16-byte aligned");

    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const int32_t optin = smem_optin_limit(device);
    for (const PrefillTiles& tiles : kPrefillTiles) {
        const int32_t bytes = prefill_smem(layout.head_dim, tiles.q_tile, tiles.k_tile).bytes;
        if (bytes <= optin)
            return tiles.launch(out, q, kv, layout, layer, block_table, positions, n, n_heads, device, bytes, stream);
    }
    fail("head_dim needs more shared memory per block than this device allows");
}

}  // namespace kvlm
