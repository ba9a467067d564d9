// Restore and save of sessions over the engine's pool and prefix cache.
#include "session/session_run.h"

#include <algorithm>
#include <atomic>
#include <ctime>
#include <system_error>
#include <memory>
#include <thread>

#include "util/byte_size.h"
#include "util/error.h"

namespace kvlm {

namespace {

std::string start_fresh_hint(const std::string& name) {
    return fmt::format("start fresh with `kvlm session rm {}` or use another --session name", name);
}

// Reads and verifies the block files of manifest blocks `indices` into pool blocks `blocks` (one each), filling
// problems[i] ("" when it verified), by up to kMaxReaders threads. Where the pool is host memory each file is
// read straight into its pool block (copied once by the kernel and checksummed while it is in cache). Never
// mapped: a mapped file truncated by someone else while kvlm runs would kill it with SIGBUS, and one
// overwritten in place would change the KV under it (reading cost 12.6-18.9 ms where mapping took 3.9-6.3 ms
// for 37 MiB, bench/RESULTS.md, session 31). Otherwise into a staging area of up to kStagingBytes, handed to the
// backend one batch at a time (write_kv_blocks: a GPU copies a batch without waiting between blocks). A block
// after one that failed may be left unread (its problem then says so): nothing past the first failure is kept.
// From a cold page cache the readers wait on the disk, not the CPU: more of them keep more reads in flight
// (a 1549-token store, 97 files: 0.89-0.92 GB/s with 2 readers, 0.98-1.21 with 16, where `dd` reads the same
// bytes as one file at 1.2-1.3 GB/s); from a warm one, readers beyond the cores only slow it down.
constexpr int kMaxReaders = 4;
constexpr int kMaxColdReaders = 16;
constexpr size_t kStagingBytes = size_t(256) << 20;

void read_blocks(Backend& backend, const SessionStore& store, const SessionManifest& m,
                   const BlockHash& kv_namespace, const std::vector<size_t>& indices,
                   const std::vector<int32_t>& blocks, std::vector<std::string>* problems) {
    const size_t block_bytes = backend.kv_block_bytes();
    const BlockRecordShape shape = block_record_shape(m.identity);
    KVLM_ASSERT(shape.full_bytes() == block_bytes, "KV block record layout");
    if (indices.empty()) return;
    const bool staged = backend.host_kv_block(blocks[0]) == nullptr;
    const size_t batch = staged ? std::max<size_t>(1, kStagingBytes / block_bytes) : indices.size();
    // The backend's staging memory where it has some (pinned), else ours, left uninitialised: every byte that is
    // copied on was read and verified first.
    std::unique_ptr<uint8_t[]> own_staging;
    uint8_t* staging = nullptr;
    if (staged) {
        const size_t n_staged = std::min(batch, indices.size());
        staging = static_cast<uint8_t*>(backend.kv_staging(n_staged));
        if (!staging) {
            own_staging.reset(new uint8_t[n_staged * block_bytes]);
            staging = own_staging.get();
        }
    }
    std::atomic<size_t> first_failed{SIZE_MAX};
    for (size_t begin = 0; begin < indices.size() && first_failed.load() == SIZE_MAX; begin += batch) {
        const size_t end = std::min(indices.size(), begin + batch);
        auto target = [&](size_t k) {
            return staged ? static_cast<void*>(staging + (k - begin) * block_bytes)
                          : backend.host_kv_block(blocks[k]);
        };
        std::atomic<size_t> next{begin};
        auto reader = [&] {
            for (size_t k; (k = next.fetch_add(1)) < end;) {
                const size_t i = indices[k];
                if (i > first_failed.load()) {
                    (*problems)[i] = "not read (an earlier block failed)";
                    continue;
                }
                try {  // read_block reports bad files as problems; nothing else may escape a reader thread
                    (*problems)[i] = store.read_block(m.blocks[i], kv_namespace, shape, target(k));
                } catch (const std::exception& e) {
                    (*problems)[i] = e.what();
                }
                if (!(*problems)[i].empty())
                    for (size_t f = first_failed.load(); i < f && !first_failed.compare_exchange_weak(f, i);) {
                    }
            }
        };
        // Extra readers only where there is enough to share; a thread that cannot start leaves its share to
        // the others (the calling thread always reads).
        const size_t n_readers =
            store.block_cached(m.blocks[indices[begin]].hash)
                ? std::min<size_t>({size_t(kMaxReaders), std::max(1u, std::thread::hardware_concurrency()),
                                    (end - begin + 7) / 8})
                : std::min<size_t>(size_t(kMaxColdReaders), (end - begin + 3) / 4);
        std::vector<std::thread> helpers;
        for (size_t t = 1; t < n_readers; t++) {
            try {
                helpers.emplace_back(reader);
            } catch (const std::system_error&) {
                break;
            }
        }
        reader();
        for (std::thread& t : helpers) t.join();
        if (!staged) continue;
        size_t n_good = begin;  // this batch's blocks before the first failure: the only ones kept
        while (n_good < end && (*problems)[indices[n_good]].empty()) n_good++;
        backend.write_kv_blocks(blocks.data() + begin, n_good - begin, staging);
    }
    // Blocks of batches never started (after a failure) are not kept either.
    for (size_t k = 0; k < indices.size(); k++)
        if ((*problems)[indices[k]].empty() && indices[k] > first_failed.load())
            (*problems)[indices[k]] = "not read (an earlier block failed)";
}

}  // namespace

SessionIdentity session_identity(Engine& engine) {
    const ModelConfig& config = engine.model().config();
    SessionIdentity id;
    id.model_fingerprint = engine.model().fingerprint();
    id.model_description = model_description(engine.model());
    id.kv_dtype = engine.kv_dtype();
    id.n_layers = config.n_layers;
    id.n_kv_heads = config.n_kv_heads;
    id.head_dim = config.head_dim;
    id.block_size = engine.pool().block_size();
    id.rope_theta = config.rope_theta;
    id.rope_scaling = config.rope_scaling;
    return id;
}

namespace {

// The manifest of session `name`, checked against this engine's identity. Throws Error naming the field,
// both values and how to start fresh.
SessionManifest load_matching_manifest(const SessionStore& store, const std::string& name,
                                       const SessionIdentity& identity) {
    SessionManifest m;
    try {
        m = store.load_manifest(name);
    } catch (const Error& e) {
        throw_error("session '{}' cannot be restored: {}; {}", name, e.what(), start_fresh_hint(name));
    }
    if (std::string diff = identity_mismatch(m.identity, identity); !diff.empty())
        throw_error("session '{}' was saved with a different setup ({}); {}", name, diff, start_fresh_hint(name));
    return m;
}

}  // namespace

void check_session_fits(Engine& engine, const std::string& name, size_t n_saved, size_t n_new) {
    const size_t n_tokens = n_saved + n_new;
    std::string what = n_new == 0 ? fmt::format("session '{}' holds {} tokens", name, n_saved)
                                  : fmt::format("session '{}' holds {} tokens and the new prompt adds {}", name,
                                                n_saved, n_new);
    if (n_tokens > size_t(engine.model().config().n_ctx))
        throw_error("{}, more than the model's context of {} tokens (start a new session; this one is unchanged)",
                    what, engine.model().config().n_ctx);
    if (n_tokens > size_t(engine.n_ctx()))
        throw_error("{}, more than the context of {} tokens (continue it with -c {} or more, up to the model's {}; "
                    "the session is unchanged)",
                    what, engine.n_ctx(), n_tokens, engine.model().config().n_ctx);
    if (int64_t(n_tokens) > engine.n_pool_tokens())
        throw_error("{}, more than the KV pool holds ({} tokens in {} blocks of {}; continue it with --kv-mem {} or "
                    "more; the session is unchanged)",
                    what, engine.n_pool_tokens(), engine.pool().n_blocks(), engine.pool().block_size(),
                    byte_size_text(engine.kv_mem_for_tokens(int64_t(n_tokens))));
}

RestoredSession restore_session(Engine& engine, const SessionStore& store, const std::string& name, Sequence& seq) {
    SessionStore::check_name(name);
    if (!store.has_session(name)) return RestoredSession{};
    const SessionIdentity identity = session_identity(engine);
    const SessionManifest m = load_matching_manifest(store, name, identity);
    check_session_fits(engine, name, m.tokens.size(), 0);

    KVLM_ASSERT(seq.tokens.empty() && seq.table.blocks.empty(), "restore needs an empty sequence");
    RestoredSession r;
    r.existed = true;
    r.transcript = m.tokens;
    r.created_unix = m.created_unix;
    r.pinned = m.pinned;
    PrefixCache& cache = engine.prefix_cache();
    const int32_t block_size = identity.block_size;

    // 1. In order: check each block's place in the hash chain and claim a pool block for it, until a block
    //    does not belong to the transcript or the pool has no room.
    struct Claim {
        int32_t block;
        bool cached;  // already in this process's cache: nothing to read
    };
    std::vector<Claim> claims;
    std::string stopped;  // why the claims ended before the manifest did
    bool stopped_bad_block = false;
    BlockHash parent = cache.kv_namespace();
    for (const SessionBlockRef& ref : m.blocks) {
        const size_t pos = claims.size() * size_t(block_size);
        // The chain binds every block to the transcript (a manifest can only be consistent, but be sure).
        if (chain_block_hash(parent, m.tokens.data() + pos, ref.n_tokens) != ref.hash) {
            stopped = "hash does not match the transcript";
            stopped_bad_block = true;
            break;
        }
        Claim c{};
        c.block = cache.claim_block(ref.hash, ref.n_tokens == block_size, &c.cached);
        if (c.block < 0) {
            stopped = fmt::format("session: the KV pool has no room for block {}: recomputing {} tokens from position "
                                  "{} (raise --kv-mem or -c)",
                                  claims.size(), m.tokens.size() - pos, pos);
            break;
        }
        claims.push_back(c);
        parent = ref.hash;
    }

    // 2. Read and verify the claimed blocks' files, straight into the pool where it is host memory.
    std::vector<size_t> to_read;
    std::vector<int32_t> to_read_blocks;
    for (size_t i = 0; i < claims.size(); i++)
        if (!claims[i].cached) to_read.push_back(i), to_read_blocks.push_back(claims[i].block);
    std::vector<std::string> problems(claims.size());
    read_blocks(engine.backend(), store, m, cache.kv_namespace(), to_read, to_read_blocks, &problems);
    r.n_blocks_read = to_read.size();

    // 3. Keep the blocks before the first one that failed (indexing the full ones read from disk), hand back
    //    the rest; the transcript from there on is recomputed.
    size_t n_kept = 0;
    while (n_kept < claims.size() && problems[n_kept].empty()) n_kept++;
    parent = cache.kv_namespace();
    int32_t n_tokens = 0;
    for (size_t i = 0; i < n_kept; i++) {
        const SessionBlockRef& ref = m.blocks[i];
        if (!claims[i].cached && ref.n_tokens == block_size) cache.index_claimed(claims[i].block, ref.hash, parent);
        seq.table.blocks.push_back(claims[i].block);
        n_tokens += ref.n_tokens;
        parent = ref.hash;
    }
    for (size_t i = n_kept; i < claims.size(); i++) cache.release_claimed(claims[i].block);
    const bool bad_block = n_kept < claims.size() || stopped_bad_block;
    if (bad_block) {
        const std::string& problem = n_kept < claims.size() ? problems[n_kept] : stopped;
        const SessionBlockRef& ref = m.blocks[n_kept];
        const size_t pos = n_kept * size_t(block_size);
        r.bad_blocks.insert(ref.hash);
        r.warnings.push_back(fmt::format("session '{}': block {} ({}) {}: recomputing {} tokens from position {}",
                                         name, n_kept, ref.hash.hex(), problem, m.tokens.size() - pos, pos));
    } else if (!stopped.empty()) {
        r.warnings.push_back(stopped);
    }
    seq.table.n_tokens = n_tokens;
    seq.tokens.assign(m.tokens.begin(), m.tokens.begin() + n_tokens);
    r.n_restored = n_tokens;
    return r;
}

std::vector<int32_t> tokens_to_prefill(Engine& engine, Sequence& seq, const RestoredSession& restored,
                                       const std::vector<int32_t>& new_prompt) {
    KVLM_ASSERT(size_t(seq.table.n_tokens) <= restored.transcript.size() || !restored.existed,
                "restored more tokens than the transcript holds");
    if (restored.existed && new_prompt.empty() && size_t(seq.table.n_tokens) == restored.transcript.size() &&
        seq.table.n_tokens > 0)
        engine.prefix_cache().truncate(seq, seq.table.n_tokens - 1);
    std::vector<int32_t> tokens;
    if (restored.existed) tokens.assign(restored.transcript.begin() + seq.table.n_tokens, restored.transcript.end());
    tokens.insert(tokens.end(), new_prompt.begin(), new_prompt.end());
    return tokens;
}

SavedBlocks save_session(Engine& engine, SessionStore& store, const std::string& name, const Sequence& seq,
                  const std::vector<int32_t>& transcript, const RestoredSession& restored, uint64_t quota) {
    const int32_t block_size = engine.pool().block_size();
    const int32_t n_kv = seq.table.n_tokens;
    KVLM_ASSERT(size_t(n_kv) <= transcript.size() && std::equal(seq.tokens.begin(), seq.tokens.end(), transcript.begin()),
                "the transcript must start with the sequence's tokens");
    SessionManifest m;
    m.identity = session_identity(engine);
    m.tokens = transcript;
    m.n_kv_tokens = n_kv;
    int64_t now = int64_t(std::time(nullptr));
    m.created_unix = restored.existed && restored.created_unix ? restored.created_unix : now;
    m.last_used_unix = now;
    m.pinned = restored.pinned;
    BlockHash parent = engine.prefix_cache().kv_namespace();
    for (int32_t start = 0; start < n_kv; start += block_size) {
        SessionBlockRef ref;
        ref.n_tokens = std::min(block_size, n_kv - start);
        ref.hash = chain_block_hash(parent, transcript.data() + start, ref.n_tokens);
        parent = ref.hash;
        m.blocks.push_back(ref);
    }
    Backend& backend = engine.backend();
    const BlockRecordShape shape = block_record_shape(m.identity);
    KVLM_ASSERT(shape.full_bytes() == backend.kv_block_bytes(), "KV block record layout");
    auto read_payload = [&](size_t i, std::vector<uint8_t>& payload) {
        backend.read_kv_block(seq.table.blocks[i], payload.data());
        // A partial block keeps its tokens' rows only (the other slots hold stale bytes).
        if (m.blocks[i].n_tokens < block_size) pack_partial_record(shape, m.blocks[i].n_tokens, payload.data());
    };

    std::vector<BlockHash> superseded;
    if (restored.existed) {
        try {
            for (const SessionBlockRef& b : store.load_manifest(name).blocks) superseded.push_back(b.hash);
        } catch (const Error&) {
            // a damaged previous manifest protects nothing
        }
    }
    SavedBlocks written;
    try {
        written = store.save(name, m, engine.prefix_cache().kv_namespace(), shape, read_payload, restored.bad_blocks);
    } catch (const Error& e) {
        throw_error("cannot save session '{}' in {}: {}; the previous state of the session is intact and this "
                    "turn was not saved (free some disk space - `kvlm session gc --quota SIZE` shrinks the store, "
                    "`kvlm session rm NAME` drops a session - or choose another --session-dir, then run the turn "
                    "again)",
                    name, store.dir(), e.what());
    }
    store.collect(&superseded, quota);
    return written;
}

}  // namespace kvlm
