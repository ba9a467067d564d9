// Manifest and block-file encodings. Manifest: "KVSM", u32 version, u64 body size, u64 XXH3-64 of the
// body, body. Block file: the payload, then a 64-byte header ("KVSB", version, namespace, hash, n_tokens,
// sizes, checksum); version 1 had the header first.
#include "session/session_format.h"

#include <xxhash.h>

#include <cstring>

#include "util/binary_io.h"
#include "util/error.h"

namespace kvlm {

namespace {

constexpr uint32_t kMaxTokens = 1u << 26;  // sanity cap on a transcript (64M tokens)

// How an encoding opens (4-byte magic, then u32 format version), with the words its errors use.
struct Opening {
    char magic[4];
    const char* magic_what;    // names the magic in truncation errors
    const char* kind;          // "not a kvlm <kind> (bad magic)"
    const char* version_what;  // "<version_what> 9 is not supported"
};
constexpr Opening kManifestOpening = {
    {'K', 'V', 'S', 'M'}, "manifest magic", "session manifest", "session format version"};
constexpr Opening kBlockOpening = {{'K', 'V', 'S', 'B'}, "block magic", "KV block file", "block format version"};

void write_hash(Writer& w, const BlockHash& h) {
    w.write_u64(h.lo);
    w.write_u64(h.hi);
}
BlockHash read_hash(Reader& r, const char* what) {
    BlockHash h;
    h.lo = r.read_u64(what);
    h.hi = r.read_u64(what);
    return h;
}

// Checks the magic and returns the format version, which must lie in [oldest, newest].
uint32_t read_opening(Reader& r, const Opening& opening, uint32_t oldest, uint32_t newest) {
    const uint8_t* magic = r.read_bytes(4, opening.magic_what);
    if (std::memcmp(magic, opening.magic, 4) != 0) r.fail(fmt::format("not a kvlm {} (bad magic)", opening.kind));
    uint32_t version = r.read_u32("format version");
    if (version < oldest || version > newest)
        throw_error("{}: {} {} is not supported (this kvlm reads version{} {})", r.source(), opening.version_what,
                    version, oldest == newest ? "" : "s",
                    oldest == newest ? std::to_string(newest) : fmt::format("{} to {}", oldest, newest));
    return version;
}

std::string float_text(float v) { return fmt::format("{}", v); }

}  // namespace

uint64_t payload_checksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

std::string model_text(const SessionIdentity& id) {
    return id.model_description.empty() ? fmt::format("fingerprint {}", id.model_fingerprint)
                                        : fmt::format("{}, fingerprint {}", id.model_description, id.model_fingerprint);
}

std::string identity_mismatch(const SessionIdentity& s, const SessionIdentity& r) {
    auto diff = [](const char* field, const std::string& a, const std::string& b, const char* flag = nullptr) {
        std::string text = fmt::format("{}: session has {}, this run has {}", field, a, b);
        if (flag) text += fmt::format(" (run with {} {} to continue it)", flag, a);
        return text;
    };
    if (s.model_fingerprint != r.model_fingerprint)
        return fmt::format("model: session was saved with {}; this run has {}", model_text(s), model_text(r));
    if (s.kv_dtype != r.kv_dtype) return diff("KV dtype", dtype_name(s.kv_dtype), dtype_name(r.kv_dtype), "--kv-dtype");
    if (s.n_layers != r.n_layers) return diff("KV layout n_layers", std::to_string(s.n_layers), std::to_string(r.n_layers));
    if (s.n_kv_heads != r.n_kv_heads)
        return diff("KV layout n_kv_heads", std::to_string(s.n_kv_heads), std::to_string(r.n_kv_heads));
    if (s.head_dim != r.head_dim) return diff("KV layout head_dim", std::to_string(s.head_dim), std::to_string(r.head_dim));
    if (s.block_size != r.block_size)
        return diff("block size", std::to_string(s.block_size), std::to_string(r.block_size), "--block-size");
    if (s.rope_theta != r.rope_theta) return diff("RoPE theta", float_text(s.rope_theta), float_text(r.rope_theta));
    const RopeScaling &a = s.rope_scaling, &b = r.rope_scaling;
    if (a.type != b.type) return diff("RoPE scaling type", a.type, b.type);
    if (a.factor != b.factor || a.low_freq_factor != b.low_freq_factor || a.high_freq_factor != b.high_freq_factor ||
        a.original_max_position != b.original_max_position)
        return diff("RoPE scaling", fmt::format("factor {} (low {}, high {}, original {})", a.factor, a.low_freq_factor,
                                                a.high_freq_factor, a.original_max_position),
                    fmt::format("factor {} (low {}, high {}, original {})", b.factor, b.low_freq_factor,
                                b.high_freq_factor, b.original_max_position));
    return "";
}

std::vector<uint8_t> encode_manifest(const SessionManifest& m) {
    BufferWriter body;
    const SessionIdentity& id = m.identity;
    body.write_string(m.session_name);
    body.write_string(id.model_fingerprint);
    body.write_string(id.model_description);
    body.write_u32(uint32_t(id.kv_dtype));
    body.write_i32(id.n_layers);
    body.write_i32(id.n_kv_heads);
    body.write_i32(id.head_dim);
    body.write_i32(id.block_size);
    body.write_f32(id.rope_theta);
    body.write_string(id.rope_scaling.type);
    body.write_f32(id.rope_scaling.factor);
    body.write_f32(id.rope_scaling.low_freq_factor);
    body.write_f32(id.rope_scaling.high_freq_factor);
    body.write_i32(id.rope_scaling.original_max_position);
    body.write_i32_array(m.tokens);
    body.write_i32(m.n_kv_tokens);
    body.write_u32(uint32_t(m.blocks.size()));
    for (const SessionBlockRef& b : m.blocks) {
        write_hash(body, b.hash);
        body.write_i32(b.n_tokens);
        body.write_u64(b.checksum);
    }
    body.write_i64(m.created_unix);
    body.write_i64(m.last_used_unix);
    body.write_bool(m.pinned);

    BufferWriter out;
    out.write_bytes(kManifestOpening.magic, 4);
    out.write_u32(kManifestVersion);
    out.write_u64(body.buffer().size());
    out.write_u64(XXH3_64bits(body.buffer().data(), body.buffer().size()));
    out.write_bytes(body.buffer().data(), body.buffer().size());
    return std::move(out.buffer());
}

SessionManifest decode_manifest(const uint8_t* data, size_t size, const std::string& source) {
    Reader header(data, size, source);
    SessionManifest m;
    m.format_version = read_opening(header, kManifestOpening, 1, kManifestVersion);
    uint64_t body_size = header.read_u64("body size");
    uint64_t checksum = header.read_u64("body checksum");
    if (body_size != header.remaining())
        throw_error("{}: manifest is truncated or has trailing bytes: body is {} bytes, header says {}", source,
                    header.remaining(), body_size);
    Reader r = header.sub_reader(body_size, "manifest body");
    if (XXH3_64bits(data + (size - body_size), body_size) != checksum)
        throw_error("{}: manifest checksum mismatch (the file is damaged)", source);

    SessionIdentity& id = m.identity;
    if (m.format_version >= 2) m.session_name = r.read_string("session name", 256);
    id.model_fingerprint = r.read_string("model fingerprint", 256);
    if (m.format_version >= 2) id.model_description = r.read_string("model description", 4096);
    uint32_t dtype = r.read_u32("KV dtype");
    if (!dtype_is_known(dtype) || !kv_dtype_is_supported(DType(dtype))) r.fail(fmt::format("unknown KV dtype {}", dtype));
    id.kv_dtype = DType(dtype);
    id.n_layers = r.read_i32("n_layers");
    id.n_kv_heads = r.read_i32("n_kv_heads");
    id.head_dim = r.read_i32("head_dim");
    id.block_size = r.read_i32("block size");
    id.rope_theta = r.read_f32("rope theta");
    id.rope_scaling.type = r.read_string("rope scaling type", 64);
    id.rope_scaling.factor = r.read_f32("rope scaling factor");
    id.rope_scaling.low_freq_factor = r.read_f32("rope low_freq_factor");
    id.rope_scaling.high_freq_factor = r.read_f32("rope high_freq_factor");
    id.rope_scaling.original_max_position = r.read_i32("rope original_max_position");
    m.tokens = r.read_i32_array("tokens");
    m.n_kv_tokens = r.read_i32("n_kv_tokens");
    uint32_t n_blocks = r.read_u32("block count");
    if (uint64_t(n_blocks) * 28 > r.remaining()) r.fail(fmt::format("block count {} exceeds the file", n_blocks));
    m.blocks.resize(n_blocks);
    for (SessionBlockRef& b : m.blocks) {
        b.hash = read_hash(r, "block hash");
        b.n_tokens = r.read_i32("block n_tokens");
        b.checksum = r.read_u64("block checksum");
    }
    m.created_unix = r.read_i64("created time");
    m.last_used_unix = r.read_i64("last-used time");
    m.pinned = r.read_bool("pinned flag");
    if (!r.at_end()) r.fail("unexpected bytes after the manifest body");

    // Structure: counts consistent with the block size.
    if (id.block_size < 1 || id.block_size > 4096) throw_error("{}: block size {} is invalid", source, id.block_size);
    if (id.n_layers < 1 || id.n_kv_heads < 1 || id.head_dim < 1)
        throw_error("{}: invalid KV layout ({} layers, {} KV heads, head_dim {})", source, id.n_layers, id.n_kv_heads,
                    id.head_dim);
    if (id.kv_dtype == DType::q8_0 && id.head_dim % kQuantBlock != 0)
        throw_error("{}: a q8_0 KV cache with head_dim {} (not a multiple of 32)", source, id.head_dim);
    if (m.tokens.size() > kMaxTokens) throw_error("{}: transcript of {} tokens is implausibly long", source, m.tokens.size());
    if (m.n_kv_tokens < 0 || size_t(m.n_kv_tokens) > m.tokens.size())
        throw_error("{}: {} tokens in KV, but the transcript has {}", source, m.n_kv_tokens, m.tokens.size());
    size_t want_blocks = (size_t(m.n_kv_tokens) + id.block_size - 1) / id.block_size;
    if (m.blocks.size() != want_blocks)
        throw_error("{}: {} blocks listed, {} tokens in KV need {}", source, m.blocks.size(), m.n_kv_tokens, want_blocks);
    for (size_t i = 0; i < m.blocks.size(); i++) {
        int32_t want = i + 1 < m.blocks.size() ? id.block_size : m.n_kv_tokens - int32_t(i) * id.block_size;
        if (m.blocks[i].n_tokens != want)
            throw_error("{}: block {} holds {} tokens, expected {}", source, i, m.blocks[i].n_tokens, want);
    }
    return m;
}

std::vector<uint8_t> encode_block_file(const BlockFileHeader& h, const void* payload) {
    KVLM_ASSERT(h.format_version >= kOldestBlockFormatVersion && h.format_version <= kSessionFormatVersion,
                "block format version");
    const bool header_first = h.format_version == 1;
    BufferWriter out;
    out.buffer().reserve(kBlockHeaderSize + h.payload_size);
    if (!header_first) out.write_bytes(payload, h.payload_size);
    out.write_bytes(kBlockOpening.magic, 4);
    out.write_u32(h.format_version);
    write_hash(out, h.kv_namespace);
    write_hash(out, h.hash);
    out.write_i32(h.n_tokens);
    out.write_u32(0);  // reserved
    out.write_u64(h.payload_size);
    out.write_u64(h.payload_checksum);
    KVLM_ASSERT(out.position() == (header_first ? 0 : h.payload_size) + kBlockHeaderSize, "block header size");
    if (header_first) out.write_bytes(payload, h.payload_size);
    return std::move(out.buffer());
}

BlockFileHeader decode_block_header(const uint8_t* data, size_t size, uint64_t file_size, const std::string& source) {
    Reader r(data, size, source);
    BlockFileHeader h;
    h.format_version = read_opening(r, kBlockOpening, kOldestBlockFormatVersion, kSessionFormatVersion);
    h.kv_namespace = read_hash(r, "kv namespace");
    h.hash = read_hash(r, "block hash");
    h.n_tokens = r.read_i32("n_tokens");
    r.read_u32("reserved");
    h.payload_size = r.read_u64("payload size");
    h.payload_checksum = r.read_u64("payload checksum");
    if (h.payload_size > file_size || file_size - h.payload_size != kBlockHeaderSize)
        throw_error("{}: file is {} bytes, header promises {} (truncated or damaged)", source, file_size,
                    kBlockHeaderSize + h.payload_size);
    return h;
}

uint64_t block_payload_offset(const BlockFileHeader& h) { return h.format_version == 1 ? kBlockHeaderSize : 0; }

BlockRecordShape block_record_shape(const SessionIdentity& identity) {
    BlockRecordShape shape;
    shape.n_slabs = size_t(identity.n_layers) * 2;
    shape.block_size = identity.block_size;
    shape.row_bytes = size_t(dtype_bytes(identity.kv_dtype, uint64_t(identity.n_kv_heads) * uint64_t(identity.head_dim)));
    return shape;
}

void pack_partial_record(const BlockRecordShape& shape, int32_t n_tokens, uint8_t* record) {
    const size_t slab = size_t(shape.block_size) * shape.row_bytes, kept = size_t(n_tokens) * shape.row_bytes;
    for (size_t s = 1; s < shape.n_slabs; s++) std::memmove(record + s * kept, record + s * slab, kept);
}

void unpack_partial_record(const BlockRecordShape& shape, int32_t n_tokens, uint8_t* record) {
    const size_t slab = size_t(shape.block_size) * shape.row_bytes, kept = size_t(n_tokens) * shape.row_bytes;
    // From the last slab down: each moves to an offset at or after its own, past every slab still to move.
    for (size_t s = shape.n_slabs; s-- > 0;) {
        std::memmove(record + s * slab, record + s * kept, kept);
        std::memset(record + s * slab + kept, 0, slab - kept);
    }
}

}  // namespace kvlm
