// Tokenizer from GGUF tokenizer.ggml.* metadata ("llama" -> spm, "gpt2" -> bpe).
#include "import/gguf.h"
#include "import/tokenizer/common.h"
#include "import/tokenizer/tokenizer_import.h"
#include "tokenizer/pretokenizer.h"
#include "util/error.h"

namespace kvlm {

TokenizerData tokenizer_from_gguf(const GgufFile& gguf) {
    const std::string& path = gguf.path();
    TokenizerData data;
    const std::string model = gguf.get_string("tokenizer.ggml.model");
    if (model == "llama") {
        data.type = "spm";
    } else if (model == "gpt2") {
        data.type = "bpe";
    } else {
        throw_error("{}: tokenizer.ggml.model is '{}', expected 'llama' (SentencePiece) or 'gpt2' (byte-level BPE)",
                    path, model);
    }
    data.tokens = gguf.get_string_array("tokenizer.ggml.tokens");
    const size_t n_vocab = data.tokens.size();
    if (gguf.has("tokenizer.ggml.scores")) data.scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (gguf.has("tokenizer.ggml.token_type")) data.token_types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (!data.scores.empty() && data.scores.size() != n_vocab)
        throw_error("{}: tokenizer.ggml.scores has {} entries, expected {} (one per token)", path, data.scores.size(),
                    n_vocab);
    if (!data.token_types.empty() && data.token_types.size() != n_vocab)
        throw_error("{}: tokenizer.ggml.token_type has {} entries, expected {} (one per token)", path,
                    data.token_types.size(), n_vocab);
    if (data.type == "spm" && data.scores.empty())
        throw_error("{}: tokenizer.ggml.scores is missing, expected it for a 'llama' tokenizer", path);

    if (data.type == "bpe") {
        data.merges = gguf.get_string_array("tokenizer.ggml.merges");
        const std::string pre = gguf.get_string_or("tokenizer.ggml.pre", "default");
        data.pre = PreTokenizer::canonical_name(pre);
        if (data.pre.empty())
            throw_error("{}: tokenizer.ggml.pre is '{}', expected one of gpt-2, llama-bpe, starcoder, smollm, qwen2",
                        path, pre);
    }
    auto id_or = [&](const char* key) { return static_cast<int32_t>(gguf.get_int_or(key, -1)); };
    data.bos_id = id_or("tokenizer.ggml.bos_token_id");
    data.eos_id = id_or("tokenizer.ggml.eos_token_id");
    data.unk_id = id_or("tokenizer.ggml.unknown_token_id");
    data.pad_id = id_or("tokenizer.ggml.padding_token_id");
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        const int32_t id = id_or(key);
        if (id >= 0) data.stop_ids.push_back(id);
    }
    const bool spm = data.type == "spm";
    data.add_bos = gguf.get_bool_or("tokenizer.ggml.add_bos_token", spm);
    data.add_space_prefix = spm && gguf.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    tokenizer_import::finish(data, path);
    return data;
}

}  // namespace kvlm
