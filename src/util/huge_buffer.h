// A large zeroed buffer for the CPU's KV pool: anonymous memory aligned to 2 MiB and marked for
// transparent huge pages where the kernel allows them, so that filling it (a prefill, or a session restore
// at memory speed) takes one page fault per 2 MiB instead of one per 4 KiB. Pages are zeroed lazily by the
// OS, as with calloc. Ranges of it can be mapped from files copy-on-write (map_file).
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

    // Replaces [offset, offset + size) of the buffer - whole pages - with a private copy-on-write mapping of
    // file `fd` from its start: the file's page-cache pages become this memory, mapped on first touch and
    // copied only where written (a session restore without a copy or zeroed pages). False where the range
    // is not whole pages (nothing changed), the file's first or last page is not in the page cache (reading
    // it is then faster) or the system refuses (in both, the range is fresh zeroed memory again). The file must not shrink while
    // mapped (a read past its end would raise SIGBUS); kvlm replaces files by rename, never in place.
    bool map_file(size_t offset, size_t size, int fd);
    // Puts fresh zeroed anonymous memory back over a range (one that map_file mapped: its file's pages are
    // dropped). Throws Error if the system refuses, since the range would otherwise be left unmapped.
    void remap_anonymous(size_t offset, size_t size);
    // True if the first or last page of the range (whole pages) is resident: memory written since it was
    // allocated (mapping a file over it would first have to unmap its pages), or, where map_file mapped a
    // file, that file's pages in the page cache.
    bool resident(size_t offset, size_t size) const;
    static size_t page_size();

private:
    void release();

    char* mapping_ = nullptr;
    size_t mapping_size_ = 0;
    char* data_ = nullptr;
};

}  // namespace kvlm
