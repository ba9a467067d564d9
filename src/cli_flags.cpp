// The flags run, chat and bench share (cli.h EngineFlags, SessionFlags), turned into engine options and
// session-store settings in one place, so every subcommand reads them the same way.
#include "cli.h"

#include "engine.h"
#include "error.h"
#include "session_store.h"

namespace kvlm {

EngineOptions to_engine_options(const EngineFlags& flags, const SessionFlags* session) {
    EngineOptions options;
    options.device = flags.device;
    options.n_threads = flags.n_threads;
    options.n_ctx = flags.n_ctx;
    options.block_size = flags.block_size;
    parse_kv_dtype(flags.kv_dtype, &options);
    parse_kv_mem(flags.kv_mem, &options);
    // --kv-dtype auto continues a saved session with the cache type it was saved with (a session saved on a
    // GPU in bf16 continues on the CPU); an explicit type that differs is refused when the session loads.
    if (options.kv_dtype_auto && session && !session->name.empty()) {
        SessionStore store(session_store_dir(session->dir));
        if (store.has_session(session->name)) {
            try {
                options.kv_dtype = store.load_manifest(session->name).identity.kv_dtype;
                options.kv_dtype_auto = false;
                options.kv_dtype_why = fmt::format("auto: session '{}' was saved with it", session->name);
            } catch (const Error&) {
                // Unreadable: the restore reports it with the full explanation.
            }
        }
    }
    return options;
}

std::string session_store_dir(const std::string& dir) { return dir.empty() ? SessionStore::default_dir() : dir; }

uint64_t session_quota_bytes(const std::string& quota) {
    return quota.empty() ? kDefaultSessionQuota : parse_byte_size(quota, "--session-quota");
}

}  // namespace kvlm
