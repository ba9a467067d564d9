// Chained XXH3-128 block hashes.
#include "kv/block_hash.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

namespace kvlm {

std::string BlockHash::hex() const {
    static const char* digits = "0123456789abcdef";
    std::string s(32, '0');
    for (int i = 0; i < 16; i++) {
        s[size_t(15 - i)] = digits[(hi >> (4 * i)) & 0xf];
        s[size_t(31 - i)] = digits[(lo >> (4 * i)) & 0xf];
    }
    return s;
}

bool BlockHash::from_hex(const std::string& text, BlockHash* out) {
    if (text.size() != 32) return false;
    uint64_t parts[2] = {0, 0};
    for (size_t i = 0; i < 32; i++) {
        char c = text[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        parts[i / 16] = (parts[i / 16] << 4) | uint64_t(v);
    }
    out->hi = parts[0];
    out->lo = parts[1];
    return true;
}

static BlockHash from_xxh(XXH128_hash_t h) { return BlockHash{h.low64, h.high64}; }

BlockHash kv_namespace_hash(const std::string& model_fingerprint, DType kv_dtype, int32_t block_size) {
    std::string key = "kvlm-kv-namespace:";
    key += model_fingerprint;
    uint32_t fields[3] = {uint32_t(kv_dtype), uint32_t(block_size), kKvLayoutVersion};
    key.append(reinterpret_cast<const char*>(fields), sizeof(fields));
    return from_xxh(XXH3_128bits(key.data(), key.size()));
}

BlockHash chain_block_hash(const BlockHash& parent, const int32_t* tokens, int32_t n_tokens) {
    // parent (16 bytes) | n_tokens (4) | token ids (4 each, little-endian on every supported host)
    std::vector<uint8_t> buffer(20 + size_t(n_tokens) * 4);
    std::memcpy(buffer.data(), &parent.lo, 8);
    std::memcpy(buffer.data() + 8, &parent.hi, 8);
    std::memcpy(buffer.data() + 16, &n_tokens, 4);
    if (n_tokens > 0) std::memcpy(buffer.data() + 20, tokens, size_t(n_tokens) * 4);
    return from_xxh(XXH3_128bits(buffer.data(), buffer.size()));
}

}  // namespace kvlm
