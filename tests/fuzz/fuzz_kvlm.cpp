// .kvlm model file reader (src/format/model_file*.cpp) on arbitrary bytes: open, verify, the tokenizer built from
// the metadata and every expected tensor required; a small model that opens also loads on the CPU backend
// and generates a few tokens (weights and tokenizer from the file, so NaNs and odd vocabularies reach the
// forward pass and the sampler). Each input is tried as is, then with its metadata and directory checksums
// recomputed: mutations rarely keep them right, and hostile metadata must get past them to reach the rest.
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "format/model_file.h"
#include "fuzz/fuzz_util.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

constexpr int64_t kMaxRunParams = int64_t(1) << 17;  // tiny models only: generation is slow under ASan

void read_model(const std::string& path) {
    auto model = kvlm::ModelFile::open(path);
    KVLM_FUZZ_ACCEPT_ERRORS(model->verify());
    kvlm::Tokenizer tokenizer(model->metadata().tokenizer);
    tokenizer.decode(tokenizer.encode("Once upon a time <s> 12"));
    for (const kvlm::TensorInfo& t : kvlm::expected_tensors(model->config(), kvlm::DType::f32))
        model->require(t.name, t.shape);
}

void run_model(const std::string& path) {
    const kvlm::ModelConfig config = kvlm::ModelFile::open(path)->config();
    if (config.n_params() > kMaxRunParams) return;
    kvlm::EngineOptions options;
    options.device = "cpu";
    options.n_threads = 1;
    options.n_ctx = std::min(32, config.n_ctx);
    options.quiet = true;
    kvlm::Engine engine(path, options);
    std::vector<int32_t> prompt = engine.tokenizer().encode("Once upon a time");
    if (prompt.empty()) prompt.push_back(0);
    if (int32_t(prompt.size()) + 4 > engine.n_ctx()) return;
    kvlm::SamplingParams params;
    kvlm::Sampler sampler(params);
    kvlm::Sequence seq;
    kvlm::generate(engine, seq, prompt, 4, sampler, [](const std::string&) {});
    engine.prefix_cache().release(seq);
}

void read_and_run(const std::string& name, const uint8_t* data, size_t size) {
    std::string path = kvlm::fuzz::write_scratch(name, data, size);
    try {
        read_model(path);
    } catch (const kvlm::Error&) {
        return;  // refused: nothing to run
    }
    KVLM_FUZZ_ACCEPT_ERRORS(run_model(path));
}

uint64_t load_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

// Writes at header offset `checksum_at` the XXH3-64 of the section whose u64 offset and size are at
// `section_at` (docs/FORMAT.md: metadata 16 -> 72, directory 32 -> 80). False if it lies outside the input.
bool fix_checksum(std::vector<uint8_t>& bytes, size_t section_at, size_t checksum_at) {
    uint64_t offset = load_u64(&bytes[section_at]), n = load_u64(&bytes[section_at + 8]);
    if (offset > bytes.size() || n > bytes.size() - offset) return false;
    uint64_t checksum = XXH3_64bits(bytes.data() + offset, size_t(n));
    std::memcpy(&bytes[checksum_at], &checksum, 8);
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    read_and_run("fuzz.kvlm", data, size);
    if (size < 128) return 0;
    std::vector<uint8_t> fixed(data, data + size);
    if (fix_checksum(fixed, 16, 72) && fix_checksum(fixed, 32, 80) && std::memcmp(fixed.data(), data, size) != 0)
        read_and_run("fixed.kvlm", fixed.data(), fixed.size());
    return 0;
}
