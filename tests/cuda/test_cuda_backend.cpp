// CUDA backend vs CPU backend: logits of whole forward passes on random in-memory models (f32 tight,
// f16/bf16 weights and KV caches loose) through prefill, chunked prefill and decode over shuffled block
// tables; KV block bytes round trip and move between backends; stories260K from its GGUF; bad input.
// Without a usable device (or in CUDA=0 builds) each case says "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

#include "compute/backend.h"
#include "compute/cpu_backend.h"
#include "format/model_file.h"
#include "generate/perplexity.h"
#include "generate/sampler.h"
#include "support/cuda_kernel_checks.h"
#include "support/random_model.h"
#include "support/test_util.h"
#include "util/error.h"

#ifdef KVLM_CUDA
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/cuda_settings.h"
#include "cuda/testing/cuda_test_api.h"
#endif

using namespace kvlm;
using namespace kvlm::test;

#ifndef KVLM_CUDA

TEST_CASE("cuda backend: parity with the CPU backend") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
    std::string why;
    CHECK_FALSE(cuda_available(&why));
}

#else

namespace {

struct Pair {
    std::unique_ptr<Backend> cpu, cuda;
    BlockTable table;
};

// Both backends over the same options and the same shuffled block table of n_tokens tokens.
Pair make_pair(const ModelConfig& config, const ModelWeights& weights, int32_t block_size, DType kv_dtype,
               int32_t n_tokens) {
    BackendOptions options;
    options.block_size = block_size;
    options.kv_dtype = kv_dtype;
    int32_t n_table = (n_tokens + block_size - 1) / block_size;
    options.n_kv_blocks = n_table + 7;
    Pair p;
    p.cpu = make_cpu_backend(config, weights, options);
    p.cuda = make_cuda_backend(config, weights, options);
    p.table.blocks.resize(static_cast<size_t>(options.n_kv_blocks));
    std::iota(p.table.blocks.begin(), p.table.blocks.end(), 0);
    std::shuffle(p.table.blocks.begin(), p.table.blocks.end(), std::mt19937(5));
    p.table.blocks.resize(static_cast<size_t>(n_table));
    return p;
}

// Prefill `n_prefill` tokens (all logits), then decode the rest one by one; compares every step.
void compare_run(const RandomModel& m, DType kv_dtype, int32_t block_size, int32_t n_prefill, int32_t n_total,
                 float tol, const std::string& what) {
    const int32_t n_vocab = m.config.n_vocab;
    Pair p = make_pair(m.config, m.weights, block_size, kv_dtype, n_total);
    auto tokens = random_tokens(n_total, n_vocab, 3);
    std::vector<float> cpu(size_t(n_prefill) * n_vocab), gpu(cpu.size());
    p.cpu->forward(tokens.data(), n_prefill, 0, p.table, cpu.data(), true);
    p.cuda->forward(tokens.data(), n_prefill, 0, p.table, gpu.data(), true);
    check_close(gpu, cpu, tol, tol, what + ": prefill");
    cpu.resize(size_t(n_vocab)), gpu.resize(size_t(n_vocab));
    for (int32_t pos = n_prefill; pos < n_total; pos++) {
        p.cpu->forward(&tokens[size_t(pos)], 1, pos, p.table, cpu.data());
        p.cuda->forward(&tokens[size_t(pos)], 1, pos, p.table, gpu.data());
        check_close(gpu, cpu, tol, tol, what + ": decode at " + std::to_string(pos));
    }
}

// Prefills `history` on p's and q's CUDA backends (logits into a and b) and picks the first token from b with
// `picker`; `other` takes the same draw, so that the two samplers' generators stay in step.
int32_t prefill_both(Pair& p, Pair& q, const std::vector<int32_t>& history, Sampler& picker, Sampler& other,
                     std::vector<float>& a, std::vector<float>& b) {
    const int32_t n_vocab = int32_t(a.size());
    p.cuda->forward(history.data(), int32_t(history.size()), 0, p.table, a.data());
    q.cuda->forward(history.data(), int32_t(history.size()), 0, q.table, b.data());
    const int32_t token = picker.sample(b.data(), n_vocab, history);
    other.draw(n_vocab);
    return token;
}

}  // namespace

TEST_CASE("cuda backend: logits match the CPU backend on random models") {
    if (!have_cuda()) return;
    ModelConfig small = small_random_config();
    ModelConfig gqa8 = small;  // head_dim 128 would need n_embd >= 128: GQA 8 with bias and llama3 RoPE instead
    gqa8.n_heads = 8, gqa8.n_kv_heads = 1, gqa8.head_dim = 16, gqa8.qkv_bias = true;
    gqa8.rope_scaling.type = "llama3", gqa8.rope_scaling.factor = 8.0f, gqa8.rope_theta = 500000.0f;
    ModelConfig wide = small;
    wide.n_embd = 256, wide.n_heads = 4, wide.n_kv_heads = 2, wide.head_dim = 128, wide.n_ff = 320;
    struct Case { const char* name; const ModelConfig* config; DType weights, kv; int32_t block_size; float tol; };
    const Case kCases[] = {
        {"f32", &small, DType::f32, DType::f32, 16, 1e-4f},
        {"f32 block_size 3", &small, DType::f32, DType::f32, 3, 1e-4f},
        {"f32 gqa8 bias llama3", &gqa8, DType::f32, DType::f32, 4, 1e-4f},
        {"f32 head_dim 128", &wide, DType::f32, DType::f32, 16, 1e-4f},
        {"f32 weights, bf16 kv", &small, DType::f32, DType::bf16, 16, 2e-2f},
        {"bf16 weights, f16 kv", &small, DType::bf16, DType::f16, 8, 3e-2f},
        {"f16 weights", &wide, DType::f16, DType::f32, 16, 1e-2f},
        // q8_0 KV: GPU and CPU quantize alike, but a K value that differs in its last bits may round to the
        // neighbouring step; prefill stages the cache as f16 on tensor cores.
        {"f32 weights, q8_0 kv, head_dim 128", &wide, DType::f32, DType::q8_0, 16, 3e-2f},
        {"bf16 weights, q8_0 kv, block_size 5", &wide, DType::bf16, DType::q8_0, 5, 3e-2f},
    };
    for (const Case& c : kCases) {
        auto m = make_random_model(*c.config, c.weights, 42);
        compare_run(*m, c.kv, c.block_size, 23, 31, c.tol, c.name);
    }
}

TEST_CASE("cuda backend: decode_sample picks on the device the tokens forward + the CPU sampler pick") {
    if (!have_cuda()) return;
    ModelConfig config = small_random_config();
    config.n_vocab = 3000;  // past the sort's 1024 candidates, so the min-p floor is what bounds them
    auto m = make_random_model(config, DType::f32, 11);
    struct Case { const char* name; float temp; int32_t top_k; float top_p, min_p, penalty; bool on_device; };
    const Case kCases[] = {{"greedy", 0, 40, 0.95f, 0.05f, 1, true},
                           {"greedy, penalty", 0, 40, 0.95f, 0.05f, 1.5f, true},
                           {"defaults", 0.8f, 40, 0.95f, 0.05f, 1.1f, true},
                           {"top-k off, min-p floor", 0.05f, 0, 1, 0.5f, 1, true},
                           {"top-k 2000: the host sorts", 0.8f, 2000, 0.9f, 0, 1, false},
                           {"top-k and min-p off: the host sorts", 0.8f, 0, 0.9f, 0, 1, false}};
    for (const Case& c : kCases) {
        INFO(std::string(c.name));
        Pair p = make_pair(m->config, m->weights, 4, DType::f32, 64);
        Pair q = make_pair(m->config, m->weights, 4, DType::f32, 64);  // its CUDA backend runs forward()
        SamplingParams params;
        params.temperature = c.temp, params.top_k = c.top_k, params.top_p = c.top_p, params.min_p = c.min_p;
        params.repeat_penalty = c.penalty, params.seed = 99;
        Sampler device_sampler(params), host_sampler(params);
        std::vector<int32_t> history = random_tokens(9, config.n_vocab, 4);
        std::vector<float> a(size_t(config.n_vocab)), b(a.size());
        int32_t token = prefill_both(p, q, history, host_sampler, device_sampler, a, b);
        int32_t n_device = 0;
        for (int32_t pos = int32_t(history.size()); pos < 60; pos++) {
            history.push_back(token);
            const SampleRequest request = device_sampler.device_request(history, config.n_vocab);
            CHECK(p.cuda->samples_on_device(request) == c.on_device);
            SampleOutcome got = p.cuda->decode_sample(token, pos, p.table, request, a.data());
            int32_t device_token = got.token;
            if (got.status == SampleOutcome::kNeedsHost)
                device_token = device_sampler.sample(a.data(), config.n_vocab, history, request.u01);
            else
                n_device++;
            REQUIRE(got.status != SampleOutcome::kBadLogit);
            q.cuda->forward(&token, 1, pos, q.table, b.data());
            const int32_t host_token = host_sampler.sample(b.data(), config.n_vocab, history);
            REQUIRE_MESSAGE(device_token == host_token, "at position " << pos);
            token = host_token;
        }
        if (!c.on_device) CHECK(n_device == 0);
        else if (c.temp <= 0 || c.top_k > 0) CHECK(n_device == 51);
        else {  // the floor bounds the candidates to what this random model's logits leave above it
            MESSAGE(std::string(c.name) << ": " << n_device << " of 51 steps sampled on the device");
            CHECK(n_device > 0);
        }
    }
}

TEST_CASE("cuda backend: decode steps queued one ahead pick the tokens of one step at a time, and a dropped one leaves no trace") {
    if (!have_cuda()) return;
    ModelConfig config = small_random_config();
    config.n_vocab = 3000;
    auto m = make_random_model(config, DType::f32, 12);
    struct Case { const char* name; float temp; int32_t top_k; float penalty; int32_t last_n; };
    const Case kCases[] = {{"greedy", 0, 40, 1, 64},
                           {"greedy, penalty over 8 tokens", 0, 40, 1.5f, 8},
                           {"top-k 40, penalty over 1 token", 0.9f, 40, 1.3f, 1},
                           {"top-k 40, penalty over the whole history", 1.2f, 40, 1.2f, -1},
                           {"top-k 1000, hot", 1.5f, 1000, 1, 64}};
    for (const Case& c : kCases) {
        INFO(std::string(c.name));
        // p queues each step behind the one before it; q runs decode_sample one step at a time.
        Pair p = make_pair(m->config, m->weights, 4, DType::f32, 64);
        Pair q = make_pair(m->config, m->weights, 4, DType::f32, 64);
        SamplingParams params;
        params.temperature = c.temp, params.top_k = c.top_k, params.top_p = 0.95f, params.min_p = 0.02f;
        params.repeat_penalty = c.penalty, params.repeat_last_n = c.last_n, params.seed = 7;
        Sampler ahead_sampler(params), step_sampler(params);
        std::vector<int32_t> history = random_tokens(9, config.n_vocab, 5);
        std::vector<float> a(size_t(config.n_vocab)), b(a.size());
        int32_t token = prefill_both(p, q, history, step_sampler, ahead_sampler, a, b);
        std::vector<int32_t> ahead_history = history;
        // q: one step at a time, 50 tokens.
        std::vector<int32_t> want;
        for (int32_t pos = int32_t(history.size()); pos < 59; pos++) {
            history.push_back(token);
            const SampleRequest request = step_sampler.device_request(history, config.n_vocab);
            const SampleOutcome got = q.cuda->decode_sample(token, pos, q.table, request, b.data());
            REQUIRE(got.status == SampleOutcome::kToken);
            want.push_back(got.token);
            token = got.token;
        }
        // p: the first step with the host's token, then each next one queued with the device's, waiting one
        // behind; at position 31 the queued step is dropped (waited for, its draw given back) and the chain
        // starts again from the host's token, as a new turn would.
        int32_t pos = int32_t(ahead_history.size());
        std::vector<int32_t> got_tokens;
        ahead_history.push_back(history[size_t(pos)]);  // the first token, from the prompt's logits
        SampleRequest first = ahead_sampler.device_request(ahead_history, config.n_vocab);
        REQUIRE(p.cuda->chains_decode_steps(first));
        p.cuda->enqueue_decode_step(ahead_history.back(), pos, p.table, first);
        for (;;) {
            const bool queue = pos + 1 < 59;
            const std::mt19937_64 before = ahead_sampler.generator();
            if (queue) {
                const SampleRequest next = ahead_sampler.step_ahead_request(ahead_history, config.n_vocab);
                REQUIRE(p.cuda->chains_decode_steps(next));
                p.cuda->enqueue_decode_step(Backend::kTokenFromDevice, pos + 1, p.table, next);
            }
            const SampleOutcome got = p.cuda->wait_decode_step();
            REQUIRE(got.status == SampleOutcome::kToken);
            got_tokens.push_back(got.token);
            ahead_history.push_back(got.token);
            if (!queue) break;
            if (++pos == 31) {
                p.cuda->wait_decode_step();  // dropped
                ahead_sampler.restore_generator(before);
                const SampleRequest again = ahead_sampler.device_request(ahead_history, config.n_vocab);
                p.cuda->enqueue_decode_step(got.token, pos, p.table, again);
            }
        }
        CHECK(got_tokens == want);
        // The same K/V bytes (the dropped step's slot at 31 was written over when the chain started again).
        std::vector<uint8_t> kp(p.cuda->kv_block_bytes()), kq(kp.size());
        for (size_t i = 0; (i + 1) * 4 <= 59; i++) {  // whole blocks: slot 59 was never written
            p.cuda->read_kv_block(p.table.blocks[i], kp.data());
            q.cuda->read_kv_block(q.table.blocks[i], kq.data());
            CHECK_MESSAGE(std::memcmp(kp.data(), kq.data(), kp.size()) == 0, "block " << i);
        }
    }
}

TEST_CASE("cuda backend: long prompts (chunked prefill over hundreds of blocks) then decode") {
    if (!have_cuda()) return;
    auto m = make_random_model(small_random_config(), DType::f32, 7);
    // Above the backend's 2048-token batch: two chunks, the second attending over the first's 1024 blocks.
    compare_run(*m, DType::f32, 2, 2100, 2104, 2e-4f, "2100-token prompt, block_size 2");
    // A 16-bit KV cache takes the tensor-core prefill attention from 16 tokens on.
    compare_run(*m, DType::bf16, 5, 600, 604, 3e-2f, "600-token prompt, bf16 KV, block_size 5");
}

// Speculative verification, jump-forward, beams and batched samples need a forward of several tokens, or
// of several sequences, to give every token the logits bits of its own one-token step.
TEST_CASE("cuda backend: batched decode rows give every token the bits of its one-token step") {
    if (!have_cuda()) return;
    ModelConfig wide = small_random_config();  // q8_0 KV needs head_dim a multiple of 32
    wide.n_embd = 256, wide.n_heads = 4, wide.n_kv_heads = 2, wide.head_dim = 128, wide.n_ff = 320;
    // Three sequences with their own blocks; in the first case the last one's context is long enough for split
    // attention (past 256 keys), so rows of one launch split differently.
    struct Case { std::string name; DType weights, kv; ModelConfig config; int32_t longest; };
    const Case kCases[] = {{"f32, f32 kv", DType::f32, DType::f32, small_random_config(), 290},
                           {"bf16, f16 kv", DType::bf16, DType::f16, small_random_config(), 20},
                           {"q4_1, q8_0 kv, head_dim 128", DType::q4_1, DType::q8_0, wide, 20}};
    const int32_t kExtra = 16, kBlock = 16;
    for (const Case& c : kCases) {
        const int32_t kPrompt[3] = {3, 7, c.longest};
        CAPTURE(c.name);
        auto m = make_random_model(c.config, c.weights, 21);
        const int32_t n_vocab = m->config.n_vocab;
        BackendOptions options;
        options.block_size = kBlock, options.kv_dtype = c.kv, options.n_kv_blocks = 3 * 21;
        auto one_by_one = make_cuda_backend(m->config, m->weights, options);
        auto batched = make_cuda_backend(m->config, m->weights, options);
        CHECK(batched->exact_forward_tokens() >= 2);
        BlockTable tables[3];
        std::vector<int32_t> tokens[3];
        std::vector<float> expected[3];  // [token][n_vocab]: logits after each token past the prompt's first
        for (int i = 0; i < 3; i++) {
            const int32_t n = kPrompt[i] + kExtra;
            tables[i].blocks.resize(size_t((n + kBlock - 1) / kBlock));
            for (size_t b = 0; b < tables[i].blocks.size(); b++) tables[i].blocks[b] = int32_t(21 * i + 20 - b);
            tokens[i] = random_tokens(n, n_vocab, uint32_t(40 + i));
            expected[i].resize(size_t(n) * n_vocab);
            std::vector<float> last(static_cast<size_t>(n_vocab));
            // The prompt's K/V, the same way on both backends; then one token per forward.
            one_by_one->forward(tokens[i].data(), kPrompt[i], 0, tables[i], last.data());
            batched->forward(tokens[i].data(), kPrompt[i], 0, tables[i], last.data());
            for (int32_t pos = kPrompt[i]; pos < n; pos++)
                one_by_one->forward(&tokens[i][size_t(pos)], 1, pos, tables[i], &expected[i][size_t(pos) * n_vocab]);
        }
        // Batched: per step, each sequence takes a different number of tokens (one; several with all logits, as
        // a verification; several with the last only, as jump-forward), together in one forward_sequences, and
        // on some steps a sequence alone through forward(); every logit compared bit for bit.
        // (The first two steps have one shape: the second replays the CUDA graph the backend captures for it.)
        const int32_t kTake[][3] = {{1, 1, 1}, {1, 1, 1}, {3, 1, 2}, {1, 5, 1}, {9, 2, 4}, {1, 3, 7}, {0, 3, 0}};
        int32_t pos[3] = {kPrompt[0], kPrompt[1], kPrompt[2]};
        std::vector<float> got[3];
        for (int i = 0; i < 3; i++) got[i].assign(expected[i].size(), NAN);
        int step = 0;
        for (const auto& take : kTake) {
            std::vector<Backend::SequenceInput> inputs;
            for (int i = 0; i < 3; i++) {
                if (take[i] == 0) continue;
                Backend::SequenceInput in;
                in.tokens = &tokens[i][size_t(pos[i])], in.n_tokens = take[i], in.pos = pos[i], in.table = &tables[i];
                in.all_logits = i != 1;  // sequence 1 wants its last token's logits only
                in.logits = &got[i][size_t(pos[i] + (in.all_logits ? 0 : take[i] - 1)) * n_vocab];
                inputs.push_back(in);
            }
            if (step % 3 == 2) {
                for (const auto& in : inputs) batched->forward(in.tokens, in.n_tokens, in.pos, *in.table, in.logits, in.all_logits);
            } else {
                batched->forward_sequences(inputs.data(), inputs.size());
            }
            for (int i = 0; i < 3; i++) pos[i] += take[i];
            step++;
        }
        for (int i = 0; i < 3; i++) {
            CAPTURE(i);
            for (int32_t p = kPrompt[i]; p < pos[i]; p++) {
                CAPTURE(p);
                const float* e = &expected[i][size_t(p) * n_vocab];
                const float* g = &got[i][size_t(p) * n_vocab];
                if (i == 1 && std::isnan(g[0])) continue;  // not asked for
                CHECK(std::memcmp(e, g, size_t(n_vocab) * sizeof(float)) == 0);
            }
        }
        // The K/V the batched rows wrote are the one-token steps' bytes (block by block).
        std::vector<uint8_t> a(one_by_one->kv_block_bytes()), b(a.size());
        for (int i = 0; i < 3; i++)
            for (int32_t blk : tables[i].blocks) {
                one_by_one->read_kv_block(blk, a.data());
                batched->read_kv_block(blk, b.data());
                CHECK(a == b);
            }
    }
}

TEST_CASE(
    "cuda backend: sequences sampled side by side on the device pick what decode_sample picks, and hand back what it "
    "cannot sort") {
    if (!have_cuda()) return;
    ModelConfig config = small_random_config();
    config.n_vocab = 3000;  // past the sort's 1024 candidates
    auto m = make_random_model(config, DType::f32, 12);
    // One sequence per setting: each step, all of them in one forward_sequences (rows) or each through
    // decode_sample (single); sequence 1 asks for plain logits on odd steps (a row between sampled ones).
    struct Setting {
        const char* name;
        float temp;
        int32_t top_k;
        float top_p, min_p, penalty;
    };
    const Setting kSettings[] = {{"greedy", 0, 40, 0.95f, 0.05f, 1},
                                 {"defaults", 0.8f, 40, 0.95f, 0.05f, 1.1f},
                                 {"top-k off, min-p floor", 0.05f, 0, 1, 0.5f, 1},
                                 {"top-k 2000: the host sorts", 0.8f, 2000, 0.9f, 0, 1}};
    constexpr int kSeqs = 4, kBlock = 16, kSteps = 20;
    BackendOptions options;
    options.block_size = kBlock, options.kv_dtype = DType::f32, options.n_kv_blocks = kSeqs * 3;
    auto single = make_cuda_backend(m->config, m->weights, options);
    auto rows = make_cuda_backend(m->config, m->weights, options);
    const int32_t n_vocab = config.n_vocab;
    BlockTable tables[kSeqs];
    std::vector<int32_t> history[kSeqs];
    std::vector<Sampler> single_samplers, row_samplers;
    int32_t single_token[kSeqs], row_token[kSeqs], n_device[kSeqs] = {};
    std::vector<float> logits_single(static_cast<size_t>(n_vocab)), logits_rows[kSeqs];
    for (int i = 0; i < kSeqs; i++) {
        const Setting& c = kSettings[i];
        SamplingParams params;
        params.temperature = c.temp, params.top_k = c.top_k, params.top_p = c.top_p, params.min_p = c.min_p;
        params.repeat_penalty = c.penalty, params.seed = uint64_t(70 + i);
        single_samplers.emplace_back(params);
        row_samplers.emplace_back(params);
        tables[i].blocks = {3 * i + 2, 3 * i, 3 * i + 1};
        history[i] = random_tokens(9 + i, n_vocab, uint32_t(30 + i));
        logits_rows[i].resize(size_t(n_vocab));
        single->forward(history[i].data(), int32_t(history[i].size()), 0, tables[i], logits_single.data());
        rows->forward(history[i].data(), int32_t(history[i].size()), 0, tables[i], logits_rows[i].data());
        single_token[i] = single_samplers[size_t(i)].sample(logits_single.data(), n_vocab, history[i]);
        row_token[i] = row_samplers[size_t(i)].sample(logits_rows[i].data(), n_vocab, history[i]);
        REQUIRE(single_token[i] == row_token[i]);
    }
    for (int step = 0; step < kSteps; step++) {
        CAPTURE(step);
        std::vector<Backend::SequenceInput> inputs(kSeqs);
        SampleRequest requests[kSeqs];
        SampleOutcome outcomes[kSeqs];
        SampleOutcome expected[kSeqs];
        for (int i = 0; i < kSeqs; i++) {
            const int32_t pos = int32_t(history[i].size());
            history[i].push_back(single_token[i]);
            // decode_sample, one sequence at a time: the reference.
            const SampleRequest single_request = single_samplers[size_t(i)].device_request(history[i], n_vocab);
            expected[i] = single->decode_sample(single_token[i], pos, tables[i], single_request, logits_single.data());
            if (expected[i].status == SampleOutcome::kNeedsHost)
                single_token[i] =
                    single_samplers[size_t(i)].sample(logits_single.data(), n_vocab, single_request, history[i].size());
            else
                single_token[i] = expected[i].token;
            requests[i] = row_samplers[size_t(i)].device_request(history[i], n_vocab);
            Backend::SequenceInput& in = inputs[size_t(i)];
            in.tokens = &history[i].back(), in.n_tokens = 1, in.pos = pos, in.table = &tables[i];
            in.logits = logits_rows[i].data();
            outcomes[i].status = SampleOutcome::kBadLogit;  // overwritten by every forward_sequences
            in.outcome = &outcomes[i];
            if (!(i == 1 && step % 2 == 1)) in.sample = &requests[i];
        }
        rows->forward_sequences(inputs.data(), inputs.size());
        for (int i = 0; i < kSeqs; i++) {
            CAPTURE(i);
            REQUIRE(outcomes[i].status != SampleOutcome::kBadLogit);
            if (outcomes[i].status == SampleOutcome::kNeedsHost) {
                row_token[i] =
                    row_samplers[size_t(i)].sample(logits_rows[i].data(), n_vocab, requests[i], history[i].size());
            } else {
                n_device[i]++;
                row_token[i] = outcomes[i].token;
                CHECK(expected[i].status == SampleOutcome::kToken);
                CHECK(outcomes[i].logits_digest == expected[i].logits_digest);  // the same logits, bit for bit
            }
            REQUIRE(row_token[i] == single_token[i]);
        }
    }
    CHECK(n_device[0] == kSteps);
    CHECK(n_device[1] == kSteps / 2);  // its odd steps asked for logits
    MESSAGE("top-k off, min-p floor: " << n_device[2] << " of " << kSteps << " steps sampled on the device");
    CHECK(n_device[2] > 0);
    CHECK(n_device[3] == 0);

    // The CPU backend samples nothing itself: every outcome says so.
    auto cpu = make_cpu_backend(m->config, m->weights, options);
    Backend::SequenceInput in;
    SampleRequest request = row_samplers[0].device_request(history[0], n_vocab);
    SampleOutcome outcome;
    outcome.status = SampleOutcome::kToken;
    in.tokens = history[0].data(), in.n_tokens = 4, in.pos = 0, in.table = &tables[0];
    in.logits = logits_rows[0].data(), in.sample = &request, in.outcome = &outcome;
    cpu->forward_sequences(&in, 1);
    CHECK(outcome.status == SampleOutcome::kNeedsHost);
}

// Beam search's picks (SequenceInput::best) in a pass that mixes every kind of row: two sequences whose best
// tokens the device picks, one asking for 100 (past the device's 64: the host picks them from the copied
// logits), one asking for plain logits, one sampled greedily. Against a second backend's plain logits (the
// same bits, rows being exact): best_tokens_cpu's tokens, scores within the float rounding of the device's
// sums, the host-picked row exactly, the plain row's logits bit for bit, the greedy row's argmax.
TEST_CASE("cuda backend: a beam's best tokens are picked where its logits are, beside rows of other kinds") {
    if (!have_cuda()) return;
    ModelConfig config = small_random_config();
    config.n_vocab = 3000;
    auto m = make_random_model(config, DType::f32, 13);
    const int32_t n_vocab = config.n_vocab;
    constexpr int kSeqs = 5;
    BackendOptions options;
    options.block_size = 16, options.kv_dtype = DType::f32, options.n_kv_blocks = kSeqs * 2;
    auto picks = make_cuda_backend(m->config, m->weights, options);
    auto plain = make_cuda_backend(m->config, m->weights, options);
    BlockTable tables[kSeqs];
    std::vector<int32_t> prompts[kSeqs];
    std::vector<float> logits[kSeqs], plain_logits[kSeqs];
    for (int i = 0; i < kSeqs; i++) {
        tables[i].blocks = {2 * i + 1, 2 * i};
        prompts[i] = random_tokens(20 + i, n_vocab, uint32_t(40 + i));
        logits[i].resize(size_t(n_vocab)), plain_logits[i].resize(size_t(n_vocab));
        for (Backend* b : {picks.get(), plain.get()})
            b->forward(prompts[i].data(), int32_t(prompts[i].size()) - 1, 0, tables[i], logits[i].data());
    }
    const int32_t n_best[kSeqs] = {6, 0, 100, 6, 0};
    const float bases[kSeqs] = {-1.5f, 0, -0.25f, 0, 0};
    std::vector<TokenScore> best[kSeqs];
    SampleRequest greedy;  // temperature 0
    SampleOutcome outcome;
    std::vector<Backend::SequenceInput> inputs(kSeqs), plain_inputs(kSeqs);
    for (int i = 0; i < kSeqs; i++) {
        for (Backend::SequenceInput* in : {&inputs[size_t(i)], &plain_inputs[size_t(i)]}) {
            in->tokens = &prompts[i].back(), in->n_tokens = 1, in->pos = int32_t(prompts[i].size()) - 1;
            in->table = &tables[i];
        }
        inputs[size_t(i)].logits = logits[i].data(), plain_inputs[size_t(i)].logits = plain_logits[i].data();
        if (n_best[i] > 0) {
            best[i].assign(size_t(n_best[i]), {0, -2});
            inputs[size_t(i)].n_best = n_best[i], inputs[size_t(i)].best_base = bases[i];
            inputs[size_t(i)].best = best[i].data();
        }
    }
    inputs[4].sample = &greedy, inputs[4].outcome = &outcome;
    picks->forward_sequences(inputs.data(), inputs.size());
    plain->forward_sequences(plain_inputs.data(), plain_inputs.size());
    for (int i : {0, 2, 3}) {
        CAPTURE(i);
        std::vector<TokenScore> want(static_cast<size_t>(n_best[i]));
        best_tokens_cpu(plain_logits[i].data(), n_vocab, bases[i], n_best[i], want.data());
        for (int32_t k = 0; k < n_best[i]; k++) {
            CAPTURE(k);
            CHECK(best[i][size_t(k)].token == want[size_t(k)].token);
            if (i == 2)
                CHECK(best[i][size_t(k)].score == want[size_t(k)].score);  // the host's pick, from the copied logits
            else
                CHECK(std::fabs(best[i][size_t(k)].score - want[size_t(k)].score) <= 1e-5f);
        }
    }
    CHECK(std::memcmp(logits[1].data(), plain_logits[1].data(), size_t(n_vocab) * sizeof(float)) == 0);
    REQUIRE(outcome.status == SampleOutcome::kToken);
    CHECK(outcome.token ==
          int32_t(std::max_element(plain_logits[4].begin(), plain_logits[4].end()) - plain_logits[4].begin()));
    inputs[0].sample = &greedy;
    CHECK_THROWS_WITH_AS(picks->forward_sequences(inputs.data(), 1),
                         doctest::Contains("asks for a sampled token and its best tokens"), Error);
}

TEST_CASE("cuda backend: attention's and the GEMVs' launch rules (a sweep's) keep decode near the CPU, rows equal to steps") {
    if (!have_cuda()) return;
    auto m = make_random_model(small_random_config(), DType::f32, 31);
    ModelConfig wide_ffn = small_random_config();
    wide_ffn.n_ff = 4096;  // the down projection's f32 rows (16 KiB) split across 4 warps under the split rule
    auto wide = make_random_model(wide_ffn, DType::f32, 32);
    const int32_t n_vocab = m->config.n_vocab, kPrompt = 200, kSteps = 3, kBlock = 16;
    const auto tokens = random_tokens(kPrompt + kSteps, n_vocab, 8);
    struct Rules {
        int32_t split_keys, fill, one_head;
        GemvLaunchRules gemv;
        const char* in_name;
    };
    const Rules kRules[] = {{128, 8, -1, {}, "attention split past 128 keys, attention fill 8 per SM"},
                            {128, 1, 0, {}, "attention a block per group"},
                            {0, 0, 1, {}, "attention a block per head"},
                            {0, 0, -1, {4, 128, 0, 1}, "GEMV 4 rows per warp, GEMV blocks of 128"},
                            {0, 0, -1, {1, 256, 0, 1}, "GEMV 1 rows per warp, GEMV blocks of 256"},
                            {0, 0, -1, {0, 0, 32, 1}, "GEMV rows split up to 32 warps per SM"},
                            {0, 0, -1, {0, 0, 32, 0}, "GEMV rows split up to 32 warps per SM, GEMV x from global"}};
    for (const Rules& r : kRules) {
        CAPTURE(r.in_name);
        const RandomModel& model = r.gemv.split_warps_per_sm ? *wide : *m;
        BackendOptions options;
        options.block_size = kBlock, options.kv_dtype = DType::f32, options.n_kv_blocks = 2 * 14;
        CudaSettings settings;
        settings.attn_split_keys = r.split_keys, settings.attn_fill_per_sm = r.fill;
        settings.attn_one_head = r.one_head;
        settings.gemv = r.gemv;
        options.cuda = std::make_shared<CudaSettings>(settings);
        auto cpu = make_cpu_backend(model.config, model.weights, options);
        auto steps = make_cuda_backend(model.config, model.weights, options);
        auto rows = make_cuda_backend(model.config, model.weights, options);
        CHECK(steps->name().find(r.in_name) != std::string::npos);
        if (r.gemv.split_warps_per_sm)
            CHECK(cuda_test::gemv_split_count(model.config.n_embd, model.config.n_ff, DType::f32, false) == 4);
        BlockTable table;
        for (int32_t b = 0; b < 14; b++) table.blocks.push_back(27 - 2 * b);
        std::vector<float> want(static_cast<size_t>(n_vocab)), got(want.size()), rows_logits(size_t(kSteps) * n_vocab);
        for (Backend* b : {cpu.get(), steps.get(), rows.get()})
            b->forward(tokens.data(), kPrompt, 0, table, want.data());
        rows->forward(&tokens[kPrompt], kSteps, kPrompt, table, rows_logits.data(), /*all_logits=*/true);
        for (int32_t i = 0; i < kSteps; i++) {
            const int32_t pos = kPrompt + i;
            cpu->forward(&tokens[size_t(pos)], 1, pos, table, want.data());
            steps->forward(&tokens[size_t(pos)], 1, pos, table, got.data());
            check_close(got, want, 1e-4f, 1e-4f, "decode at " + std::to_string(pos));
            CHECK(std::memcmp(got.data(), &rows_logits[size_t(i) * n_vocab], got.size() * sizeof(float)) == 0);
        }
    }
    CudaSettings bad;
    const auto backend_with = [&](const CudaSettings& settings) {
        BackendOptions options;
        options.n_kv_blocks = 4, options.cuda = std::make_shared<CudaSettings>(settings);
        return make_cuda_backend(m->config, m->weights, options);
    };
    bad.attn_split_keys = 100;
    CHECK_THROWS_WITH_AS(backend_with(bad),
                         doctest::Contains("attention split keys 100 must be a positive multiple of 128"), Error);
    bad.attn_split_keys = 0, bad.attn_one_head = 2;
    CHECK_THROWS_WITH_AS(backend_with(bad), doctest::Contains("must be 0, 1 or auto"), Error);
    bad.attn_one_head = -1, bad.gemv.threads = 64;
    CHECK_THROWS_WITH_AS(backend_with(bad),
                         doctest::Contains("threads 64 must be 128 or 256 (0: the default) (KVLM_CUDA_GEMV_ROWS"), Error);
    bad.gemv.threads = 0, bad.gemv.split_warps_per_sm = 65;
    CHECK_THROWS_WITH_AS(backend_with(bad), doctest::Contains("split up to 65 warps per SM must be 0 to 64"), Error);
    bad.gemv.split_warps_per_sm = 0, bad.gemv.stage_x = 2;
    CHECK_THROWS_WITH_AS(backend_with(bad), doctest::Contains("stage x 2 must be 0 or 1"), Error);
    // The GEMV shape is process-wide: a backend with the defaults puts them back for the cases after this one.
    CHECK(backend_with(CudaSettings{})->name().find("GEMV") == std::string::npos);
}

TEST_CASE("cuda backend: the persistent decode kernel gives the bits of a launch per stage, rows equal to steps") {
    if (!have_cuda()) return;
    const int32_t kPrompt = 200, kSteps = 3, kBlock = 16;
    struct Setup {
        DType weights, kv;
        int32_t split_keys, fill;  // attention's rules: 128 / 8 splits the 200-key context
        int32_t n_ff;              // 0: the small config's
        const char* what;
    };
    // 12,288 > kMaxSharedIn: the per-stage down GEMV reads its input from global memory, the persistent
    // kernel stages it in shared memory (as it would Llama-3-8B's 14,336).
    const Setup kSetups[] = {{DType::bf16, DType::bf16, 0, 0, 0, "bf16 weights, bf16 pool"},
                             {DType::f16, DType::f16, 128, 8, 0, "f16 weights, f16 pool, split attention"},
                             {DType::bf16, DType::f16, 128, 8, 0, "bf16 weights, f16 pool, split attention"},
                             {DType::bf16, DType::bf16, 0, 0, 12288, "bf16, an FFN input past kMaxSharedIn"}};
    for (const Setup& setup : kSetups) {
        CAPTURE(setup.what);
        ModelConfig config = small_random_config();
        if (setup.n_ff > 0) config.n_ff = setup.n_ff;
        auto m = make_random_model(config, setup.weights, 41);
        const int32_t n_vocab = m->config.n_vocab;
        const auto tokens = random_tokens(kPrompt + kSteps, n_vocab, 9);
        BackendOptions options;
        options.block_size = kBlock, options.kv_dtype = setup.kv, options.n_kv_blocks = 2 * 14;
        CudaSettings settings;
        settings.attn_split_keys = setup.split_keys, settings.attn_fill_per_sm = setup.fill;
        options.cuda = std::make_shared<CudaSettings>(settings);
        auto stages = make_cuda_backend(m->config, m->weights, options);
        settings.persistent_blocks_per_sm = 1;
        options.cuda = std::make_shared<CudaSettings>(settings);
        auto persistent = make_cuda_backend(m->config, m->weights, options);
        auto rows = make_cuda_backend(m->config, m->weights, options);
        CHECK(persistent->name().find("decode steps in one persistent kernel (") !=
              std::string::npos);  // a block per SM
        CHECK(stages->name().find("persistent") == std::string::npos);
        BlockTable table;
        for (int32_t b = 0; b < 14; b++) table.blocks.push_back(27 - 2 * b);
        std::vector<float> want(static_cast<size_t>(n_vocab)), got(want.size()), rows_logits(size_t(kSteps) * n_vocab);
        for (Backend* b : {stages.get(), persistent.get(), rows.get()})
            b->forward(tokens.data(), kPrompt, 0, table, want.data());
        rows->forward(&tokens[kPrompt], kSteps, kPrompt, table, rows_logits.data(), /*all_logits=*/true);
        for (int32_t i = 0; i < kSteps; i++) {
            const int32_t pos = kPrompt + i;
            stages->forward(&tokens[size_t(pos)], 1, pos, table, want.data());
            persistent->forward(&tokens[size_t(pos)], 1, pos, table, got.data());
            CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(got.data(), &rows_logits[size_t(i) * n_vocab], got.size() * sizeof(float)) == 0);
        }
        // The pool the persistent steps wrote is the per-stage steps' pool, byte for byte.
        std::vector<uint8_t> a(stages->kv_block_bytes()), b(a.size());
        const int32_t last = table.blocks[size_t((kPrompt + kSteps - 1) / kBlock)];
        stages->read_kv_block(last, a.data());
        persistent->read_kv_block(last, b.data());
        CHECK(a == b);
    }
    auto f32_model = make_random_model(small_random_config(), DType::f32, 42);
    CudaSettings persistent;
    persistent.persistent_blocks_per_sm = 1;
    BackendOptions options;
    options.n_kv_blocks = 4, options.kv_dtype = DType::bf16, options.cuda = std::make_shared<CudaSettings>(persistent);
    CHECK_THROWS_WITH_AS(
        make_cuda_backend(f32_model->config, f32_model->weights, options),
        doctest::Contains("persistent decode kernel (KVLM_CUDA_PERSISTENT) cannot run here: weights are "
                          "not f16 or bf16"),
        Error);
    auto bf16_model = make_random_model(small_random_config(), DType::bf16, 43);
    options.kv_dtype = DType::f32;
    CHECK_THROWS_WITH_AS(make_cuda_backend(bf16_model->config, bf16_model->weights, options),
                         doctest::Contains("the KV pool is not f16 or bf16"), Error);
    persistent.persistent_blocks_per_sm = 33;
    options.kv_dtype = DType::bf16, options.cuda = std::make_shared<CudaSettings>(persistent);
    CHECK_THROWS_WITH_AS(make_cuda_backend(bf16_model->config, bf16_model->weights, options),
                         doctest::Contains("33 blocks per multiprocessor is outside 1..32"), Error);
    ModelConfig wide = small_random_config();
    wide.n_ff = 64 * 1024;  // 256 KB of f32 input: past every device's per-block shared memory
    auto wide_model = make_random_model(wide, DType::bf16, 44);
    persistent.persistent_blocks_per_sm = 1;
    options.cuda = std::make_shared<CudaSettings>(persistent);
    CHECK_THROWS_WITH_AS(make_cuda_backend(wide_model->config, wide_model->weights, options),
                         doctest::Contains("its largest input (65536 values) needs 270 KB of shared memory a block; "
                                           "the device allows "),
                         Error);
}

TEST_CASE("cuda backend: KV blocks round trip and move between backends") {
    if (!have_cuda()) return;
    auto m = make_random_model(small_random_config(), DType::f32, 9);
    const int32_t n = 40, n_vocab = m->config.n_vocab;
    Pair p = make_pair(m->config, m->weights, 8, DType::f32, n + 1);
    REQUIRE(p.cuda->kv_block_bytes() == p.cpu->kv_block_bytes());
    const size_t bytes = p.cuda->kv_block_bytes();

    // Raw bytes: write, read back, copy.
    std::vector<uint8_t> block(bytes), back(bytes), copied(bytes);
    std::mt19937 rng(1);
    for (auto& b : block) b = uint8_t(rng());
    p.cuda->write_kv_block(2, block.data());
    p.cuda->read_kv_block(2, back.data());
    CHECK(block == back);
    p.cuda->copy_kv_block(2, 5);
    p.cuda->read_kv_block(5, copied.data());
    CHECK(block == copied);
    CHECK_THROWS_AS(p.cuda->read_kv_block(-1, back.data()), Error);
    CHECK_THROWS_AS(p.cuda->copy_kv_block(0, 1 << 20), Error);

    // A prompt prefilled on the GPU, its blocks moved to the CPU backend: both decode the next token alike,
    // and the K/V the two computed agree.
    auto tokens = random_tokens(n + 1, n_vocab, 4);
    std::vector<float> gpu(static_cast<size_t>(n_vocab)), cpu(static_cast<size_t>(n_vocab));
    p.cuda->forward(tokens.data(), n, 0, p.table, gpu.data());
    int32_t used = (n + 7) / 8;
    for (int32_t i = 0; i < used; i++) {
        int32_t b = p.table.blocks[size_t(i)];
        p.cuda->read_kv_block(b, block.data());
        p.cpu->write_kv_block(b, block.data());
    }
    p.cuda->forward(&tokens[size_t(n)], 1, n, p.table, gpu.data());
    p.cpu->forward(&tokens[size_t(n)], 1, n, p.table, cpu.data());
    check_close(gpu, cpu, 1e-4f, 1e-4f, "decode after moving GPU KV to the CPU");

    auto fresh = make_cpu_backend(m->config, m->weights, [&] {
        BackendOptions o;
        o.block_size = 8, o.n_kv_blocks = int32_t(p.table.blocks.size()) + 7;
        return o;
    }());
    fresh->forward(tokens.data(), n + 1, 0, p.table, cpu.data());
    for (int32_t i = 0; i < used; i++) {
        int32_t b = p.table.blocks[size_t(i)];
        std::vector<float> want(bytes / 4), got(bytes / 4);
        fresh->read_kv_block(b, want.data());
        p.cuda->read_kv_block(b, got.data());
        // The first `used` blocks hold positions 0..n-1 in every slot, written by both prefills.
        check_close(got, want, 1e-4f, 1e-4f, "K/V bytes of block " + std::to_string(b));
    }
}

TEST_CASE("cuda backend: stories260K logits match the CPU backend") {
    if (!have_cuda()) return;
    std::string gguf = data_path("stories260K/stories260K.gguf");
    if (!have_data(gguf)) return;
    auto model = ModelFile::open(converted_model("stories-gguf", {gguf}));
    BackendOptions options;
    options.block_size = 16;
    options.n_kv_blocks = 32;
    auto cpu = make_cpu_backend(*model, options);
    auto cuda = make_cuda_backend(*model, options);
    const int32_t n_vocab = model->config().n_vocab;
    BlockTable table;
    table.blocks.resize(32);
    std::iota(table.blocks.begin(), table.blocks.end(), 0);
    std::reverse(table.blocks.begin(), table.blocks.end());
    std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
    std::vector<float> want(tokens.size() * size_t(n_vocab)), got(want.size());
    cpu->forward(tokens.data(), int32_t(tokens.size()), 0, table, want.data(), true);
    cuda->forward(tokens.data(), int32_t(tokens.size()), 0, table, got.data(), true);
    check_close(got, want, 1e-3f, 1e-4f, "stories260K prefill");
    // Greedy continuation driven by the CPU's choice, so both see the same tokens.
    want.resize(size_t(n_vocab)), got.resize(size_t(n_vocab));
    std::copy(want.end() - n_vocab, want.end(), want.begin());
    for (int32_t pos = int32_t(tokens.size()); pos < 200; pos++) {
        int32_t next = int32_t(std::max_element(want.begin(), want.end()) - want.begin());
        cpu->forward(&next, 1, pos, table, want.data());
        cuda->forward(&next, 1, pos, table, got.data());
        check_close(got, want, 1e-3f, 1e-4f, "stories260K decode at " + std::to_string(pos));
    }
}

// Perplexity on a GPU scores where the logits are (token_nll.cu): the same negative log-likelihoods the host
// computes from the same logits, over two chunks of the logits buffer (289 scored rows), the first scored
// row anywhere in the chunk.
TEST_CASE("cuda backend: perplexity's scores on the device are the host's over the same logits") {
    if (!have_cuda()) return;
    auto m = make_random_model(small_random_config(), DType::bf16, 21);
    BackendOptions options;
    options.block_size = 16;
    options.n_kv_blocks = 24;
    auto cuda = make_cuda_backend(m->config, m->weights, options);
    REQUIRE(cuda->scores_on_device());
    CHECK_FALSE(make_cpu_backend(m->config, m->weights, options)->scores_on_device());
    const int32_t n_vocab = m->config.n_vocab, n = 300;
    BlockTable table;
    table.blocks.resize(24);
    std::iota(table.blocks.begin(), table.blocks.end(), 0);
    std::mt19937 rng(5);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(n_vocab));
    std::vector<float> logits(size_t(n) * size_t(n_vocab));
    cuda->forward(tokens.data(), n, 0, table, logits.data(), true);
    for (int32_t first : {10, 150, 298}) {
        CAPTURE(first);
        std::vector<double> nll(size_t(n - 1 - first), -1.0);
        cuda->forward_nll(tokens.data(), n, 0, table, first, nll.data());
        int mismatches = 0;
        for (int32_t i = 0; i < n - 1 - first; i++) {
            const double want =
                token_nll(logits.data() + size_t(first + i) * n_vocab, n_vocab, tokens[size_t(first + i + 1)]);
            mismatches += !(std::abs(nll[size_t(i)] - want) <= 1e-9 * std::max(1.0, std::abs(want)));
        }
        CHECK(mismatches == 0);
    }
    std::vector<double> none(1);
    CHECK_THROWS_WITH_AS(cuda->forward_nll(tokens.data(), n, 0, table, n, none.data()),
                         doctest::Contains("first row 300 outside 0..299"), Error);
}

TEST_CASE("cuda backend: bad forward arguments throw Error") {
    if (!have_cuda()) return;
    auto m = make_random_model(small_random_config(), DType::f32, 1);
    Pair p = make_pair(m->config, m->weights, 4, DType::f32, 8);
    std::vector<float> logits(static_cast<size_t>(m->config.n_vocab));
    int32_t token = 1, bad_token = m->config.n_vocab;
    CHECK_THROWS_AS(p.cuda->forward(&token, 0, 0, p.table, logits.data()), Error);
    CHECK_THROWS_AS(p.cuda->forward(&token, 1, -1, p.table, logits.data()), Error);
    CHECK_THROWS_AS(p.cuda->forward(&token, 1, 8, p.table, logits.data()), Error);  // past the table
    CHECK_THROWS_AS(p.cuda->forward(&bad_token, 1, 0, p.table, logits.data()), Error);
    CHECK_NOTHROW(p.cuda->forward(&token, 1, 0, p.table, logits.data()));
    CHECK(p.cuda->name().rfind("cuda", 0) == 0);
}

#endif  // KVLM_CUDA
