// Thompson construction over UTF-8 byte ranges (RE2's split of a code point range into byte sequences), then
// subset construction on demand, with transitions stored per byte class.
#include "constrain/byte_automaton.h"

#include <xxhash.h>

#include <algorithm>

#include "util/error.h"

namespace kvlm {

namespace {

constexpr int32_t kUnknown = -2;

int utf8_encode(uint32_t cp, uint8_t* out) {
    if (cp < 0x80) {
        out[0] = uint8_t(cp);
        return 1;
    }
    if (cp < 0x800) {
        out[0] = uint8_t(0xC0 | (cp >> 6)), out[1] = uint8_t(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = uint8_t(0xE0 | (cp >> 12)), out[1] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
        out[2] = uint8_t(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = uint8_t(0xF0 | (cp >> 18)), out[1] = uint8_t(0x80 | ((cp >> 12) & 0x3F));
    out[2] = uint8_t(0x80 | ((cp >> 6) & 0x3F)), out[3] = uint8_t(0x80 | (cp & 0x3F));
    return 4;
}

}  // namespace

size_t ByteDfa::SetHash::operator()(const std::vector<int32_t>& s) const {
    return size_t(XXH3_64bits(s.data(), s.size() * sizeof(int32_t)));
}

ByteDfa::ByteDfa(const RegexNode& regex, std::string what) : what_(std::move(what)) {
    const int32_t start = new_state();
    nfa_accept_ = build(regex, start);
    finish_nfa();
    transitions_.reserve(1024);
    if (state_for({0}) == kDead) throw_error("{}: no text matches it", what_);
}

int32_t ByteDfa::new_state() {
    if (nfa_.size() >= kMaxNfaStates)
        throw_error(
            "{}: too large to compile (more than {} automaton states; a smaller enum, fewer or smaller "
            "counted repeats, or less nesting would fit)",
            what_, kMaxNfaStates);
    nfa_.emplace_back();
    return int32_t(nfa_.size() - 1);
}

void ByteDfa::add_byte_path(const uint8_t* lo, const uint8_t* hi, int n, int32_t from, int32_t to) {
    int32_t cur = new_state();
    nfa_[size_t(from)].eps.push_back(cur);
    for (int j = 0; j < n; j++) {
        const int32_t target = j == n - 1 ? to : new_state();
        NfaState& s = nfa_[size_t(cur)];
        s.lo = lo[j], s.hi = hi[j], s.to = target;
        cur = target;
    }
}

void ByteDfa::add_chars(const CharSet& set, int32_t from, int32_t to) {
    // Splits [lo, hi] (code points of one encoded length) until each piece is a product of byte ranges.
    auto split = [&](auto&& self, uint32_t lo, uint32_t hi) -> void {
        uint8_t a[4], b[4];
        const int n = utf8_encode(lo, a);
        for (int i = 1; i < n; i++) {
            const uint32_t m = (1u << (6 * i)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if ((lo & m) != 0) {
                    self(self, lo, lo | m);
                    self(self, (lo | m) + 1, hi);
                    return;
                }
                if ((hi & m) != m) {
                    self(self, lo, (hi & ~m) - 1);
                    self(self, hi & ~m, hi);
                    return;
                }
            }
        }
        utf8_encode(hi, b);
        add_byte_path(a, b, n, from, to);
    };
    static const uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
    for (const CodepointRange& r : set) {
        uint32_t lo = r.lo;
        for (uint32_t end : kLengthEnds) {
            if (lo > r.hi) break;
            if (lo > end) continue;
            const uint32_t hi = std::min(r.hi, end);
            split(split, lo, hi);
            lo = hi + 1;
        }
    }
}

int32_t ByteDfa::build(const RegexNode& node, int32_t from) {
    using Kind = RegexNode::Kind;
    switch (node.kind) {
        case Kind::empty:
            return from;
        case Kind::chars: {
            const int32_t to = new_state();
            add_chars(node.chars, from, to);
            return to;
        }
        case Kind::concat:
            for (const RegexNode& child : node.children) from = build(child, from);
            return from;
        case Kind::alternate: {
            const int32_t out = new_state();
            for (const RegexNode& child : node.children) {
                const int32_t entry = new_state();
                nfa_[size_t(from)].eps.push_back(entry);
                const int32_t exit = build(child, entry);
                nfa_[size_t(exit)].eps.push_back(out);
            }
            return out;
        }
        case Kind::intersect:
            return build_product(node.children.at(0), node.children.at(1), from);
        case Kind::repeat: {
            const RegexNode& child = node.children.at(0);
            for (int32_t i = 0; i < node.min; i++) from = build(child, from);
            if (node.max < 0) {
                const int32_t loop = new_state();
                nfa_[size_t(from)].eps.push_back(loop);
                const int32_t exit = build(child, loop);
                nfa_[size_t(exit)].eps.push_back(loop);
                return loop;
            }
            const int32_t out = new_state();
            for (int32_t i = node.min; i < node.max; i++) {
                nfa_[size_t(from)].eps.push_back(out);
                from = build(child, from);
            }
            nfa_[size_t(from)].eps.push_back(out);
            return out;
        }
    }
    return from;
}

// Both operands are built as fragments nothing reaches (they cost states, never DFA work), then the reachable
// part of their product is added: a pair state moves on a byte when both of its halves do (the ranges
// intersected), and on an epsilon of either half.
int32_t ByteDfa::build_product(const RegexNode& a, const RegexNode& b, int32_t from) {
    const int32_t a_start = new_state(), a_exit = build(a, a_start);
    const int32_t b_start = new_state(), b_exit = build(b, b_start);
    std::unordered_map<uint64_t, int32_t> pair_state;
    std::vector<std::pair<int32_t, int32_t>> todo;
    auto state_of = [&](int32_t p, int32_t q) {
        const uint64_t key = uint64_t(uint32_t(p)) << 32 | uint32_t(q);
        auto it = pair_state.find(key);
        if (it != pair_state.end()) return it->second;
        const int32_t s = new_state();
        pair_state.emplace(key, s);
        todo.emplace_back(p, q);
        return s;
    };
    const int32_t entry = state_of(a_start, b_start);
    nfa_[size_t(from)].eps.push_back(entry);
    const int32_t out = new_state();
    while (!todo.empty()) {
        const auto [p, q] = todo.back();
        todo.pop_back();
        const int32_t s = pair_state.at(uint64_t(uint32_t(p)) << 32 | uint32_t(q));
        const NfaState sp = nfa_[size_t(p)], sq = nfa_[size_t(q)];  // copies: new_state() may reallocate
        std::vector<int32_t> eps;
        for (int32_t t : sp.eps) eps.push_back(state_of(t, q));
        for (int32_t t : sq.eps) eps.push_back(state_of(p, t));
        if (p == a_exit && q == b_exit) eps.push_back(out);
        if (sp.to >= 0 && sq.to >= 0) {
            const uint8_t lo = std::max(sp.lo, sq.lo), hi = std::min(sp.hi, sq.hi);
            if (lo <= hi) {
                const int32_t target = state_of(sp.to, sq.to);
                NfaState& st = nfa_[size_t(s)];
                st.lo = lo, st.hi = hi, st.to = target;
            }
        }
        nfa_[size_t(s)].eps = std::move(eps);
    }
    return out;
}

void ByteDfa::finish_nfa() {
    const size_t n = nfa_.size();
    // Which states can reach the match: a reverse search from it.
    std::vector<int32_t> rev_start(n + 1, 0), rev;
    for (const NfaState& s : nfa_) {
        for (int32_t t : s.eps) rev_start[size_t(t) + 1]++;
        if (s.to >= 0) rev_start[size_t(s.to) + 1]++;
    }
    for (size_t i = 0; i < n; i++) rev_start[i + 1] += rev_start[i];
    rev.resize(size_t(rev_start[n]));
    std::vector<int32_t> fill(rev_start.begin(), rev_start.end() - 1);
    for (size_t i = 0; i < n; i++) {
        for (int32_t t : nfa_[i].eps) rev[size_t(fill[size_t(t)]++)] = int32_t(i);
        if (nfa_[i].to >= 0) rev[size_t(fill[size_t(nfa_[i].to)]++)] = int32_t(i);
    }
    coreachable_.assign(n, 0);
    std::vector<int32_t> stack{nfa_accept_};
    coreachable_[size_t(nfa_accept_)] = 1;
    while (!stack.empty()) {
        const int32_t s = stack.back();
        stack.pop_back();
        for (int32_t i = rev_start[size_t(s)]; i < rev_start[size_t(s) + 1]; i++) {
            const int32_t p = rev[size_t(i)];
            if (!coreachable_[size_t(p)]) coreachable_[size_t(p)] = 1, stack.push_back(p);
        }
    }
    // Byte classes: bytes that no edge tells apart share one column of the transition table.
    std::array<uint8_t, 257> boundary{};
    for (const NfaState& s : nfa_)
        if (s.to >= 0) boundary[s.lo] = 1, boundary[size_t(s.hi) + 1] = 1;
    int32_t c = -1;
    for (int b = 0; b < 256; b++) {
        if (b == 0 || boundary[size_t(b)]) class_byte_[size_t(++c)] = uint8_t(b);
        byte_class_[size_t(b)] = uint8_t(c);
    }
    n_classes_ = c + 1;
    mark_.assign(n, 0);
}

int32_t ByteDfa::state_for(const std::vector<int32_t>& seeds) {
    if (++stamp_ == 0) std::fill(mark_.begin(), mark_.end(), 0), stamp_ = 1;
    std::vector<int32_t> set;
    stack_.clear();
    for (int32_t s : seeds)
        if (coreachable_[size_t(s)] && mark_[size_t(s)] != stamp_) mark_[size_t(s)] = stamp_, stack_.push_back(s);
    while (!stack_.empty()) {
        const int32_t s = stack_.back();
        stack_.pop_back();
        const NfaState& st = nfa_[size_t(s)];
        if (st.to >= 0 || s == nfa_accept_) set.push_back(s);
        for (int32_t t : st.eps)
            if (coreachable_[size_t(t)] && mark_[size_t(t)] != stamp_) mark_[size_t(t)] = stamp_, stack_.push_back(t);
    }
    if (set.empty()) return kDead;
    std::sort(set.begin(), set.end());
    if (auto it = index_.find(set); it != index_.end()) return it->second;
    n_set_entries_ += set.size();
    if (sets_.size() >= kMaxDfaStates || n_set_entries_ > kMaxDfaSetEntries)
        throw_error("{}: the constraint needs more than {} automaton states (a simpler pattern or schema would fit)",
                    what_, sets_.size());
    const int32_t id = int32_t(sets_.size());
    accepting_.push_back(std::binary_search(set.begin(), set.end(), nfa_accept_));
    transitions_.resize(transitions_.size() + size_t(n_classes_), kUnknown);
    has_live_bytes_.push_back(0);
    live_bytes_.emplace_back();
    index_.emplace(set, id);
    sets_.push_back(std::move(set));
    return id;
}

int32_t ByteDfa::next(int32_t state, uint8_t byte) {
    const size_t at = size_t(state) * size_t(n_classes_) + byte_class_[byte];
    if (transitions_[at] != kUnknown) return transitions_[at];
    std::vector<int32_t> seeds;
    for (int32_t s : sets_[size_t(state)]) {
        const NfaState& st = nfa_[size_t(s)];
        if (st.to >= 0 && byte >= st.lo && byte <= st.hi) seeds.push_back(st.to);
    }
    const int32_t t = state_for(seeds);
    transitions_[at] = t;
    return t;
}

int32_t ByteDfa::walk(int32_t state, std::string_view bytes) {
    for (char b : bytes) {
        if (state == kDead) break;
        state = next(state, static_cast<uint8_t>(b));
    }
    return state;
}

ByteDfa::ByteSet ByteDfa::live_bytes(int32_t state) {
    if (!has_live_bytes_[size_t(state)]) {
        ByteSet live{};
        for (int b = 0; b < 256; b++) {
            const uint8_t first = class_byte_[byte_class_[size_t(b)]];
            if (next(state, first) != kDead) live[size_t(b) / 64] |= uint64_t(1) << (b % 64);
        }
        live_bytes_[size_t(state)] = live;
        has_live_bytes_[size_t(state)] = 1;
    }
    return live_bytes_[size_t(state)];
}

}  // namespace kvlm
