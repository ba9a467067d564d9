// Tokenizer from a SentencePiece tokenizer.model (protobuf ModelProto, BPE type, e.g. Llama 2), read with
// a minimal bounds-checked protobuf reader. Fields (sentencepiece_model.proto):
//   ModelProto { pieces = 1; trainer_spec = 2; normalizer_spec = 3 }
//   SentencePiece { piece = 1 (string); score = 2 (float); type = 3 (enum, default NORMAL) }
//   TrainerSpec { model_type = 3 (UNIGRAM=1 default, BPE=2); byte_fallback = 35; unk/bos/eos/pad_id = 40-43 }
//   NormalizerSpec { add_dummy_prefix = 3 (default true); remove_extra_whitespaces = 4 }
#include <cstring>

#include "import/tokenizer/common.h"
#include "import/tokenizer/tokenizer_import.h"
#include "util/error.h"

namespace kvlm {

namespace {

class ProtoReader {
public:
    ProtoReader(const std::string& path, const char* data, size_t size, size_t base)
        : path_(path), data_(data), size_(size), base_(base) {}

    bool done() const { return pos_ >= size_; }

    uint64_t varint() {
        uint64_t value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos_ >= size_) fail("truncated varint");
            const auto byte = static_cast<uint8_t>(data_[pos_++]);
            value |= static_cast<uint64_t>(byte & 0x7F) << shift;
            if (!(byte & 0x80)) return value;
        }
        fail("varint longer than 10 bytes");
    }
    // Reads a field key; returns false at the end of the message.
    bool key(uint32_t& field, uint32_t& wire) {
        if (done()) return false;
        const uint64_t k = varint();
        field = static_cast<uint32_t>(k >> 3);
        wire = static_cast<uint32_t>(k & 7);
        return true;
    }
    ProtoReader message() {  // length-delimited field as a sub-reader
        const size_t n = length();
        ProtoReader sub(path_, data_ + pos_, n, base_ + pos_);
        pos_ += n;
        return sub;
    }
    std::string bytes() {
        const size_t n = length();
        std::string s(data_ + pos_, n);
        pos_ += n;
        return s;
    }
    float fixed32_float() {
        if (size_ - pos_ < 4) fail("truncated fixed32");
        float f;
        std::memcpy(&f, data_ + pos_, 4);
        pos_ += 4;
        return f;
    }
    void skip(uint32_t wire) {
        switch (wire) {
            case 0: varint(); break;
            case 1: advance(8); break;
            case 2: advance(length()); break;
            case 5: advance(4); break;
            default: fail(fmt::format("unsupported wire type {}", wire));
        }
    }
    [[noreturn]] void fail(const std::string& what) const {
        throw_error("{}: malformed SentencePiece model at byte {}: {}", path_, base_ + pos_, what);
    }

private:
    size_t length() {
        const uint64_t n = varint();
        if (n > size_ - pos_) fail(fmt::format("length {} runs past the end of its message ({} bytes left)", n, size_ - pos_));
        return static_cast<size_t>(n);
    }
    void advance(size_t n) {
        if (n > size_ - pos_) fail("field runs past the end of its message");
        pos_ += n;
    }

    const std::string& path_;
    const char* data_;
    size_t size_, pos_ = 0, base_;
};

}  // namespace

TokenizerData tokenizer_from_sentencepiece(const std::string& path) {
    const std::string file = tokenizer_import::read_text_file(path);
    ProtoReader model(path, file.data(), file.size(), 0);
    TokenizerData data;
    data.type = "spm";
    uint64_t model_type = 1;  // UNIGRAM unless stated
    int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
    bool add_dummy_prefix = true;
    uint32_t field = 0, wire = 0;
    while (model.key(field, wire)) {
        if (field == 1 && wire == 2) {
            ProtoReader piece = model.message();
            std::string text;
            float score = 0;
            uint64_t type = 1;
            while (piece.key(field, wire)) {
                if (field == 1 && wire == 2) text = piece.bytes();
                else if (field == 2 && wire == 5) score = piece.fixed32_float();
                else if (field == 3 && wire == 0) type = piece.varint();
                else piece.skip(wire);
            }
            if (type < 1 || type > 6) piece.fail(fmt::format("piece '{}' has type {}, expected 1-6", text, type));
            data.tokens.push_back(text);
            data.scores.push_back(score);
            data.token_types.push_back(static_cast<int32_t>(type));
        } else if (field == 2 && wire == 2) {
            ProtoReader trainer = model.message();
            while (trainer.key(field, wire)) {
                if (wire != 0) {
                    trainer.skip(wire);
                    continue;
                }
                const uint64_t v = trainer.varint();  // int32 fields: negative values are sign-extended
                if (field == 3) model_type = v;
                else if (field == 40) unk_id = static_cast<int32_t>(v);
                else if (field == 41) bos_id = static_cast<int32_t>(v);
                else if (field == 42) eos_id = static_cast<int32_t>(v);
                else if (field == 43) pad_id = static_cast<int32_t>(v);
            }
        } else if (field == 3 && wire == 2) {
            ProtoReader normalizer = model.message();
            while (normalizer.key(field, wire)) {
                if (field == 3 && wire == 0) add_dummy_prefix = normalizer.varint() != 0;
                else normalizer.skip(wire);
            }
        } else {
            model.skip(wire);
        }
    }
    if (data.tokens.empty()) throw_error("{}: no pieces found, expected a SentencePiece ModelProto", path);
    if (model_type != 2)
        throw_error("{}: SentencePiece model_type is {}, expected 2 (BPE); unigram models are not supported", path,
                    model_type);
    const auto n_vocab = static_cast<int32_t>(data.tokens.size());
    auto id_or_none = [&](int32_t id) { return id >= 0 && id < n_vocab ? id : -1; };
    data.unk_id = id_or_none(unk_id);
    data.bos_id = id_or_none(bos_id);
    data.eos_id = id_or_none(eos_id);
    data.pad_id = id_or_none(pad_id);
    data.add_bos = data.bos_id >= 0;
    data.add_space_prefix = add_dummy_prefix;
    tokenizer_import::finish(data, path);
    return data;
}

}  // namespace kvlm
