#include "fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "format/model_file.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace kvlm::fuzz {

namespace {

void remove_scratch_dir() {
    std::error_code ignored;
    fs::remove_all(scratch_dir(), ignored);
}

}  // namespace

const std::string& scratch_dir() {
    // Never destroyed: the atexit handler registered here runs after the destructors of statics
    // constructed later, and must still read the path.
    static const std::string& dir = *[] {
        fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        fs::path path = base / ("kvlm-fuzz-" + std::to_string(getpid()));
        fs::create_directories(path);
        std::atexit(remove_scratch_dir);
        return new std::string(path.string());
    }();
    return dir;
}

std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
    std::string path = scratch_dir() + "/" + name;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) {
        std::fprintf(stderr, "fuzz: cannot write scratch file %s\n", path.c_str());
        std::abort();
    }
    return path;
}

std::string write_scratch(const std::string& name, std::string_view text) {
    return write_scratch(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

std::string test_data(const std::string& relative) {
    const char* env = std::getenv("KVLM_TEST_DATA");
    fs::path root = env && *env ? fs::path(env) : fs::path("../shared/models");
    fs::path path = root / relative;
    if (!fs::exists(path)) {
        std::fprintf(stderr, "fuzz: test data %s is missing (set KVLM_TEST_DATA)\n", path.c_str());
        std::abort();
    }
    return path.string();
}

void convert_if_small_and_verify(const ConvertSource& opened, const std::string& source, const std::string& tokenizer,
                                 const char* target) {
    constexpr int64_t kMaxConvertElements = int64_t(1) << 17;  // whole model: keeps each input fast
    int64_t n_elements = 0;
    for (const TensorInfo& t : opened.tensors) n_elements += tensor_n_rows(t) * tensor_row_len(t);
    if (n_elements > kMaxConvertElements) return;
    ConvertOptions options;
    options.source = source;
    options.tokenizer = tokenizer;
    options.output = scratch_dir() + "/out.kvlm";
    options.quiet = true;
    convert_model(options, false);
    try {
        ModelFile::open(options.output)->verify();
    } catch (const Error& e) {
        std::fprintf(stderr, "%s: converted model does not load: %s\n", target, e.what());
        std::abort();
    }
}

}  // namespace kvlm::fuzz
