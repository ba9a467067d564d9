// `kvlm run --session` and `kvlm session ...` through the real binary on stories260K: resume across
// processes with bit-identical logits, fault injection (damaged/missing files, other model, other block
// size, future format), kill -9 during save, the second-writer lock, verify/gc/ls, unwritable directories.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <random>
#include <regex>

#include "engine/engine.h"
#include "format/model_file.h"
#include "generate/generate.h"
#include "session/session_store.h"
#include "support/test_util.h"
#include "tokenizer/tokenizer.h"
#include "util/file_lock.h"

extern char** environ;

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

CliResult run_turn(const std::string& dir, const std::string& name, const std::string& prompt,
                   std::vector<std::string> extra = {}, const std::string& model = "") {
    std::vector<std::string> args = {"run", "-m", model.empty() ? stories() : model, "-p", prompt, "-n", "24", "--temp",
                                     "0", "-t", "1", "-c", "512", "--session", name, "--session-dir", dir};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kvlm(args);
}

std::string logits_hash(const std::string& err) {
    std::smatch m;
    return std::regex_search(err, m, std::regex("logits hash ([0-9a-f]{16})")) ? m[1].str() : "";
}

int count(const std::string& err, const std::string& what) {
    std::smatch m;
    return std::regex_search(err, m, std::regex("(\\d+) " + what)) ? std::stoi(m[1].str()) : -1;
}

// Session "s" with two turns (48 + tokens: 3 full blocks and a partial one).
void make_two_turns(const std::string& dir) {
    REQUIRE(run_turn(dir, "s", "Once upon a time").exit_code == 0);
    REQUIRE(run_turn(dir, "s", " Lily saw a big red ball.").exit_code == 0);
}

// Disk space (allocated blocks) of every file in the store that `session ls` totals (sessions/, blocks/,
// chats/): what du counts, not the apparent sizes.
uint64_t store_file_bytes(const std::string& dir) {
    uint64_t total = 0;
    for (const char* sub : {"/sessions", "/blocks", "/chats"})
        for (const auto& e : std::filesystem::recursive_directory_iterator(dir + sub)) {
            struct stat st;
            if (e.is_regular_file() && ::stat(e.path().c_str(), &st) == 0) total += uint64_t(st.st_blocks) * 512;
        }
    return total;
}

std::vector<std::string> empty_dirs_in(const std::string& dir) {
    std::vector<std::string> empty;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
        if (e.is_directory() && std::filesystem::is_empty(e.path())) empty.push_back(e.path().string());
    return empty;
}

void check_refused(const CliResult& r, const std::string& needle) {
    CHECK(r.exit_code != 0);
    CHECK(r.out.empty());
    CHECK_MESSAGE(r.err.find(needle) != std::string::npos, "stderr: " << r.err << "\nexpected: " << needle);
    CHECK_MESSAGE(r.err.find("kvlm session rm s") != std::string::npos, r.err);
}

}  // namespace

TEST_CASE("session cli: 3 turns as 3 processes == 3 turns in one engine, only new tokens prefilled") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::vector<std::string> turns = {"Once upon a time", " Lily saw a big red ball.", " Then"};
    std::vector<GenerationResult> reference;
    std::vector<std::string> reference_text;
    {
        EngineOptions o;
        o.device = "cpu";
        o.n_threads = 1;
        o.n_ctx = 512;
        o.quiet = true;
        Engine engine(stories(), o);
        Sequence seq;
        std::vector<int32_t> transcript;
        SamplingParams greedy;
        greedy.temperature = 0;
        for (size_t t = 0; t < turns.size(); t++) {
            std::vector<int32_t> ids = engine.tokenizer().encode(turns[t], t == 0, true);
            std::vector<int32_t> tokens(transcript.begin() + seq.table.n_tokens, transcript.end());
            tokens.insert(tokens.end(), ids.begin(), ids.end());
            Sampler sampler(greedy);
            std::string text;
            reference.push_back(generate(engine, seq, tokens, 24, sampler, [&](const std::string& s) { text += s; }));
            reference_text.push_back(text);
            transcript = reference.back().transcript;
        }
        engine.prefix_cache().release(seq);
    }
    TempDir dir;
    for (size_t t = 0; t < turns.size(); t++) {
        CAPTURE(t);
        CliResult r = run_turn(dir.path(), "conv", turns[t], {"--verbose"});
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        CHECK(r.out == reference_text[t]);
        CHECK(logits_hash(r.err) == fmt::format("{:016x}", reference[t].logits_hash));
        if (t > 0) {
            CHECK(count(r.err, "restored from disk") == int32_t(reference[t - 1].transcript.size()) - 1);
            CHECK(count(r.err, "prefilled") == reference[t].n_prefilled);
        }
    }
    CliResult ls = run_kvlm({"session", "ls", "--session-dir", dir.path()});
    CHECK(ls.exit_code == 0);
    CHECK(ls.out.find("conv") != std::string::npos);
    CliResult show = run_kvlm({"session", "show", "conv", "-m", stories(), "--session-dir", dir.path()});
    CHECK(show.exit_code == 0);
    CHECK(show.out.find("Lily saw a big red ball.") != std::string::npos);
}

TEST_CASE("session cli: start to first token of a continued session counts its restore") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    // One block file per token makes the restore of ~400 tokens take milliseconds even for stories260K.
    std::string history;
    for (int i = 0; i < 30; i++) history += "Once upon a time there was a little girl named Lily. ";
    TempDir dir;
    CliResult first = run_turn(dir.path(), "long", history, {"--block-size", "1"});
    REQUIRE_MESSAGE(first.exit_code == 0, first.err);
    CliResult next = run_turn(dir.path(), "long", " She", {"--verbose"});
    REQUIRE_MESSAGE(next.exit_code == 0, next.err);
    std::smatch restore, ttft, load;
    REQUIRE_MESSAGE(std::regex_search(next.err, restore, std::regex("restored ([0-9]+) tokens \\([^)]*\\) in ([0-9.]+) s")),
                    next.err);
    REQUIRE(std::regex_search(next.err, ttft, std::regex("start to first token ([0-9.]+) s")));
    REQUIRE(std::regex_search(next.err, load, std::regex("kvlm: load ([0-9.]+) s \\|")));
    CHECK(std::stoi(restore[1]) > 300);
    // The whole wait before the first token: the load, the restore and more (printed to 1 ms, restore to 0.1 ms).
    CHECK_MESSAGE(std::stod(ttft[1]) + 0.00105 >= std::stod(load[1]) + std::stod(restore[2]), next.err);
}

TEST_CASE("session cli: damaged, missing or foreign files give the documented behaviour") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir clean;
    make_two_turns(clean.path());
    CliResult expected = run_turn(clean.path(), "s", " Then");
    REQUIRE(expected.exit_code == 0);

    auto with_damage = [&](const std::function<void(SessionStore&, const SessionManifest&)>& damage) {
        TempDir dir;
        make_two_turns(dir.path());
        SessionStore store(dir.path());
        damage(store, store.load_manifest("s"));
        return run_turn(dir.path(), "s", " Then");
    };
    auto recomputed = [&](const CliResult& r, const std::string& problem) {
        CHECK_MESSAGE(r.exit_code == 0, r.err);
        CHECK(r.out == expected.out);  // greedy: recomputed K/V lead to the same text
        CHECK_MESSAGE(r.err.find("warning: session 's': block 1") != std::string::npos, r.err);
        CHECK_MESSAGE(r.err.find(problem) != std::string::npos, r.err);
        CHECK(r.err.find("recomputing") != std::string::npos);
    };
    SUBCASE("truncated block") {
        recomputed(with_damage([](SessionStore& s, const SessionManifest& m) {
                       std::string p = s.block_path(m.blocks[1].hash);
                       std::filesystem::resize_file(p, std::filesystem::file_size(p) - 100);
                   }),
                   "truncated");
    }
    SUBCASE("flipped bit in a block") {
        recomputed(with_damage([](SessionStore& s, const SessionManifest& m) {
                       std::string p = s.block_path(m.blocks[1].hash);
                       std::string bytes = read_file(p);
                       bytes[bytes.size() - 7] ^= 0x01;
                       write_file(p, bytes);
                   }),
                   "checksum mismatch");
    }
    SUBCASE("missing block") {
        recomputed(with_damage([](SessionStore& s, const SessionManifest& m) {
                       std::filesystem::remove(s.block_path(m.blocks[1].hash));
                   }),
                   "missing");
    }
    SUBCASE("truncated manifest") {
        check_refused(with_damage([](SessionStore& s, const SessionManifest&) {
                          std::string p = s.manifest_path("s");
                          std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
                      }),
                      "truncated");
    }
    SUBCASE("future format version") {
        check_refused(with_damage([](SessionStore& s, const SessionManifest&) {
                          std::string p = s.manifest_path("s");
                          std::string bytes = read_file(p);
                          bytes[4] = 9;
                          write_file(p, bytes);
                      }),
                      "session format version 9 is not supported (this kvlm reads versions 1 to 2)");
    }
    SUBCASE("a manifest copied under another session's name") {
        TempDir dir;
        make_two_turns(dir.path());
        REQUIRE(run_turn(dir.path(), "t", "The dog").exit_code == 0);
        SessionStore store(dir.path());
        std::filesystem::copy_file(store.manifest_path("s"), store.manifest_path("t"),
                                   std::filesystem::copy_options::overwrite_existing);
        CliResult copied = run_turn(dir.path(), "t", " Then");
        CHECK(copied.exit_code == 1);
        CHECK(copied.out.empty());
        CHECK_MESSAGE(contains(copied.err, "this manifest belongs to session 's', not 't' (copied or renamed by hand?); "
                                           "start fresh with `kvlm session rm t`"),
                      copied.err);
        CHECK(run_turn(dir.path(), "s", " Then").out == expected.out);  // the original is untouched
    }
    SUBCASE("another model, another block size") {
        TempDir dir;
        make_two_turns(dir.path());
        std::string f16 = converted_model("stories-f16", {data_path("stories260K/stories260K.gguf"), "--dtype", "f16"});
        // The mismatch names both models: file, architecture and source, not just hashes.
        CliResult other_model = run_turn(dir.path(), "s", " Then", {}, f16);
        check_refused(other_model, "model: session was saved with stories-gguf.kvlm (llama, from GGUF "
                                   "stories260K.gguf), fingerprint ");
        CHECK_MESSAGE(other_model.err.find("this run has stories-f16.kvlm (llama, from GGUF stories260K.gguf)") !=
                          std::string::npos,
                      other_model.err);
        check_refused(run_turn(dir.path(), "s", " Then", {"--block-size", "32"}),
                      "block size: session has 16, this run has 32 (run with --block-size 16 to continue it)");
        check_refused(run_turn(dir.path(), "s", " Then", {"--kv-dtype", "bf16"}),
                      "KV dtype: session has f32, this run has bf16 (run with --kv-dtype f32 to continue it)");
        // Refusals changed nothing: the session still continues as if untouched.
        CliResult r = run_turn(dir.path(), "s", " Then");
        CHECK(r.exit_code == 0);
        CHECK(r.out == expected.out);
    }
}

TEST_CASE("session cli: --kv-dtype auto continues a session in the cache type it was saved with") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir, fresh;
    // Saved with a bf16 cache (as --kv-dtype auto makes it on a GPU for a bf16 model), continued without the flag.
    CliResult first = run_turn(dir.path(), "s", "Once upon", {"--kv-dtype", "bf16"});
    REQUIRE_MESSAGE(first.exit_code == 0, first.err);
    CliResult second = run_turn(dir.path(), "s", " Then", {"-v"});
    REQUIRE_MESSAGE(second.exit_code == 0, second.err);
    CHECK_MESSAGE(second.err.find("KV cache bf16 (auto: session 's' was saved with it)") != std::string::npos,
                  second.err);
    std::smatch restored;  // the history came back from disk, not prefilled again
    REQUIRE_MESSAGE(std::regex_search(second.err, restored, std::regex(R"((\d+) restored from disk)")), second.err);
    CHECK(std::stoi(restored[1].str()) > 0);
    // Exactly what an explicit --kv-dtype bf16 continuation gives.
    REQUIRE(run_turn(fresh.path(), "s", "Once upon", {"--kv-dtype", "bf16"}).exit_code == 0);
    CliResult explicit_bf16 = run_turn(fresh.path(), "s", " Then", {"--kv-dtype", "bf16"});
    CHECK(second.out == explicit_bf16.out);
    // A new session with auto on the CPU from an f32 model is f32, and says nothing about it.
    CliResult other = run_turn(dir.path(), "t", "Once upon", {"-v"});
    REQUIRE(other.exit_code == 0);
    CHECK(other.err.find("KV cache") == std::string::npos);
    CHECK(run_kvlm({"session", "show", "t", "--session-dir", dir.path()}).out.find("KV:        f32") !=
          std::string::npos);
}

// Issue 17: on the CPU a 16-bit or quantized model gets an f16 cache (half the pool and the store), an f32
// model keeps f32; a session saved in f32 from such a model continues in f32 and says so.
TEST_CASE("session cli: --kv-dtype auto on the CPU is f16 for 16-bit and quantized models, f32 for f32 models") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    const std::string gguf = data_path("stories260K/stories260K.gguf");
    for (const char* type : {"f16", "bf16", "q8_0"}) {
        CAPTURE(type);
        const std::string model = converted_model(std::string("stories-kv-auto-") + type, {gguf, "--dtype", type});
        CliResult r = run_turn(dir.path(), std::string("auto-") + type, "Once upon", {"--device", "cpu", "-v"}, model);
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        CHECK_MESSAGE(r.err.find(std::string("KV cache f16 (auto: f16 for the model's ") + type + " weights)") !=
                          std::string::npos,
                      r.err);
        CHECK(run_kvlm({"session", "show", std::string("auto-") + type, "--session-dir", dir.path()})
                  .out.find("KV:        f16") != std::string::npos);
    }
    const std::string f16 = converted_model("stories-kv-auto-f16", {gguf, "--dtype", "f16"});
    REQUIRE(run_turn(dir.path(), "old", "Once upon", {"--kv-dtype", "f32"}, f16).exit_code == 0);
    CliResult continued = run_turn(dir.path(), "old", " Then", {"-v"}, f16);
    REQUIRE_MESSAGE(continued.exit_code == 0, continued.err);
    // Without -v the choice is not announced (it was printed on every run).
    CliResult quiet = run_turn(dir.path(), "old", " Then", {}, f16);
    REQUIRE_MESSAGE(quiet.exit_code == 0, quiet.err);
    CHECK_MESSAGE(quiet.err.find("KV cache") == std::string::npos, quiet.err);
    CHECK_MESSAGE(continued.err.find("KV cache f32 (auto: session 'old' was saved with it)") != std::string::npos,
                  continued.err);
    CHECK(run_kvlm({"session", "show", "old", "--session-dir", dir.path()}).out.find("KV:        f32") !=
          std::string::npos);
}

namespace {
// Bytes of the block files in a session store, and how many there are.
std::pair<uint64_t, int> block_files(const std::string& dir) {
    uint64_t bytes = 0;
    int n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/blocks"))
        if (e.is_regular_file()) bytes += e.file_size(), n++;
    return {bytes, n};
}
}  // namespace

TEST_CASE("session cli: a q8_0 KV cache is saved at about half an f16 one's size and continues in q8_0") {
    const std::string gguf = "models/cache/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!have_data(gguf)) return;
    const std::string model = converted_model("smollm2-q4_1", {gguf});
    const std::string history = "The old lighthouse keeper climbed the stairs every evening to light the lamp. "
                                "Ships passed safely through the narrow strait because of him.";
    TempDir q8, f16, recomputed;
    CliResult first = run_turn(q8.path(), "s", history, {"--kv-dtype", "q8_0"}, model);
    REQUIRE_MESSAGE(first.exit_code == 0, first.err);
    REQUIRE(run_turn(f16.path(), "s", history, {"--kv-dtype", "f16"}, model).exit_code == 0);
    const auto [q8_bytes, q8_files] = block_files(q8.path());
    const auto [f16_bytes, f16_files] = block_files(f16.path());
    CHECK(q8_files == f16_files);
    CHECK(q8_files >= 2);
    // 34 bytes per 32 elements against 64: 0.53 of the payload, plus the same small header per file.
    MESSAGE("block files: q8_0 " << q8_bytes << " bytes, f16 " << f16_bytes);
    CHECK(double(q8_bytes) / double(f16_bytes) > 0.52);
    CHECK(double(q8_bytes) / double(f16_bytes) < 0.54);
    CHECK(run_kvlm({"session", "show", "s", "--session-dir", q8.path()}).out.find("KV:        q8_0") !=
          std::string::npos);

    // The next turn needs no flag: the session's type is kept and said, and the history comes from disk.
    CliResult next = run_turn(q8.path(), "s", " One night the lamp", {"-v"}, model);
    REQUIRE_MESSAGE(next.exit_code == 0, next.err);
    CHECK_MESSAGE(next.err.find("KV cache q8_0 (auto: session 's' was saved with it)") != std::string::npos, next.err);
    CHECK(count(next.err, "restored from disk") > 0);
    // Restored q8_0 blocks are the bits recomputing them gives: the same text and logits as a turn whose
    // stored blocks are gone (and are prefilled again).
    REQUIRE(run_turn(recomputed.path(), "s", history, {"--kv-dtype", "q8_0"}, model).exit_code == 0);
    std::filesystem::remove_all(recomputed.path() + "/blocks");
    CliResult again = run_turn(recomputed.path(), "s", " One night the lamp", {"-v"}, model);
    REQUIRE_MESSAGE(again.exit_code == 0, again.err);
    CHECK(count(again.err, "restored from disk") == 0);
    CHECK(again.out == next.out);
    CHECK(logits_hash(again.err) == logits_hash(next.err));
    CHECK(!logits_hash(next.err).empty());
}

TEST_CASE("session cli: many blocks are read at once, and a damaged one in the middle keeps only those before it") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    // Block size 2: ~60 history tokens in ~30 block files, enough for the restore's parallel readers.
    auto two_turns = [](const std::string& dir) {
        REQUIRE(run_turn(dir, "s", "Once upon a time", {"--block-size", "2"}).exit_code == 0);
        REQUIRE(run_turn(dir, "s", " Lily saw a big red ball.").exit_code == 0);
    };
    TempDir clean, damaged;
    two_turns(clean.path());
    two_turns(damaged.path());
    const SessionManifest m = SessionStore(damaged.path()).load_manifest("s");
    REQUIRE(m.blocks.size() >= 24);
    CliResult expected = run_turn(clean.path(), "s", " Then", {"-v"});
    REQUIRE_MESSAGE(expected.exit_code == 0, expected.err);
    CHECK(count(expected.err, "restored from disk") == m.n_kv_tokens);

    // Block 11 damaged: blocks 0-10 restored, the rest recomputed, the same text and logits.
    const std::string path = SessionStore(damaged.path()).block_path(m.blocks[11].hash);
    std::string bytes = read_file(path);
    bytes[bytes.size() - 5] ^= 0x10;
    write_file(path, bytes);
    CliResult r = run_turn(damaged.path(), "s", " Then", {"-v"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(r.err.find("warning: session 's': block 11 (" + m.blocks[11].hash.hex() +
                             ") checksum mismatch (the file is damaged): recomputing") != std::string::npos,
                  r.err);
    CHECK(count(r.err, "restored from disk") == 22);
    CHECK(r.out == expected.out);
    CHECK(logits_hash(r.err) == logits_hash(expected.err));
    // The turn saved the block again: the next one restores everything.
    CliResult again = run_turn(damaged.path(), "s", " Then", {"-v"});
    REQUIRE_MESSAGE(again.exit_code == 0, again.err);
    CHECK(again.err.find("warning") == std::string::npos);
}

TEST_CASE("session cli: without --block-size a session continues in the block size it was saved with") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir, fresh;
    CliResult first = run_turn(dir.path(), "s", "Once upon a time", {"--block-size", "32"});
    REQUIRE_MESSAGE(first.exit_code == 0, first.err);
    CliResult second = run_turn(dir.path(), "s", " Then", {"-v"});
    REQUIRE_MESSAGE(second.exit_code == 0, second.err);
    CHECK_MESSAGE(second.err.find("kvlm: KV block size 32 (session 's' was saved with it)") != std::string::npos,
                  second.err);
    CHECK(count(second.err, "restored from disk") > 0);  // the history came back from disk, not prefilled again
    // Exactly what an explicit --block-size 32 continuation gives.
    REQUIRE(run_turn(fresh.path(), "s", "Once upon a time", {"--block-size", "32"}).exit_code == 0);
    CliResult explicit_32 = run_turn(fresh.path(), "s", " Then", {"--block-size", "32"});
    REQUIRE_MESSAGE(explicit_32.exit_code == 0, explicit_32.err);
    CHECK(second.out == explicit_32.out);
    CHECK(explicit_32.err.find("KV block size") == std::string::npos);  // asked for: nothing to explain
    // An explicit block size that differs is still refused, naming both.
    check_refused(run_turn(dir.path(), "s", " Then", {"--block-size", "16"}),
                  "block size: session has 32, this run has 16 (run with --block-size 32 to continue it)");
    // A new session without the flag gets 16, and says nothing about it.
    CliResult other = run_turn(dir.path(), "t", "Once upon", {"-v"});
    REQUIRE_MESSAGE(other.exit_code == 0, other.err);
    CHECK(other.err.find("KV block size") == std::string::npos);
    CliResult show = run_kvlm({"session", "show", "t", "--session-dir", dir.path()});
    CHECK_MESSAGE(show.out.find(", block size 16\n") != std::string::npos, show.out);
    // Continuing a 16-token session is silent too: the usual block size needs no explanation.
    CliResult again = run_turn(dir.path(), "t", " Then", {"-v"});
    REQUIRE_MESSAGE(again.exit_code == 0, again.err);
    CHECK(again.err.find("KV block size") == std::string::npos);
    // Explicit bad values keep their error.
    for (const char* bad : {"0", "-3"}) {
        CliResult r = run_turn(dir.path(), "s", " Then", {"--block-size", bad});
        CHECK(r.exit_code != 0);
        CHECK_MESSAGE(r.err.find(fmt::format("--block-size: {} is out of range (1..4096)", bad)) != std::string::npos,
                      r.err);
    }
}

TEST_CASE("session cli: verify reports damage, gc removes what no manifest names") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    make_two_turns(dir.path());
    CliResult ok = run_kvlm({"session", "verify", "--session-dir", dir.path()});
    CHECK(ok.exit_code == 0);
    CHECK(ok.out.find("all ok") != std::string::npos);
    SessionStore store(dir.path());
    SessionManifest m = store.load_manifest("s");
    std::string p = store.block_path(m.blocks[2].hash);
    std::string bytes = read_file(p);
    bytes[bytes.size() / 2] ^= 0x20;
    write_file(p, bytes);
    CliResult bad = run_kvlm({"session", "verify", "s", "--session-dir", dir.path()});
    CHECK(bad.exit_code == 1);
    CHECK_MESSAGE(bad.out.find("s: block 2 (" + m.blocks[2].hash.hex() + "): checksum mismatch") != std::string::npos,
                  bad.out);
    CHECK(run_kvlm({"session", "verify", "nope", "--session-dir", dir.path()}).exit_code != 0);
    write_file(p, read_file(p).replace(bytes.size() / 2, 1, 1, char(bytes[bytes.size() / 2] ^ 0x20)));

    // Quota eviction is not damage: one line per session that lost blocks, exit 0; a run recomputes them.
    REQUIRE(run_turn(dir.path(), "t", "The dog").exit_code == 0);
    CliResult evict = run_kvlm({"session", "gc", "--quota", "1", "--session-dir", dir.path()});
    REQUIRE_MESSAGE(evict.exit_code == 0, evict.err);
    CliResult after = run_kvlm({"session", "verify", "--session-dir", dir.path()});
    CHECK_MESSAGE(after.exit_code == 0, after.out);
    CHECK_MESSAGE(after.out.find(fmt::format("s: {} of {} blocks evicted (session gc --quota) or deleted: its next run "
                                             "recomputes {} tokens from position 0",
                                             m.blocks.size(), m.blocks.size(), m.tokens.size())) != std::string::npos,
                  after.out);
    CHECK(std::count(after.out.begin(), after.out.end(), '\n') == 3);  // s, t and the summary
    CHECK_MESSAGE(after.out.find("2 session(s) with evicted blocks") != std::string::npos, after.out);
    CHECK(run_turn(dir.path(), "s", " Then").exit_code == 0);

    std::string orphan = store.block_path(BlockHash{1, 2});
    std::filesystem::create_directories(std::filesystem::path(orphan).parent_path());
    write_file(orphan, "x");
    CliResult gc = run_kvlm({"session", "gc", "--session-dir", dir.path()});
    CHECK(gc.exit_code == 0);
    CHECK_MESSAGE(gc.out.find("removed 1 unreferenced") != std::string::npos, gc.out);
    CHECK(!std::filesystem::exists(orphan));
    CHECK(std::filesystem::exists(p));
    CliResult rm = run_kvlm({"session", "rm", "s", "--session-dir", dir.path()});
    CHECK(rm.exit_code == 0);
    CHECK(run_kvlm({"session", "rm", "t", "--session-dir", dir.path()}).exit_code == 0);
    CHECK(store.total_bytes() == 0);
    CHECK(run_kvlm({"session", "rm", "s", "--session-dir", dir.path()}).exit_code != 0);
}

TEST_CASE("session cli: ls counts chat messages; rm/gc leave no empty shard dirs or stale temp files; locks stay") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    namespace fs = std::filesystem;
    TempDir dir;
    CliResult chat = run_kvlm({"chat", "-m", stories(), "--chat-template", "chatml", "--temp", "0", "-t", "1", "-n",
                               "10", "-c", "512", "--session", "c", "--session-dir", dir.path()},
                              "Once upon a time\n");
    REQUIRE_MESSAGE(chat.exit_code == 0, chat.err);
    REQUIRE(run_turn(dir.path(), "r", "Once upon a time").exit_code == 0);
    // Stands in for what a chat save stopped before its last rename leaves; large enough to show in the total.
    write_file(dir.file("chats/c.chat.new"), std::string(64 << 10, 'x'));
    auto ls_total = [&] {
        CliResult ls = run_kvlm({"session", "ls", "--session-dir", dir.path()});
        REQUIRE_MESSAGE(ls.exit_code == 0, ls.err);
        std::smatch m;
        REQUIRE_MESSAGE(std::regex_search(ls.out, m, std::regex("\ntotal ([0-9.]+ KiB) in ")), ls.out);
        return m[1].str();
    };
    CHECK(ls_total() == fmt::format("{:.1f} KiB", store_file_bytes(dir.path()) / 1024.0));
    // A sparse leftover of 1 GiB apparent size uses no disk: neither ls nor the quota counts it as 1 GiB.
    const std::string sparse = dir.file("sessions/.tmp-1-sparse");
    write_file(sparse, "");
    fs::resize_file(sparse, uint64_t(1) << 30);
    const std::string total_with_sparse = ls_total();
    CHECK(total_with_sparse == fmt::format("{:.1f} KiB", store_file_bytes(dir.path()) / 1024.0));
    // A save under a 10 MiB quota evicts nothing (it would if the sparse file counted as 1 GiB).
    REQUIRE(run_turn(dir.path(), "q", "The dog", {"--session-quota", "10MiB"}).exit_code == 0);
    CHECK(run_kvlm({"session", "verify", "--session-dir", dir.path()}).out.find("evicted") == std::string::npos);
    fs::remove(sparse);
    REQUIRE(run_kvlm({"session", "rm", "q", "--session-dir", dir.path()}).exit_code == 0);
    // A chat session is marked as one; a plain run session is not.
    std::string both = run_kvlm({"session", "ls", "--session-dir", dir.path()}).out;
    CHECK_MESSAGE(std::regex_search(both, std::regex("\nc +[^\n]* chat\n")), both);
    CHECK_MESSAGE(std::regex_search(both, std::regex("\nr +[^\n]*:[0-9]{2} *\n")), both);

    CliResult rm = run_kvlm({"session", "rm", "r", "--session-dir", dir.path()});
    REQUIRE_MESSAGE(rm.exit_code == 0, rm.err);
    CHECK(empty_dirs_in(dir.file("blocks")).empty());

    // Leftovers of killed writers; the fresh chats/ temporary file may belong to a live `kvlm chat` save.
    fs::create_directories(dir.file("blocks/00/"));
    write_file(dir.file("blocks/00/.tmp-1-dead"), "partial block");
    write_file(dir.file("sessions/.tmp-1-dead"), "partial manifest");
    write_file(dir.file("chats/.tmp-1-dead"), "partial messages");
    const time_t two_hours_ago = std::time(nullptr) - 2 * 3600;
    struct timespec old_times[2] = {{two_hours_ago, 0}, {two_hours_ago, 0}};
    REQUIRE(::utimensat(AT_FDCWD, dir.file("chats/.tmp-1-dead").c_str(), old_times, 0) == 0);
    write_file(dir.file("chats/.tmp-2-live"), "being written");
    CliResult gc = run_kvlm({"session", "gc", "--session-dir", dir.path()});
    REQUIRE_MESSAGE(gc.exit_code == 0, gc.err);
    CHECK_MESSAGE(gc.out.find("removed 3 unreferenced file(s)") != std::string::npos, gc.out);
    CHECK(gc.err.empty());
    CHECK(empty_dirs_in(dir.file("blocks")).empty());
    CHECK(!fs::exists(dir.file("sessions/.tmp-1-dead")));
    CHECK(!fs::exists(dir.file("chats/.tmp-1-dead")));
    CHECK(fs::exists(dir.file("chats/.tmp-2-live")));
    CHECK(fs::exists(dir.file("chats/c.chat.new")));  // not a temporary file: a load may need it
    CHECK(fs::exists(dir.file("locks/c.lock")));       // lock files stay (see SessionStore::remove)
    CHECK(fs::exists(dir.file("locks/r.lock")));
    CHECK(ls_total() == fmt::format("{:.1f} KiB", store_file_bytes(dir.path()) / 1024.0));
    CHECK(SessionStore(dir.path()).verify("").problems.empty());
}

TEST_CASE("session cli: a second writer gets a lock error; bad directories and options are clear errors") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    {
        FileLock held = SessionStore(dir.path()).lock_session("busy");
        CliResult r = run_turn(dir.path(), "busy", "Once");
        CHECK(r.exit_code != 0);
        CHECK(r.out.empty());
        CHECK_MESSAGE(r.err.find("session 'busy' is in use by another kvlm process") != std::string::npos, r.err);
        CHECK(run_kvlm({"session", "rm", "busy", "--session-dir", dir.path()}).exit_code != 0);
    }
    CHECK(run_turn(dir.path(), "busy", "Once").exit_code == 0);  // released

    write_file(dir.file("plain-file"), "x");
    CliResult r = run_turn(dir.file("plain-file") + "/store", "s", "Once");
    CHECK(r.exit_code != 0);
    CHECK(r.out.empty());
    CHECK_MESSAGE(r.err.find("is not usable") != std::string::npos, r.err);
    CHECK(run_turn(dir.path(), "../escape", "Once").err.find("is not valid") != std::string::npos);
    CHECK(run_turn(dir.path(), "c", "Once", {"--chat"}).exit_code != 0);
}

TEST_CASE("session cli: rm deletes a chat session's messages too, and nothing while the session is in use") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    namespace fs = std::filesystem;
    TempDir dir;
    auto chat = [&](const std::string& name, const std::string& input) {
        return run_kvlm({"chat", "-m", stories(), "--chat-template", "chatml", "--temp", "0", "-t", "1", "-n", "10",
                         "-c", "512", "--session", name, "--session-dir", dir.path()},
                        input);
    };
    REQUIRE(chat("c", "Once upon a time\n").exit_code == 0);
    REQUIRE(chat("d", "Once upon a time there was\n").exit_code == 0);
    const std::string manifest = dir.file("sessions/c.manifest"), messages = dir.file("chats/c.chat");
    REQUIRE(fs::exists(manifest));
    REQUIRE(fs::exists(messages));
    write_file(messages + ".new", read_file(messages));  // as left by a save stopped before its last rename
    auto ls = [&] {
        CliResult r = run_kvlm({"session", "ls", "--session-dir", dir.path()});
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        return r.out;
    };
    auto listed = [](const std::string& ls_out, const std::string& name) {
        return std::regex_search(ls_out, std::regex("(^|\n)" + name + " "));
    };
    REQUIRE(listed(ls(), "c"));

    {  // in use: refused, every file kept
        FileLock held = SessionStore(dir.path()).lock_session("c");
        CliResult busy = run_kvlm({"session", "rm", "c", "--session-dir", dir.path()});
        CHECK(busy.exit_code == 1);
        CHECK(busy.out.empty());
        CHECK_MESSAGE(busy.err.find("session 'c' is in use by another kvlm process") != std::string::npos, busy.err);
        CHECK_MESSAGE(busy.err.find("nothing was removed") != std::string::npos, busy.err);
        CHECK(fs::exists(manifest));
        CHECK(fs::exists(messages));
        CHECK(fs::exists(messages + ".new"));
        CHECK(SessionStore(dir.path()).verify("c").problems.empty());
    }

    CliResult rm = run_kvlm({"session", "rm", "c", "--session-dir", dir.path()});
    REQUIRE_MESSAGE(rm.exit_code == 0, rm.err);
    CHECK(rm.out.empty());
    for (const std::string needle : {"removed session 'c'", "sessions/c.manifest", "chats/c.chat", "chats/c.chat.new",
                               "block file(s) no other session uses"})
        CHECK_MESSAGE(rm.err.find(needle) != std::string::npos, rm.err << "\nexpected: " << needle);
    CHECK(!fs::exists(manifest));
    CHECK(!fs::exists(messages));
    CHECK(!fs::exists(messages + ".new"));
    CHECK(fs::exists(dir.file("locks/c.lock")));  // lock files stay (see SessionStore::remove)
    std::string after = ls();
    CHECK_MESSAGE(!listed(after, "c"), after);
    CHECK_MESSAGE(listed(after, "d"), after);
    CHECK(fs::exists(dir.file("chats/d.chat")));
    CHECK(SessionStore(dir.path()).verify("").problems.empty());
    CHECK(run_kvlm({"session", "rm", "c", "--session-dir", dir.path()}).exit_code != 0);

    // The name is free: a `kvlm run` session of that name is not mistaken for the old chat.
    REQUIRE(run_turn(dir.path(), "c", "Once").exit_code == 0);
    CliResult refused = chat("c", "Then\n");
    CHECK(refused.exit_code != 0);
    CHECK_MESSAGE(refused.err.find("session 'c' is not a chat") != std::string::npos, refused.err);

    // Chat messages an older kvlm's rm left behind without a manifest are removed by name.
    write_file(dir.file("chats/old.chat"), "KVCH");
    CliResult leftover = run_kvlm({"session", "rm", "old", "--session-dir", dir.path()});
    CHECK_MESSAGE(leftover.exit_code == 0, leftover.err);
    CHECK_MESSAGE(leftover.err.find("chats/old.chat") != std::string::npos, leftover.err);
    CHECK(!fs::exists(dir.file("chats/old.chat")));
}

TEST_CASE("session cli: kill -9 at random moments leaves the previous or the new state, loadable") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    std::string bin = std::getenv("KVLM_BIN") ? std::getenv("KVLM_BIN") : "./kvlm";
    std::string model = stories();
    std::mt19937 rng(1234);
    REQUIRE(run_turn(dir.path(), "k", "Once upon a time").exit_code == 0);
    std::vector<int32_t> tokens = SessionStore(dir.path()).load_manifest("k").tokens;
    // A completed turn adds " The" (no BOS) and 8 generated tokens; the old pending token was already counted.
    // Turns stay short so that 20 completed ones still fit the 512-token context of the final run_turn.
    Tokenizer tokenizer(ModelFile::open(model)->metadata().tokenizer);
    const size_t n_turn = tokenizer.encode(" The", false, true).size() + 8;
    int n_completed = 0;
    for (int i = 0; i < 20; i++) {
        CAPTURE(i);
        std::vector<std::string> args = {bin, "run", "-m", model, "-p", " The", "-n", "8", "--temp", "0", "-t", "1",
                                         "-q", "--session", "k", "--session-dir", dir.path()};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
        pid_t pid;
        REQUIRE(posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv.data(), environ) == 0);
        posix_spawn_file_actions_destroy(&actions);
        usleep(std::uniform_int_distribution<int>(0, 60000)(rng));
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) n_completed++;

        SessionStore store(dir.path());
        SessionManifest m = store.load_manifest("k");  // never a torn manifest
        bool previous = m.tokens == tokens;
        // The new state extends the old transcript by one turn (fewer tokens only if the model ended its text).
        bool next = m.tokens.size() > tokens.size() && m.tokens.size() <= tokens.size() + n_turn &&
                    std::equal(tokens.begin(), tokens.end(), m.tokens.begin());
        CHECK((previous || next));
        tokens = m.tokens;
        CHECK(store.verify("k").problems.empty());
    }
    MESSAGE(n_completed << " of 20 runs finished before the kill");
    CliResult r = run_turn(dir.path(), "k", " The end.");
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.err.find("warning") == std::string::npos);
    CHECK(run_kvlm({"session", "gc", "--session-dir", dir.path()}).exit_code == 0);
    CHECK(SessionStore(dir.path()).verify("").problems.empty());
}

TEST_CASE("session cli: a closed pipe or Ctrl-C during run --session saves what was generated and says so") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    SUBCASE("a reader that goes away (SIGPIPE)") {
        CliResult r = run_shell(kvlm_command({"run", "-m", stories(), "-p", "Once upon a time", "-n", "300", "--temp",
                                              "0", "--session", "p", "--session-dir", dir.path()}) +
                                " | head -c 5; echo \" status ${PIPESTATUS[0]}\"");
        CHECK_MESSAGE(contains(r.out, " status 141"), r.out);  // the usual status of a closed pipe
        std::smatch m;
        REQUIRE_MESSAGE(std::regex_search(r.err, m, std::regex("kvlm: stopped after (\\d+) tokens?: writing output: "
                                                               "Broken pipe; session 'p' was saved with them")),
                        r.err);
        CHECK(r.err.find("error:") == std::string::npos);
        SessionManifest saved = SessionStore(dir.path()).load_manifest("p");
        CHECK(saved.tokens.size() == 5 + std::stoul(m[1].str()));  // BOS + 4 prompt tokens + what was generated
        CHECK(run_turn(dir.path(), "p", " Then").exit_code == 0);  // and it continues
    }
    SUBCASE("a full disk on stdout") {
        CliResult r = run_shell(kvlm_command({"run", "-m", stories(), "-p", "Once upon a time", "-n", "30", "--temp",
                                              "0", "--session", "f", "--session-dir", dir.path()}) +
                                " >/dev/full");
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(contains(r.err, "writing output: No space left on device"), r.err);
        CHECK_MESSAGE(contains(r.err, "session 'f' was saved with them"), r.err);
        CHECK(SessionStore(dir.path()).has_session("f"));
    }
    SUBCASE("Ctrl-C during generation, even on a first turn") {
        // SIGINT once text has appeared (the handler is installed by then): generation stops at a token.
        CliResult r = run_shell(kvlm_command({"run", "-m", stories(), "-p", "", "-n", "100000", "-c", "2048",
                                              "--temp", "0", "--session", "i", "--session-dir", dir.path()}) +
                                " >" + dir.file("out") + " & pid=$!; while [ ! -s " + dir.file("out") +
                                " ]; do sleep 0.01; done; kill -INT $pid; wait $pid; echo \"status $?\"");
        CHECK_MESSAGE(contains(r.out, "status 130"), std::string(r.out + r.err));
        std::smatch m;
        REQUIRE_MESSAGE(std::regex_search(r.err, m, std::regex("kvlm: interrupted after (\\d+) tokens?; session 'i' "
                                                               "was saved with them")),
                        r.err);
        SessionManifest saved = SessionStore(dir.path()).load_manifest("i");
        CHECK(saved.tokens.size() == 1 + std::stoul(m[1].str()));  // BOS + what was generated
        CHECK(read_file(dir.file("out")).size() > 0);
    }
}

TEST_CASE("session cli: block files truncated while a chat runs from them: the chat goes on with the same answer") {
    // A restored session's K/V is read into the pool, never mapped: truncating its block files while the
    // chat waits for the next message (the probe's finding) killed kvlm with SIGBUS, exit 135.
    TempDir dir, copy;
    const std::string first = "Once upon a time there was a little girl named Lily. She loved to play with her ball "
                              "in the park every day\n";
    auto chat = [&](const std::string& store, const std::string& shell_input) {
        return run_shell(shell_input + " | " +
                         kvlm_command({"chat", "-m", stories(), "--chat-template", "chatml", "--session", "c",
                                       "--session-dir", store, "-n", "30", "--temp", "0", "-t", "1"}));
    };
    REQUIRE(chat(dir.path(), "printf %s " + shell_quote(first)).exit_code == 0);
    std::filesystem::copy(dir.path(), copy.path(), std::filesystem::copy_options::recursive |
                                                       std::filesystem::copy_options::overwrite_existing);
    const CliResult want = chat(copy.path(), "printf 'Then what?\\n'");
    REQUIRE_MESSAGE(want.exit_code == 0, want.err);
    const CliResult got = chat(dir.path(), "{ sleep 1; find " + shell_quote(dir.path() + "/blocks") +
                                               " -type f -exec truncate -s 100 {} +; printf 'Then what?\\n'; }");
    CHECK_MESSAGE(got.exit_code == 0, got.err);
    CHECK(got.out == want.out);
    CHECK(got.out.size() > 20);
}

namespace {

// Every directory and file under `dir` whose mode lets group or others in, as "path mode" lines.
std::string loose_entries(const std::string& dir) {
    std::string loose;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        struct stat st;
        if (::lstat(e.path().c_str(), &st) != 0) continue;
        if (st.st_mode & 077) loose += fmt::format("{} {:o}\n", e.path().string(), st.st_mode & 0777);
    }
    return loose;
}

}  // namespace

TEST_CASE("session cli: the store is owner-only whatever the umask, and an older store is tightened with a note") {
    for (const char* mask : {"022", "000"}) {
        CAPTURE(mask);
        TempDir dir;
        const std::string store = dir.file("store");
        const std::string prompt = "Once upon a time";
        CliResult r = run_shell(std::string("umask ") + mask + "; " +
                                kvlm_command({"run", "-m", stories(), "-p", prompt, "-n", "20", "--temp", "0",
                                              "--session", "s", "--session-dir", store}));
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        CliResult c = run_shell(std::string("umask ") + mask + "; printf 'Hello\\n' | " +
                                kvlm_command({"chat", "-m", stories(), "--chat-template", "chatml", "-n", "8",
                                              "--temp", "0", "--session", "c", "--session-dir", store}));
        REQUIRE_MESSAGE(c.exit_code == 0, c.err);
        CHECK(std::filesystem::exists(store + "/chats/c.chat"));
        CHECK_MESSAGE(loose_entries(store).empty(), loose_entries(store));
        struct stat st;
        REQUIRE(::stat(store.c_str(), &st) == 0);
        CHECK((st.st_mode & 0777) == 0700);
        REQUIRE(::stat((store + "/sessions/s.manifest").c_str(), &st) == 0);
        CHECK((st.st_mode & 0777) == 0600);
    }
    // A store as an older kvlm left it (0755 directories, 0644 files): the next write tightens it and says so.
    TempDir dir;
    const std::string store = dir.file("store");
    REQUIRE(run_turn(store, "s", "Once upon a time").exit_code == 0);
    for (const auto& e : std::filesystem::recursive_directory_iterator(store))
        ::chmod(e.path().c_str(), e.is_directory() ? 0755 : 0644);
    ::chmod(store.c_str(), 0755);
    CliResult r = run_turn(store, "s", " Then");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(contains(r.err, "session directory " + store + " could be read by other users (mode 755); made it "
                                  "owner-only"),
                  r.err);
    struct stat st;
    for (const std::string& d : {store, store + "/sessions", store + "/blocks", store + "/locks"}) {
        REQUIRE(::stat(d.c_str(), &st) == 0);
        CHECK_MESSAGE((st.st_mode & 077) == 0, d);
    }
    REQUIRE(::stat((store + "/sessions/s.manifest").c_str(), &st) == 0);
    CHECK((st.st_mode & 077) == 0);
    CHECK(!contains(run_turn(store, "s", " Then").err, "could be read by other users"));  // once
}

TEST_CASE("session cli: a lock file that is a symbolic link is refused; a refused name leaves no lock file") {
    TempDir dir, elsewhere;
    const std::string store = dir.file("store");
    REQUIRE(run_turn(store, "s", "Once upon a time").exit_code == 0);
    // A link planted at the lock's path: kvlm neither follows it (creating the file it names) nor runs.
    const std::string target = elsewhere.file("planted");
    std::filesystem::create_symlink(target, store + "/locks/t.lock");
    CliResult linked = run_turn(store, "t", "Once");
    CHECK(linked.exit_code != 0);
    CHECK_MESSAGE(contains(linked.err, "locks/t.lock: cannot create lock file: it is a symbolic link"), linked.err);
    CHECK(!std::filesystem::exists(target));
    // A name refused for a new session is refused before its lock file is made.
    CliResult dash = run_turn(store, "-x", "Once");
    CHECK(dash.exit_code != 0);
    CHECK_MESSAGE(contains(dash.err, "session name '-x' is not valid"), dash.err);
    CHECK(!std::filesystem::exists(store + "/locks/-x.lock"));
}
