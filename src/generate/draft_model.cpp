#include "generate/draft_model.h"

#include <algorithm>

#include "compute/best_tokens.h"
#include "format/model_file.h"
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

namespace {

// The draft engine within the draft model's trained context, so that a model that cannot be a draft at all (its
// vocabulary differs) is refused for that, not for a context it was never going to run.
EngineOptions within_trained_context(const std::string& path, EngineOptions options) {
    options.n_ctx = std::min(options.n_ctx, ModelFile::open(path)->config().n_ctx);
    return options;
}

}  // namespace

DraftModel::DraftModel(const std::string& path, const EngineOptions& options, const Tokenizer& target)
    : engine_(std::make_unique<Engine>(path, within_trained_context(path, options))) {
    if (std::string diff = vocabulary_difference(engine_->tokenizer(), target); !diff.empty())
        throw_error("--draft-model {}: its vocabulary differs from the model's ({}); a draft model must share the "
                    "target's tokens",
                    path, diff);
    if (engine_->n_ctx() < options.n_ctx)
        throw_error("--draft-model {}: its trained context of {} tokens is shorter than this run's context of {} (lower "
                    "-c to {} or less)",
                    path, engine_->n_ctx(), options.n_ctx, engine_->n_ctx());
}

DraftModel::~DraftModel() { engine_->prefix_cache().release(seq_); }

std::vector<int32_t> DraftModel::draft(const std::vector<int32_t>& history, int32_t max_tokens) {
    const int32_t n_ctx = engine_->n_ctx();
    max_tokens = std::min<int64_t>(max_tokens, int64_t(n_ctx) - int64_t(history.size()));
    if (max_tokens <= 0 || history.empty()) return {};
    // Keep what this cache shares with the history (its rejected drafts go), and forward at least the last
    // token: the draft starts from the pick after it.
    size_t common = 0;
    while (common < seq_.tokens.size() && common < history.size() && seq_.tokens[common] == history[common]) common++;
    if (common == history.size()) common--;
    engine_->prefix_cache().truncate(seq_, int32_t(common));
    std::vector<int32_t> drafted;
    int32_t token = forward_greedy(history.data() + common, int32_t(history.size() - common));
    while (token >= 0) {
        drafted.push_back(token);
        if (int32_t(drafted.size()) >= max_tokens || engine_->tokenizer().is_end_of_generation(token)) break;
        token = forward_greedy(&token, 1);
    }
    return drafted;
}

// Greedy (the likeliest continuation), picked where the logits are: on a GPU only the id comes back, except
// after a catch-up longer than one exact forward (a prompt: the backend's prefill, then the host's argmax).
// -1 when the draft model's pool is full or a logit is bad (the draft ends; the target's verification decides
// what the tokens mean).
int32_t DraftModel::forward_greedy(const int32_t* tokens, int32_t n_tokens) {
    Backend& backend = engine_->backend();
    PrefixCache& cache = engine_->prefix_cache();
    if (n_tokens > std::max(1, backend.exact_forward_tokens())) {
        logits_ = prefill(*engine_, seq_, std::vector<int32_t>(tokens, tokens + n_tokens)).logits;
        return argmax_cpu(logits_.data(), int32_t(logits_.size()));
    }
    try {
        cache.reserve(seq_, seq_.table.n_tokens + n_tokens);
    } catch (const Error&) {
        return -1;
    }
    logits_.resize(size_t(engine_->model().config().n_vocab));
    const SampleRequest greedy;
    SampleOutcome next;
    if (n_tokens == 1) {
        next = backend.decode_sample(tokens[0], seq_.table.n_tokens, seq_.table, greedy, logits_.data());
    } else {
        Backend::SequenceInput input;
        input.tokens = tokens, input.n_tokens = n_tokens, input.pos = seq_.table.n_tokens, input.table = &seq_.table;
        input.logits = logits_.data(), input.sample = &greedy, input.outcome = &next;
        backend.forward_sequences(&input, 1);
    }
    seq_.tokens.insert(seq_.tokens.end(), tokens, tokens + n_tokens);
    seq_.table.n_tokens += n_tokens;
    cache.commit(seq_);
    if (next.status == SampleOutcome::kBadLogit) return -1;
    return next.status == SampleOutcome::kToken ? next.token : argmax_cpu(logits_.data(), int32_t(logits_.size()));
}

}  // namespace kvlm
