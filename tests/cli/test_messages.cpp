// The outside probe's small findings (issue 15, item 19) through the real binary: messages that read
// right in every case, help texts that say what they mean, stdin for tokenize, names that are options.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

}  // namespace

TEST_CASE("messages: a full context suggests -c only when the model allows more") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    // stories260K never ends a story from BOS under greedy: both runs fill their context.
    CliResult small = run_kvlm({"run", "-m", stories(), "-p", "", "-n", "100", "-c", "64", "--temp", "0"});
    CHECK_MESSAGE(small.exit_code == 0, small.err);
    CHECK_MESSAGE(contains(small.err, "context full (64 tokens; raise it with -c, up to the model's 2048)"), small.err);
    CliResult whole = run_kvlm({"run", "-m", stories(), "-p", "", "-n", "2100", "-c", "2048", "--temp", "0"});
    CHECK_MESSAGE(whole.exit_code == 0, whole.err);
    CHECK_MESSAGE(contains(whole.err, "context full (2048 tokens; the model's whole context)"), whole.err);
    CHECK(!contains(whole.err, "raise it"));
}

TEST_CASE("messages: chat's cut-off answer names the context size, not more tokens than it holds") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult r = run_kvlm({"chat", "-m", stories(), "--chat-template", "chatml", "--temp", "0", "-n", "200", "-c",
                            "64"},
                           "Once upon a time\n");
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(contains(r.err, "kvlm: the context is full (64 tokens): the answer was cut off"), r.err);
    CHECK(!contains(r.err, "in use of"));
}

TEST_CASE("messages: a file that cannot be created says so without an offset") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult r = run_kvlm({"convert", data_path("stories260K/stories260K.gguf"), "-o", "/nonexistent-dir/x.kvlm"});
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, "error: /nonexistent-dir/x.kvlm: cannot create the file: No such file or directory"),
                  r.err);
    CHECK(!contains(r.err, "at offset"));
}

TEST_CASE("messages: help texts") {
    CliResult bench = run_kvlm({"bench", "--help"});
    CHECK(bench.exit_code == 0);
    CHECK(contains(bench.out, "--no-scenarios"));
    CHECK_MESSAGE(!contains(bench.out, "{false}"), bench.out);
    for (std::vector<std::string> command : {std::vector<std::string>{"run"}, {"chat"}, {"session"}, {"session", "ls"}}) {
        command.push_back("--help");
        CliResult help = run_kvlm(command);
        CHECK(help.exit_code == 0);
        CHECK_MESSAGE(contains(help.out, "$KVLM_SESSION_DIR, else $XDG_CACHE_HOME/kvlm, else ~/.cache/kvlm"), help.out);
    }
}

TEST_CASE("messages: the device line only with -v") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult plain = run_kvlm({"run", "-m", stories(), "-p", "Once", "-n", "4", "--temp", "0"});
    CHECK_MESSAGE(plain.exit_code == 0, plain.err);
    CHECK_MESSAGE(!contains(plain.err, "device"), plain.err);
    CliResult verbose = run_kvlm({"run", "-m", stories(), "-p", "Once", "-n", "4", "--temp", "0", "-v"});
    CHECK_MESSAGE(contains(verbose.err, "kvlm: device cpu ("), verbose.err);
    CHECK(plain.out == verbose.out);
}

TEST_CASE("messages: an empty --session is refused, not a run without a session") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    for (const char* command : {"run", "chat"}) {
        CAPTURE(command);
        CliResult r = run_kvlm({command, "-m", stories(), "-p", "Once", "--session", "", "--session-dir", dir.path()},
                               "Once\n");
        CHECK(r.exit_code != 0);
        CHECK(r.out.empty());
        CHECK_MESSAGE(contains(r.err, "error: --session: the session name is empty"), r.err);
    }
    CHECK(!std::filesystem::exists(dir.file("sessions")));
}

TEST_CASE("messages: tokenize reads stdin when no text is given") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult argument = run_kvlm({"tokenize", stories(), "Hello world"});
    REQUIRE(argument.exit_code == 0);
    CliResult piped = run_kvlm({"tokenize", stories()}, "Hello world\n");  // echo's newline is not text
    CHECK_MESSAGE(piped.exit_code == 0, piped.err);
    CHECK(piped.out == argument.out);
    CHECK(run_kvlm({"tokenize", stories()}, "").out == run_kvlm({"tokenize", stories(), ""}).out);
}

TEST_CASE("messages: a session name starting with '-' is refused; an old one is removed with --") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    CliResult dash = run_kvlm({"run", "-m", stories(), "-p", "Once", "-n", "4", "--session=-dash", "--session-dir",
                               dir.path()});
    CHECK(dash.exit_code == 1);
    CHECK_MESSAGE(contains(dash.err, "session name '-dash' is not valid: it starts with '-'"), dash.err);
    // One an older kvlm made: listed, and removable the way the docs say.
    REQUIRE(run_kvlm({"run", "-m", stories(), "-p", "Once", "-n", "4", "--session", "old", "--session-dir",
                      dir.path()})
                .exit_code == 0);
    std::filesystem::rename(dir.file("sessions/old.manifest"), dir.file("sessions/-old.manifest"));
    CliResult ls = run_kvlm({"session", "ls", "--session-dir", dir.path()});
    CHECK_MESSAGE(contains(ls.out, "-old"), ls.out);
    CliResult rm = run_kvlm({"session", "rm", "--session-dir", dir.path(), "--", "-old"});
    CHECK_MESSAGE(rm.exit_code == 0, rm.err);
    CHECK(!std::filesystem::exists(dir.file("sessions/-old.manifest")));
}

TEST_CASE("messages: a wrong command, option or session action is named, not 'A subcommand is required'") {
    auto refused = [](const std::vector<std::string>& args, const std::string& needle) {
        CAPTURE(needle);
        CliResult r = run_kvlm(args);
        CHECK(r.exit_code != 0);
        CHECK(r.out.empty());
        CHECK_MESSAGE(contains(r.err, "error: " + needle), r.err);
        CHECK(!contains(r.err, "A subcommand is required"));
    };
    refused({"foo"}, "unknown command 'foo' (kvlm convert, inspect");
    refused({"--bogus"}, "'--bogus' is not an option of kvlm itself: the command comes first");
    refused({"session"}, "kvlm session needs an action: ls, show, rm, verify, gc, pin or unpin");
    refused({"session", "foo"}, "unknown session action 'foo' (ls, show, rm");
    CHECK(run_kvlm({"--version"}).exit_code == 0);
}

// Found by tests/probe/bad_flags.sh.
TEST_CASE("messages: session show -m with a model it cannot open prints nothing on stdout; --kv-mem 0 is refused") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    REQUIRE(run_kvlm({"run", "-m", stories(), "-p", "Once", "-n", "4", "--temp", "0", "--session", "s",
                      "--session-dir", dir.path()}).exit_code == 0);
    CliResult show = run_kvlm({"session", "show", "s", "-m", dir.file("missing.kvlm"), "--session-dir", dir.path()});
    CHECK(show.exit_code == 1);
    CHECK(show.out.empty());
    CHECK_MESSAGE(contains(show.err, "error: " + dir.file("missing.kvlm") + ": cannot open"), show.err);
    CHECK(contains(run_kvlm({"session", "show", "s", "-m", stories(), "--session-dir", dir.path()}).out, "text:\n"));
    for (const char* zero : {"0", "0.5"}) {
        CliResult r = run_kvlm({"run", "-m", stories(), "-p", "Once", "-n", "4", "--kv-mem", zero});
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(contains(r.err, std::string("error: --kv-mem: '") + zero + "' is 0 bytes"), r.err);
    }
}
