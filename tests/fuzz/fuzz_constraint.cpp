// The constraint compilers on arbitrary bytes: the input is a regex (first byte even) or a JSON Schema text
// (odd), up to the first NUL; what follows the NUL is walked through the compiled automaton. Checks that
// refusals are kvlm::Error, that the bounds hold (no hang, no runaway memory), and the automaton's invariants:
// a live state's live bytes are exactly the bytes whose transition is not dead, and every live state can
// still reach a match.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "constrain/byte_automaton.h"
#include "constrain/json_schema.h"
#include "fuzz/fuzz_util.h"
#include "util/error.h"

namespace {

void check_state(kvlm::ByteDfa& dfa, int32_t state) {
    const kvlm::ByteDfa::ByteSet live = dfa.live_bytes(state);
    bool any = false;
    for (int b = 0; b < 256; b++) {
        const bool is_live = dfa.next(state, uint8_t(b)) != kvlm::ByteDfa::kDead;
        if (is_live != bool(live[size_t(b) / 64] >> (b % 64) & 1)) {
            std::fprintf(stderr, "fuzz_constraint: live_bytes disagrees with next() for byte %d\n", b);
            std::abort();
        }
        any |= is_live;
    }
    if (!any && !dfa.accepting(state)) {
        std::fprintf(stderr, "fuzz_constraint: a live state with no way to a match\n");
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
    const size_t nul = input.find('\0');
    const std::string text = input.substr(0, nul), walk = nul == std::string::npos ? "" : input.substr(nul + 1);
    try {
        kvlm::RegexNode regex = data[0] % 2 == 0
                                    ? kvlm::parse_regex(text, "--regex")
                                    : kvlm::json_schema_regex(kvlm::read_json_schema(text), "--json-schema");
        kvlm::ByteDfa dfa(regex, "fuzz");
        int32_t state = dfa.start();
        check_state(dfa, state);
        for (char c : walk) {
            state = dfa.next(state, static_cast<uint8_t>(c));
            if (state == kvlm::ByteDfa::kDead) break;
            check_state(dfa, state);
        }
    } catch (const kvlm::Error&) {
    }
    return 0;
}
