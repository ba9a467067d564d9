// `kvlm bench`: opens the engine with a context large enough for the plan, runs the throughput tests and
// scenarios (bench.h), and prints a markdown table or JSON on stdout. Progress goes to stderr on a terminal.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include "generate/bench.h"
#include "cli/cli.h"
#include "util/error.h"

namespace kvlm {

namespace {

std::string self_executable() {
    std::vector<char> buffer(4096);
    ssize_t n = readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
    if (n <= 0) throw_error("bench: cannot find the kvlm executable (/proc/self/exe) for the cold-start run");
    return std::string(buffer.data(), size_t(n));
}

void check_lengths(const std::vector<int32_t>& values, const char* flag, bool allow_zero) {
    for (int32_t v : values)
        if (v < 0 || (!allow_zero && v == 0)) throw_error("{}: {} is not a valid token count", flag, v);
}

int32_t context_needed(const BenchOptions& o, int32_t scenario_tokens) {
    int32_t longest = scenario_tokens;
    for (int32_t depth : o.depths) {
        for (int32_t p : o.prompt_lengths) longest = std::max(longest, depth + p);
        for (int32_t n : o.gen_lengths) longest = std::max(longest, depth + n);
    }
    return longest;
}

// "12.3" or "-" when the peak is unknown.
std::string percent_of(double value, double peak) {
    return peak > 0 ? fmt::format("{:.1f}", 100.0 * value / peak) : "-";
}

std::string format_size(uint64_t bytes) {
    if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30));
    return fmt::format("{:.2f} MiB", double(bytes) / double(1ull << 20));
}

struct Report {
    std::string model_name;
    uint64_t model_bytes = 0;
    int64_t n_params = 0;
    std::string backend;
    std::string kv_dtype;  // the cache type the engine settled on (--kv-dtype auto resolves per device)
    int32_t n_threads = 0;
    DevicePeaks peaks;
    std::vector<BenchRow> rows;
    std::vector<ScenarioRow> scenarios;
};

void print_markdown(const Report& r) {
    fmt::print("| model | size | params | backend | test | t/s | GB/s | % of peak BW | TFLOP/s | % of bf16 peak |\n");
    fmt::print("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (const BenchRow& row : r.rows) {
        std::string gb = row.is_prefill ? "-" : fmt::format("{:.1f}", row.gb_per_second);
        std::string tf = row.is_prefill ? fmt::format("{:.3f}", row.tflops) : "-";
        fmt::print("| {} | {} | {:.1f} M | {} | {} | {:.2f} ± {:.2f} | {} | {} | {} | {} |\n", r.model_name,
                   format_size(r.model_bytes), double(r.n_params) / 1e6, r.backend, row.test,
                   row.tokens_per_second.mean, row.tokens_per_second.stddev, gb,
                   row.is_prefill ? "-" : percent_of(row.gb_per_second, r.peaks.memory_gb_s), tf,
                   row.is_prefill ? percent_of(row.tflops, r.peaks.bf16_tflops) : "-");
    }
    if (!r.scenarios.empty()) {
        fmt::print("\n| scenario | tokens | computed | time ms | note |\n| --- | ---: | ---: | ---: | --- |\n");
        for (const ScenarioRow& s : r.scenarios)
            fmt::print("| {} | {} | {} | {:.2f} ± {:.2f} | {} |\n", s.name, s.n_tokens, s.n_computed,
                       s.seconds.mean * 1e3, s.seconds.stddev * 1e3, s.note);
    }
    fmt::print("\nKV cache: {}\npeaks: {}\n", r.kv_dtype, r.peaks.memory_gb_s > 0 || r.peaks.bf16_tflops > 0
                                    ? fmt::format("{:.0f} GB/s, {:.0f} bf16 TFLOP/s ({})", r.peaks.memory_gb_s,
                                                  r.peaks.bf16_tflops, r.peaks.source)
                                    : std::string("unknown for this device (no % of peak)"));
}

nlohmann::json summary_json(const Summary& s) { return {{"mean", s.mean}, {"stddev", s.stddev}, {"n", s.n}}; }

void print_json(const Report& r) {
    nlohmann::json out;
    out["model"] = {{"name", r.model_name}, {"bytes", r.model_bytes}, {"n_params", r.n_params}};
    out["backend"] = r.backend;
    out["kv_dtype"] = r.kv_dtype;
    out["n_threads"] = r.n_threads;
    out["peaks"] = {{"memory_gb_s", r.peaks.memory_gb_s}, {"bf16_tflops", r.peaks.bf16_tflops},
                    {"source", r.peaks.source}};
    out["results"] = nlohmann::json::array();
    for (const BenchRow& row : r.rows) {
        nlohmann::json j = {{"test", row.test},   {"kind", row.is_prefill ? "prefill" : "decode"},
                            {"n_tokens", row.n_tokens}, {"depth", row.depth},
                            {"tokens_per_second", summary_json(row.tokens_per_second)}};
        if (row.is_prefill) {
            j["tflops"] = row.tflops;
            if (r.peaks.bf16_tflops > 0) j["fraction_of_bf16_peak"] = row.tflops / r.peaks.bf16_tflops;
        } else {
            j["gb_per_second"] = row.gb_per_second;
            if (r.peaks.memory_gb_s > 0) j["fraction_of_peak_bandwidth"] = row.gb_per_second / r.peaks.memory_gb_s;
        }
        out["results"].push_back(j);
    }
    out["scenarios"] = nlohmann::json::array();
    for (const ScenarioRow& s : r.scenarios) {
        nlohmann::json j = {{"name", s.name},
                            {"n_tokens", s.n_tokens},
                            {"n_computed", s.n_computed},
                            {"seconds", summary_json(s.seconds)},
                            {"note", s.note}};
        if (s.restore_gb_per_second > 0) j["restore_gb_per_second"] = s.restore_gb_per_second;
        out["scenarios"].push_back(j);
    }
    fmt::print("{}\n", out.dump(2));
}

}  // namespace

int cmd_bench(const BenchOptions& o) {
    if (o.output != "md" && o.output != "json") throw_error("-o: '{}' is not an output format (md or json)", o.output);
    if (o.n_reps < 1) throw_error("-r: {} repetitions; at least 1 is needed", o.n_reps);
    check_lengths(o.prompt_lengths, "-p", true);
    check_lengths(o.gen_lengths, "-n", true);
    check_lengths(o.depths, "-d", true);
    if (o.depths.empty()) throw_error("-d: give at least one depth (0 = an empty context)");
    int32_t scenario_tokens = o.scenario_tokens;
    if (scenario_tokens == 0)
        for (int32_t p : o.prompt_lengths) scenario_tokens = scenario_tokens ? scenario_tokens : p;
    if (o.scenarios && scenario_tokens < 1) throw_error("--scenario-tokens: give a history length (or -p N)");

    const EngineFlags& flags = o.engine;
    EngineOptions engine_options = to_engine_options(flags);
    engine_options.n_ctx = context_needed(o, o.scenarios ? scenario_tokens : 0);
    // The hit scenario holds two sequences of the same prompt; their partial last blocks are separate.
    engine_options.n_spare_blocks = 2;
    if (engine_options.n_ctx < 1) throw_error("nothing to measure: every -p and -n is 0 and scenarios are off");
    const int32_t model_n_ctx = ModelFile::open(flags.model_path)->config().n_ctx;
    if (model_n_ctx < engine_options.n_ctx)
        throw_error("{}: the plan needs a context of {} tokens, more than the model's {} (lower -p, -n, -d or "
                    "--scenario-tokens)", flags.model_path, engine_options.n_ctx, model_n_ctx);
    Engine engine(flags.model_path, engine_options);

    const bool on_terminal = isatty(STDERR_FILENO);
    BenchProgress progress = [&](const std::string& what) {
        if (on_terminal) fmt::print(stderr, "\r\033[Kbench: {}", what);
    };

    Report report;
    report.model_name = std::filesystem::path(flags.model_path).stem().string();
    report.model_bytes = engine.model().file_size();
    report.n_params = engine.model().config().n_params();
    report.backend = engine.backend().name();
    report.kv_dtype = dtype_name(engine.kv_dtype());
    // -t 0 (the default) is every hardware thread, as ThreadPool takes it.
    report.n_threads = flags.n_threads > 0 ? flags.n_threads
                                           : int32_t(std::max(1u, std::thread::hardware_concurrency()));
    report.peaks = engine.backend().peaks();

    BenchPlan plan;
    plan.prompt_lengths = o.prompt_lengths;
    plan.gen_lengths = o.gen_lengths;
    plan.depths = o.depths;
    plan.n_reps = o.n_reps;
    report.rows = run_throughput(engine, plan, progress);
    if (o.scenarios) {
        report.scenarios = run_cache_scenarios(engine, scenario_tokens, o.n_reps, progress);
        if (progress) progress("cold start");
        std::vector<std::string> command = {self_executable(), "run", "-m", flags.model_path, "-p", "Hello", "-n", "1",
                                            "--temp", "0", "-q", "--device", flags.device, "-c", "64",
                                            "--kv-dtype", flags.kv_dtype, "--block-size",
                                            std::to_string(flags.block_size)};
        if (flags.n_threads > 0) command.insert(command.end(), {"-t", std::to_string(flags.n_threads)});
        report.scenarios.push_back({"cold start", 0, 0, time_process(command, o.n_reps),
                                    "new process: load, first token, exit (page cache warm)"});
    }
    if (on_terminal) fmt::print(stderr, "\r\033[K");

    if (o.output == "json")
        print_json(report);
    else
        print_markdown(report);
    return 0;
}

}  // namespace kvlm
