// The stop rule shared by the decode loops.
#include "generate/stop_rule.h"

namespace kvlm {

const char* stop_reason_text(StopReason reason) {
    switch (reason) {
        case StopReason::none: return "";
        case StopReason::end_of_generation: return "end of generation";
        case StopReason::constraint_complete: return "constraint complete";
        case StopReason::token_limit: return "token limit";
        case StopReason::interrupted: return "interrupted";
        case StopReason::context_full: return "context full";
        case StopReason::kv_cache_full: return "KV cache full";
    }
    return "";
}

StopReason StopRule::after_token(int32_t token, int32_t n_emitted, int32_t n_in_context,
                                 bool constraint_complete) const {
    if (tokenizer_.is_end_of_generation(token)) return StopReason::end_of_generation;
    if (constraint_complete) return StopReason::constraint_complete;
    if (at_token_limit(n_emitted)) return StopReason::token_limit;
    if (cancel_ && cancel_->load()) return StopReason::interrupted;
    if (context_full(n_in_context)) return StopReason::context_full;
    return StopReason::none;
}

}  // namespace kvlm
