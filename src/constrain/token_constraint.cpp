// Token masks by a depth-first walk of the vocabulary trie alongside the DFA: a subtree is skipped as soon as
// its prefix leads the automaton nowhere, so a state that allows few tokens costs little.
#include "constrain/token_constraint.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "util/error.h"

namespace kvlm {

namespace {
constexpr size_t kMaxForcedBytes = 4096;  // text forced in one jump
}

TokenConstraint::TokenConstraint(ByteDfa dfa, const Tokenizer& tokenizer)
    : dfa_(std::move(dfa)), tokenizer_(tokenizer) {
    const int32_t n_vocab = tokenizer.n_vocab();
    token_bytes_.resize(size_t(n_vocab));
    for (int32_t id = 0; id < n_vocab; id++) {
        if (tokenizer.is_end_of_generation(id)) {
            end_ids_.push_back(id);
            continue;  // never text
        }
        token_bytes_[size_t(id)] = tokenizer.decode_token(id);
    }
    build_trie();
}

void TokenConstraint::build_trie() {
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < int32_t(token_bytes_.size()); id++)
        if (!token_bytes_[size_t(id)].empty()) ids.push_back(id);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
        return token_bytes_[size_t(a)] != token_bytes_[size_t(b)] ? token_bytes_[size_t(a)] < token_bytes_[size_t(b)]
                                                                  : a < b;
    });
    // Inserting in sorted order appends each new child after its siblings, so children stay sorted by byte.
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> children;
        std::vector<int32_t> tokens;
    };
    std::vector<Node> nodes(1);
    for (int32_t id : ids) {
        int32_t at = 0;
        for (char ch : token_bytes_[size_t(id)]) {
            const uint8_t b = static_cast<uint8_t>(ch);
            auto& children = nodes[size_t(at)].children;
            if (children.empty() || children.back().first != b) {
                children.emplace_back(b, int32_t(nodes.size()));
                nodes.emplace_back();
            }
            at = nodes[size_t(at)].children.back().second;
        }
        nodes[size_t(at)].tokens.push_back(id);
    }
    edge_begin_.assign(nodes.size() + 1, 0);
    token_begin_.assign(nodes.size() + 1, 0);
    for (size_t i = 0; i < nodes.size(); i++) {
        edge_begin_[i + 1] = edge_begin_[i] + int32_t(nodes[i].children.size());
        token_begin_[i + 1] = token_begin_[i] + int32_t(nodes[i].tokens.size());
        for (auto& [b, child] : nodes[i].children) edge_byte_.push_back(b), edge_node_.push_back(child);
        node_tokens_.insert(node_tokens_.end(), nodes[i].tokens.begin(), nodes[i].tokens.end());
    }
}

const std::vector<int32_t>& TokenConstraint::allowed(int32_t state) {
    KVLM_ASSERT(state >= 0, "allowed() needs a live automaton state");
    // The ids of a cached mask, expanded from its bitset where it has one.
    auto ids_of = [&](const Mask& mask) -> const std::vector<int32_t>& {
        if (mask.bits.empty()) return mask.ids;
        if (expanded_state_ == state) return expanded_;  // the same state again (a free string, say)
        expanded_state_ = state;
        expanded_.clear();
        for (size_t w = 0; w < mask.bits.size(); w++)
            for (uint64_t word = mask.bits[w]; word != 0; word &= word - 1)
                expanded_.push_back(int32_t(w * 64 + size_t(__builtin_ctzll(word))));
        return expanded_;
    };
    if (auto it = masks_.find(state); it != masks_.end()) return ids_of(it->second);
    const auto start = std::chrono::steady_clock::now();
    // Allowed tokens as bits (no sort), then kept as ids if few, else as the bits.
    const size_t n_vocab = token_bytes_.size();
    Mask mask;
    mask.bits.assign((n_vocab + 63) / 64, 0);
    size_t n_allowed = 0;
    auto allow = [&](int32_t t) {
        mask.bits[size_t(t) / 64] |= uint64_t(1) << (t % 64);
        n_allowed++;
    };
    std::vector<std::pair<int32_t, int32_t>> stack{{0, state}};  // (trie node, automaton state there)
    while (!stack.empty()) {
        const auto [node, s] = stack.back();
        stack.pop_back();
        for (int32_t e = edge_begin_[size_t(node)]; e < edge_begin_[size_t(node) + 1]; e++) {
            const int32_t t = dfa_.next(s, edge_byte_[size_t(e)]);
            if (t == ByteDfa::kDead) continue;
            const int32_t child = edge_node_[size_t(e)];
            for (int32_t k = token_begin_[size_t(child)]; k < token_begin_[size_t(child) + 1]; k++)
                allow(node_tokens_[size_t(k)]);
            if (edge_begin_[size_t(child)] < edge_begin_[size_t(child) + 1]) stack.emplace_back(child, t);
        }
    }
    if (dfa_.accepting(state))
        for (int32_t t : end_ids_) allow(t);
    if (n_allowed == 0)
        throw_error(
            "{}: the output so far can only go on with bytes that no token of this vocabulary writes "
            "(next possible bytes: {})",
            dfa_.what(), [&] {
                std::string list;
                const ByteDfa::ByteSet live = dfa_.live_bytes(state);
                for (int b = 0; b < 256 && list.size() < 60; b++)
                    if (live[size_t(b) / 64] >> (b % 64) & 1)
                        list += fmt::format("{}\\x{:02x}", list.empty() ? "" : " ", b);
                return list;
            }());
    if (n_allowed * 32 <= n_vocab) {  // few: ids (ascending, from the bits)
        for (size_t w = 0; w < mask.bits.size(); w++)
            for (uint64_t word = mask.bits[w]; word != 0; word &= word - 1)
                mask.ids.push_back(int32_t(w * 64 + size_t(__builtin_ctzll(word))));
        mask.bits.clear();
        mask.bits.shrink_to_fit();
    }
    mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return ids_of(masks_.emplace(state, std::move(mask)).first->second);
}

int32_t TokenConstraint::advance(int32_t state, int32_t token) {
    if (state < 0 || token < 0 || token >= int32_t(token_bytes_.size())) return kDead;
    if (std::binary_search(end_ids_.begin(), end_ids_.end(), token)) return dfa_.accepting(state) ? kEnded : kDead;
    const std::string& bytes = token_bytes_[size_t(token)];
    if (bytes.empty()) return kDead;
    return dfa_.walk(state, bytes);
}

bool TokenConstraint::complete(int32_t state) {
    if (state == kEnded) return true;
    if (state < 0 || !dfa_.accepting(state)) return false;
    const ByteDfa::ByteSet live = dfa_.live_bytes(state);
    return (live[0] | live[1] | live[2] | live[3]) == 0;
}

const std::vector<int32_t>& TokenConstraint::forced_tokens(int32_t state) {
    if (auto it = forced_.find(state); it != forced_.end()) return it->second;
    // The forced bytes: while the output is not yet a match and exactly one byte can follow.
    std::string text;
    int32_t s = state;
    while (!dfa_.accepting(s) && text.size() < kMaxForcedBytes) {
        const ByteDfa::ByteSet live = dfa_.live_bytes(s);
        int n_live = 0, byte = 0;
        for (int w = 0; w < 4; w++) {
            n_live += __builtin_popcountll(live[size_t(w)]);
            if (live[size_t(w)]) byte = w * 64 + __builtin_ctzll(live[size_t(w)]);
        }
        if (n_live != 1) break;
        text += char(byte);
        s = dfa_.next(s, uint8_t(byte));
    }
    std::vector<int32_t> tokens;
    if (!text.empty()) {
        tokens = tokenizer_.encode_continuation(text);
        // The tokens must write exactly the forced text (a vocabulary may lack a byte, or normalize text).
        std::string written;
        for (int32_t t : tokens) written += t >= 0 && t < int32_t(token_bytes_.size()) ? token_bytes_[size_t(t)] : "";
        if (written != text) {
            tokens.clear();
        } else if (!complete(s)) {
            tokens.pop_back();  // the model writes the last one: it may join the text that follows
        }
    }
    return forced_.emplace(state, std::move(tokens)).first->second;
}

TokenConstraint compile_constraint(const RegexNode& regex, const std::string& what, const Tokenizer& tokenizer) {
    return TokenConstraint(ByteDfa(regex, what), tokenizer);
}

}  // namespace kvlm
