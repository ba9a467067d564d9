// Content identity of KV blocks: a chained 128-bit hash over token ids, rooted in a namespace that
// binds the model fingerprint and the KV settings. Two blocks with equal hashes hold equal K/V (same
// model, same KV layout, same tokens at the same positions), in memory (prefix cache) and on disk
// (session store, where the hex form names the block file).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/dtype.h"

namespace kvlm {

struct BlockHash {
    uint64_t lo = 0;
    uint64_t hi = 0;

    bool operator==(const BlockHash& other) const { return lo == other.lo && hi == other.hi; }
    bool operator!=(const BlockHash& other) const { return !(*this == other); }
    bool is_zero() const { return lo == 0 && hi == 0; }
    std::string hex() const;                                    // 32 lowercase hex digits
    static bool from_hex(const std::string& text, BlockHash* out);  // false if not 32 hex digits
};

struct BlockHashHasher {
    size_t operator()(const BlockHash& h) const { return size_t(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull)); }
};

// Version of the KV block record layout ([n_layers][2][block_size][n_kv_heads][head_dim]); bump when
// the layout or the meaning of a block's bytes changes so old caches stop matching.
constexpr uint32_t kKvLayoutVersion = 1;

// Root of every chain: model fingerprint + KV dtype + block size + layout version.
BlockHash kv_namespace_hash(const std::string& model_fingerprint, DType kv_dtype, int32_t block_size);
// Hash of a block whose tokens are tokens[0..n_tokens) and whose predecessor has hash `parent` (the
// namespace hash for the first block). n_tokens < block_size marks a partial (last) block, which
// hashes differently from any full block.
BlockHash chain_block_hash(const BlockHash& parent, const int32_t* tokens, int32_t n_tokens);

}  // namespace kvlm
