// llama2.c checkpoint reader (src/import/llama2c_checkpoint.cpp), its importer (src/import/convert_llama2c.cpp) and the
// tokenizer.bin reader (src/import/tokenizer/from_llama2c.cpp). The first byte picks what the rest is (mode % 3):
//   0: a checkpoint: open, small element ranges of every tensor read as f32, and a small model converted
//      with stories260K's tok512.bin (the .kvlm written must open and verify);
//   1: a tokenizer.bin read to its end (n_vocab 0), then built into a Tokenizer;
//   2: a tokenizer.bin read for exactly 512 tokens, as for stories260K.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "fuzz/fuzz_util.h"
#include "import/convert.h"
#include "import/llama2c_checkpoint.h"
#include "import/tokenizer/tokenizer_import.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

constexpr int64_t kMaxReadElements = 256;                  // per range

void read_checkpoint(const std::string& path) {
    auto ck = kvlm::Llama2cCheckpoint::open(path);
    for (const kvlm::Llama2cTensor& t : ck->tensors()) {
        const int64_t n = t.n_elements();
        std::vector<float> out(size_t(std::min(n, kMaxReadElements)));
        for (int64_t begin : {int64_t(0), n / 2, n - int64_t(out.size())})
            ck->read_f32(t, begin, std::min<int64_t>(int64_t(out.size()), n - begin), out.data());
    }
}

void convert_checkpoint(const std::string& path) {
    const std::string tokenizer = kvlm::fuzz::test_data("stories260K/tok512.bin");
    kvlm::fuzz::convert_if_small_and_verify(kvlm::open_llama2c_source(path, tokenizer), path, tokenizer, "fuzz_llama2c");
}

void read_tokenizer(const std::string& path, int32_t n_vocab) {
    kvlm::Tokenizer tokenizer(kvlm::tokenizer_from_llama2c(path, n_vocab));
    tokenizer.decode(tokenizer.encode("Once upon a time <s> 12"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] % 3;
    // The importers pick the reader by content and extension: keep ".bin" as llama2.c files have.
    std::string path = kvlm::fuzz::write_scratch("fuzz.bin", data + 1, size - 1);
    if (mode == 0) {
        KVLM_FUZZ_ACCEPT_ERRORS(read_checkpoint(path));
        KVLM_FUZZ_ACCEPT_ERRORS(convert_checkpoint(path));
    } else {
        KVLM_FUZZ_ACCEPT_ERRORS(read_tokenizer(path, mode == 1 ? 0 : 512));
    }
    return 0;
}
