// Argument validation and KV sizing shared by the CPU and CUDA backends (one rule, one message).
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "compute/backend.h"
#include "util/error.h"

namespace kvlm {

void check_kv_block(const char* backend, int32_t block, int32_t n_kv_blocks, const char* what) {
    if (block < 0 || block >= n_kv_blocks)
        throw_error("{}: {}: block {} is out of range (the pool has {} blocks)", backend, what, block, n_kv_blocks);
}

void check_forward_args(const char* backend, const ModelConfig& config, int32_t block_size, int32_t n_kv_blocks,
                        const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table) {
    if (n_tokens < 1) throw_error("{}: forward needs at least one token, got {}", backend, n_tokens);
    if (pos < 0) throw_error("{}: forward at negative position {}", backend, pos);
    int64_t end = int64_t(pos) + n_tokens;
    if (end > int64_t(table.capacity(block_size)))
        throw_error("{}: block table holds {} tokens, forward needs {} (reserve_tokens first)", backend,
                    table.capacity(block_size), end);
    int64_t n_blocks_used = (end + block_size - 1) / block_size;
    for (int64_t i = 0; i < n_blocks_used; i++) check_kv_block(backend, table.blocks[size_t(i)], n_kv_blocks, "forward");
    for (int32_t t = 0; t < n_tokens; t++)
        if (tokens[t] < 0 || tokens[t] >= config.n_vocab)
            throw_error("{}: token id {} at index {} is out of range (vocabulary has {} tokens)", backend, tokens[t], t,
                        config.n_vocab);
}

void check_kv_dtype(const ModelConfig& config, DType kv_dtype) {
    if (!kv_dtype_is_supported(kv_dtype))
        throw_error("a KV cache cannot be {} (f32, f16, bf16 or q8_0)", dtype_name(kv_dtype));
    if (kv_dtype == DType::q8_0 && config.head_dim % kQuantBlock != 0)
        throw_error("--kv-dtype q8_0 needs head_dim a multiple of 32 (32-element blocks per head); this model's "
                    "head_dim is {}: use --kv-dtype f16", config.head_dim);
}

int32_t kv_block_count(const ModelConfig& config, const BackendOptions& options) {
    return options.n_kv_blocks > 0 ? options.n_kv_blocks : (config.n_ctx + options.block_size - 1) / options.block_size;
}

int32_t kv_blocks_for_free_memory(int32_t minimum, const BackendOptions& options, uint64_t free_bytes,
                                  size_t block_bytes) {
    if (options.kv_mem_fraction <= 0 || block_bytes == 0) return minimum;
    double blocks = options.kv_mem_fraction * double(free_bytes) / double(block_bytes);
    blocks = std::min(blocks, double(kMaxKvBlocks));
    return std::max(minimum, int32_t(blocks));
}

std::string kv_pool_advice(const ModelConfig& config, const BackendOptions& options) {
    std::string advice = options.kv_blocks_from_mem_size ? "lower --kv-mem or --ctx-size (-c)" : "lower --ctx-size (-c)";
    if (!options.pool_advice.empty()) advice = options.pool_advice + ", " + advice;
    if (options.kv_dtype == DType::f32) advice += ", or halve it with --kv-dtype f16";
    else if (options.kv_dtype != DType::q8_0 && config.head_dim % kQuantBlock == 0) advice += ", or halve it with --kv-dtype q8_0";
    return advice;
}

uint64_t host_available_memory() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) break;
    std::fclose(f);
    return kib * 1024;
}

}  // namespace kvlm
