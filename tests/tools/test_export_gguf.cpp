// bench/export_gguf.py, which gives llama.cpp the very weights kvlm runs (tools/gpu_session.sh's peer stage):
// stories260K exported from .kvlm holds the same tensor bytes, in the same GGUF layout, as the GGUF that
// llama.cpp's own converter wrote (so the q/k row order goes back the way that converter permutes it), and
// every export converts back to the source's fingerprint: weights of each type, the BPE and SentencePiece
// tokenizers, grouped-query heads and Llama 3 RoPE scaling (as a rope_freqs tensor).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "format/model_file.h"
#include "import/gguf.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

CliResult export_gguf(const std::string& model, const std::string& out) {
    return run_shell("python3 bench/export_gguf.py " + shell_quote(model) + " " + shell_quote(out));
}

// Exports `model`, converts the GGUF back, and checks the fingerprint.
void check_round_trip(const TempDir& dir, const std::string& model, const std::string& name) {
    CliResult e = export_gguf(model, dir.file(name + ".gguf"));
    REQUIRE_MESSAGE(e.exit_code == 0, e.err);
    CliResult c = run_kvlm({"convert", dir.file(name + ".gguf"), "-o", dir.file(name + "-back.kvlm"), "--quiet"});
    REQUIRE_MESSAGE(c.exit_code == 0, c.err);
    CHECK(ModelFile::open(dir.file(name + "-back.kvlm"))->fingerprint() == ModelFile::open(model)->fingerprint());
}

}  // namespace

TEST_CASE("tools: export_gguf writes stories260K as llama.cpp's converter did, tensor for tensor") {
    const std::string source = data_path("stories260K/stories260K.gguf");
    if (!have_data(source)) return;
    TempDir dir;
    const std::string model = converted_model("stories260K-f32", {source});
    CliResult e = export_gguf(model, dir.file("out.gguf"));
    REQUIRE_MESSAGE(e.exit_code == 0, e.err);
    auto ours = GgufFile::open(dir.file("out.gguf"));
    auto theirs = GgufFile::open(source);
    // Theirs also holds output.weight, a copy of token_embd.weight; a tied model's GGUF may leave it out
    // (llama.cpp then uses token_embd), and the export does.
    REQUIRE(theirs->tensors().size() == ours->tensors().size() + 1);
    REQUIRE(ours->find_tensor("output.weight") == nullptr);
    int same = 0;
    for (const GgufTensor& o : ours->tensors()) {
        const GgufTensor* t = theirs->find_tensor(o.name);
        REQUIRE_MESSAGE(t != nullptr, o.name);
        CHECK_MESSAGE(o.ggml_type == t->ggml_type, o.name);
        CHECK_MESSAGE(o.dims == t->dims, o.name);
        REQUIRE(o.n_bytes == t->n_bytes);
        same += std::memcmp(o.data, t->data, size_t(t->n_bytes)) == 0;
    }
    CHECK(same == int(ours->tensors().size()));  // attn_q/attn_k included: the interleaved row order
    for (const char* key : {"llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                            "llama.attention.head_count", "llama.attention.head_count_kv",
                            "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
        CHECK_MESSAGE(ours->get_int(key) == theirs->get_int(key), key);
    CHECK(ours->get_string("tokenizer.ggml.model") == theirs->get_string("tokenizer.ggml.model"));
    CHECK(ours->get_string_array("tokenizer.ggml.tokens") == theirs->get_string_array("tokenizer.ggml.tokens"));
    CHECK(ours->get_float_array("tokenizer.ggml.scores") == theirs->get_float_array("tokenizer.ggml.scores"));
    CHECK(ours->get_float("llama.attention.layer_norm_rms_epsilon") ==
          theirs->get_float("llama.attention.layer_norm_rms_epsilon"));
    check_round_trip(dir, model, "stories");
}

TEST_CASE("tools: export_gguf round trip: weight types, a BPE tokenizer, grouped heads, Llama 3 RoPE scaling") {
    const std::string tokenizer = data_path("tokenizers/smollm2");
    if (!have_data(tokenizer)) return;
    TempDir dir;
    std::filesystem::create_directories(dir.file("shape"));
    write_file(dir.file("shape/config.json"), R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 49152, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 256, "max_position_embeddings": 4096,
        "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": false, "hidden_act": "silu",
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}})");
    for (const char* dtype : {"bf16", "f16", "q8_0", "q4_0", "q4_1"}) {
        CAPTURE(dtype);
        const std::string model = dir.file(std::string("tiny-") + dtype + ".kvlm");
        CliResult c = run_kvlm({"convert", "--synthetic", dir.file("shape"), "--tokenizer", tokenizer, "--dtype", dtype,
                                "-o", model, "--quiet"});
        REQUIRE_MESSAGE(c.exit_code == 0, c.err);
        check_round_trip(dir, model, std::string("tiny-") + dtype);
    }
    auto g = GgufFile::open(dir.file("tiny-bf16.gguf"));
    CHECK(g->find_tensor("rope_freqs.weight") != nullptr);
    CHECK(g->get_string("tokenizer.ggml.pre") == "smollm");
    CHECK(g->find_tensor("output.weight") != nullptr);  // untied in this shape
}

TEST_CASE("tools: export_gguf refuses what it cannot write, naming it") {
    TempDir dir;
    write_file(dir.file("not-a-model.kvlm"), "GGUF and not KVLM");
    CliResult r = export_gguf(dir.file("not-a-model.kvlm"), dir.file("out.gguf"));
    CHECK(r.exit_code != 0);
    CHECK(contains(r.err, "not a kvlm model file"));
}
