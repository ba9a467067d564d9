// A read-only memory mapping of a whole file (model files, GGUF, safetensors). Pages are touched only
// when read, so opening a multi-GB model is instant.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvlm {

class MappedFile {
public:
    explicit MappedFile(const std::string& path);  // throws Error naming the path if it cannot be opened
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return path_; }
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    // True if [offset, offset + length) lies inside the file (overflow-safe).
    bool contains(uint64_t offset, uint64_t length) const { return offset <= size_ && length <= size_ - offset; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvlm
