// A file opened for reading with one descriptor: its size once, then reads at offsets straight into the
// caller's memory (a session block's payload goes from the page cache into a reused buffer, with no
// second open and no temporary allocation).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvlm {

class InputFile {
public:
    InputFile() = default;
    ~InputFile();
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;

    // False if `path` does not exist; throws Error naming it and the OS reason for other failures.
    bool open(const std::string& path);
    uint64_t size() const { return size_; }
    int descriptor() const { return fd_; }  // for mmap; owned by this object
    // Reads up to n bytes at `offset` into dst; returns how many it read (fewer only at the end of the
    // file, e.g. one that shrank). Throws Error naming the file on a read failure.
    size_t read_at(void* dst, size_t n, uint64_t offset);
    // read_at of n bytes only if they are in the page cache: false, when reading them would wait for the
    // disk, with nothing read. Where the system cannot tell (no RWF_NOWAIT) it reads as read_at does.
    bool read_cached_at(void* dst, size_t n, uint64_t offset);

private:
    int fd_ = -1;
    uint64_t size_ = 0;
    std::string path_;
};

}  // namespace kvlm
