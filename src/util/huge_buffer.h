// A large zeroed buffer for the CPU's KV pool: anonymous memory aligned to 2 MiB and marked for
// transparent huge pages where the kernel allows them, so that filling it (a prefill, or a session restore
// at memory speed) takes one page fault per 2 MiB instead of one per 4 KiB. Pages are zeroed lazily by the
// OS, as with calloc.
#pragma once
#include <cstddef>

namespace kvlm {

class HugeBuffer {
public:
    HugeBuffer() = default;
    ~HugeBuffer();
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;

    // Maps `size` bytes (any previous mapping is released first); false if the system refuses the memory.
    bool allocate(size_t size);
    char* data() const { return data_; }

    // Puts fresh zeroed anonymous memory back over a range (whole pages), as a new process would have it.
    // Throws Error if the system refuses, since the range would otherwise be left unmapped.
    void remap_anonymous(size_t offset, size_t size);
    static size_t page_size();

private:
    void release();

    char* mapping_ = nullptr;
    size_t mapping_size_ = 0;
    char* data_ = nullptr;
};

}  // namespace kvlm
