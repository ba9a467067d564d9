// The flags run, chat and bench share (cli.h EngineFlags, SessionFlags), turned into engine options and
// session-store settings in one place, so every subcommand reads them the same way.
#include "cli.h"
#include "engine.h"
#include "session_store.h"

namespace kvlm {

EngineOptions to_engine_options(const EngineFlags& flags) {
    EngineOptions options;
    options.device = flags.device;
    options.n_threads = flags.n_threads;
    options.n_ctx = flags.n_ctx;
    options.block_size = flags.block_size;
    options.kv_dtype = parse_kv_dtype(flags.kv_dtype);
    parse_kv_mem(flags.kv_mem, &options);
    return options;
}

std::string session_store_dir(const std::string& dir) { return dir.empty() ? SessionStore::default_dir() : dir; }

uint64_t session_quota_bytes(const std::string& quota) {
    return quota.empty() ? kDefaultSessionQuota : parse_byte_size(quota, "--session-quota");
}

}  // namespace kvlm
