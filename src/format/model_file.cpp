// The .kvlm encoding shared by writer and reader: header, metadata records, tensor directory, the
// fingerprint, and the canonical tensor set of a config. Decoders never trust a length they have not
// checked against the bytes present.
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#include "format/model_file_format.h"
#include "util/error.h"

namespace kvlm {

std::vector<TensorInfo> expected_tensors(const ModelConfig& config, DType dtype) {
    std::vector<TensorInfo> tensors;
    auto add = [&](std::string name, std::vector<int64_t> shape) {
        TensorInfo info;
        info.name = std::move(name);
        info.dtype = shape.size() == 1 ? DType::f32 : dtype;
        if (shape.back() % dtype_block_elements(info.dtype) != 0) info.dtype = DType::f16;
        info.shape = std::move(shape);
        info.n_bytes = dtype_bytes(info.dtype, uint64_t(element_count(info.shape)));
        tensors.push_back(std::move(info));
    };
    const int64_t embd = config.n_embd, q = int64_t(config.n_heads) * config.head_dim;
    const int64_t kv = int64_t(config.n_kv_heads) * config.head_dim, ff = config.n_ff;
    add(tensor_names::token_embd, {config.n_vocab, embd});
    for (int i = 0; i < config.n_layers; i++) {
        auto name = [i](const char* suffix) { return tensor_names::layer(i, suffix); };
        add(name("attn_norm.weight"), {embd});
        add(name("attn_q.weight"), {q, embd});
        add(name("attn_k.weight"), {kv, embd});
        add(name("attn_v.weight"), {kv, embd});
        if (config.qkv_bias) {
            add(name("attn_q.bias"), {q});
            add(name("attn_k.bias"), {kv});
            add(name("attn_v.bias"), {kv});
        }
        add(name("attn_output.weight"), {embd, q});
        add(name("ffn_norm.weight"), {embd});
        add(name("ffn_gate.weight"), {ff, embd});
        add(name("ffn_up.weight"), {ff, embd});
        add(name("ffn_down.weight"), {embd, ff});
    }
    add(tensor_names::output_norm, {embd});
    if (!config.tied_embeddings) add(tensor_names::output, {config.n_vocab, embd});
    return tensors;
}

std::string tensor_type_counts(const std::vector<TensorInfo>& tensors) {
    std::vector<std::pair<DType, int>> counts;
    for (const TensorInfo& t : tensors) {
        auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == t.dtype; });
        if (it == counts.end()) counts.push_back({t.dtype, 1});
        else it->second++;
    }
    std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string text;
    for (const auto& [dtype, count] : counts) text += fmt::format("{}{} {}", text.empty() ? "" : ", ", dtype_name(dtype), count);
    return text;
}

namespace model_format {

static const char kMagic[4] = {'K', 'V', 'L', 'M'};

void write_header(Writer& out, const Header& h) {
    uint64_t start = out.position();
    out.write_bytes(kMagic, 4);
    out.write_u32(h.version);
    out.write_u32(h.flags);
    out.write_u32(h.header_size);
    for (uint64_t v : {h.metadata_offset, h.metadata_size, h.directory_offset, h.directory_size, h.n_tensors,
                       h.data_offset, h.data_size, h.metadata_checksum, h.directory_checksum, h.fingerprint_high,
                       h.fingerprint_low})
        out.write_u64(v);
    out.write_zeros(kHeaderSize - (out.position() - start));
}

Header read_header(const uint8_t* data, size_t file_size, const std::string& path) {
    if (file_size < 4 || std::memcmp(data, kMagic, 4) != 0) {
        std::string found;
        for (size_t i = 0; i < 4 && i < file_size; i++)
            found += (data[i] >= 32 && data[i] < 127) ? std::string(1, char(data[i])) : fmt::format("\\x{:02x}", data[i]);
        throw_error("{}: not a kvlm model file (bad magic \"{}\", expected \"KVLM\"); convert it with `kvlm convert`",
                    path, found);
    }
    Reader in(data, file_size < kHeaderSize ? file_size : kHeaderSize, path);
    in.skip(4, "magic");
    Header h;
    h.version = in.read_u32("format version");
    if (h.version != kModelFormatVersion)
        throw_error("{}: format version {} is not supported (this kvlm reads version {}); re-convert the model", path,
                    h.version, kModelFormatVersion);
    if (file_size < kHeaderSize)
        throw_error("{}: file is truncated: {} bytes, but the header alone is {} bytes", path, file_size, kHeaderSize);
    h.flags = in.read_u32("flags");
    h.header_size = in.read_u32("header size");
    if (h.header_size != kHeaderSize)
        throw_error("{}: header size is {}, expected {} for format version 1 (file corrupted?)", path, h.header_size,
                    kHeaderSize);
    if (h.flags != 0)
        throw_error("{}: header flags 0x{:x} name features this kvlm does not know (expected 0)", path, h.flags);
    h.metadata_offset = in.read_u64("metadata offset");
    h.metadata_size = in.read_u64("metadata size");
    h.directory_offset = in.read_u64("directory offset");
    h.directory_size = in.read_u64("directory size");
    h.n_tensors = in.read_u64("tensor count");
    h.data_offset = in.read_u64("data offset");
    h.data_size = in.read_u64("data size");
    h.metadata_checksum = in.read_u64("metadata checksum");
    h.directory_checksum = in.read_u64("directory checksum");
    h.fingerprint_high = in.read_u64("fingerprint");
    h.fingerprint_low = in.read_u64("fingerprint");
    return h;
}

// ---- metadata ----

static void write_record(Writer& out, const std::string& key, ValueType type, const BufferWriter& value) {
    out.write_string(key);
    out.write_u32(uint32_t(type));
    out.write_u64(value.buffer().size());
    out.write_bytes(value.buffer().data(), value.buffer().size());
}

void write_metadata(Writer& out, const ModelMetadata& m) {
    struct Record {
        std::string key;
        ValueType type;
        BufferWriter value;
    };
    std::vector<Record> records;
    auto add = [&](std::string key, ValueType type) -> Writer& {
        records.push_back({key, type, {}});
        return records.back().value;
    };
    auto add_string = [&](const char* key, const std::string& s) {
        add(key, ValueType::string).write_bytes(s.data(), s.size());  // value size is the length
    };
    const ModelConfig& c = m.config;
    const TokenizerData& t = m.tokenizer;
    add_string("arch", c.architecture);
    add("n_vocab", ValueType::i32).write_i32(c.n_vocab);
    add("n_embd", ValueType::i32).write_i32(c.n_embd);
    add("n_layers", ValueType::i32).write_i32(c.n_layers);
    add("n_heads", ValueType::i32).write_i32(c.n_heads);
    add("n_kv_heads", ValueType::i32).write_i32(c.n_kv_heads);
    add("head_dim", ValueType::i32).write_i32(c.head_dim);
    add("n_ff", ValueType::i32).write_i32(c.n_ff);
    add("n_ctx", ValueType::i32).write_i32(c.n_ctx);
    add("rope.theta", ValueType::f32).write_f32(c.rope_theta);
    add_string("rope.scaling.type", c.rope_scaling.type);
    add("rope.scaling.factor", ValueType::f32).write_f32(c.rope_scaling.factor);
    add("rope.scaling.low_freq_factor", ValueType::f32).write_f32(c.rope_scaling.low_freq_factor);
    add("rope.scaling.high_freq_factor", ValueType::f32).write_f32(c.rope_scaling.high_freq_factor);
    add("rope.scaling.original_max_position", ValueType::i32).write_i32(c.rope_scaling.original_max_position);
    add("norm_eps", ValueType::f32).write_f32(c.norm_eps);
    add("tied_embeddings", ValueType::boolean).write_bool(c.tied_embeddings);
    add("qkv_bias", ValueType::boolean).write_bool(c.qkv_bias);
    add_string("tokenizer.type", t.type);
    add_string("tokenizer.pre", t.pre);
    add("tokenizer.tokens", ValueType::string_array).write_string_array(t.tokens);
    add("tokenizer.scores", ValueType::f32_array).write_f32_array(t.scores);
    add("tokenizer.token_types", ValueType::i32_array).write_i32_array(t.token_types);
    add("tokenizer.merges", ValueType::string_array).write_string_array(t.merges);
    add("tokenizer.merge_ids", ValueType::i32_array).write_i32_array(t.merge_ids);
    add("tokenizer.bos_id", ValueType::i32).write_i32(t.bos_id);
    add("tokenizer.eos_id", ValueType::i32).write_i32(t.eos_id);
    add("tokenizer.unk_id", ValueType::i32).write_i32(t.unk_id);
    add("tokenizer.pad_id", ValueType::i32).write_i32(t.pad_id);
    add("tokenizer.stop_ids", ValueType::i32_array).write_i32_array(t.stop_ids);
    add("tokenizer.add_bos", ValueType::boolean).write_bool(t.add_bos);
    add("tokenizer.add_space_prefix", ValueType::boolean).write_bool(t.add_space_prefix);
    add_string("chat_template", m.chat_template);
    add_string("source", m.source);
    // Only the settings the source gave: an unset one falls through to kvlm's default at run time.
    for_each_sampling_field([&](const char* name, auto member) {
        const auto& value = m.sampling.*member;
        if (!value) return;
        const std::string key = std::string("sampling.") + name;
        if constexpr (std::is_same_v<std::decay_t<decltype(*value)>, float>)
            add(key, ValueType::f32).write_f32(*value);
        else
            add(key, ValueType::i32).write_i32(*value);
    });

    out.write_u32(uint32_t(records.size()));
    for (const Record& r : records) write_record(out, r.key, r.type, r.value);
}

static const char* value_type_name(uint32_t type) {
    switch (ValueType(type)) {
        case ValueType::u32: return "u32";
        case ValueType::i32: return "i32";
        case ValueType::f32: return "f32";
        case ValueType::boolean: return "bool";
        case ValueType::string: return "string";
        case ValueType::string_array: return "string array";
        case ValueType::f32_array: return "f32 array";
        case ValueType::i32_array: return "i32 array";
    }
    return "unknown";
}

namespace {
// The raw records of a metadata section, decoded on demand by typed getters.
class Records {
public:
    Records(Reader& in, const std::string& path) : path_(path) {
        uint32_t n_records = in.read_u32("metadata record count");
        // A record takes at least 16 bytes (key length, type, value size), so check before looping.
        if (uint64_t(n_records) * 16 > in.remaining())
            in.fail(fmt::format("metadata claims {} records, but only {} bytes follow", n_records, in.remaining()));
        for (uint32_t i = 0; i < n_records; i++) {
            std::string key = in.read_string("metadata key", kMaxNameLength);
            uint32_t type = in.read_u32("metadata value type");
            uint64_t size = in.read_u64("metadata value size");
            Reader value = in.sub_reader(size, "metadata value");
            if (!records_.emplace(key, std::make_pair(type, value)).second)
                in.fail(fmt::format("metadata key '{}' appears twice", key));
        }
        if (!in.at_end()) in.fail(fmt::format("{} unexpected bytes after the last metadata record", in.remaining()));
    }

    // The value reader of `key` if present (type-checked), else nullptr; required keys throw when absent.
    Reader* get(const char* key, ValueType type, bool required) {
        auto it = records_.find(key);
        if (it == records_.end()) {
            if (required) throw_error("{}: required metadata key '{}' is missing", path_, key);
            return nullptr;
        }
        if (it->second.first != uint32_t(type))
            throw_error("{}: metadata key '{}' has type {} ({}), expected {}", path_, key,
                        value_type_name(it->second.first), it->second.first, value_type_name(uint32_t(type)));
        return &it->second.second;
    }

    void read(const char* key, int32_t* out, bool required = true) {
        if (Reader* r = get(key, ValueType::i32, required)) *out = finish(*r, key, r->read_i32(key));
    }
    void read(const char* key, float* out, bool required = true) {
        if (Reader* r = get(key, ValueType::f32, required)) *out = finish(*r, key, r->read_f32(key));
    }
    void read(const char* key, bool* out, bool required = true) {
        if (Reader* r = get(key, ValueType::boolean, required)) *out = finish(*r, key, r->read_bool(key));
    }
    void read(const char* key, std::string* out, bool required = true) {
        if (Reader* r = get(key, ValueType::string, required)) {
            size_t n = r->remaining();
            const uint8_t* p = r->read_bytes(n, key);
            *out = std::string(reinterpret_cast<const char*>(p), n);
        }
    }
    template <typename T>
    void read_optional(const char* key, std::optional<T>* out) {
        T value{};
        if (records_.count(key)) {
            read(key, &value);
            *out = value;
        }
    }
    void read(const char* key, std::vector<std::string>* out, bool required = true) {
        if (Reader* r = get(key, ValueType::string_array, required))
            *out = finish(*r, key, check_count(*r, key).read_string_array(key));
    }
    void read(const char* key, std::vector<float>* out, bool required = true) {
        if (Reader* r = get(key, ValueType::f32_array, required))
            *out = finish(*r, key, check_count(*r, key).read_f32_array(key));
    }
    void read(const char* key, std::vector<int32_t>* out, bool required = true) {
        if (Reader* r = get(key, ValueType::i32_array, required))
            *out = finish(*r, key, check_count(*r, key).read_i32_array(key));
    }

private:
    // An array's count, peeked before decoding it: a string array of n empty strings takes 4n bytes on disk
    // but 32n in memory, so a count that fits the file can still be absurd.
    static Reader& check_count(Reader& r, const char* key) {
        Reader peek = r;
        uint32_t count = peek.read_u32(key);
        if (count > kMaxArrayElements)
            r.fail(fmt::format("metadata key '{}' has {} elements, more than the limit of {}", key, count,
                               kMaxArrayElements));
        return r;
    }
    template <typename T>
    T finish(Reader& r, const char* key, T value) {
        if (!r.at_end()) r.fail(fmt::format("metadata value of '{}' has {} extra bytes", key, r.remaining()));
        return value;
    }
    std::string path_;
    std::map<std::string, std::pair<uint32_t, Reader>> records_;
};
}  // namespace

ModelMetadata read_metadata(Reader& in, const std::string& path) {
    Records records(in, path);
    ModelMetadata m;
    ModelConfig& c = m.config;
    TokenizerData& t = m.tokenizer;
    records.read("arch", &c.architecture);
    records.read("n_vocab", &c.n_vocab);
    records.read("n_embd", &c.n_embd);
    records.read("n_layers", &c.n_layers);
    records.read("n_heads", &c.n_heads);
    records.read("n_kv_heads", &c.n_kv_heads);
    records.read("head_dim", &c.head_dim);
    records.read("n_ff", &c.n_ff);
    records.read("n_ctx", &c.n_ctx);
    records.read("rope.theta", &c.rope_theta);
    records.read("rope.scaling.type", &c.rope_scaling.type, false);
    records.read("rope.scaling.factor", &c.rope_scaling.factor, false);
    records.read("rope.scaling.low_freq_factor", &c.rope_scaling.low_freq_factor, false);
    records.read("rope.scaling.high_freq_factor", &c.rope_scaling.high_freq_factor, false);
    records.read("rope.scaling.original_max_position", &c.rope_scaling.original_max_position, false);
    records.read("norm_eps", &c.norm_eps);
    records.read("tied_embeddings", &c.tied_embeddings);
    records.read("qkv_bias", &c.qkv_bias);
    records.read("tokenizer.type", &t.type);
    records.read("tokenizer.pre", &t.pre, false);
    records.read("tokenizer.tokens", &t.tokens);
    records.read("tokenizer.scores", &t.scores, false);
    records.read("tokenizer.token_types", &t.token_types);
    records.read("tokenizer.merges", &t.merges, false);
    records.read("tokenizer.merge_ids", &t.merge_ids, false);
    records.read("tokenizer.bos_id", &t.bos_id, false);
    records.read("tokenizer.eos_id", &t.eos_id, false);
    records.read("tokenizer.unk_id", &t.unk_id, false);
    records.read("tokenizer.pad_id", &t.pad_id, false);
    records.read("tokenizer.stop_ids", &t.stop_ids, false);
    records.read("tokenizer.add_bos", &t.add_bos, false);
    records.read("tokenizer.add_space_prefix", &t.add_space_prefix, false);
    records.read("chat_template", &m.chat_template, false);
    records.read("source", &m.source, false);
    for_each_sampling_field([&](const char* name, auto member) {
        records.read_optional((std::string("sampling.") + name).c_str(), &(m.sampling.*member));
    });
    return m;
}

void validate_metadata(const ModelMetadata& m, const std::string& path) {
    m.config.validate(path);
    check_sampling_settings(m.sampling, path + ": sampling defaults");
    const TokenizerData& t = m.tokenizer;
    const size_t n_vocab = size_t(m.config.n_vocab);
    if (t.type != "spm" && t.type != "bpe")
        throw_error("{}: tokenizer type '{}' is not supported (expected spm or bpe)", path, t.type);
    if (t.tokens.size() != n_vocab)
        throw_error("{}: tokenizer has {} tokens, expected n_vocab = {}", path, t.tokens.size(), n_vocab);
    if (t.token_types.size() != n_vocab)
        throw_error("{}: tokenizer has {} token types, expected n_vocab = {}", path, t.token_types.size(), n_vocab);
    if (t.scores.size() != n_vocab && !(t.type == "bpe" && t.scores.empty()))
        throw_error("{}: tokenizer has {} scores, expected n_vocab = {}{}", path, t.scores.size(), n_vocab,
                    t.type == "bpe" ? " or none" : "");
    for (size_t i = 0; i < t.token_types.size(); i++)
        if (t.token_types[i] < 0 || t.token_types[i] > int32_t(TokenType::byte))
            throw_error("{}: token {} has type {}, expected 0..6", path, i, t.token_types[i]);
    auto check_id = [&](const char* name, int32_t id) {
        if (id < -1 || id >= int32_t(n_vocab))
            throw_error("{}: tokenizer {} = {} is out of range (expected -1 or 0..{})", path, name, id, n_vocab - 1);
    };
    check_id("bos_id", t.bos_id);
    check_id("eos_id", t.eos_id);
    check_id("unk_id", t.unk_id);
    check_id("pad_id", t.pad_id);
    for (int32_t id : t.stop_ids)
        if (id < 0 || id >= int32_t(n_vocab))
            throw_error("{}: tokenizer stop id {} is out of range (expected 0..{})", path, id, n_vocab - 1);
}

// ---- tensor directory ----

uint64_t tensor_n_bytes(DType dtype, const std::vector<int64_t>& shape, const std::string& what) {
    if (shape.empty() || shape.size() > kMaxDims)
        throw_error("{}: has {} dimensions, expected 1..{}", what, shape.size(), kMaxDims);
    constexpr uint64_t kMaxElements = uint64_t(1) << 44;
    uint64_t n = 1;
    for (int64_t d : shape) {
        if (d < 1 || d > (int64_t(1) << 40)) throw_error("{}: has shape {}, a dimension is out of range", what, shape_string(shape));
        if (uint64_t(d) > kMaxElements / n)  // checked before multiplying: [2^40, 2^40] must not wrap to 0
            throw_error("{}: has shape {}, which is absurdly large", what, shape_string(shape));
        n *= uint64_t(d);
    }
    const int64_t block = dtype_block_elements(dtype);
    if (shape.back() % block != 0)
        throw_error("{}: has shape {} in {}, whose rows are not whole {}-element blocks", what, shape_string(shape),
                    dtype_name(dtype), block);
    return dtype_bytes(dtype, n);
}

void write_directory(Writer& out, const std::vector<TensorInfo>& tensors) {
    for (const TensorInfo& t : tensors) {
        out.write_string(t.name);
        out.write_u32(uint32_t(t.dtype));
        out.write_u32(uint32_t(t.shape.size()));
        for (int64_t d : t.shape) out.write_i64(d);
        out.write_u64(t.offset);
        out.write_u64(t.n_bytes);
        out.write_u64(t.checksum);
    }
}

std::vector<TensorInfo> read_directory(Reader& in, uint64_t n_tensors, const std::string& path) {
    if (n_tensors > kMaxTensors || n_tensors * kMinDirectoryEntryBytes > in.remaining())
        throw_error("{}: header claims {} tensors, which cannot fit in a {}-byte directory (file corrupted?)", path,
                    n_tensors, in.remaining());
    std::vector<TensorInfo> tensors(n_tensors);
    for (TensorInfo& t : tensors) {
        t.name = in.read_string("tensor name", kMaxNameLength);
        uint64_t entry_offset = in.offset();
        uint32_t raw_dtype = in.read_u32("tensor dtype");
        if (!dtype_is_known(raw_dtype))
            throw_error("{}: tensor {} has unknown dtype {} at offset {} (this kvlm reads f32=0, f16=1, bf16=2, "
                        "q8_0=3, q4_0=4, q4_1=5; a newer kvlm may be needed)", path, t.name, raw_dtype, entry_offset);
        t.dtype = DType(raw_dtype);
        uint32_t n_dims = in.read_u32("tensor dimension count");
        if (n_dims < 1 || n_dims > kMaxDims)
            throw_error("{}: tensor {} has {} dimensions, expected 1..{}", path, t.name, n_dims, kMaxDims);
        t.shape.resize(n_dims);
        for (int64_t& d : t.shape) d = in.read_i64("tensor dimension");
        t.offset = in.read_u64("tensor offset");
        t.n_bytes = in.read_u64("tensor size");
        t.checksum = in.read_u64("tensor checksum");
        uint64_t want = tensor_n_bytes(t.dtype, t.shape, fmt::format("{}: tensor {}", path, t.name));
        if (t.n_bytes != want)
            throw_error("{}: tensor {} has {} bytes, expected {} for {} {}", path, t.name, t.n_bytes, want,
                        dtype_name(t.dtype), shape_string(t.shape));
    }
    if (!in.at_end()) in.fail(fmt::format("{} unexpected bytes after the last directory entry", in.remaining()));
    return tensors;
}

// ---- fingerprint ----

namespace {
// Feeds everything written into an XXH3-128 state, gathered into chunks first: a vocabulary is hundreds of
// thousands of tiny writes, and one update call each was most of a model's open time. The digest does not
// depend on how the input is chunked.
class HashWriter : public Writer {
public:
    HashWriter() : state_(XXH3_createState()) {
        KVLM_ASSERT(state_ != nullptr, "out of memory");
        XXH3_128bits_reset(state_);
    }
    ~HashWriter() override { XXH3_freeState(state_); }
    void write_bytes(const void* data, size_t n_bytes) override {
        if (n_pending_ + n_bytes > kChunk) flush();
        if (n_bytes >= kChunk) {
            XXH3_128bits_update(state_, data, n_bytes);
        } else {
            std::memcpy(pending_.get() + n_pending_, data, n_bytes);
            n_pending_ += n_bytes;
        }
        position_ += n_bytes;
    }
    XXH128_hash_t digest() {
        flush();
        return XXH3_128bits_digest(state_);
    }

private:
    static constexpr size_t kChunk = 64 * 1024;
    void flush() {
        XXH3_128bits_update(state_, pending_.get(), n_pending_);
        n_pending_ = 0;
    }
    XXH3_state_t* state_;
    std::unique_ptr<char[]> pending_{new char[kChunk]};
    size_t n_pending_ = 0;
};
}  // namespace

std::string fingerprint_hex(uint64_t high, uint64_t low) { return fmt::format("{:016x}{:016x}", high, low); }

std::string compute_fingerprint(const ModelMetadata& m, const std::vector<TensorInfo>& tensors, uint64_t* high,
                                uint64_t* low) {
    HashWriter h;
    const ModelConfig& c = m.config;
    const TokenizerData& t = m.tokenizer;
    h.write_string("kvlm fingerprint v1");
    h.write_string(c.architecture);
    for (int32_t v : {c.n_vocab, c.n_embd, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.n_ctx})
        h.write_i32(v);
    h.write_f32(c.rope_theta);
    h.write_string(c.rope_scaling.type);
    for (float v : {c.rope_scaling.factor, c.rope_scaling.low_freq_factor, c.rope_scaling.high_freq_factor}) h.write_f32(v);
    h.write_i32(c.rope_scaling.original_max_position);
    h.write_f32(c.norm_eps);
    h.write_bool(c.tied_embeddings);
    h.write_bool(c.qkv_bias);
    h.write_string(t.type);
    h.write_string(t.pre);
    h.write_string_array(t.tokens);
    h.write_f32_array(t.scores);
    h.write_i32_array(t.token_types);
    h.write_string_array(t.merges);
    for (int32_t v : {t.bos_id, t.eos_id, t.unk_id, t.pad_id}) h.write_i32(v);
    h.write_i32_array(t.stop_ids);
    h.write_bool(t.add_bos);
    h.write_bool(t.add_space_prefix);
    h.write_u64(tensors.size());
    for (const TensorInfo& info : tensors) {
        h.write_string(info.name);
        h.write_u32(uint32_t(info.dtype));
        h.write_u32(uint32_t(info.shape.size()));
        for (int64_t d : info.shape) h.write_i64(d);
        h.write_u64(info.checksum);
    }
    XXH128_hash_t digest = h.digest();
    *high = digest.high64;
    *low = digest.low64;
    return fingerprint_hex(digest.high64, digest.low64);
}

}  // namespace model_format
}  // namespace kvlm
