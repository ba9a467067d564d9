// Options and entry points of the kvlm subcommands. main.cpp parses flags into these structs (CLI11)
// and calls the matching cmd_* function; each returns the process exit code and throws Error on bad input.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "generate/sampler.h"
#include "generate/draft_model.h"
#include "generate/generate.h"
#include "generate/speculative.h"
#include "util/byte_size.h"  // parse_byte_size for the flags

namespace kvlm {

class Engine;

class Engine;
class Tokenizer;
struct EngineOptions;
struct GenerationResult;
using TextCallback = std::function<void(const std::string& text)>;

// The tokenizer drops bytes its vocabulary has no token for: says so on stderr, naming them.
void warn_dropped_bytes(const Tokenizer& tokenizer, std::string_view text, std::string_view what);

struct InspectOptions {
    std::string model_path;
    bool verify = false;        // recompute every tensor checksum
    std::string kv_mem;         // memory budget for the KV-planning table, e.g. "4GiB" (empty: a default set)
    bool json = false;          // machine-readable output on stdout
};
int cmd_inspect(const InspectOptions& options);

struct ConvertOptions;  // import/convert.h: main.cpp fills it
int cmd_convert(const ConvertOptions& options);

struct TokenizeOptions {
    std::string model_path;
    std::string text;
    bool text_given = false;     // TEXT given (possibly ""); otherwise read stdin
    bool pieces = false;         // print "id\tpiece" per line instead of the id list
    bool no_bos = false;
    bool no_special = false;     // treat special-token text as plain text
};
int cmd_tokenize(const TokenizeOptions& options);

// The model and engine flags run, chat and bench share (bench registers neither -c nor --kv-mem).
struct EngineFlags {
    std::string model_path;      // -m
    int32_t n_ctx = 0;           // context length (0: the model's)
    int32_t n_threads = 0;       // 0: all cores
    int32_t block_size = 16;     // a continued session's unless block_size_given (to_engine_options)
    bool block_size_given = false;  // --block-size on the command line
    std::string kv_mem;          // KV pool budget ("512MiB" or "90%"); empty: sized from the context
    std::string kv_dtype = "auto";  // KV-cache element type: auto, f32, f16, bf16 or q8_0 (EngineOptions::kv_dtype_auto)
    std::string device = "auto";   // auto | cuda | cpu
};

// --session NAME and the store it lives in (run and chat).
struct SessionFlags {
    std::string name;            // "" = no session
    std::string dir;             // "" = $KVLM_SESSION_DIR, $XDG_CACHE_HOME/kvlm or ~/.cache/kvlm
    std::string quota;           // store size cap ("4GiB"); "" = kDefaultSessionQuota
};

// The seed a --seed value asks for: "" (not given) or -1 draws a random one; otherwise a whole number
// 0..18446744073709551615. Throws Error naming the flag.
uint64_t seed_from_flag(const std::string& text);

// The engine settings the flags ask for (kv_dtype and kv_mem parsed, throwing Error naming the flag);
// the caller adds what its subcommand decides (n_spare_blocks, quiet, bench's n_ctx). With a saved
// `session`, the cache type (--kv-dtype auto) and block size (no --block-size) are the session's.
EngineOptions to_engine_options(const EngineFlags& flags, const SessionFlags* session = nullptr);
// How a full context can grow, for messages: "raise it with -c, up to the model's 2048", or, when it is
// already the model's whole context, "the model's whole context" (no -c would help).
std::string larger_context_advice(const Engine& engine);

// The sampling values a run of `engine`'s model uses (resolve_sampling over the flags and the model file's
// defaults, keeping `sampling.seed`); with `verbose`, says on stderr what they are and where each came from.
SamplingParams resolve_run_sampling(const Engine& engine, const SamplingSettings& flags, uint64_t seed,
                                    bool verbose);

// All of stdin when it is piped, less the one newline `echo` adds; on a terminal, an Error saying
// `no_input_message` (nothing is waited for).
std::string read_piped_stdin(const std::string& no_input_message);

// The most bytes kvlm reads as one prompt or message (stdin, --system-file): more text than any context
// holds (a million tokens of 64 bytes), so a larger input is a mistake (`</dev/zero`), not a prompt.
constexpr size_t kMaxPromptBytes = size_t(64) << 20;
// Reads `in` to its end, or one line of it (without the newline) when `one_line`; throws Error naming `what`
// once more than kMaxPromptBytes come. False at the end of input with nothing read.
bool read_bounded(std::istream& in, std::string* text, bool one_line, const std::string& what);

// The store directory a --session-dir value names ("" = SessionStore::default_dir()).
std::string session_store_dir(const std::string& dir);
// A --session-quota value in bytes ("" = kDefaultSessionQuota); throws Error naming the flag on a bad size.
uint64_t session_quota_bytes(const std::string& quota);

// --json, --json-schema, --regex, --no-jump-forward (run and chat; docs/CONSTRAINED.md).
struct ConstraintFlags {
    bool json = false;            // any JSON object
    std::string json_schema;      // a file, or the schema's JSON text
    bool json_schema_given = false;
    std::string regex;
    bool regex_given = false;
    bool no_jump_forward = false;
    bool given() const { return json || json_schema_given || regex_given; }
};

// The constraint the flags ask for, compiled for `engine`'s vocabulary (null when none is asked for); with
// `verbose`, a line on stderr with its size and compile time. Throws Error for several constraints at once, a
// bad regex or schema, or --no-jump-forward without a constraint.
std::unique_ptr<TokenConstraint> load_constraint(const ConstraintFlags& flags, const Engine& engine, bool verbose);
// Whether a run under `flags` uses jump-forward; says on stderr (unless quiet) when the backend rules it out.
bool use_jump_forward(const ConstraintFlags& flags, Engine& engine, bool quiet);
// The decoding modes a constraint does not combine with yet (run and chat; the one place this is checked):
// throws Error for --spec with --json, --json-schema or --regex.
void check_constraint_combinations(const ConstraintFlags& flags, const SpecOptions& spec);

struct RunOptions {
    EngineFlags engine;
    std::string prompt;
    bool prompt_given = false;   // -p given (possibly ""); otherwise read stdin
    int32_t n_predict = -1;      // max new tokens (-1: until end of generation or context)
    bool chat = false;
    std::string system;          // system prompt with --chat
    std::string chat_template;   // with --chat: builtin name or Jinja file; "" = the model's own
    bool no_special = false;     // special-token text in the prompt (with --chat: in the messages) stays text
    bool verbose = false;
    bool quiet = false;
    SamplingSettings sampling_flags;  // the sampling flags given
    SamplingParams sampling;     // what the run uses: seed from --seed; cmd_run resolves the rest (resolve_sampling)
    int32_t n_samples = 1;       // completions sharing the prompt's KV; sample i (0-based) is seeded seed + i
    SessionFlags session;        // continue and save session.name (docs/SESSIONS.md)
    std::string spec_mode = "off";  // --spec, parsed into spec by cmd_run
    SpecOptions spec;               // --spec, --spec-max (generate/speculative.h)
    std::string draft_model;        // --draft-model, with --spec draft
    int32_t n_beams = 1;            // --beams: beam search (generate/beam_search.h) when > 1
    float length_penalty = 1.0f;    // --length-penalty, with --beams
    ConstraintFlags constraint_flags;
    ConstraintOptions constraint;   // cmd_run compiles constraint_flags into it
};
int cmd_run(const RunOptions& options);

// The draft model of --spec draft (spec->drafter set to it), or null for another mode. Throws Error for
// --spec draft without --draft-model, --draft-model without --spec draft, or a draft model whose vocabulary
// differs from `target`'s. It runs on the CPU with target's threads and context.
std::unique_ptr<DraftModel> load_draft_model(const std::string& path, SpecOptions* spec, const Engine& target,
                                             const EngineOptions& target_options);

// The --session part of `kvlm run` (cli/session.cpp): locks the session, restores its transcript and K/V,
// prefills the tokens not in KV plus `prompt` (a continuation appends it without BOS; a new session uses
// fresh_prompt_ids), generates streaming to on_text, saves. Telemetry (n_restored, ...) in the result.
// A chat session (saved by `kvlm chat` or `run --chat`) is refused: raw text would corrupt its messages.
// `cancel` set during generation stops it and what was generated is saved (stop reason "interrupted");
// set during the prefill, PrefillInterrupted is thrown and the session is unchanged.
GenerationResult run_session_turn(Engine& engine, const RunOptions& options, const std::string& prompt,
                                  const std::vector<int32_t>& fresh_prompt_ids, const TextCallback& on_text,
                                  const std::atomic<bool>* cancel = nullptr);
// `kvlm run --chat --session` (cli/session.cpp): `message` is the next user message of chat session
// options.session.name, the same session `kvlm chat --session` continues; restore, answer, save. `cancel`
// as for run_session_turn (a stopped answer is kept, as `kvlm chat` keeps one).
GenerationResult run_chat_session_turn(Engine& engine, const RunOptions& options, const std::string& message,
                                       const TextCallback& on_text, const std::atomic<bool>* cancel = nullptr);

struct ChatOptions {
    EngineFlags engine;
    std::string system;          // --system TEXT
    std::string system_file;     // --system-file F (exclusive with --system)
    std::string chat_template;   // builtin name or Jinja file; "" = the model's own
    int32_t n_predict = -1;      // per-answer token limit
    bool no_special = false;     // special-token text in messages stays text (the template's own tokens do not)
    bool verbose = false;        // stats line on stderr after each answer
    bool single = false;         // piped stdin is one message, not one per line
    bool no_history = false;     // on a terminal: neither read nor write the input history file
    SamplingSettings sampling_flags;  // the sampling flags given
    SamplingParams sampling;     // seed from --seed; cmd_chat resolves the rest (resolve_sampling)
    SessionFlags session;        // restore session.name at start, save it after each turn and on exit
    std::string spec_mode = "off";  // --spec (parse_spec_mode)
    SpecOptions spec;               // --spec-max; cmd_chat sets the mode from spec_mode
    std::string draft_model;        // --draft-model, with --spec draft
    ConstraintFlags constraint_flags;  // every answer follows it
};
int cmd_chat(const ChatOptions& options);

struct SessionOptions {
    std::string action;          // ls | show | rm | verify | gc | pin | unpin
    std::string name;            // session name (required by show, rm, pin, unpin; optional for verify)
    std::string dir;             // --session-dir; "" = the default store
    std::string quota;           // gc --quota SIZE: also evict LRU blocks until the store fits
    std::string model_path;      // show -m MODEL: decode the transcript to text
};
int cmd_session(const SessionOptions& options);

struct BenchOptions {
    EngineFlags engine;                           // n_ctx and kv_mem unused: the plan sizes the context
    std::vector<int32_t> prompt_lengths = {512};  // -p: prefill tests (0 = none)
    std::vector<int32_t> gen_lengths = {128};     // -n: decode tests (0 = none)
    std::vector<int32_t> depths = {0};            // -d: tokens already in context before each test
    int32_t n_reps = 5;                           // -r
    std::string output = "md";                    // md | json (stdout)
    bool scenarios = true;                        // cache/session/cold-start rows
    int32_t scenario_tokens = 0;                  // history length for the cache scenarios (0 = first -p)
};
int cmd_bench(const BenchOptions& options);

// `kvlm perplexity` (llama-perplexity's method, generate/perplexity.h). stdout carries the result only:
// "PPL = X +/- Y", or with --json one JSON object; the running estimate, progress and stats go to stderr.
struct PerplexityOptions {
    EngineFlags engine;          // n_ctx is the chunk length (0: kDefaultPerplexityContext); kv_mem unused
    bool n_ctx_given = false;    // -c on the command line (else 512, or the model's context when smaller)
    std::string text_path;       // -f FILE
    int32_t n_chunks = -1;       // --chunks: at most this many chunks (-1: every whole chunk of the text)
    bool json = false;           // --json: the result as JSON on stdout
    bool quiet = false;          // -q: nothing on stderr but errors
};
constexpr int32_t kDefaultPerplexityContext = 512;  // llama-perplexity's default -c
int cmd_perplexity(const PerplexityOptions& options);

}  // namespace kvlm
