// Decode steps queued one ahead (generate/steps_ahead.h), through decode() on the CPU: a stand-in backend
// queues steps and picks their tokens "on the device" as CUDA does (the step's input token from the step
// before it, added to the penalty list as sample.cu adds it), so the host logic - the draw given back for a
// dropped step, its block released, the stops at -n, end of generation, a full context or pool - runs in
// every CI run, not only in the emulator. The tokens must be those of one step at a time.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <deque>

#include "engine/engine.h"
#include "generate/generate.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

// The inner backend, with CUDA's queued decode steps: each runs when queued (as the device would, behind the
// host), its token picked by the CPU sampler's rule from the request. Forward while steps are queued, or a
// step whose input is the device's without a step before it, fails the test.
class QueuingBackend : public Backend {
public:
    explicit QueuingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
    int64_t n_ahead = 0;  // steps queued with the device's token

    std::string name() const override { return "queuing " + inner_->name(); }
    const ModelConfig& config() const override { return inner_->config(); }
    void forward(const int32_t* tokens, int32_t n_tokens, int32_t pos, const BlockTable& table, float* logits,
                 bool all_logits) override {
        REQUIRE(queue_.empty());
        inner_->forward(tokens, n_tokens, pos, table, logits, all_logits);
    }
    int32_t exact_forward_tokens() const override { return inner_->exact_forward_tokens(); }
    bool samples_on_device(const SampleRequest& r) const override { return true; }
    bool chains_decode_steps(const SampleRequest& r) const override { return true; }
    SampleOutcome decode_sample(int32_t token, int32_t pos, const BlockTable& table, const SampleRequest& request,
                                float* logits) override {
        REQUIRE(queue_.empty());
        enqueue_decode_step(token, pos, table, request);
        return wait_decode_step();
    }
    void enqueue_decode_step(int32_t token, int32_t pos, const BlockTable& table, const SampleRequest& r) override {
        REQUIRE(queue_.size() < 2);
        if (token == kTokenFromDevice) {
            REQUIRE(queue_.size() == 1);
            token = last_token_, n_ahead++;
        }
        std::vector<float> logits(size_t(config().n_vocab));
        inner_->forward(&token, 1, pos, table, logits.data(), false);
        std::vector<int32_t> penalty(r.penalty_tokens, r.penalty_tokens + r.n_penalty);
        if (r.penalize_step_token && std::find(penalty.begin(), penalty.end(), token) == penalty.end())
            penalty.push_back(token);
        SamplingParams params;
        params.temperature = r.temperature, params.top_k = r.top_k, params.top_p = r.top_p, params.min_p = r.min_p;
        params.repeat_penalty = r.repeat_penalty;
        SampleRequest full = r;
        full.penalty_tokens = penalty.data(), full.n_penalty = int32_t(penalty.size());
        SampleOutcome out;
        out.status = SampleOutcome::kToken;
        out.token = last_token_ = Sampler(params).sample(logits.data(), config().n_vocab, full, 0);
        queue_.push_back(out);
    }
    SampleOutcome wait_decode_step() override {
        REQUIRE(!queue_.empty());
        const SampleOutcome out = queue_.front();
        queue_.pop_front();
        return out;
    }

    int32_t n_kv_blocks() const override { return inner_->n_kv_blocks(); }
    size_t kv_block_bytes() const override { return inner_->kv_block_bytes(); }
    void read_kv_block(int32_t block, void* dst) const override { inner_->read_kv_block(block, dst); }
    void write_kv_block(int32_t block, const void* src) override { inner_->write_kv_block(block, src); }
    void copy_kv_block(int32_t src, int32_t dst) override { inner_->copy_kv_block(src, dst); }

private:
    std::unique_ptr<Backend> inner_;
    std::deque<SampleOutcome> queue_;
    int32_t last_token_ = -1;
};

struct Turn {
    std::vector<int32_t> generated;
    StopReason stop_reason;
};

// Two turns on one sequence with one sampler (as chat has them): the first until `first_n` tokens or its end,
// then a second prompt and 40 tokens (none after a full context or pool); the first interrupted after
// `interrupt_after` pieces of text (0: not). `queuing`: through QueuingBackend
// (the steps it ran with the device's token into *n_ahead).
std::vector<Turn> two_turns(bool queuing, const SamplingParams& params, int32_t first_n, int32_t n_ctx,
                            uint64_t kv_mem_bytes, int32_t interrupt_after, int64_t* n_ahead = nullptr) {
    EngineOptions options = quiet_cpu_engine(5, 2);
    options.n_ctx = n_ctx;
    options.kv_mem_bytes = kv_mem_bytes;
    QueuingBackend* wrapper = nullptr;
    if (queuing)
        options.wrap_backend = [&](std::unique_ptr<Backend> inner) {
            auto w = std::make_unique<QueuingBackend>(std::move(inner));
            wrapper = w.get();
            return std::unique_ptr<Backend>(std::move(w));
        };
    Engine engine(stories(), options);
    Sequence seq;
    Sampler sampler(params);
    std::vector<Turn> turns;
    std::vector<int32_t> pending;  // the last turn's last token, not evaluated yet: the next prompt starts with it
    for (const char* text : {"Once upon a time", " Then the dog said"}) {
        std::vector<int32_t> prompt = pending;
        const std::vector<int32_t> words = engine.tokenizer().encode(text, seq.tokens.empty(), true);
        prompt.insert(prompt.end(), words.begin(), words.end());
        // An interrupt (Ctrl-C in chat) after `interrupt_after` pieces of text of the first turn.
        std::atomic<bool> cancel{false};
        int32_t n_pieces = 0;
        const auto on_text = [&](const std::string&) {
            if (turns.empty() && ++n_pieces == interrupt_after) cancel = true;
        };
        GenerationResult r = generate(engine, seq, prompt, turns.empty() ? first_n : 40, sampler, on_text, &cancel);
        // The sequence holds its tokens' blocks and no more (a dropped step's block went back).
        CHECK(seq.table.blocks.size() == size_t((seq.table.n_tokens + 4) / 5));
        turns.push_back({r.generated, r.stop_reason});
        if (r.stop_reason == StopReason::context_full || r.stop_reason == StopReason::kv_cache_full) break;
        pending.assign(1, r.generated.back());
    }
    engine.prefix_cache().release(seq);
    engine.prefix_cache().evict_unreferenced();
    CHECK(engine.pool().n_used() == 0);
    if (n_ahead && wrapper) *n_ahead = wrapper->n_ahead;
    return turns;
}

}  // namespace

TEST_CASE("steps ahead: decode with each step queued behind the one before picks the tokens of one step at a time") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    struct Case { const char* name; float temp; float penalty; int32_t last_n; int32_t first_n, n_ctx, interrupt; };
    // stories260K does not end its stories with EOS: an interrupt is what drops a queued step here.
    const Case kCases[] = {
        {"greedy, -n 30", 0, 1, 64, 30, 512, 0},
        {"greedy, interrupted", 0, 1, 64, -1, 512, 20},
        {"sampled with a penalty over 8 tokens, interrupted", 0.9f, 1.3f, 8, -1, 512, 33},
        {"sampled, penalty over 1 token, interrupted", 1.1f, 1.2f, 1, 100, 512, 10},
        {"sampled, penalty over the whole history, -n 25", 0.8f, 1.1f, -1, 25, 512, 0},
        {"sampled until the context is full", 0.8f, 1.1f, 64, -1, 64, 0},
        {"sampled until the pool is full", 0.8f, 1, 64, -1, 512, 0},
    };
    for (const Case& c : kCases) {
        INFO(std::string(c.name));
        SamplingParams params;
        params.temperature = c.temp, params.repeat_penalty = c.penalty, params.repeat_last_n = c.last_n;
        params.seed = 21;
        uint64_t kv_mem = 0;
        if (std::string(c.name).find("pool") != std::string::npos) {
            Engine probe(stories(), quiet_cpu_engine(5, 2));
            kv_mem = uint64_t(probe.backend().kv_block_bytes()) * 20;  // 100 tokens
        }
        // An interrupt at 5 consecutive tokens: one of them drops a step that had a block of its own.
        for (int32_t k = 0; k < (c.interrupt ? 5 : 1); k++) {
            const int32_t interrupt = c.interrupt ? c.interrupt + k : 0;
            CAPTURE(interrupt);
            const std::vector<Turn> want = two_turns(false, params, c.first_n, c.n_ctx, kv_mem, interrupt);
            int64_t n_ahead = 0;
            const std::vector<Turn> got = two_turns(true, params, c.first_n, c.n_ctx, kv_mem, interrupt, &n_ahead);
            REQUIRE(got.size() == want.size());
            for (size_t i = 0; i < want.size(); i++) {
                CHECK(got[i].generated == want[i].generated);
                CHECK(got[i].stop_reason == want[i].stop_reason);
            }
            if (c.interrupt) CHECK(want[0].stop_reason == StopReason::interrupted);
            if (k == 0)
                MESSAGE(std::string(c.name) << ": " << want[0].generated.size() << " tokens then " << want.size() - 1
                                            << " turn(s), stop '" << std::string(stop_reason_text(want[0].stop_reason)) << "', " << n_ahead
                                            << " steps queued ahead");
            CHECK(n_ahead > int64_t(want[0].generated.size()) / 2);
        }
    }
}
