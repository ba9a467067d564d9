// InputFile: open, fstat, pread.
#include "util/input_file.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "util/error.h"

namespace kvlm {

InputFile::~InputFile() {
    if (fd_ >= 0) ::close(fd_);
}

bool InputFile::open(const std::string& path) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    path_ = path;
    if (fd_ < 0) {
        if (errno == ENOENT) return false;
        throw_error("{}: cannot open: {}", path, os_error_text(errno));
    }
    struct stat st;
    if (::fstat(fd_, &st) != 0) throw_error("{}: cannot stat: {}", path, os_error_text(errno));
    size_ = uint64_t(st.st_size);
    return true;
}

size_t InputFile::read_at(void* dst, size_t n, uint64_t offset) {
    size_t got = 0;
    while (got < n) {
        // Large reads, but bounded: a block file is a few hundred KiB to a few MiB.
        ssize_t r = ::pread(fd_, static_cast<char*>(dst) + got, std::min<size_t>(n - got, size_t(16) << 20),
                            off_t(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw_error("{}: read failed: {}", path_, os_error_text(errno));
        if (r == 0) break;  // shrank while reading
        got += size_t(r);
    }
    return got;
}

bool InputFile::read_cached_at(void* dst, size_t n, uint64_t offset) {
#ifdef RWF_NOWAIT
    iovec part = {dst, n};
    ssize_t r;
    do {
        r = ::preadv2(fd_, &part, 1, off_t(offset), RWF_NOWAIT);
    } while (r < 0 && errno == EINTR);
    if (r >= 0) return size_t(r) == n;
    if (errno == EAGAIN) return false;
    if (errno != EOPNOTSUPP && errno != EINVAL && errno != ENOSYS)
        throw_error("{}: read failed: {}", path_, os_error_text(errno));
#endif
    return read_at(dst, n, offset) == n;
}

}  // namespace kvlm
