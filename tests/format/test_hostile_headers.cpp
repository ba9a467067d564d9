// Resource limits: model files whose headers claim absurd sizes (huge vocabularies, tensors, layer and element
// counts) go through the CLI (`kvlm inspect`, `run`, `convert`) and must be refused quickly with an error
// naming the problem - before any large allocation, which would show up as slowness, a bad_alloc or a crash.
#include <doctest/doctest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

constexpr double kMaxSeconds = 20;  // generous for sanitizer builds; a refusal takes milliseconds

std::string stories(const std::string& name) { return data_path("stories260K/" + name); }
std::string stories_kvlm() { return converted_model("stories-gguf", {stories("stories260K.gguf")}); }

template <typename T>
void poke(std::string& bytes, size_t offset, T value) {
    REQUIRE(offset + sizeof(T) <= bytes.size());
    std::memcpy(&bytes[offset], &value, sizeof(T));
}

template <typename T>
std::string le(T value) {
    return std::string(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Offset just past the first occurrence of `needle` at or after `from`.
size_t after(const std::string& bytes, const std::string& needle, size_t from = 0) {
    size_t pos = bytes.find(needle, from);
    REQUIRE_MESSAGE(pos != std::string::npos, "not found: " << needle);
    return pos + needle.size();
}

// .kvlm strings are u32-length-prefixed; a metadata record is key, u32 type, u64 size, value.
size_t kvlm_value(const std::string& bytes, const std::string& key) {
    return after(bytes, le(uint32_t(key.size())) + key) + 4 + 8;
}
// GGUF strings are u64-length-prefixed; a metadata entry is key, u32 type, value.
size_t gguf_value(const std::string& bytes, const std::string& key) {
    return after(bytes, le(uint64_t(key.size())) + key) + 4;
}

// Runs kvlm and expects a plain refusal: exit code 1 (not a signal or sanitizer abort), fast, an "error:"
// line containing every needle, and no sign of a failed allocation.
void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& needles) {
    auto start = std::chrono::steady_clock::now();
    CliResult r = run_kvlm(args);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO("kvlm " << args[0] << " " << args[1] << " -> exit " << r.exit_code << ", stderr: " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(seconds < kMaxSeconds);
    CHECK(r.err.find("error:") != std::string::npos);
    for (const std::string& n : needles) CHECK_MESSAGE(r.err.find(n) != std::string::npos, "missing: " << n);
    CHECK(r.err.find("bad_alloc") == std::string::npos);
    CHECK(r.err.find("Sanitizer") == std::string::npos);
}

// A GGUF v3 file from raw metadata entries and tensor infos (no data section: tensors of an unknown ggml
// type take no bytes, which is enough to reach the importer's checks).
struct GgufBuilder {
    std::string kv, infos;
    uint64_t n_kv = 0, n_tensors = 0;
    static std::string str(const std::string& s) { return le(uint64_t(s.size())) + s; }
    void u32(const std::string& key, uint32_t v) { kv += str(key) + le(uint32_t(4)) + le(v), n_kv++; }
    void string(const std::string& key, const std::string& v) { kv += str(key) + le(uint32_t(8)) + str(v), n_kv++; }
    void tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t ggml_type) {
        infos += str(name) + le(uint32_t(dims.size()));
        for (uint64_t d : dims) infos += le(d);
        infos += le(ggml_type) + le(uint64_t(0));
        n_tensors++;
    }
    std::string bytes() const {
        std::string out = "GGUF" + le(uint32_t(3)) + le(n_tensors) + le(n_kv) + kv + infos;
        return out + std::string((32 - out.size() % 32) % 32, '\0');
    }
};

std::string safetensors(const std::string& header_json, const std::string& data) {
    return le(uint64_t(header_json.size())) + header_json + data;
}

std::string hf_dir(const TempDir& dir, const std::string& name, const std::string& weights) {
    std::string path = dir.file(name);
    std::filesystem::create_directories(path);
    write_file(path + "/config.json", read_file(stories("hf/config.json")));
    write_file(path + "/model.safetensors", weights);
    return path;
}

// A synthetic-conversion config.json of the given shape (llama, tied, theta 10000).
std::string config_json(int64_t hidden, int64_t ff, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab) {
    return "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": " + std::to_string(hidden) +
           ", \"intermediate_size\": " + std::to_string(ff) + ", \"num_hidden_layers\": " + std::to_string(layers) +
           ", \"num_attention_heads\": " + std::to_string(heads) +
           ", \"num_key_value_heads\": " + std::to_string(kv_heads) + ", \"vocab_size\": " + std::to_string(vocab) +
           ", \"head_dim\": 128, \"tie_word_embeddings\": true}";
}

uint64_t free_disk_bytes(const std::string& dir) {
    struct statvfs st {};
    return statvfs(dir.c_str(), &st) == 0 ? uint64_t(st.f_bavail) * st.f_frsize : 0;
}

}  // namespace

TEST_CASE("hostile headers: .kvlm files claiming absurd sizes are refused by inspect and run") {
    if (!have_data(stories("stories260K.gguf"))) return;
    TempDir dir;
    const std::string good = read_file(stories_kvlm());
    auto refuse = [&](const std::string& name, std::string bytes, const std::vector<std::string>& needles) {
        CAPTURE(name);
        std::string path = dir.file(name + ".kvlm");
        write_file(path, bytes);
        std::vector<std::string> with_path = needles;
        with_path.push_back(path);
        expect_refused({"inspect", path}, with_path);
        expect_refused({"run", "-m", path, "-p", "Once", "-n", "4", "--device", "cpu"}, with_path);
    };
    std::string b = good;
    poke<uint64_t>(b, 48, uint64_t(1) << 40);  // header n_tensors
    refuse("tensor-count", b, {"claims 1099511627776 tensors"});
    b = good;
    poke<uint64_t>(b, 24, uint64_t(1) << 62);  // header metadata_size
    refuse("metadata-size", b, {"truncated", "metadata section"});
    b = good;
    poke<int32_t>(b, kvlm_value(b, "n_layers"), 1 << 30);
    refuse("layers", b, {"n_layers = 1073741824 is out of range"});
    b = good;
    poke<int32_t>(b, kvlm_value(b, "n_vocab"), INT32_MAX);
    refuse("vocab", b, {"n_vocab = 2147483647 is out of range"});
    b = good;
    poke<uint32_t>(b, kvlm_value(b, "tokenizer.tokens"), 1u << 31);
    refuse("token-count", b, {"'tokenizer.tokens' has 2147483648 elements, more than the limit"});
    b = good;
    uint64_t directory_offset = 0;
    std::memcpy(&directory_offset, &b[32], 8);
    size_t dims = after(b, le(uint32_t(17)) + "token_embd.weight", directory_offset) + 4 + 4;
    poke<int64_t>(b, dims, int64_t(1) << 40);  // [2^40, 2^40] wrapped to 0 elements before the overflow check
    poke<int64_t>(b, dims + 8, int64_t(1) << 40);
    refuse("tensor-shape", b, {"token_embd.weight", "absurdly large"});
}

TEST_CASE("hostile headers: GGUF files claiming absurd sizes are refused by convert") {
    if (!have_data(stories("stories260K.gguf"))) return;
    TempDir dir;
    const std::string good = read_file(stories("stories260K.gguf"));
    auto refuse = [&](const std::string& name, const std::string& bytes, const std::vector<std::string>& needles) {
        CAPTURE(name);
        std::string path = dir.file(name + ".gguf");
        write_file(path, bytes);
        std::vector<std::string> with_path = needles;
        with_path.push_back(path);
        expect_refused({"convert", path, "-o", dir.file("out.kvlm")}, with_path);
        CHECK(!std::filesystem::exists(dir.file("out.kvlm")));
    };
    std::string b = good;
    poke<uint64_t>(b, 8, uint64_t(1) << 62);  // header tensor count
    refuse("tensor-count", b, {"tensor count 4611686018427387904 is more than the limit"});
    b = good;
    poke<uint32_t>(b, gguf_value(b, "llama.block_count"), 0xffffffffu);
    refuse("layers", b, {"llama.block_count = 4294967295 is out of range"});
    b = good;
    poke<uint32_t>(b, gguf_value(b, "llama.embedding_length"), 1u << 31);
    refuse("width", b, {"llama.embedding_length = 2147483648 is out of range"});
    b = good;
    poke<uint64_t>(b, gguf_value(b, "tokenizer.ggml.tokens") + 4, uint64_t(1) << 60);  // after the element type
    refuse("token-count", b, {"array count 1152921504606846976", "cannot fit"});
    b = good;
    size_t dims = after(b, le(uint64_t(17)) + "token_embd.weight") + 4;
    poke<uint64_t>(b, dims, uint64_t(1) << 40);
    poke<uint64_t>(b, dims + 8, uint64_t(1) << 40);
    refuse("tensor-shape", b, {"token_embd.weight", "absurd element count"});

    // rope_freqs.weight of an unknown type takes no bytes but claims 2^50 elements: checked before allocating.
    GgufBuilder g;
    g.string("general.architecture", "llama");
    for (auto [key, value] : {std::pair<const char*, uint32_t>{"llama.block_count", 1}, {"llama.embedding_length", 8},
                              {"llama.feed_forward_length", 16}, {"llama.attention.head_count", 2}})
        g.u32(key, value);
    g.tensor("token_embd.weight", {8, 16}, 99);
    g.tensor("rope_freqs.weight", {uint64_t(1) << 40, 1024}, 99);
    refuse("rope-freqs", g.bytes(), {"rope_freqs.weight has 1125899906842624 values, expected head_dim/2 = 2"});
}

TEST_CASE("hostile headers: safetensors claiming absurd sizes are refused by convert") {
    if (!have_data(stories("hf/config.json"))) return;
    TempDir dir;
    auto refuse = [&](const std::string& name, const std::string& weights, const std::vector<std::string>& needles) {
        CAPTURE(name);
        std::string path = hf_dir(dir, name, weights);
        std::vector<std::string> with_path = needles;
        with_path.push_back(path + "/model.safetensors");
        expect_refused({"convert", path, "--tokenizer", stories("tok512.bin"), "-o", dir.file("out.kvlm")}, with_path);
    };
    refuse("header-length", le(uint64_t(1) << 63) + "{}", {"header length 9223372036854775808 extends past the end"});
    const std::string big_shape = R"({"a": {"dtype": "F32", "shape": [1099511627776, 1099511627776], )"
                                  R"("data_offsets": [0, 4]}})";
    refuse("shape", safetensors(big_shape, std::string(4, '\0')), {"tensor 'a' has an absurd element count"});
    refuse("offsets", safetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4611686018427387904]}})",
                                  std::string(4, '\0')),
           {"data_offsets [0, 4611686018427387904] lie outside the data section"});
}

TEST_CASE("hostile headers: llama.c checkpoints claiming absurd sizes are refused by convert") {
    if (!have_data(stories("stories260K.bin"))) return;
    TempDir dir;
    const std::string good = read_file(stories("stories260K.bin"));
    auto refuse = [&](const std::string& name, const std::string& bytes, const std::vector<std::string>& needles) {
        CAPTURE(name);
        std::string path = dir.file(name + ".bin");
        write_file(path, bytes);
        std::vector<std::string> with_path = needles;
        with_path.push_back(path);
        expect_refused({"convert", path, "--tokenizer", stories("tok512.bin"), "-o", dir.file("out.kvlm")}, with_path);
    };
    // Legacy header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len (int32 each).
    std::string b = good;
    poke<int32_t>(b, 8, INT32_MAX);
    refuse("layers", b, {"n_layers = 2147483647 is out of range"});
    b = good;
    poke<int32_t>(b, 20, INT32_MIN);
    refuse("vocab", b, {"vocab_size = -2147483648 is out of range"});
    // Every field at its limit: far more weights than the file holds.
    b = good;
    for (auto [offset, value] : {std::pair<size_t, int32_t>{0, 1 << 17}, {4, 1 << 20}, {8, 1024}, {12, 1024},
                                 {16, 1024}, {20, 1 << 22}, {24, 1 << 24}})
        poke<int32_t>(b, offset, value);
    refuse("everything", b, {"should be", "found 1056540", "truncated or not a llama2.c checkpoint"});
}

TEST_CASE("hostile headers: synthetic config.json shapes are refused before allocating") {
    if (!have_data(stories("tok512.bin"))) return;
    TempDir dir;
    auto refuse = [&](const std::string& name, const std::string& config, const std::vector<std::string>& needles) {
        CAPTURE(name);
        std::string path = dir.file(name + ".json");
        write_file(path, config);
        std::vector<std::string> with_needles = needles;
        expect_refused({"convert", "--synthetic", path, "--tokenizer", stories("tok512.bin"), "-o",
                        dir.file("out.kvlm")},
                       with_needles);
        CHECK(!std::filesystem::exists(dir.file("out.kvlm")));
    };
    refuse("layers", config_json(64, 172, 2000000000, 8, 4, 512), {"n_layers = 2000000000 is out of range", "json"});
    refuse("vocab", config_json(64, 172, 5, 8, 4, 2147483647), {"n_vocab = 2147483647 is out of range"});
    // Every field in range, together ~4e14 parameters.
    refuse("params", config_json(131072, 1 << 20, 1024, 1024, 1024, 512), {"parameters, more than the limit"});
    // Under the parameter limit, but more than this machine holds (skipped where it could): a 512 GiB
    // feed-forward matrix is more memory than the converter may take; 2.1 TiB of 512 MiB tensors, more disk.
    const uint64_t memory = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
    if (memory < (uint64_t(512) << 30))
        refuse("memory", config_json(131072, 1 << 20, 1, 1024, 8, 512),
               {"tensor blk.0.ffn_gate.weight [1048576, 131072] needs 512GiB of memory to convert"});
    else
        MESSAGE("SKIPPED: this machine has 512 GiB of memory");
    if (memory >= (uint64_t(1) << 30) && free_disk_bytes(dir.path()) < (uint64_t(2) << 40))
        refuse("disk", config_json(8192, 16384, 1024, 64, 8, 512),
               {"the converted model needs 2.1TiB but its file system has", "free"});
    else
        MESSAGE("SKIPPED: this machine has 2 TiB of free disk space or less than 1 GiB of memory");
}

TEST_CASE("hostile headers: JSON nested a million levels deep is refused without recursing") {
    if (!have_data(stories("hf/config.json"))) return;
    TempDir dir;
    const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
    std::string config = read_file(stories("hf/config.json"));
    size_t hidden = after(config, "\"hidden_size\": ");
    config.replace(hidden, 2, deep);  // was 64
    write_file(dir.file("deep.json"), config);
    expect_refused({"convert", "--synthetic", dir.file("deep.json"), "--tokenizer", stories("tok512.bin"), "-o",
                    dir.file("out.kvlm")},
                   {"field \"hidden_size\" = an array of 1 elements is not an integer"});
    std::string path = hf_dir(dir, "hf", safetensors(R"({"a": {"dtype": "F32", "shape": )" + deep +
                                                         R"(, "data_offsets": [0, 0]}})",
                                                     ""));
    expect_refused({"convert", path, "--tokenizer", stories("tok512.bin"), "-o", dir.file("out.kvlm")},
                   {"tensor 'a' has invalid shape: element 0 is an array of 1 elements"});
}
