// Temporary-file + fsync + rename writes and plain POSIX whole-file reads.
#include "util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "util/error.h"
#include "util/input_file.h"

namespace kvlm {

namespace {

std::string dir_of(const std::string& path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string temp_name_for(const std::string& path) {
    static thread_local std::mt19937_64 rng{std::random_device{}() ^ uint64_t(getpid())};
    return fmt::format("{}/{}{}-{:016x}", dir_of(path), kTempFilePrefix, getpid(), rng());
}

}  // namespace

void fsync_directory(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) throw_error("{}: cannot open directory to sync it: {}", dir, os_error_text(errno));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0 && err != EINVAL) throw_error("{}: fsync of the directory failed: {}", dir, os_error_text(err));
}

void write_file_atomic(const std::string& path, const void* data, size_t size, const std::string& display_name,
                       bool sync_dir) {
    std::string temp = temp_name_for(path);
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw_error("{}: cannot create {}: {}", display_name, temp, os_error_text(errno));
    ::fchmod(fd, 0600);  // 0600 whatever the umask (a umask can only remove bits, but 0600 is the promise)
    auto fail = [&](const char* action) {
        int err = errno;
        ::close(fd);
        ::unlink(temp.c_str());
        throw_error("{}: {}: {}", display_name, action, os_error_text(err));
    };
    const uint8_t* p = static_cast<const uint8_t*>(data);
    size_t left = size;
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            fail("write failed");
        }
        p += n;
        left -= size_t(n);
    }
    if (::fsync(fd) != 0) fail("fsync failed");
    if (::close(fd) != 0) {
        int err = errno;
        ::unlink(temp.c_str());
        throw_error("{}: close failed: {}", display_name, os_error_text(err));
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(temp.c_str());
        throw_error("{}: cannot rename {} to {}: {}", display_name, temp, path, os_error_text(err));
    }
    if (sync_dir) fsync_directory(dir_of(path));
}

bool read_file_head(const std::string& path, size_t max_bytes, std::vector<uint8_t>* out) {
    InputFile file;
    if (!file.open(path)) return false;
    out->resize(size_t(std::min<uint64_t>(file.size(), max_bytes)));
    out->resize(file.read_at(out->data(), out->size(), 0));
    return true;
}

bool read_whole_file(const std::string& path, std::vector<uint8_t>* out) {
    return read_file_head(path, SIZE_MAX, out);
}

void make_private_directories(const std::string& dir) {
    if (dir.empty()) return;
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) throw_error("{}: cannot create directory: {}", dir, os_error_text(ENOTDIR));
        return;
    }
    const std::string parent = dir_of(dir);
    if (parent != dir && parent != "." && parent != "/") make_private_directories(parent);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        throw_error("{}: cannot create directory: {}", dir, os_error_text(errno));
    ::chmod(dir.c_str(), 0700);  // owner-only whatever the umask
}

}  // namespace kvlm
