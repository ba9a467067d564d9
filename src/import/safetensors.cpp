// safetensors parsing: 8-byte little-endian header length, JSON header, then the data section. Offsets in the
// header are relative to the data section; each tensor must fit [begin, end) inside it with end - begin = bytes.
#include "import/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "format/tensor.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/mapped_file.h"

namespace kvlm {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Element size of safetensors dtypes (0 = unknown: offsets are still range-checked).
uint64_t element_size(const std::string& dtype) {
    if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
    if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
    if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
    if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
    return 0;
}

bool supported_dtype(const std::string& name, DType* out) {
    if (name == "F32") *out = DType::f32;
    else if (name == "F16") *out = DType::f16;
    else if (name == "BF16") *out = DType::bf16;
    else return false;
    return true;
}

}  // namespace

int64_t SafetensorsTensor::n_elements() const { return element_count(shape); }

struct SafetensorsFile::Impl {
    std::unique_ptr<MappedFile> file;
    std::vector<SafetensorsTensor> tensors;
    std::map<std::string, size_t> index;
};

SafetensorsFile::SafetensorsFile() : impl_(std::make_unique<Impl>()) {}
SafetensorsFile::~SafetensorsFile() = default;
const std::string& SafetensorsFile::path() const { return impl_->file->path(); }
const std::vector<SafetensorsTensor>& SafetensorsFile::tensors() const { return impl_->tensors; }

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
    auto it = impl_->index.find(name);
    return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    std::unique_ptr<SafetensorsFile> st(new SafetensorsFile());
    Impl& s = *st->impl_;
    s.file = std::make_unique<MappedFile>(path);
    const MappedFile& f = *s.file;
    if (f.size() < 8) throw_error("{}: file is {} bytes, too short for a safetensors header (8 bytes)", path, f.size());
    uint64_t header_len;
    std::memcpy(&header_len, f.data(), 8);
    if (header_len > f.size() - 8)
        throw_error("{}: safetensors header length {} extends past the end of the file ({} bytes)", path, header_len,
                    f.size());
    if (header_len > kMaxHeaderBytes)
        throw_error("{}: safetensors header length {} exceeds the {} byte limit", path, header_len, kMaxHeaderBytes);
    const uint64_t data_start = 8 + header_len, data_size = f.size() - data_start;

    json header;
    try {
        header = json::parse(f.data() + 8, f.data() + data_start);
    } catch (const json::exception& e) {
        throw_error("{}: safetensors header is not valid JSON: {}", path, e.what());
    }
    if (!header.is_object()) throw_error("{}: safetensors header is not a JSON object", path);

    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const json& v = it.value();
        SafetensorsTensor t;
        t.name = it.key();
        t.path = path;
        if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
            !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
            v["data_offsets"].size() != 2)
            throw_error("{}: tensor '{}' header entry must have dtype, shape and data_offsets [begin, end]", path,
                        t.name);
        t.dtype_name = v["dtype"].get<std::string>();
        uint64_t n_elements = 1;
        for (const json& d : v["shape"]) {
            if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40))
                throw_error("{}: tensor '{}' has invalid shape: element {} is {}, expected an integer 0..2^40", path,
                            t.name, t.shape.size(), json_excerpt(d));
            uint64_t dim = d.get<uint64_t>();
            if (dim != 0 && n_elements > (uint64_t(1) << 50) / dim)
                throw_error("{}: tensor '{}' has an absurd element count", path, t.name);
            n_elements *= dim;
            t.shape.push_back(int64_t(dim));
        }
        const json& offs = v["data_offsets"];
        if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
            throw_error("{}: tensor '{}' data_offsets must be non-negative integers", path, t.name);
        uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
        if (begin > end || end > data_size)
            throw_error("{}: tensor '{}' data_offsets [{}, {}] lie outside the data section ({} bytes)", path, t.name,
                        begin, end, data_size);
        t.n_bytes = end - begin;
        if (uint64_t size = element_size(t.dtype_name); size && t.n_bytes != n_elements * size)
            throw_error("{}: tensor '{}' has {} bytes, but {} {} needs {}", path, t.name, t.n_bytes, t.dtype_name,
                        shape_string(t.shape), n_elements * size);
        t.supported = supported_dtype(t.dtype_name, &t.dtype);
        t.data = f.data() + data_start + begin;
        s.index[t.name] = s.tensors.size();
        s.tensors.push_back(std::move(t));
    }
    return st;
}

std::unique_ptr<SafetensorsModel> SafetensorsModel::open_dir(const std::string& dir) {
    auto model = std::make_unique<SafetensorsModel>();
    model->dir_ = dir;
    fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
    fs::path single_path = fs::path(dir) / "model.safetensors";
    if (fs::exists(index_path)) {
        json index;
        try {
            std::ifstream in(index_path);
            index = json::parse(in);
        } catch (const json::exception& e) {
            throw_error("{}: not valid JSON: {}", index_path.string(), e.what());
        }
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            throw_error("{}: expected an object with a \"weight_map\" of tensor name -> shard file",
                        index_path.string());
        std::map<std::string, const SafetensorsFile*> shards;
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                throw_error("{}: weight_map entry '{}' is not a file name", index_path.string(), it.key());
            std::string shard = it.value().get<std::string>();
            if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
                throw_error("{}: weight_map entry '{}' names '{}', expected a file in the same directory",
                            index_path.string(), it.key(), shard);
            if (!shards.count(shard)) {
                std::string shard_path = (fs::path(dir) / shard).string();
                if (!fs::exists(shard_path))
                    throw_error("{}: shard {} listed in the index does not exist", index_path.string(), shard_path);
                model->files_.push_back(SafetensorsFile::open(shard_path));
                shards[shard] = model->files_.back().get();
            }
            const SafetensorsTensor* t = shards[shard]->find(it.key());
            if (!t)
                throw_error("{}: tensor '{}' is listed in {} but missing from that shard", shards[shard]->path(),
                            it.key(), index_path.string());
            model->tensors_[it.key()] = t;
        }
    } else if (fs::exists(single_path)) {
        model->files_.push_back(SafetensorsFile::open(single_path.string()));
        for (const SafetensorsTensor& t : model->files_.back()->tensors()) model->tensors_[t.name] = &t;
    } else {
        throw_error("{}: no model.safetensors or model.safetensors.index.json (expected Hugging Face safetensors "
                    "weights; .bin/.pth checkpoints are not supported)",
                    dir);
    }
    return model;
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second;
}

const SafetensorsTensor& SafetensorsModel::require_supported(const std::string& name) const {
    const SafetensorsTensor* t = find(name);
    if (!t) throw_error("{}: tensor '{}' is missing from the safetensors weights", dir_, name);
    if (!t->supported)
        throw_error("{}: tensor '{}' has dtype {}; supported: F32, F16, BF16", t->path, name, t->dtype_name);
    return *t;
}

std::vector<std::string> SafetensorsModel::names() const {
    std::vector<std::string> out;
    for (const auto& kv : tensors_) out.push_back(kv.first);
    return out;
}

void safetensors_read_f32(const SafetensorsTensor& tensor, int64_t begin, int64_t n, float* out) {
    KVLM_ASSERT(tensor.supported && begin >= 0 && n >= 0 && begin + n <= tensor.n_elements(), "bad tensor range");
    if (n == 0) return;  // `out` may be null then (an empty vector's data())
    size_t size = dtype_size(tensor.dtype);
    convert_to_f32(tensor.dtype, tensor.data + size_t(begin) * size, out, size_t(n));
}

}  // namespace kvlm
