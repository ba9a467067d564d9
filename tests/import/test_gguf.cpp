// GGUF reader: real files (stories260K, vocab-only GGUFs), every supported tensor type against the gguf Python
// package's dequantization (tests/data/gguf_quant_types.*), and corrupted copies that must throw kvlm::Error.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "import/gguf.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

const char* kQuantFile = "tests/data/gguf_quant_types.gguf";

std::vector<float> read_floats(const std::string& path) {
    std::string bytes = read_file(path);
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
}

// Writes `bytes` to a scratch file and expects GgufFile::open to throw an Error mentioning `needle`.
void expect_open_error(const TempDir& dir, const std::string& bytes, const std::string& needle) {
    std::string path = dir.file("bad.gguf");
    write_file(path, bytes);
    try {
        GgufFile::open(path);
        FAIL("expected an error containing '" << needle << "'");
    } catch (const Error& e) {
        std::string msg = e.what();
        CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
        CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
    }
}

// Offset of the tensor-info record of `name` (just after its name string) in a GGUF file's bytes.
size_t tensor_info_offset(const std::string& bytes, const std::string& name) {
    std::string needle = name;
    size_t pos = bytes.find(needle);
    REQUIRE(pos != std::string::npos);
    return pos + needle.size();
}

template <typename T>
void poke(std::string& bytes, size_t offset, T value) {
    REQUIRE(offset + sizeof(T) <= bytes.size());
    std::memcpy(&bytes[offset], &value, sizeof(T));
}

}  // namespace

TEST_CASE("gguf: stories260K metadata and tensors") {
    std::string path = data_path("stories260K/stories260K.gguf");
    if (!have_data(path)) return;
    auto g = GgufFile::open(path);
    CHECK(g->version() == 3);
    CHECK(g->get_string("general.architecture") == "llama");
    CHECK(g->get_int("llama.block_count") == 5);
    CHECK(g->get_int("llama.embedding_length") == 64);
    CHECK(g->get_int("llama.attention.head_count") == 8);
    CHECK(g->get_int("llama.attention.head_count_kv") == 4);
    CHECK(g->get_float("llama.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-5));
    CHECK(g->get_string_array("tokenizer.ggml.tokens").size() == 512);
    CHECK(g->get_float_array("tokenizer.ggml.scores").size() == 512);
    CHECK(g->get_int_array("tokenizer.ggml.token_type").size() == 512);
    CHECK(g->get_int_or("no.such.key", 42) == 42);

    const GgufTensor* embd = g->find_tensor("token_embd.weight");
    REQUIRE(embd != nullptr);
    CHECK(embd->ggml_type == 0);
    CHECK(embd->dims == std::vector<int64_t>{64, 512});
    CHECK(embd->n_bytes == 64 * 512 * 4);
    // The classifier is tied, but this file carries an explicit copy of the embedding as output.weight.
    const GgufTensor* output = g->find_tensor("output.weight");
    REQUIRE(output != nullptr);
    CHECK(output->dims == embd->dims);
    CHECK(output->offset != embd->offset);
    CHECK(std::memcmp(output->data, embd->data, size_t(embd->n_bytes)) == 0);
    CHECK(g->tensors().size() == 3 + 5 * 9);

    // The llama2.c checkpoint holds the same embedding right after its 7-int32 header.
    std::string bin_path = data_path("stories260K/stories260K.bin");
    if (!have_data(bin_path)) return;
    std::vector<float> mine(size_t(embd->n_elements()));
    g->dequantize(*embd, mine.data());
    std::string bin = read_file(bin_path);
    REQUIRE(bin.size() >= 28 + mine.size() * 4);
    CHECK(std::memcmp(bin.data() + 28, mine.data(), mine.size() * 4) == 0);
}

TEST_CASE("gguf: vocab-only files open") {
    for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-phi-3.gguf",
                             "ggml-vocab-starcoder.gguf"}) {
        std::string path = data_path(std::string("vocab-tests/") + name);
        if (!have_data(path)) continue;
        auto g = GgufFile::open(path);
        CHECK(g->tensors().empty());
        CHECK(g->get_string_array("tokenizer.ggml.tokens").size() > 1000);
        CHECK(!g->get_string("tokenizer.ggml.model").empty());
    }
}

TEST_CASE("gguf: every supported type matches the reference dequantization") {
    if (!have_data(kQuantFile)) return;
    auto g = GgufFile::open(kQuantFile);
    std::vector<float> expected = read_floats("tests/data/gguf_quant_types.expected.f32");
    size_t at = 0;
    for (const char* name : {"t.f32", "t.f16", "t.bf16", "t.q8_0", "t.q4_0", "t.q4_1"}) {
        CAPTURE(name);
        const GgufTensor* t = g->find_tensor(name);
        REQUIRE(t != nullptr);
        CHECK(t->dims == std::vector<int64_t>{64, 3});
        std::vector<float> out(size_t(t->n_elements()));
        g->dequantize(*t, out.data());
        REQUIRE(at + out.size() <= expected.size());
        size_t n_mismatch = 0;
        for (size_t i = 0; i < out.size(); i++) n_mismatch += out[i] != expected[at + i];
        CHECK(n_mismatch == 0);
        at += out.size();
    }
    CHECK(at == expected.size());

    const GgufTensor* iq2 = g->find_tensor("t.iq2_xxs");
    REQUIRE(iq2 != nullptr);
    CHECK(std::string(GgufFile::ggml_type_name(iq2->ggml_type)) == "IQ2_XXS");
    std::vector<float> out(256);
    CHECK_THROWS_WITH_AS(g->dequantize(*iq2, out.data()), doctest::Contains("has type IQ2_XXS (ggml type 16)"), Error);
}

TEST_CASE("gguf: q5_0, q5_1, iq4_nl, the k-quants and iq4_xs dequantize as the gguf package does, bit for bit") {
    // Random blocks (every bit of every field) with finite f16 scales: tests/data/gen_gguf_kquant_types.py.
    const char* file = "tests/data/gguf_kquant_types.gguf";
    if (!have_data(file)) return;
    auto g = GgufFile::open(file);
    std::vector<float> expected = read_floats("tests/data/gguf_kquant_types.expected.f32");
    size_t at = 0;
    for (const char* name : {"t.q5_0", "t.q5_1", "t.iq4_nl", "t.q2_k", "t.q3_k", "t.q4_k", "t.q5_k", "t.q6_k",
                             "t.iq4_xs"}) {
        CAPTURE(name);
        const GgufTensor* t = g->find_tensor(name);
        REQUIRE(t != nullptr);
        CHECK(t->dims == std::vector<int64_t>{512, 2});
        std::optional<DType> dtype = kvlm_dtype_of_ggml_type(t->ggml_type);
        REQUIRE(dtype.has_value());
        CHECK(std::string(name).substr(2) == dtype_name(*dtype));  // the type is kept, not converted
        std::vector<float> out(size_t(t->n_elements()));
        g->dequantize(*t, out.data());
        REQUIRE(at + out.size() <= expected.size());
        size_t n_mismatch = 0;
        for (size_t i = 0; i < out.size(); i++)
            n_mismatch += std::memcmp(&out[i], &expected[at + i], sizeof(float)) != 0;
        CHECK(n_mismatch == 0);
        at += out.size();
    }
    CHECK(at == expected.size());
}

TEST_CASE("gguf: metadata value types") {
    if (!have_data(kQuantFile)) return;
    auto g = GgufFile::open(kQuantFile);
    CHECK(g->get_int("test.u32") == 4000000000LL);
    CHECK(g->get_int("test.i32") == -7);
    CHECK(g->get_int("test.u64") == (int64_t(1) << 40));
    CHECK(g->get_float("test.f32") == 0.25);
    CHECK(g->get_float("test.f64") == -1.5);
    CHECK(g->get_bool("test.bool"));
    CHECK(g->get_string("test.string") == "h\xc3\xa9llo");
    CHECK(g->get_string_array("test.strings") == std::vector<std::string>{"a", "", "ccc"});
    CHECK(g->get_float_array("test.floats") == std::vector<float>{1.0f, 2.5f, -3.0f});
    CHECK(g->get_int_array("test.ints") == std::vector<int32_t>{1, -2, 3});
    CHECK(g->has("test.nested"));
    CHECK_THROWS_WITH_AS(g->get_int_array("test.nested"), doctest::Contains("array of array"), Error);
    CHECK_THROWS_WITH_AS(g->get_string("test.i32"), doctest::Contains("test.i32"), Error);
    CHECK_THROWS_WITH_AS(g->get_int("test.string"), doctest::Contains("expected an integer"), Error);
    CHECK_THROWS_WITH_AS(g->get_int("missing.key"), doctest::Contains("missing"), Error);
    CHECK(g->get_string_or("missing.key", "x") == "x");
    auto keys = g->keys();
    CHECK(keys.front() == "general.architecture");
    CHECK(keys.size() == 12);
}

TEST_CASE("gguf: corrupted files are refused") {
    if (!have_data(kQuantFile)) return;
    const std::string good = read_file(kQuantFile);
    TempDir dir;

    // Every truncation before the end of the last tensor's data fails cleanly (headers, metadata, tensor infos,
    // tensor data); what follows is alignment padding.
    size_t data_end = 0;
    {
        auto g = GgufFile::open(kQuantFile);
        for (const GgufTensor& t : g->tensors()) data_end = std::max<size_t>(data_end, t.offset + t.n_bytes);
    }
    REQUIRE(data_end > 2000);
    REQUIRE(data_end <= good.size());
    std::string path = dir.file("cut.gguf");
    for (size_t n = 0; n < data_end; n += (n < 1000 ? 1 : 37)) {
        write_file(path, good.substr(0, n));
        CHECK_THROWS_AS(GgufFile::open(path), Error);
    }

    std::string bad = good;
    bad[0] = 'X';
    expect_open_error(dir, bad, "not a GGUF file");

    bad = good;
    poke<uint32_t>(bad, 4, 1);
    expect_open_error(dir, bad, "version 1");

    bad = good;
    poke<uint64_t>(bad, 8, uint64_t(1) << 60);  // tensor count
    expect_open_error(dir, bad, "tensor count");

    bad = good;
    poke<uint64_t>(bad, 16, uint64_t(1) << 60);  // metadata count
    expect_open_error(dir, bad, "metadata count");

    bad = good;
    poke<uint64_t>(bad, 24, uint64_t(1) << 62);  // length of the first key
    expect_open_error(dir, bad, "truncated");

    // Tensor info: name, n_dims u32, dims u64 x n_dims, type u32, offset u64.
    size_t info = tensor_info_offset(good, "t.q4_1");
    bad = good;
    poke<uint32_t>(bad, info, 7);
    expect_open_error(dir, bad, "dimensions");

    bad = good;
    poke<uint64_t>(bad, info + 4, 60);  // ne0 not a multiple of the block size
    expect_open_error(dir, bad, "multiple of 32");

    bad = good;
    poke<uint64_t>(bad, info + 4 + 16 + 4, uint64_t(1) << 40);  // offset far past the end
    expect_open_error(dir, bad, "past the end");

    bad = good;
    poke<uint64_t>(bad, info + 4 + 16 + 4, 4);  // misaligned
    expect_open_error(dir, bad, "alignment");

    bad = good;
    poke<uint64_t>(bad, info + 4 + 8, uint64_t(1) << 39);  // ne1 huge: data past the end
    expect_open_error(dir, bad, "past the end");
}
