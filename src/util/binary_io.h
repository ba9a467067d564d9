// Little-endian serialization: a Writer (to a file, a memory buffer, or just counting bytes) and a
// bounds-checked Reader over a memory span. Every Reader read checks the remaining length first and
// throws Error naming the source and the absolute offset, so parsers of untrusted files never overrun.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kvlm {

class Writer {
public:
    virtual ~Writer() = default;
    virtual void write_bytes(const void* data, size_t n_bytes) = 0;
    uint64_t position() const { return position_; }

    void write_u8(uint8_t v) { write_bytes(&v, 1); }
    void write_u32(uint32_t v);
    void write_i32(int32_t v) { write_u32(uint32_t(v)); }
    void write_u64(uint64_t v);
    void write_i64(int64_t v) { write_u64(uint64_t(v)); }
    void write_f32(float v);
    void write_bool(bool v) { write_u8(v ? 1 : 0); }
    void write_zeros(uint64_t n_bytes);
    void write_string(const std::string& s);  // u32 length + bytes
    // u32 count + elements (strings each length-prefixed).
    void write_string_array(const std::vector<std::string>& values);
    void write_f32_array(const std::vector<float>& values);
    void write_i32_array(const std::vector<int32_t>& values);

protected:
    uint64_t position_ = 0;  // bytes written so far (or the current offset for seekable writers)
};

// Appends to an in-memory buffer.
class BufferWriter : public Writer {
public:
    void write_bytes(const void* data, size_t n_bytes) override;
    const std::vector<uint8_t>& buffer() const { return buffer_; }
    std::vector<uint8_t>& buffer() { return buffer_; }

private:
    std::vector<uint8_t> buffer_;
};

// Counts bytes without storing them (to size a section before writing it).
class SizeWriter : public Writer {
public:
    void write_bytes(const void*, size_t n_bytes) override { position_ += n_bytes; }
};

// Buffered writes to a file. Every failure (open, short write, seek, fsync, close) throws Error naming
// `display_name` and the OS reason. The destructor closes without syncing and never throws.
class FileWriter : public Writer {
public:
    FileWriter(const std::string& path, const std::string& display_name);
    ~FileWriter() override;
    FileWriter(const FileWriter&) = delete;
    FileWriter& operator=(const FileWriter&) = delete;

    void write_bytes(const void* data, size_t n_bytes) override;
    void seek(uint64_t offset);  // absolute; later writes overwrite from there
    void sync_and_close();       // flush, fsync, close: data is on disk when this returns

private:
    [[noreturn]] void fail(const char* action) const;
    std::string display_name_;
    std::FILE* file_ = nullptr;
};

class Reader {
public:
    // `source` names the data in errors ("model.kvlm"); `base_offset` is where data sits in that source,
    // so error offsets are absolute.
    Reader(const void* data, size_t size, std::string source, uint64_t base_offset = 0);

    uint64_t offset() const { return base_offset_ + position_; }  // absolute, for error messages
    size_t position() const { return position_; }                // relative to data
    size_t remaining() const { return size_ - position_; }
    bool at_end() const { return position_ == size_; }
    const std::string& source() const { return source_; }

    // Returns a pointer to the next n_bytes and advances; throws if fewer remain.
    const uint8_t* read_bytes(uint64_t n_bytes, const char* what);
    void skip(uint64_t n_bytes, const char* what) { read_bytes(n_bytes, what); }
    uint8_t read_u8(const char* what);
    uint32_t read_u32(const char* what);
    int32_t read_i32(const char* what) { return int32_t(read_u32(what)); }
    uint64_t read_u64(const char* what);
    int64_t read_i64(const char* what) { return int64_t(read_u64(what)); }
    float read_f32(const char* what);
    bool read_bool(const char* what);  // 0 or 1; anything else is an error
    // u32 length + bytes; the length is checked against the remaining data and max_length.
    std::string read_string(const char* what, uint32_t max_length = UINT32_MAX);
    // u32 count + elements; count is checked against the remaining bytes before allocating.
    std::vector<std::string> read_string_array(const char* what);
    std::vector<float> read_f32_array(const char* what);
    std::vector<int32_t> read_i32_array(const char* what);
    // A Reader over the next n_bytes (advancing this one past them).
    Reader sub_reader(uint64_t n_bytes, const char* what);

    [[noreturn]] void fail(const std::string& problem) const;  // "<source>: at offset N: <problem>"

private:
    uint32_t read_count(const char* what, size_t min_element_bytes);
    const uint8_t* data_;
    size_t size_;
    size_t position_ = 0;
    std::string source_;
    uint64_t base_offset_;
};

}  // namespace kvlm
