// A GGUF model whose matrices hold every quantized type kvlm keeps (tests/data/gen_gguf_kquant_model.py,
// random blocks, stories260K's tokenizer), end to end through the CLI: converted with every type kept, run,
// and scored by `kvlm perplexity` against tools/reference/llama_reference.py, a float64 forward over the gguf
// package's dequantization of the same file.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "import/gguf.h"
#include "support/test_util.h"

using namespace kvlm::test;

namespace {

double ppl_of(const CliResult& r) {
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return nlohmann::json::parse(r.out).at("ppl").get<double>();
}

// Makes the k-quant model's GGUF in `dir` (tests/data/gen_gguf_kquant_model.py); "" without the test data.
std::string make_kquant_gguf(const TempDir& dir) {
    const std::string tokenizer = data_path("stories260K/stories260K.gguf");
    if (!have_data(tokenizer)) return "";
    const std::string gguf = dir.file("m.gguf");
    CliResult made = run_shell("python3 tests/data/gen_gguf_kquant_model.py " + shell_quote(tokenizer) + " " +
                               shell_quote(gguf));
    REQUIRE_MESSAGE(made.exit_code == 0, made.err);
    return gguf;
}

// Byte offset of the u32 dimension count that follows tensor `name`'s name in its tensor-info record.
size_t tensor_record(const std::string& bytes, const std::string& name) {
    size_t at = bytes.find(name);
    REQUIRE(at != std::string::npos);
    return at + name.size();
}

}  // namespace

TEST_CASE("k-quant model: every type kept by convert, and perplexity matches a float64 reference") {
    const std::string text = data_path("stories260K/expected_t0_n200.txt");
    if (!have_data(text)) return;
    TempDir dir;
    const std::string gguf = make_kquant_gguf(dir);
    if (gguf.empty()) return;
    const std::string model = dir.file("m.kvlm"), widened = dir.file("f32.kvlm");
    CliResult converted = run_kvlm({"convert", "-q", gguf, "-o", model});
    REQUIRE_MESSAGE(converted.exit_code == 0, converted.err);

    // Every tensor in the type the GGUF has: no dequantization, no requantization.
    CliResult inspected = run_kvlm({"inspect", "--json", model});
    REQUIRE_MESSAGE(inspected.exit_code == 0, inspected.err);
    std::map<std::string, std::string> types;
    const nlohmann::json listing = nlohmann::json::parse(inspected.out);
    for (const auto& t : listing.at("tensors"))
        types[t.at("name").get<std::string>()] = t.at("dtype").get<std::string>();
    const std::map<std::string, std::string> want = {
        {"token_embd.weight", "q4_k"},        {"output.weight", "q6_k"},           {"blk.0.attn_q.weight", "q5_0"},
        {"blk.0.attn_k.weight", "q5_1"},      {"blk.0.attn_v.weight", "iq4_nl"},   {"blk.0.attn_output.weight", "q2_k"},
        {"blk.0.ffn_gate.weight", "q3_k"},    {"blk.0.ffn_up.weight", "q4_k"},     {"blk.0.ffn_down.weight", "q5_k"},
        {"blk.1.attn_q.weight", "iq4_xs"},    {"blk.1.attn_k.weight", "q6_k"},     {"blk.1.attn_v.weight", "q8_0"},
        {"blk.1.attn_output.weight", "q4_0"}, {"blk.1.ffn_gate.weight", "q4_1"},   {"blk.1.ffn_up.weight", "q5_k"},
        {"blk.1.ffn_down.weight", "iq4_xs"},  {"output_norm.weight", "f32"}};
    for (const auto& entry : want) {
        CAPTURE(entry.first);
        CHECK(types[entry.first] == entry.second);
    }

    // The reference's perplexity of the first 64 tokens (one chunk, as `kvlm perplexity -c 64 --chunks 1`).
    CliResult tokenized = run_shell(kvlm_command({"tokenize", "--no-special", model}) + " < " + shell_quote(text));
    REQUIRE_MESSAGE(tokenized.exit_code == 0, tokenized.err);
    std::istringstream ids(tokenized.out);
    std::string id, first_64;
    for (int i = 0; i < 64 && ids >> id; i++) first_64 += (i ? "," : "") + id;
    const std::string command = "python3 tools/reference/llama_reference.py --perplexity --bos 1 --gguf " +
                                shell_quote(gguf) + " --ids " + first_64;
    CliResult reference = run_shell(command);
    const double want_ppl = ppl_of(reference);
    CHECK(want_ppl > 50.0);  // random weights: far from uniform over 512 tokens, so errors show

    auto perplexity = [&](const std::string& m, const std::string& threads) {
        return ppl_of(run_kvlm({"perplexity", "--json", "-q", "-m", m, "-f", text, "-c", "64", "--chunks", "1",
                                "-t", threads, "--device", "cpu"}));
    };
    // The kernels quantize activations to 16 bits per 32 elements; weights exactly as the gguf package decodes.
    const double got = perplexity(model, "1");
    CHECK_MESSAGE(std::fabs(got / want_ppl - 1.0) < 2e-4, got, " vs the reference's ", want_ppl);
    CHECK(perplexity(model, "2") == got);
    // Widened to f32 on purpose (--dtype f32): the reference's own arithmetic, nearly to the last bit.
    CliResult widen = run_kvlm({"convert", "-q", gguf, "-o", widened, "--dtype", "f32"});
    REQUIRE_MESSAGE(widen.exit_code == 0, widen.err);
    const double got_f32 = perplexity(widened, "2");
    CHECK_MESSAGE(std::fabs(got_f32 / want_ppl - 1.0) < 1e-6, got_f32, " vs the reference's ", want_ppl);

    // bench/export_gguf.py writes the blocks back as GGUF (the peer's input): converted again, the same bits.
    const std::string exported = dir.file("back.gguf"), again = dir.file("back.kvlm");
    CliResult exporting = run_shell("python3 bench/export_gguf.py " + shell_quote(model) + " " + shell_quote(exported));
    REQUIRE_MESSAGE(exporting.exit_code == 0, exporting.err);
    CliResult reconverted = run_kvlm({"convert", "-q", exported, "-o", again});
    REQUIRE_MESSAGE(reconverted.exit_code == 0, reconverted.err);
    CHECK(perplexity(again, "1") == got);

    // And it generates: greedy text, the same on one thread and two.
    auto greedy = [&](const std::string& threads) {
        return run_kvlm({"run", "-m", model, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-q", "-t", threads,
                         "--device", "cpu"});
    };
    CliResult one = greedy("1"), two = greedy("2");
    REQUIRE_MESSAGE(one.exit_code == 0, one.err);
    CHECK(!one.out.empty());
    CHECK(one.out == two.out);
}

TEST_CASE("k-quant model: damaged files are refused naming the tensor and its type") {
    TempDir dir;
    const std::string gguf = make_kquant_gguf(dir);
    if (gguf.empty()) return;
    const std::string original = read_file(gguf);
    auto refused = [&](const std::string& bytes, const std::vector<std::string>& needles) {
        const std::string bad = dir.file("bad.gguf");
        write_file(bad, bytes);
        CliResult r = run_kvlm({"convert", "-q", bad, "-o", dir.file("bad.kvlm")});
        CHECK(r.exit_code != 0);
        for (const std::string& needle : needles) CHECK_MESSAGE(r.err.find(needle) != std::string::npos, r.err);
        CHECK(r.err.find("Sanitizer") == std::string::npos);
    };
    // The tensor whose data ends the file, cut short by 100 bytes.
    auto g = kvlm::GgufFile::open(gguf);
    const kvlm::GgufTensor* last = &g->tensors().front();
    for (const kvlm::GgufTensor& t : g->tensors())
        if (t.offset > last->offset) last = &t;
    refused(original.substr(0, original.size() - 100),
            {"tensor '" + last->name + "' (" + kvlm::GgufFile::ggml_type_name(last->ggml_type) + ",",
             "extends past the end of the file"});

    // blk.0.ffn_up.weight is Q4_K, 256 x 512 (ne0 256: one super-block per row).
    const size_t record = tensor_record(original, "blk.0.ffn_up.weight");
    uint32_t n_dims = 0;
    std::memcpy(&n_dims, &original[record], 4);
    REQUIRE(n_dims == 2);
    const size_t ne0_at = record + 4, type_at = record + 4 + 8 * n_dims;
    uint32_t type = 0;
    std::memcpy(&type, &original[type_at], 4);
    REQUIRE(type == 12);  // Q4_K
    auto poked = [&](size_t at, const void* value, size_t n) {
        std::string bytes = original;
        std::memcpy(&bytes[at], value, n);
        return bytes;
    };
    const uint64_t half_block = 128;
    refused(poked(ne0_at, &half_block, 8),
            {"tensor 'blk.0.ffn_up.weight' of type Q4_K has ne0 = 128, expected a multiple of 256"});
    const uint32_t iq2_xxs = 16, unknown = 99;
    refused(poked(type_at, &iq2_xxs, 4), {"blk.0.ffn_up.weight", "IQ2_XXS", "which kvlm cannot import"});
    refused(poked(type_at, &unknown, 4), {"blk.0.ffn_up.weight has type unknown (ggml type 99)"});
}
