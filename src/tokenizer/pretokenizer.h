// Regex pre-tokenizers of byte-level BPE, chosen by name (llama.cpp's tokenizer.ggml.pre names).
// split() cuts text into pieces that concatenate back to exactly the input: regex matches and the gaps
// between them both become pieces, so no byte (not even invalid UTF-8) is ever dropped.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

class PreTokenizer {
public:
    // Accepts canonical names and their aliases (see canonical_name); throws Error for others.
    explicit PreTokenizer(const std::string& name);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Pieces point into `text`. Thread-safe.
    std::vector<std::string_view> split(std::string_view text) const;
    const std::string& name() const;

    // "gpt2", "llama3", "smollm" or "qwen2" for a known name or alias ("default", "gpt-2", "llama-bpe",
    // "starcoder", ...); "" if unknown.
    static std::string canonical_name(const std::string& name);

private:
    struct Regex;
    std::string name_;
    std::vector<std::unique_ptr<Regex>> regexes_;  // applied in order, each to the pieces of the previous
};

}  // namespace kvlm
