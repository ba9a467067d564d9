// GGUF v2/v3 reader. Metadata values are kept as (type, offset) into the mapping and decoded on demand;
// every read goes through a bounds-checked Cursor, so a malformed file throws instead of reading past the end.
#include "import/gguf.h"

#include <cstring>
#include <limits>
#include <map>

#include "format/dtype.h"
#include "format/tensor.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace kvlm {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
// Sanity limits checked before reserving: real files have a few thousand tensors and under a hundred keys.
constexpr uint64_t kMaxTensors = uint64_t(1) << 20;
constexpr uint64_t kMaxMetadataKeys = uint64_t(1) << 20;

struct TypeTraits {
    const char* name;
    uint32_t block_size;  // elements per block (0: unknown layout)
    uint32_t type_size;   // bytes per block
};

// ggml type ids -> name and block layout (ggml.c type_traits).
TypeTraits ggml_traits(uint32_t type) {
    switch (type) {
        case 0: return {"F32", 1, 4};
        case 1: return {"F16", 1, 2};
        case 2: return {"Q4_0", 32, 18};
        case 3: return {"Q4_1", 32, 20};
        case 6: return {"Q5_0", 32, 22};
        case 7: return {"Q5_1", 32, 24};
        case 8: return {"Q8_0", 32, 34};
        case 9: return {"Q8_1", 32, 36};
        case 10: return {"Q2_K", 256, 84};
        case 11: return {"Q3_K", 256, 110};
        case 12: return {"Q4_K", 256, 144};
        case 13: return {"Q5_K", 256, 176};
        case 14: return {"Q6_K", 256, 210};
        case 15: return {"Q8_K", 256, 292};
        case 16: return {"IQ2_XXS", 256, 66};
        case 17: return {"IQ2_XS", 256, 74};
        case 18: return {"IQ3_XXS", 256, 98};
        case 19: return {"IQ1_S", 256, 50};
        case 20: return {"IQ4_NL", 32, 18};
        case 21: return {"IQ3_S", 256, 110};
        case 22: return {"IQ2_S", 256, 82};
        case 23: return {"IQ4_XS", 256, 136};
        case 24: return {"I8", 1, 1};
        case 25: return {"I16", 1, 2};
        case 26: return {"I32", 1, 4};
        case 27: return {"I64", 1, 8};
        case 28: return {"F64", 1, 8};
        case 29: return {"IQ1_M", 256, 56};
        case 30: return {"BF16", 1, 2};
        case 34: return {"TQ1_0", 256, 54};
        case 35: return {"TQ2_0", 256, 66};
        default: return {nullptr, 0, 0};
    }
}

const char* value_type_name(uint32_t t) {
    static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
                                  "u64", "i64", "f64"};
    return t < 13 ? names[t] : "unknown";
}

// Fixed size of a scalar value type; 0 for string/array/unknown.
uint64_t scalar_size(uint32_t t) {
    switch (GgufType(t)) {
        case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
        case GgufType::u16: case GgufType::i16: return 2;
        case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
        case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
        default: return 0;
    }
}

bool is_integer_type(uint32_t t) {
    switch (GgufType(t)) {
        case GgufType::u8: case GgufType::i8: case GgufType::u16: case GgufType::i16: case GgufType::u32:
        case GgufType::i32: case GgufType::u64: case GgufType::i64: return true;
        default: return false;
    }
}

template <typename T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// A read position in the mapping; every read is checked against the file size.
class Cursor {
public:
    Cursor(const MappedFile& file, uint64_t pos) : file_(&file), pos_(pos) {}
    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return file_->size() - pos_; }

    const uint8_t* take(uint64_t n, const char* what) {
        if (!file_->contains(pos_, n))
            throw_error("{}: truncated GGUF file: {} needs {} bytes at offset {}, file has {} bytes", file_->path(),
                        what, n, pos_, file_->size());
        const uint8_t* p = file_->data() + pos_;
        pos_ += n;
        return p;
    }
    uint32_t u32(const char* what) { return load<uint32_t>(take(4, what)); }
    uint64_t u64(const char* what) { return load<uint64_t>(take(8, what)); }
    std::string string(const char* what) {
        uint64_t n = u64(what);
        const uint8_t* p = take(n, what);
        return std::string(reinterpret_cast<const char*>(p), size_t(n));
    }
    // Refuses a count of elements that could not possibly fit in the rest of the file.
    void check_count(uint64_t count, uint64_t min_element_size, const char* what) {
        if (min_element_size > 0 && count > remaining() / min_element_size)
            throw_error("{}: {} count {} at offset {} cannot fit in the remaining {} bytes of the file", file_->path(),
                        what, count, pos_, remaining());
    }

private:
    const MappedFile* file_;
    uint64_t pos_;
};

// Advances past one value of type t (recursing into nested arrays up to kMaxArrayDepth).
void skip_value(Cursor& c, uint32_t t, int depth, const std::string& path, const std::string& key) {
    if (uint64_t size = scalar_size(t)) {
        c.take(size, "metadata value");
        return;
    }
    if (GgufType(t) == GgufType::string) {
        c.string("metadata string");
        return;
    }
    if (GgufType(t) != GgufType::array)
        throw_error("{}: metadata key '{}' has unknown value type {} (expected 0..12)", path, key, t);
    if (depth >= kMaxArrayDepth)
        throw_error("{}: metadata key '{}' nests arrays deeper than {} levels", path, key, kMaxArrayDepth);
    uint32_t elem = c.u32("array element type");
    uint64_t count = c.u64("array length");
    if (uint64_t size = scalar_size(elem)) {
        c.check_count(count, size, "array");
        c.take(count * size, "array data");
        return;
    }
    if (GgufType(elem) != GgufType::string && GgufType(elem) != GgufType::array)
        throw_error("{}: metadata key '{}' is an array of unknown type {}", path, key, elem);
    c.check_count(count, GgufType(elem) == GgufType::string ? 8 : 12, "array");
    for (uint64_t i = 0; i < count; i++) skip_value(c, elem, depth + 1, path, key);
}

struct Value {
    uint32_t type = 0;
    uint64_t offset = 0;     // of the value (for arrays: of the first element)
    uint32_t elem_type = 0;  // arrays only
    uint64_t count = 0;      // arrays only
};

}  // namespace

int64_t GgufTensor::n_elements() const { return element_count(dims); }

struct GgufFile::Impl {
    std::unique_ptr<MappedFile> file;
    uint32_t version = 0;
    std::map<std::string, Value> values;
    std::vector<std::string> key_order;
    std::vector<GgufTensor> tensors;
    std::map<std::string, size_t> tensor_index;

    const std::string& path() const { return file->path(); }
    const Value& get(const std::string& key) const {
        auto it = values.find(key);
        if (it == values.end()) throw_error("{}: GGUF metadata key '{}' is missing", path(), key);
        return it->second;
    }
    [[noreturn]] void wrong_type(const std::string& key, const Value& v, const char* expected) const {
        std::string found = value_type_name(v.type);
        if (GgufType(v.type) == GgufType::array) found += fmt::format(" of {}", value_type_name(v.elem_type));
        throw_error("{}: GGUF metadata key '{}' is {}, expected {}", path(), key, found, expected);
    }
    // Reads an integer of type t at offset; false if it does not fit int64.
    bool read_int(uint32_t t, uint64_t offset, int64_t* out) const {
        const uint8_t* p = file->data() + offset;
        switch (GgufType(t)) {
            case GgufType::u8: *out = load<uint8_t>(p); return true;
            case GgufType::i8: *out = load<int8_t>(p); return true;
            case GgufType::u16: *out = load<uint16_t>(p); return true;
            case GgufType::i16: *out = load<int16_t>(p); return true;
            case GgufType::u32: *out = load<uint32_t>(p); return true;
            case GgufType::i32: *out = load<int32_t>(p); return true;
            case GgufType::i64: *out = load<int64_t>(p); return true;
            case GgufType::u64: {
                uint64_t v = load<uint64_t>(p);
                if (v > uint64_t(std::numeric_limits<int64_t>::max())) return false;
                *out = int64_t(v);
                return true;
            }
            default: return false;
        }
    }
    double read_number(uint32_t t, uint64_t offset) const {
        if (GgufType(t) == GgufType::f32) return load<float>(file->data() + offset);
        if (GgufType(t) == GgufType::f64) return load<double>(file->data() + offset);
        int64_t v = 0;
        if (!read_int(t, offset, &v)) return double(load<uint64_t>(file->data() + offset));
        return double(v);
    }
    void parse();
};

GgufFile::GgufFile() : impl_(std::make_unique<Impl>()) {}
GgufFile::~GgufFile() = default;

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
    std::unique_ptr<GgufFile> g(new GgufFile());
    g->impl_->file = std::make_unique<MappedFile>(path);
    g->impl_->parse();
    return g;
}

void GgufFile::Impl::parse() {
    const std::string& p = path();
    Cursor c(*file, 0);
    if (file->size() < 4 || load<uint32_t>(file->data()) != kGgufMagic)
        throw_error("{}: not a GGUF file (expected magic 'GGUF' at offset 0)", p);
    c.take(4, "magic");
    version = c.u32("version");
    if (version != 2 && version != 3)
        throw_error("{}: GGUF version {} is not supported (supported: 2, 3)", p, version);
    uint64_t n_tensors = c.u64("tensor count");
    uint64_t n_kv = c.u64("metadata count");
    if (n_tensors > kMaxTensors)
        throw_error("{}: GGUF tensor count {} is more than the limit of {} (file corrupted?)", p, n_tensors,
                    kMaxTensors);
    if (n_kv > kMaxMetadataKeys)
        throw_error("{}: GGUF metadata count {} is more than the limit of {} (file corrupted?)", p, n_kv,
                    kMaxMetadataKeys);
    // Minimum encoded sizes: key (8) + type (4) + value (1); tensor name (8) + n_dims (4) + type (4) + offset (8).
    c.check_count(n_kv, 13, "metadata");
    for (uint64_t i = 0; i < n_kv; i++) {
        std::string key = c.string("metadata key");
        Value v;
        v.type = c.u32("metadata value type");
        if (GgufType(v.type) == GgufType::array) {
            uint64_t start = c.pos();
            v.elem_type = c.u32("array element type");
            v.count = c.u64("array length");
            v.offset = c.pos();
            Cursor back(*file, start);
            skip_value(back, v.type, 0, p, key);
            c = back;
        } else {
            v.offset = c.pos();
            skip_value(c, v.type, 0, p, key);
        }
        if (!values.emplace(key, v).second) throw_error("{}: GGUF metadata key '{}' appears twice", p, key);
        key_order.push_back(key);
    }

    uint64_t alignment = 32;
    if (values.count("general.alignment")) {
        const Value& a = values.at("general.alignment");
        int64_t av = 0;
        if (!is_integer_type(a.type) || !read_int(a.type, a.offset, &av))
            throw_error("{}: general.alignment has type {}, expected an integer", p, value_type_name(a.type));
        if (av <= 0 || av > (1 << 24) || (av & (av - 1)) != 0)
            throw_error("{}: general.alignment = {} is not a power of two in 1..2^24", p, av);
        alignment = uint64_t(av);
    }

    c.check_count(n_tensors, 24, "tensor");
    tensors.reserve(size_t(n_tensors));
    for (uint64_t i = 0; i < n_tensors; i++) {
        GgufTensor t;
        t.name = c.string("tensor name");
        uint32_t n_dims = c.u32("tensor dimension count");
        if (n_dims == 0 || n_dims > kMaxDims)
            throw_error("{}: tensor '{}' has {} dimensions, expected 1..{}", p, t.name, n_dims, kMaxDims);
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne = c.u64("tensor dimension");
            if (ne == 0 || ne > (uint64_t(1) << 40))
                throw_error("{}: tensor '{}' dimension {} is {}, expected 1..2^40", p, t.name, d, ne);
            if (n_elements > (uint64_t(1) << 50) / ne)
                throw_error("{}: tensor '{}' has an absurd element count", p, t.name);
            n_elements *= ne;
            t.dims.push_back(int64_t(ne));
        }
        t.ggml_type = c.u32("tensor type");
        t.offset = c.u64("tensor offset");  // relative to the data section for now
        TypeTraits tr = ggml_traits(t.ggml_type);
        if (tr.block_size) {
            if (uint64_t(t.dims[0]) % tr.block_size != 0)
                throw_error("{}: tensor '{}' of type {} has ne0 = {}, expected a multiple of {}", p, t.name, tr.name,
                            t.dims[0], tr.block_size);
            t.n_bytes = n_elements / tr.block_size * tr.type_size;
        }
        if (!tensor_index.emplace(t.name, tensors.size()).second)
            throw_error("{}: tensor '{}' appears twice", p, t.name);
        tensors.push_back(std::move(t));
    }

    uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
    for (GgufTensor& t : tensors) {
        if (t.offset % alignment != 0)
            throw_error("{}: tensor '{}' offset {} is not a multiple of the alignment {}", p, t.name, t.offset,
                        alignment);
        if (t.offset > file->size() || data_start > file->size() - t.offset ||
            !file->contains(data_start + t.offset, t.n_bytes))
            throw_error("{}: tensor '{}' ({}, {} bytes at offset {}) extends past the end of the file ({} bytes): "
                        "truncated?",
                        p, t.name, ggml_type_name(t.ggml_type), t.n_bytes, data_start + t.offset, file->size());
        t.offset += data_start;
        // Only types with a known layout get a data pointer; the rest are refused by dequantize().
        t.data = ggml_traits(t.ggml_type).block_size ? file->data() + t.offset : nullptr;
    }
}

const std::string& GgufFile::path() const { return impl_->path(); }
uint32_t GgufFile::version() const { return impl_->version; }
bool GgufFile::has(const std::string& key) const { return impl_->values.count(key) != 0; }
std::vector<std::string> GgufFile::keys() const { return impl_->key_order; }

std::string GgufFile::get_string(const std::string& key) const {
    const Value& v = impl_->get(key);
    if (GgufType(v.type) != GgufType::string) impl_->wrong_type(key, v, "string");
    Cursor c(*impl_->file, v.offset);
    return c.string("metadata string");
}

int64_t GgufFile::get_int(const std::string& key) const {
    const Value& v = impl_->get(key);
    int64_t out = 0;
    if (!is_integer_type(v.type)) impl_->wrong_type(key, v, "an integer");
    if (!impl_->read_int(v.type, v.offset, &out))
        throw_error("{}: GGUF metadata key '{}' does not fit a signed 64-bit integer", path(), key);
    return out;
}

double GgufFile::get_float(const std::string& key) const {
    const Value& v = impl_->get(key);
    if (GgufType(v.type) != GgufType::f32 && GgufType(v.type) != GgufType::f64 && !is_integer_type(v.type))
        impl_->wrong_type(key, v, "a number");
    return impl_->read_number(v.type, v.offset);
}

bool GgufFile::get_bool(const std::string& key) const {
    const Value& v = impl_->get(key);
    if (GgufType(v.type) != GgufType::boolean) impl_->wrong_type(key, v, "bool");
    return impl_->file->data()[v.offset] != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
    const Value& v = impl_->get(key);
    if (GgufType(v.type) != GgufType::array || GgufType(v.elem_type) != GgufType::string)
        impl_->wrong_type(key, v, "array of string");
    Cursor c(*impl_->file, v.offset);
    std::vector<std::string> out;
    out.reserve(size_t(v.count));  // count was checked against the file size while parsing
    for (uint64_t i = 0; i < v.count; i++) out.push_back(c.string("metadata string"));
    return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
    const Value& v = impl_->get(key);
    uint64_t size = scalar_size(v.elem_type);
    if (GgufType(v.type) != GgufType::array || size == 0 || GgufType(v.elem_type) == GgufType::boolean)
        impl_->wrong_type(key, v, "array of numbers");
    std::vector<float> out(size_t(v.count));
    for (uint64_t i = 0; i < v.count; i++) out[i] = float(impl_->read_number(v.elem_type, v.offset + i * size));
    return out;
}

std::vector<int32_t> GgufFile::get_int_array(const std::string& key) const {
    const Value& v = impl_->get(key);
    if (GgufType(v.type) != GgufType::array || !is_integer_type(v.elem_type))
        impl_->wrong_type(key, v, "array of integers");
    uint64_t size = scalar_size(v.elem_type);
    std::vector<int32_t> out(size_t(v.count));
    for (uint64_t i = 0; i < v.count; i++) {
        int64_t x = 0;
        if (!impl_->read_int(v.elem_type, v.offset + i * size, &x) || x < std::numeric_limits<int32_t>::min() ||
            x > std::numeric_limits<int32_t>::max())
            throw_error("{}: GGUF metadata key '{}' element {} does not fit a 32-bit integer", path(), key, i);
        out[i] = int32_t(x);
    }
    return out;
}

std::string GgufFile::get_string_or(const std::string& key, const std::string& fallback) const {
    return has(key) ? get_string(key) : fallback;
}
int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
    return has(key) ? get_int(key) : fallback;
}
double GgufFile::get_float_or(const std::string& key, double fallback) const {
    return has(key) ? get_float(key) : fallback;
}
bool GgufFile::get_bool_or(const std::string& key, bool fallback) const { return has(key) ? get_bool(key) : fallback; }

const std::vector<GgufTensor>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
    auto it = impl_->tensor_index.find(name);
    return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const char* GgufFile::ggml_type_name(uint32_t ggml_type) {
    const char* name = ggml_traits(ggml_type).name;
    return name ? name : "unknown";
}

std::optional<DType> kvlm_dtype_of_ggml_type(uint32_t ggml_type) {
    switch (ggml_type) {
        case 0: return DType::f32;
        case 1: return DType::f16;
        case 2: return DType::q4_0;
        case 3: return DType::q4_1;
        case 6: return DType::q5_0;
        case 7: return DType::q5_1;
        case 8: return DType::q8_0;
        case 10: return DType::q2_k;
        case 11: return DType::q3_k;
        case 12: return DType::q4_k;
        case 13: return DType::q5_k;
        case 14: return DType::q6_k;
        case 20: return DType::iq4_nl;
        case 23: return DType::iq4_xs;
        case 30: return DType::bf16;
        default: return std::nullopt;
    }
}

void GgufFile::dequantize(const GgufTensor& t, float* out) const {
    std::optional<DType> dtype = kvlm_dtype_of_ggml_type(t.ggml_type);
    if (!dtype || !t.data)
        throw_error("{}: tensor '{}' has type {} (ggml type {}), which kvlm cannot import (supported: {})", path(),
                    t.name, ggml_type_name(t.ggml_type), t.ggml_type, kSupportedGgmlTypes);
    // The layouts are the same (format/dtype.h), and convert_to_f32 reads unaligned sources.
    convert_to_f32(*dtype, t.data, out, size_t(t.n_elements()));
}

}  // namespace kvlm
