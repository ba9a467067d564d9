#include "generate/draft_model.h"

#include <algorithm>

#include "compute/best_tokens.h"
#include "generate/generate.h"
#include "util/error.h"

namespace kvlm {

namespace {

// A token's text for an error message: printable ASCII as is, other bytes as \xNN.
std::string shown(const std::string& text) {
    std::string out;
    for (unsigned char c : text) out += c >= 0x20 && c < 0x7f ? std::string(1, char(c)) : fmt::format("\\x{:02x}", c);
    return out;
}

}  // namespace

std::string vocabulary_difference(const Tokenizer& draft, const Tokenizer& target) {
    if (draft.n_vocab() != target.n_vocab())
        return fmt::format("n_vocab: {} in the draft model, {} in the target", draft.n_vocab(), target.n_vocab());
    for (int32_t id = 0; id < target.n_vocab(); id++)
        if (draft.piece(id) != target.piece(id))
            return fmt::format("token {}: '{}' in the draft model, '{}' in the target", id, shown(draft.piece(id)),
                               shown(target.piece(id)));
    if (draft.bos_id() != target.bos_id())
        return fmt::format("BOS: token {} in the draft model, {} in the target", draft.bos_id(), target.bos_id());
    if (draft.eos_id() != target.eos_id())
        return fmt::format("EOS: token {} in the draft model, {} in the target", draft.eos_id(), target.eos_id());
    return "";
}

DraftModel::DraftModel(const std::string& path, const EngineOptions& options, const Tokenizer& target)
    : engine_(std::make_unique<Engine>(path, options)) {
    if (std::string diff = vocabulary_difference(engine_->tokenizer(), target); !diff.empty())
        throw_error("--draft-model {}: its vocabulary differs from the model's ({}); a draft model must share the "
                    "target's tokens",
                    path, diff);
}

DraftModel::~DraftModel() { engine_->prefix_cache().release(seq_); }

std::vector<int32_t> DraftModel::draft(const std::vector<int32_t>& history, int32_t max_tokens) {
    const int32_t n_ctx = engine_->n_ctx();
    max_tokens = std::min<int64_t>(max_tokens, int64_t(n_ctx) - int64_t(history.size()));
    if (max_tokens <= 0 || history.empty()) return {};
    // Keep what this cache shares with the history (its rejected drafts go), and forward at least the last
    // token: the draft starts from the logits after it.
    size_t common = 0;
    while (common < seq_.tokens.size() && common < history.size() && seq_.tokens[common] == history[common]) common++;
    if (common == history.size()) common--;
    PrefixCache& cache = engine_->prefix_cache();
    cache.truncate(seq_, int32_t(common));
    std::vector<float> logits =
        prefill(*engine_, seq_, std::vector<int32_t>(history.begin() + std::ptrdiff_t(common), history.end())).logits;
    std::vector<int32_t> drafted;
    for (;;) {
        const int32_t token = argmax_cpu(logits.data(), int32_t(logits.size()));  // bad logits: a rejected draft
        drafted.push_back(token);
        if (int32_t(drafted.size()) >= max_tokens || engine_->tokenizer().is_end_of_generation(token)) break;
        logits = prefill(*engine_, seq_, {token}).logits;  // greedy: the likeliest continuation
    }
    return drafted;
}

}  // namespace kvlm
