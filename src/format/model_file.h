// The .kvlm model file: writing it (streaming, tensor by tensor, to a temporary name renamed at the end)
// and opening it (read-only mmap; header, metadata and tensor directory validated against the file size
// before any tensor byte is touched). Layout: docs/FORMAT.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/model_config.h"
#include "format/sampling_settings.h"
#include "format/tensor.h"
#include "format/tokenizer_data.h"
#include "util/progress.h"

namespace kvlm {

constexpr uint32_t kModelFormatVersion = 1;
constexpr size_t kTensorAlignment = 4096;

struct TensorInfo {
    std::string name;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;  // row-major, outermost first
    uint64_t offset = 0;         // from the start of the file, multiple of kTensorAlignment
    uint64_t n_bytes = 0;
    uint64_t checksum = 0;       // XXH3-64 of the tensor's bytes
};

// Everything except the tensor bytes.
struct ModelMetadata {
    ModelConfig config;
    TokenizerData tokenizer;
    std::string chat_template;  // Jinja text from the source, may be empty
    std::string source;         // free text: where it was converted from
    SamplingSettings sampling;  // the source's recommended sampling defaults (any subset; not fingerprinted)
};

// The tensors a model with this config must contain, in canonical file order (token_embd, then per layer
// attn_norm, attn_q/k/v (+ biases for qkv_bias), attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, then
// output_norm and output unless tied). 1-D tensors (norms, biases) are always f32; matrices use `dtype`, but
// f16 when `dtype` is quantized and their rows are not whole blocks of it.
// offset/checksum are left 0 (n_bytes filled from shape and dtype).
std::vector<TensorInfo> expected_tensors(const ModelConfig& config, DType dtype);

// Each tensor type with its count, most common first: "q4_1 210, f32 61, q8_0 1".
std::string tensor_type_counts(const std::vector<TensorInfo>& tensors);

class ModelWriter {
public:
    // Declares every tensor up front (name, dtype, shape) so offsets are known; data follows in order.
    ModelWriter(const std::string& path, const ModelMetadata& metadata, std::vector<TensorInfo> tensors);
    ~ModelWriter();  // removes the temporary file if finish() was not reached
    // Writes tensor i's bytes (tensors[i].n_bytes of them). Must be called for i = 0, 1, ... in order.
    void write_tensor(size_t index, const void* data);
    // Rewrites the directory with checksums, computes the fingerprint, fsyncs, renames to `path`.
    void finish();
    const std::string& fingerprint() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

class ModelFile {
public:
    // Throws Error naming `path` and the problem for any malformed input.
    static std::unique_ptr<ModelFile> open(const std::string& path);
    ~ModelFile();

    const std::string& path() const;
    const ModelMetadata& metadata() const;
    const ModelConfig& config() const { return metadata().config; }
    const std::vector<TensorInfo>& tensors() const;
    const TensorInfo* find(const std::string& name) const;  // nullptr if absent
    TensorView view(const TensorInfo& info) const;          // points into the mapping
    // Requires the tensor, checks dtype is supported and shape equals `expected_shape`; throws otherwise.
    TensorView require(const std::string& name, const std::vector<int64_t>& expected_shape) const;
    uint64_t file_size() const;
    // Hex digest over hyperparameters, tokenizer and tensor checksums; sessions bind to it.
    const std::string& fingerprint() const;
    // Recomputes every tensor checksum; throws Error naming the first tensor that does not match.
    // `progress` (may be null) is advanced by the bytes checked.
    void verify(ProgressBar* progress = nullptr) const;

private:
    ModelFile();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// For people, in errors that name a model: "stories260K.kvlm (llama, from GGUF stories260K.gguf)".
std::string model_description(const ModelFile& model);

}  // namespace kvlm
