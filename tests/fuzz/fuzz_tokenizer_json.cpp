// Hugging Face tokenizer.json importer (tokenizer_from_hf_json, src/import/tokenizer/from_hf.cpp) on arbitrary
// bytes: the input is a tokenizer.json, optionally followed by kConfigSeparator and a tokenizer_config.json.
// A tokenizer that imports must build, encode a fixed text to ids inside its vocabulary and decode them.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_util.h"
#include "import/tokenizer/tokenizer_import.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

const std::string kConfigSeparator = "\n--- tokenizer_config.json ---\n";

// Special tokens of the seeds, spaces, digits, U+2581, accents, an invalid byte and an emoji.
const char* const kText =
    "<|im_start|>user\nHello  world! 12345 caf\xc3\xa9 \xe2\x96\x81x<s> \xff\xf0\x9f\x98\x80<|im_end|>";

void check_ids(const kvlm::Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
        if (id < 0 || id >= tokenizer.n_vocab()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    const size_t cut = input.find(kConfigSeparator);
    const std::string json_path = kvlm::fuzz::write_scratch("hf/tokenizer.json", input.substr(0, cut));
    std::string config_path;
    if (cut != std::string::npos)
        config_path =
            kvlm::fuzz::write_scratch("hf/tokenizer_config.json", input.substr(cut + kConfigSeparator.size()));
    kvlm::TokenizerData tokenizer_data;
    try {
        tokenizer_data = kvlm::tokenizer_from_hf_json(json_path, config_path);
    } catch (const kvlm::Error&) {
        return 0;
    }
    const kvlm::Tokenizer tokenizer(tokenizer_data);  // the importer validated it: must not throw
    for (bool parse_special : {true, false}) {
        const std::vector<int32_t> ids = tokenizer.encode(kText, true, parse_special);
        check_ids(tokenizer, ids);
        tokenizer.decode(ids);
    }
    return 0;
}
