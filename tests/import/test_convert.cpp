// kvlm convert: stories260K's three source formats give bit-identical tensors, --dtype rounding, synthetic
// models (deterministic, loadable), RoPE layout round trip, and malformed sources refused with clear errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "format/model_file.h"
#include "format/model_file_format.h"
#include "import/convert.h"
#include "import/gguf.h"
#include "import/rope_layout.h"
#include "import/safetensors.h"
#include "tokenizer/bpe.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories(const std::string& name) { return data_path("stories260K/" + name); }

ConvertSummary convert(const std::string& source, const std::string& out, const std::string& tokenizer = "",
                       const std::string& dtype = "") {
    ConvertOptions o;
    o.source = source;
    o.output = out;
    o.tokenizer = tokenizer;
    o.dtype = dtype;
    o.quiet = true;
    return convert_model(o, false);
}

ConvertSummary convert_synthetic(const std::string& shape, const std::string& tokenizer, const std::string& out,
                                 uint64_t seed, const std::string& dtype = "") {
    ConvertOptions o;
    o.synthetic = shape;
    o.tokenizer = tokenizer;
    o.output = out;
    o.seed = seed;
    o.dtype = dtype;
    return convert_model(o, false);
}

std::vector<float> to_f32(const TensorView& v) {
    std::vector<float> out(size_t(v.n_elements()));
    convert_to_f32(v.dtype, v.data, out.data(), out.size());
    return out;
}

// Expects the conversion to throw an Error whose message contains every needle.
void expect_convert_error(const ConvertOptions& o, const std::vector<std::string>& needles) {
    try {
        convert_model(o, false);
        FAIL("expected an error for source " << o.source);
    } catch (const Error& e) {
        std::string msg = e.what();
        for (const std::string& n : needles) CHECK_MESSAGE(msg.find(n) != std::string::npos, msg);
    }
}

void expect_convert_error(const std::string& source, const std::string& tokenizer,
                          const std::vector<std::string>& needles) {
    ConvertOptions o;
    o.source = source;
    o.tokenizer = tokenizer;
    o.output = std::filesystem::temp_directory_path() / "kvlm-never-written.kvlm";
    expect_convert_error(o, needles);
    CHECK(!std::filesystem::exists(o.output));
}

template <typename T>
void poke(std::string& bytes, size_t offset, T value) {
    REQUIRE(offset + sizeof(T) <= bytes.size());
    std::memcpy(&bytes[offset], &value, sizeof(T));
}

bool have_binary() {
    const char* env = std::getenv("KVLM_BIN");
    std::string bin = env && *env ? env : "./kvlm";
    if (std::filesystem::exists(bin)) return true;
    MESSAGE("SKIPPED: kvlm binary not built (" << bin << ")");
    return false;
}

}  // namespace

TEST_CASE("convert: rope layout permutation round-trips and matches llama.cpp's reshape") {
    const int64_t n_heads = 2, head_dim = 6, n_cols = 3, n_rows = n_heads * head_dim;
    std::vector<float> hf(size_t(n_rows * n_cols));
    for (size_t i = 0; i < hf.size(); i++) hf[i] = float(i);
    std::vector<float> inter(hf.size()), back(hf.size());
    rotate_half_to_interleaved(hf.data(), inter.data(), n_heads, head_dim, n_cols);
    // llama.cpp: w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2): interleaved row (h, i, j) = HF row (h, j, i).
    for (int64_t h = 0; h < n_heads; h++)
        for (int64_t i = 0; i < head_dim / 2; i++)
            for (int64_t j = 0; j < 2; j++)
                for (int64_t c = 0; c < n_cols; c++)
                    CHECK(inter[size_t(((h * head_dim) + 2 * i + j) * n_cols + c)] ==
                          hf[size_t(((h * head_dim) + j * head_dim / 2 + i) * n_cols + c)]);
    interleaved_to_rotate_half(inter.data(), back.data(), n_heads, head_dim, n_cols);
    CHECK(back == hf);
}

TEST_CASE("convert: stories260K from GGUF, llama2.c and HF give identical tensors") {
    if (!have_data(stories("stories260K.gguf")) || !have_data(stories("stories260K.bin")) ||
        !have_data(stories("tok512.bin")) || !have_data(stories("hf/model.safetensors")))
        return;
    TempDir dir;
    ConvertSummary sg = convert(stories("stories260K.gguf"), dir.file("gguf.kvlm"));
    ConvertSummary sb = convert(stories("stories260K.bin"), dir.file("bin.kvlm"), stories("tok512.bin"));
    ConvertSummary sh = convert(stories("hf"), dir.file("hf.kvlm"), stories("tok512.bin"));
    ConvertSummary sh2 = convert(stories("hf"), dir.file("hf2.kvlm"), stories("stories260K.gguf"));
    CHECK(sg.kind == "gguf");
    CHECK(sb.kind == "llama2c");
    CHECK(sh.kind == "hf");
    CHECK(sh.fingerprint == sb.fingerprint);  // same tensors, hyperparameters (n_ctx 512) and tokenizer
    CHECK(sg.dtype == DType::f32);

    auto g = ModelFile::open(dir.file("gguf.kvlm"));
    auto b = ModelFile::open(dir.file("bin.kvlm"));
    auto h = ModelFile::open(dir.file("hf.kvlm"));
    auto h2 = ModelFile::open(dir.file("hf2.kvlm"));
    const ModelConfig& c = g->config();
    CHECK(c.n_vocab == 512);
    CHECK(c.n_embd == 64);
    CHECK(c.n_layers == 5);
    CHECK(c.n_heads == 8);
    CHECK(c.n_kv_heads == 4);
    CHECK(c.head_dim == 8);
    CHECK(c.n_ff == 172);
    CHECK(c.tied_embeddings);  // the GGUF's output.weight is a copy of token_embd
    CHECK(c.norm_eps == doctest::Approx(1e-5));
    CHECK(c.n_ctx == 2048);  // as the GGUF metadata says
    CHECK(b->config().n_ctx == 512);
    CHECK(h->config().n_ctx == 512);

    REQUIRE(g->tensors().size() == 47);
    for (const ModelFile* other : {b.get(), h.get(), h2.get()}) {
        REQUIRE(other->tensors().size() == g->tensors().size());
        for (size_t i = 0; i < g->tensors().size(); i++) {
            const TensorInfo& a = g->tensors()[i];
            const TensorInfo& o = other->tensors()[i];
            CAPTURE(a.name);
            REQUIRE(a.name == o.name);
            REQUIRE(a.shape == o.shape);
            REQUIRE(a.dtype == DType::f32);
            REQUIRE(o.dtype == DType::f32);
            CHECK(std::memcmp(g->view(a).data, other->view(o).data, size_t(a.n_bytes)) == 0);
            CHECK(a.checksum == o.checksum);
        }
        CHECK(other->metadata().tokenizer.tokens == g->metadata().tokenizer.tokens);
    }
    // q/k really were permuted (the GGUF stores them interleaved): the converted rows differ from the raw ones.
    auto gguf = GgufFile::open(stories("stories260K.gguf"));
    const GgufTensor* raw_q = gguf->find_tensor("blk.0.attn_q.weight");
    REQUIRE(raw_q != nullptr);
    CHECK(std::memcmp(raw_q->data, g->view(*g->find("blk.0.attn_q.weight")).data, size_t(raw_q->n_bytes)) != 0);
    g->verify();
}

TEST_CASE("convert: HF directory with bf16 shards, untied lm_head, generation config and chat template") {
    if (!have_data(stories("hf/model.safetensors")) || !have_data(stories("tok512.bin"))) return;
    TempDir dir;
    // Rewrite stories260K's weights as two bf16 shards plus an explicit (different) lm_head.
    auto st = SafetensorsFile::open(stories("hf/model.safetensors"));
    std::vector<std::pair<std::string, std::string>> shard_headers(2), shard_data(2);
    std::string index = R"({"weight_map": {)";
    auto add = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
        int s = name.find("layers.3") != std::string::npos || name.find("layers.4") != std::string::npos ? 1 : 0;
        std::string& data = shard_data[size_t(s)].second;
        std::string& header = shard_headers[size_t(s)].second;
        size_t begin = data.size();
        for (float v : values) {
            uint16_t b = f32_to_bf16(v);
            data.append(reinterpret_cast<const char*>(&b), 2);
        }
        header += fmt::format("{}\"{}\": {{\"dtype\": \"BF16\", \"shape\": {}, \"data_offsets\": [{}, {}]}}",
                              header.empty() ? "" : ", ", name, shape_string(shape), begin, data.size());
        index += fmt::format("{}\"{}\": \"model-0000{}-of-00002.safetensors\"", index.back() == '{' ? "" : ", ", name,
                             s + 1);
    };
    std::vector<float> embd;
    for (const SafetensorsTensor& t : st->tensors()) {
        std::vector<float> v(size_t(t.n_elements()));
        safetensors_read_f32(t, 0, t.n_elements(), v.data());
        if (t.name == "model.embed_tokens.weight") embd = v;
        add(t.name, t.shape, v);
    }
    for (float& x : embd) x = -x;
    add("lm_head.weight", {512, 64}, embd);
    for (int s = 0; s < 2; s++) {
        std::string header = "{" + shard_headers[size_t(s)].second + "}";
        uint64_t n = header.size();
        write_file(dir.file(fmt::format("model-0000{}-of-00002.safetensors", s + 1)),
                   std::string(reinterpret_cast<const char*>(&n), 8) + header + shard_data[size_t(s)].second);
    }
    write_file(dir.file("model.safetensors.index.json"), index + "}}");
    std::string config = read_file(stories("hf/config.json"));
    config.replace(config.find("\"tie_word_embeddings\": true"), 27, "\"tie_word_embeddings\": false");
    write_file(dir.file("config.json"), config);
    write_file(dir.file("generation_config.json"), R"({"eos_token_id": [2, 5]})");
    write_file(dir.file("chat_template.jinja"), "{{ messages }}");

    ConvertSummary s = convert(dir.path(), dir.file("out.kvlm"), stories("tok512.bin"));
    CHECK(s.dtype == DType::bf16);
    auto m = ModelFile::open(dir.file("out.kvlm"));
    m->verify();
    CHECK(!m->config().tied_embeddings);
    CHECK(m->metadata().chat_template == "{{ messages }}");
    const TokenizerData& tok = m->metadata().tokenizer;
    CHECK(tok.eos_id == 2);
    CHECK(std::find(tok.stop_ids.begin(), tok.stop_ids.end(), 5) != tok.stop_ids.end());
    const TensorInfo* out = m->find("output.weight");
    REQUIRE(out != nullptr);
    CHECK(out->dtype == DType::bf16);
    std::vector<float> head = to_f32(m->view(*out));
    for (size_t i = 0; i < 256; i++) CHECK(head[i] == bf16_to_f32(f32_to_bf16(embd[i])));
    // Norms stay f32 and equal the (bf16-rounded) source.
    CHECK(m->find("blk.4.ffn_norm.weight")->dtype == DType::f32);
}

namespace {

// One GGUF key-value record: key (u64 length + bytes), value type, value bytes.
std::string gguf_record(const std::string& key, uint32_t type, const void* value, size_t value_bytes) {
    std::string r(8, '\0');
    uint64_t n = key.size();
    std::memcpy(&r[0], &n, 8);
    r += key;
    r.append(reinterpret_cast<const char*>(&type), 4);
    r.append(static_cast<const char*>(value), value_bytes);
    return r;
}
std::string gguf_f32_record(const std::string& key, float value) { return gguf_record(key, 6, &value, 4); }
std::string gguf_u32_record(const std::string& key, uint32_t value) { return gguf_record(key, 4, &value, 4); }

// stories260K.gguf with the `n_new` records `kvs` inserted before its own, plus a filler string record that
// makes the insertion a multiple of the alignment (so the tensor data stays aligned).
std::string gguf_with_kvs(std::string kvs, uint64_t n_new) {
    std::string bytes = read_file(stories("stories260K.gguf"));
    const uint64_t alignment = uint64_t(GgufFile::open(stories("stories260K.gguf"))->get_int_or("general.alignment", 32));
    const std::string filler_key = "kvlm.test.filler";
    size_t base = kvs.size() + 8 + filler_key.size() + 4 + 8;
    std::string filler_value((alignment - base % alignment) % alignment + 8, 'x');
    uint64_t filler_len = filler_value.size() - 8;
    std::memcpy(&filler_value[0], &filler_len, 8);
    kvs += gguf_record(filler_key, 8, filler_value.data(), filler_value.size());
    uint64_t n_kv = 0;
    std::memcpy(&n_kv, &bytes[16], 8);
    n_kv += n_new + 1;
    std::memcpy(&bytes[16], &n_kv, 8);
    return bytes.substr(0, 24) + kvs + bytes.substr(24);
}

}  // namespace

TEST_CASE("convert: sampling defaults from generation_config.json, GGUF general.sampling.* and --sampling") {
    if (!have_data(stories("hf/model.safetensors")) || !have_data(stories("stories260K.gguf"))) return;
    TempDir dir;
    std::filesystem::create_directory(dir.file("hf"));
    std::filesystem::copy_file(stories("hf/config.json"), dir.file("hf/config.json"));
    std::filesystem::copy_file(stories("hf/model.safetensors"), dir.file("hf/model.safetensors"));

    SUBCASE("a source without defaults stores none") {
        convert(stories("stories260K.gguf"), dir.file("plain.kvlm"));
        CHECK(ModelFile::open(dir.file("plain.kvlm"))->metadata().sampling.empty());
    }
    SUBCASE("generation_config.json: the values it sets, nothing else") {
        write_file(dir.file("hf/generation_config.json"),
                   R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "repetition_penalty": 1.05, "eos_token_id": 2})");
        convert(dir.file("hf"), dir.file("hf.kvlm"), stories("tok512.bin"));
        const SamplingSettings d = ModelFile::open(dir.file("hf.kvlm"))->metadata().sampling;
        CHECK(d.to_string() == "temp=0.6,top-p=0.9,repeat-penalty=1.05");
    }
    SUBCASE("generation_config.json with do_sample false is greedy, as transformers decodes it") {
        write_file(dir.file("hf/generation_config.json"), R"({"do_sample": false, "temperature": 0.6, "top_k": 20})");
        convert(dir.file("hf"), dir.file("hf.kvlm"), stories("tok512.bin"));
        CHECK(ModelFile::open(dir.file("hf.kvlm"))->metadata().sampling.to_string() == "temp=0,top-k=20");
    }
    SUBCASE("an out-of-range generation_config.json value is refused, naming the file") {
        write_file(dir.file("hf/generation_config.json"), R"({"top_p": 2})");
        expect_convert_error(dir.file("hf"), stories("tok512.bin"), {"generation_config.json", "top-p: 2 is out of range"});
    }
    SUBCASE("GGUF general.sampling.* keys, and --sampling over them") {
        std::string kvs = gguf_f32_record("general.sampling.temp", 0.7f) + gguf_u32_record("general.sampling.top_k", 20) +
                          gguf_f32_record("general.sampling.penalty_repeat", 1.05f);
        write_file(dir.file("s.gguf"), gguf_with_kvs(kvs, 3));
        convert(dir.file("s.gguf"), dir.file("s.kvlm"));
        auto m = ModelFile::open(dir.file("s.kvlm"));
        CHECK(m->metadata().sampling.to_string() == "temp=0.7,top-k=20,repeat-penalty=1.05");
        // The tensors did not move: the same model as the unmodified file.
        convert(stories("stories260K.gguf"), dir.file("plain.kvlm"));
        CHECK(m->fingerprint() == ModelFile::open(dir.file("plain.kvlm"))->fingerprint());

        ConvertOptions o;
        o.source = dir.file("s.gguf");
        o.output = dir.file("o.kvlm");
        o.sampling = "temp=0,min-p=0.1";
        o.quiet = true;
        convert_model(o, false);
        CHECK(ModelFile::open(dir.file("o.kvlm"))->metadata().sampling.to_string() ==
              "temp=0,top-k=20,min-p=0.1,repeat-penalty=1.05");
        o.sampling = "temp=-1";
        expect_convert_error(o, {"--sampling: temp: -1 is out of range"});
        o.sampling = "warmth=1";
        expect_convert_error(o, {"--sampling: unknown setting 'warmth'"});
    }
}

TEST_CASE("convert: --dtype f16 and bf16 round each matrix value of the f32 conversion") {
    if (!have_data(stories("stories260K.gguf"))) return;
    TempDir dir;
    convert(stories("stories260K.gguf"), dir.file("f32.kvlm"));
    for (const char* name : {"f16", "bf16"}) {
        CAPTURE(name);
        ConvertSummary s = convert(stories("stories260K.gguf"), dir.file(std::string(name) + ".kvlm"), "", name);
        DType want;
        REQUIRE(dtype_from_name(name, &want));
        CHECK(s.dtype == want);
        auto ref = ModelFile::open(dir.file("f32.kvlm"));
        auto m = ModelFile::open(dir.file(std::string(name) + ".kvlm"));
        m->verify();
        // Relative rounding error: half an ulp (2^-11 for f16, 2^-8 for bf16) for normal values.
        const float rel = want == DType::f16 ? 1.0f / 2048 : 1.0f / 256;
        for (const TensorInfo& t : m->tensors()) {
            CAPTURE(t.name);
            const TensorInfo* r = ref->find(t.name);
            REQUIRE(r != nullptr);
            CHECK(t.dtype == (t.shape.size() == 1 ? DType::f32 : want));
            std::vector<float> a = to_f32(ref->view(*r)), b = to_f32(m->view(t));
            REQUIRE(a.size() == b.size());
            size_t n_bad = 0, n_changed = 0;
            for (size_t i = 0; i < a.size(); i++) {
                float tol = std::max(rel * std::fabs(a[i]), 6e-8f);  // f16 subnormal spacing
                n_bad += !(std::fabs(a[i] - b[i]) <= tol);
                n_changed += a[i] != b[i];
            }
            CHECK(n_bad == 0);
            if (t.shape.size() == 1) CHECK(n_changed == 0);
            else CHECK(n_changed > 0);  // really rounded
        }
    }
    expect_convert_error(
        [&] {
            ConvertOptions o;
            o.source = stories("stories260K.gguf");
            o.output = dir.file("bad.kvlm");
            o.dtype = "q4";
            return o;
        }(),
        {"--dtype q4", "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, or a k-quant mix: q2_k, q3_k_s"});
}

TEST_CASE("convert: --dtype q8_0/q4_0/q4_1/q5_0/q5_1 gives the gguf package's blocks for real weights, byte for byte") {
    if (!have_data(stories("hf/model.safetensors")) || !have_data(stories("tok512.bin"))) return;
    // tests/data/gen_quantizer_reference.py: XXH3-64 of each stories260K matrix quantized by gguf.quants.
    const nlohmann::json reference = nlohmann::json::parse(read_file("tests/data/quantizer_reference.json"));
    TempDir dir;
    for (const char* name : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) {
        CAPTURE(std::string(name));
        ConvertSummary s = convert(stories("hf"), dir.file(std::string(name) + ".kvlm"), stories("tok512.bin"), name);
        DType want;
        REQUIRE(dtype_from_name(name, &want));
        CHECK(s.dtype == want);
        // ffn_down has 172 columns, not whole blocks: those 5 matrices stay f16, and the summary names them.
        CHECK(s.kept_f16.size() == 5);
        CHECK(s.types == fmt::format("{} 31, f32 11, f16 5", name));
        auto m = ModelFile::open(dir.file(std::string(name) + ".kvlm"));
        m->verify();
        size_t n_compared = 0;
        for (const auto& item : reference.at(name).items()) {
            const std::string tensor = item.key(), checksum = item.value().get<std::string>();
            CAPTURE(tensor);
            const TensorInfo* t = m->find(tensor);
            REQUIRE(t != nullptr);
            CHECK(t->dtype == want);
            CHECK(fmt::format("{:016x}", t->checksum) == checksum);
            n_compared++;
        }
        CHECK(n_compared == 31);
        CHECK(m->find("blk.0.ffn_down.weight")->dtype == DType::f16);
    }
}

TEST_CASE("convert: a quantized GGUF keeps its Q4_1 and Q8_0 blocks bit for bit, and --dtype f16 inflates them") {
    const std::string gguf_path = "models/cache/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!have_data(gguf_path)) return;
    TempDir dir;
    ConvertSummary s = convert(gguf_path, dir.file("q.kvlm"));
    CHECK(s.dtype == DType::q4_1);
    CHECK(s.types == "q4_1 210, f32 61, q8_0 1");
    CHECK(s.kept_f16.empty());
    auto g = GgufFile::open(gguf_path);
    auto m = ModelFile::open(dir.file("q.kvlm"));
    m->verify();
    const int64_t head_dim = m->config().head_dim;
    for (const TensorInfo& t : m->tensors()) {
        CAPTURE(t.name);
        const GgufTensor* gt = g->find_tensor(t.name);
        REQUIRE(gt != nullptr);
        if (t.shape.size() == 1) continue;
        REQUIRE(kvlm_dtype_of_ggml_type(gt->ggml_type).has_value());
        CHECK(t.dtype == *kvlm_dtype_of_ggml_type(gt->ggml_type));
        REQUIRE(t.n_bytes == gt->n_bytes);
        // Rows are copied as stored; q/k rows move from GGUF's interleaved RoPE order to rotate_half.
        const bool permuted = t.name.find("attn_q.") != std::string::npos || t.name.find("attn_k.") != std::string::npos;
        const uint64_t row_bytes = t.n_bytes / uint64_t(t.shape[0]);
        const auto* bytes = static_cast<const uint8_t*>(m->view(t).data);
        size_t n_different = 0;
        for (int64_t r = 0; r < t.shape[0]; r++) {
            const int64_t source = permuted ? interleaved_source_row(r, head_dim) : r;
            n_different += std::memcmp(bytes + uint64_t(r) * row_bytes, gt->data + uint64_t(source) * row_bytes,
                                       size_t(row_bytes)) != 0;
        }
        CHECK(n_different == 0);
    }
    ConvertSummary f16 = convert(gguf_path, dir.file("f16.kvlm"), "", "f16");
    CHECK(f16.types == "f16 211, f32 61");
}

TEST_CASE("convert: synthetic models are deterministic per seed and load") {
    if (!have_data(stories("stories260K.gguf"))) return;
    TempDir dir;
    // A tiny Qwen2-style shape (biases) with a vocabulary larger than the 512-token tokenizer.
    write_file(dir.file("config.json"), R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 520, "max_position_embeddings": 256, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": false})");
    const std::string tok = stories("stories260K.gguf");
    ConvertSummary a = convert_synthetic(dir.file("config.json"), tok, dir.file("a.kvlm"), 7);
    ConvertSummary b = convert_synthetic(dir.file("config.json"), tok, dir.file("b.kvlm"), 7);
    ConvertSummary c = convert_synthetic(dir.file("config.json"), tok, dir.file("c.kvlm"), 8);
    CHECK(a.fingerprint == b.fingerprint);
    CHECK(a.fingerprint != c.fingerprint);
    CHECK(read_file(dir.file("a.kvlm")) == read_file(dir.file("b.kvlm")));

    auto m = ModelFile::open(dir.file("a.kvlm"));
    m->verify();
    const ModelConfig& cfg = m->config();
    CHECK(cfg.architecture == "qwen2");
    CHECK(cfg.qkv_bias);
    CHECK(!cfg.tied_embeddings);
    CHECK(cfg.n_vocab == 520);
    const TokenizerData& td = m->metadata().tokenizer;
    REQUIRE(td.tokens.size() == 520);
    CHECK(td.tokens[519] == "<unused_519>");
    CHECK(td.token_types[519] == int32_t(TokenType::unused));
    CHECK(td.tokens[511] != "<unused_511>");

    std::vector<float> norm = to_f32(m->view(*m->find("blk.1.ffn_norm.weight")));
    for (float x : norm) CHECK(x == 1.0f);
    std::vector<float> w = to_f32(m->view(*m->find("blk.0.attn_q.weight")));
    double sum = 0, sum2 = 0;
    for (float x : w) sum += x, sum2 += double(x) * x;
    double mean = sum / double(w.size()), sd = std::sqrt(sum2 / double(w.size()) - mean * mean);
    CHECK(std::fabs(mean) < 0.002);
    CHECK(sd == doctest::Approx(0.02).epsilon(0.05));
    CHECK(m->find("blk.0.attn_q.bias") != nullptr);
    CHECK(m->find("output.weight") != nullptr);

    // bf16 output of the same seed is the rounding of the f32 one.
    convert_synthetic(dir.file("config.json"), tok, dir.file("bf16.kvlm"), 7, "bf16");
    auto mb = ModelFile::open(dir.file("bf16.kvlm"));
    const TensorInfo* qb = mb->find("blk.0.attn_q.weight");
    REQUIRE(qb != nullptr);
    CHECK(qb->dtype == DType::bf16);
    const uint16_t* bits = static_cast<const uint16_t*>(mb->view(*qb).data);
    for (size_t i = 0; i < 64; i++) CHECK(bits[i] == f32_to_bf16(w[i]));

    // A vocabulary smaller than the tokenizer is refused.
    write_file(dir.file("small.json"), R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32,
        "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 100})");
    ConvertOptions o;
    o.synthetic = dir.file("small.json");
    o.tokenizer = tok;
    o.output = dir.file("small.kvlm");
    expect_convert_error(o, {"512 tokens", "vocabulary is 100"});
    o.synthetic = "gpt-17";
    expect_convert_error(o, {"gpt-17", "smollm2-135m"});
}

TEST_CASE("convert: a BPE vocabulary's merges are stored as token ids, which loading uses") {
    const std::string tok = data_path("tokenizers/smollm2/tokenizer.json");
    if (!have_data(tok) || !have_data(stories("stories260K.gguf"))) return;
    TempDir dir;
    write_file(dir.file("config.json"), R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 49152, "max_position_embeddings": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": true})");
    convert_synthetic(dir.file("config.json"), tok, dir.file("bpe.kvlm"), 1);
    auto m = ModelFile::open(dir.file("bpe.kvlm"));
    TokenizerData data = m->metadata().tokenizer;
    REQUIRE(data.merge_ids.size() == 3 * data.merges.size());
    const std::vector<int32_t> stored = data.merge_ids;
    data.merge_ids.clear();
    CHECK(stored == resolve_bpe_merges(data));
    // Not part of the fingerprint: the same model converted by a kvlm that stored none keeps its sessions.
    ModelMetadata without = m->metadata();
    without.tokenizer.merge_ids.clear();
    uint64_t high = 0, low = 0;
    CHECK(model_format::compute_fingerprint(without, m->tensors(), &high, &low) == m->fingerprint());
    // A SentencePiece vocabulary has no merges to store.
    convert(stories("stories260K.gguf"), dir.file("spm.kvlm"));
    CHECK(ModelFile::open(dir.file("spm.kvlm"))->metadata().tokenizer.merge_ids.empty());
}

TEST_CASE("convert: malformed and unsupported sources") {
    if (!have_data(stories("stories260K.gguf")) || !have_data(stories("hf/model.safetensors")) ||
        !have_data(stories("stories260K.bin")))
        return;
    TempDir dir;
    const std::string tok = stories("tok512.bin");
    expect_convert_error(dir.file("nope"), "", {"nope", "no such file"});

    std::filesystem::create_directories(dir.file("empty"));
    expect_convert_error(dir.file("empty"), "", {"no config.json"});

    // HF directory variants built from the real stories260K files.
    const std::string config = read_file(stories("hf/config.json"));
    const std::string weights = read_file(stories("hf/model.safetensors"));
    auto hf_dir = [&](const std::string& name, const std::string& cfg, const std::string& st) {
        std::string d = dir.file(name);
        std::filesystem::create_directories(d);
        write_file(d + "/config.json", cfg);
        write_file(d + "/model.safetensors", st);
        return d;
    };
    std::string arch = config;
    arch.replace(arch.find("LlamaForCausalLM"), 16, "GPT2LMHeadModel");
    expect_convert_error(hf_dir("arch", arch, weights), tok,
                         {"architecture GPT2LMHeadModel is not supported", "LlamaForCausalLM, Qwen2ForCausalLM"});
    expect_convert_error(hf_dir("json", "{not json", weights), tok, {"config.json", "JSON"});
    // Fields of the wrong JSON type are errors naming the file and field (not a json::type_error).
    std::string bool_cfg = config;
    bool_cfg.replace(bool_cfg.find("\"mlp_bias\": false"), 17, "\"mlp_bias\": 0");
    expect_convert_error(hf_dir("booltype", bool_cfg, weights), tok,
                         {"config.json", "field \"mlp_bias\" = 0 is not true or false"});
    std::string tied_cfg = config;
    tied_cfg.replace(tied_cfg.find("\"tie_word_embeddings\": true"), 27, "\"tie_word_embeddings\": \"yes\"");
    expect_convert_error(hf_dir("tiedtype", tied_cfg, weights), tok,
                         {"config.json", "field \"tie_word_embeddings\" = \"yes\" is not true or false"});
    std::string rope_cfg = config;
    rope_cfg.replace(rope_cfg.find("\"rope_scaling\": null"), 20, "\"rope_scaling\": {\"type\": \"yarn\"}");
    expect_convert_error(hf_dir("yarn", rope_cfg, weights), tok,
                         {"config.json", "rope_scaling type 'yarn' is not supported"});
    // Named chat templates: entries of another shape are skipped (not a json::type_error).
    std::filesystem::create_directories(dir.file("templates"));
    write_file(dir.file("templates/tokenizer_config.json"),
               R"({"chat_template": [{"name": 1, "template": "x"}, {"name": "default", "template": "T"}]})");
    CHECK(hf_chat_template(dir.file("templates")) == "T");

    std::string bad = weights;
    bad[8] = '[';  // header no longer valid JSON
    bad[9] = ']';
    bad[10] = '}';
    expect_convert_error(hf_dir("stjson", config, bad), tok, {"model.safetensors", "JSON"});
    bad = weights;
    poke<uint64_t>(bad, 0, uint64_t(weights.size()));
    expect_convert_error(hf_dir("stlen", config, bad), tok, {"header length", "past the end"});
    expect_convert_error(hf_dir("sttrunc", config, weights.substr(0, weights.size() - 100)), tok,
                         {"data_offsets", "outside the data section"});
    bad = weights;
    size_t at = bad.find("\"F32\"");
    REQUIRE(at != std::string::npos);
    bad.replace(at, 5, "\"I32\"");  // same size, unsupported type (first tensor in the header)
    expect_convert_error(hf_dir("stdtype", config, bad), tok, {"dtype I32", "F32, F16, BF16"});
    std::string shape_cfg = config;
    shape_cfg.replace(shape_cfg.find("\"intermediate_size\": 172"), 24, "\"intermediate_size\": 171");
    expect_convert_error(hf_dir("shape", shape_cfg, weights), tok, {"has shape", "expected"});
    expect_convert_error(hf_dir("notok", config, weights), "", {"no tokenizer.json", "--tokenizer"});

    // GGUF variants.
    const std::string gguf = read_file(stories("stories260K.gguf"));
    auto gguf_file = [&](const std::string& name, const std::string& bytes) {
        write_file(dir.file(name), bytes);
        return dir.file(name);
    };
    bad = gguf;
    bad[1] = 'X';
    expect_convert_error(gguf_file("magic.gguf", bad), "", {"magic.gguf", "not a GGUF file"});
    expect_convert_error(gguf_file("trunc.gguf", gguf.substr(0, 5000)), "", {"trunc.gguf", "truncated"});
    expect_convert_error(gguf_file("trunc2.gguf", gguf.substr(0, gguf.size() - 1000)), "", {"past the end"});
    bad = gguf;
    at = bad.find("llama.block_count");
    REQUIRE(at != std::string::npos);
    bad[at + 6] = 'X';  // "llama.Xlock_count"
    expect_convert_error(gguf_file("keys.gguf", bad), "", {"llama.block_count", "missing"});
    bad = gguf;
    at = bad.find("blk.0.attn_q.weight");
    REQUIRE(at != std::string::npos);
    poke<uint32_t>(bad, at + 19 + 4 + 16, 9);  // ggml type F32 -> Q8_1 (smaller, still inside the file)
    expect_convert_error(gguf_file("q81.gguf", bad), "", {"blk.0.attn_q.weight", "Q8_1", "supported: F32", "IQ4_XS"});
    if (have_data(data_path("vocab-tests/ggml-vocab-llama-spm.gguf")))
        expect_convert_error(data_path("vocab-tests/ggml-vocab-llama-spm.gguf"), "", {"token_embd.weight", "missing"});

    // llama2.c checkpoints.
    const std::string bin = read_file(stories("stories260K.bin"));
    expect_convert_error(gguf_file("short.bin", bin.substr(0, 20)), tok, {"short.bin", "too short"});
    expect_convert_error(gguf_file("cut.bin", bin.substr(0, bin.size() - 4)), tok,
                         {"should be 1056540 bytes", "found 1056536"});
    expect_convert_error(stories("stories260K.bin"), "", {"no tokenizer", "--tokenizer"});
    std::string v1 = std::string(256, '\0') + bin.substr(28);
    poke<uint32_t>(v1, 0, 0x616b3432);
    poke<int32_t>(v1, 4, 3);
    expect_convert_error(gguf_file("v3.bin", v1), tok, {"version 3", "not supported"});
}

TEST_CASE("convert: llama2.c version 1 and 2 checkpoints") {
    if (!have_data(stories("stories260K.bin")) || !have_data(stories("tok512.bin"))) return;
    TempDir dir;
    const std::string bin = read_file(stories("stories260K.bin"));
    const int64_t dim = 64, hidden = 172, L = 5, kv = 32, vocab = 512;
    // Slice the legacy file (f32) into its tensors: embedding, then per kind all layers (export.py order).
    size_t pos = 28;
    auto take = [&](int64_t n) {
        std::string s = bin.substr(pos, size_t(n) * 4);
        pos += size_t(n) * 4;
        return s;
    };
    std::string embd = take(vocab * dim), attn_norm = take(L * dim), wq = take(L * dim * dim), wk = take(L * kv * dim),
                wv = take(L * kv * dim), wo = take(L * dim * dim), ffn_norm = take(L * dim),
                w1 = take(L * hidden * dim), w2 = take(L * dim * hidden), w3 = take(L * hidden * dim),
                norm = take(dim);
    std::string header(256, '\0');
    poke<uint32_t>(header, 0, 0x616b3432);
    poke<int32_t>(header, 4, 1);
    int32_t params[7] = {64, 172, 5, 8, 4, 512, 512};
    std::memcpy(&header[8], params, sizeof(params));
    header[36] = 1;  // shared classifier
    write_file(dir.file("v1.bin"), header + attn_norm + ffn_norm + norm + embd + wq + wk + wv + wo + w1 + w2 + w3);
    convert(stories("stories260K.bin"), dir.file("legacy.kvlm"), stories("tok512.bin"));
    ConvertSummary s1 = convert(dir.file("v1.bin"), dir.file("v1.kvlm"), stories("tok512.bin"));
    auto legacy = ModelFile::open(dir.file("legacy.kvlm"));
    CHECK(s1.fingerprint == legacy->fingerprint());

    // Version 2: Q8_0 with group size 64, int8 values then f32 scales per tensor (export.py version2_export).
    poke<int32_t>(header, 4, 2);
    poke<int32_t>(header, 37, 64);
    std::string body = attn_norm + ffn_norm + norm;
    std::vector<std::string> weights = {embd};  // one entry per layer and kind: each is quantized separately
    for (const std::string* all : {&wq, &wk, &wv, &wo, &w1, &w2, &w3})
        for (int64_t l = 0; l < L; l++) weights.push_back(all->substr(size_t(l) * all->size() / L, all->size() / L));
    for (const std::string& w : weights) {
        size_t n = w.size() / 4;
        std::vector<float> x(n);
        std::memcpy(x.data(), w.data(), w.size());
        std::string q(n, '\0'), scales(n / 64 * 4, '\0');
        for (size_t g = 0; g < n / 64; g++) {
            float wmax = 0;
            for (size_t j = 0; j < 64; j++) wmax = std::max(wmax, std::fabs(x[g * 64 + j]));
            float scale = wmax / 127.0f;
            std::memcpy(&scales[g * 4], &scale, 4);
            for (size_t j = 0; j < 64; j++) q[g * 64 + j] = char(int8_t(std::lround(x[g * 64 + j] / scale)));
        }
        body += q + scales;
    }
    write_file(dir.file("v2.bin"), header + body);
    ConvertSummary s2 = convert(dir.file("v2.bin"), dir.file("v2.kvlm"), stories("tok512.bin"), "f32");
    CHECK(s2.dtype == DType::f32);
    auto v2 = ModelFile::open(dir.file("v2.kvlm"));
    for (const TensorInfo& t : v2->tensors()) {
        CAPTURE(t.name);
        std::vector<float> a = to_f32(legacy->view(*legacy->find(t.name))), b = to_f32(v2->view(t));
        float max_abs = 0, max_err = 0;
        for (size_t i = 0; i < a.size(); i++) {
            max_abs = std::max(max_abs, std::fabs(a[i]));
            max_err = std::max(max_err, std::fabs(a[i] - b[i]));
        }
        if (t.shape.size() == 1) CHECK(max_err == 0.0f);
        else CHECK(max_err <= max_abs / 127.0f * 0.5001f + 1e-7f);  // half a quantization step of the largest group
    }
}

TEST_CASE("convert: command line") {
    if (!have_data(stories("stories260K.gguf")) || !have_binary()) return;
    TempDir dir;
    CliResult ok = run_kvlm({"convert", stories("stories260K.gguf"), "-o", dir.file("m.kvlm")});
    CHECK_MESSAGE(ok.exit_code == 0, ok.err);
    CHECK(ok.out.empty());
    CHECK(ok.err.find("fingerprint") != std::string::npos);
    CHECK(ok.err.find("5 layers") != std::string::npos);
    CHECK(ModelFile::open(dir.file("m.kvlm"))->fingerprint().size() > 0);

    CliResult quiet = run_kvlm({"convert", stories("stories260K.gguf"), "-o", dir.file("q.kvlm"), "--quiet"});
    CHECK(quiet.exit_code == 0);
    CHECK(quiet.err.empty());

    CliResult missing = run_kvlm({"convert", dir.file("missing.gguf"), "-o", dir.file("x.kvlm")});
    CHECK(missing.exit_code != 0);
    CHECK(missing.err.find("error:") != std::string::npos);
    CHECK(missing.err.find("missing.gguf") != std::string::npos);
    CHECK(!std::filesystem::exists(dir.file("x.kvlm")));

    CliResult no_tok = run_kvlm({"convert", stories("stories260K.bin"), "-o", dir.file("y.kvlm")});
    CHECK(no_tok.exit_code != 0);
    CHECK(no_tok.err.find("--tokenizer") != std::string::npos);
}
