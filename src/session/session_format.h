// On-disk encodings of the session store (docs/SESSIONS.md): the per-session manifest and the
// content-addressed KV block file. Pure (de)serialization over Writer/Reader: decoders bounds-check
// everything and verify checksums, so they never trust a byte of a file they did not validate.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "format/model_config.h"
#include "kv/block_hash.h"

namespace kvlm {

// Block files: version 2 (written since 2026-11-26) keeps its 64-byte header after the payload, so that the
// payload starts the file on a page boundary and can be mapped into the pool; version 1, the header before
// the payload, is still read. Any other value is refused.
constexpr uint32_t kSessionFormatVersion = 2;
constexpr uint32_t kOldestBlockFormatVersion = 1;
// Manifests: version 2 added the session's own name and the model's description; version 1 is still read.
constexpr uint32_t kManifestVersion = 2;
constexpr size_t kBlockHeaderSize = 64;

// What a session's KV bytes depend on besides the tokens. A restore requires every field to match.
struct SessionIdentity {
    std::string model_fingerprint;
    // Which model that is, for people: "stories260K.kvlm (llama, from GGUF stories260K.gguf)". Not compared.
    std::string model_description;
    DType kv_dtype = DType::f32;
    int32_t n_layers = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t block_size = 0;
    float rope_theta = 0;
    RopeScaling rope_scaling;
};

// The model an identity names, for messages: "stories.kvlm (llama, from GGUF ...), fingerprint 5d1c..."
// ("fingerprint 5d1c..." alone for a version-1 manifest, which has no description).
std::string model_text(const SessionIdentity& identity);

// Returns "" if `saved` can be restored by a run with `running`, otherwise the first differing field with
// both values ("block size: session has 16, running model has 32").
std::string identity_mismatch(const SessionIdentity& saved, const SessionIdentity& running);

// The layout of a block record (the payload of a block file): [n_slabs = n_layers x (K, V)][block_size][row_bytes].
// A partial last block is stored with its tokens' rows only, [n_slabs][n_tokens][row_bytes]: a history's store
// is then no larger than its KV. (Stores written before 2026-11-26 hold partial blocks whole; both are read.)
struct BlockRecordShape {
    size_t n_slabs = 0;
    int32_t block_size = 0;
    size_t row_bytes = 0;  // one token's K (or V) of one layer: [n_kv_heads][head_dim] in the KV dtype

    size_t full_bytes() const { return n_slabs * size_t(block_size) * row_bytes; }
    size_t stored_bytes(int32_t n_tokens) const { return n_slabs * size_t(n_tokens) * row_bytes; }
};

BlockRecordShape block_record_shape(const SessionIdentity& identity);

// In place over a full record: the first n_tokens rows of every slab packed to the front (stored_bytes(n_tokens)).
void pack_partial_record(const BlockRecordShape& shape, int32_t n_tokens, uint8_t* record);
// The reverse: a packed record at the front of `record` moved to its slots, the empty slots zeroed.
void unpack_partial_record(const BlockRecordShape& shape, int32_t n_tokens, uint8_t* record);

struct SessionBlockRef {
    BlockHash hash;         // chained block hash; names the block file
    int32_t n_tokens = 0;   // block_size for full blocks, fewer for a partial last block
    uint64_t checksum = 0;  // XXH3-64 of the block's payload (the KV record)
};

struct SessionManifest {
    uint32_t format_version = kManifestVersion;
    std::string session_name;  // the name it was saved under ("" in a version-1 manifest)
    SessionIdentity identity;
    std::vector<int32_t> tokens;     // whole transcript, incl. tokens not yet in KV (the pending one)
    int32_t n_kv_tokens = 0;         // tokens[0..n_kv_tokens) have K/V in `blocks`
    std::vector<SessionBlockRef> blocks;  // [ceil(n_kv_tokens / block_size)] in order
    int64_t created_unix = 0;
    int64_t last_used_unix = 0;
    bool pinned = false;
};

std::vector<uint8_t> encode_manifest(const SessionManifest& manifest);
// `source` names the file in errors. Checks magic, version (a future version is refused naming both
// versions), size, checksum, then structure (token/block counts consistent with block_size).
SessionManifest decode_manifest(const uint8_t* data, size_t size, const std::string& source);

struct BlockFileHeader {
    uint32_t format_version = kSessionFormatVersion;
    BlockHash kv_namespace;
    BlockHash hash;
    int32_t n_tokens = 0;
    uint64_t payload_size = 0;
    uint64_t payload_checksum = 0;
};

// The whole file in one buffer (one sequential write): payload, then the header (header.format_version 2), or
// header then payload (version 1, which only tests of old stores write).
std::vector<uint8_t> encode_block_file(const BlockFileHeader& header, const void* payload);
// Parses and checks a header (magic, version, sizes against file_size); throws Error. `data` holds the
// file's last kBlockHeaderSize bytes (version 2) or its first (version 1): a reader tries the end first, and
// a header found in the wrong place for its version is refused by the caller.
BlockFileHeader decode_block_header(const uint8_t* data, size_t size, uint64_t file_size, const std::string& source);
// Where the payload starts: 0 (version 2) or kBlockHeaderSize (version 1).
uint64_t block_payload_offset(const BlockFileHeader& header);

uint64_t payload_checksum(const void* data, size_t size);  // XXH3-64

}  // namespace kvlm
