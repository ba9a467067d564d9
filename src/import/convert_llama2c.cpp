// llama2.c importer: checkpoint weights (Meta layout) -> ConvertSource with q/k rows in rotate_half order.
// The checkpoint carries no tokenizer and no RoPE/norm settings: --tokenizer is required, theta 10000, eps 1e-5.
#include <filesystem>
#include <memory>

#include "import/convert.h"
#include "import/llama2c_checkpoint.h"
#include "import/rope_layout.h"
#include "import/tokenizer/tokenizer_import.h"
#include "util/error.h"

namespace kvlm {

ConvertSource open_llama2c_source(const std::string& path, const std::string& tokenizer_path) {
    auto ck = std::shared_ptr<Llama2cCheckpoint>(Llama2cCheckpoint::open(path));
    const Llama2cHeader& h = ck->header();
    ConvertSource src;
    src.kind = "llama2c";
    ModelConfig& c = src.metadata.config;
    c.architecture = "llama";
    c.n_vocab = h.vocab_size;
    c.n_embd = h.dim;
    c.n_layers = h.n_layers;
    c.n_heads = h.n_heads;
    c.n_kv_heads = h.n_kv_heads;
    c.head_dim = h.dim / h.n_heads;
    c.n_ff = h.hidden_dim;
    c.n_ctx = h.seq_len;
    c.rope_theta = 10000.0f;  // llama2.c model.py precompute_freqs_cis default
    c.norm_eps = 1e-5f;       // llama2.c ModelArgs.norm_eps
    c.tied_embeddings = h.shared_classifier;
    c.validate(path);
    // Version 2 stores Q8_0 int8: like quantized GGUF sources, default to f16.
    src.default_dtype = h.version == 2 ? DType::f16 : DType::f32;

    src.tensors = expected_tensors(c, src.default_dtype);
    std::vector<const Llama2cTensor*> parts;
    for (const TensorInfo& t : src.tensors) {
        const Llama2cTensor* lt = ck->find(t.name);
        KVLM_ASSERT(lt && lt->shape == t.shape, "llama2.c layout disagrees with expected_tensors");
        parts.push_back(lt);
    }
    const int64_t head_dim = c.head_dim;
    src.read_rows = [ck, parts, tensors = src.tensors, head_dim](size_t i, int64_t row, int64_t n_rows, float* out) {
        const int64_t row_len = tensor_row_len(tensors[i]);
        bool permute = tensors[i].name.find("attn_q.weight") != std::string::npos ||
                       tensors[i].name.find("attn_k.weight") != std::string::npos;
        if (!permute) {
            ck->read_f32(*parts[i], row * row_len, n_rows * row_len, out);
            return;
        }
        for (int64_t r = 0; r < n_rows; r++)
            ck->read_f32(*parts[i], interleaved_source_row(row + r, head_dim) * row_len, row_len, out + r * row_len);
    };

    if (tokenizer_path.empty())
        throw_error("{}: llama2.c checkpoints carry no tokenizer; pass --tokenizer tokenizer.bin (or another "
                    "tokenizer file)",
                    path);
    src.metadata.tokenizer = load_tokenizer_source(tokenizer_path, c.n_vocab);
    src.metadata.source = "llama2.c " + std::filesystem::path(path).filename().string();
    return src;
}

}  // namespace kvlm
