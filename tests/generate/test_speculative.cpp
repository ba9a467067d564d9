// Speculative decoding (generate/speculative.h): drafts come from the text itself (lookup) or a draft model,
// and decode() with them gives exactly the tokens and logits of decoding without them (greedy and sampled,
// every block size), keeps no block of an unconfirmed draft, and a session saved after rejected drafts
// restores as one saved without speculation. Chat and chat sessions answer the same with it.
#include <doctest/doctest.h>

#include <filesystem>
#include <random>

#include "cli/cli.h"
#include "engine/engine.h"
#include "generate/draft_model.h"
#include "generate/generate.h"
#include "generate/speculative.h"
#include "session/session_store.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

const char* kRepeating =
    "Once upon a time, there was a little girl named Lily. She loved to play with her ball. Once upon a time, "
    "there was a little girl named Lily. She loved";

}  // namespace

TEST_CASE("speculative: lookup drafts follow the latest earlier occurrence of the last 3, then 2 tokens") {
    CHECK(lookup_draft({1, 2, 3, 4, 5, 1, 2, 3}, 8) == std::vector<int32_t>{4, 5, 1, 2, 3});
    CHECK(lookup_draft({1, 2, 3, 4, 5, 1, 2, 3}, 2) == std::vector<int32_t>{4, 5});
    CHECK(lookup_draft({1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3}, 8) == std::vector<int32_t>{7, 1, 2, 3});  // the latest
    CHECK(lookup_draft({5, 2, 3, 8, 2, 3}, 8) == std::vector<int32_t>{8, 2, 3});                    // a 2-gram
    CHECK(lookup_draft({1, 2, 3, 4}, 8).empty());
    CHECK(lookup_draft({7, 7}, 8).empty());
    CHECK(lookup_draft({1, 2, 1, 2}, 0).empty());
    SpecOptions spec;
    CHECK_THROWS_WITH_AS(parse_spec_mode("fast", &spec), doctest::Contains("unknown mode 'fast'"), Error);
    parse_spec_mode("draft", &spec);
    CHECK(spec.mode == SpecOptions::Mode::draft);
    parse_spec_mode("lookup", &spec);
    CHECK(spec.mode == SpecOptions::Mode::lookup);
}

// A verification forward takes every row's draw and penalty window up front (draft_verify.h); the picks must
// still be the one-token steps' and the sampler's generator must end where plain decoding leaves it (the next
// turn of a chat samples from it).
TEST_CASE("speculative: the same tokens and logits as plain decoding, greedy and sampled, every block size") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    SpecOptions spec;
    spec.mode = SpecOptions::Mode::lookup;
    struct Setting {
        float temperature, repeat_penalty;
    };
    for (int32_t block_size : {1, 5, 16}) {
        for (Setting setting : {Setting{0.0f, 1.0f}, Setting{0.8f, 1.0f}, Setting{0.0f, 1.3f}, Setting{0.8f, 1.2f}}) {
            CAPTURE(block_size);
            CAPTURE(setting.temperature);
            CAPTURE(setting.repeat_penalty);
            Engine engine(stories(), quiet_cpu_engine(block_size, 2));
            const std::vector<int32_t> prompt = engine.tokenizer().encode(kRepeating, true, true);
            SamplingParams params;
            params.temperature = setting.temperature;
            params.repeat_penalty = setting.repeat_penalty;
            params.repeat_last_n = 16;
            params.seed = 11;
            std::mt19937_64 generator_after;
            auto run = [&](const SpecOptions* options, int32_t n_predict) {
                Sequence seq;
                Sampler sampler(params);
                GenerationResult r = generate(engine, seq, prompt, n_predict, sampler, [](const std::string&) {},
                                              nullptr, options);
                generator_after = sampler.generator();
                // No block past what the sequence holds (an unconfirmed draft's blocks went back to the pool).
                CHECK(seq.table.blocks.size() == size_t((seq.table.n_tokens + block_size - 1) / block_size));
                CHECK(seq.tokens.size() == size_t(seq.table.n_tokens));
                engine.prefix_cache().release(seq);
                engine.prefix_cache().evict_unreferenced();
                CHECK(engine.pool().n_used() == 0);
                return r;
            };
            for (int32_t n_predict : {7, 150}) {
                CAPTURE(n_predict);
                const GenerationResult plain = run(nullptr, n_predict);
                const std::mt19937_64 plain_generator = generator_after;
                const GenerationResult fast = run(&spec, n_predict);
                CHECK(generator_after == plain_generator);
                CHECK(fast.generated == plain.generated);
                CHECK(fast.transcript == plain.transcript);
                CHECK(fast.logits_hash == plain.logits_hash);
                CHECK(fast.stop_reason == plain.stop_reason);
                CHECK(plain.n_drafted == 0);
                if (n_predict == 150 && setting.temperature == 0 && setting.repeat_penalty == 1.0f) {
                    CHECK(fast.n_spec_forwards > 0);
                    CHECK(fast.n_accepted > 0);
                    CHECK(fast.n_accepted < fast.n_drafted);  // some drafts were rejected and rolled back
                }
            }
        }
    }
}

TEST_CASE("speculative: sessions saved after rejected drafts restore as without speculation") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::vector<std::string> turns = {kRepeating, " Lily and her ball", " Once upon a time, there was"};
    std::vector<std::vector<int32_t>> transcripts[2];
    for (int with_spec = 0; with_spec < 2; with_spec++) {
        TempDir dir;
        RunOptions options;
        options.session.name = "s";
        options.session.dir = dir.path();
        options.n_predict = 60;
        options.sampling.temperature = 0;
        if (with_spec) options.spec.mode = SpecOptions::Mode::lookup;
        for (const std::string& turn : turns) {
            Engine engine(stories(), quiet_cpu_engine(16, 2));  // a new process each turn
            const std::vector<int32_t> fresh = engine.tokenizer().encode(turn, true, true);
            GenerationResult r = run_session_turn(engine, options, turn, fresh, [](const std::string&) {});
            if (with_spec && turn == turns[0]) CHECK(r.n_drafted > r.n_accepted);
            transcripts[with_spec].push_back(r.transcript);
        }
        CHECK(SessionStore(dir.path()).verify("s").problems.empty());
    }
    CHECK(transcripts[1] == transcripts[0]);
}

TEST_CASE("speculative: kvlm run --spec, and the combinations it refuses") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::string model = stories();
    const std::vector<std::string> run = {"run", "-m", model, "-p", kRepeating, "-n", "80", "--temp", "0"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = run;
        args.insert(args.end(), extra.begin(), extra.end());
        return run_kvlm(args);
    };
    CliResult plain = with({});
    CliResult fast = with({"--spec", "lookup", "--spec-max", "6", "-v"});
    REQUIRE(plain.exit_code == 0);
    REQUIRE_MESSAGE(fast.exit_code == 0, fast.err);
    CHECK(fast.out == plain.out);
    CHECK_MESSAGE(contains(fast.err, "speculation: "), fast.err);
    CliResult bad = with({"--spec", "sometimes"});
    CHECK(bad.exit_code != 0);
    CHECK_MESSAGE(contains(bad.err, "--spec: unknown mode 'sometimes' (expected lookup, draft or off)"), bad.err);
}

TEST_CASE("speculative: chat sessions and kvlm chat answer the same with --spec lookup, turn after turn") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::string model = stories();
    // run --chat --session: two turns each way, each in its own store; the second turn restores the first.
    std::vector<std::string> answers[2];
    for (int spec = 0; spec < 2; spec++) {
        TempDir dir;
        for (const char* message : {kRepeating, "Say it again."}) {
            std::vector<std::string> args = {"run", "-m", model, "--chat", "--chat-template", "chatml", "-p", message,
                                             "-n", "60", "--temp", "0", "--session", "c", "--session-dir", dir.path()};
            if (spec) args.insert(args.end(), {"--spec", "lookup", "-v"});
            CliResult r = run_kvlm(args);
            REQUIRE_MESSAGE(r.exit_code == 0, r.err);
            if (spec) CHECK_MESSAGE(contains(r.err, "speculation: "), r.err);
            answers[spec].push_back(r.out);
        }
    }
    CHECK(answers[1] == answers[0]);
    // kvlm chat, piped: two messages, one answer each; -v names the drafts.
    const std::string messages = std::string(kRepeating) + "\nSay it again.\n";
    std::vector<std::string> chat = {"chat", "-m", model, "--chat-template", "chatml", "-n", "60", "--temp", "0"};
    CliResult plain = run_kvlm(chat, messages);
    chat.insert(chat.end(), {"--spec", "lookup", "--spec-max", "4", "-v"});
    CliResult fast = run_kvlm(chat, messages + "/stats\n");
    REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
    REQUIRE_MESSAGE(fast.exit_code == 0, fast.err);
    CHECK(fast.out == plain.out);
    CHECK_MESSAGE(contains(fast.err, "| speculation: "), fast.err);
    CHECK_MESSAGE(contains(fast.err, "accepted ("), fast.err);  // /stats: the conversation's totals and rate
    CliResult bad = run_kvlm({"chat", "-m", model, "--chat-template", "chatml", "--spec", "sometimes"}, messages);
    CHECK(bad.exit_code != 0);
    CHECK_MESSAGE(contains(bad.err, "--spec: unknown mode 'sometimes'"), bad.err);
}

TEST_CASE("speculative: --spec draft with a q8_0 draft of the model gives the plain output, greedy and sampled") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::string model = stories();
    const std::string draft =
        converted_model("stories-q8_0", {data_path("stories260K/stories260K.gguf"), "--dtype", "q8_0"});
    for (const char* temp : {"0", "0.9"}) {
        CAPTURE(temp);
        const std::vector<std::string> run = {"run", "-m", model, "-p", "Once upon a time", "-n", "120",
                                              "--temp", temp, "--seed", "11"};
        CliResult plain = run_kvlm(run);
        std::vector<std::string> args = run;
        args.insert(args.end(), {"--spec", "draft", "--draft-model", draft, "--spec-max", "5", "-v"});
        CliResult drafted = run_kvlm(args);
        REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
        REQUIRE_MESSAGE(drafted.exit_code == 0, drafted.err);
        CHECK(drafted.out == plain.out);
        CHECK_MESSAGE(contains(drafted.err, "speculation: "), drafted.err);
    }
    // In kvlm chat too, across two answers (the draft model's cache follows the conversation).
    const std::string messages = "Tell me a story.\nAnother one.\n";
    std::vector<std::string> chat = {"chat", "-m", model, "--chat-template", "chatml", "-n", "40", "--temp", "0"};
    CliResult plain = run_kvlm(chat, messages);
    chat.insert(chat.end(), {"--spec", "draft", "--draft-model", draft});
    CliResult drafted = run_kvlm(chat, messages);
    REQUIRE_MESSAGE(drafted.exit_code == 0, drafted.err);
    CHECK(drafted.out == plain.out);
}

TEST_CASE("speculative: a draft model keeps its cache in line with the history it is given") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::string model = stories();
    Engine target(model, quiet_cpu_engine());
    DraftModel drafter(model, quiet_cpu_engine(), target.tokenizer());  // the model drafting for itself
    std::vector<int32_t> history = target.tokenizer().encode("Once upon a time", true, true);
    // Greedy drafts of the same model are its greedy continuation, whatever the cache held before.
    Sequence seq;
    SamplingParams greedy;
    greedy.temperature = 0;
    Sampler sampler(greedy);
    GenerationResult reference = generate(target, seq, history, 12, sampler, [](const std::string&) {});
    target.prefix_cache().release(seq);
    const std::vector<int32_t> expected(reference.generated.begin(), reference.generated.begin() + 6);
    CHECK(drafter.draft(history, 6) == expected);
    CHECK(drafter.draft(history, 6) == expected);  // again: its own drafts are dropped first
    std::vector<int32_t> longer = history;
    longer.insert(longer.end(), expected.begin(), expected.begin() + 3);
    CHECK(drafter.draft(longer, 3) == std::vector<int32_t>(expected.begin() + 3, expected.end()));
    std::vector<int32_t> other = history;
    other.push_back(target.tokenizer().encode(" dog", false, true).front());  // a token its draft did not have
    CHECK(drafter.draft(other, 4).size() == 4);
}

TEST_CASE("speculative: --spec draft refuses a missing, unused or foreign draft model, naming why") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    const std::string model = stories();
    const std::vector<std::string> run = {"run", "-m", model, "-p", "Once", "-n", "4"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = run;
        args.insert(args.end(), extra.begin(), extra.end());
        return run_kvlm(args);
    };
    CliResult missing = with({"--spec", "draft"});
    CHECK(missing.exit_code != 0);
    CHECK_MESSAGE(contains(missing.err, "--spec draft needs --draft-model"), missing.err);
    CliResult unused = with({"--draft-model", model});
    CHECK(unused.exit_code != 0);
    CHECK_MESSAGE(contains(unused.err, "is only used with --spec draft"), unused.err);
    // SmolLM2's vocabulary (49152 tokens) is not stories260K's (512).
    const char* smollm2 = "models/cache/smollm2-135m-instruct.kvlm";
    if (!have_data(smollm2)) return;
    CliResult foreign = with({"--spec", "draft", "--draft-model", smollm2});
    CHECK(foreign.exit_code != 0);
    CHECK_MESSAGE(contains(foreign.err, "its vocabulary differs from the model's (n_vocab: 49152 in the draft model, "
                                        "512 in the target)"),
                  foreign.err);
    // The other way round, without -c: the run's context (SmolLM2's 8192) is past the draft's trained 512, and
    // the error blamed --ctx-size; the vocabulary is what rules the draft out.
    CliResult reverse = run_kvlm({"run", "-m", smollm2, "-p", "Once", "-n", "4", "--spec", "draft", "--draft-model",
                                  model});
    CHECK(reverse.exit_code != 0);
    CHECK_MESSAGE(contains(reverse.err, "its vocabulary differs from the model's (n_vocab: 512 in the draft model, "
                                        "49152 in the target)"),
                  reverse.err);
    CHECK_MESSAGE(!contains(reverse.err, "--ctx-size"), reverse.err);
}
