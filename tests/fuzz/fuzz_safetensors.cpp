// safetensors reader (src/import/safetensors.cpp) and the Hugging Face importer (src/import/convert_hf.cpp). The first
// byte picks what the rest is (mode % 3):
//   0: one .safetensors file: open, then small element ranges of every supported tensor read as f32;
//   1: u32 length + model.safetensors.index.json, then the bytes of its one shard
//      model-00001-of-00001.safetensors: SafetensorsModel::open_dir;
//   2: u32 length + config.json, then model.safetensors: the HF importer (tokenizer: stories260K's
//      tok512.bin); a small model converts, and the .kvlm written must open and verify.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "fuzz/fuzz_util.h"
#include "import/convert.h"
#include "import/safetensors.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxReadElements = 256;                  // per range

// First, middle and last elements of each supported tensor.
void read_tensor(const kvlm::SafetensorsTensor& t) {
    if (!t.supported) return;
    const int64_t n = t.n_elements();
    std::vector<float> out(size_t(std::min(n, kMaxReadElements)));
    for (int64_t begin : {int64_t(0), n / 2, n - int64_t(out.size())})
        kvlm::safetensors_read_f32(t, begin, std::min<int64_t>(int64_t(out.size()), n - begin), out.data());
}

void read_file(const std::string& path) {
    auto st = kvlm::SafetensorsFile::open(path);
    for (const kvlm::SafetensorsTensor& t : st->tensors()) read_tensor(t);
}

// A fresh directory holding `files` (name -> bytes).
std::string make_dir(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
    std::string dir = kvlm::fuzz::scratch_dir() + "/" + name;
    fs::remove_all(dir);
    for (const auto& [file, bytes] : files) kvlm::fuzz::write_scratch(name + "/" + file, bytes);
    return dir;
}

// Splits "u32 length + first part + second part"; false if too short.
bool split(const uint8_t* data, size_t size, std::string* first, std::string* second) {
    uint32_t n = 0;
    if (size < 4) return false;
    std::memcpy(&n, data, 4);
    if (n > size - 4) return false;
    first->assign(reinterpret_cast<const char*>(data + 4), n);
    second->assign(reinterpret_cast<const char*>(data + 4 + n), size - 4 - n);
    return true;
}

void read_sharded(const std::string& index, const std::string& shard) {
    std::string dir = make_dir("sharded", {{"model.safetensors.index.json", index},
                                           {"model-00001-of-00001.safetensors", shard}});
    auto model = kvlm::SafetensorsModel::open_dir(dir);
    for (const std::string& name : model->names()) {
        const kvlm::SafetensorsTensor* t = model->find(name);
        if (!t) std::abort();  // names() and find() disagree
        KVLM_FUZZ_ACCEPT_ERRORS(read_tensor(model->require_supported(name)));
    }
}

void convert_hf(const std::string& config, const std::string& weights) {
    std::string dir = make_dir("hf", {{"config.json", config}, {"model.safetensors", weights}});
    const std::string tokenizer = kvlm::fuzz::test_data("stories260K/tok512.bin");
    kvlm::fuzz::convert_if_small_and_verify(kvlm::open_hf_source(dir, tokenizer), dir, tokenizer, "fuzz_safetensors");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] % 3;
    data++, size--;
    std::string first, second;
    if (mode == 0) {
        KVLM_FUZZ_ACCEPT_ERRORS(read_file(kvlm::fuzz::write_scratch("fuzz.safetensors", data, size)));
    } else if (split(data, size, &first, &second)) {
        if (mode == 1) KVLM_FUZZ_ACCEPT_ERRORS(read_sharded(first, second));
        if (mode == 2) KVLM_FUZZ_ACCEPT_ERRORS(convert_hf(first, second));
    }
    return 0;
}
