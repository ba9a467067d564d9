// The CUDA backend through the real binary on stories260K: `--device cuda` greedy text equals the golden
// text (to the first near tie of the CPU's logits), decode with CUDA graphs off gives the same text,
// `--device auto` says it picked CUDA, a session saved and restored on the GPU continues as the same
// session does on the CPU (same texts, same reuse counts), and `kvlm bench --device cuda` reports the
// bandwidth and FLOP/s columns; a KV pool that does not fit in device memory is a clear error; --kv-dtype
// auto follows the model's weight type on the GPU; quantized stories260K gives the CPU's greedy text;
// KVLM_CUDA_PROFILE=1 prints the decode stages' table and keeps the text. Without a usable device (or in CUDA=0 builds) each case
// says "SKIPPED: no CUDA device (...)" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "compute/backend.h"
#include "format/model_file.h"
#include "kv/kv_pool.h"
#include "session/session_store.h"
#include "support/cuda_emu.h"
#include "support/test_util.h"
#include "tokenizer/tokenizer.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories(const std::string& relative) { return data_path("stories260K/" + relative); }
std::string stories_model() { return converted_model("stories-gguf", {stories("stories260K.gguf")}); }

// Greedy text up to the first step where the CPU's (teacher-forced) top two logits are closer than `gap`:
// past such a near tie, a GPU's different summation order may legitimately pick the other token.
std::string golden_prefix(float gap) {
    auto j = nlohmann::json::parse(read_file(stories("reference_greedy_f32.json")));
    std::vector<int32_t> greedy = j.at("greedy_token_ids").get<std::vector<int32_t>>();
    std::vector<int32_t> tokens = {1};
    tokens.insert(tokens.end(), greedy.begin(), greedy.end() - 1);
    auto model = ModelFile::open(stories_model());
    BackendOptions options;
    options.block_size = 16;
    options.n_kv_blocks = int32_t(tokens.size() + 15) / 16 + 1;
    auto cpu = make_cpu_backend(*model, options);
    KvPool pool(options.n_kv_blocks, options.block_size);
    BlockTable table;
    reserve_tokens(pool, table, int32_t(tokens.size()));
    const int32_t n_vocab = model->config().n_vocab;
    std::vector<float> logits(tokens.size() * size_t(n_vocab));
    cpu->forward(tokens.data(), int32_t(tokens.size()), 0, table, logits.data(), true);
    table.n_tokens = int32_t(tokens.size());
    release_table(pool, table);
    size_t first_tie = greedy.size();
    for (size_t p = 0; p < greedy.size() && first_tie == greedy.size(); p++) {
        std::vector<float> row(logits.begin() + p * n_vocab, logits.begin() + (p + 1) * n_vocab);
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
        if (row[0] - row[1] < gap) first_tie = p;
    }
    Tokenizer tokenizer(model->metadata().tokenizer);
    std::string prefix = tokenizer.decode(std::vector<int32_t>(greedy.begin(), greedy.begin() + first_tie));
    if (!prefix.empty() && prefix[0] == ' ') prefix.erase(0, 1);  // as llama2.c prints after BOS
    MESSAGE("stories260K: first near tie (gap < " << gap << ") at step " << first_tie);
    return prefix;
}

CliResult run_turn(const std::string& dir, const std::string& device, const std::string& prompt) {
    return run_kvlm({"run", "-m", stories_model(), "-p", prompt, "-n", "24", "--temp", "0", "-c", "512", "--session",
                     "s", "--session-dir", dir, "--device", device, "--verbose"});
}

int count(const std::string& err, const std::string& what) {
    std::smatch m;
    return std::regex_search(err, m, std::regex("(\\d+) " + what)) ? std::stoi(m[1].str()) : -1;
}

}  // namespace

TEST_CASE("cuda cli: stories260K greedy text on the GPU equals the golden text, graphs and programmatic launches on and off") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf")) || !have_data(stories("expected_t0_n200.txt"))) return;
    const std::string expected = read_file(stories("expected_t0_n200.txt"));
    const std::string prefix = golden_prefix(2e-3f);
    REQUIRE(expected.compare(0, prefix.size(), prefix) == 0);
    const std::vector<std::string> args = {"run", "-m", stories_model(), "-p", "", "-n", "200", "--temp", "0"};

    std::vector<std::string> cuda_args = args;
    cuda_args.insert(cuda_args.end(), {"--device", "cuda", "-v"});  // -v: the device line
    CliResult r = run_kvlm(cuda_args);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.err.find("kvlm: device cuda") != std::string::npos);
    CHECK(r.out.compare(0, prefix.size(), prefix) == 0);
    if (prefix.size() == expected.size()) CHECK(r.out == expected);

    CliResult eager = run_shell("KVLM_CUDA_GRAPHS=0 " + kvlm_command(cuda_args));
    REQUIRE_MESSAGE(eager.exit_code == 0, eager.err);
    CHECK(eager.err.find("CUDA graphs off") != std::string::npos);
    CHECK(eager.out == r.out);

    // Programmatic dependent launches (the emulated device is sm_90): on by default, KVLM_CUDA_PDL=0 turns
    // them off, the same text either way.
    CHECK(r.err.find(", programmatic launches") != std::string::npos);
    CliResult plain = run_shell("KVLM_CUDA_PDL=0 " + kvlm_command(cuda_args));
    REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
    CHECK(plain.err.find("programmatic launches") == std::string::npos);
    CHECK(plain.out == r.out);

    // KVLM_CUDA_PROFILE: the same text, and a table of the decode stages on stderr.
    CliResult profiled = run_shell("KVLM_CUDA_PROFILE=1 " + kvlm_command(cuda_args));
    REQUIRE_MESSAGE(profiled.exit_code == 0, profiled.err);
    CHECK(profiled.out == r.out);
    CHECK(profiled.err.find("decode profiled: CUDA graphs off") != std::string::npos);
    std::smatch steps;
    REQUIRE_MESSAGE(std::regex_search(profiled.err, steps, std::regex("decode profile over (\\d+) steps")), profiled.err);
    CHECK(std::stoi(steps[1].str()) >= 199);  // 200 tokens: one from the prompt's logits, the rest decoded
    // stories260K has 5 layers: 5 launches per step of each per-layer stage (its f32 pool: RoPE and the pool
    // write in the Q/K/V GEMV).
    for (const char* stage : {"| gemv q/k/v + rope + kv write | 5 |", "| attention | 5 |", "| head gemv | 1 |", "| total | "})
        CHECK_MESSAGE(profiled.err.find(stage) != std::string::npos, stage, "\n", profiled.err);

    std::vector<std::string> auto_args = args;
    auto_args.push_back("-v");  // the device line is printed with -v only
    CliResult automatic = run_kvlm(auto_args);
    REQUIRE_MESSAGE(automatic.exit_code == 0, automatic.err);
    CHECK(automatic.err.find("(auto: a CUDA device is available)") != std::string::npos);
    CHECK(automatic.out == r.out);
}

TEST_CASE("cuda cli: decode copies back only the sampled token's id, unless the host must sort, and queues each step behind the one before (KVLM_CUDA_TRANSFERS)") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    const std::vector<std::string> base = {"run", "-m", stories_model(), "-p", "Once upon a time", "-n", "16", "--device", "cuda"};
    struct Transfers { int steps, per_step, ahead; std::string out, err; };
    auto transfers = [&](std::vector<std::string> extra, const std::string& env = "") {
        std::vector<std::string> args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        CliResult r = run_shell(env + "KVLM_CUDA_TRANSFERS=1 " + kvlm_command(args));
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        std::smatch m;
        REQUIRE_MESSAGE(std::regex_search(r.err, m, std::regex("(\\d+) decode steps, (\\d+) bytes device to host \\((\\d+) per "
                                                              "step\\); (\\d+) of the steps enqueued before the host had "
                                                              "their input token")),
                        r.err);
        const Transfers t{std::stoi(m[1].str()), std::stoi(m[3].str()), std::stoi(m[4].str()), r.out, r.err};
        CHECK(t.steps >= 1);  // up to 15 (16 tokens, the first from the prompt's logits)
        CHECK(t.steps <= 15);
        return t;
    };
    // Greedy and top-k sampling: every step but the first queued behind the one before it (none wasted when
    // -n ends the text; one dropped when the end of the story comes first).
    for (const std::vector<std::string>& settings :
         {std::vector<std::string>{"--temp", "0"}, {"--temp", "0.8", "--seed", "3"}, {"--temp", "1.5", "--seed", "5", "--repeat-penalty", "1.3"}}) {
        const Transfers t = transfers(settings);
        INFO(settings[1]);
        CHECK(t.per_step == 24);
        CHECK(t.ahead >= t.steps - 2);
        CHECK(t.ahead <= t.steps - 1);
        // The same text with each step waiting for the one before (KVLM_CUDA_STEPS_AHEAD=0, the A/B switch).
        const Transfers waiting = transfers(settings, "KVLM_CUDA_STEPS_AHEAD=0 ");
        CHECK(waiting.ahead == 0);
        CHECK(waiting.out == t.out);
    }
    // -v: each token's probability comes back with it (still 24 bytes), the CPU's figure to 3 decimals.
    const Transfers verbose = transfers({"--temp", "0", "-v"});
    CHECK(verbose.per_step == 24);
    std::smatch p;
    REQUIRE_MESSAGE(std::regex_search(verbose.err, p, std::regex("token probability: mean [0-9.]+, lowest [0-9.]+")), verbose.err);
    std::vector<std::string> cpu_args = base;
    cpu_args.back() = "cpu";
    cpu_args.insert(cpu_args.end(), {"--temp", "0", "-v"});
    const CliResult cpu = run_kvlm(cpu_args);
    REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
    CHECK(cpu.out == verbose.out);
    CHECK_MESSAGE(cpu.err.find(p[0].str()) != std::string::npos, cpu.err);
    const Transfers floor = transfers({"--temp", "0.8", "--top-k", "0", "--min-p", "0.1"});  // the min-p floor
    CHECK(floor.per_step == 24);
    CHECK(floor.ahead == 0);  // the device may hand such a step back to the host: not queued
    const Transfers host = transfers({"--temp", "0.8", "--top-k", "0", "--min-p", "0"});  // whole vocabulary: the host sorts
    CHECK(host.per_step == 512 * 4);
    CHECK(host.ahead == 0);
}

TEST_CASE("cuda cli: a GPU restore reads its blocks in batches, and a damaged one keeps only those before it") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    auto turn = [](const std::string& dir, const std::string& prompt, std::vector<std::string> extra) {
        std::vector<std::string> args = {"run", "-m", stories_model(), "-p", prompt, "-n", "24", "--temp", "0",
                                         "-c", "512", "--session", "s", "--session-dir", dir, "--device", "cuda", "-v"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run_kvlm(args);
    };
    // Block size 2: ~60 history tokens in ~30 block files, read by parallel readers into one staging batch.
    TempDir clean, damaged;
    for (const std::string& dir : {clean.path(), damaged.path()}) {
        REQUIRE(turn(dir, "Once upon a time", {"--block-size", "2"}).exit_code == 0);
        REQUIRE(turn(dir, " Lily saw a big red ball.", {}).exit_code == 0);
    }
    const SessionManifest m = SessionStore(damaged.path()).load_manifest("s");
    REQUIRE(m.blocks.size() >= 24);
    CliResult expected = turn(clean.path(), " Then", {});
    REQUIRE_MESSAGE(expected.exit_code == 0, expected.err);
    CHECK(count(expected.err, "restored from disk") == m.n_kv_tokens);

    const std::string path = SessionStore(damaged.path()).block_path(m.blocks[11].hash);
    std::string bytes = read_file(path);
    bytes[bytes.size() - 5] ^= 0x10;
    write_file(path, bytes);
    CliResult r = turn(damaged.path(), " Then", {});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(r.err.find("warning: session 's': block 11 (" + m.blocks[11].hash.hex() +
                             ") checksum mismatch (the file is damaged): recomputing") != std::string::npos,
                  r.err);
    CHECK(count(r.err, "restored from disk") == 22);
    // The same text (not the same logits bits: on the GPU the recomputed blocks come from the prefill GEMMs,
    // the restored ones from the decode GEMVs that first wrote them).
    CHECK(r.out == expected.out);
}

TEST_CASE("cuda cli: a session saved and restored on the GPU continues as the same session on the CPU") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    const std::vector<std::string> turns = {"Once upon a time", " Lily saw a big red ball.", " Then"};
    TempDir gpu_dir, cpu_dir;
    for (size_t t = 0; t < turns.size(); t++) {
        CAPTURE(t);
        CliResult gpu = run_turn(gpu_dir.path(), "cuda", turns[t]);
        CliResult cpu = run_turn(cpu_dir.path(), "cpu", turns[t]);
        REQUIRE_MESSAGE(gpu.exit_code == 0, gpu.err);
        REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
        CHECK(gpu.out == cpu.out);
        CHECK(count(gpu.err, "restored from disk") == count(cpu.err, "restored from disk"));
        CHECK(count(gpu.err, "prefilled") == count(cpu.err, "prefilled"));
        if (t > 0) CHECK(count(gpu.err, "restored from disk") > 0);
    }
    CliResult verify = run_kvlm({"session", "verify", "s", "--session-dir", gpu_dir.path()});
    CHECK_MESSAGE(verify.exit_code == 0, verify.err);
}

TEST_CASE("cuda cli: kvlm bench --device cuda reports bandwidth and FLOP/s against the device's peaks") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    CliResult r = run_kvlm({"bench", "-m", stories_model(), "-p", "64", "-n", "16", "-r", "2", "--device", "cuda",
                            "-o", "json", "--no-scenarios"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    auto j = nlohmann::json::parse(r.out);
    MESSAGE("bench json: " << r.out.substr(0, 2000));
    CHECK(j.at("backend").get<std::string>().rfind("cuda", 0) == 0);
    // The memory peak is known for every device (from its clock and bus width when not in the datasheet
    // table); the bf16 peak only for the table's devices: elsewhere the prefill row gives TFLOP/s alone.
    const auto& peaks = j.at("peaks");
    CHECK(peaks.at("memory_gb_s").get<double>() > 0);
    const bool bf16_peak_known = peaks.at("bf16_tflops").get<double>() > 0;
    if (!bf16_peak_known) CHECK(peaks.at("source").get<std::string>().find("bf16 peak unknown") != std::string::npos);
    REQUIRE(j.at("results").size() == 2);
    for (const auto& row : j.at("results")) {
        CHECK(row.at("tokens_per_second").at("mean").get<double>() > 0);
        if (row.at("kind") == "decode") {
            CHECK(row.at("fraction_of_peak_bandwidth").get<double>() > 0);
        } else {
            CHECK(row.at("tflops").get<double>() > 0);
            CHECK(row.contains("fraction_of_bf16_peak") == bf16_peak_known);
            if (bf16_peak_known) CHECK(row.at("fraction_of_bf16_peak").get<double>() > 0);
        }
    }
}

TEST_CASE("cuda cli: a KV pool larger than device memory is an error naming what did not fit and the option") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    // 200 GiB is more than any single GPU kvlm targets has (an H200 has 141 GB); the emulator has 4 GiB.
    CliResult r = run_kvlm({"run", "-m", stories_model(), "-p", "Once", "-n", "4", "--device", "cuda", "--kv-mem",
                            "200GiB"});
    CHECK(r.exit_code != 0);
    CHECK(r.out.empty());
    CHECK_MESSAGE(r.err.find("KV pool") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("does not fit in device memory") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("lower --kv-mem") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("halve it with --kv-dtype f16") != std::string::npos, r.err);  // the default cache is f32
    // A 16-bit cache is not told to become one, nor q8_0 where head_dim (8 here) holds no whole block.
    CliResult bf16 = run_kvlm({"run", "-m", stories_model(), "-p", "Once", "-n", "4", "--device", "cuda", "--kv-mem",
                               "200GiB", "--kv-dtype", "bf16"});
    CHECK(bf16.exit_code != 0);
    CHECK_MESSAGE(bf16.err.find("halve it") == std::string::npos, bf16.err);
}

TEST_CASE("cuda cli: --kv-dtype auto takes a 16-bit model's type on the GPU, f32 for an f32 model") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    const std::string bf16 = converted_model("stories-bf16", {stories("stories260K.gguf"), "--dtype", "bf16"});
    CliResult r = run_kvlm({"run", "-m", bf16, "-p", "Once", "-n", "4", "--temp", "0", "--device", "cuda", "-v"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(r.err.find("KV cache bf16 (auto: the model's bf16 weights on CUDA)") != std::string::npos, r.err);
    CliResult f32 =
        run_kvlm({"run", "-m", stories_model(), "-p", "Once", "-n", "4", "--temp", "0", "--device", "cuda", "-v"});
    REQUIRE_MESSAGE(f32.exit_code == 0, f32.err);
    CHECK_MESSAGE(f32.err.find("KV cache f32 (auto: the model's f32 weights)") != std::string::npos, f32.err);
}

TEST_CASE("cuda cli: KVLM_CUDA_PERSISTENT decodes as a launch per stage does, and names why a model cannot use it") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    const std::string bf16 = converted_model("stories-bf16", {stories("stories260K.gguf"), "--dtype", "bf16"});
    for (const char* temp : {"0", "0.8"}) {
        CAPTURE(temp);
        const std::string command = kvlm_command({"run", "-m", bf16, "-p", "Once upon a time", "-n", "48", "--temp",
                                                  temp, "--seed", "5", "--device", "cuda", "-v"});
        CliResult stages = run_shell(command), persistent = run_shell("KVLM_CUDA_PERSISTENT=1 " + command);
        REQUIRE_MESSAGE(stages.exit_code == 0, stages.err);
        REQUIRE_MESSAGE(persistent.exit_code == 0, persistent.err);
        CHECK_MESSAGE(persistent.err.find("decode steps in one persistent kernel (") != std::string::npos,
                      persistent.err);
        CHECK(persistent.out == stages.out);
        CHECK(persistent.out.size() > 40);
    }
    {  // 3 blocks per SM: the build whose registers fit 3 (on the emulator over 8 SMs: 24 blocks, whose fiber
       // stacks fit; a real device ignores KVLM_CUDA_EMU_SMS)
        const std::string command =
            "KVLM_CUDA_EMU_SMS=8 " + kvlm_command({"run", "-m", bf16, "-p", "Once upon a time", "-n", "48", "--temp",
                                                   "0", "--device", "cuda", "-v"});
        CliResult stages = run_shell(command), dense = run_shell("KVLM_CUDA_PERSISTENT=3 " + command);
        REQUIRE_MESSAGE(stages.exit_code == 0, stages.err);
        REQUIRE_MESSAGE(dense.exit_code == 0, dense.err);
        if (cuda_emulated())
            CHECK_MESSAGE(dense.err.find("decode steps in one persistent kernel (24 blocks)") != std::string::npos,
                          dense.err);
        CHECK(dense.out == stages.out);
    }
    CliResult f32 = run_shell("KVLM_CUDA_PERSISTENT=1 " + kvlm_command({"run", "-m", stories_model(), "-p", "Once",
                                                                        "-n", "4", "--device", "cuda"}));
    CHECK(f32.exit_code != 0);
    CHECK_MESSAGE(
        f32.err.find("KVLM_CUDA_PERSISTENT) cannot run here: weights are not f16 or bf16") != std::string::npos,
        f32.err);
}

TEST_CASE("cuda cli: a KVLM_CUDA_* variable that is not a number is an error naming it; the CPU ignores them") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    const std::vector<std::string> args = {"run", "-m", stories_model(), "-p", "x", "-n", "1", "--device"};
    std::vector<std::string> on_gpu = args, on_cpu = args;
    on_gpu.push_back("cuda"), on_cpu.push_back("cpu");
    CliResult bad = run_shell("KVLM_CUDA_ATTN_FILL=many " + kvlm_command(on_gpu));
    CHECK(bad.exit_code != 0);
    CHECK_MESSAGE(bad.err.find("KVLM_CUDA_ATTN_FILL=many: expected a whole number (or auto)") != std::string::npos,
                  bad.err);
    CliResult cpu = run_shell("KVLM_CUDA_ATTN_FILL=many " + kvlm_command(on_cpu));
    CHECK_MESSAGE(cpu.exit_code == 0, cpu.err);
}

TEST_CASE("cuda cli: a quantized model runs on --device cuda (and auto) with the CPU's greedy tokens") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    // stories260K's 64-wide rows are no whole super-block: q4_k_m and iq4_xs give llama-quantize's fallbacks
    // (q5_0, iq4_nl, q8_0), which is what a small model's k-quant file holds.
    for (const char* dtype : {"q8_0", "q4_0", "q4_1", "q4_k_m", "iq4_xs"}) {
        CAPTURE(dtype);
        const std::string model =
            converted_model(std::string("stories-") + dtype, {stories("stories260K.gguf"), "--dtype", dtype});
        const std::vector<std::string> args = {"run", "-m", model, "-p", "Once upon a time", "-n", "24", "--temp", "0"};
        std::vector<std::string> cuda_args = args, cpu_args = args;
        cuda_args.insert(cuda_args.end(), {"--device", "cuda", "-v"});
        cpu_args.insert(cpu_args.end(), {"--device", "cpu"});
        CliResult cuda = run_kvlm(cuda_args), cpu = run_kvlm(cpu_args);
        REQUIRE_MESSAGE(cuda.exit_code == 0, cuda.err);
        REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
        CHECK_MESSAGE(cuda.err.find("kvlm: device cuda") != std::string::npos, cuda.err);  // no CPU fallback
        CHECK(!cpu.out.empty());
        CHECK(cuda.out == cpu.out);
        // --device auto takes the GPU for it too.
        std::vector<std::string> auto_args = args;
        auto_args.push_back("-v");
        CliResult automatic = run_kvlm(auto_args);
        REQUIRE_MESSAGE(automatic.exit_code == 0, automatic.err);
        CHECK_MESSAGE(automatic.err.find("kvlm: device cuda") != std::string::npos, automatic.err);
        CHECK(automatic.out == cuda.out);
    }
}

// Each CUDA transfers line of a run's stderr (decode steps and decode-row passes), each checked to have
// copied back at most `max_bytes` a step or pass on average; returns how many there were.
// kvlm perplexity on the GPU scores on the device and gives the CPU's figure (within float rounding).
TEST_CASE("cuda cli: kvlm perplexity on the GPU gives the CPU's figure") {
    if (!have_cuda()) return;
    const std::string text = stories("TRAINING.md");
    if (!have_data(stories("stories260K.gguf")) || !have_data(text)) return;
    const std::vector<std::string> args = {"perplexity", "-m", stories_model(), "-f", text, "-c", "64",
                                           "--chunks",   "3",  "--json",        "-q"};
    std::vector<std::string> cpu_args = args, cuda_args = args;
    cpu_args.insert(cpu_args.end(), {"--device", "cpu"});
    cuda_args.insert(cuda_args.end(), {"--device", "cuda"});
    CliResult cpu = run_kvlm(cpu_args), cuda = run_kvlm(cuda_args);
    REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
    REQUIRE_MESSAGE(cuda.exit_code == 0, cuda.err);
    const auto ppl = [](const CliResult& r) { return nlohmann::json::parse(r.out).at("ppl").get<double>(); };
    CHECK(ppl(cuda) == doctest::Approx(ppl(cpu)).epsilon(1e-4));
    CHECK(ppl(cuda) > 1.0);
}

static int count_transfer_lines(const std::string& err, int max_bytes) {
    int n_lines = 0;
    const std::regex transfers(
        "CUDA transfers: \\d+ decode( steps|-row passes), \\d+ bytes device to host \\((\\d+) per");
    for (auto it = std::sregex_iterator(err.begin(), err.end(), transfers); it != std::sregex_iterator();
         ++it, n_lines++) {
        CAPTURE((*it)[0].str());
        CHECK(std::stoi((*it)[2].str()) <= max_bytes);
    }
    return n_lines;
}

TEST_CASE(
    "cuda cli: constrained output on the GPU: masks on the host, picks and jump-forward on the device, the CPU's "
    "text") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    const std::string pattern = " there was a (dog|cat) named [A-Z][a-z]{2,8}\\. It was very (happy|sad)\\.";
    // A prompt longer than 16 tokens: a prefill, not a decode-row pass (whose logits would count below).
    const std::string prompt = "Lily and Ben went to the park. They played on the swings all day. Once upon a time";
    const std::vector<std::string> args = {"run", "-m", stories_model(), "-p", prompt, "-n", "60", "--regex", pattern};
    std::vector<std::string> cpu_args = args, cuda_args = args;
    cpu_args.insert(cpu_args.end(), {"--device", "cpu", "--temp", "0"});
    cuda_args.insert(cuda_args.end(), {"--device", "cuda", "--temp", "0", "-v"});
    CliResult cpu = run_kvlm(cpu_args), cuda = run_shell("KVLM_CUDA_TRANSFERS=1 " + kvlm_command(cuda_args));
    REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
    REQUIRE_MESSAGE(cuda.exit_code == 0, cuda.err);
    CHECK(cuda.out == cpu.out);
    CHECK(std::regex_match(cuda.out, std::regex(pattern)));
    // Jump-forward takes forced tokens along in one forward of decode rows, each with its one-token step's bits.
    CHECK_FALSE(contains(cuda.err, "jump-forward is off"));
    CHECK(contains(cuda.err, "jump-forward forwards)"));
    // The host uploads the state's allowed set and the device picks among it: a sampled step copies back its
    // 24-byte pick, a step whose next token is forced nothing (the logits were 2,048 bytes a step).
    CHECK_MESSAGE(count_transfer_lines(cuda.err, 24) >= 1, cuda.err);

    // Sampled, with a repetition penalty: every pick still inside the pattern.
    std::vector<std::string> sampled = args;
    sampled.insert(sampled.end(),
                   {"--device", "cuda", "--temp", "0.9", "--seed", "3", "--repeat-penalty", "1.2", "-v"});
    CliResult hot = run_shell("KVLM_CUDA_TRANSFERS=1 " + kvlm_command(sampled));
    REQUIRE_MESSAGE(hot.exit_code == 0, hot.err);
    CHECK(std::regex_match(hot.out, std::regex(pattern)));
    CHECK_MESSAGE(count_transfer_lines(hot.err, 24) >= 1, hot.err);
}

// The decoding methods that need a batch-invariant forward run on the GPU through its decode rows (several
// tokens, several sequences in one forward) and change nothing: speculation keeps greedy output, --samples
// decoded side by side equal samples run one by one with their seeds, --beams gives the CPU's hypothesis.
TEST_CASE("cuda cli: --spec, --samples and --beams on the GPU keep the output of one-token steps") {
    if (!have_cuda()) return;
    if (!have_data(stories("stories260K.gguf"))) return;
    const std::string model = stories_model();
    auto run = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = {"run", "-m", model, "--device", "cuda"};
        args.insert(args.end(), extra.begin(), extra.end());
        CliResult r = run_kvlm(args);
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        return r;
    };
    const std::string prompt = "Lily and Ben were friends. Lily and Ben were friends. Lily and Ben";
    const auto logits_hash = [](const CliResult& r) {
        std::smatch m;
        return std::regex_search(r.err, m, std::regex("logits hash ([0-9a-f]{16})")) ? m[1].str() : "none";
    };
    std::smatch m;
    // Greedy, and sampled with a repetition penalty: each verification row's token is picked on the device
    // with its own draw and penalty window, so the text and the chain of the device's logits digests are the
    // plain steps', and a verification pass copies back its rows' picks (24 bytes each), never their logits.
    for (const std::vector<std::string>& sampling :
         {std::vector<std::string>{"--temp", "0"},
          std::vector<std::string>{"--temp", "0.5", "--seed", "5", "--repeat-penalty", "1.1", "--repeat-last-n",
                                   "8"}}) {
        CAPTURE(sampling[1]);
        std::vector<std::string> args = {"-p", prompt, "-n", "70", "-v"};
        args.insert(args.end(), sampling.begin(), sampling.end());
        CliResult plain = run(args);
        args.insert(args.end(), {"--spec", "lookup"});
        std::vector<std::string> all = {"run", "-m", model, "--device", "cuda"};
        all.insert(all.end(), args.begin(), args.end());
        CliResult spec = run_shell("KVLM_CUDA_TRANSFERS=1 " + kvlm_command(all));
        REQUIRE_MESSAGE(spec.exit_code == 0, spec.err);
        CHECK(spec.out == plain.out);
        CHECK(logits_hash(spec) == logits_hash(plain));
        CHECK(logits_hash(plain) != "none");
        REQUIRE_MESSAGE(std::regex_search(spec.err, m, std::regex("(\\d+) tokens drafted, (\\d+) accepted")), spec.err);
        CHECK(std::stoi(m[1].str()) >= 3);
        // Greedy, verification forwards of several tokens did the work (15 on the CPU; sampled, 7 of 20 there).
        if (sampling[1] == "0") CHECK(std::stoi(m[2].str()) >= 8);
        REQUIRE_MESSAGE(
            std::regex_search(spec.err, m,
                              std::regex("(\\d+) decode-row passes, \\d+ bytes device to host \\((\\d+) per pass\\)")),
            spec.err);
        CHECK(std::stoi(m[1].str()) >= 1);
        CHECK(std::stoi(m[2].str()) >= 4 * 24);  // at least the pending token and 3 drafts
        CHECK(std::stoi(m[2].str()) <= 9 * 24);  // at most 8 drafts (--spec-max)
    }
    // A draft model runs on the GPU with its target and picks its greedy drafts there too: its steps and its
    // catch-ups after a rejected draft copy back 24 bytes a pick, the target's verifications 24 a row, never a
    // row of logits (2,048 bytes here).
    {
        const std::string draft = converted_model("stories-q8_0", {stories("stories260K.gguf"), "--dtype", "q8_0"});
        CliResult plain = run({"-p", prompt, "-n", "60", "--temp", "0"});
        CliResult drafted = run_shell("KVLM_CUDA_TRANSFERS=1 " +
                                      kvlm_command({"run", "-m", model, "--device", "cuda", "-p", prompt, "-n", "60",
                                                    "--temp", "0", "--spec", "draft", "--draft-model", draft, "-v"}));
        REQUIRE_MESSAGE(drafted.exit_code == 0, drafted.err);
        CHECK(drafted.out == plain.out);
        CHECK_MESSAGE(contains(drafted.err, "speculation: "), drafted.err);
        // The draft model's steps, the target's verifications.
        CHECK_MESSAGE(count_transfer_lines(drafted.err, 9 * 24) >= 2, drafted.err);
    }

    CliResult together = run({"-p", "Once upon a time", "-n", "12", "--temp", "0.8", "--seed", "7", "--samples", "3"});
    std::string one_by_one;
    for (int i = 0; i < 3; i++) {
        if (i > 0) one_by_one += "\n--- sample " + std::to_string(i + 1) + " ---\n";
        one_by_one += run({"-p", "Once upon a time", "-n", "12", "--temp", "0.8", "--seed", std::to_string(7 + i)}).out;
    }
    CHECK(together.out == one_by_one);

    // Beams: each step's picks are made where the logits are, only 2N (score, token) pairs per beam come
    // back (3 beams x 6 x 8 bytes a pass; the prompt, longer than 16 tokens, is a prefill, not a row pass),
    // and the hypothesis is the CPU's.
    CliResult beams = run_shell("KVLM_CUDA_TRANSFERS=1 " + kvlm_command({"run", "-m", model, "--device", "cuda", "-p",
                                                                         prompt, "-n", "10", "--beams", "3"}));
    REQUIRE_MESSAGE(beams.exit_code == 0, beams.err);
    CliResult cpu_beams = run_kvlm({"run", "-m", model, "--device", "cpu", "-p", prompt, "-n", "10", "--beams", "3"});
    REQUIRE_MESSAGE(cpu_beams.exit_code == 0, cpu_beams.err);
    CHECK(beams.out == cpu_beams.out);
    REQUIRE_MESSAGE(
        std::regex_search(beams.err, m,
                          std::regex("(\\d+) decode-row passes, \\d+ bytes device to host \\((\\d+) per pass\\)")),
        beams.err);
    CHECK(std::stoi(m[1].str()) >= 1);
    CHECK(std::stoi(m[2].str()) == 3 * 6 * 8);
}
