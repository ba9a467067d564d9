// `kvlm convert` driver: picks the importer, settles the output dtype and tokenizer size, then streams the
// tensors through ModelWriter one at a time, converting chunks of rows to the output dtype (bounded memory:
// one output tensor plus one f32 chunk). A model the output disk or memory cannot hold is refused up front.
#include "import/convert.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "import/quant_recipe.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/progress.h"

namespace kvlm {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kChunkElements = int64_t(1) << 22;  // f32 scratch: 16 MiB

bool starts_with_magic(const std::string& path, const char (&expected)[5]) {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    return in.gcount() == 4 && std::memcmp(magic, expected, 4) == 0;
}

// The output must not be one of the inputs (the same path, or the same file through a link or another
// name): `kvlm convert g.gguf -o g.gguf` once replaced its source. An existing file that is not a .kvlm
// model is replaced only with --force; an older .kvlm is replaced as before.
void check_output_path(const ConvertOptions& o) {
    struct stat out {};
    if (::stat(o.output.c_str(), &out) != 0) return;  // nothing there yet
    for (const std::string* input : {&o.source, &o.tokenizer}) {
        struct stat in {};
        if (!input->empty() && ::stat(input->c_str(), &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino)
            throw_error("convert: -o {} is the input {}: writing it would destroy the source; choose another output",
                        o.output, *input);
    }
    if (S_ISDIR(out.st_mode)) throw_error("convert: -o {} is a directory; give the path of the .kvlm file", o.output);
    if (!o.force && !(S_ISREG(out.st_mode) && starts_with_magic(o.output, "KVLM")))
        throw_error("convert: -o {} exists and is not a .kvlm model; pass --force to replace it", o.output);
}

ConvertSource open_source(const ConvertOptions& o) {
    if (!o.synthetic.empty()) {
        if (!o.source.empty())
            throw_error("convert: give either SOURCE ({}) or --synthetic {}, not both", o.source, o.synthetic);
        return make_synthetic_source(o.synthetic, o.tokenizer, o.seed);
    }
    if (o.source.empty())
        throw_error("convert: SOURCE is required (a Hugging Face model directory, a .gguf file, or a llama2.c .bin), "
                    "or --synthetic SHAPE");
    std::error_code ec;
    if (!fs::exists(o.source, ec)) throw_error("{}: no such file or directory", o.source);
    // Reading a FIFO or a device would wait for a writer or never end: only files and directories.
    for (const std::string* input : {&o.source, &o.tokenizer})
        if (!input->empty() && fs::exists(*input, ec) && !fs::is_directory(*input, ec) && !fs::is_regular_file(*input, ec))
            throw_error("{}: is not a regular file or a directory", *input);
    if (fs::is_directory(o.source, ec)) return open_hf_source(o.source, o.tokenizer);
    std::string ext = fs::path(o.source).extension().string();
    if (ext == ".safetensors" || fs::path(o.source).filename() == "config.json")
        throw_error("{}: pass the Hugging Face model directory that contains this file, not the file itself",
                    o.source);
    if (ext == ".kvlm") throw_error("{}: is already a .kvlm model", o.source);
    if (ext == ".gguf" || starts_with_magic(o.source, "GGUF")) return open_gguf_source(o.source, o.tokenizer);
    return open_llama2c_source(o.source, o.tokenizer);
}

// Refuses, before writing anything, a model this machine cannot hold: a synthetic config.json is backed by no
// file, so nothing else bounds its size. The output must fit the free space of its file system, and the
// largest tensor (converted whole in memory) must fit in physical memory.
void check_resources(const std::string& source, const std::string& output, const std::vector<TensorInfo>& tensors,
                     uint64_t total_bytes) {
    const TensorInfo* largest = &tensors[0];
    for (const TensorInfo& t : tensors)
        if (t.n_bytes > largest->n_bytes) largest = &t;
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page_size > 0 && largest->n_bytes > uint64_t(pages) * uint64_t(page_size))
        throw_error("{}: tensor {} {} needs {} of memory to convert, more than this machine's {}", source,
                    largest->name, shape_string(largest->shape), byte_size_text(largest->n_bytes),
                    byte_size_text(uint64_t(pages) * uint64_t(page_size)));
    std::string dir = fs::path(output).parent_path().string();
    struct statvfs st {};
    if (statvfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return;  // unknown: let the writes report it
    const uint64_t free_bytes = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
    if (total_bytes > free_bytes)
        throw_error("{}: the converted model needs {} but its file system has {} free", output,
                    byte_size_text(total_bytes), byte_size_text(free_bytes));
}

}  // namespace

int64_t tensor_n_rows(const TensorInfo& info) { return info.shape.empty() ? 1 : info.shape[0]; }

int64_t tensor_row_len(const TensorInfo& info) {
    int64_t n = 1;
    for (size_t d = 1; d < info.shape.size(); d++) n *= info.shape[d];
    return n;
}

void fit_tokenizer_to_vocab(TokenizerData* tok, int32_t n_vocab, const std::string& source) {
    const size_t n_tokens = tok->tokens.size();
    if (n_tokens > size_t(n_vocab))
        throw_error("{}: the tokenizer has {} tokens but the model's vocabulary is {} (expected at most {})", source,
                    n_tokens, n_vocab, n_vocab);
    if (n_tokens == 0) throw_error("{}: the tokenizer has no tokens", source);
    for (size_t id = n_tokens; id < size_t(n_vocab); id++) {  // embedding rows the tokenizer never produces
        tok->tokens.push_back(fmt::format("<unused_{}>", id));
        if (!tok->scores.empty()) tok->scores.push_back(0.0f);
        tok->token_types.push_back(int32_t(TokenType::unused));
    }
}

ConvertSummary convert_model(const ConvertOptions& o, bool show_progress) {
    auto t0 = std::chrono::steady_clock::now();
    if (o.output.empty()) throw_error("convert: -o OUT.kvlm is required");
    check_output_path(o);
    // --dtype is a type (every matrix in it) or one of llama-quantize's k-quant mixes (a type per tensor).
    DType dtype = DType::f32;
    const std::optional<QuantMix> mix = quant_mix_from_name(o.dtype);
    if (!o.dtype.empty() && !mix && !dtype_from_name(o.dtype, &dtype))
        throw_error("--dtype {}: unknown type (expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, or a "
                    "k-quant mix: {})",
                    o.dtype, quant_mix_names());

    ConvertSource src = open_source(o);
    const std::string source_name = o.synthetic.empty() ? o.source : "--synthetic " + o.synthetic;
    if (o.dtype.empty()) dtype = src.default_dtype;
    ModelMetadata& meta = src.metadata;
    // Each setting --sampling gives replaces the source's; the others stay.
    if (!o.sampling.empty()) meta.sampling = overlay(meta.sampling, parse_sampling_settings(o.sampling, "--sampling"));
    fit_tokenizer_to_vocab(&meta.tokenizer, meta.config.n_vocab, source_name);
    meta.config.validate(source_name);
    // Stored so that loading does not resolve every merge's pieces again (tokenizer.merge_ids).
    try {
        Tokenizer::validate(meta.tokenizer);
    } catch (const Error& e) {
        throw_error("{}: {}", source_name, e.what());
    }
    meta.tokenizer.merge_ids = meta.tokenizer.type == "bpe" ? resolve_bpe_merges(meta.tokenizer) : std::vector<int32_t>{};

    if (mix) dtype = quant_mix_base_type(*mix);
    std::vector<TensorInfo> tensors = expected_tensors(meta.config, dtype);
    KVLM_ASSERT(tensors.size() == src.tensors.size(), "importer tensor list disagrees with expected_tensors");
    std::vector<std::string> kept_f16;
    uint64_t total_bytes = 0;
    for (size_t i = 0; i < tensors.size(); i++) {
        TensorInfo& t = tensors[i];
        KVLM_ASSERT(t.name == src.tensors[i].name && t.shape == src.tensors[i].shape,
                    "importer tensor list disagrees with expected_tensors");
        if (o.dtype.empty()) t.dtype = t.shape.size() == 1 ? DType::f32 : src.tensors[i].dtype;
        else if (mix && t.shape.size() > 1) t.dtype = quant_mix_tensor_type(*mix, t.name, tensor_row_len(t), meta.config);
        // A matrix whose rows are not whole blocks of a quantized --dtype stays f16 (stories260K's n_ff of
        // 172); the summary says so.
        if (!o.dtype.empty() && t.shape.size() > 1 && t.dtype == DType::f16 && dtype != DType::f16)
            kept_f16.push_back(t.name);
        t.n_bytes = dtype_bytes(t.dtype, uint64_t(element_count(t.shape)));
        total_bytes += t.n_bytes;
    }

    check_resources(source_name, o.output, tensors, total_bytes);
    ModelWriter writer(o.output, meta, tensors);
    ProgressBar bar("converting", total_bytes, show_progress);
    std::vector<float> chunk;
    std::vector<uint8_t> buffer;
    uint64_t done_bytes = 0;
    for (size_t i = 0; i < tensors.size(); i++) {
        const TensorInfo& t = tensors[i];
        const int64_t n_rows = tensor_n_rows(t), row_len = tensor_row_len(t);
        const size_t row_bytes = size_t(dtype_bytes(t.dtype, uint64_t(row_len)));
        // Blocks the source already stores in the wanted type are copied as they are (bit-identical).
        const bool copy_stored = src.read_stored_rows && src.tensors[i].dtype == t.dtype;
        buffer.resize(size_t(n_rows) * row_bytes);
        const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, row_len));
        for (int64_t row = 0; row < n_rows; row += rows_per_chunk) {
            int64_t n = std::min(rows_per_chunk, n_rows - row);
            uint8_t* out = buffer.data() + size_t(row) * row_bytes;
            if (copy_stored) {
                src.read_stored_rows(i, row, n, out);
            } else {
                chunk.resize(size_t(n * row_len));
                src.read_rows(i, row, n, chunk.data());
                convert_from_f32(t.dtype, chunk.data(), out, chunk.size());
            }
            bar.update(done_bytes + uint64_t(row + n) * row_bytes, t.name);
        }
        writer.write_tensor(i, buffer.data());
        done_bytes += buffer.size();
    }
    writer.finish();
    bar.finish();

    ConvertSummary s;
    s.config = meta.config;
    s.dtype = o.dtype.empty() ? src.default_dtype : dtype;
    s.types = tensor_type_counts(tensors);
    s.kept_f16 = std::move(kept_f16);
    s.kind = src.kind;
    s.n_tensors = tensors.size();
    s.n_bytes = total_bytes;
    s.fingerprint = writer.fingerprint();
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
}

}  // namespace kvlm
