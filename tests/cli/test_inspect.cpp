// Tests of `kvlm inspect` through the real binary: the report (text and JSON), KV planning numbers,
// --verify, and a non-zero exit with a clear message on stderr for each kind of malformed file.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "format/model_file.h"
#include "support/test_util.h"
#include "support/tiny_model.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

void patch_u32(std::string& bytes, uint64_t offset, uint32_t value) {
    for (int i = 0; i < 4; i++) bytes[offset + i] = char(uint8_t(value >> (8 * i)));
}

uint64_t header_u64(const std::string& bytes, uint64_t offset) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= uint64_t(uint8_t(bytes[offset + i])) << (8 * i);
    return v;
}

// Runs inspect on `path` and expects failure with `needle` in the error message and nothing on stdout.
void check_inspect_fails(const std::string& path, const std::string& needle) {
    CliResult r = run_kvlm({"inspect", path});
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.err.find(needle) != std::string::npos, "stderr: " << r.err << "\nexpected: " << needle);
    CHECK_MESSAGE(r.err.find("error: ") != std::string::npos, r.err);
    CHECK(r.out.empty());
}

}  // namespace

TEST_CASE("inspect prints metadata, tensors, fingerprint and the KV table") {
    TempDir dir;
    std::string path = dir.file("tiny.kvlm");
    TinyModel m = make_tiny(DType::bf16, false, false);
    std::string fingerprint = write_tiny(path, m);

    CliResult r = run_kvlm({"inspect", path});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.err.empty());
    CHECK(r.out.find("fingerprint:  " + fingerprint) != std::string::npos);
    CHECK(r.out.find("architecture: llama") != std::string::npos);
    CHECK(r.out.find("n_kv_heads       2") != std::string::npos);
    CHECK(r.out.find("rope_scaling     llama3 (factor 32") != std::string::npos);
    CHECK(r.out.find("tokenizer:    spm") != std::string::npos);
    CHECK(r.out.find("bos 1 '<s>'") != std::string::npos);
    CHECK(r.out.find("first line: {% for m in messages %}{{ m.content }}") != std::string::npos);
    CHECK(r.out.find("unit test") != std::string::npos);
    for (const TensorInfo& t : m.tensors) CHECK(r.out.find(t.name) != std::string::npos);
    CHECK(r.out.find("[24, 16]") != std::string::npos);  // ffn_gate shape
    // 2 layers x 2 (K, V) x 2 KV heads x head_dim 4 = 32 elements per token.
    CHECK(r.out.find("bytes/token") != std::string::npos);
    std::string f32_row = fmt::format("f32       {:>12}", 32 * 4);
    CHECK_MESSAGE(r.out.find(f32_row) != std::string::npos, r.out);
    CHECK(r.out.find(std::to_string((uint64_t(8) << 30) / (32 * 2))) != std::string::npos);  // f16 in 8 GiB

    r = run_kvlm({"inspect", path, "--kv-mem", "1MiB"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out.find("tokens in 1MiB") != std::string::npos);
    CHECK(r.out.find(fmt::format("{:>12}  {:>22}  {:>16}", 32 * 2, "8.00 KiB", (1 << 20) / (32 * 2))) != std::string::npos);

    r = run_kvlm({"inspect", path, "--kv-mem", "lots"});
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("--kv-mem: 'lots' is not a valid byte size") != std::string::npos);
}

TEST_CASE("inspect --json prints one JSON object") {
    TempDir dir;
    std::string path = dir.file("tiny.kvlm");
    TinyModel m = make_tiny(DType::f16, true, true);
    std::string fingerprint = write_tiny(path, m);
    CliResult r = run_kvlm({"inspect", path, "--json", "--kv-mem", "4GiB", "--verify"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["fingerprint"] == fingerprint);
    CHECK(j["config"]["architecture"] == "qwen2");
    CHECK(j["config"]["n_layers"] == 2);
    CHECK(j["config"]["qkv_bias"] == true);
    CHECK(j["config"]["tied_embeddings"] == true);
    CHECK(j["tokenizer"]["n_vocab"] == 32);
    CHECK(j["tokenizer"]["stop_ids"] == std::vector<int>{2, 31});
    CHECK(j["tensors"].size() == m.tensors.size());
    CHECK(j["tensors"][0]["shape"] == std::vector<int64_t>{32, 16});
    CHECK(j["kv_cache"][0]["dtype"] == "f32");
    CHECK(j["kv_cache"][0]["bytes_per_token"] == 32 * 4);
    CHECK(j["kv_cache"][1]["tokens_in_budget"]["4GiB"] == (uint64_t(4) << 30) / (32 * 2));
    CHECK(j["kv_cache"][2]["n_ctx_bytes"] == 128 * 32 * 2);
    CHECK(j["verified_tensors"] == m.tensors.size());
}

TEST_CASE("inspect --verify catches a flipped byte") {
    TempDir dir;
    std::string path = dir.file("tiny.kvlm");
    write_tiny(path, make_tiny(DType::f32, false, false));
    CliResult r = run_kvlm({"inspect", path, "--verify"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out.find("verified 21 tensors") != std::string::npos);

    const TensorInfo target = ModelFile::open(path)->tensors()[15];
    std::string bytes = read_file(path);
    bytes[target.offset + 5] ^= 0x10;
    write_file(path, bytes);
    r = run_kvlm({"inspect", path});
    CHECK(r.exit_code == 0);  // no checksum pass without --verify
    r = run_kvlm({"inspect", path, "--verify"});
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.err.find("tensor " + target.name + " is corrupted") != std::string::npos, r.err);
    CHECK(r.out.empty());
}

TEST_CASE("inspect rejects malformed files with a clear message") {
    TempDir dir;
    std::string good = dir.file("good.kvlm"), bad = dir.file("bad.kvlm");
    write_tiny(good, make_tiny(DType::f32, false, false));
    const std::string bytes = read_file(good);

    check_inspect_fails(dir.file("absent.kvlm"), "absent.kvlm: cannot open");
    write_file(bad, "GGUF not a model");
    check_inspect_fails(bad, "bad.kvlm: not a kvlm model file (bad magic \"GGUF\"");
    std::string b = bytes;
    patch_u32(b, 4, 7);
    write_file(bad, b);
    check_inspect_fails(bad, "format version 7 is not supported");
    for (size_t cut : {size_t(100), size_t(300), bytes.size() / 2, bytes.size() - 10}) {
        write_file(bad, bytes.substr(0, cut));
        check_inspect_fails(bad, "truncated");
    }
    b = bytes;
    uint64_t directory_offset = header_u64(b, 32);
    uint32_t name_length = 0;
    std::memcpy(&name_length, b.data() + directory_offset, 4);
    patch_u32(b, directory_offset + 4 + name_length, 15);  // one past iq4_xs, the last DType
    write_file(bad, b);
    check_inspect_fails(bad, "tensor token_embd.weight has unknown dtype 15");
    b = bytes;
    patch_u32(b, 48 + 4, 0x100);  // tensor count 2^40
    write_file(bad, b);
    check_inspect_fails(bad, "claims 1099511627797 tensors, which cannot fit");

    TinyModel missing = make_tiny(DType::f32, false, false);
    missing.tensors.pop_back();  // output.weight
    missing.data.pop_back();
    write_tiny(bad, missing);
    check_inspect_fails(bad, "tensor output.weight is missing");

    TinyModel shape = make_tiny(DType::f32, false, false);
    shape.tensors[2].shape = {16, 8};  // blk.0.attn_q.weight
    shape.tensors[2].n_bytes = 0;
    shape.data[2].resize(16 * 8 * 4);
    write_tiny(bad, shape);
    check_inspect_fails(bad, "bad.kvlm: tensor blk.0.attn_q.weight has shape [16, 8], expected [16, 16]");

    TinyModel tokens = make_tiny(DType::f32, false, false);
    tokens.metadata.tokenizer.token_types.resize(33, 1);
    write_tiny(bad, tokens);
    check_inspect_fails(bad, "tokenizer has 33 token types, expected n_vocab = 32");
}

TEST_CASE("inspect a converted real model (stories260K)") {
    std::string gguf = data_path("stories260K/stories260K.gguf");
    if (!have_data(gguf)) return;
    std::string path = converted_model("stories260K", {gguf});
    CliResult r = run_kvlm({"inspect", path, "--json", "--verify"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["config"]["n_vocab"] == 512);
    CHECK(j["config"]["n_embd"] == 64);
    CHECK(j["config"]["n_layers"] == 5);
    CHECK(j["config"]["n_kv_heads"] == 4);
    CHECK(j["config"]["head_dim"] == 8);
    CHECK(j["config"]["tied_embeddings"] == true);
    CHECK(j["kv_cache"][0]["bytes_per_token"] == 5 * 2 * 4 * 8 * 4);
    CHECK(j["tokenizer"]["type"] == "spm");
    CHECK(j["verified_tensors"] == j["tensors"].size());
}
