// --json, --json-schema and --regex: the flags compiled into a token constraint once the model (and so its
// vocabulary) is loaded.
#include <chrono>
#include <cstdio>

#include "cli/cli.h"
#include "constrain/json_schema.h"
#include "generate/constrained.h"
#include "util/error.h"

namespace kvlm {

void check_constraint_combinations(const ConstraintFlags& flags, const SpecOptions& spec) {
    if (flags.given() && spec.mode != SpecOptions::Mode::off)
        throw_error("--spec cannot be combined with --json, --json-schema or --regex (not supported yet)");
}

std::unique_ptr<TokenConstraint> load_constraint(const ConstraintFlags& flags, const Engine& engine, bool verbose) {
    const int n_given = int(flags.json) + int(flags.json_schema_given) + int(flags.regex_given);
    if (n_given == 0) {
        if (flags.no_jump_forward) throw_error("--no-jump-forward is only used with --json, --json-schema or --regex");
        return nullptr;
    }
    if (n_given > 1) throw_error("--json, --json-schema and --regex are exclusive: give one of them");
    const auto start = std::chrono::steady_clock::now();
    std::string what;
    RegexNode regex;
    if (flags.json) {
        what = "--json";
        regex = any_json_regex(/*object_only=*/true);
    } else if (flags.json_schema_given) {
        what = "--json-schema";
        if (flags.json_schema.empty()) throw_error("--json-schema: the argument is empty (give a file or the schema's JSON)");
        regex = json_schema_regex(read_json_schema(flags.json_schema), what);
    } else {
        what = "--regex";
        if (flags.regex.empty()) throw_error("--regex: the pattern is empty");
        regex = parse_regex(flags.regex, what);
    }
    auto constraint = std::make_unique<TokenConstraint>(ByteDfa(regex, what), engine.tokenizer());
    if (verbose)
        std::fprintf(stderr, "kvlm: %s compiled in %.1f ms (%zu automaton states)\n", what.c_str(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e3,
                     constraint->dfa().n_nfa_states());
    return constraint;
}

bool use_jump_forward(const ConstraintFlags& flags, Engine& engine, bool quiet) {
    if (flags.no_jump_forward) return false;
    if (can_jump_forward(engine)) return true;
    if (!quiet)
        std::fprintf(stderr,
                     "kvlm: jump-forward is off on %s (a forward of several tokens there does not give the bits of "
                     "one-token steps, so it could change the output); forced tokens run one by one\n",
                     engine.backend().name().c_str());
    return false;
}

}  // namespace kvlm
