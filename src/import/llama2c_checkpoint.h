// Reader for karpathy/llama2.c checkpoints (export.py): legacy v0 (7 int32 header, negative vocab = untied
// classifier), v1 (256-byte "ak42" header, float32) and v2 (int8 Q8_0 groups + f32 scales). The file size
// must equal what the header implies, so a wrong or truncated file is refused before any weight is read.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvlm {

class MappedFile;

struct Llama2cHeader {
    int32_t version = 0;  // 0 = legacy
    int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
    bool shared_classifier = true;
    int32_t group_size = 0;  // version 2 only
};

// One weight of the checkpoint, named with kvlm tensor names, in llama2.c's (Meta, interleaved RoPE) layout.
struct Llama2cTensor {
    std::string name;
    std::vector<int64_t> shape;  // [out, in] for matrices, [n] for norms
    uint64_t offset = 0;         // f32 values, or int8 values for quantized tensors
    bool quantized = false;      // version 2 matrices
    uint64_t scale_offset = 0;   // quantized: f32 scale per group_size elements
    int64_t n_elements() const;
};

class Llama2cCheckpoint {
public:
    static std::unique_ptr<Llama2cCheckpoint> open(const std::string& path);  // throws Error when malformed
    ~Llama2cCheckpoint();

    const std::string& path() const;
    const Llama2cHeader& header() const { return header_; }
    const std::vector<Llama2cTensor>& tensors() const { return tensors_; }
    const Llama2cTensor* find(const std::string& name) const;  // nullptr if absent (e.g. output when shared)
    // Elements [begin, begin + n) of the tensor as f32 (dequantized for version 2).
    void read_f32(const Llama2cTensor& tensor, int64_t begin, int64_t n, float* out) const;  // out: [n]

private:
    Llama2cCheckpoint();
    std::unique_ptr<MappedFile> file_;
    Llama2cHeader header_;
    std::vector<Llama2cTensor> tensors_;
};

}  // namespace kvlm
