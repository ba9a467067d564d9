// The other tokenizer files kvlm takes from strangers, through load_tokenizer_source
// (src/import/tokenizer/tokenizer_import.cpp): tokenizer.model (SentencePiece protobuf or tiktoken text, detected) with an
// optional tokenizer_config.json, GPT-2 style vocab.json + merges.txt (+ added_tokens.json), and llama2.c
// tokenizer.bin. Input: one selector byte (kind = byte % 3; >= 128: load the directory instead of the file),
// then the files separated by kFileSeparator. An imported tokenizer must build, encode and decode.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "import/tokenizer/tokenizer_import.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

const std::string kFileSeparator = "\n--- next file ---\n";
const char* const kText = "<|begin_of_text|>Hello  world! 12345 caf\xc3\xa9 \xe2\x96\x81x<s>\n\xff\xf0\x9f\x98\x80";

struct Kind {
    const char* dir;
    std::vector<const char*> files;  // in input order; missing parts are removed from the directory
};
const Kind kKinds[3] = {
    {"model", {"tokenizer.model", "tokenizer_config.json"}},
    {"vocab", {"vocab.json", "merges.txt", "added_tokens.json"}},
    {"llama2c", {"tokenizer.bin"}},
};

std::vector<std::string> split_files(const std::string& input) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t cut; (cut = input.find(kFileSeparator, start)) != std::string::npos;
         start = cut + kFileSeparator.size())
        parts.push_back(input.substr(start, cut - start));
    parts.push_back(input.substr(start));
    return parts;
}

// Writes the kind's files (the first one always, the rest when the input has them) and returns the directory.
std::string write_files(const Kind& kind, const std::vector<std::string>& parts) {
    const std::string dir = kvlm::fuzz::scratch_dir() + "/" + kind.dir;
    for (size_t k = 0; k < kind.files.size(); ++k) {
        const std::string name = std::string(kind.dir) + "/" + kind.files[k];
        if (k == 0 || k < parts.size()) {
            kvlm::fuzz::write_scratch(name, k < parts.size() ? parts[k] : std::string());
        } else {
            std::error_code ignored;
            std::filesystem::remove(kvlm::fuzz::scratch_dir() + "/" + name, ignored);
        }
    }
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const Kind& kind = kKinds[data[0] % 3];
    const bool via_dir = data[0] >= 128;
    const std::string dir =
        write_files(kind, split_files(std::string(reinterpret_cast<const char*>(data) + 1, size - 1)));
    const bool is_vocab = kind.files.size() == 3;  // vocab.json + merges.txt are only found as a directory
    const std::string path = via_dir || is_vocab ? dir : dir + "/" + kind.files[0];
    kvlm::TokenizerData tokenizer_data;
    try {
        tokenizer_data = kvlm::load_tokenizer_source(path, via_dir ? 512 : 0);
    } catch (const kvlm::Error&) {
        return 0;
    }
    const kvlm::Tokenizer tokenizer(tokenizer_data);  // the importer validated it: must not throw
    for (bool parse_special : {true, false}) {
        const std::vector<int32_t> ids = tokenizer.encode(kText, true, parse_special);
        for (int32_t id : ids)
            if (id < 0 || id >= tokenizer.n_vocab()) std::abort();
        tokenizer.decode(ids);
    }
    return 0;
}
