// tools/check_constrained.py, the validator the constrained-output tests trust: the corpus passes its
// self-test, and outputs that break their schema or regex in each way it checks (invalid JSON, a schema
// violation, a bad format, a pattern, a regex mismatch, a trailing newline) fail it with exit 1, one line each.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "support/test_util.h"

using namespace kvlm::test;
using Json = nlohmann::json;

TEST_CASE("check_constrained.py: the corpus passes its self-test") {
    CliResult r = run_shell("python3 tools/check_constrained.py --self-test");
    INFO(r.out, r.err);
    CHECK(r.exit_code == 0);
}

TEST_CASE("check_constrained.py: each kind of bad output fails, and good ones pass") {
    TempDir dir;
    const Json person = Json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
        "email": {"type": "string", "format": "email"}, "code": {"type": "string", "pattern": "^[A-Z]{2}$"}},
        "required": ["name"]})");
    auto schema_case = [&](const std::string& output) {
        return Json{{"kind", "schema"}, {"schema", person}, {"output", output}}.dump() + "\n";
    };
    auto regex_case = [&](const std::string& output) {
        return Json{{"kind", "regex"}, {"regex", "[0-9]{2}"}, {"output", output}}.dump() + "\n";
    };
    const std::string good = schema_case(R"({"name": "Ann", "email": "ann@example.com", "code": "AB"})") +
                             regex_case("42");
    write_file(dir.file("good.jsonl"), good);
    CliResult pass = run_shell("python3 tools/check_constrained.py " + shell_quote(dir.file("good.jsonl")));
    INFO(pass.out, pass.err);
    CHECK(pass.exit_code == 0);
    CHECK(contains(pass.out, "checked 2 outputs, 0 failed"));

    const std::string bad = schema_case(R"({"name": "Ann")") +                              // not JSON
                            schema_case(R"({"name": "Annabel"})") +                          // longer than 5
                            schema_case(R"({"name": "A", "email": "not-an-email"})") +       // format
                            schema_case(R"({"name": "A", "code": "A1"})") +                  // pattern
                            regex_case("4a") +                                               // mismatch
                            regex_case("42\n");                                              // trailing newline
    write_file(dir.file("bad.jsonl"), bad);
    CliResult fail = run_shell("python3 tools/check_constrained.py " + shell_quote(dir.file("bad.jsonl")));
    INFO(fail.out, fail.err);
    CHECK(fail.exit_code == 1);
    CHECK(contains(fail.out, "checked 6 outputs, 6 failed"));
}
