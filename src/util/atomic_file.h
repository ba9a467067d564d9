// Crash-safe file replacement and whole-file reads for the session store. A file written with
// write_file_atomic is either absent, its old content, or its complete new content - never a mix - even
// after a crash or kill -9 at any moment (temporary name in the same directory, fsync, rename, fsync dir).
// What it writes is owner-only (files 0600, directories 0700, whatever the umask): the store holds chats'
// text, the token ids of every session and their K/V.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlm {

// Prefix of every temporary file the store writes; gc removes leftovers of killed writers.
constexpr const char* kTempFilePrefix = ".tmp-";

// Writes `size` bytes to a temporary file next to `path` (mode 0600), fsyncs it and renames it over `path`.
// sync_dir: also fsync the directory so the rename itself is durable (callers writing many files into
// one directory may pass false and call fsync_directory once). On failure (full disk, permissions) the
// temporary file is removed, `path` is unchanged, and Error names `display_name` and the OS reason.
void write_file_atomic(const std::string& path, const void* data, size_t size, const std::string& display_name,
                       bool sync_dir = true);
void fsync_directory(const std::string& dir);  // throws Error naming dir

// Reads a whole file with large sequential reads. Returns false if it does not exist; throws Error for
// other failures.
bool read_whole_file(const std::string& path, std::vector<uint8_t>* out);
// Reads at most max_bytes from the start of the file; false if it does not exist.
bool read_file_head(const std::string& path, size_t max_bytes, std::vector<uint8_t>* out);

// Creates `dir` and its parents if missing, each it creates with mode 0700; throws Error naming it and the OS
// reason. Existing directories are left as they are.
void make_private_directories(const std::string& dir);

}  // namespace kvlm
