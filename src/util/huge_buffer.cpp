// HugeBuffer: mmap with room to align to 2 MiB, madvise(MADV_HUGEPAGE) (a hint: "never" THP or an old
// kernel simply gives 4 KiB pages).
#include "util/huge_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "util/error.h"

namespace kvlm {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

HugeBuffer::~HugeBuffer() { release(); }

void HugeBuffer::release() {
    if (mapping_) ::munmap(mapping_, mapping_size_);
    mapping_ = data_ = nullptr;
    mapping_size_ = 0;
}

bool HugeBuffer::allocate(size_t size) {
    release();
    if (size == 0 || size > SIZE_MAX - kHugePage) return false;
    const size_t mapping_size = size + kHugePage;
    void* p = ::mmap(nullptr, mapping_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    mapping_ = static_cast<char*>(p);
    mapping_size_ = mapping_size;
    data_ = mapping_ + (kHugePage - uintptr_t(mapping_) % kHugePage) % kHugePage;
#ifdef MADV_HUGEPAGE
    ::madvise(data_, size, MADV_HUGEPAGE);
#endif
    return true;
}

size_t HugeBuffer::page_size() {
    static const size_t size = size_t(::sysconf(_SC_PAGESIZE));
    return size;
}

void HugeBuffer::remap_anonymous(size_t offset, size_t size) {
    void* p = ::mmap(data_ + offset, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) throw_error("KV pool: cannot map fresh memory over a block: {}", os_error_text(errno));
#ifdef MADV_HUGEPAGE
    ::madvise(data_ + offset, size, MADV_HUGEPAGE);
#endif
}

}  // namespace kvlm
