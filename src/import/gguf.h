// Read-only GGUF (v2/v3) reader over a memory-mapped file: metadata key/values and the tensor directory,
// every count, length and offset bounds-checked against the file size. Dequantizes F32/F16/BF16/Q8_0/Q4_0/Q4_1.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace kvlm {

enum class GgufType : uint32_t {  // GGUF metadata value types
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
    u64 = 10, i64 = 11, f64 = 12
};

struct GgufTensor {
    std::string name;
    uint32_t ggml_type = 0;        // ggml type id: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 30 BF16, ...
    std::vector<int64_t> dims;     // GGUF order: dims[0] is the fastest-varying (ne0)
    uint64_t offset = 0;           // absolute offset in the file
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr;
    int64_t n_elements() const;
};

// The kvlm type that stores a ggml type's elements byte for byte (kSupportedGgmlTypes), if any.
std::optional<DType> kvlm_dtype_of_ggml_type(uint32_t ggml_type);
// The GGUF tensor types kvlm keeps, for messages.
constexpr const char* kSupportedGgmlTypes =
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

class GgufFile {
public:
    static std::unique_ptr<GgufFile> open(const std::string& path);  // throws Error on malformed input
    ~GgufFile();

    const std::string& path() const;
    uint32_t version() const;
    bool has(const std::string& key) const;
    // Typed getters throw Error naming the file and key if missing or of another type.
    // Integer getters accept any integer type whose value fits.
    std::string get_string(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    double get_float(const std::string& key) const;  // f32 or f64
    bool get_bool(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;
    std::vector<float> get_float_array(const std::string& key) const;
    std::vector<int32_t> get_int_array(const std::string& key) const;
    // Defaults when absent.
    std::string get_string_or(const std::string& key, const std::string& fallback) const;
    int64_t get_int_or(const std::string& key, int64_t fallback) const;
    double get_float_or(const std::string& key, double fallback) const;
    bool get_bool_or(const std::string& key, bool fallback) const;
    std::vector<std::string> keys() const;

    const std::vector<GgufTensor>& tensors() const;
    const GgufTensor* find_tensor(const std::string& name) const;
    // Writes tensor.n_elements() floats. Throws Error naming the type for unsupported ggml types.
    void dequantize(const GgufTensor& tensor, float* out) const;
    static const char* ggml_type_name(uint32_t ggml_type);

private:
    GgufFile();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvlm
