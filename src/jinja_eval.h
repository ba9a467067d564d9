// Jinja evaluator: renders a parsed statement tree against a root scope of variables. Loop bodies and
// macros get their own scopes (so `set` inside a loop does not leak, as in jinja2); limits bound the work.
#pragma once
#include <cstdint>
#include <string>

#include "jinja_parser.h"
#include "jinja_value.h"

namespace kvlm::jinja {

struct RenderLimits {
    size_t max_output = size_t(64) << 20;  // bytes of rendered text
    int max_depth = 32;                    // nested macro calls
    int64_t max_steps = 1000000;           // statements, loop iterations and expressions (~30 per message)
};

// Throws kvlm::Error("chat template: ... at line L") on runtime errors, raise_exception and exceeded limits.
std::string render_nodes(const NodeList& nodes, ValueDict globals, const RenderLimits& limits);

}  // namespace kvlm::jinja
