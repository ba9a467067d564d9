// Read-only safetensors reader (memory-mapped): the JSON header is size-limited and every tensor's
// data_offsets are validated against its dtype, shape and the file size before any tensor byte is used.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace kvlm {

class MappedFile;

struct SafetensorsTensor {
    std::string name;
    std::string dtype_name;      // as in the header: "F32", "BF16", "I64", ...
    bool supported = false;      // dtype is F32, F16 or BF16 (then `dtype` is set)
    DType dtype = DType::f32;
    std::vector<int64_t> shape;  // row-major, outermost first
    const uint8_t* data = nullptr;
    uint64_t n_bytes = 0;
    std::string path;            // the file holding it
    int64_t n_elements() const;
};

class SafetensorsFile {
public:
    static constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // real headers are well under 10 MiB
    static std::unique_ptr<SafetensorsFile> open(const std::string& path);  // throws Error when malformed
    ~SafetensorsFile();

    const std::string& path() const;
    const std::vector<SafetensorsTensor>& tensors() const;
    const SafetensorsTensor* find(const std::string& name) const;  // nullptr if absent

private:
    SafetensorsFile();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// All tensors of a Hugging Face model directory: model.safetensors, or the shards listed by
// model.safetensors.index.json (each listed tensor must be present in the shard the index names).
class SafetensorsModel {
public:
    static std::unique_ptr<SafetensorsModel> open_dir(const std::string& dir);
    const SafetensorsTensor* find(const std::string& name) const;  // nullptr if absent
    // Throws Error naming the tensor's file if the tensor's dtype is not F32/F16/BF16.
    const SafetensorsTensor& require_supported(const std::string& name) const;
    std::vector<std::string> names() const;
    const std::string& dir() const { return dir_; }

private:
    std::string dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, const SafetensorsTensor*> tensors_;
};

// Converts elements [begin, begin + n) of a supported tensor to f32.
void safetensors_read_f32(const SafetensorsTensor& tensor, int64_t begin, int64_t n, float* out);  // out: [n]

}  // namespace kvlm
