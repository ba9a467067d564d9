// mmap-based read-only file mapping.
#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace kvlm {

MappedFile::MappedFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it is refused below.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw_error("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw_error("{}: cannot stat: {}", path, std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                           : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                                                  : "a special file";
        throw_error("{}: is {}, expected a regular file", path, kind);
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            throw_error("{}: cannot memory-map {} bytes: {}", path, size_, std::strerror(e));
        }
        data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvlm
