// Jinja evaluator: renders a parsed statement tree against a root scope of variables. Loop bodies and
// macros get their own scopes (so `set` inside a loop does not leak, as in jinja2); limits bound the work.
#pragma once
#include <cstdint>
#include <string>

#include "chat/jinja/parser.h"
#include "chat/jinja/value.h"

namespace kvlm::jinja {

// Far above what real chat templates need (a few nested blocks and macro calls, ~30 steps and a few KiB
// of values per message); they turn hostile or broken templates into errors instead of hangs, stack
// overflows or exhausted memory.
struct RenderLimits {
    size_t max_output = size_t(64) << 20;  // bytes of rendered text
    int max_depth = 32;                    // nested macro calls
    int max_nesting = 400;                 // statements + expressions being evaluated at once (the C++ stack)
    int64_t max_steps = 1000000;           // statements, loop iterations and expressions (~30 per message)
    uint64_t max_work = uint64_t(128) << 20;  // bytes of values created, copied, compared or scanned
};

// Throws kvlm::Error("chat template: ... at line L") on runtime errors, raise_exception and exceeded limits.
std::string render_nodes(const NodeList& nodes, ValueDict globals, const RenderLimits& limits);

}  // namespace kvlm::jinja
