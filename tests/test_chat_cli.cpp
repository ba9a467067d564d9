// `kvlm chat` through the real binary: piped conversations with SmolLM2 (greedy) append only each new
// turn's tokens, /undo and /regenerate reproduce answers, --session continues across processes, and the
// template choice (model's own, none, --chat-template). Plus a terminal session driven through tmux.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <regex>
#include <thread>

#include "test_util.h"

using namespace kvlm::test;

namespace {

// SmolLM2-135M-Instruct: the .kvlm `make models` writes, else converted from its GGUF; "" = skip.
std::string smollm2() {
    const char* made = "models/cache/smollm2-135m-instruct.kvlm";
    if (std::filesystem::exists(made)) return made;
    const char* gguf = "models/cache/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!have_data(gguf)) return "";
    return converted_model("smollm2-f32", {gguf, "--dtype", "f32"});
}

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

CliResult chat(const std::string& model, const std::string& input, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"chat", "-m", model, "--temp", "0", "-t", "2"};
    for (auto [flag, value] : {std::pair<const char*, const char*>{"-n", "40"}, {"-c", "1024"}})
        if (std::find(extra.begin(), extra.end(), flag) == extra.end()) extra.insert(extra.end(), {flag, value});
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kvlm(args, input);
}

struct TurnStats {
    int n_prompt = 0, n_reused = 0, n_restored = 0, n_prefilled = 0, n_generated = 0;
};

// The --verbose stats lines on stderr, one per answer.
std::vector<TurnStats> turn_stats(const std::string& err) {
    std::vector<TurnStats> stats;
    std::regex line("prompt (\\d+) tokens: (\\d+) reused from the pool, (\\d+) restored from disk, (\\d+) prefilled "
                    "[^|]*\\| generated (\\d+) tokens");
    for (std::sregex_iterator it(err.begin(), err.end(), line), end; it != end; ++it)
        stats.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3]), std::stoi((*it)[4]),
                         std::stoi((*it)[5])});
    return stats;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

TEST_CASE("chat: a piped 3-message conversation prefills only each new turn") {
    std::string model = smollm2();
    if (model.empty()) return;
    CliResult r = chat(model,
                       "What is the capital of France?\nAnd of Germany?\nThank you!\n", {"--verbose"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(r.out.find("Paris") != std::string::npos, r.out);
    CHECK_MESSAGE(r.out.find("Berlin") != std::string::npos, r.out);
    std::vector<TurnStats> stats = turn_stats(r.err);
    REQUIRE_MESSAGE(stats.size() == 3, r.err);
    CHECK(stats[0].n_reused + stats[0].n_prefilled == stats[0].n_prompt);
    for (size_t t = 1; t < stats.size(); t++) {
        CAPTURE(t);
        // Everything the previous turn left in the K/V (all but its pending last token) is reused.
        CHECK(stats[t].n_reused == stats[t - 1].n_prompt + stats[t - 1].n_generated - 1);
        CHECK(stats[t].n_restored == 0);
        CHECK(stats[t].n_reused + stats[t].n_prefilled == stats[t].n_prompt);
        CHECK(stats[t].n_prefilled < 20);  // the pending token, the new user message, the generation prompt
    }

    // The first answer is exactly `kvlm run --chat` on the same message.
    CliResult run = run_kvlm({"run", "-m", model, "--chat", "-p", "What is the capital of France?", "--temp", "0", "-n",
                              "40", "-c", "1024", "-t", "2"});
    REQUIRE_MESSAGE(run.exit_code == 0, run.err);
    CHECK_MESSAGE(starts_with(r.out, run.out + "\n"), "chat: " << r.out << "\nrun: " << run.out);
}

TEST_CASE("chat: /undo and /regenerate give the same answer again under greedy") {
    std::string model = smollm2();
    if (model.empty()) return;
    CliResult once = chat(model, "Name a color.\n");
    REQUIRE_MESSAGE(once.exit_code == 0, once.err);
    REQUIRE(!once.out.empty());
    CliResult regen = chat(model, "Name a color.\n/regenerate\n", {"--verbose"});
    REQUIRE_MESSAGE(regen.exit_code == 0, regen.err);
    CHECK(regen.out == once.out + once.out);
    std::vector<TurnStats> stats = turn_stats(regen.err);
    REQUIRE(stats.size() == 2);
    CHECK(stats[1].n_prompt == stats[0].n_prompt);  // the same prompt, now mostly from the pool
    CHECK(stats[1].n_prefilled < stats[0].n_prompt);

    CliResult undo = chat(model, "Name a color.\n/undo\nName a color.\n/stats\n");
    REQUIRE_MESSAGE(undo.exit_code == 0, undo.err);
    CHECK(undo.out == once.out + once.out);
    CHECK(undo.err.find("dropped the last exchange") != std::string::npos);
    CHECK(undo.err.find("KV blocks") != std::string::npos);

    CliResult bad = chat(model, "/regenerate\n/nonsense\n");
    CHECK(bad.exit_code != 0);
    CHECK(bad.err.find("no answer to regenerate") != std::string::npos);
    CHECK(bad.err.find("unknown command /nonsense") != std::string::npos);
}

TEST_CASE("chat: --session continues the conversation in a second process") {
    std::string model = smollm2();
    if (model.empty()) return;
    CliResult both = chat(model, "What is the capital of France?\nAnd of Germany?\n", {"--verbose"});
    REQUIRE_MESSAGE(both.exit_code == 0, both.err);
    std::vector<TurnStats> reference = turn_stats(both.err);
    REQUIRE(reference.size() == 2);

    TempDir dir;
    std::vector<std::string> session = {"--session", "conv", "--session-dir", dir.path(), "--verbose"};
    CliResult first = chat(model, "What is the capital of France?\n", session);
    REQUIRE_MESSAGE(first.exit_code == 0, first.err);
    CliResult second = chat(model, "And of Germany?\n", session);
    REQUIRE_MESSAGE(second.exit_code == 0, second.err);
    CHECK(first.out + second.out == both.out);
    CHECK(second.err.find("continuing session 'conv'") != std::string::npos);
    std::vector<TurnStats> stats = turn_stats(second.err);
    REQUIRE(stats.size() == 1);
    CHECK(stats[0].n_restored == reference[1].n_reused);  // from disk instead of the pool
    CHECK(stats[0].n_prefilled == reference[1].n_prefilled);
    CHECK(stats[0].n_prompt == reference[1].n_prompt);

    // A session made by `kvlm run` has no chat state: refused with a hint.
    CliResult plain = run_kvlm({"run", "-m", model, "-p", "Hi", "-n", "2", "--session", "plain", "--session-dir",
                                dir.path()});
    REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
    CliResult refused = chat(model, "Hello\n", {"--session", "plain", "--session-dir", dir.path()});
    CHECK(refused.exit_code != 0);
    CHECK_MESSAGE(refused.err.find("not saved by kvlm chat") != std::string::npos, refused.err);
}

TEST_CASE("chat: template choice") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult none = chat(stories(), "Hello\n");
    CHECK(none.exit_code != 0);
    CHECK(none.out.empty());
    CHECK_MESSAGE(none.err.find("no chat template") != std::string::npos, none.err);
    CHECK(none.err.find("--chat-template") != std::string::npos);

    CliResult chatml = chat(stories(), "Once upon a time\nThen\n", {"--chat-template", "chatml", "-n", "16", "-v"});
    REQUIRE_MESSAGE(chatml.exit_code == 0, chatml.err);
    CHECK(!chatml.out.empty());
    CHECK(turn_stats(chatml.err).size() == 2);

    CliResult unknown = chat(stories(), "Hello\n", {"--chat-template", "no-such-template"});
    CHECK(unknown.exit_code != 0);
    CHECK(unknown.err.find("neither a builtin template") != std::string::npos);

    // A full context is reported, never silently cut.
    CliResult full = chat(stories(), "Once upon a time there was a girl\nThen\nThen\nThen\n",
                          {"--chat-template", "chatml", "-n", "-1", "-c", "64"});
    CHECK(full.err.find("context") != std::string::npos);
    CHECK_MESSAGE(full.err.find("/reset") != std::string::npos, full.err);
}

TEST_CASE("chat: interactive terminal through tmux (two turns, Ctrl-C stops an answer)") {
    std::string model = smollm2();
    if (model.empty()) return;
    if (std::system("command -v tmux >/dev/null 2>&1") != 0) {
        MESSAGE("tmux is not installed: skipping the terminal test (apt-get install -y tmux)");
        return;
    }
    const char* bin = std::getenv("KVLM_BIN");
    REQUIRE(bin);
    TempDir dir;
    std::string socket = dir.file("tmux.sock");
    auto tmux = [&](const std::string& args) {
        return std::system(("tmux -S '" + socket + "' " + args + " >/dev/null 2>&1").c_str());
    };
    auto screen = [&] {
        std::string file = dir.file("screen.txt");
        std::system(("tmux -S '" + socket + "' capture-pane -p -S -200 -t chat > '" + file + "' 2>/dev/null").c_str());
        return read_file(file);
    };
    auto wait_for = [&](const std::function<bool(const std::string&)>& done, int seconds) {
        for (int i = 0; i < seconds * 10; i++) {
            if (done(screen())) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return false;
    };
    // Prompts shown: lines starting with ">" (capture-pane drops the trailing space of "> ").
    auto prompts = [](const std::string& s) {
        int n = 0;
        for (size_t p = 0; p < s.size(); p = s.find('\n', p) == std::string::npos ? s.size() : s.find('\n', p) + 1)
            n += s[p] == '>';
        return n;
    };
    std::string command = std::string(bin) + " chat -m " + model + " --temp 0 -c 2048 -t 2; echo EXITED $?; sleep 30";
    REQUIRE(tmux("new-session -d -s chat -x 200 -y 50 -c '" + std::filesystem::current_path().string() + "' \"" + command + "\"") == 0);
    CHECK(wait_for([&](const std::string& s) { return prompts(s) >= 1; }, 60));
    tmux("send-keys -t chat 'What is the capital of France?' Enter");
    CHECK(wait_for([&](const std::string& s) { return prompts(s) >= 2; }, 60));
    tmux("send-keys -t chat 'Write a very long story about a dragon.' Enter");
    const std::string asked = "about a dragon.\n";
    CHECK(wait_for([&](const std::string& s) {  // the answer has started streaming
        size_t p = s.find(asked);
        return p != std::string::npos && s.find_first_not_of(" \n", p + asked.size()) != std::string::npos;
    }, 60));
    tmux("send-keys -t chat C-c");
    CHECK(wait_for([&](const std::string& s) { return s.find("(stopped)") != std::string::npos && prompts(s) >= 3; },
                   30));
    tmux("send-keys -t chat C-c");  // at the prompt: a hint; a second one exits
    CHECK(wait_for([&](const std::string& s) { return s.find("Ctrl-C again") != std::string::npos; }, 10));
    tmux("send-keys -t chat C-c");
    CHECK(wait_for([&](const std::string& s) { return s.find("EXITED 0") != std::string::npos; }, 30));
    std::string text = screen();
    CHECK_MESSAGE(text.find("Paris") != std::string::npos, text);
    tmux("kill-server");
}
