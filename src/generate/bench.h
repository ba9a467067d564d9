// `kvlm bench` measurements (llama-bench style): prefill and decode throughput over random token ids
// (no tokenization, no sampling), repeated and summarized as mean and standard deviation, plus scenario
// timings (prefix-cache hit vs miss, session restore vs recompute, cold process start). Every figure is
// timed here, on the engine's backend; roofline fractions use the backend's DevicePeaks when known.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvlm {

struct BenchPlan {
    std::vector<int32_t> prompt_lengths = {512};  // pp tests (0 entries: none)
    std::vector<int32_t> gen_lengths = {128};     // tg tests
    std::vector<int32_t> depths = {0};            // context already in the KV before each test
    int32_t n_reps = 5;
    bool scenarios = true;
    uint64_t seed = 42;                           // for the random token ids
};

// Mean and sample standard deviation of repeated measurements.
struct Summary {
    double mean = 0;
    double stddev = 0;
    int32_t n = 0;
};
Summary summarize(const std::vector<double>& values);

// One throughput row: "pp512", "tg128", with "@ d4096" for a depth.
struct BenchRow {
    std::string test;
    int32_t n_tokens = 0;     // prompt tokens (pp) or generated tokens (tg)
    int32_t depth = 0;
    bool is_prefill = false;
    Summary tokens_per_second;
    double gb_per_second = 0;  // decode: bytes moved per step / step time (weights + KV read/write)
    double tflops = 0;         // prefill: model FLOPs / time
};

// One scenario row: the time to the first token's logits (or to process exit, for cold start).
struct ScenarioRow {
    std::string name;          // "prefix cache miss", "prefix cache hit", "session restore", ...
    int32_t n_tokens = 0;      // prompt/history tokens involved
    int32_t n_computed = 0;    // of which the model actually ran
    Summary seconds;
    std::string note;
    double restore_gb_per_second = 0;  // session restore: KV bytes read / time of the restore alone
};

// Bytes a decode step moves at context length n_ctx_tokens (the token being decoded included): every
// weight once (only one row of the embedding table, all of it again when tied to the output), plus the
// K/V read for attention and written for the new token.
double decode_step_bytes(const ModelFile& model, DType kv_dtype, int64_t n_ctx_tokens);
// FLOPs of prefilling n_tokens on top of `depth` cached tokens: 2 per multiply-add of the weight matrices
// for every token (the output head only for the last token, as the forward computes it), plus causal
// attention scores and weighted sums.
double prefill_flops(const ModelConfig& config, int64_t n_tokens, int64_t depth);

using BenchProgress = std::function<void(const std::string& what)>;

// Throughput rows for every (test, depth) in the plan, after one untimed warm-up per test.
std::vector<BenchRow> run_throughput(Engine& engine, const BenchPlan& plan, const BenchProgress& progress);

// Prefix-cache hit vs miss and session restore vs recompute at `n_tokens` of history. The session store
// lives in a temporary directory removed afterwards.
std::vector<ScenarioRow> run_cache_scenarios(Engine& engine, int32_t n_tokens, int32_t n_reps,
                                             const BenchProgress& progress);

// Spawns `command` (argv[0] is the executable) n_reps times, stdout/stderr discarded, and times each
// from spawn to exit. Throws Error if a run fails.
Summary time_process(const std::vector<std::string>& command, int32_t n_reps);

}  // namespace kvlm
