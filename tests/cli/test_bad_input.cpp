// Bad flags, outputs and files through the real binary (the outside probe's findings, issue 15): each is a
// clear error naming what is wrong and the valid range or the way out, with a non-zero exit and nothing on
// stdout - never a hang, a silent "off", an exit 0 with lost output or a destroyed source file.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/test_util.h"
#include "support/tiny_model.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories_gguf() { return data_path("stories260K/stories260K.gguf"); }
std::string stories_kvlm() { return converted_model("stories-gguf", {stories_gguf()}); }

CliResult run(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run", "-m", stories_kvlm()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kvlm(args);
}

// Flips every bit of the byte at `offset` of the file at `path`.
void flip_byte(const std::string& path, size_t offset) {
    std::string bytes = read_file(path);
    REQUIRE(offset < bytes.size());
    bytes[offset] = char(~bytes[offset]);
    write_file(path, bytes);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void check_refused(const CliResult& r, const std::string& needle) {
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK_MESSAGE(has(r.err, "error: " + needle), "stderr: " << r.err << "\nexpected: error: " << needle);
}

}  // namespace

TEST_CASE("bad input: sampling values out of range are refused with the valid range") {
    if (!have_data(stories_gguf())) return;
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--temp", "-1"}, "--temp: -1 is out of range"},
        {{"--temp", "inf"}, "--temp: inf is out of range"},
        {{"--temp", "nan"}, "--temp: nan is out of range"},
        {{"--top-k", "-5"}, "--top-k: -5 is out of range"},
        {{"--top-p", "2"}, "--top-p: 2 is out of range"},
        {{"--top-p", "-1"}, "--top-p: -1 is out of range"},
        {{"--top-p", "nan"}, "--top-p: nan is out of range"},
        {{"--min-p", "5"}, "--min-p: 5 is out of range"},
        {{"--repeat-penalty", "0"}, "--repeat-penalty: 0 is out of range"},
        {{"--repeat-penalty", "-1"}, "--repeat-penalty: -1 is out of range"},
        {{"--repeat-last-n", "-2"}, "--repeat-last-n: -2 is out of range"},
        {{"--seed", "18446744073709551616"}, "--seed: '18446744073709551616' is not a seed"},
        {{"--seed", "-2"}, "--seed: '-2' is not a seed"},
    };
    for (const auto& one : cases) {
        const std::vector<std::string>& flags = one.first;  // no structured binding: CAPTURE is a lambda
        const std::string& message = one.second;
        CAPTURE(flags[0] + " " + flags[1]);
        std::vector<std::string> args = {"-p", "Once", "-n", "3"};
        args.insert(args.end(), flags.begin(), flags.end());
        check_refused(run(args), message);
    }
    // chat checks the same values before it reads a message
    check_refused(run_kvlm({"chat", "-m", stories_kvlm(), "--chat-template", "chatml", "--top-p", "0"}, "hi\n"),
                  "--top-p: 0 is out of range");
}

TEST_CASE("bad input: --seed -1 draws a random seed, and -v prints the seed that reproduces a run") {
    if (!have_data(stories_gguf())) return;
    std::vector<std::string> sampled = {"-p", "Once", "-n", "12", "--temp", "1", "-v"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = sampled;
        args.insert(args.end(), extra.begin(), extra.end());
        return run(args);
    };
    CliResult fixed = with({"--seed", "18446744073709551615"});
    REQUIRE(fixed.exit_code == 0);
    CHECK_MESSAGE(has(fixed.err, ", seed 18446744073709551615\n"), fixed.err);  // the -v sampling line

    CliResult random = with({"--seed", "-1"});
    REQUIRE(random.exit_code == 0);
    size_t at = random.err.find(", seed ");
    REQUIRE(at != std::string::npos);
    std::string seed = random.err.substr(at + 7, random.err.find('\n', at) - at - 7);
    CliResult again = with({"--seed", seed});  // the printed seed gives the same text again
    REQUIRE(again.exit_code == 0);
    CHECK(again.out == random.out);
}

TEST_CASE("bad input: -t below 0 is refused, above the cores is capped with a warning") {
    if (!have_data(stories_gguf())) return;
    check_refused(run({"-p", "Once", "-n", "3", "-t", "-3"}), "-t: -3 is not a thread count");
    CliResult many = run({"-p", "Once", "-n", "5", "--temp", "0", "-t", "100000"});
    REQUIRE(many.exit_code == 0);
    CHECK_MESSAGE(has(many.err, "kvlm: warning: -t 100000 is more than the "), many.err);
    CHECK(many.out == run({"-p", "Once", "-n", "5", "--temp", "0", "-q"}).out);
}

TEST_CASE("bad input: a thread the system cannot start is an error, not a hang") {
    if (!have_data(stories_gguf())) return;
    if (std::thread::hardware_concurrency() < 2) return;  // one core: the CPU backend starts no thread
    // Each new thread reserves a stack of the stack limit: 3 GiB stacks cannot fit in 2 GiB of address space.
    CliResult r = run_shell("ulimit -v 2000000; ulimit -s 3000000; exec timeout 60 " +
                            kvlm_command({"run", "-m", stories_kvlm(), "-p", "Once", "-n", "3", "-t", "2"}));
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK_MESSAGE(has(r.err, "error: cannot start CPU thread 2 of 2"), r.err);
}

TEST_CASE("bad input: a write error on stdout is reported and fails the command") {
    if (!have_data(stories_gguf())) return;
    const std::string model = stories_kvlm();
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", "-m", model, "-p", "Once", "-n", "8", "--temp", "0", "-q"},
          std::vector<std::string>{"inspect", model}, std::vector<std::string>{"tokenize", model, "Once upon a time"}}) {
        CAPTURE(args[0]);
        CliResult r = run_shell(kvlm_command(args) + " > /dev/full");
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "error: writing output: No space left on device"), r.err);
    }
    TempDir dir;
    CliResult ls = run_shell(kvlm_command({"session", "ls", "--session-dir", dir.path()}) + " > /dev/full");
    CHECK(ls.exit_code == 1);
    CHECK_MESSAGE(has(ls.err, "error: writing output: No space left on device"), ls.err);
    // A closed pipe ends the process quietly by SIGPIPE (141), as for any filter; exit 0 only if every token
    // was written before the reader went away.
    CliResult piped = run_shell("set -o pipefail; " +
                                kvlm_command({"run", "-m", model, "-p", "Once", "-n", "400", "--temp", "0", "-q"}) +
                                " | head -c 5 > /dev/null");
    CHECK((piped.exit_code == 141 || piped.exit_code == 0));
    CHECK_MESSAGE(piped.err.empty(), piped.err);
}

TEST_CASE("bad input: a model path that is not a regular file is refused at once") {
    if (!have_data(stories_gguf())) return;
    TempDir dir;
    REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    CliResult fifo = run_shell("exec timeout 20 " + kvlm_command({"run", "-m", dir.file("fifo"), "-p", "x"}));
    check_refused(fifo, dir.file("fifo") + ": is a FIFO (named pipe), expected a regular file");
    check_refused(run_kvlm({"inspect", dir.path()}), dir.path() + ": is a directory, expected a regular file");
    check_refused(run_kvlm({"run", "-m", "/dev/null", "-p", "x"}), "/dev/null: is a character device");
    // The converter's inputs too (found by tests/probe/bad_flags.sh: it waited for a writer).
    check_refused(run_shell("exec timeout 20 " + kvlm_command({"convert", dir.file("fifo"), "-o", dir.file("o.kvlm")})),
                  dir.file("fifo") + ": is not a regular file or a directory");
    check_refused(run_shell("exec timeout 20 " + kvlm_command({"convert", stories_gguf(), "--tokenizer", dir.file("fifo"),
                                                               "-o", dir.file("o.kvlm")})),
                  dir.file("fifo") + ": is not a regular file or a directory");
}

TEST_CASE("bad input: convert never replaces its source, nor a file that is not a .kvlm model without --force") {
    if (!have_data(stories_gguf())) return;
    TempDir dir;
    const std::string source = dir.file("stories.gguf"), link = dir.file("link.kvlm");
    write_file(source, read_file(stories_gguf()));
    const std::string original = read_file(source);
    REQUIRE(::symlink(source.c_str(), link.c_str()) == 0);

    check_refused(run_kvlm({"convert", source, "-o", source, "-q"}), "convert: -o " + source + " is the input");
    check_refused(run_kvlm({"convert", source, "-o", link, "-q"}), "convert: -o " + link + " is the input");
    check_refused(run_kvlm({"convert", source, "-o", dir.path(), "-q"}), "convert: -o " + dir.path() + " is a directory");
    CHECK(read_file(source) == original);

    const std::string notes = dir.file("notes.txt");
    write_file(notes, "not a model\n");
    check_refused(run_kvlm({"convert", source, "-o", notes, "-q"}),
                  "convert: -o " + notes + " exists and is not a .kvlm model; pass --force to replace it");
    CHECK(read_file(notes) == "not a model\n");
    CliResult forced = run_kvlm({"convert", source, "-o", notes, "-q", "--force"});
    CHECK_MESSAGE(forced.exit_code == 0, forced.err);
    CHECK(read_file(notes).compare(0, 4, "KVLM") == 0);
    // an existing .kvlm model is replaced as before
    CliResult again = run_kvlm({"convert", source, "-o", notes, "-q"});
    CHECK_MESSAGE(again.exit_code == 0, again.err);
}

TEST_CASE("bad input: damaged weights stop a run naming the tensor, before any text") {
    if (!have_data(stories_gguf())) return;
    TempDir dir;
    const std::string model = dir.file("stories.kvlm");
    write_file(model, read_file(stories_kvlm()));
    // Tensor data fills most of the file: a byte in the middle belongs to some tensor.
    flip_byte(model, read_file(model).size() / 2);
    CliResult r = run_kvlm({"run", "-m", model, "-p", "Once", "-n", "20", "--temp", "0"});
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK_MESSAGE(has(r.err, "error: " + model + ": tensor "), r.err);
    CHECK_MESSAGE(has(r.err, "is corrupted: checksum"), r.err);
}

TEST_CASE("bad input: a model too big to verify on every load is verified on its first use, and again once changed") {
    if (!have_data(stories_gguf())) return;
    TempDir dir;
    const std::string model = dir.file("stories.kvlm"), damaged = dir.file("damaged.kvlm");
    write_file(model, read_file(stories_kvlm()));
    write_file(damaged, read_file(stories_kvlm()));
    flip_byte(damaged, read_file(damaged).size() / 2);
    // Every model counts as big here (the limit is 1 GiB by default); the record lives in this state dir.
    auto run_big = [&](const std::string& path) {
        return run_shell("XDG_STATE_HOME=" + shell_quote(dir.file("state")) + " KVLM_VERIFY_EVERY_LOAD_UP_TO=0 " +
                         kvlm_command({"run", "-m", path, "-p", "Once", "-n", "4", "--temp", "0"}));
    };
    const std::string first_use = "on its first use in ";
    CliResult bad = run_big(damaged);
    CHECK(bad.exit_code == 1);
    CHECK(bad.out.empty());
    CHECK_MESSAGE(has(bad.err, "error: " + damaged + ": tensor "), bad.err);
    CHECK(run_big(damaged).exit_code == 1);  // a failed check is not remembered

    CliResult first = run_big(model), second = run_big(model);
    REQUIRE_MESSAGE(first.exit_code == 0, first.err);
    CHECK_MESSAGE(has(first.err, "kvlm: verified the checksums of " + model + " ("), first.err);
    CHECK(has(first.err, first_use));
    CHECK_MESSAGE(!has(second.err, first_use), second.err);
    CHECK(second.out == first.out);
    const std::string record = read_file(dir.file("state/kvlm/verified_models"));
    CHECK(std::count(record.begin(), record.end(), '\n') == 1);

    // The same name with other contents (a re-download, an edit in place) is verified again.
    flip_byte(model, read_file(model).size() / 2);
    CliResult changed = run_big(model);
    CHECK(changed.exit_code == 1);
    CHECK_MESSAGE(has(changed.err, "is corrupted: checksum"), changed.err);
}

TEST_CASE("bad input: a damaged fingerprint in the header is refused") {
    if (!have_data(stories_gguf())) return;
    TempDir dir;
    const std::string model = dir.file("stories.kvlm");
    write_file(model, read_file(stories_kvlm()));
    flip_byte(model, 90);  // inside fingerprint_high (header bytes 88..95, docs/FORMAT.md)
    for (const char* command : {"run", "inspect"}) {
        CAPTURE(command);
        CliResult r = std::string(command) == "run" ? run_kvlm({"run", "-m", model, "-p", "Once", "-n", "3"})
                                                    : run_kvlm({"inspect", model});
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "the header's fingerprint"), r.err);
        CHECK_MESSAGE(has(r.err, "does not match the file's contents"), r.err);
    }
}

TEST_CASE("bad input: NaN or infinite logits are an error, never sampled") {
    TempDir dir;
    TinyModel tiny = make_tiny(DType::f32, /*tied=*/false, /*qkv_bias=*/false);
    // An infinite output-norm weight passes every checksum (it was written so) and makes the logits Inf/NaN.
    for (size_t i = 0; i < tiny.tensors.size(); i++)
        if (tiny.tensors[i].name == "output_norm.weight") {
            float inf = INFINITY;
            std::memcpy(tiny.data[i].data(), &inf, sizeof(inf));
        }
    const std::string model = dir.file("inf.kvlm");
    write_tiny(model, tiny);
    for (const char* temp : {"0", "0.8"}) {
        CAPTURE(temp);
        CliResult r = run_kvlm({"run", "-m", model, "-p", "tok3 tok4", "-n", "5", "--temp", temp});
        CHECK(r.exit_code == 1);
        CHECK(r.out.empty());
        CHECK_MESSAGE((has(r.err, "error: the model computed a NaN logit") ||
                       has(r.err, "error: the model computed an infinite logit")),
                      r.err);
    }
}

TEST_CASE("bad input: endless input (a prompt or message from /dev/zero, a schema file) is refused at a bound") {
    // A prompt from </dev/zero grew to 3.9 GB in 60 s with no message; --json-schema /dev/zero ended in
    // std::bad_alloc at 4.3 GB. Each now stops at its bound (64 MiB of text, 1 MiB of schema) and says so.
    const std::string model = stories_kvlm();
    struct Case {
        std::string command, needle;
    };
    const Case cases[] = {
        {kvlm_command({"run", "-m", model, "-n", "1"}) + " </dev/zero",
         "the text on stdin is larger than 64 MiB, more text than any context holds"},
        {kvlm_command({"tokenize", model}) + " </dev/zero", "the text on stdin is larger than 64 MiB"},
        {kvlm_command({"chat", "-m", model, "--chat-template", "chatml", "-n", "1"}) + " </dev/zero",
         "a line on stdin is larger than 64 MiB"},
        {kvlm_command({"chat", "-m", model, "--chat-template", "chatml", "-n", "1", "--single"}) + " </dev/zero",
         "the message on stdin is larger than 64 MiB"},
        {kvlm_command({"run", "-m", model, "-n", "1", "-p", "x", "--json-schema", "/dev/zero"}),
         "--json-schema /dev/zero: the file is larger than 1 MiB"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.command);
        CliResult r = run_shell("timeout 60 " + c.command);
        CHECK(r.exit_code == 1);
        CHECK(r.out.empty());
        CHECK_MESSAGE(contains(r.err, "error: " + c.needle), r.err);
    }
}
