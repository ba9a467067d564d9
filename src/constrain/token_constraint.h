// A byte automaton lifted to a model's vocabulary: which tokens may come next from each automaton state (a
// trie over every token's bytes walked through the DFA, once per state, cached), and the tokens of the text
// the automaton forces from a state (jump-forward). A token is allowed iff its bytes keep the output a
// prefix of some match; end of generation is allowed only where the output is a whole match.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/byte_automaton.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

class TokenConstraint {
public:
    static constexpr int32_t kDead = ByteDfa::kDead;
    // A state past an end-of-generation token.
    static constexpr int32_t kEnded = -3;

    // `tokenizer` must outlive this.
    TokenConstraint(ByteDfa dfa, const Tokenizer& tokenizer);

    int32_t start() const { return dfa_.start(); }
    // Allowed next tokens from `state`, ascending; includes the end-of-generation ids when `state` accepts.
    // Valid until the next call. Throws Error when the automaton wants bytes no token has (a vocabulary
    // without that byte).
    const std::vector<int32_t>& allowed(int32_t state);
    // The state after `token`: kEnded for end of generation in an accepting state, kDead if not allowed.
    int32_t advance(int32_t state, int32_t token);
    bool accepting(int32_t state) const { return state == kEnded || (state >= 0 && dfa_.accepting(state)); }
    // The output is a whole match and nothing may follow it: generation is over.
    bool complete(int32_t state);
    // Tokens to append without sampling from `state`: the tokenizer's tokens of the text the automaton forces
    // there, all but the last, which the model picks (so that it can join the forced text to what follows);
    // all of them when the forced text completes the output. Empty when nothing is forced.
    const std::vector<int32_t>& forced_tokens(int32_t state);

    ByteDfa& dfa() { return dfa_; }
    size_t n_masks() const { return masks_.size(); }       // states whose allowed tokens were computed
    double mask_seconds() const { return mask_seconds_; }  // time spent computing them

private:
    ByteDfa dfa_;
    const Tokenizer& tokenizer_;
    std::vector<std::string> token_bytes_;  // [n_vocab] bytes each token writes ("" for control tokens)
    std::vector<int32_t> end_ids_;
    // Trie over token_bytes_, children sorted by byte: node i's edges are [edge_begin_[i], edge_begin_[i+1]).
    std::vector<int32_t> edge_begin_;
    std::vector<uint8_t> edge_byte_;
    std::vector<int32_t> edge_node_;
    std::vector<int32_t> token_begin_;  // node i's tokens: node_tokens_[token_begin_[i] .. token_begin_[i+1])
    std::vector<int32_t> node_tokens_;
    // A cached mask: the ids when few tokens are allowed, else a bitset over the vocabulary, so that a state
    // costs at most n_vocab / 8 bytes (a string with maxLength 500 is 500 states that allow most tokens).
    struct Mask {
        std::vector<int32_t> ids;
        std::vector<uint64_t> bits;
    };
    std::unordered_map<int32_t, Mask> masks_;
    std::vector<int32_t> expanded_;  // the ids of a bitset mask, for allowed()'s caller
    int32_t expanded_state_ = -1;    // whose mask expanded_ holds
    std::unordered_map<int32_t, std::vector<int32_t>> forced_;
    double mask_seconds_ = 0;

    void build_trie();
};

// `regex` compiled for `tokenizer`'s vocabulary; `what` names it in errors ("--regex", "--json-schema s.json").
TokenConstraint compile_constraint(const RegexNode& regex, const std::string& what, const Tokenizer& tokenizer);

}  // namespace kvlm
