// Tokenizer tests: llama.cpp's vocab-test vectors through every importer, HF `tokenizers` reference ids for
// SmolLM2, special tokens, decoding and streaming, and malformed tokenizer files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "import/gguf.h"
#include "import/tokenizer/tokenizer_import.h"
#include "support/test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

using namespace kvlm;
using kvlm::test::data_path;
using kvlm::test::have_data;

namespace {

struct VocabTest {
    std::string text;
    std::vector<int32_t> ids;
};

// NAME.gguf.inp: test strings separated by "\n__ggml_vocab_test__\n"; NAME.gguf.out: one id line per test.
std::vector<VocabTest> read_vocab_tests(const std::string& name) {
    const std::string base = data_path("vocab-tests/ggml-vocab-" + name + ".gguf");
    const std::string inp = kvlm::test::read_file(base + ".inp");
    std::vector<std::string> texts;
    const std::string sep = "\n__ggml_vocab_test__\n";
    for (size_t pos = 0; pos < inp.size();) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::istringstream out(kvlm::test::read_file(base + ".out"));
    std::vector<VocabTest> tests;
    std::string line;
    for (size_t i = 0; std::getline(out, line); ++i) {
        REQUIRE(i < texts.size());
        VocabTest t{texts[i], {}};
        std::istringstream ids(line);
        for (int32_t id; ids >> id;) t.ids.push_back(id);
        tests.push_back(t);
    }
    REQUIRE(tests.size() == texts.size());
    REQUIRE(tests.size() > 30);
    return tests;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += std::to_string(id) + " ";
    return s;
}

// Every vocab-test string encodes (no BOS, no special parsing, as llama.cpp's test-tokenizer-0) to the
// expected ids. Returns the number of tests run.
size_t check_vocab_tests(const Tokenizer& tokenizer, const std::string& name) {
    const auto tests = read_vocab_tests(name);
    size_t n_failed = 0;
    for (const auto& t : tests) {
        const auto got = tokenizer.encode(t.text, false, false);
        if (got != t.ids && ++n_failed <= 5)
            FAIL_CHECK(name << ": '" << t.text << "'\n  expected " << show(t.ids) << "\n  got      " << show(got));
    }
    CHECK(n_failed == 0);
    return tests.size();
}

Tokenizer gguf_tokenizer(const std::string& name) {
    auto gguf = GgufFile::open(data_path("vocab-tests/ggml-vocab-" + name + ".gguf"));
    return Tokenizer(tokenizer_from_gguf(*gguf));
}

}  // namespace

TEST_CASE("tokenizer: llama.cpp vocab tests from GGUF vocabularies") {
    for (const char* name : {"llama-spm", "phi-3", "gpt-2", "starcoder"}) {
        CAPTURE(name);
        const std::string path = data_path(std::string("vocab-tests/ggml-vocab-") + name + ".gguf");
        if (!have_data(path)) return;
        check_vocab_tests(gguf_tokenizer(name), name);
    }
}

namespace {

// tests/data/*.json written by tools/reference/make_tokenizer_vectors.py.
nlohmann::json read_vectors(const std::string& name) {
    const std::string path = "tests/data/" + name;
    const std::string text = kvlm::test::read_file(path);
    REQUIRE_MESSAGE(!text.empty(), "missing " << path << " (run the tests from the repository root)");
    return nlohmann::json::parse(text)["tests"];
}

std::vector<std::string> vocab_test_texts(const std::string& name) {
    std::vector<std::string> texts;
    for (const auto& t : read_vocab_tests(name)) texts.push_back(t.text);
    return texts;
}

void check_round_trip(const Tokenizer& tokenizer, const std::vector<std::string>& texts) {
    for (const auto& text : texts) {
        CAPTURE(text);
        CHECK(tokenizer.decode(tokenizer.encode(text, false, false)) == text);
    }
}

}  // namespace

TEST_CASE("tokenizer: Llama 3 tiktoken tokenizer.model matches the llama-bpe vectors") {
    const std::string path = data_path("tokenizers/llama3/tokenizer.model");
    if (!have_data(path)) return;
    const TokenizerData data = load_tokenizer_source(path);  // picks tiktoken and the sibling tokenizer_config.json
    CHECK(data.type == "bpe");
    CHECK(data.pre == "llama3");
    CHECK(data.tokens.size() == 128256);
    CHECK(data.merges.size() > 127000);
    const Tokenizer tokenizer(data);
    CHECK(tokenizer.piece(tokenizer.bos_id()) == "<|begin_of_text|>");
    CHECK(tokenizer.piece(tokenizer.eos_id()) == "<|end_of_text|>");
    check_vocab_tests(tokenizer, "llama-bpe");
    check_round_trip(tokenizer, vocab_test_texts("llama-bpe"));

    // BOS is added by default; <|eot_id|> is matched as one token and ends generation.
    const auto ids = tokenizer.encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    REQUIRE(ids.size() >= 6);
    CHECK(ids.front() == tokenizer.bos_id());
    CHECK(tokenizer.piece(ids[1]) == "<|start_header_id|>");
    CHECK(tokenizer.piece(ids.back()) == "<|eot_id|>");
    CHECK(tokenizer.is_end_of_generation(ids.back()));
    CHECK(tokenizer.is_end_of_generation(tokenizer.eos_id()));
    CHECK_FALSE(tokenizer.is_end_of_generation(ids[1]));
    CHECK(tokenizer.decode(ids) == "user\n\nHi");  // control tokens print nothing
}

TEST_CASE("tokenizer: Qwen2 vocab.json + merges.txt matches the qwen2 vectors") {
    const std::string dir = data_path("tokenizers/qwen2");
    if (!have_data(dir + "/vocab.json")) return;
    const TokenizerData data = load_tokenizer_source(dir);
    CHECK(data.pre == "qwen2");
    const Tokenizer tokenizer(data);
    CHECK(tokenizer.n_vocab() == 151646);
    check_vocab_tests(tokenizer, "qwen2");
    check_round_trip(tokenizer, vocab_test_texts("qwen2"));
    const auto ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>");
    CHECK(ids.front() == 151644);
    CHECK(ids.back() == 151645);
    CHECK(tokenizer.is_end_of_generation(151645));
}

TEST_CASE("tokenizer: SmolLM2 tokenizer.json matches HF tokenizers on the starcoder strings") {
    const std::string path = data_path("tokenizers/smollm2/tokenizer.json");
    if (!have_data(path)) return;
    const TokenizerData data = load_tokenizer_source(path);
    CHECK(data.type == "bpe");
    CHECK(data.pre == "smollm");
    CHECK_FALSE(data.add_bos);
    const Tokenizer tokenizer(data);
    const auto vectors = read_vectors("smollm2_starcoder_vectors.json");
    REQUIRE(vectors.size() > 40);
    for (const auto& v : vectors) {
        const std::string text = v["text"];
        CAPTURE(text);
        CHECK(tokenizer.encode(text, true, v["parse_special"].get<bool>()) == v["ids"].get<std::vector<int32_t>>());
    }
    check_round_trip(tokenizer, vocab_test_texts("starcoder"));
}

TEST_CASE("tokenizer: bytes without a token are dropped and reported") {
    const std::string path = data_path("tokenizers/smollm2/tokenizer.json");
    if (!have_data(path)) return;
    const Tokenizer tokenizer(load_tokenizer_source(path));
    // SmolLM2's byte-level vocabulary has no token for \x04 or \x06; HF tokenizers drops them (the vectors
    // above check the ids); never the unk id, which tokenizer_config.json sets to <|endoftext|>.
    CHECK(tokenizer.encode("a\x04" "b", false) == std::vector<int32_t>{81, 82});  // "a", "b": HF tokenizers
    CHECK(tokenizer.bytes_without_token("a\x06" "b\x04\x04") == "\x04\x06");
    CHECK(tokenizer.bytes_without_token("plain text\n\t\x1b") == "");
    CHECK(tokenizer.encode("\x04", false).empty());
    CHECK(tokenizer.dropped_bytes_warning("a\x06" "b\x04", "the prompt") ==
          "the prompt has bytes with no token in this vocabulary (\\x04, \\x06): they are dropped (as Hugging Face "
          "tokenizers and llama.cpp do)");
    CHECK(tokenizer.dropped_bytes_warning("fine", "the prompt") == "");

    const std::string spm_path = data_path("tokenizers/llama2/tokenizer.model");
    if (!have_data(spm_path)) return;
    const Tokenizer spm(load_tokenizer_source(spm_path));
    CHECK(spm.bytes_without_token("a\x04" "b") == "");  // byte fallback: <0x04>
}

// The merge table is built in batches split at each merge's first space; a pair whose pieces contain a space
// is found at a later one, and merges over missing pieces or without a pair are skipped.
TEST_CASE("tokenizer: BPE merges split at the first space, else a later one; impossible merges are skipped") {
    TokenizerData data;
    data.type = "bpe";
    data.pre = "gpt2";
    data.tokens = {"a", "b", "c", "ab", "a b", "a bc", "abc"};
    data.token_types.assign(data.tokens.size(), 1);
    // 1000 valid copies of the first merge push the others past a batch boundary (duplicates keep rank 0).
    std::vector<std::string> merges(1000, "a b");
    for (const char* m : {"a b c", "ab c", "x y", "abc", "a c"}) merges.push_back(m);
    data.merges = merges;
    const BpeEncoder encoder(data);
    CHECK(encoder.n_merges() == 3);  // (a, b), (a b, c) at the second space, (ab, c); not x y, abc or a c
    std::vector<int32_t> ids;
    encoder.encode("abc", ids);
    CHECK(ids == std::vector<int32_t>{6});

    // The same merges as ids (what convert stores): left, right, joined; -1 -1 -1 where none applies.
    const std::vector<int32_t> merge_ids = resolve_bpe_merges(data);
    REQUIRE(merge_ids.size() == 3 * data.merges.size());
    CHECK(std::vector<int32_t>(merge_ids.begin(), merge_ids.begin() + 3) == std::vector<int32_t>{0, 1, 3});
    CHECK(std::vector<int32_t>(merge_ids.end() - 15, merge_ids.end()) ==
          std::vector<int32_t>{4, 2, 5, 3, 2, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1});
    data.merge_ids = merge_ids;
    const BpeEncoder stored(data);
    CHECK(stored.n_merges() == 3);
    ids.clear();
    stored.encode("abc", ids);
    CHECK(ids == std::vector<int32_t>{6});
}

TEST_CASE("tokenizer: stored merge ids encode as resolving the merges does; bad ones are refused") {
    const std::string path = data_path("tokenizers/smollm2/tokenizer.json");
    if (!have_data(path)) return;
    const TokenizerData resolved_at_load = load_tokenizer_source(path);
    REQUIRE(resolved_at_load.merge_ids.empty());
    TokenizerData stored = resolved_at_load;
    stored.merge_ids = resolve_bpe_merges(stored);
    REQUIRE(stored.merge_ids.size() == 3 * stored.merges.size());
    const Tokenizer a(resolved_at_load), b(stored, Tokenizer::KeepReference{});
    std::vector<std::string> texts = vocab_test_texts("starcoder");
    for (const auto& v : read_vectors("smollm2_starcoder_vectors.json")) texts.push_back(v["text"]);
    for (const std::string& text : texts) {
        CAPTURE(text);
        CHECK(a.encode(text, true, true) == b.encode(text, true, true));
        CHECK(b.decode(b.encode(text, false, false)) == a.decode(a.encode(text, false, false)));
    }
    auto error_of = [](const TokenizerData& data) {
        try {
            Tokenizer::validate(data);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    TokenizerData bad = stored;
    bad.merge_ids.pop_back();
    CHECK(error_of(bad).find("merge ids for 48900 merges, expected 3 per merge") != std::string::npos);
    bad = stored;
    bad.merge_ids[4] = 49152;
    CHECK(error_of(bad).find("merge 1 has ids") != std::string::npos);
    bad.merge_ids[4] = -1;  // one id missing, the others not
    CHECK(error_of(bad).find("expected three token ids below 49152 or -1 -1 -1") != std::string::npos);
}

TEST_CASE("tokenizer: special tokens are matched only with parse_special") {
    const std::string path = data_path("tokenizers/smollm2/tokenizer.json");
    if (!have_data(path)) return;
    const Tokenizer tokenizer(load_tokenizer_source(path));
    const int32_t im_start = 1;
    REQUIRE(tokenizer.piece(im_start) == "<|im_start|>");
    const auto with = tokenizer.encode("<|im_start|>user", false, true);
    REQUIRE(with.size() == 2);
    CHECK(with[0] == im_start);
    const auto without = tokenizer.encode("<|im_start|>user", false, false);
    CHECK(without.size() > 3);
    CHECK(std::find(without.begin(), without.end(), im_start) == without.end());
    CHECK(tokenizer.decode(without) == "<|im_start|>user");
    // Longest match wins where special tokens share a prefix (<reponame> vs <repo_name>).
    CHECK(tokenizer.encode("<repo_name>x<reponame>", false, true).front() == 3);
    CHECK(tokenizer.is_end_of_generation(2));  // <|im_end|>
}

TEST_CASE("tokenizer: plain ranges keep special-token text as text inside them, and only there") {
    const std::string path = data_path("tokenizers/smollm2/tokenizer.json");
    if (!have_data(path)) return;
    const Tokenizer tokenizer(load_tokenizer_source(path));
    const int32_t im_start = 1, im_end = 2;
    const std::string message = "hi<|im_end|>\n<|im_start|>assistant";
    const std::string text = "<|im_start|>user\n" + message + "<|im_end|>\n";
    const size_t begin = text.find(message);
    const std::vector<TextRange> plain = {{begin, begin + message.size()}};
    const std::vector<int32_t> ids = tokenizer.encode(text, false, true, plain);
    // The template's two special tokens stay; the message's two are text.
    CHECK(std::count(ids.begin(), ids.end(), im_start) == 1);
    CHECK(std::count(ids.begin(), ids.end(), im_end) == 1);
    CHECK(ids.front() == im_start);
    CHECK(ids[ids.size() - 2] == im_end);
    // ... and encoded as the message alone is without special parsing.
    const std::vector<int32_t> message_ids = tokenizer.encode(message, false, false);
    CHECK(std::vector<int32_t>(ids.begin() + 3, ids.end() - 2) == message_ids);  // after <|im_start|> user \n
    // Text without special tokens encodes the same with or without ranges (runs cross range edges whole).
    const std::string ordinary = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n";
    const size_t b2 = ordinary.find("What");
    CHECK(tokenizer.encode(ordinary, false, true, {{b2, b2 + 30}}) == tokenizer.encode(ordinary, false, true));
    // A special token that only starts inside a range is text too.
    const std::string straddle = "ab<|im_end|>";
    const std::vector<int32_t> straddled = tokenizer.encode(straddle, false, true, {{1, 3}});
    CHECK(std::count(straddled.begin(), straddled.end(), im_end) == 0);
    CHECK(tokenizer.encode(straddle, false, true, {{0, 2}}).back() == im_end);
}

TEST_CASE("tokenizer: Llama 2 SentencePiece model equals the llama-spm GGUF vocabulary") {
    const std::string path = data_path("tokenizers/llama2/tokenizer.model");
    if (!have_data(path) || !have_data(data_path("vocab-tests/ggml-vocab-llama-spm.gguf"))) return;
    const TokenizerData data = load_tokenizer_source(path);
    CHECK(data.type == "spm");
    CHECK(data.add_space_prefix);
    CHECK(data.add_bos);
    CHECK(data.bos_id == 1);
    CHECK(data.eos_id == 2);
    CHECK(data.unk_id == 0);
    const Tokenizer sp(data);
    const Tokenizer gguf = gguf_tokenizer("llama-spm");
    CHECK(sp.n_vocab() == gguf.n_vocab());
    for (const auto& t : read_vocab_tests("llama-spm")) {
        CAPTURE(t.text);
        CHECK(sp.encode(t.text, true, false) == gguf.encode(t.text, true, false));
    }
    check_vocab_tests(sp, "llama-spm");
    check_round_trip(sp, vocab_test_texts("llama-spm"));
    CHECK(sp.encode("Hello") == std::vector<int32_t>{1, 15043});
    CHECK(sp.decode(sp.encode("Hello world")) == "Hello world");  // the dummy-prefix space is dropped
}

TEST_CASE("tokenizer: llama2.c tokenizer.bin encodes as llama2.c does") {
    const std::string path = data_path("stories260K/tok512.bin");
    if (!have_data(path)) return;
    const TokenizerData data = tokenizer_from_llama2c(path, 512);
    REQUIRE(data.tokens.size() == 512);
    CHECK(data.bos_id == 1);
    CHECK(data.eos_id == 2);
    const Tokenizer tokenizer(data);
    for (const auto& v : read_vectors("llama2c_tok512_vectors.json")) {
        const std::string text = v["text"];
        CAPTURE(text);
        const auto ids = tokenizer.encode(text);
        CHECK(ids == v["ids"].get<std::vector<int32_t>>());
        CHECK(tokenizer.decode(ids) == text);
    }
    // Reading to the end of the file (no vocabulary size) gives the same vocabulary.
    CHECK(tokenizer_from_llama2c(path, 0).tokens == data.tokens);
    // The GGUF of the same model carries the same vocabulary and tokenizes identically.
    const std::string gguf_path = data_path("stories260K/stories260K.gguf");
    if (!have_data(gguf_path)) return;
    const Tokenizer from_gguf(load_tokenizer_source(gguf_path));
    for (const char* text : {"Once upon a time", "Lily and Tom's dog ran 123 miles!\n", "naïve 🦙"})
        CHECK(from_gguf.encode(text) == tokenizer.encode(text));
}

TEST_CASE("tokenizer: streaming decode emits only valid UTF-8") {
    SUBCASE("unit") {
        Utf8StreamDecoder d;
        CHECK(d.push("a\xE2") == "a");
        CHECK(d.push("\x82") == "");
        CHECK(d.push("\xAC!") == "\xE2\x82\xAC!");
        CHECK(d.push("\xFF") == "\xEF\xBF\xBD");  // invalid byte
        CHECK(d.push("\xC3(") == "\xEF\xBF\xBD(");  // lead byte without its continuation
        CHECK(d.push("\xF0\x9F") == "");
        CHECK(d.flush() == "\xEF\xBF\xBD");  // incomplete tail
        CHECK(d.flush() == "");
    }
    SUBCASE("tokens split inside characters") {
        const std::string path = data_path("vocab-tests/ggml-vocab-gpt-2.gguf");
        if (!have_data(path)) return;
        const Tokenizer tokenizer = gguf_tokenizer("gpt-2");
        const std::string text = "🚀 (normal) 😶‍🌫️ ✅ нещо កាន់តែ 我想在apple工作";
        const auto ids = tokenizer.encode(text, false, false);
        bool split_inside = false;
        Utf8StreamDecoder decoder;
        std::string streamed;
        for (int32_t id : ids) {
            const std::string bytes = tokenizer.decode_token(id);
            split_inside |= !is_valid_utf8(bytes);
            const std::string chunk = decoder.push(bytes);
            CHECK(is_valid_utf8(chunk));
            streamed += chunk;
        }
        streamed += decoder.flush();
        CHECK(split_inside);  // the test exercises held-back bytes
        CHECK(streamed == text);
    }
}

TEST_CASE("tokenizer: invalid UTF-8 input encodes without crashing and round-trips") {
    const std::string invalid = std::string("ok \xFF\xFE bad \xE2\x82 tail \xC3") + std::string(1, '\0') + "x\x80";
    if (have_data(data_path("vocab-tests/ggml-vocab-gpt-2.gguf"))) {
        const Tokenizer gpt2 = gguf_tokenizer("gpt-2");
        const auto ids = gpt2.encode(invalid, false, false);
        CHECK(!ids.empty());
        CHECK(gpt2.decode(ids) == invalid);  // byte-level BPE keeps every byte
    }
    if (have_data(data_path("vocab-tests/ggml-vocab-llama-spm.gguf"))) {
        const Tokenizer spm = gguf_tokenizer("llama-spm");
        const auto ids = spm.encode(invalid, false, false);
        CHECK(!ids.empty());
        CHECK(spm.decode(ids) == invalid);  // byte fallback keeps every byte
    }
}

TEST_CASE("tokenizer: malformed tokenizer files give errors naming the file") {
    kvlm::test::TempDir dir;
    auto expect_error = [](auto&& load, const std::string& path, const std::string& fragment) {
        try {
            load();
            FAIL("no error for " << path);
        } catch (const kvlm::Error& e) {
            const std::string message = e.what();
            CHECK_MESSAGE(message.find(path) != std::string::npos, message);
            CHECK_MESSAGE(message.find(fragment) != std::string::npos, message);
        }
    };
    const std::string tok512 = data_path("stories260K/tok512.bin");
    if (have_data(tok512)) {
        const std::string full = kvlm::test::read_file(tok512);
        const std::string path = dir.file("truncated.bin");
        kvlm::test::write_file(path, full.substr(0, full.size() / 2));
        expect_error([&] { tokenizer_from_llama2c(path, 512); }, path, "truncated");
        kvlm::test::write_file(path, full.substr(0, 2));
        expect_error([&] { tokenizer_from_llama2c(path, 0); }, path, "truncated");
    }
    const std::string bad_json = dir.file("tokenizer.json");
    kvlm::test::write_file(bad_json, R"({"model": {"type": "BPE", "vocab": {"a": 0,)");
    expect_error([&] { load_tokenizer_source(bad_json); }, bad_json, "invalid JSON");

    const std::string tiktoken = dir.file("tokenizer.model");
    kvlm::test::write_file(tiktoken, "IQ== 0\nIg== 1\nIw==\n");
    kvlm::test::write_file(dir.file("tokenizer_config.json"), "{}");
    expect_error([&] { tokenizer_from_tiktoken(tiktoken, ""); }, tiktoken, "no rank");
    kvlm::test::write_file(tiktoken, "IQ== 0\nI!== 1\n");
    expect_error([&] { tokenizer_from_tiktoken(tiktoken, ""); }, tiktoken, "base64");

    const std::string llama2 = data_path("tokenizers/llama2/tokenizer.model");
    if (have_data(llama2)) {
        const std::string full = kvlm::test::read_file(llama2);
        const std::string path = dir.file("sp.model");
        kvlm::test::write_file(path, full.substr(0, 1000));
        expect_error([&] { tokenizer_from_sentencepiece(path); }, path, "malformed SentencePiece");
    }
    // Inconsistent data is refused by the Tokenizer itself.
    TokenizerData data;
    data.type = "bpe";
    data.tokens = {"a", "b"};
    data.token_types = {1, 1};
    data.bos_id = 7;
    CHECK_THROWS_AS(Tokenizer{data}, kvlm::Error);
}

TEST_CASE("tokenizer: JSON fields of the wrong type and absurd token ids are errors naming the file") {
    // Fuzz findings (tests/fuzz/regressions/tokenizer_json): nlohmann type errors escaped as foreign
    // exceptions, an id of 2^32 wrapped to 0 and overwrote that token, ids up to 2^24 made 16M fillers.
    kvlm::test::TempDir dir;
    const std::string json_path = dir.file("tokenizer.json"), config_path = dir.file("tokenizer_config.json");
    const std::string byte_level = R"("model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"})";
    const std::pair<std::string, const char*> cases[] = {
        {R"({"model": {"type": 5, "vocab": {"a": 0}, "merges": []}})", "unexpected JSON structure"},
        {R"({"model": {"vocab": {"a": 0}, "merges": [], "byte_fallback": "yes"}})", "unexpected JSON structure"},
        {R"({"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [)"
         R"({"type": "Split", "pattern": {"Regex": 7}}, {"type": "ByteLevel", "use_regex": false}]}})",
         "unexpected JSON structure"},
        {"{" + byte_level + R"(, "added_tokens": [{"id": 1, "content": "x", "special": 1}]})", "unexpected JSON structure"},
        {"{" + byte_level + R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": "a"}]}})",
         "unexpected JSON structure"},
        {"{" + byte_level + R"(, "added_tokens": [{"id": 4294967296, "content": "x"}]})", "out of range"},
        {"{" + byte_level + R"(, "added_tokens": [{"id": 16000000, "content": "x"}]})", "out of range"},
        {R"({"model": {"vocab": {"a": 16000000}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})", "vocab entry 'a'"},
    };
    for (const auto& json_case : cases) {
        const auto& json = json_case.first;  // no structured binding: clang 14 cannot capture one in INFO
        const auto& fragment = json_case.second;
        INFO(json);
        kvlm::test::write_file(json_path, json);
        try {
            tokenizer_from_hf_json(json_path, "");
            FAIL("no error");
        } catch (const kvlm::Error& e) {
            const std::string message = e.what();
            CHECK_MESSAGE(message.find(json_path) != std::string::npos, message);
            CHECK_MESSAGE(message.find(fragment) != std::string::npos, message);
        }
    }
    // A wrongly typed field of tokenizer_config.json is reported against that file.
    kvlm::test::write_file(json_path, "{" + byte_level + "}");
    kvlm::test::write_file(config_path, R"({"added_tokens_decoder": {"1": {"content": "x", "special": "yes"}}})");
    try {
        tokenizer_from_hf_json(json_path, config_path);
        FAIL("no error");
    } catch (const kvlm::Error& e) {
        const std::string message = e.what();
        CHECK_MESSAGE(message.find(config_path + ": unexpected JSON structure") != std::string::npos, message);
    }
    // added_tokens_decoder keys are whole decimal ids.
    for (const char* key : {"12abc", "-1", " 3", "0x10", ""}) {
        CAPTURE(key);
        kvlm::test::write_file(config_path, std::string(R"({"added_tokens_decoder": {")") + key +
                                                R"(": {"content": "x", "special": true}}})");
        const std::string expected = "added_tokens_decoder key '" + std::string(key) + "' is not a token id";
        CHECK_THROWS_WITH_AS(tokenizer_from_hf_json(json_path, config_path), doctest::Contains(expected.c_str()),
                             kvlm::Error);
    }
}

TEST_CASE("kvlm tokenize: ids and pieces from a converted model") {
    const std::string gguf_path = data_path("stories260K/stories260K.gguf");
    if (!have_data(gguf_path)) return;
    const char* bin = std::getenv("KVLM_BIN");
    if (!std::filesystem::exists(bin && *bin ? bin : "./kvlm")) {
        MESSAGE("SKIPPED: kvlm binary not built (set KVLM_BIN)");
        return;
    }
    const std::string model = kvlm::test::converted_model("tokenize-stories260K", {gguf_path});
    const Tokenizer reference(load_tokenizer_source(gguf_path));
    const std::string text = "Once upon a time, Lily saw 3 birds.";
    std::string expected;
    for (int32_t id : reference.encode(text)) expected += (expected.empty() ? "" : " ") + std::to_string(id);

    auto r = kvlm::test::run_kvlm({"tokenize", model, text});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out == expected + "\n");
    CHECK(r.out.rfind("1 ", 0) == 0);  // BOS first

    r = kvlm::test::run_kvlm({"tokenize", "--no-bos", model, text});
    CHECK(r.out.rfind("1 ", 0) != 0);

    r = kvlm::test::run_kvlm({"tokenize", "--pieces", model, "Once upon\n"});
    REQUIRE(r.exit_code == 0);
    CHECK(r.out == "1\t<s>\n403\t Once\n407\t upon\n13\t\\n\n");

    r = kvlm::test::run_kvlm({"tokenize", data_path("stories260K/missing.kvlm"), "x"});
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("missing.kvlm") != std::string::npos);
}

TEST_CASE("tokenizer: mutated tokenizer files load or throw Error, never crash") {
    kvlm::test::TempDir dir;
    uint32_t seed = 12345;
    auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
    auto load_or_error = [](auto&& load) {
        try {
            const TokenizerData data = load();
            Tokenizer tokenizer(data);
            tokenizer.encode("Hello world \xF0\x9F\xA6\x99 123");
        } catch (const kvlm::Error&) {
        }
    };
    const std::string tok512 = data_path("stories260K/tok512.bin");
    if (have_data(tok512)) {
        const std::string original = kvlm::test::read_file(tok512);
        const std::string path = dir.file("tok.bin");
        for (int i = 0; i < 64; ++i) {
            std::string mutated = original;
            for (int k = 0; k < 4; ++k) mutated[next() % mutated.size()] = static_cast<char>(next());
            kvlm::test::write_file(path, mutated);
            load_or_error([&] { return tokenizer_from_llama2c(path, 0); });
        }
    }
    const std::string llama2 = data_path("tokenizers/llama2/tokenizer.model");
    if (have_data(llama2)) {
        const std::string original = kvlm::test::read_file(llama2);
        const std::string path = dir.file("sp.model");
        for (int i = 0; i < 16; ++i) {
            std::string mutated = original;
            for (int k = 0; k < 3; ++k) mutated[next() % 4096] = static_cast<char>(next());  // piece headers
            kvlm::test::write_file(path, mutated);
            load_or_error([&] { return tokenizer_from_sentencepiece(path); });
        }
    }
}

TEST_CASE("tokenizer: SentencePiece-style tokenizer.json (byte fallback, Prepend normalizer)") {
    kvlm::test::TempDir dir;
    const std::string path = dir.file("tokenizer.json");
    kvlm::test::write_file(path, R"({
      "added_tokens": [{"id": 1, "content": "<s>", "special": true}, {"id": 2, "content": "</s>", "special": true}],
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                     {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
      "pre_tokenizer": null,
      "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}}]},
      "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]},
      "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
                "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "a": 4, "b": 5, "▁a": 6, "ab": 7, "▁ab": 8,
                          "<0x0A>": 9},
                "merges": ["▁ a", ["a", "b"], "▁a b"]}
    })");
    const TokenizerData data = tokenizer_from_hf_json(path, "");
    CHECK(data.type == "spm");
    CHECK(data.add_space_prefix);
    CHECK(data.add_bos);
    CHECK(data.bos_id == 1);
    const Tokenizer tokenizer(data);
    CHECK(tokenizer.encode("ab") == std::vector<int32_t>{1, 8});
    CHECK(tokenizer.encode("ab\n", false) == std::vector<int32_t>{8, 9});  // byte fallback
    CHECK(tokenizer.encode("ba", false) == std::vector<int32_t>{3, 5, 4});
    CHECK(tokenizer.decode(tokenizer.encode("ab ab\n")) == "ab ab\n");
}
