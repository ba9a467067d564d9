// Benchmark measurements over the engine's backend (see bench.h). Each timed region covers only model
// work and KV bookkeeping: random token ids stand in for tokenization and sampling, and the prefix cache
// is emptied of unreferenced blocks before every repetition so that no repetition reuses another's KV.
#include "generate/bench.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <cstring>

#include <fmt/ranges.h>

#include "generate/generate.h"
#include "session/session_run.h"
#include "session/session_store.h"
#include "util/error.h"

extern char** environ;

namespace kvlm {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int32_t n_vocab, int32_t n) {
    std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t& t : tokens) t = pick(rng);
    return tokens;
}

// A sequence already holding `depth` random tokens (untimed), on a cache with nothing else cached.
Sequence start_sequence(Engine& engine, std::mt19937_64& rng, int32_t depth) {
    engine.prefix_cache().evict_unreferenced();
    Sequence seq;
    if (depth > 0) prefill(engine, seq, random_tokens(rng, engine.model().config().n_vocab, depth));
    return seq;
}

void finish_sequence(Engine& engine, Sequence& seq) {
    engine.prefix_cache().release(seq);
    engine.prefix_cache().evict_unreferenced();
}

double time_prefill(Engine& engine, std::mt19937_64& rng, int32_t n_tokens, int32_t depth) {
    Sequence seq = start_sequence(engine, rng, depth);
    std::vector<int32_t> prompt = random_tokens(rng, engine.model().config().n_vocab, n_tokens);
    auto start = Clock::now();
    prefill(engine, seq, prompt);
    double seconds = seconds_since(start);
    finish_sequence(engine, seq);
    return seconds;
}

// n_tokens decode steps (one token through the model each, logits to the host) after `depth` tokens.
double time_decode(Engine& engine, std::mt19937_64& rng, int32_t n_tokens, int32_t depth) {
    Sequence seq = start_sequence(engine, rng, depth);
    PrefixCache& cache = engine.prefix_cache();
    std::vector<int32_t> tokens = random_tokens(rng, engine.model().config().n_vocab, n_tokens);
    std::vector<float> logits(size_t(engine.model().config().n_vocab));
    auto start = Clock::now();
    for (int32_t token : tokens) {
        cache.reserve(seq, seq.table.n_tokens + 1);
        engine.backend().forward(&token, 1, seq.table.n_tokens, seq.table, logits.data());
        seq.table.n_tokens += 1;
        seq.tokens.push_back(token);
        cache.commit(seq);
    }
    double seconds = seconds_since(start);
    finish_sequence(engine, seq);
    return seconds;
}

std::string test_name(bool is_prefill, int32_t n_tokens, int32_t depth) {
    std::string name = fmt::format("{}{}", is_prefill ? "pp" : "tg", n_tokens);
    if (depth > 0) name += fmt::format(" @ d{}", depth);
    return name;
}

}  // namespace

Summary summarize(const std::vector<double>& values) {
    Summary s;
    s.n = int32_t(values.size());
    if (values.empty()) return s;
    for (double v : values) s.mean += v;
    s.mean /= double(values.size());
    if (values.size() > 1) {
        double sum_sq = 0;
        for (double v : values) sum_sq += (v - s.mean) * (v - s.mean);
        s.stddev = std::sqrt(sum_sq / double(values.size() - 1));
    }
    return s;
}

double decode_step_bytes(const ModelFile& model, DType kv_dtype, int64_t n_ctx_tokens) {
    const ModelConfig& config = model.config();
    double bytes = 0;
    for (const TensorInfo& tensor : model.tensors()) {
        if (tensor.name == "token_embd.weight") {
            bytes += double(tensor.n_bytes) / double(config.n_vocab);  // one row
            if (config.tied_embeddings) bytes += double(tensor.n_bytes);
        } else {
            bytes += double(tensor.n_bytes);
        }
    }
    const double kv_per_token = double(kv_bytes_per_token(config, kv_dtype));
    return bytes + kv_per_token * double(n_ctx_tokens);  // reads n_ctx - 1 cached tokens, writes 1
}

double prefill_flops(const ModelConfig& c, int64_t n_tokens, int64_t depth) {
    const double q_width = double(c.n_heads) * c.head_dim, kv_width = double(c.n_kv_heads) * c.head_dim;
    const double per_layer_params = double(c.n_embd) * (q_width + 2 * kv_width) + q_width * c.n_embd +
                                    3.0 * double(c.n_embd) * c.n_ff;
    double flops = 2.0 * double(n_tokens) * per_layer_params * c.n_layers;
    flops += 2.0 * double(c.n_embd) * c.n_vocab;  // output head, last token only
    // Token i (0-based) attends to depth + i + 1 positions: QK^T and PV are 2 FLOPs each per element.
    const double n_attended = double(n_tokens) * double(depth) + double(n_tokens) * double(n_tokens + 1) / 2.0;
    flops += 4.0 * q_width * n_attended * c.n_layers;
    return flops;
}

std::vector<BenchRow> run_throughput(Engine& engine, const BenchPlan& plan, const BenchProgress& progress) {
    std::mt19937_64 rng(plan.seed);
    std::vector<BenchRow> rows;
    auto measure = [&](bool is_prefill, int32_t n_tokens, int32_t depth) {
        BenchRow row;
        row.test = test_name(is_prefill, n_tokens, depth);
        row.n_tokens = n_tokens;
        row.depth = depth;
        row.is_prefill = is_prefill;
        auto once = [&] {
            return is_prefill ? time_prefill(engine, rng, n_tokens, depth) : time_decode(engine, rng, n_tokens, depth);
        };
        if (progress) progress(row.test + " (warm-up)");
        once();
        std::vector<double> rates;
        for (int32_t rep = 0; rep < plan.n_reps; rep++) {
            if (progress) progress(fmt::format("{} ({}/{})", row.test, rep + 1, plan.n_reps));
            rates.push_back(double(n_tokens) / once());
        }
        row.tokens_per_second = summarize(rates);
        const double seconds = double(n_tokens) / row.tokens_per_second.mean;
        if (is_prefill) {
            row.tflops = prefill_flops(engine.model().config(), n_tokens, depth) / seconds / 1e12;
        } else {
            double bytes = 0;
            for (int32_t i = 0; i < n_tokens; i++) bytes += decode_step_bytes(engine.model(), engine.kv_dtype(), depth + i + 1);
            row.gb_per_second = bytes / seconds / 1e9;
        }
        rows.push_back(row);
    };
    for (int32_t depth : plan.depths) {
        for (int32_t n : plan.prompt_lengths)
            if (n > 0) measure(true, n, depth);
        for (int32_t n : plan.gen_lengths)
            if (n > 0) measure(false, n, depth);
    }
    return rows;
}

std::vector<ScenarioRow> run_cache_scenarios(Engine& engine, int32_t n_tokens, int32_t n_reps,
                                             const BenchProgress& progress) {
    namespace fs = std::filesystem;
    std::mt19937_64 rng(7);
    const int32_t n_vocab = engine.model().config().n_vocab;
    PrefixCache& cache = engine.prefix_cache();
    std::vector<double> miss, hit, restore, recompute, restore_only;
    double restored_bytes = 0;
    size_t n_files = 0;  // block files of the last restore
    int32_t n_hit_computed = 0, n_restore_computed = 0;

    fs::path dir = fs::temp_directory_path() / fmt::format("kvlm-bench-{}", getpid());
    SessionStore store(dir.string());
    struct RemoveDir {
        fs::path path;
        ~RemoveDir() {
            std::error_code ignored;
            fs::remove_all(path, ignored);
        }
    } remove_dir{dir};

    for (int32_t rep = 0; rep <= n_reps; rep++) {  // rep 0 is the warm-up
        const bool timed = rep > 0;
        if (progress) progress(fmt::format("cache scenarios ({}/{})", rep, n_reps));
        std::vector<int32_t> prompt = random_tokens(rng, n_vocab, n_tokens);

        // Miss then hit: the same prompt twice, the second time with its blocks cached.
        cache.evict_unreferenced();
        Sequence first;
        Prefill cold = prefill(engine, first, prompt);
        Sequence second;
        Prefill warm = prefill(engine, second, prompt);
        n_hit_computed = warm.n_prefilled;
        if (timed) miss.push_back(cold.seconds), hit.push_back(warm.seconds);

        // The same history saved as a session, then restored into a cold pool vs computed again.
        const std::string name = fmt::format("bench-{}", rep);
        save_session(engine, store, name, first, first.tokens, RestoredSession{}, 0);
        cache.release(first);
        cache.release(second);
        cache.evict_unreferenced();
        // The store as a next turn finds it, its writes done (a writeback still running would take a core), and
        // the pool as a next turn's new process has it: untouched memory, which the restore's reads fault in.
        ::sync();
        KVLM_ASSERT(engine.pool().n_used() == 0, "bench: a cold pool needs every block free");
        engine.backend().make_kv_memory_cold();

        auto start = Clock::now();
        Sequence restored_seq;
        RestoredSession restored = restore_session(engine, store, name, restored_seq);
        const double read_seconds = seconds_since(start);
        n_files = restored.n_blocks_read;
        // A partial block's file holds its tokens' rows only.
        restored_bytes = double(restored_seq.table.n_tokens) *
                         double(kv_bytes_per_token(engine.model().config(), engine.kv_dtype()));
        Prefill tail = prefill(engine, restored_seq, tokens_to_prefill(engine, restored_seq, restored, {}));
        const double restore_seconds = seconds_since(start);
        n_restore_computed = tail.n_prefilled;
        if (int32_t(restored_seq.tokens.size()) != n_tokens || tail.n_prefilled > engine.pool().block_size())
            throw_error("bench: the restored session holds {} tokens, {} recomputed; expected {} with at most a block "
                        "recomputed", restored_seq.tokens.size(), tail.n_prefilled, n_tokens);
        cache.release(restored_seq);
        cache.evict_unreferenced();

        Sequence again;
        Prefill recomputed = prefill(engine, again, prompt);
        cache.release(again);
        cache.evict_unreferenced();
        if (timed) restore.push_back(restore_seconds), restore_only.push_back(read_seconds), recompute.push_back(recomputed.seconds);
    }

    std::vector<ScenarioRow> rows;
    rows.push_back({"prefix cache miss", n_tokens, n_tokens, summarize(miss), "prompt computed from scratch"});
    rows.push_back({"prefix cache hit", n_tokens, n_hit_computed, summarize(hit), "same prompt, its full blocks cached"});
    rows.push_back({"session recompute", n_tokens, n_tokens, summarize(recompute), "history prefilled again"});
    const Summary read = summarize(restore_only);
    const double gb_per_second = read.mean > 0 ? restored_bytes / read.mean / 1e9 : 0;
    rows.push_back({"session restore", n_tokens, n_restore_computed, summarize(restore),
                    fmt::format("history read from disk (page cache warm) into a cold pool: {:.1f} MiB of KV in "
                                "{:.2f} ms, {:.2f} GB/s ({} block files read)",
                                restored_bytes / 1048576.0, read.mean * 1e3, gb_per_second, n_files),
                    gb_per_second});
    return rows;
}

Summary time_process(const std::vector<std::string>& command, int32_t n_reps) {
    std::vector<char*> argv;
    for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    std::vector<double> seconds;
    for (int32_t rep = 0; rep < n_reps; rep++) {
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        auto start = Clock::now();
        pid_t pid = 0;
        int spawn_error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        if (spawn_error != 0) throw_error("bench: cannot start {}: {}", command[0], std::strerror(spawn_error));
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        seconds.push_back(seconds_since(start));
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            throw_error("bench: cold-start run `{}` failed (exit status {})", fmt::join(command, " "), status);
    }
    return summarize(seconds);
}

}  // namespace kvlm
