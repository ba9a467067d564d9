// Internal to the model file code: the on-disk encoding of the .kvlm header, metadata section and tensor
// directory (docs/FORMAT.md), shared by the writer and the reader. Decoders check every length and
// offset against the bytes actually present and throw Error naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "util/binary_io.h"

namespace kvlm::model_format {

constexpr uint32_t kHeaderSize = 128;           // fixed for version 1; the rest of it is reserved zeros
constexpr uint32_t kMaxTensors = 1u << 20;      // sanity limit before allocating the directory
constexpr uint32_t kMaxNameLength = 1024;       // tensor names and metadata keys
constexpr uint32_t kMaxDims = 8;
constexpr uint32_t kMaxArrayElements = 1u << 23;  // metadata arrays: tokens, merges, ... (n_vocab <= 2^22)
constexpr uint64_t kMinDirectoryEntryBytes = 4 + 4 + 4 + 8 + 8 + 8;  // empty name, 0 dims

struct Header {
    uint32_t version = kModelFormatVersion;
    uint32_t flags = 0;  // no flags are defined in version 1
    uint32_t header_size = kHeaderSize;
    uint64_t metadata_offset = 0, metadata_size = 0;
    uint64_t directory_offset = 0, directory_size = 0;
    uint64_t n_tensors = 0;
    uint64_t data_offset = 0, data_size = 0;  // data_size includes the padding after the last tensor
    uint64_t metadata_checksum = 0;           // XXH3-64 of the metadata section bytes
    uint64_t directory_checksum = 0;          // XXH3-64 of the directory section bytes
    uint64_t fingerprint_high = 0, fingerprint_low = 0;  // XXH3-128, see compute_fingerprint
};

// Metadata value types (u32 on disk). Never renumber; unknown types are skipped with their key.
enum class ValueType : uint32_t {
    u32 = 1, i32 = 2, f32 = 3, boolean = 4, string = 5, string_array = 6, f32_array = 7, i32_array = 8
};

inline uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

void write_header(Writer& out, const Header& header);  // exactly kHeaderSize bytes
// Reads magic, version and the fields; checks magic, version, header size and flags. `file_size` is
// used only to word the error for files too short to hold a header.
Header read_header(const uint8_t* data, size_t file_size, const std::string& path);

void write_metadata(Writer& out, const ModelMetadata& metadata);
// Decodes known keys (unknown keys are skipped); a missing required key or a known key with the wrong
// type is an error. Does not check the values' consistency (validate_metadata does).
ModelMetadata read_metadata(Reader& in, const std::string& path);
// ModelConfig::validate plus tokenizer consistency with n_vocab.
void validate_metadata(const ModelMetadata& metadata, const std::string& path);

void write_directory(Writer& out, const std::vector<TensorInfo>& tensors);
// Decodes n_tensors entries; checks dtype values, dims and that n_bytes matches shape * dtype size.
std::vector<TensorInfo> read_directory(Reader& in, uint64_t n_tensors, const std::string& path);

// Bytes of a tensor of this dtype and shape; throws Error naming `what` for non-positive or absurd dims.
uint64_t tensor_n_bytes(DType dtype, const std::vector<int64_t>& shape, const std::string& what);

// Hex XXH3-128 of a canonical serialization of config, tokenizer and every tensor's name, dtype, shape
// and checksum (not the chat template or source text, which do not change what the model computes).
std::string compute_fingerprint(const ModelMetadata& metadata, const std::vector<TensorInfo>& tensors,
                                uint64_t* high, uint64_t* low);
std::string fingerprint_hex(uint64_t high, uint64_t low);

}  // namespace kvlm::model_format
