// llama2.c checkpoint layouts, following export.py: legacy_export (v0), version1_export, version2_export.
// Offsets are computed from the header alone and the total is compared with the file size.
#include "import/llama2c_checkpoint.h"

#include <climits>
#include <cstring>

#include "format/tensor.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace kvlm {

namespace {

constexpr uint32_t kMagic = 0x616b3432;  // "ak42"
constexpr uint64_t kVersionedHeaderSize = 256;
constexpr uint64_t kLegacyHeaderSize = 7 * 4;

int32_t load_i32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

void check_header(const Llama2cHeader& h, const std::string& path) {
    auto check = [&](const char* field, int64_t value, int64_t lo, int64_t hi) {
        if (value < lo || value > hi)
            throw_error("{}: llama2.c header field {} = {} is out of range (expected {}..{}); is this a llama2.c "
                        "checkpoint?",
                        path, field, value, lo, hi);
    };
    check("dim", h.dim, 2, 1 << 17);
    check("hidden_dim", h.hidden_dim, 1, 1 << 20);
    check("n_layers", h.n_layers, 1, 1024);
    check("n_heads", h.n_heads, 1, 1024);
    check("n_kv_heads", h.n_kv_heads, 1, h.n_heads);
    check("vocab_size", h.vocab_size, 1, 1 << 22);
    check("seq_len", h.seq_len, 1, 1 << 24);
    if (h.dim % h.n_heads != 0 || (h.dim / h.n_heads) % 2 != 0)
        throw_error("{}: llama2.c header has dim = {} and n_heads = {}: head size must be an even integer", path,
                    h.dim, h.n_heads);
    if (h.n_heads % h.n_kv_heads != 0)
        throw_error("{}: llama2.c header has n_heads = {}, not a multiple of n_kv_heads = {}", path, h.n_heads,
                    h.n_kv_heads);
}

}  // namespace

int64_t Llama2cTensor::n_elements() const { return element_count(shape); }

Llama2cCheckpoint::Llama2cCheckpoint() = default;
Llama2cCheckpoint::~Llama2cCheckpoint() = default;
const std::string& Llama2cCheckpoint::path() const { return file_->path(); }

const Llama2cTensor* Llama2cCheckpoint::find(const std::string& name) const {
    for (const Llama2cTensor& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

std::unique_ptr<Llama2cCheckpoint> Llama2cCheckpoint::open(const std::string& path) {
    std::unique_ptr<Llama2cCheckpoint> ck(new Llama2cCheckpoint());
    ck->file_ = std::make_unique<MappedFile>(path);
    const MappedFile& f = *ck->file_;
    Llama2cHeader& h = ck->header_;
    const uint8_t* d = f.data();

    uint64_t pos;
    bool versioned = f.size() >= 4 && uint32_t(load_i32(d)) == kMagic;
    if (versioned) {
        if (f.size() < kVersionedHeaderSize)
            throw_error("{}: file is {} bytes, too short for the {}-byte llama2.c header", path, f.size(),
                        kVersionedHeaderSize);
        h.version = load_i32(d + 4);
        if (h.version != 1 && h.version != 2)
            throw_error("{}: llama2.c checkpoint version {} is not supported (supported: legacy, 1, 2)", path,
                        h.version);
        const uint8_t* p = d + 8;
        h.dim = load_i32(p), h.hidden_dim = load_i32(p + 4), h.n_layers = load_i32(p + 8);
        h.n_heads = load_i32(p + 12), h.n_kv_heads = load_i32(p + 16), h.vocab_size = load_i32(p + 20);
        h.seq_len = load_i32(p + 24);
        h.shared_classifier = d[36] != 0;
        if (h.version == 2) {
            h.group_size = load_i32(d + 37);
            if (h.group_size <= 0 || h.group_size > (1 << 20))
                throw_error("{}: llama2.c Q8_0 group size {} is out of range", path, h.group_size);
        }
        pos = kVersionedHeaderSize;
    } else {
        if (f.size() < kLegacyHeaderSize)
            throw_error("{}: file is {} bytes, too short for a llama2.c header (7 int32 = 28 bytes)", path,
                        f.size());
        h.dim = load_i32(d), h.hidden_dim = load_i32(d + 4), h.n_layers = load_i32(d + 8);
        h.n_heads = load_i32(d + 12), h.n_kv_heads = load_i32(d + 16), h.vocab_size = load_i32(d + 20);
        h.seq_len = load_i32(d + 24);
        h.shared_classifier = h.vocab_size > 0;  // export.py: negative vocab size = separate classifier
        if (h.vocab_size < 0 && h.vocab_size != INT32_MIN) h.vocab_size = -h.vocab_size;
        pos = kLegacyHeaderSize;
    }
    check_header(h, path);

    const int64_t dim = h.dim, hidden = h.hidden_dim, vocab = h.vocab_size;
    const int64_t kv_dim = dim / h.n_heads * h.n_kv_heads, head_size = dim / h.n_heads;
    std::vector<Llama2cTensor>& ts = ck->tensors_;
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
        Llama2cTensor t;
        t.name = name;
        t.shape = std::move(shape);
        ts.push_back(t);
    };
    auto add_layers = [&](const char* suffix, std::vector<int64_t> shape) {
        for (int l = 0; l < h.n_layers; l++) add(tensor_names::layer(l, suffix), shape);
    };
    auto add_matrices = [&] {
        add_layers("attn_q.weight", {dim, dim});
        add_layers("attn_k.weight", {kv_dim, dim});
        add_layers("attn_v.weight", {kv_dim, dim});
        add_layers("attn_output.weight", {dim, dim});
        add_layers("ffn_gate.weight", {hidden, dim});  // w1
        add_layers("ffn_down.weight", {dim, hidden});  // w2
        add_layers("ffn_up.weight", {hidden, dim});    // w3
    };

    // Lay out offsets in file order; `extra` bytes (freq_cis in legacy files) are skipped.
    uint64_t expected = pos;
    auto place_f32 = [&](size_t from) {
        for (size_t i = from; i < ts.size(); i++) {
            ts[i].offset = expected;
            expected += uint64_t(ts[i].n_elements()) * 4;
        }
    };
    if (h.version == 0) {
        add(tensor_names::token_embd, {vocab, dim});
        add_layers("attn_norm.weight", {dim});
        add_layers("attn_q.weight", {dim, dim});
        add_layers("attn_k.weight", {kv_dim, dim});
        add_layers("attn_v.weight", {kv_dim, dim});
        add_layers("attn_output.weight", {dim, dim});
        add_layers("ffn_norm.weight", {dim});
        add_layers("ffn_gate.weight", {hidden, dim});
        add_layers("ffn_down.weight", {dim, hidden});
        add_layers("ffn_up.weight", {hidden, dim});
        add(tensor_names::output_norm, {dim});
        place_f32(0);
        expected += 2 * uint64_t(h.seq_len) * uint64_t(head_size / 2) * 4;  // freq_cis_real, freq_cis_imag
        if (!h.shared_classifier) {
            add(tensor_names::output, {vocab, dim});
            place_f32(ts.size() - 1);
        }
    } else {
        add_layers("attn_norm.weight", {dim});
        add_layers("ffn_norm.weight", {dim});
        add(tensor_names::output_norm, {dim});
        size_t first_matrix = ts.size();
        if (h.version == 1) {
            add(tensor_names::token_embd, {vocab, dim});
            add_matrices();
            if (!h.shared_classifier) add(tensor_names::output, {vocab, dim});
            place_f32(0);
        } else {
            place_f32(0);  // the norms stay f32
            add(tensor_names::token_embd, {vocab, dim});
            add_matrices();
            if (!h.shared_classifier) add(tensor_names::output, {vocab, dim});
            for (size_t i = first_matrix; i < ts.size(); i++) {  // int8 values, then f32 scales, per tensor
                Llama2cTensor& t = ts[i];
                uint64_t n = uint64_t(t.n_elements());
                if (n % uint64_t(h.group_size) != 0)
                    throw_error("{}: tensor {} has {} elements, not a multiple of the Q8_0 group size {}", path,
                                t.name, n, h.group_size);
                t.quantized = true;
                t.offset = expected;
                t.scale_offset = expected + n;
                expected += n + n / uint64_t(h.group_size) * 4;
            }
        }
    }
    if (expected != f.size())
        throw_error("{}: llama2.c checkpoint (version {}, dim {}, {} layers, vocab {}) should be {} bytes, found {}; "
                    "the file is truncated or not a llama2.c checkpoint",
                    path, h.version, h.dim, h.n_layers, h.vocab_size, expected, f.size());
    return ck;
}

void Llama2cCheckpoint::read_f32(const Llama2cTensor& t, int64_t begin, int64_t n, float* out) const {
    KVLM_ASSERT(begin >= 0 && n >= 0 && begin + n <= t.n_elements(), "bad tensor range");
    const uint8_t* d = file_->data();
    if (!t.quantized) {
        std::memcpy(out, d + t.offset + uint64_t(begin) * 4, size_t(n) * 4);
        return;
    }
    const int8_t* q = reinterpret_cast<const int8_t*>(d + t.offset);
    const uint8_t* scales = d + t.scale_offset;
    const int64_t gs = header_.group_size;
    for (int64_t i = 0; i < n; i++) {
        int64_t e = begin + i;
        float s;
        std::memcpy(&s, scales + uint64_t(e / gs) * 4, 4);
        out[i] = float(q[e]) * s;
    }
}

}  // namespace kvlm
