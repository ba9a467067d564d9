// kvlm command line: parses flags (CLI11 subcommands) and dispatches to the cmd_* functions in src/.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <optional>

#include "cli/cli.h"
#include "import/convert.h"
#include "util/error.h"
#include "util/output.h"

using namespace kvlm;

static const char* const kSessionDirHelp =
    "Session store (default: $KVLM_SESSION_DIR, else $XDG_CACHE_HOME/kvlm, else ~/.cache/kvlm)";

// Each sampling flag left out takes the model file's default (kvlm inspect shows them), else kvlm's.
template <typename T>
static void add_sampling_option(CLI::App* app, const char* name, std::optional<T>& value, const std::string& help) {
    app->add_option_function<T>(name, [&value](const T& v) { value = v; }, help);
}

static void add_sampling_flags(CLI::App* app, SamplingSettings& s, std::string* seed) {
    const SamplingParams kvlm_defaults;
    auto otherwise = [](auto value) { return fmt::format(" (default: the model's, else {})", value); };
    add_sampling_option(app, "--temp", s.temperature, "Sampling temperature; 0 = greedy" + otherwise(kvlm_defaults.temperature));
    add_sampling_option(app, "--top-k", s.top_k, "Keep the k most likely tokens (0 = off)" + otherwise(kvlm_defaults.top_k));
    add_sampling_option(app, "--top-p", s.top_p, "Nucleus sampling threshold (1 = off)" + otherwise(kvlm_defaults.top_p));
    add_sampling_option(app, "--min-p", s.min_p,
                        "Drop tokens below min-p x the top probability (0 = off)" + otherwise(kvlm_defaults.min_p));
    add_sampling_option(app, "--repeat-penalty", s.repeat_penalty,
                        fmt::format("Penalty for recently seen tokens (1 = off; default: the model's, else {} when "
                                    "sampling, 1 when greedy)",
                                    kDefaultSamplingRepeatPenalty));
    add_sampling_option(app, "--repeat-last-n", s.repeat_last_n,
                        "How many recent tokens the penalty considers" + otherwise(kvlm_defaults.repeat_last_n));
    app->add_option("--seed", *seed, "Random seed (default or -1: random; same seed = same output)");
}

// -m and the engine flags of run, chat and bench. Bench sizes the context from its plan, so it passes
// context_flags = false and gets neither -c nor --kv-mem.
static void add_engine_flags(CLI::App* app, EngineFlags& e, bool context_flags) {
    app->add_option("-m,--model", e.model_path, "Model file (.kvlm)")->required();
    if (context_flags) app->add_option("-c,--ctx-size", e.n_ctx, "Context length (default: the model's)");
    app->add_option("-t,--threads", e.n_threads, "CPU threads (default: all cores)");
    app->add_option_function<int32_t>(
        "--block-size", [&e](int32_t v) { e.block_size = v; e.block_size_given = true; },
        "Tokens per KV block (default: a continued session's, else 16)");
    if (context_flags)
        app->add_option("--kv-mem", e.kv_mem,
                        "KV-cache memory budget: a size (512MiB) or a share of free memory (90%); default: fits the context");
    app->add_option("--kv-dtype", e.kv_dtype,
                    "KV-cache element type: auto, f32, f16, bf16 or q8_0 (auto: a continued session's; f32 for an "
                    "f32 model; on CUDA a 16-bit model's type; else f16)")
        ->capture_default_str();
    app->add_option("--device", e.device, "auto, cuda or cpu")->capture_default_str();
}

// --session and its store. The help texts differ: run saves once at the end, chat after every answer.
// --spec, --spec-max and --draft-model (run and chat).
static void add_spec_flags(CLI::App* app, std::string* mode, kvlm::SpecOptions* spec, std::string* draft_model) {
    app->add_option("--spec", *mode,
                    "Speculative decoding: lookup drafts the tokens that followed the last few tokens' latest "
                    "earlier occurrence, draft has --draft-model propose them; either way they are verified in "
                    "one forward (same output; faster where the drafts are right)")
        ->capture_default_str();
    app->add_option("--spec-max", spec->max_drafted, "Draft tokens per verify forward (with --spec)")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app->add_option("--draft-model", *draft_model,
                    "With --spec draft: a smaller .kvlm model with the same vocabulary that drafts the tokens");
}

// --json, --json-schema, --regex and --no-jump-forward (run and chat; docs/CONSTRAINED.md).
static void add_constraint_flags(CLI::App* app, kvlm::ConstraintFlags* flags) {
    app->add_flag("--json", flags->json,
                  "Output a JSON object (any keys and values, json.dumps layout); generation ends when it closes");
    app->add_option("--json-schema", flags->json_schema,
                    "Output JSON that validates against this JSON Schema (a file, or the schema's text; the subset "
                    "in docs/CONSTRAINED.md)")
        ->each([flags](const std::string&) { flags->json_schema_given = true; });
    app->add_option("--regex", flags->regex, "Output text that matches this regular expression as a whole")
        ->each([flags](const std::string&) { flags->regex_given = true; });
    app->add_flag("--no-jump-forward", flags->no_jump_forward,
                  "With a constraint: run forced text through the model one token per forward (the same output, "
                  "slower; for comparison)");
}

static void add_session_flags(CLI::App* app, SessionFlags& s, const char* session_help, const char* quota_help) {
    // An empty name would otherwise mean "no session": a run the user meant to save would not be.
    app->add_option("--session", s.name, session_help)->check([](const std::string& name) {
        return name.empty() ? std::string("the session name is empty (leave --session out to run without one)")
                            : std::string();
    });
    app->add_option("--session-dir", s.dir, kSessionDirHelp);
    app->add_option("--session-quota", s.quota, quota_help);
}

static bool is_subcommand(CLI::App& app, const std::string& name) {
    for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; }))
        if (command->get_name() == name) return true;
    return false;
}

int main(int argc, char** argv) {
    // Over a file size limit (ulimit -f), write() then fails with EFBIG, which the writers report and
    // recover from (a session save keeps the previous state), instead of the process dying mid-save.
    std::signal(SIGXFSZ, SIG_IGN);
    CLI::App app{"kvlm: a command-line LLM runner built around the KV cache"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "kvlm 0.1.0");

    ConvertOptions convert;
    auto* convert_cmd = app.add_subcommand("convert", "Convert a Hugging Face directory, GGUF or llama2.c model to .kvlm");
    convert_cmd->add_option("source", convert.source, "HF model directory, .gguf file, or llama2.c .bin");
    convert_cmd->add_option("-o,--output", convert.output, "Output .kvlm file")->required();
    convert_cmd->add_option("--dtype", convert.dtype, "Weight type: f32, f16, bf16 (default: the source's)");
    convert_cmd->add_option("--tokenizer", convert.tokenizer, "Tokenizer file or directory (tokenizer.bin, tokenizer.json, ...)");
    convert_cmd->add_option("--synthetic", convert.synthetic,
                            "Random weights at a shape: smollm2-135m, llama-3.2-1b, llama-3-8b, or a config.json");
    convert_cmd->add_option("--seed", convert.seed, "Seed for --synthetic")->capture_default_str();
    convert_cmd->add_flag("-q,--quiet", convert.quiet, "No progress output");
    convert_cmd->add_flag("--force", convert.force, "Replace an existing output file that is not a .kvlm model");
    convert_cmd->add_option("--sampling", convert.sampling,
                            "Recommended sampling defaults to store, over the source's: temp=0.2,top-p=0.9,top-k=40,"
                            "min-p=0.05,repeat-penalty=1.1,repeat-last-n=64 (any subset)");

    InspectOptions inspect;
    auto* inspect_cmd = app.add_subcommand("inspect", "Show a .kvlm model's metadata, tensors and KV-cache planning");
    inspect_cmd->add_option("model", inspect.model_path, "Model file (.kvlm)")->required();
    inspect_cmd->add_flag("--verify", inspect.verify, "Recompute every tensor checksum");
    inspect_cmd->add_option("--kv-mem", inspect.kv_mem, "Memory budget for the KV planning table (e.g. 4GiB)");
    inspect_cmd->add_flag("--json", inspect.json, "Print JSON on stdout");

    TokenizeOptions tokenize;
    auto* tokenize_cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
    tokenize_cmd->add_option("model", tokenize.model_path, "Model file (.kvlm)")->required();
    tokenize_cmd->add_option_function<std::string>(
        "text", [&tokenize](const std::string& t) { tokenize.text = t; tokenize.text_given = true; },
        "Text to tokenize (default: read from stdin)");
    tokenize_cmd->add_flag("--pieces", tokenize.pieces, "Print id and piece per line");
    tokenize_cmd->add_flag("--no-bos", tokenize.no_bos, "Do not add BOS even if the model asks for it");
    tokenize_cmd->add_flag("--no-special", tokenize.no_special, "Treat special-token text as plain text");

    RunOptions run;
    std::string run_seed;
    auto* run_cmd = app.add_subcommand("run", "Generate text from a prompt (-p, or stdin) and print it on stdout");
    add_engine_flags(run_cmd, run.engine, /*context_flags=*/true);
    run_cmd->add_option_function<std::string>(
        "-p,--prompt", [&run](const std::string& p) { run.prompt = p; run.prompt_given = true; },
        "Prompt text (default: read from stdin; \"\" starts from BOS alone)");
    run_cmd->add_option("-n,--n-predict", run.n_predict, "Max new tokens (-1: until end of text or context)")
        ->capture_default_str();
    run_cmd->add_flag("--chat", run.chat, "Wrap the prompt as one user turn of the model's chat template");
    run_cmd->add_option("--system", run.system, "System prompt (with --chat)");
    run_cmd->add_option("--chat-template", run.chat_template,
                        "With --chat: a builtin template name (chatml, llama3, ...) or a Jinja file (default: the model's)");
    run_cmd->add_flag("--no-special", run.no_special,
                      "Special-token text in the prompt (with --chat: in the messages) stays plain text (default: "
                      "it becomes special tokens, as Hugging Face does)");
    run_cmd->add_flag("-v,--verbose", run.verbose, "Print timings and KV-cache stats on stderr");
    run_cmd->add_flag("-q,--quiet", run.quiet, "Print nothing on stderr but errors");
    run_cmd->add_option("--samples", run.n_samples,
                        "Completions of the same prompt, prefilled once (sample i seeded seed+i-1)")
        ->capture_default_str();
    add_spec_flags(run_cmd, &run.spec_mode, &run.spec, &run.draft_model);
    add_constraint_flags(run_cmd, &run.constraint_flags);
    run_cmd->add_option("--beams", run.n_beams,
                        "Beam search with N beams, as Hugging Face's num_beams (deterministic; the best "
                        "hypothesis is printed at the end)")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    run_cmd->add_option("--length-penalty", run.length_penalty,
                        "With --beams: a hypothesis scores its log-probability / length^P (> 0 favours longer ones)")
        ->capture_default_str();
    add_sampling_flags(run_cmd, run.sampling_flags, &run_seed);
    add_session_flags(run_cmd, run.session,
                      "Continue session NAME (restore its KV), then save it; with --chat the prompt is its next message",
                      "Session store size cap, LRU-evicted (default 4GiB)");

    BenchOptions bench;
    auto* bench_cmd = app.add_subcommand("bench", "Measure prefill/decode throughput and cache scenarios (llama-bench style)");
    add_engine_flags(bench_cmd, bench.engine, /*context_flags=*/false);
    bench_cmd->add_option("-p,--n-prompt", bench.prompt_lengths, "Prompt lengths to prefill, comma-separated (0 = none)")
        ->delimiter(',')->capture_default_str();
    bench_cmd->add_option("-n,--n-gen", bench.gen_lengths, "Tokens to decode, comma-separated (0 = none)")
        ->delimiter(',')->capture_default_str();
    bench_cmd->add_option("-d,--depth", bench.depths, "Context depths (tokens already in KV), comma-separated")
        ->delimiter(',')->capture_default_str();
    bench_cmd->add_option("-r,--repetitions", bench.n_reps, "Repetitions of each test")->capture_default_str();
    bench_cmd->add_option("-o,--output", bench.output, "md or json, on stdout")->capture_default_str();
    bench_cmd->add_option("--scenario-tokens", bench.scenario_tokens,
                          "History length of the prefix-cache and session scenarios (default: the first -p)");
    bench_cmd->add_flag_callback("--no-scenarios", [&bench] { bench.scenarios = false; },
                                 "Only the throughput tests (no prefix-cache and session scenarios)");

    PerplexityOptions ppl;
    auto* ppl_cmd =
        app.add_subcommand("perplexity", "Measure a model's perplexity on a text file (llama-perplexity's method)");
    add_engine_flags(ppl_cmd, ppl.engine, /*context_flags=*/false);
    ppl_cmd->add_option("-f,--file", ppl.text_path, "Text file to evaluate")->required();
    ppl_cmd->add_option_function<int32_t>(
        "-c,--ctx-size", [&ppl](int32_t v) { ppl.engine.n_ctx = v; ppl.n_ctx_given = true; },
        fmt::format("Chunk length in tokens; the second half of each chunk is scored (default: {}, or the model's "
                    "context when smaller)", kDefaultPerplexityContext));
    ppl_cmd->add_option("--chunks", ppl.n_chunks, "Evaluate at most N chunks (-1: all of the text)")
        ->capture_default_str();
    ppl_cmd->add_flag("--json", ppl.json, "Print the result as JSON on stdout");
    ppl_cmd->add_flag("-q,--quiet", ppl.quiet, "Print nothing on stderr but errors");

    ChatOptions chat;
    std::string chat_seed;
    auto* chat_cmd = app.add_subcommand("chat", "Converse with a chat model (a terminal prompt, or one message per stdin line)");
    add_engine_flags(chat_cmd, chat.engine, /*context_flags=*/true);
    chat_cmd->add_option("--system", chat.system, "System prompt");
    chat_cmd->add_option("--system-file", chat.system_file, "Read the system prompt from a file");
    chat_cmd->add_option("--chat-template", chat.chat_template, "Builtin template name (chatml, llama3, ...) or a Jinja file");
    chat_cmd->add_option("-n,--n-predict", chat.n_predict, "Max tokens per answer (-1: until end of turn or context)")
        ->capture_default_str();
    chat_cmd->add_flag("--no-special", chat.no_special,
                       "Special-token text in messages stays plain text (default: it becomes special tokens, as "
                       "Hugging Face does); the template's own special tokens are unaffected");
    chat_cmd->add_flag("-v,--verbose", chat.verbose, "A stats line on stderr after each answer");
    chat_cmd->add_flag("--single", chat.single, "Piped stdin is one message (default: one message per line)");
    chat_cmd->add_flag("--no-history", chat.no_history,
                       "Do not keep the input history in $XDG_STATE_HOME/kvlm/chat_history (default: "
                       "~/.local/state/kvlm/chat_history)");
    add_spec_flags(chat_cmd, &chat.spec_mode, &chat.spec, &chat.draft_model);
    add_constraint_flags(chat_cmd, &chat.constraint_flags);
    add_sampling_flags(chat_cmd, chat.sampling_flags, &chat_seed);
    add_session_flags(chat_cmd, chat.session, "Continue session NAME, saving it after every answer",
                      "Session store size cap (default 4GiB)");

    SessionOptions session;
    auto* session_cmd = app.add_subcommand("session", "Manage saved sessions: ls, show, rm, verify, gc, pin, unpin");
    session_cmd->require_subcommand(1);
    session_cmd->add_option("--session-dir", session.dir, kSessionDirHelp);
    for (auto [action, help] : {std::pair<const char*, const char*>{"ls", "List sessions"},
                                {"show", "Show a session's settings and transcript"},
                                {"rm", "Delete a session and its unshared blocks"},
                                {"verify", "Check every checksum (one session or all)"},
                                {"gc", "Delete unreferenced blocks; with --quota, evict LRU blocks to fit"},
                                {"pin", "Protect a session's blocks from quota eviction"},
                                {"unpin", "Undo pin"}}) {
        std::string name = action;
        auto* cmd = session_cmd->add_subcommand(name, help);
        cmd->callback([&session, name] { session.action = name; });
        cmd->add_option("--session-dir", session.dir, kSessionDirHelp);
        if (name != "ls" && name != "gc") cmd->add_option("name", session.name, "Session name");
        if (name == "show") cmd->add_option("-m,--model", session.model_path, "Model, to decode the text");
        if (name == "gc") cmd->add_option("--quota", session.quota, "Evict LRU blocks until the store fits");
    }

    try {
        // CLI11 would answer these with "A subcommand is required"; say what is wrong instead.
        const std::string commands = "kvlm convert, inspect, tokenize, run, chat, session, bench or perplexity";
        if (argc > 1 && argv[1][0] != '-' && !is_subcommand(app, argv[1]))
            throw CLI::ParseError(fmt::format("unknown command '{}' ({})", argv[1], commands),
                                  CLI::ExitCodes::ExtrasError);
        if (argc > 1 && argv[1][0] == '-' && std::string(argv[1]) != "--help" && std::string(argv[1]) != "-h" &&
            std::string(argv[1]) != "--version")
            throw CLI::ParseError(fmt::format("'{}' is not an option of kvlm itself: the command comes first ({})",
                                              argv[1], commands),
                                  CLI::ExitCodes::ExtrasError);
        if (argc > 1 && std::string(argv[1]) == "session") {
            const char* actions = "ls, show, rm, verify, gc, pin or unpin";
            if (argc == 2)
                throw CLI::ParseError(fmt::format("kvlm session needs an action: {}", actions),
                                      CLI::ExitCodes::RequiredError);
            if (argv[2][0] != '-' && !is_subcommand(*session_cmd, argv[2]))
                throw CLI::ParseError(fmt::format("unknown session action '{}' ({})", argv[2], actions),
                                      CLI::ExitCodes::ExtrasError);
        }
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version end here with status 0; a bad command line reads like every other kvlm error.
        if (e.get_exit_code() == int(CLI::ExitCodes::Success)) return app.exit(e);
        std::fprintf(stderr, "error: %s\nRun `kvlm --help` for the commands, `kvlm COMMAND --help` for their options.\n",
                     e.what());
        return e.get_exit_code();
    }

    auto dispatch = [&]() -> int {
        if (*convert_cmd) return cmd_convert(convert);
        if (*inspect_cmd) return cmd_inspect(inspect);
        if (*tokenize_cmd) return cmd_tokenize(tokenize);
        if (*run_cmd) {
            run.sampling.seed = seed_from_flag(run_seed);
            return cmd_run(run);
        }
        if (*chat_cmd) {
            chat.sampling.seed = seed_from_flag(chat_seed);
            return cmd_chat(chat);
        }
        if (*session_cmd) return cmd_session(session);
        if (*bench_cmd) return cmd_bench(bench);
        if (*ppl_cmd) return cmd_perplexity(ppl);
        return 1;
    };
    try {
        int status = dispatch();
        finish_stdout();  // a failed write to stdout is an error, not an exit 0 with lost output
        return status;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
