// Regex pre-tokenizers over PCRE2 (UTF + UCP, invalid UTF-8 tolerated, JIT when available).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "util/error.h"

namespace kvlm {

namespace {

// GPT-2's pattern as in HF's ByteLevel pre-tokenizer.
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 and Qwen2 use (?i:'s|...); spelled out here so matching does not depend on Unicode case folding
// (e.g. U+017F) and equals llama.cpp's adapted patterns.
const char* const kLlama3Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// SmolLM / StarCoder: HF Digits(individual_digits) then ByteLevel.
const char* const kDigitPattern = R"(\p{N})";

std::vector<const char*> patterns_for(const std::string& canonical) {
    if (canonical == "gpt2") return {kGpt2Pattern};
    if (canonical == "llama3") return {kLlama3Pattern};
    if (canonical == "qwen2") return {kQwen2Pattern};
    if (canonical == "smollm") return {kDigitPattern, kGpt2Pattern};
    return {};
}

}  // namespace

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    ~Regex() {
        if (code) pcre2_code_free(code);
    }
};

std::string PreTokenizer::canonical_name(const std::string& name) {
    if (name == "gpt2" || name == "gpt-2" || name == "default" || name == "" || name == "mpt" || name == "olmo")
        return "gpt2";
    if (name == "llama3" || name == "llama-bpe" || name == "llama-v3" || name == "dbrx" || name == "smaug-bpe")
        return "llama3";
    if (name == "smollm" || name == "starcoder" || name == "refact" || name == "codeshell") return "smollm";
    if (name == "qwen2" || name == "stablelm2") return "qwen2";
    return "";
}

PreTokenizer::PreTokenizer(const std::string& name) {
    name_ = canonical_name(name);
    if (name_.empty())
        throw_error("tokenizer: unknown pre-tokenizer '{}', expected one of gpt2, llama3, smollm, qwen2", name);
    for (const char* pattern : patterns_for(name_)) {
        int error_code = 0;
        PCRE2_SIZE error_offset = 0;
        auto regex = std::make_unique<Regex>();
        regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset,
                                    nullptr);
        if (!regex->code) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error_code, message, sizeof(message));
            throw_error("tokenizer: pre-tokenizer '{}' regex failed to compile at {}: {}", name_, error_offset,
                        reinterpret_cast<const char*>(message));
        }
        pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
        regexes_.push_back(std::move(regex));
    }
}

PreTokenizer::~PreTokenizer() = default;

const std::string& PreTokenizer::name() const { return name_; }

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    if (text.empty()) return pieces;
    pieces.push_back(text);
    // Long runs of whitespace backtrack deeply; give JIT matching a heap stack instead of the 32 KiB default.
    std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> jit_stack(
        pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr), &pcre2_jit_stack_free);
    std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(
        pcre2_match_context_create(nullptr), &pcre2_match_context_free);
    if (jit_stack && context) pcre2_jit_stack_assign(context.get(), nullptr, jit_stack.get());

    for (const auto& regex : regexes_) {
        std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
            pcre2_match_data_create_from_pattern(regex->code, nullptr), &pcre2_match_data_free);
        if (!match) throw_error("tokenizer: out of memory creating PCRE2 match data");
        std::vector<std::string_view> next;
        next.reserve(pieces.size() * 2);
        for (std::string_view piece : pieces) {
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
            size_t offset = 0, gap_start = 0;
            while (offset < piece.size()) {
                const int rc = pcre2_match(regex->code, subject, piece.size(), offset, 0, match.get(), context.get());
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    PCRE2_UCHAR message[256];
                    pcre2_get_error_message(rc, message, sizeof(message));
                    throw_error("tokenizer: pre-tokenizer '{}' failed on a {}-byte text: {}", name_, piece.size(),
                                reinterpret_cast<const char*>(message));
                }
                const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
                const size_t start = ovector[0], end = ovector[1];
                if (end == start) {  // empty match: step over one byte and keep it in the gap
                    offset = start + 1;
                    continue;
                }
                if (start > gap_start) next.push_back(piece.substr(gap_start, start - gap_start));
                next.push_back(piece.substr(start, end - start));
                gap_start = offset = end;
            }
            if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
        }
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace kvlm
