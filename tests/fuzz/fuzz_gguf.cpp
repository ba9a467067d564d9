// GGUF reader (src/import/gguf.cpp) and GGUF importer (src/import/convert_gguf.cpp) on arbitrary bytes: every metadata
// value through every typed getter, small tensors dequantized, the tokenizer built, and a small model
// converted to .kvlm, which must then open and verify: the converter never writes a file kvlm refuses.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "fuzz/fuzz_util.h"
#include "import/convert.h"
#include "import/gguf.h"
#include "import/tokenizer/tokenizer_import.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

constexpr int64_t kMaxDequantElements = int64_t(1) << 16;  // per tensor

// Each getter returns or refuses with kvlm::Error (wrong type, value out of range).
void read_value(const kvlm::GgufFile& g, const std::string& key) {
    KVLM_FUZZ_ACCEPT_ERRORS(g.get_string(key));
    KVLM_FUZZ_ACCEPT_ERRORS(g.get_int(key));
    KVLM_FUZZ_ACCEPT_ERRORS(g.get_float(key));
    KVLM_FUZZ_ACCEPT_ERRORS(g.get_bool(key));
    KVLM_FUZZ_ACCEPT_ERRORS(g.get_string_array(key));
    KVLM_FUZZ_ACCEPT_ERRORS(g.get_float_array(key));
    KVLM_FUZZ_ACCEPT_ERRORS(g.get_int_array(key));
}

void dequantize_small_tensors(const kvlm::GgufFile& g) {
    for (const kvlm::GgufTensor& t : g.tensors()) {
        if (t.n_elements() > kMaxDequantElements) continue;
        std::vector<float> out(size_t(t.n_elements()));
        KVLM_FUZZ_ACCEPT_ERRORS(g.dequantize(t, out.data()));
    }
}

void build_tokenizer(const kvlm::GgufFile& g) {
    kvlm::TokenizerData data = kvlm::tokenizer_from_gguf(g);
    kvlm::Tokenizer tokenizer(data);
    tokenizer.decode(tokenizer.encode("Hello world <s> 12"));
}

void read_gguf(const std::string& path) {
    auto g = kvlm::GgufFile::open(path);
    for (const std::string& key : g->keys()) read_value(*g, key);
    dequantize_small_tensors(*g);
    KVLM_FUZZ_ACCEPT_ERRORS(build_tokenizer(*g));
}

// A model the importer accepts converts; the .kvlm it writes must open and verify.
void convert_gguf(const std::string& path) {
    kvlm::fuzz::convert_if_small_and_verify(kvlm::open_gguf_source(path, ""), path, "", "fuzz_gguf");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = kvlm::fuzz::write_scratch("fuzz.gguf", data, size);
    KVLM_FUZZ_ACCEPT_ERRORS(read_gguf(path));
    KVLM_FUZZ_ACCEPT_ERRORS(convert_gguf(path));
    return 0;
}
