// flock-based locks.
#include "util/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace kvlm {

FileLock& FileLock::operator=(FileLock&& other) noexcept {
    if (this != &other) {
        unlock();
        fd_ = other.fd_;
        other.fd_ = -1;
    }
    return *this;
}

int FileLock::open_file(const std::string& path) {
    // Never through a symbolic link (one planted at the lock's path would make kvlm create or lock a file
    // elsewhere); owner-only, as the store is.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) return fd;
    int err = errno;
    // flock works on a read-only descriptor too: readers of a store they may not write (ls, verify) can lock.
    if (err == EACCES || err == EROFS) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) return fd;
    if (err == ELOOP)
        throw_error("{}: cannot create lock file: it is a symbolic link, which kvlm does not follow (remove it)",
                    path);
    throw_error("{}: cannot create lock file: {}", path, std::strerror(err));
}

bool FileLock::try_lock(const std::string& path, Mode mode) {
    unlock();
    int fd = open_file(path);
    int op = (mode == Mode::shared ? LOCK_SH : LOCK_EX) | LOCK_NB;
    while (::flock(fd, op) != 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        if (err == EWOULDBLOCK) return false;
        throw_error("{}: cannot lock: {}", path, std::strerror(err));
    }
    fd_ = fd;
    return true;
}

void FileLock::lock(const std::string& path, Mode mode) {
    unlock();
    int fd = open_file(path);
    int op = mode == Mode::shared ? LOCK_SH : LOCK_EX;
    while (::flock(fd, op) != 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        throw_error("{}: cannot lock: {}", path, std::strerror(err));
    }
    fd_ = fd;
}

void FileLock::unlock() {
    if (fd_ < 0) return;
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
}

}  // namespace kvlm
