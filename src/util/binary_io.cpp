// Little-endian Writer/Reader implementations. Integers are assembled byte by byte, so the encoding
// does not depend on the host byte order.
#include "util/binary_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace kvlm {

// ---- Writer ----

void Writer::write_u32(uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = uint8_t(v >> (8 * i));
    write_bytes(b, 4);
}

void Writer::write_u64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = uint8_t(v >> (8 * i));
    write_bytes(b, 8);
}

void Writer::write_f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    write_u32(bits);
}

void Writer::write_zeros(uint64_t n_bytes) {
    static const uint8_t zeros[4096] = {};
    while (n_bytes > 0) {
        size_t n = n_bytes < sizeof(zeros) ? size_t(n_bytes) : sizeof(zeros);
        write_bytes(zeros, n);
        n_bytes -= n;
    }
}

void Writer::write_string(const std::string& s) {
    KVLM_ASSERT(s.size() <= UINT32_MAX, "string too long to serialize");
    write_u32(uint32_t(s.size()));
    write_bytes(s.data(), s.size());
}

void Writer::write_string_array(const std::vector<std::string>& values) {
    KVLM_ASSERT(values.size() <= UINT32_MAX, "array too long to serialize");
    write_u32(uint32_t(values.size()));
    for (const auto& s : values) write_string(s);
}

void Writer::write_f32_array(const std::vector<float>& values) {
    KVLM_ASSERT(values.size() <= UINT32_MAX, "array too long to serialize");
    write_u32(uint32_t(values.size()));
    for (float v : values) write_f32(v);
}

void Writer::write_i32_array(const std::vector<int32_t>& values) {
    KVLM_ASSERT(values.size() <= UINT32_MAX, "array too long to serialize");
    write_u32(uint32_t(values.size()));
    for (int32_t v : values) write_i32(v);
}

void BufferWriter::write_bytes(const void* data, size_t n_bytes) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    buffer_.insert(buffer_.end(), p, p + n_bytes);
    position_ += n_bytes;
}

// ---- FileWriter ----

FileWriter::FileWriter(const std::string& path, const std::string& display_name) : display_name_(display_name) {
    file_ = std::fopen(path.c_str(), "wb");
    if (!file_) throw_error("{}: cannot create the file: {}", display_name_, os_error_text(errno));
    std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

FileWriter::~FileWriter() {
    if (file_) std::fclose(file_);
}

void FileWriter::fail(const char* action) const {
    int err = errno;
    throw_error("{}: {} at offset {}: {}", display_name_, action, position_,
                err ? os_error_text(err) : std::string("unknown error (is the disk full?)"));
}

void FileWriter::write_bytes(const void* data, size_t n_bytes) {
    KVLM_ASSERT(file_ != nullptr, "write after close");
    if (n_bytes == 0) return;
    errno = 0;
    if (std::fwrite(data, 1, n_bytes, file_) != n_bytes) fail("write failed");
    position_ += n_bytes;
}

void FileWriter::seek(uint64_t offset) {
    KVLM_ASSERT(file_ != nullptr, "seek after close");
    if (std::fflush(file_) != 0) fail("write failed");
    if (fseeko(file_, off_t(offset), SEEK_SET) != 0) fail("seek failed");
    position_ = offset;
}

void FileWriter::sync_and_close() {
    KVLM_ASSERT(file_ != nullptr, "close twice");
    if (std::fflush(file_) != 0) fail("write failed");
    if (::fsync(fileno(file_)) != 0) fail("fsync failed");
    std::FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) fail("close failed");
}

// ---- Reader ----

Reader::Reader(const void* data, size_t size, std::string source, uint64_t base_offset)
    : data_(static_cast<const uint8_t*>(data)), size_(size), source_(std::move(source)), base_offset_(base_offset) {}

void Reader::fail(const std::string& problem) const {
    throw_error("{}: at offset {}: {}", source_, offset(), problem);
}

const uint8_t* Reader::read_bytes(uint64_t n_bytes, const char* what) {
    if (n_bytes > remaining())
        fail(fmt::format("truncated {}: needs {} bytes, only {} left in the section", what, n_bytes, remaining()));
    const uint8_t* p = data_ + position_;
    position_ += size_t(n_bytes);
    return p;
}

uint8_t Reader::read_u8(const char* what) { return *read_bytes(1, what); }

uint32_t Reader::read_u32(const char* what) {
    const uint8_t* b = read_bytes(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= uint32_t(b[i]) << (8 * i);
    return v;
}

uint64_t Reader::read_u64(const char* what) {
    const uint8_t* b = read_bytes(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= uint64_t(b[i]) << (8 * i);
    return v;
}

float Reader::read_f32(const char* what) {
    uint32_t bits = read_u32(what);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

bool Reader::read_bool(const char* what) {
    uint8_t v = read_u8(what);
    if (v > 1) {
        position_ -= 1;
        fail(fmt::format("{} is {}, expected a bool (0 or 1)", what, v));
    }
    return v == 1;
}

std::string Reader::read_string(const char* what, uint32_t max_length) {
    uint32_t length = read_u32(what);
    if (length > max_length) {
        position_ -= 4;
        fail(fmt::format("{} has length {}, more than the maximum {}", what, length, max_length));
    }
    const uint8_t* p = read_bytes(length, what);
    return std::string(reinterpret_cast<const char*>(p), length);
}

uint32_t Reader::read_count(const char* what, size_t min_element_bytes) {
    uint32_t count = read_u32(what);
    // Guard before allocating: a claimed count must fit in the bytes that are actually there.
    if (uint64_t(count) * min_element_bytes > remaining()) {
        position_ -= 4;
        fail(fmt::format("{} claims {} elements, but only {} bytes follow", what, count, remaining() - 4));
    }
    return count;
}

std::vector<std::string> Reader::read_string_array(const char* what) {
    uint32_t count = read_count(what, 4);
    std::vector<std::string> values;
    values.reserve(count);
    for (uint32_t i = 0; i < count; i++) values.push_back(read_string(what));
    return values;
}

std::vector<float> Reader::read_f32_array(const char* what) {
    uint32_t count = read_count(what, 4);
    std::vector<float> values(count);
    for (uint32_t i = 0; i < count; i++) values[i] = read_f32(what);
    return values;
}

std::vector<int32_t> Reader::read_i32_array(const char* what) {
    uint32_t count = read_count(what, 4);
    std::vector<int32_t> values(count);
    for (uint32_t i = 0; i < count; i++) values[i] = read_i32(what);
    return values;
}

Reader Reader::sub_reader(uint64_t n_bytes, const char* what) {
    uint64_t start = offset();
    const uint8_t* p = read_bytes(n_bytes, what);
    return Reader(p, size_t(n_bytes), source_, start);
}

}  // namespace kvlm
