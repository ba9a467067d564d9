// Internal interface of `kvlm convert`: each importer (HF, GGUF, llama2.c, synthetic) opens its source as a
// ConvertSource - metadata plus a row reader producing f32 in kvlm layout - and the driver streams it into a
// ModelWriter tensor by tensor. Invariant: source.tensors has the names and shapes of
// expected_tensors(config, ...) in its order.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/model_file.h"

namespace kvlm {

// What `kvlm convert` is asked to do (its flags).
struct ConvertOptions {
    std::string source;          // HF directory, .gguf, or llama2.c .bin
    std::string output;          // .kvlm path
    std::string dtype;           // "" = keep each tensor's source type; else every matrix in this type
    std::string tokenizer;       // tokenizer source overriding/adding to what SOURCE carries
    std::string synthetic;       // shape name or config.json path: write random weights instead
    uint64_t seed = 1234;        // for --synthetic
    bool quiet = false;          // no progress bar
    bool force = false;          // replace an existing output that is not a .kvlm model
    std::string sampling;        // --sampling "temp=0.2,top-p=0.9": recommended defaults to store (over the source's)
};

struct ConvertSource {
    ModelMetadata metadata;
    DType default_dtype = DType::f32;  // the matrices' main type (what ConvertSummary reports without --dtype)
    // Canonical order and kvlm shapes (offset/checksum unused); dtype = what each tensor becomes without --dtype
    // (1-D tensors: f32), which is the type the source stores it in when read_stored_rows is set.
    std::vector<TensorInfo> tensors;
    std::string kind;                  // "hf", "gguf", "llama2c", "synthetic"
    // Writes rows [row_begin, row_begin + n_rows) of tensors[index] as f32, in kvlm layout (q/k rows already in
    // rotate_half order). A row is one index of shape[0]: row_len = n_elements / shape[0] (1 for 1-D tensors).
    std::function<void(size_t index, int64_t row_begin, int64_t n_rows, float* out)> read_rows;
    // Optional (GGUF): the same rows as the source stores them, in tensors[index].dtype, so that quantized
    // blocks are copied bit for bit instead of dequantized and quantized again.
    std::function<void(size_t index, int64_t row_begin, int64_t n_rows, void* out)> read_stored_rows;
};

struct ConvertSummary {
    ModelConfig config;
    DType dtype = DType::f32;  // --dtype, else the source's main matrix type
    std::string types;         // every tensor type written with its count: "q4_1 210, q8_0 1, f32 61"
    // Matrices --dtype could not quantize (rows not whole 32-element blocks), written as f16 instead.
    std::vector<std::string> kept_f16;
    std::string kind;
    size_t n_tensors = 0;
    uint64_t n_bytes = 0;      // tensor bytes written
    std::string fingerprint;
    double seconds = 0;
};

// Importers. `tokenizer_path` (may be empty) overrides or supplies the tokenizer.
ConvertSource open_hf_source(const std::string& dir, const std::string& tokenizer_path);
ConvertSource open_gguf_source(const std::string& path, const std::string& tokenizer_path);
ConvertSource open_llama2c_source(const std::string& path, const std::string& tokenizer_path);
// `shape`: smollm2-135m, llama-3.2-1b, llama-3-8b, or a path to a Hugging Face config.json.
ConvertSource make_synthetic_source(const std::string& shape, const std::string& tokenizer_path, uint64_t seed);

// Picks the importer for options.source (directory = HF, GGUF magic, else llama2.c) or --synthetic, and
// writes options.output. show_progress draws a bar on stderr (only when stderr is a terminal).
ConvertSummary convert_model(const ConvertOptions& options, bool show_progress);

// Shared helpers of the importers.
// Hugging Face config.json -> ModelConfig (architecture checked, defaults as in transformers).
ModelConfig hf_config_from_json(const std::string& config_path);
// chat_template.jinja, else tokenizer_config.json "chat_template" in `dir`; "" if neither.
std::string hf_chat_template(const std::string& dir);
// Adds generation_config.json eos ids of `dir` (if present) to tokenizer.stop_ids.
void add_generation_config_stops(const std::string& dir, TokenizerData* tokenizer);
// The sampling defaults generation_config.json in `dir` sets (temperature, top_k, top_p, min_p,
// repetition_penalty; "do_sample": false means greedy, as in transformers); empty without the file.
SamplingSettings hf_sampling_defaults(const std::string& dir);
// Pads the tokenizer to n_vocab with "<unused_N>" tokens (type unused); throws Error naming `source` if it
// has more tokens than the model's vocabulary.
void fit_tokenizer_to_vocab(TokenizerData* tokenizer, int32_t n_vocab, const std::string& source);
// kvlm tensor shapes are [shape[0], row_len...]: number of rows and elements per row.
int64_t tensor_n_rows(const TensorInfo& info);
int64_t tensor_row_len(const TensorInfo& info);

}  // namespace kvlm
