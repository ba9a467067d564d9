// Tokenizer: special-token partitioning, dispatch to the spm / bpe encoders, decoding, and the UTF-8
// stream decoder. Invariant: decode_token(id) is precomputed for every id, so decoding never fails.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace kvlm {

namespace {

const char* const kEscapedSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

std::string escape_spaces(std::string_view text) {
    std::string out;
    out.reserve(text.size() + text.size() / 2);
    for (char c : text) {
        if (c == ' ') out += kEscapedSpace;
        else out += c;
    }
    return out;
}

std::string unescape_spaces(const std::string& piece) {
    std::string out;
    out.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
        if (piece.compare(i, 3, kEscapedSpace) == 0) {
            out += ' ';
            i += 3;
        } else {
            out += piece[i++];
        }
    }
    return out;
}

// "<0x0A>" -> "\n"; "" if the piece is not a byte token.
std::string byte_piece_value(const std::string& piece) {
    if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return "";
    const std::string hex = piece.substr(3, 2);
    if (!std::isxdigit(static_cast<unsigned char>(hex[0])) || !std::isxdigit(static_cast<unsigned char>(hex[1])))
        return "";
    return std::string(1, static_cast<char>(std::stoi(hex, nullptr, 16)));
}

}  // namespace

struct Tokenizer::Impl {
    struct Special {
        std::string_view text;  // into data.tokens
        int32_t id;
        bool always;  // user_defined: matched even without parse_special (as HF and llama.cpp do)
    };

    TokenizerData own;                 // a copy, unless constructed with KeepReference
    const TokenizerData* data = &own;  // what the tokenizer reads
    bool is_spm = false;
    std::unique_ptr<SpmEncoder> spm;
    std::unique_ptr<BpeEncoder> bpe;
    // The bytes of every token, end to end (one allocation): token id's end at decoded_end[id].
    std::string decoded;
    std::vector<uint32_t> decoded_end;
    std::array<std::vector<Special>, 256> specials;      // by first byte, longest first
    std::vector<int32_t> end_ids;                        // eos + stop_ids

    void encode_text(std::string_view text, std::vector<int32_t>& out) const;
    std::string_view decoded_token(int32_t id) const {
        const uint32_t begin = id > 0 ? decoded_end[size_t(id) - 1] : 0;
        return std::string_view(decoded).substr(begin, decoded_end[size_t(id)] - begin);
    }
};

void Tokenizer::validate(const TokenizerData& data) {
    const size_t n_vocab = data.tokens.size();
    if (data.type != "spm" && data.type != "bpe")
        throw_error("tokenizer: type is '{}', expected 'spm' or 'bpe'", data.type);
    if (n_vocab == 0) throw_error("tokenizer: vocabulary is empty");
    if (n_vocab > INT32_MAX) throw_error("tokenizer: vocabulary of {} tokens is too large", n_vocab);
    if (data.token_types.size() != n_vocab)
        throw_error("tokenizer: {} token types for {} tokens, expected one per token", data.token_types.size(), n_vocab);
    for (size_t id = 0; id < n_vocab; ++id) {
        const int32_t type = data.token_types[id];
        if (type < static_cast<int32_t>(TokenType::normal) || type > static_cast<int32_t>(TokenType::byte))
            throw_error("tokenizer: token {} ('{}') has type {}, expected 1-6", id, data.tokens[id], type);
    }
    if (data.type == "spm" && data.scores.size() != n_vocab)
        throw_error("tokenizer: {} scores for {} tokens, expected one per token for type spm", data.scores.size(),
                    n_vocab);
    auto check_id = [&](int32_t id, const char* what) {
        if (id < -1 || id >= static_cast<int64_t>(n_vocab))
            throw_error("tokenizer: {} id is {}, expected -1 or below the vocabulary size {}", what, id, n_vocab);
    };
    check_id(data.bos_id, "bos");
    check_id(data.eos_id, "eos");
    check_id(data.unk_id, "unk");
    check_id(data.pad_id, "pad");
    for (int32_t id : data.stop_ids) check_id(id, "stop");
    if (data.add_bos && data.bos_id < 0) throw_error("tokenizer: add_bos is set but there is no bos token");
    if (data.type == "bpe") {
        if (PreTokenizer::canonical_name(data.pre).empty())
            throw_error("tokenizer: unknown pre-tokenizer '{}', expected one of gpt2, llama3, smollm, qwen2", data.pre);
        for (size_t rank = 0; rank < data.merges.size(); ++rank)
            if (data.merges[rank].find(' ') == std::string::npos)
                throw_error("tokenizer: merge {} is '{}', expected two pieces separated by a space", rank,
                            data.merges[rank]);
        if (!data.merge_ids.empty() && data.merge_ids.size() != 3 * data.merges.size())
            throw_error("tokenizer: {} merge ids for {} merges, expected 3 per merge", data.merge_ids.size(),
                        data.merges.size());
        for (size_t i = 0; i < data.merge_ids.size(); i += 3) {
            const int32_t* ids = data.merge_ids.data() + i;
            const bool none = ids[0] == -1 && ids[1] == -1 && ids[2] == -1;
            const bool all = ids[0] >= 0 && ids[1] >= 0 && ids[2] >= 0 && size_t(ids[0]) < n_vocab &&
                             size_t(ids[1]) < n_vocab && size_t(ids[2]) < n_vocab;
            if (!none && !all)
                throw_error("tokenizer: merge {} has ids {} {} {}, expected three token ids below {} or -1 -1 -1",
                            i / 3, ids[0], ids[1], ids[2], n_vocab);
        }
    } else if (!data.merge_ids.empty()) {
        throw_error("tokenizer: {} merge ids for a '{}' vocabulary, which has no merges", data.merge_ids.size(),
                    data.type);
    }
}

Tokenizer::Tokenizer(const TokenizerData& data) : impl_(std::make_unique<Impl>()) {
    validate(data);
    impl_->own = data;
    build();
}

Tokenizer::Tokenizer(const TokenizerData& data, KeepReference) : impl_(std::make_unique<Impl>()) {
    validate(data);
    impl_->data = &data;
    build();
}

void Tokenizer::build() {
    Impl& m = *impl_;
    const TokenizerData& data = *m.data;
    m.is_spm = data.type == "spm";
    if (m.is_spm) m.spm = std::make_unique<SpmEncoder>(data);
    else m.bpe = std::make_unique<BpeEncoder>(data);

    const size_t n_vocab = data.tokens.size();
    size_t n_piece_bytes = 0;
    for (const std::string& piece : data.tokens) n_piece_bytes += piece.size();
    m.decoded.reserve(n_piece_bytes);  // a piece never decodes to more bytes than it has
    m.decoded_end.resize(n_vocab);
    for (size_t id = 0; id < n_vocab; ++id) {
        const std::string& piece = data.tokens[id];
        switch (static_cast<TokenType>(data.token_types[id])) {
            case TokenType::control:
            case TokenType::unknown:
            case TokenType::unused: break;
            case TokenType::user_defined: m.decoded += piece; break;
            case TokenType::byte:
                if (std::string value = byte_piece_value(piece); !value.empty()) {
                    m.decoded += value;
                    break;
                }
                [[fallthrough]];  // a byte-level vocabulary's single-byte piece
            case TokenType::normal:
                if (m.is_spm) m.decoded += unescape_spaces(piece);
                else byte_level_decode_append(piece, &m.decoded);
                break;
        }
        if (m.decoded.size() > UINT32_MAX) throw_error("tokenizer: the vocabulary decodes to more than 4 GiB");
        m.decoded_end[id] = static_cast<uint32_t>(m.decoded.size());
        const auto type = static_cast<TokenType>(data.token_types[id]);
        if ((type == TokenType::control || type == TokenType::user_defined) && !piece.empty()) {
            m.specials[static_cast<uint8_t>(piece[0])].push_back(
                {piece, static_cast<int32_t>(id), type == TokenType::user_defined});
        }
    }
    for (auto& bucket : m.specials) {
        std::stable_sort(bucket.begin(), bucket.end(),
                         [](const Impl::Special& a, const Impl::Special& b) { return a.text.size() > b.text.size(); });
    }
    if (data.eos_id >= 0) m.end_ids.push_back(data.eos_id);
    for (int32_t id : data.stop_ids) m.end_ids.push_back(id);
}

Tokenizer::~Tokenizer() = default;

// `text` lies at the start of the input or right after a special token.
void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    if (is_spm) {
        // SentencePiece's dummy prefix, added to every text fragment as llama.cpp does.
        std::string normalized = data->add_space_prefix ? kEscapedSpace : "";
        normalized += escape_spaces(text);
        spm->encode(normalized, out);
    } else {
        bpe->encode(text, out);
    }
}

std::vector<int32_t> Tokenizer::encode_continuation(std::string_view text) const {
    std::vector<int32_t> out;
    if (text.empty()) return out;
    if (impl_->is_spm) {
        impl_->spm->encode(escape_spaces(text), out);
    } else {
        impl_->bpe->encode(text, out);
    }
    return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special,
                                       const std::vector<TextRange>& plain_ranges) const {
    const Impl& m = *impl_;
    std::vector<int32_t> out;
    if (add_bos && m.data->add_bos) out.push_back(m.data->bos_id);
    // Leftmost-longest match of special tokens; the text between them is encoded normally.
    size_t text_start = 0;
    size_t next_plain = 0;  // first range not entirely before i
    for (size_t i = 0; i < text.size();) {
        while (next_plain < plain_ranges.size() && plain_ranges[next_plain].end <= i) next_plain++;
        auto in_plain_text = [&](size_t length) {
            return next_plain < plain_ranges.size() && plain_ranges[next_plain].begin < i + length;
        };
        const Impl::Special* match = nullptr;
        for (const Impl::Special& special : m.specials[static_cast<uint8_t>(text[i])]) {
            if ((special.always || (parse_special && !in_plain_text(special.text.size()))) &&
                text.compare(i, special.text.size(), special.text) == 0) {
                match = &special;
                break;
            }
        }
        if (!match) {
            ++i;
            continue;
        }
        m.encode_text(text.substr(text_start, i - text_start), out);
        out.push_back(match->id);
        i += match->text.size();
        text_start = i;
    }
    m.encode_text(text.substr(text_start), out);
    return out;
}

std::string Tokenizer::bytes_without_token(std::string_view text) const {
    return impl_->is_spm ? std::string() : impl_->bpe->bytes_without_token(text);
}

std::string Tokenizer::dropped_bytes_warning(std::string_view text, std::string_view what) const {
    const std::string dropped = bytes_without_token(text);
    if (dropped.empty()) return "";
    std::string list;
    for (char c : dropped) list += fmt::format("{}\\x{:02x}", list.empty() ? "" : ", ", static_cast<uint8_t>(c));
    return fmt::format("{} has bytes with no token in this vocabulary ({}): they are dropped (as Hugging Face "
                       "tokenizers and llama.cpp do)", what, list);
}

std::string Tokenizer::decode_token(int32_t id) const {
    // Ids past the vocabulary occur with padded embedding matrices; they contribute nothing.
    if (id < 0 || id >= n_vocab()) return "";
    return std::string(impl_->decoded_token(id));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string out;
    bool at_start = true;
    for (int32_t id : ids) {
        std::string_view bytes = id >= 0 && id < n_vocab() ? impl_->decoded_token(id) : std::string_view();
        if (bytes.empty()) continue;
        // Drop the space that the spm dummy prefix put before the first word.
        if (at_start && impl_->is_spm && impl_->data->add_space_prefix && bytes[0] == ' ') bytes.remove_prefix(1);
        at_start = false;
        out += bytes;
    }
    return out;
}

const std::string& Tokenizer::piece(int32_t id) const {
    if (id < 0 || id >= n_vocab()) throw_error("tokenizer: token id {} is out of range [0, {})", id, n_vocab());
    return impl_->data->tokens[id];
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->data->tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->data->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->data->eos_id; }

bool Tokenizer::is_end_of_generation(int32_t id) const {
    const auto& ids = impl_->end_ids;
    return id >= 0 && std::find(ids.begin(), ids.end(), id) != ids.end();
}

const TokenizerData& Tokenizer::data() const { return *impl_->data; }

std::string Utf8StreamDecoder::push(const std::string& bytes) {
    pending_ += bytes;
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
        const int status = utf8_sequence_status(pending_.data() + i, pending_.size() - i);
        if (status < 0) break;  // incomplete: wait for the next token
        if (status == 0) {
            out += "\xEF\xBF\xBD";
            i += 1;
        } else {
            out.append(pending_, i, static_cast<size_t>(status));
            i += static_cast<size_t>(status);
        }
    }
    pending_.erase(0, i);
    return out;
}

std::string Utf8StreamDecoder::flush() {
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace kvlm
