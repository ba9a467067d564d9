// The Hugging Face JSON side files of src/import/convert_hf.cpp on arbitrary bytes, each input used as all three:
// config.json (hf_config_from_json: architecture, shape, rope_scaling; an accepted config must validate
// and give a sane tensor list), generation_config.json (eos ids as stop ids, sampling defaults) and tokenizer_config.json
// (the chat template).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "format/model_file.h"
#include "fuzz/fuzz_util.h"
#include "import/convert.h"
#include "util/error.h"

namespace {

void read_config(const std::string& path) {
    kvlm::ModelConfig config = kvlm::hf_config_from_json(path);
    try {
        config.validate("fuzz");
    } catch (const kvlm::Error& e) {
        std::fprintf(stderr, "fuzz_hf_config: accepted config does not validate: %s\n", e.what());
        std::abort();
    }
    for (const kvlm::TensorInfo& t : kvlm::expected_tensors(config, kvlm::DType::bf16))
        if (t.n_bytes == 0) std::abort();  // sizes are positive and do not overflow
}

void read_generation_config(const std::string& dir) {
    kvlm::TokenizerData tokenizer;
    for (int i = 0; i < 512; i++) tokenizer.tokens.push_back("t" + std::to_string(i));
    tokenizer.eos_id = 2;
    kvlm::add_generation_config_stops(dir, &tokenizer);
    const kvlm::SamplingSettings defaults = kvlm::hf_sampling_defaults(dir);
    try {  // what it returns (rather than refuses) must be in range
        kvlm::check_sampling_settings(defaults);
    } catch (const kvlm::Error&) {
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string dir = kvlm::fuzz::scratch_dir() + "/hf";
    for (const char* name : {"config.json", "generation_config.json", "tokenizer_config.json"})
        kvlm::fuzz::write_scratch(std::string("hf/") + name, data, size);
    KVLM_FUZZ_ACCEPT_ERRORS(read_config(dir + "/config.json"));
    KVLM_FUZZ_ACCEPT_ERRORS(read_generation_config(dir));
    KVLM_FUZZ_ACCEPT_ERRORS(kvlm::hf_chat_template(dir));
    return 0;
}
