// perplexity() (generate/perplexity.h) on stories260K: the estimate equals exp of the mean NLL the test computes
// itself from a separate backend's all-logits forward of each chunk (BOS first, second half scored), the
// chunk and scored-token counts follow llama-perplexity's rules, the pool ends empty, and bad arguments throw.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "engine/engine.h"
#include "generate/perplexity.h"
#include "kv/kv_pool.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

PerplexityParams chunks_of(int32_t n_ctx, int32_t max_chunks = -1) {
    PerplexityParams p;
    p.n_ctx = n_ctx;
    p.max_chunks = max_chunks;
    p.n_threads = 2;
    return p;
}

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }
std::string text_path() { return data_path("stories260K/TRAINING.md"); }  // 1873 tokens under tok512
bool have_stories() { return have_data(data_path("stories260K/stories260K.gguf")) && have_data(text_path()); }

EngineOptions cpu_engine(int32_t n_ctx) {
    EngineOptions o;
    o.device = "cpu";
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.quiet = true;
    return o;
}

std::vector<int32_t> text_tokens(const Engine& engine) {
    return engine.tokenizer().encode(read_file(text_path()), /*add_bos=*/true, /*parse_special=*/false);
}

// The test's own computation: each chunk of n_ctx tokens, its first replaced by BOS, through a fresh CPU
// backend in one all-logits call; the logits at positions p = n_ctx/2 .. n_ctx-2 score token p+1, with
// log-sum-exp in long double. Returns the NLL of every scored token, chunk by chunk.
std::vector<long double> reference_nlls(const std::string& model_path, const std::vector<int32_t>& tokens,
                                        int32_t n_ctx, int32_t n_chunks, int32_t bos) {
    auto model = ModelFile::open(model_path);
    BackendOptions options;
    options.n_threads = 1;
    options.block_size = 16;
    options.n_kv_blocks = (n_ctx + 15) / 16;
    auto backend = make_cpu_backend(*model, options);
    KvPool pool(options.n_kv_blocks, options.block_size);
    const int32_t n_vocab = model->config().n_vocab;
    std::vector<float> logits(size_t(n_ctx) * n_vocab);
    std::vector<long double> nlls;
    for (int32_t c = 0; c < n_chunks; c++) {
        std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
        chunk[0] = bos;
        BlockTable table;
        reserve_tokens(pool, table, n_ctx);
        backend->forward(chunk.data(), n_ctx, 0, table, logits.data(), /*all_logits=*/true);
        table.n_tokens = n_ctx;
        release_table(pool, table);
        for (int32_t p = n_ctx / 2; p < n_ctx - 1; p++) {
            const float* row = &logits[size_t(p) * n_vocab];
            long double sum = 0;
            for (int32_t v = 0; v < n_vocab; v++) sum += std::exp((long double)row[v]);
            nlls.push_back(std::log(sum) - (long double)row[chunk[size_t(p) + 1]]);
        }
    }
    return nlls;
}

}  // namespace

TEST_CASE("perplexity: equals exp(mean NLL) of the test's own all-logits forward, with llama-perplexity's +/-") {
    if (!have_stories()) return;
    const int32_t n_ctx = 64, n_chunks = 4;
    Engine engine(stories(), cpu_engine(n_ctx));
    REQUIRE(engine.tokenizer().data().add_bos);
    const std::vector<int32_t> tokens = text_tokens(engine);
    REQUIRE(tokens.size() > size_t(n_chunks * n_ctx));

    const PerplexityResult result = perplexity(engine, tokens, chunks_of(n_ctx, n_chunks));
    const std::vector<long double> nlls =
        reference_nlls(stories(), tokens, n_ctx, n_chunks, engine.tokenizer().bos_id());
    REQUIRE(nlls.size() == size_t(n_chunks * 31));
    REQUIRE(result.n_scored == int64_t(nlls.size()));

    long double sum = 0;
    for (long double v : nlls) sum += v;
    const long double mean = sum / nlls.size();
    long double squares = 0;  // two-pass sample variance
    for (long double v : nlls) squares += (v - mean) * (v - mean);
    const double ppl = double(std::exp(mean));
    const double error = ppl * double(std::sqrt(squares / (nlls.size() - 1) / nlls.size()));
    MESSAGE("stories260K on TRAINING.md, 4 chunks of 64: PPL " << result.ppl << " +/- " << result.ppl_error);
    CHECK(result.ppl == doctest::Approx(ppl).epsilon(1e-9));
    CHECK(result.mean_nll == doctest::Approx(double(mean)).epsilon(1e-9));
    CHECK(result.ppl_error == doctest::Approx(error).epsilon(1e-6));
    CHECK(result.ppl > 1);

    // The running estimate after chunk 1 covers chunk 1's tokens only; after the last, all of them.
    REQUIRE(result.running_ppl.size() == size_t(n_chunks));
    long double first_sum = 0;
    for (size_t i = 0; i < 31; i++) first_sum += nlls[i];
    CHECK(result.running_ppl[0] == doctest::Approx(double(std::exp(first_sum / 31))).epsilon(1e-9));
    CHECK(result.running_ppl.back() == result.ppl);
}

TEST_CASE("perplexity: chunk count, second-half scoring, BOS at each chunk start, pool left empty") {
    if (!have_stories()) return;
    Engine engine(stories(), cpu_engine(65));
    const std::vector<int32_t> tokens = text_tokens(engine);
    const int64_t n_tokens = int64_t(tokens.size());

    // Every whole chunk; an odd n_ctx scores n_ctx - n_ctx/2 - 1 = 32 of 65.
    PerplexityResult all = perplexity(engine, tokens, chunks_of(65));
    CHECK(all.n_chunks == n_tokens / 65);
    CHECK(all.n_evaluated == all.n_chunks * 65);
    CHECK(all.n_scored == all.n_chunks * 32);
    CHECK(perplexity_scored_per_chunk(512) == 255);
    CHECK(perplexity_scored_per_chunk(64) == 31);
    CHECK(engine.pool().n_used() == 0);                   // each chunk's blocks released
    CHECK(engine.prefix_cache().stats().n_indexed == 0);  // and never indexed

    // --chunks caps the count; the tokens after the last evaluated chunk play no part.
    std::vector<int32_t> progress_seen;
    PerplexityResult two = perplexity(engine, tokens, chunks_of(65, 2), [&](int32_t done, int32_t total, double ppl) {
        CHECK(total == 2);
        CHECK(ppl > 1);
        progress_seen.push_back(done);
    });
    CHECK(progress_seen == std::vector<int32_t>{1, 2});
    CHECK(two.n_chunks == 2);
    CHECK(two.n_scored == 64);
    PerplexityParams one_thread = chunks_of(65, 2);
    one_thread.n_threads = 1;
    CHECK(perplexity(engine, tokens, one_thread).ppl == two.ppl);  // sums in token order, whatever the threads
    std::vector<int32_t> exactly(tokens.begin(), tokens.begin() + 2 * 65);
    CHECK(perplexity(engine, exactly, chunks_of(65)).ppl == two.ppl);
    CHECK(perplexity(engine, exactly, chunks_of(65, 5)).n_chunks == 2);  // a larger cap takes what there is

    // Only the second half is scored: a changed target in it changes the estimate, a changed first-half token
    // is context only (it still changes it, through attention), and the first token of each chunk is BOS
    // whatever the text holds there.
    const int32_t other = tokens[40] == 100 ? 101 : 100;
    std::vector<int32_t> changed = exactly;
    changed[65] = other;  // chunk 2's first token: replaced by BOS anyway
    CHECK(perplexity(engine, changed, chunks_of(65)).ppl == two.ppl);
    changed = exactly;
    changed[64] = other;  // chunk 1's last token: scored
    CHECK(perplexity(engine, changed, chunks_of(65)).ppl != two.ppl);
}

TEST_CASE("perplexity: bad arguments throw before any work, naming what would do") {
    if (!have_stories()) return;
    Engine engine(stories(), cpu_engine(64));
    const std::vector<int32_t> tokens = text_tokens(engine);
    auto message = [&](const std::vector<int32_t>& t, int32_t n_ctx, int32_t max_chunks) -> std::string {
        try {
            perplexity(engine, t, chunks_of(n_ctx, max_chunks));
        } catch (const Error& e) {
            return e.what();
        }
        return "(no error)";
    };
    CHECK(contains(message(tokens, 2, -1), "-c: 2 is too small"));
    CHECK(contains(message(tokens, 128, -1), "larger than the engine's context of 64"));
    CHECK(contains(message(tokens, 64, 0), "--chunks: 0"));
    CHECK(contains(message(tokens, 64, -2), "--chunks: -2"));
    std::vector<int32_t> short_text(tokens.begin(), tokens.begin() + 100);
    CHECK(contains(message(short_text, 64, -1), "the text is 100 tokens, too short for -c 64"));
    CHECK(contains(message(short_text, 64, -1), "-c 50 or less would do"));
    CHECK(contains(message({1, 2, 3, 4, 5}, 3, -1), "give a text of at least 6 tokens"));
    std::vector<int32_t> bad_id = tokens;
    bad_id[10] = 512;
    CHECK(contains(message(bad_id, 64, -1), "token id 512 is outside the vocabulary"));
    CHECK(engine.pool().n_used() == 0);
}
