// CPU backend: a double-precision reference forward on random models, the bit-identity invariants
// (batching, block size, block order, threads, SIMD), KV block I/O, bad-input errors, and the
// stories260K golden (read straight from llama2.c's checkpoint, independent of the converters).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "compute/cpu_backend.h"
#include "compute/cpu_ops.h"
#include "format/model_file.h"
#include "support/random_model.h"
#include "support/test_util.h"
#include "support/tiny_model.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::vector<float> to_f32(const TensorView& view) {
    std::vector<float> out(size_t(view.n_elements()));
    convert_to_f32(view.dtype, view.data, out.data(), out.size());
    return out;
}

// Straightforward double-precision forward pass (contiguous KV): logits [n_tokens][n_vocab].
std::vector<std::vector<double>> reference_forward(const ModelConfig& c, const ModelWeights& w,
                                                   const std::vector<int32_t>& tokens) {
    const int d = c.n_embd, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, ff = c.n_ff, half = hd / 2;
    auto linear = [](const std::vector<float>& m, const std::vector<double>& x, int rows, int cols) {
        std::vector<double> y(size_t(rows), 0.0);
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < cols; i++) y[size_t(r)] += double(m[size_t(r) * size_t(cols) + size_t(i)]) * x[size_t(i)];
        return y;
    };
    auto rmsnorm = [&](const std::vector<double>& x, const std::vector<float>& g) {
        double ss = 0;
        for (double v : x) ss += v * v;
        double s = 1.0 / std::sqrt(ss / d + c.norm_eps);
        std::vector<double> y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = g[i] * x[i] * s;
        return y;
    };
    auto rope = [&](std::vector<double>& v, int n_heads, int pos) {
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < half; i++) {
                double angle = pos * std::pow(double(c.rope_theta), -2.0 * i / hd);
                double x0 = v[size_t(h * hd + i)], x1 = v[size_t(h * hd + i + half)];
                v[size_t(h * hd + i)] = x0 * std::cos(angle) - x1 * std::sin(angle);
                v[size_t(h * hd + i + half)] = x0 * std::sin(angle) + x1 * std::cos(angle);
            }
    };
    std::vector<float> embd = to_f32(w.token_embd), out_w = to_f32(w.output), out_norm = to_f32(w.output_norm);
    struct L { std::vector<float> an, q, k, v, qb, kb, vb, o, fn, g, u, dn; };
    std::vector<L> layers;
    for (const auto& lw : w.layers) {
        L l{to_f32(lw.attn_norm), to_f32(lw.attn_q), to_f32(lw.attn_k), to_f32(lw.attn_v), {}, {}, {},
            to_f32(lw.attn_output), to_f32(lw.ffn_norm), to_f32(lw.ffn_gate), to_f32(lw.ffn_up), to_f32(lw.ffn_down)};
        if (c.qkv_bias) l.qb = to_f32(lw.attn_q_bias), l.kb = to_f32(lw.attn_k_bias), l.vb = to_f32(lw.attn_v_bias);
        layers.push_back(std::move(l));
    }
    std::vector<std::vector<std::vector<double>>> kcache(layers.size()), vcache(layers.size());
    std::vector<std::vector<double>> all_logits;
    for (size_t pos = 0; pos < tokens.size(); pos++) {
        std::vector<double> x(embd.begin() + tokens[pos] * d, embd.begin() + (tokens[pos] + 1) * d);
        for (size_t li = 0; li < layers.size(); li++) {
            const L& l = layers[li];
            std::vector<double> h = rmsnorm(x, l.an);
            std::vector<double> q = linear(l.q, h, nh * hd, d), k = linear(l.k, h, nkv * hd, d), v = linear(l.v, h, nkv * hd, d);
            if (c.qkv_bias) {
                for (size_t i = 0; i < q.size(); i++) q[i] += l.qb[i];
                for (size_t i = 0; i < k.size(); i++) k[i] += l.kb[i], v[i] += l.vb[i];
            }
            rope(q, nh, int(pos));
            rope(k, nkv, int(pos));
            kcache[li].push_back(k);
            vcache[li].push_back(v);
            std::vector<double> att(size_t(nh * hd), 0.0);
            for (int hh = 0; hh < nh; hh++) {
                int kvh = hh / (nh / nkv);
                std::vector<double> s(pos + 1);
                double mx = -1e300, sum = 0;
                for (size_t j = 0; j <= pos; j++) {
                    double dot = 0;
                    for (int i = 0; i < hd; i++) dot += q[size_t(hh * hd + i)] * kcache[li][j][size_t(kvh * hd + i)];
                    s[j] = dot / std::sqrt(double(hd));
                    mx = std::max(mx, s[j]);
                }
                for (auto& e : s) sum += (e = std::exp(e - mx));
                for (size_t j = 0; j <= pos; j++)
                    for (int i = 0; i < hd; i++) att[size_t(hh * hd + i)] += s[j] / sum * vcache[li][j][size_t(kvh * hd + i)];
            }
            std::vector<double> o = linear(l.o, att, d, nh * hd);
            for (int i = 0; i < d; i++) x[size_t(i)] += o[size_t(i)];
            h = rmsnorm(x, l.fn);
            std::vector<double> g = linear(l.g, h, ff, d), u = linear(l.u, h, ff, d);
            for (int i = 0; i < ff; i++) g[size_t(i)] = g[size_t(i)] / (1 + std::exp(-g[size_t(i)])) * u[size_t(i)];
            std::vector<double> down = linear(l.dn, g, d, ff);
            for (int i = 0; i < d; i++) x[size_t(i)] += down[size_t(i)];
        }
        all_logits.push_back(linear(out_w, rmsnorm(x, out_norm), c.n_vocab, d));
    }
    return all_logits;
}

std::vector<int32_t> random_tokens(int32_t n, int32_t n_vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = int32_t(rng() % uint64_t(n_vocab));
    return tokens;
}

struct RunSpec {
    int32_t block_size = 16;
    int32_t n_threads = 1;
    DType kv_dtype = DType::f32;
    bool shuffle_blocks = false;
    std::vector<int32_t> splits;  // sizes of successive forward calls; empty = one call
};

// Runs `tokens` through a fresh backend in the given pieces; returns logits for every token
// ([n_tokens * n_vocab]), taking the last-token-only path for single-token pieces.
std::vector<float> run_tokens(const RandomModel& m, const std::vector<int32_t>& tokens, const RunSpec& spec) {
    BackendOptions options;
    options.block_size = spec.block_size;
    options.n_threads = spec.n_threads;
    options.kv_dtype = spec.kv_dtype;
    const int32_t n = int32_t(tokens.size()), n_vocab = m.config.n_vocab;
    const int32_t n_table = (n + spec.block_size - 1) / spec.block_size;
    options.n_kv_blocks = n_table + 5;
    auto backend = make_cpu_backend(m.config, m.weights, options);
    BlockTable table;
    table.blocks.resize(static_cast<size_t>(options.n_kv_blocks));
    std::iota(table.blocks.begin(), table.blocks.end(), 0);
    if (spec.shuffle_blocks) std::shuffle(table.blocks.begin(), table.blocks.end(), std::mt19937(7));
    table.blocks.resize(size_t(n_table));
    std::vector<int32_t> splits = spec.splits.empty() ? std::vector<int32_t>{n} : spec.splits;
    std::vector<float> logits(size_t(n) * size_t(n_vocab));
    int32_t pos = 0;
    for (int32_t piece : splits) {
        REQUIRE(pos + piece <= n);
        backend->forward(tokens.data() + pos, piece, pos, table, logits.data() + size_t(pos) * size_t(n_vocab),
                         piece > 1);
        pos += piece;
        table.n_tokens = pos;
    }
    REQUIRE(pos == n);
    return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Variant {
    const char* name;
    DType dtype;
    bool qkv_bias;
    bool tied;
    bool wide = false;  // n_embd 256, n_ff 512: rows of whole 256-element super-blocks (the k-quants, iq4_xs)
};
const Variant kVariants[] = {{"f32", DType::f32, false, false},        {"f32 qkv_bias", DType::f32, true, false},
                             {"f16 tied", DType::f16, false, true},     {"bf16 qkv_bias", DType::bf16, true, false},
                             {"q8_0 tied", DType::q8_0, false, true},   {"q4_0", DType::q4_0, false, false},
                             {"q4_1 qkv_bias", DType::q4_1, true, false},
                             {"q5_0", DType::q5_0, false, false},       {"q5_1 tied", DType::q5_1, false, true},
                             {"iq4_nl qkv_bias", DType::iq4_nl, true, false},
                             {"q2_k", DType::q2_k, false, false, true}, {"q3_k tied", DType::q3_k, false, true, true},
                             {"q4_k", DType::q4_k, false, false, true}, {"q5_k qkv_bias", DType::q5_k, true, false, true},
                             {"q6_k tied", DType::q6_k, false, true, true}, {"iq4_xs", DType::iq4_xs, false, false, true}};

std::unique_ptr<RandomModel> variant_model(const Variant& v) {
    ModelConfig c = small_random_config();
    c.qkv_bias = v.qkv_bias;
    c.tied_embeddings = v.tied;
    if (v.qkv_bias) c.architecture = "qwen2";
    if (v.wide) c.n_embd = 256, c.head_dim = 64, c.n_ff = 512;
    return make_random_model(c, v.dtype, 42);
}

}  // namespace

TEST_CASE("cpu_backend: logits match a double-precision reference forward") {
    for (const Variant& v : kVariants) {
        CAPTURE(v.name);
        auto m = variant_model(v);
        std::vector<int32_t> tokens = random_tokens(21, m->config.n_vocab, 3);
        std::vector<float> got = run_tokens(*m, tokens, RunSpec{});
        auto want = reference_forward(m->config, m->weights, tokens);
        double max_err = 0, max_ref = 0;
        for (size_t t = 0; t < tokens.size(); t++)
            for (int32_t i = 0; i < m->config.n_vocab; i++) {
                double ref = want[t][size_t(i)];
                max_err = std::max(max_err, std::fabs(ref - got[t * size_t(m->config.n_vocab) + size_t(i)]));
                max_ref = std::max(max_ref, std::fabs(ref));
            }
        CHECK(max_ref > 0.1);  // the test model produces non-trivial logits
        // Quantized weights: the reference uses the same (dequantized) weights, but the CPU quantizes each
        // activation row to 16 bits per 32-block (a relative error of ~1/65534 per element).
        CHECK(max_err < (dtype_is_quantized(v.dtype) ? 1e-3 : 1e-4));
    }
}

TEST_CASE("cpu_backend: bit-identical logits for any batching, block size, block order, threads and SIMD") {
    for (const Variant& v : kVariants) {
        CAPTURE(v.name);
        auto m = variant_model(v);
        const int32_t n = 40;
        std::vector<int32_t> tokens = random_tokens(n, m->config.n_vocab, 5);
        const std::vector<float> base = run_tokens(*m, tokens, RunSpec{});

        RunSpec last_decoded;  // prefill(n-1) + decode(1)
        last_decoded.splits = std::vector<int32_t>{n - 1, 1};
        CHECK(same_bits(base, run_tokens(*m, tokens, last_decoded)));

        RunSpec one_by_one;
        one_by_one.splits.assign(size_t(n), 1);
        CHECK(same_bits(base, run_tokens(*m, tokens, one_by_one)));

        RunSpec uneven;
        uneven.splits = std::vector<int32_t>{7, 1, 16, 3, 13};
        CHECK(same_bits(base, run_tokens(*m, tokens, uneven)));

        for (int32_t block_size : {1, 64}) {
            RunSpec spec;
            spec.block_size = block_size;
            CAPTURE(block_size);
            CHECK(same_bits(base, run_tokens(*m, tokens, spec)));
        }
        RunSpec shuffled;
        shuffled.block_size = 4;
        shuffled.shuffle_blocks = true;
        shuffled.splits = std::vector<int32_t>{11, 1, 28};
        CHECK(same_bits(base, run_tokens(*m, tokens, shuffled)));

        for (int32_t n_threads : {2, 3}) {
            RunSpec spec;
            spec.n_threads = n_threads;
            spec.splits = std::vector<int32_t>{30, 1, 9};
            CAPTURE(n_threads);
            CHECK(same_bits(base, run_tokens(*m, tokens, spec)));
        }
        for_each_cpu_path([&](CpuPath path) {
            CAPTURE(cpu_path_name(path));
            CHECK(same_bits(base, run_tokens(*m, tokens, uneven)));
        });
    }
}

TEST_CASE("cpu_backend: f16/bf16 KV caches are deterministic and close to f32") {
    auto m = variant_model(kVariants[0]);
    std::vector<int32_t> tokens = random_tokens(24, m->config.n_vocab, 9);
    std::vector<float> f32_kv = run_tokens(*m, tokens, RunSpec{});
    for (DType kv_dtype : {DType::f16, DType::bf16}) {
        CAPTURE(dtype_name(kv_dtype));
        RunSpec batch, split;
        batch.kv_dtype = split.kv_dtype = kv_dtype;
        split.splits = std::vector<int32_t>{10, 1, 1, 12};
        split.block_size = 3;
        split.shuffle_blocks = true;
        std::vector<float> a = run_tokens(*m, tokens, batch), b = run_tokens(*m, tokens, split);
        CHECK(same_bits(a, b));
        CHECK_FALSE(same_bits(a, f32_kv));  // the cache really is stored in the narrow type
        double max_err = 0;
        for (size_t i = 0; i < a.size(); i++) max_err = std::max(max_err, double(std::fabs(a[i] - f32_kv[i])));
        CHECK(max_err < 0.05);
    }
}

TEST_CASE("cpu_backend: forward_sequences gives every sequence the bits of forward() of it alone") {
    for (const Variant& v : kVariants) {
        CAPTURE(v.name);
        auto m = variant_model(v);
        const int32_t n_vocab = m->config.n_vocab, block_size = 8;
        BackendOptions options;
        options.block_size = block_size;
        options.n_threads = 2;
        options.n_kv_blocks = 64;
        // Three sequences in their own blocks: a prompt of 13 tokens so far with 1 new (decode), one of 5
        // with 4 new and all logits, one of 0 with 20 new (a prefill).
        struct Seq {
            std::vector<int32_t> tokens;
            int32_t n_done;
            bool all_logits;
        };
        const std::vector<Seq> seqs = {{random_tokens(14, n_vocab, 1), 13, false},
                                       {random_tokens(9, n_vocab, 2), 5, true},
                                       {random_tokens(20, n_vocab, 3), 0, false}};
        auto run = [&](bool together) {
            auto backend = make_cpu_backend(m->config, m->weights, options);
            std::vector<BlockTable> tables(seqs.size());
            std::vector<std::vector<float>> logits(seqs.size());
            for (size_t i = 0; i < seqs.size(); i++) {
                for (int32_t b = 0; b < 3; b++) tables[i].blocks.push_back(int32_t(40 - 10 * i - b));  // shuffled
                const Seq& s = seqs[i];
                if (s.n_done > 0) {
                    std::vector<float> ignored(static_cast<size_t>(n_vocab), 0.0f);
                    backend->forward(s.tokens.data(), s.n_done, 0, tables[i], ignored.data());
                }
                const int32_t n_new = int32_t(s.tokens.size()) - s.n_done;
                logits[i].resize(size_t(s.all_logits ? n_new : 1) * size_t(n_vocab));
            }
            std::vector<Backend::SequenceInput> inputs;
            for (size_t i = 0; i < seqs.size(); i++) {
                const Seq& s = seqs[i];
                Backend::SequenceInput in;
                in.tokens = s.tokens.data() + s.n_done;
                in.n_tokens = int32_t(s.tokens.size()) - s.n_done;
                in.pos = s.n_done;
                in.table = &tables[i];
                in.logits = logits[i].data();
                in.all_logits = s.all_logits;
                inputs.push_back(in);
            }
            if (together) backend->forward_sequences(inputs.data(), inputs.size());
            else
                for (const Backend::SequenceInput& in : inputs)
                    backend->forward(in.tokens, in.n_tokens, in.pos, *in.table, in.logits, in.all_logits);
            return logits;
        };
        const auto alone = run(false), together = run(true);
        for (size_t i = 0; i < seqs.size(); i++) {
            CAPTURE(i);
            CHECK(same_bits(alone[i], together[i]));
        }
    }
}

TEST_CASE("cpu_backend: prompts longer than one batch go through in chunks with identical results") {
    auto m = variant_model(kVariants[0]);
    const int32_t n = kCpuMaxBatch + 77;
    std::vector<int32_t> tokens = random_tokens(n, m->config.n_vocab, 13);
    RunSpec whole, pieces;
    pieces.splits = std::vector<int32_t>{200, 1, n - 201};
    std::vector<float> a = run_tokens(*m, tokens, whole), b = run_tokens(*m, tokens, pieces);
    CHECK(same_bits(a, b));
    // The last-token-only path gives the same last row.
    BackendOptions options;
    options.n_kv_blocks = (n + 15) / 16;
    auto backend = make_cpu_backend(m->config, m->weights, options);
    BlockTable table;
    table.blocks.resize(size_t(options.n_kv_blocks));
    std::iota(table.blocks.begin(), table.blocks.end(), 0);
    std::vector<float> last(size_t(m->config.n_vocab));
    backend->forward(tokens.data(), n, 0, table, last.data());
    CHECK(std::memcmp(last.data(), a.data() + size_t(n - 1) * last.size(), last.size() * sizeof(float)) == 0);
}

TEST_CASE("cpu_backend: KV blocks read, written and copied elsewhere continue the same sequence") {
    auto m = variant_model(kVariants[1]);
    const int32_t n_vocab = m->config.n_vocab;
    std::vector<int32_t> tokens = random_tokens(30, n_vocab, 17);
    BackendOptions options;
    options.block_size = 8;
    options.n_kv_blocks = 16;
    auto a = make_cpu_backend(m->config, m->weights, options);
    auto b = make_cpu_backend(m->config, m->weights, options);
    CHECK(a->kv_block_bytes() == size_t(2 * 2 * 8 * 2 * 16) * sizeof(float));

    BlockTable table_a;
    table_a.blocks = std::vector<int32_t>{0, 1, 2, 3};
    std::vector<float> logits(static_cast<size_t>(n_vocab)), expected(logits.size()), got(logits.size());
    a->forward(tokens.data(), 29, 0, table_a, logits.data());

    // Save blocks 0..3 of backend a, restore them into blocks 12, 9, 15, 10 of backend b.
    BlockTable table_b;
    table_b.blocks = std::vector<int32_t>{12, 9, 15, 10};
    std::vector<uint8_t> record(a->kv_block_bytes());
    for (size_t i = 0; i < 4; i++) {
        a->read_kv_block(table_a.blocks[i], record.data());
        b->write_kv_block(table_b.blocks[i], record.data());
    }
    // Copy within backend a to blocks 7, 5, 6, 4.
    BlockTable table_copy;
    table_copy.blocks = std::vector<int32_t>{7, 5, 6, 4};
    for (size_t i = 0; i < 4; i++) a->copy_kv_block(table_a.blocks[i], table_copy.blocks[i]);

    a->forward(&tokens[29], 1, 29, table_a, expected.data());
    b->forward(&tokens[29], 1, 29, table_b, got.data());
    CHECK(std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)) == 0);
    a->forward(&tokens[29], 1, 29, table_copy, got.data());
    CHECK(std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)) == 0);

    // A different history gives different logits (the restored cache is really what is read).
    BlockTable fresh;
    fresh.blocks = std::vector<int32_t>{11, 13, 14, 8};
    b->forward(&tokens[29], 1, 29, fresh, got.data());
    CHECK(std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)) != 0);

    CHECK_THROWS_AS(a->read_kv_block(16, record.data()), Error);
    CHECK_THROWS_AS(a->write_kv_block(-1, record.data()), Error);
    CHECK_THROWS_AS(a->copy_kv_block(0, 99), Error);
}

TEST_CASE("cpu_backend: bad forward arguments throw Error") {
    auto m = variant_model(kVariants[0]);
    BackendOptions options;
    options.block_size = 4;
    options.n_kv_blocks = 4;
    auto backend = make_cpu_backend(m->config, m->weights, options);
    std::vector<float> logits(size_t(m->config.n_vocab));
    BlockTable table;
    table.blocks = std::vector<int32_t>{0, 1};
    int32_t tokens[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK_THROWS_WITH_AS(backend->forward(tokens, 9, 0, table, logits.data()), doctest::Contains("block table holds 8"),
                         Error);
    int32_t bad_token = m->config.n_vocab;
    CHECK_THROWS_WITH_AS(backend->forward(&bad_token, 1, 0, table, logits.data()), doctest::Contains("out of range"),
                         Error);
    table.blocks = std::vector<int32_t>{0, 4};
    CHECK_THROWS_AS(backend->forward(tokens, 6, 0, table, logits.data()), Error);
    CHECK_THROWS_AS(backend->forward(tokens, 0, 0, table, logits.data()), Error);

    ModelWeights broken = m->weights;
    broken.layers[1].ffn_up.shape = {1, 1};
    CHECK_THROWS_WITH_AS(make_cpu_backend(m->config, broken, options), doctest::Contains("blk.1.ffn_up.weight"), Error);
}

TEST_CASE("backend: a KV pool that does not fit names the options that shrink it") {
    ModelConfig config;
    config.head_dim = 64;
    BackendOptions options;
    options.kv_dtype = DType::f32;
    CHECK(kv_pool_advice(config, options) == "lower --ctx-size (-c), or halve it with --kv-dtype f16");
    options.kv_blocks_from_mem_size = true;  // --kv-mem SIZE
    CHECK(kv_pool_advice(config, options) == "lower --kv-mem or --ctx-size (-c), or halve it with --kv-dtype f16");
    options.kv_dtype = DType::bf16;
    CHECK(kv_pool_advice(config, options) == "lower --kv-mem or --ctx-size (-c), or halve it with --kv-dtype q8_0");
    options.kv_dtype = DType::q8_0;
    CHECK(kv_pool_advice(config, options) == "lower --kv-mem or --ctx-size (-c)");
    options.kv_blocks_from_mem_size = false;  // sized from the context, or --kv-mem N% (never below it)
    CHECK(kv_pool_advice(config, options) == "lower --ctx-size (-c)");
    config.head_dim = 8;  // no whole q8_0 blocks per head
    options.kv_dtype = DType::f16;
    CHECK(kv_pool_advice(config, options) == "lower --ctx-size (-c)");
}

TEST_CASE("cpu_backend: a model written to .kvlm and opened gives the same logits as in memory") {
    auto m = variant_model(kVariants[3]);  // bf16 with qkv bias
    TempDir dir;
    std::string path = dir.file("random.kvlm");
    write_random_model(*m, DType::bf16, path);
    auto file = ModelFile::open(path);
    std::vector<int32_t> tokens = random_tokens(12, m->config.n_vocab, 21);
    BackendOptions options;
    options.n_kv_blocks = 1;
    auto backend = make_cpu_backend(*file, options);
    CHECK(backend->config().n_layers == m->config.n_layers);
    BlockTable table;
    table.blocks = std::vector<int32_t>{0};
    std::vector<float> logits(tokens.size() * size_t(m->config.n_vocab));
    backend->forward(tokens.data(), int32_t(tokens.size()), 0, table, logits.data(), true);
    CHECK(same_bits(logits, run_tokens(*m, tokens, RunSpec{})));
}

namespace {

// stories260K from llama2.c's checkpoint: header of 7 int32, then f32 tensors in llama2.c order. q/k rows
// are permuted from llama2.c's interleaved RoPE pairs to the rotate_half order the backend expects.
std::unique_ptr<RandomModel> load_llama2c(const std::string& path) {
    std::string bytes = read_file(path);
    REQUIRE(bytes.size() > 28);
    int32_t header[7];
    std::memcpy(header, bytes.data(), sizeof(header));
    auto m = std::make_unique<RandomModel>();
    ModelConfig& c = m->config;
    c.n_embd = header[0];
    c.n_ff = header[1];
    c.n_layers = header[2];
    c.n_heads = header[3];
    c.n_kv_heads = header[4];
    c.n_vocab = std::abs(header[5]);
    c.n_ctx = header[6];
    c.head_dim = c.n_embd / c.n_heads;
    c.tied_embeddings = header[5] > 0;
    REQUIRE(c.tied_embeddings);
    const float* data = reinterpret_cast<const float*>(bytes.data() + 28);
    size_t offset = 0, total = (bytes.size() - 28) / 4;
    auto take = [&](std::vector<int64_t> shape, int64_t count = 1) {
        std::vector<TensorView> views;
        for (int64_t i = 0; i < count; i++) {
            TensorView view;
            view.shape = shape;
            size_t n = size_t(view.n_elements());
            REQUIRE(offset + n <= total);
            m->storage.emplace_back(n * 4);
            std::memcpy(m->storage.back().data(), data + offset, n * 4);
            view.data = m->storage.back().data();
            offset += n;
            views.push_back(view);
        }
        return views;
    };
    auto permute = [&](TensorView& view) {  // rows (2i, 2i+1) of each head -> (i, i + head_dim/2)
        auto* w = static_cast<float*>(const_cast<void*>(view.data));
        int64_t rows = view.shape[0], cols = view.shape[1], hd = c.head_dim;
        std::vector<float> copy(w, w + rows * cols);
        for (int64_t r = 0; r < rows; r++) {
            int64_t head = r / hd, i = r % hd;
            int64_t src = head * hd + (i < hd / 2 ? 2 * i : 2 * (i - hd / 2) + 1);
            std::memcpy(w + r * cols, copy.data() + src * cols, size_t(cols) * 4);
        }
    };
    int64_t d = c.n_embd, L = c.n_layers, q = int64_t(c.n_heads) * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim;
    ModelWeights& w = m->weights;
    w.token_embd = take({c.n_vocab, d})[0];
    w.layers.resize(size_t(L));
    auto attn_norm = take({d}, L), wq = take({q, d}, L), wk = take({kv, d}, L), wv = take({kv, d}, L),
         wo = take({d, q}, L), ffn_norm = take({d}, L), w1 = take({c.n_ff, d}, L), w2 = take({d, c.n_ff}, L),
         w3 = take({c.n_ff, d}, L);
    for (size_t i = 0; i < size_t(L); i++) {
        LayerWeights& l = w.layers[i];
        l.attn_norm = attn_norm[i], l.attn_q = wq[i], l.attn_k = wk[i], l.attn_v = wv[i], l.attn_output = wo[i];
        l.ffn_norm = ffn_norm[i], l.ffn_gate = w1[i], l.ffn_down = w2[i], l.ffn_up = w3[i];
        permute(l.attn_q);
        permute(l.attn_k);
    }
    w.output_norm = take({d})[0];
    w.output = w.token_embd;
    return m;
}

}  // namespace

TEST_CASE("cpu_backend: stories260K greedy matches the float64 reference (200 tokens, logits within 1e-4)") {
    std::string bin = data_path("stories260K/stories260K.bin"), ref = data_path("stories260K/reference_greedy_f32.json");
    if (!have_data(bin) || !have_data(ref)) return;
    auto m = load_llama2c(bin);
    nlohmann::json golden = nlohmann::json::parse(read_file(ref));
    std::vector<int32_t> want_ids = golden["greedy_token_ids"].get<std::vector<int32_t>>();
    auto want_logits = golden["logits_first_4_positions"].get<std::vector<std::vector<double>>>();
    REQUIRE(want_ids.size() == 200);

    BackendOptions options;
    options.n_threads = 2;
    options.n_kv_blocks = 512 / 16;
    auto backend = make_cpu_backend(m->config, m->weights, options);
    BlockTable table;
    table.blocks.resize(size_t(options.n_kv_blocks));
    std::iota(table.blocks.begin(), table.blocks.end(), 0);
    std::vector<float> logits(size_t(m->config.n_vocab));
    int32_t token = 1;  // BOS
    std::vector<int32_t> got_ids;
    for (int32_t pos = 0; pos < 200; pos++) {
        backend->forward(&token, 1, pos, table, logits.data());
        if (pos < 4) {
            double max_err = 0;
            for (size_t i = 0; i < logits.size(); i++)
                max_err = std::max(max_err, std::fabs(double(logits[i]) - want_logits[size_t(pos)][i]));
            CAPTURE(pos);
            CHECK(max_err < 1e-4);
        }
        token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        got_ids.push_back(token);
    }
    CHECK(got_ids == want_ids);
}
