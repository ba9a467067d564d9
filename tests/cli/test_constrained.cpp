// --json, --json-schema and --regex through the real binary: SmolLM2 over the corpus of
// tests/data/constrained/ with several seeds, every output validated by tools/check_constrained.py (Python's
// jsonschema and re); jump-forward giving the same tokens and logits as --no-jump-forward; an output cut
// short by -n is an error; constrained turns in sessions and chat; bad constraints and flag combinations.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "support/test_util.h"

using namespace kvlm::test;
using Json = nlohmann::ordered_json;

namespace {

const char* kSmolLM2 = "models/cache/smollm2-135m-instruct.kvlm";

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

std::string logits_hash(const std::string& err) {
    std::smatch m;
    return std::regex_search(err, m, std::regex("logits hash ([0-9a-f]{16})")) ? m[1].str() : "";
}

int count_of(const std::string& err, const char* pattern) {
    std::smatch m;
    return std::regex_search(err, m, std::regex(pattern)) ? std::stoi(m[1].str()) : -1;
}

}  // namespace

// Each case its own seed, every third greedy; bench/constrained_corpus.sh runs every case with several seeds.
TEST_CASE("smollm2: every output over the corpus of schemas and regexes validates (a seed each, greedy and sampled)") {
    if (!std::filesystem::exists(kSmolLM2)) return;
    TempDir dir;
    std::string cases;
    int n_runs = 0;
    auto run_case = [&](const Json& c, const std::string& kind, int seed, std::vector<std::string> constraint) {
        std::vector<std::string> args = {"run",
                                         "-m",
                                         kSmolLM2,
                                         "--chat",
                                         "-p",
                                         c["prompt"].get<std::string>(),
                                         "-n",
                                         "400",
                                         "-t",
                                         "2",
                                         "-q",
                                         "--seed",
                                         std::to_string(seed)};
        if (seed % 3 == 0) args.insert(args.end(), {"--temp", "0"});
        args.insert(args.end(), constraint.begin(), constraint.end());
        CliResult r = run_kvlm(args);
        INFO(c["name"], " seed ", seed, ": ", r.err);
        CHECK(r.exit_code == 0);
        Json line = {{"kind", kind}, {"name", c["name"]}, {"seed", seed}, {"output", r.out}};
        if (kind == "schema")
            line["schema"] = c["schema"];
        else
            line["regex"] = c["regex"];
        cases += line.dump() + "\n";
        n_runs++;
    };
    int seed = 1;
    for (const auto& c : Json::parse(read_file("tests/data/constrained/schemas.json"))) {
        const std::string file = dir.file(c["name"].get<std::string>() + ".json");
        write_file(file, c["schema"].dump());
        run_case(c, "schema", seed++, {"--json-schema", file});
    }
    for (const auto& c : Json::parse(read_file("tests/data/constrained/regexes.json")))
        run_case(c, "regex", seed++, {"--regex", c["regex"].get<std::string>()});
    write_file(dir.file("cases.jsonl"), cases);
    CliResult check = run_shell("python3 tools/check_constrained.py " + shell_quote(dir.file("cases.jsonl")));
    INFO(check.out, check.err);
    CHECK(check.exit_code == 0);
    CHECK(contains(check.out, "checked " + std::to_string(n_runs) + " outputs, 0 failed"));
}

namespace {

// Runs `args` greedy with and without jump-forward: the same text, logits hash and forced tokens, and some
// forced tokens taken along by a forward.
CliResult compare_jump_forward(const std::vector<std::string>& args) {
    std::vector<std::string> on = args, off = args;
    on.insert(on.end(), {"--temp", "0", "-v"});
    off.insert(off.end(), {"--temp", "0", "-v", "--no-jump-forward"});
    CliResult a = run_kvlm(on), b = run_kvlm(off);
    REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    CHECK(a.out == b.out);
    CHECK(!logits_hash(a.err).empty());
    CHECK(logits_hash(a.err) == logits_hash(b.err));
    CHECK(count_of(a.err, R"(sampled, (\d+) forced)") == count_of(b.err, R"(sampled, (\d+) forced)"));
    CHECK(count_of(a.err, R"(\((\d+) jump-forward forwards\))") > 0);
    CHECK(contains(b.err, "(jump-forward off)"));
    return a;
}

}  // namespace

TEST_CASE("jump-forward: the same tokens, text and logits as forced tokens run one by one (stories260K)") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult r = compare_jump_forward({"run", "-m", stories(), "-p", "Once upon a time", "-n", "60", "--regex",
                                        " there was a (dog|cat) named [A-Z][a-z]{2,8}\\. It was very (happy|sad)\\."});
    CHECK(std::regex_match(r.out,
                           std::regex(" there was a (dog|cat) named [A-Z][a-z]{2,8}\\. It was very (happy|sad)\\.")));
}

TEST_CASE("smollm2: jump-forward gives the tokens and logits of forced tokens run one by one, on long fixed keys") {
    if (!std::filesystem::exists(kSmolLM2)) return;
    for (const char* name : {"long_fixed_keys", "employee_onboarding_checklist"}) {
        for (const auto& c : Json::parse(read_file("tests/data/constrained/schemas.json"))) {
            if (c["name"] != name) continue;
            compare_jump_forward({"run", "-m", kSmolLM2, "--chat", "-p", c["prompt"].get<std::string>(), "-n", "300",
                                  "-t", "2", "--json-schema", c["schema"].dump()});
        }
    }
}

TEST_CASE("constrained output: -n reached before a whole match is an error, the partial text still on stdout") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult r = run_kvlm({"run", "-m", stories(), "-p", "Once upon a time", "-n", "3", "--temp", "0", "--regex",
                            " there was a (dog|cat) named [A-Z][a-z]{2,8}\\. It was very (happy|sad)\\."});
    CHECK(r.exit_code == 1);
    CHECK(contains(r.err, "the output is incomplete: generation stopped (token limit) before it matched the --regex"));
    CHECK(!r.out.empty());
    CHECK(std::string(" there was a ").rfind(r.out, 0) == 0);  // a prefix of the forced text
}

TEST_CASE("smollm2: a constrained turn is ordinary tokens to a session, and chat answers follow --json-schema") {
    if (!std::filesystem::exists(kSmolLM2)) return;
    TempDir dir;
    const std::vector<std::string> common = {"-m", kSmolLM2, "--temp",        "0",        "-t", "2",
                                             "-n", "80",     "--session-dir", dir.path(), "-v"};
    std::vector<std::string> first = {"run", "-p", "A JSON object describing a cat:", "--session", "s", "--json"};
    first.insert(first.end(), common.begin(), common.end());
    CliResult a = run_kvlm(first);
    REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    CHECK(Json::parse(a.out).is_object());
    std::vector<std::string> next = {"run", "-p", "\nThe cat", "--session", "s"};
    next.insert(next.end(), common.begin(), common.end());
    CliResult b = run_kvlm(next);
    REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    CHECK(count_of(b.err, R"((\d+) restored from disk)") > 0);

    CliResult chat = run_kvlm({"chat", "-m", kSmolLM2, "--temp", "0", "-t", "2", "-n", "120", "--json-schema",
                               R"({"type": "object", "properties": {"answer": {"type": "string", "maxLength": 30}},
                                   "required": ["answer"]})"},
                              "What is the capital of France?\nAnd of Italy?\n");
    REQUIRE_MESSAGE(chat.exit_code == 0, chat.err);
    std::vector<std::string> answers;
    for (size_t start = 0, end; start < chat.out.size(); start = end + 1) {
        end = chat.out.find('\n', start);
        if (end == std::string::npos) end = chat.out.size();
        if (end > start) answers.push_back(chat.out.substr(start, end - start));
    }
    REQUIRE(answers.size() == 2);
    for (const std::string& answer : answers) CHECK(Json::parse(answer).contains("answer"));
}

TEST_CASE("constrained output: bad constraints and combinations are errors naming them") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    auto run = [](std::vector<std::string> extra) {
        std::vector<std::string> args = {"run", "-m", stories(), "-p", "Hi", "-n", "5"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run_kvlm(args);
    };
    struct Case {
        std::vector<std::string> flags;
        const char* message;
    };
    for (const Case& c : std::vector<Case>{
             {{"--json-schema", R"({"type": "integer", "minimum": 0})"}, "unsupported keyword \"minimum\""},
             {{"--json-schema", "/nonexistent.json"}, "/nonexistent.json: cannot open it"},
             {{"--json-schema", "{\"type\": "}, "not valid JSON"},
             {{"--regex", "(a"}, "--regex: unbalanced '('"},
             {{"--regex", ""}, "the pattern is empty"},
             {{"--json-schema", ""}, "--json-schema: the argument is empty"},
             {{"--json", "--regex", "a"}, "are exclusive"},
             {{"--no-jump-forward"}, "only used with --json"},
             {{"--json", "--spec", "lookup"}, "--spec cannot be combined with --json"},
             {{"--json", "--beams", "2"}, "--beams cannot be combined with --json"},
         }) {
        CliResult r = run(c.flags);
        INFO(c.flags[0], ": ", r.err);
        CHECK(r.exit_code != 0);
        CHECK(r.out.empty());
        CHECK(contains(r.err, c.message));
    }
}
