// safetensors reader: the real stories260K file, hand-built files for F16/BF16 and sharded directories, and
// malformed headers/offsets that must throw kvlm::Error naming the file.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>

#include "import/safetensors.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

// A safetensors file: 8-byte header length, the JSON header, then the data bytes.
std::string make_safetensors(const std::string& header, const std::string& data) {
    uint64_t n = header.size();
    std::string out(8, '\0');
    std::memcpy(&out[0], &n, 8);
    return out + header + data;
}

std::string u16_bytes(std::initializer_list<uint16_t> values) {
    std::string out;
    for (uint16_t v : values) out.append(reinterpret_cast<const char*>(&v), 2);
    return out;
}

void expect_open_error(const std::string& path, const std::string& needle) {
    try {
        SafetensorsFile::open(path);
        FAIL("expected an error containing '" << needle << "'");
    } catch (const Error& e) {
        std::string msg = e.what();
        CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
        CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
    }
}

}  // namespace

TEST_CASE("safetensors: stories260K HF weights") {
    std::string path = data_path("stories260K/hf/model.safetensors");
    if (!have_data(path)) return;
    auto st = SafetensorsFile::open(path);
    CHECK(st->tensors().size() == 2 + 5 * 9);  // tied: no lm_head
    const SafetensorsTensor* embd = st->find("model.embed_tokens.weight");
    REQUIRE(embd != nullptr);
    CHECK(embd->dtype_name == "F32");
    CHECK(embd->supported);
    CHECK(embd->shape == std::vector<int64_t>{512, 64});
    CHECK(st->find("lm_head.weight") == nullptr);
    const SafetensorsTensor* down = st->find("model.layers.4.mlp.down_proj.weight");
    REQUIRE(down != nullptr);
    CHECK(down->shape == std::vector<int64_t>{64, 172});

    // The embedding is the same as in the llama2.c checkpoint (right after its 28-byte header).
    std::string bin_path = data_path("stories260K/stories260K.bin");
    if (!have_data(bin_path)) return;
    std::string bin = read_file(bin_path);
    std::vector<float> row(64 * 3);
    safetensors_read_f32(*embd, 64 * 100, int64_t(row.size()), row.data());  // rows 100..102
    CHECK(std::memcmp(bin.data() + 28 + 64 * 100 * 4, row.data(), row.size() * 4) == 0);

    auto model = SafetensorsModel::open_dir(data_path("stories260K/hf"));
    CHECK(model->names().size() == 47);
    CHECK(&model->require_supported("model.norm.weight") != nullptr);
    CHECK_THROWS_WITH_AS(model->require_supported("lm_head.weight"), doctest::Contains("missing"), Error);
}

TEST_CASE("safetensors: F16 and BF16 values") {
    TempDir dir;
    // f16: 1.0 = 0x3c00, -2.0 = 0xc000, 0.5 = 0x3800, 65504 = 0x7bff; bf16: 1.0 = 0x3f80, -3.0 = 0xc040.
    std::string header = R"({"__metadata__": {"format": "pt"},
        "a": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
        "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]},
        "c": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}})";
    std::string data = u16_bytes({0x3c00, 0xc000, 0x3800, 0x7bff}) + u16_bytes({0x3f80, 0xc040}) +
                       std::string(4, '\0') + std::string(8, '\0');
    write_file(dir.file("m.safetensors"), make_safetensors(header, data));
    auto st = SafetensorsFile::open(dir.file("m.safetensors"));
    CHECK(st->tensors().size() == 3);
    const SafetensorsTensor* a = st->find("a");
    const SafetensorsTensor* b = st->find("b");
    const SafetensorsTensor* c = st->find("c");
    REQUIRE((a && b && c));
    CHECK(a->dtype == DType::f16);
    CHECK(b->dtype == DType::bf16);
    CHECK(!c->supported);
    float fa[4], fb[2];
    safetensors_read_f32(*a, 0, 4, fa);
    safetensors_read_f32(*b, 0, 2, fb);
    CHECK(fa[0] == 1.0f);
    CHECK(fa[1] == -2.0f);
    CHECK(fa[2] == 0.5f);
    CHECK(fa[3] == 65504.0f);
    CHECK(fb[0] == 1.0f);
    CHECK(fb[1] == -3.0f);
    safetensors_read_f32(*a, 2, 1, fa);  // a sub-range
    CHECK(fa[0] == 0.5f);
}

TEST_CASE("safetensors: sharded model directory") {
    TempDir dir;
    std::string h1 = R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
    std::string h2 = R"({"y": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
    float x[2] = {1.5f, -2.5f}, y = 7.0f;
    write_file(dir.file("model-00001-of-00002.safetensors"),
               make_safetensors(h1, std::string(reinterpret_cast<char*>(x), 8)));
    write_file(dir.file("model-00002-of-00002.safetensors"),
               make_safetensors(h2, std::string(reinterpret_cast<char*>(&y), 4)));
    write_file(dir.file("model.safetensors.index.json"),
               R"({"metadata": {}, "weight_map": {"x": "model-00001-of-00002.safetensors",
                   "y": "model-00002-of-00002.safetensors"}})");
    auto model = SafetensorsModel::open_dir(dir.path());
    CHECK(model->names() == std::vector<std::string>{"x", "y"});
    float out[2];
    safetensors_read_f32(model->require_supported("y"), 0, 1, out);
    CHECK(out[0] == 7.0f);
    safetensors_read_f32(model->require_supported("x"), 0, 2, out);
    CHECK(out[1] == -2.5f);

    write_file(dir.file("model.safetensors.index.json"),
               R"({"weight_map": {"x": "model-00002-of-00002.safetensors"}})");
    CHECK_THROWS_WITH_AS(SafetensorsModel::open_dir(dir.path()), doctest::Contains("missing from that shard"), Error);
    write_file(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "model-00009-of-00009.safetensors"}})");
    CHECK_THROWS_WITH_AS(SafetensorsModel::open_dir(dir.path()), doctest::Contains("does not exist"), Error);
    write_file(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "../etc/passwd"}})");
    CHECK_THROWS_WITH_AS(SafetensorsModel::open_dir(dir.path()), doctest::Contains("same directory"), Error);
    write_file(dir.file("model.safetensors.index.json"), R"({"weight_map": [1, 2]})");
    CHECK_THROWS_WITH_AS(SafetensorsModel::open_dir(dir.path()), doctest::Contains("weight_map"), Error);

    TempDir empty;
    CHECK_THROWS_WITH_AS(SafetensorsModel::open_dir(empty.path()), doctest::Contains("no model.safetensors"), Error);
}

TEST_CASE("safetensors: malformed files") {
    TempDir dir;
    const std::string path = dir.file("bad.safetensors");
    const std::string good_header = R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})";
    write_file(path, make_safetensors(good_header, std::string(24, '\0')));
    CHECK(SafetensorsFile::open(path)->find("w") != nullptr);

    write_file(path, "abc");
    expect_open_error(path, "too short");
    std::string bytes = make_safetensors(good_header, std::string(24, '\0'));
    uint64_t huge = uint64_t(1) << 40;
    std::memcpy(&bytes[0], &huge, 8);
    write_file(path, bytes);
    expect_open_error(path, "past the end");
    write_file(path, make_safetensors("{\"w\": [", std::string(24, '\0')));
    expect_open_error(path, "not valid JSON");
    write_file(path, make_safetensors("[1, 2]", ""));
    expect_open_error(path, "not a JSON object");
    write_file(path, make_safetensors(good_header, std::string(20, '\0')));  // data section too short
    expect_open_error(path, "outside the data section");
    write_file(path, make_safetensors(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})",
                                      std::string(24, '\0')));
    expect_open_error(path, "needs 24");
    write_file(path, make_safetensors(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 4]}})",
                                      std::string(24, '\0')));
    expect_open_error(path, "outside the data section");
    write_file(path, make_safetensors(R"({"w": {"dtype": "F32", "shape": [-2, 3], "data_offsets": [0, 24]}})",
                                      std::string(24, '\0')));
    expect_open_error(path, "invalid shape");
    write_file(path, make_safetensors(R"({"w": {"dtype": "F32", "shape": [6]}})", std::string(24, '\0')));
    expect_open_error(path, "data_offsets");
}
