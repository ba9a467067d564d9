// A regex as a deterministic automaton over UTF-8 bytes: a Thompson NFA, determinized lazily (a DFA state is
// made the first time a walk reaches it). Every NFA state kept can still reach the match, so a live DFA
// state always has a way to finish: kDead is the only state from which no output can be completed.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "constrain/regex.h"

namespace kvlm {

// Bounds that turn a pathological pattern (a huge enum, nested counted repeats) into a clear error instead of
// exhausting memory: NFA states when compiling, DFA states as decoding reaches them.
constexpr size_t kMaxNfaStates = 1'000'000;
constexpr size_t kMaxDfaStates = 250'000;
constexpr size_t kMaxDfaSetEntries = 16'000'000;  // NFA states summed over every DFA state's set (64 MB)

class ByteDfa {
public:
    static constexpr int32_t kDead = -1;
    using ByteSet = std::array<uint64_t, 4>;  // bit b: byte b

    // Throws Error naming `what` when the NFA would exceed kMaxNfaStates or the pattern matches nothing.
    ByteDfa(const RegexNode& regex, std::string what);

    int32_t start() const { return 0; }
    // The state after `byte`, kDead when no output can continue that way. Throws Error (naming `what`) when
    // the automaton would exceed kMaxDfaStates.
    int32_t next(int32_t state, uint8_t byte);
    // The state after `bytes` (kDead as soon as one byte leads nowhere).
    int32_t walk(int32_t state, std::string_view bytes);
    bool accepting(int32_t state) const { return accepting_[size_t(state)]; }
    ByteSet live_bytes(int32_t state);  // bytes whose transition from `state` is not kDead
    // Bytes that no edge tells apart form a class: they lead every state to the same place.
    int32_t n_byte_classes() const { return n_classes_; }
    int32_t byte_class(uint8_t byte) const { return byte_class_[byte]; }
    size_t n_states() const { return sets_.size(); }
    size_t n_nfa_states() const { return nfa_.size(); }
    const std::string& what() const { return what_; }

private:
    struct NfaState {
        std::vector<int32_t> eps;
        int32_t to = -1;  // the byte edge's target, -1 if none
        uint8_t lo = 0, hi = 0;
    };
    struct SetHash {
        size_t operator()(const std::vector<int32_t>& s) const;
    };

    std::string what_;
    std::vector<NfaState> nfa_;
    int32_t nfa_accept_ = -1;
    std::vector<uint8_t> coreachable_;  // [nfa state] can reach nfa_accept_
    std::array<uint8_t, 256> byte_class_{};
    std::array<uint8_t, 256> class_byte_{};  // a byte of each class
    int32_t n_classes_ = 0;

    std::vector<std::vector<int32_t>> sets_;  // [dfa state] its NFA states (those with a byte edge, or accept)
    std::vector<uint8_t> accepting_;
    std::vector<int32_t> transitions_;  // [dfa state][class], kUnknown until computed
    std::vector<uint8_t> has_live_bytes_;
    std::vector<ByteSet> live_bytes_;
    std::unordered_map<std::vector<int32_t>, int32_t, SetHash> index_;
    std::vector<uint32_t> mark_;  // closure scratch: [nfa state] == stamp_ when visited
    uint32_t stamp_ = 0;
    size_t n_set_entries_ = 0;
    std::vector<int32_t> stack_;

    int32_t new_state();
    int32_t build(const RegexNode& node, int32_t from);
    int32_t build_product(const RegexNode& a, const RegexNode& b, int32_t from);
    void add_chars(const CharSet& set, int32_t from, int32_t to);
    void add_byte_path(const uint8_t* lo, const uint8_t* hi, int n, int32_t from, int32_t to);
    void finish_nfa();
    int32_t state_for(const std::vector<int32_t>& seeds);
};

}  // namespace kvlm
