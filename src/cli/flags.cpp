// The flags run, chat and bench share (cli.h EngineFlags, SessionFlags), turned into engine options and
// session-store settings in one place, so every subcommand reads them the same way.
#include "cli/cli.h"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>

#include "engine/engine.h"
#include "session/session_store.h"
#include "util/error.h"

namespace kvlm {

// The identity a continued session was saved with; false for no session, a new one or an unreadable
// manifest (the restore reports that with the full explanation).
static bool saved_identity(const SessionFlags* session, SessionIdentity* identity) {
    if (!session || session->name.empty()) return false;
    SessionStore store(session_store_dir(session->dir));
    if (!store.has_session(session->name)) return false;
    try {
        *identity = store.load_manifest(session->name).identity;
        return true;
    } catch (const Error&) {
        return false;
    }
}

EngineOptions to_engine_options(const EngineFlags& flags, const SessionFlags* session) {
    EngineOptions options;
    options.device = flags.device;
    options.n_threads = flags.n_threads;
    options.n_ctx = flags.n_ctx;
    options.block_size = flags.block_size;
    parse_kv_dtype(flags.kv_dtype, &options);
    parse_kv_mem(flags.kv_mem, &options);
    // A continued session keeps the cache type (--kv-dtype auto) and block size (no --block-size) it was
    // saved with, so a session saved on a GPU in bf16 continues on the CPU; an explicit value that differs is
    // refused when the session loads.
    SessionIdentity saved;
    if ((options.kv_dtype_auto || !flags.block_size_given) && saved_identity(session, &saved)) {
        const std::string why = fmt::format("session '{}' was saved with it", session->name);
        if (options.kv_dtype_auto) {
            options.kv_dtype = saved.kv_dtype;
            options.kv_dtype_auto = false;
            options.kv_dtype_why = "auto: " + why;
        }
        if (!flags.block_size_given && saved.block_size != options.block_size) {
            options.block_size = saved.block_size;
            options.block_size_why = why;  // said only when it is not the usual 16
        }
    }
    return options;
}

uint64_t seed_from_flag(const std::string& text) {
    if (text.empty() || text == "-1") return std::random_device{}();
    uint64_t seed = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
    if (error != std::errc() || end != text.data() + text.size())
        throw_error("--seed: '{}' is not a seed (a whole number from 0 to {}, or -1 for a random one)", text,
                    std::numeric_limits<uint64_t>::max());
    return seed;
}

SamplingParams resolve_run_sampling(const Engine& engine, const SamplingSettings& flags, uint64_t seed,
                                    bool verbose) {
    const SamplingSettings& model_defaults = engine.model().metadata().sampling;
    SamplingParams params = resolve_sampling(flags, model_defaults, seed);
    if (verbose)
        std::fprintf(stderr, "kvlm: sampling %s, seed %llu\n",
                     describe_sampling(params, flags, model_defaults).c_str(), (unsigned long long)seed);
    return params;
}

bool read_bounded(std::istream& in, std::string* text, bool one_line, const std::string& what) {
    text->clear();
    std::streambuf* buffer = in.rdbuf();
    bool any = false;
    auto too_long = [&] {
        throw_error("{} is larger than {} MiB, more text than any context holds (is it the right input?)", what,
                    kMaxPromptBytes >> 20);
    };
    if (!one_line) {
        char chunk[65536];
        for (std::streamsize n; (n = buffer->sgetn(chunk, sizeof chunk)) > 0;) {
            any = true;
            text->append(chunk, size_t(n));
            if (text->size() > kMaxPromptBytes) too_long();
        }
        in.setstate(std::ios::eofbit);
        return any;
    }
    for (int c; (c = buffer->sbumpc()) != std::char_traits<char>::eof();) {
        any = true;
        if (c == '\n') return true;
        text->push_back(char(c));
        if (text->size() > kMaxPromptBytes) too_long();
    }
    in.setstate(std::ios::eofbit);
    return any;
}

std::string read_piped_stdin(const std::string& no_input_message) {
    if (isatty(STDIN_FILENO)) throw_error("{}", no_input_message);
    std::string text;
    read_bounded(std::cin, &text, false, "the text on stdin");
    if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) text.resize(text.size() - 2);
    else if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

std::string larger_context_advice(const Engine& engine) {
    const int32_t model_ctx = engine.model().config().n_ctx;
    return engine.n_ctx() < model_ctx ? fmt::format("raise it with -c, up to the model's {}", model_ctx)
                                      : fmt::format("the model's whole context");
}

std::string session_store_dir(const std::string& dir) { return dir.empty() ? SessionStore::default_dir() : dir; }

uint64_t session_quota_bytes(const std::string& quota) {
    return quota.empty() ? kDefaultSessionQuota : parse_byte_size(quota, "--session-quota");
}

}  // namespace kvlm
