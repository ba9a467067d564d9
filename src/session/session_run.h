// Sessions in a run: restore a saved session's transcript and K/V into the pool (each block read and
// verified, then adopted through the prefix cache), and save the sequence back after a turn. A refused
// session (unreadable manifest, other setup, too large) leaves the pool and `seq` untouched.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/engine.h"
#include "kv/prefix_cache.h"
#include "session/session_store.h"

namespace kvlm {

// The identity a session saved by this engine carries (model fingerprint, KV dtype/layout, block size, RoPE).
SessionIdentity session_identity(Engine& engine);

struct RestoredSession {
    bool existed = false;
    std::vector<int32_t> transcript;  // saved tokens (empty for a new session)
    int32_t n_restored = 0;           // leading transcript tokens whose K/V are now in seq
    // Block files read for the restore (blocks this process had cached are not). Those past a damaged block are
    // counted though not kept.
    size_t n_blocks_read = 0;
    std::vector<std::string> warnings;
    std::unordered_set<BlockHash, BlockHashHasher> bad_blocks;
    int64_t created_unix = 0;
    bool pinned = false;
};

// Throws Error (naming the numbers and the -c / --kv-mem value that would do) if a session of n_saved
// tokens plus n_new new prompt tokens does not fit the engine's context or KV pool.
void check_session_fits(Engine& engine, const std::string& name, size_t n_saved, size_t n_new);

// Restores session `name` into `seq`, which must be empty; a session that does not exist yet gives
// existed = false and an untouched seq. Throws Error (naming the field, both values and how to start
// fresh) if the manifest is unreadable, from another format version or another setup, and refuses a
// session larger than the context or the KV pool (check_session_fits), all before the pool is touched.
// Blocks already cached in this process are reused (PrefixCache::claim_block); the others are read from
// their files straight into the pool, several at once, where it is host memory. A damaged or missing block,
// or a full pool, is not an error: the restore stops there and a warning says how many tokens will be
// recomputed.
RestoredSession restore_session(Engine& engine, const SessionStore& store, const std::string& name, Sequence& seq);

// The tokens a turn must prefill on top of a restored seq: the transcript tokens not in its K/V, then the
// new prompt. If that would be empty, seq is truncated by one token so the last token's logits exist.
std::vector<int32_t> tokens_to_prefill(Engine& engine, Sequence& seq, const RestoredSession& restored,
                                       const std::vector<int32_t>& new_prompt);

// Saves seq (its K/V) with `transcript` (seq.tokens plus an optional pending token) as session `name`:
// new blocks first, manifest last. Then drops the blocks the previous manifest named that nothing
// references any more and enforces `quota` (0 = none). Throws Error with the previous state intact.
// Returns the block files written.
SavedBlocks save_session(Engine& engine, SessionStore& store, const std::string& name, const Sequence& seq,
                  const std::vector<int32_t>& transcript, const RestoredSession& restored, uint64_t quota);

}  // namespace kvlm
