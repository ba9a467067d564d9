// Advisory whole-file locks (flock) held for an object's lifetime. The lock file is created if missing
// and never deleted while locked; the kernel drops the lock when the process dies (kill -9 included).
#pragma once
#include <string>

namespace kvlm {

class FileLock {
public:
    enum class Mode { shared, exclusive };
    FileLock() = default;
    ~FileLock() { unlock(); }
    FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    FileLock& operator=(FileLock&& other) noexcept;
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;

    // Non-blocking: false if another process holds a conflicting lock. Throws Error if the lock file
    // cannot be created or opened (e.g. an unwritable directory).
    bool try_lock(const std::string& path, Mode mode);
    // Blocks until the lock is granted.
    void lock(const std::string& path, Mode mode);
    void unlock();
    bool locked() const { return fd_ >= 0; }

private:
    int open_file(const std::string& path);
    int fd_ = -1;
};

}  // namespace kvlm
