// The automata against independent validators, without a model: random texts that kvlm's automaton for each
// corpus schema (and regex) accepts are checked by tools/check_constrained.py with Python's jsonschema (and
// re.fullmatch). A compiler bug that lets through text the schema forbids shows up here, whatever a model
// would happen to write.
#include <doctest/doctest.h>

#include <deque>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "constrain/byte_automaton.h"
#include "constrain/json_schema.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;
using Json = nlohmann::ordered_json;

namespace {

// Random whole matches of `dfa`: every reachable state and its moves (one per byte class), the distance of
// each state to a match, then walks that pick random moves and, past `soft_length` bytes, only moves that get
// closer to a match, so that every walk ends.
class MatchSampler {
public:
    explicit MatchSampler(ByteDfa& dfa) : dfa_(dfa) {
        std::vector<int32_t> todo{dfa.start()};
        moves_.resize(1);
        seen_.insert(dfa.start());
        while (!todo.empty()) {
            const int32_t s = todo.back();
            todo.pop_back();
            for (int32_t c = 0; c < dfa.n_byte_classes(); c++) {
                int b = 0;
                while (dfa.byte_class(uint8_t(b)) != c) b++;
                const int32_t t = dfa.next(s, uint8_t(b));
                if (t == ByteDfa::kDead) continue;
                if (size_t(std::max(s, t)) >= moves_.size()) moves_.resize(size_t(std::max(s, t)) + 1);
                moves_[size_t(s)].push_back({c, t});
                if (seen_.insert(t).second) todo.push_back(t);
            }
        }
        // Distance to a match: a backward search from the accepting states.
        distance_.assign(moves_.size(), -1);
        std::vector<std::vector<int32_t>> back(moves_.size());
        std::deque<int32_t> queue;
        for (int32_t s : seen_) {
            for (auto [c, t] : moves_[size_t(s)]) back[size_t(t)].push_back(s);
            if (dfa.accepting(s)) distance_[size_t(s)] = 0, queue.push_back(s);
        }
        while (!queue.empty()) {
            const int32_t t = queue.front();
            queue.pop_front();
            for (int32_t s : back[size_t(t)])
                if (distance_[size_t(s)] < 0) distance_[size_t(s)] = distance_[size_t(t)] + 1, queue.push_back(s);
        }
    }

    std::string sample(std::mt19937& random, size_t soft_length) {
        std::string text;
        int32_t s = dfa_.start();
        while (true) {
            if (dfa_.accepting(s) && (text.size() > soft_length || random() % 4 == 0 || moves_[size_t(s)].empty()))
                return text;
            std::vector<std::pair<int32_t, int32_t>> options;
            for (auto m : moves_[size_t(s)])
                if (text.size() <= soft_length || distance_[size_t(m.second)] < distance_[size_t(s)])
                    options.push_back(m);
            REQUIRE(!options.empty());
            // Printable ASCII most of the time, so that texts look like text; any byte of the class otherwise.
            auto [c, t] = options[random() % options.size()];
            std::vector<uint8_t> bytes;
            for (int b = 0; b < 256; b++)
                if (dfa_.byte_class(uint8_t(b)) == c) bytes.push_back(uint8_t(b));
            std::vector<uint8_t> printable;
            for (uint8_t b : bytes)
                if (b >= 0x20 && b < 0x7f) printable.push_back(b);
            const auto& pool = !printable.empty() && random() % 8 != 0 ? printable : bytes;
            text += char(pool[random() % pool.size()]);
            s = t;
        }
    }
    size_t n_states() const { return seen_.size(); }

private:
    ByteDfa& dfa_;
    std::vector<std::vector<std::pair<int32_t, int32_t>>> moves_;  // [state] (byte class, next state)
    std::vector<int32_t> distance_;
    std::set<int32_t> seen_;
};

}  // namespace

TEST_CASE("constraints: random texts each corpus automaton accepts pass Python's jsonschema and re.fullmatch") {
    TempDir dir;
    std::string cases;
    std::mt19937 random(2024);
    size_t n_cases = 0;
    for (const auto& c : Json::parse(read_file("tests/data/constrained/schemas.json"))) {
        ByteDfa dfa(json_schema_regex(c["schema"], c["name"].get<std::string>()), "test");
        MatchSampler sampler(dfa);
        for (int i = 0; i < 8; i++, n_cases++)
            cases += Json{{"kind", "schema"},
                          {"name", c["name"]},
                          {"schema", c["schema"]},
                          {"output", sampler.sample(random, 300)}}
                         .dump() +
                     "\n";
    }
    for (const auto& c : Json::parse(read_file("tests/data/constrained/regexes.json"))) {
        ByteDfa dfa(parse_regex(c["regex"].get<std::string>()), "test");
        MatchSampler sampler(dfa);
        for (int i = 0; i < 8; i++, n_cases++)
            cases += Json{{"kind", "regex"},
                          {"name", c["name"]},
                          {"regex", c["regex"]},
                          {"output", sampler.sample(random, 200)}}
                         .dump() +
                     "\n";
    }
    // Any JSON (--json): random objects, checked as JSON.
    {
        ByteDfa dfa(any_json_regex(true), "--json");
        MatchSampler sampler(dfa);
        for (int i = 0; i < 20; i++, n_cases++)
            cases += Json{{"kind", "json"}, {"name", "--json"}, {"output", sampler.sample(random, 300)}}.dump() + "\n";
    }
    write_file(dir.file("cases.jsonl"), cases);
    CliResult check = run_shell("python3 tools/check_constrained.py " + shell_quote(dir.file("cases.jsonl")));
    INFO(check.out, check.err);
    CHECK(check.exit_code == 0);
    CHECK(contains(check.out, "checked " + std::to_string(n_cases) + " outputs, 0 failed"));
}
