// The path choice and the threaded, tiled matmul driver over the chosen kernel set (compute/cpu_kernels.h).
#include "compute/matmul_cpu.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "compute/cpu_kernels.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace kvlm {

namespace {

// Tokens per pass over a row tile of 16-bit weights (a multiple of every path's register tile: 2, 3, 4): each
// pass widens the tile again, so fewer, longer passes widen less (144 against 48: about 10% less CPU time for
// a bf16 pp512 on a 2-core AVX-512 Xeon), while the tile's activations still fit in L2.
constexpr int64_t kTokenTile = 144;
constexpr int64_t kRowTile = 16;    // weight rows kept hot in cache while a token tile runs over them
// Quantized weight rows unpacked at once for a batch (64 rows of 1,536 inputs unpacked: 192 KiB, in L2).
constexpr int64_t kQuantRowTile = 64;
// Below this many multiply-adds a matmul runs on the calling thread: waking workers costs more.
constexpr int64_t kMinParallelWork = 1 << 16;

const CpuKernels& kernels_of(CpuPath path) {
    switch (path) {
        case CpuPath::avx512: return kAvx512Kernels;
        case CpuPath::avx2: return kAvx2Kernels;
        case CpuPath::scalar: break;
    }
    return kScalarKernels;
}

CpuPath initial_path() {
    const CpuFeatures features = detect_cpu_features();
    const char* forced = std::getenv("KVLM_CPU_PATH");
    if (!forced || !*forced) return best_cpu_path(features);
    for (CpuPath path : {CpuPath::scalar, CpuPath::avx2, CpuPath::avx512})
        if (std::string(forced) == cpu_path_name(path)) {
            if (!cpu_path_supported(path, features))
                throw_error("KVLM_CPU_PATH={}: this CPU lacks the instructions of that path (best here: {})", forced,
                            cpu_path_name(best_cpu_path(features)));
            return path;
        }
    throw_error("KVLM_CPU_PATH={}: unknown path (expected scalar, avx2 or avx512)", forced);
}

// -1 until first use; then the CpuPath in use.
std::atomic<int> g_path{-1};


// Rows [row_begin, row_end) of out = x w^T for all n tokens, float weights. For batches, f16/bf16 row tiles are
// first widened to f32 (exactly) once per token tile, so the conversion is not repeated for every token.
void matmul_rows_float(const CpuKernels& k, float* out, const float* x, const void* w, DType w_dtype, int64_t n,
                       int64_t n_in, int64_t n_out, int64_t row_begin, int64_t row_end) {
    thread_local std::vector<float> scratch;  // widened_scratch_floats(kRowTile, n_in); grows once
    const size_t element = dtype_size(w_dtype);
    for (int64_t t0 = 0; t0 < n; t0 += kTokenTile) {
        const int64_t t1 = std::min(n, t0 + kTokenTile);
        for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
            const int64_t r1 = std::min(row_end, r0 + kRowTile);
            if (w_dtype == DType::f32 || t1 - t0 < 4) {
                k.matmul_direct(out + t0 * n_out, n_out, x + t0 * n_in, t1 - t0, w, w_dtype, n_in, r0, r1);
                continue;
            }
            const size_t n_scratch = size_t(widened_scratch_floats(r1 - r0, n_in));
            if (scratch.size() < n_scratch) scratch.resize(n_scratch);
            // The tile's rows start at 0: shift `out` so that row r0 lands at column r0.
            k.matmul_widened(out + t0 * n_out + r0, n_out, x + t0 * n_in, t1 - t0,
                             static_cast<const char*>(w) + size_t(r0 * n_in) * element, w_dtype, n_in, r1 - r0,
                             scratch.data());
        }
    }
}

// Rows [row_begin, row_end) for all n tokens, quantized weights: a few tokens take the rows in one call (the
// kernel prepares their activations once), more tokens tile by tile of kQuantRowTile rows, so that the batch
// unpacks each tile once (the kernel then runs its tokens in tiles).
void matmul_rows_quantized(const CpuKernels& k, float* out, const ActivationBlock* xq, const void* w, DType w_dtype,
                           int64_t n, int64_t n_in, int64_t n_out, int64_t row_begin, int64_t row_end) {
    const int64_t tile = n <= kQuantRowsAsStoredTokens ? row_end - row_begin : kQuantRowTile;
    thread_local std::vector<float> scratch;
    const size_t n_scratch = size_t(quantized_scratch_bytes(n, tile, n_in) / 4);
    if (scratch.size() < n_scratch) scratch.resize(n_scratch);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += tile)
        k.matmul_q(out, n_out, xq, n, w, w_dtype, n_in, r0, std::min(row_end, r0 + tile), scratch.data());
}

}  // namespace

CpuPath cpu_path() {
    int path = g_path.load(std::memory_order_relaxed);
    if (path < 0) {
        path = int(initial_path());
        g_path.store(path, std::memory_order_relaxed);
    }
    return CpuPath(path);
}

const CpuKernels& cpu_kernels() { return kernels_of(cpu_path()); }

std::string cpu_path_text() { return cpu_path_description(cpu_path(), detect_cpu_features()); }

void set_cpu_path(CpuPath path) {
    if (!cpu_path_supported(path, detect_cpu_features()))
        throw_error("the {} kernels need instructions this CPU lacks", cpu_path_name(path));
    g_path.store(int(path), std::memory_order_relaxed);
}

float dot_cpu(const void* a, DType a_dtype, const float* b, int64_t n) { return cpu_kernels().dot(a, a_dtype, b, n); }

void axpy_cpu(float* y, float alpha, const void* x, DType x_dtype, int64_t n) { cpu_kernels().axpy(y, alpha, x, x_dtype, n); }

void matmul_cpu(float* out, const float* x, const void* w, DType w_dtype, int64_t n, int64_t n_in, int64_t n_out,
                ThreadPool* pool) {
    const MatmulOutput output{out, w, w_dtype, n_out};
    matmul_cpu_shared_input(&output, 1, x, n, n_in, pool);
}

void matmul_cpu_shared_input(const MatmulOutput* outputs, int n_outputs, const float* x, int64_t n, int64_t n_in,
                             ThreadPool* pool) {
    const CpuKernels& k = cpu_kernels();
    int64_t total_rows = 0;
    bool any_quantized = false;
    for (int i = 0; i < n_outputs; i++) {
        total_rows += outputs[i].n_out;
        any_quantized |= dtype_is_quantized(outputs[i].w_dtype);
    }
    // The activations are quantized once, on the calling thread (the workers only read them).
    thread_local std::vector<ActivationBlock> xq;
    const ActivationBlock* x_quantized = nullptr;  // not `xq` in the lambda: on a worker that names its own buffer
    if (any_quantized) {
        KVLM_ASSERT(n_in % kQuantBlock == 0, "matmul_cpu: quantized rows are whole blocks");
        const size_t n_blocks = size_t(n * n_in / kQuantBlock);
        if (xq.size() < n_blocks) xq.resize(n_blocks);
        k.quantize_rows(xq.data(), x, n, n_in);
        x_quantized = xq.data();
    }
    // Rows [begin, end) of the outputs' rows laid end to end.
    auto rows = [&](int64_t begin, int64_t end) {
        int64_t first = 0;
        for (int i = 0; i < n_outputs && first < end; first += outputs[i].n_out, i++) {
            const MatmulOutput& o = outputs[i];
            const int64_t r0 = std::max<int64_t>(begin - first, 0), r1 = std::min<int64_t>(end - first, o.n_out);
            if (r0 >= r1) continue;
            if (dtype_is_quantized(o.w_dtype))
                matmul_rows_quantized(k, o.out, x_quantized, o.w, o.w_dtype, n, n_in, o.n_out, r0, r1);
            else
                matmul_rows_float(k, o.out, x, o.w, o.w_dtype, n, n_in, o.n_out, r0, r1);
        }
    };
    // Chunks of 8 rows: the quantized kernels take 8 rows at a time (the float ones 4).
    if (pool && n * n_in * total_rows >= kMinParallelWork) pool->parallel_for(total_rows, rows, 8);
    else rows(0, total_rows);
}

}  // namespace kvlm
