// The session store: a directory of content-addressed KV block files (blocks/ab/<hash>.kvb, named by the
// chained block hash, so sessions sharing a prefix share its files) plus one manifest per session
// (sessions/<NAME>.manifest), and for `kvlm chat` sessions the messages (chats/<NAME>.chat). Layout and
// formats: docs/SESSIONS.md.
// Invariant: a manifest only ever names blocks that were durable on disk before it was renamed into
// place, and every write is temp + fsync + rename, so a crash at any moment leaves the previous state.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "session/session_format.h"
#include "util/file_lock.h"

namespace kvlm {

constexpr uint64_t kDefaultSessionQuota = uint64_t(4) << 30;  // 4 GiB

struct SessionInfo {
    std::string name;
    bool readable = false;      // manifest decoded; otherwise `problem` says why
    std::string problem;
    SessionManifest manifest;
    uint64_t bytes = 0;         // manifest, chat messages and the block files it names that exist (shared
                                // ones counted fully)
    int32_t n_blocks_present = 0;
};

struct VerifyReport {
    int32_t n_sessions = 0;
    int32_t n_blocks_checked = 0;
    std::vector<std::string> problems;  // damage, one line each: "NAME: block 3 (<hex>): checksum mismatch"
    // Missing blocks are not damage (quota eviction deletes them; the next run recomputes their tokens):
    // one line per session that lacks some, "NAME: 12 of 30 blocks evicted or deleted: ...".
    std::vector<std::string> notes;
};

struct RemoveReport {
    std::vector<std::string> files;  // the session's own files that were deleted (manifest, chat messages)
    int32_t n_blocks_removed = 0;    // block files no other session referenced
    uint64_t bytes_freed = 0;
};

struct GcReport {
    int32_t n_removed = 0;         // unreferenced blocks and stale temporary files
    int32_t n_evicted = 0;         // referenced blocks dropped to meet the quota
    int32_t n_dirs_removed = 0;    // block shard directories (blocks/ab/) left empty
    uint64_t bytes_freed = 0;
    uint64_t bytes_after = 0;      // store size afterwards, as total_bytes() counts it
};

struct SavedBlocks {
    int32_t n_files = 0;
    uint64_t n_bytes = 0;  // headers included
};

class SessionStore {
public:
    // Nothing is created until a write; `dir` may not exist yet.
    explicit SessionStore(std::string dir);
    // $KVLM_SESSION_DIR, else $XDG_CACHE_HOME/kvlm, else $HOME/.cache/kvlm.
    static std::string default_dir();
    // Names are 1-128 characters of [A-Za-z0-9._-], not starting with '.' or '-'; throws Error otherwise.
    // A name starting with '-' (which older kvlm versions made) is accepted for existing sessions, so
    // that `kvlm session rm -- -name` can remove one; never for a new one.
    enum class NameUse { create, existing };
    static void check_name(const std::string& name, NameUse use = NameUse::create);

    const std::string& dir() const { return dir_; }
    std::string manifest_path(const std::string& name) const;
    std::string block_path(const BlockHash& hash) const;
    // `kvlm chat`'s messages for session NAME; its save writes chat_path(NAME) + ".new" first.
    std::string chat_path(const std::string& name) const;

    // Creates the directory tree, owner-only (0700), and tightens an older store that others could read (with a
    // note on stderr); throws a clear Error if it cannot be created or written.
    void ensure_writable() const;
    // Exclusive, non-blocking lock on one session, held while a run uses it. Throws Error naming the
    // session when another kvlm holds it, ending with `what_to_do`.
    FileLock lock_session(const std::string& name,
                          const std::string& what_to_do = "wait for it to finish or use another --session name") const;

    bool has_session(const std::string& name) const;
    // True if a chat saved messages for session NAME (chat_path or its .new): a chat session.
    bool has_chat_messages(const std::string& name) const;
    std::vector<std::string> session_names() const;  // sorted
    SessionManifest load_manifest(const std::string& name) const;  // throws Error naming the file and problem

    // Whether the first bytes of a block's file are in the page cache (false also when it is missing or
    // unreadable: read_block then says why). A restore reads a cold store with more threads.
    bool block_cached(const BlockHash& hash) const;
    // Reads and verifies one block file (header fields against ref/namespace/shape, payload checksum against
    // the header and ref.checksum) into `record` (shape.full_bytes(); a restore passes the pool block itself),
    // a partial block's packed rows moved to their slots. Returns "", or the problem ("missing", "checksum
    // mismatch", ...) with record's bytes undefined. Never throws for bad file content; safe to call from
    // several threads at once.
    std::string read_block(const SessionBlockRef& ref, const BlockHash& kv_namespace, const BlockRecordShape& shape,
                           void* record) const;

    // Saves a session: writes every block of manifest.blocks that is not already on disk with a valid
    // header (or is listed in `rewrite`), fetching its record with read_payload(i, buffer) (buffer:
    // shape.full_bytes(); the callee leaves the stored form, shape.stored_bytes(n_tokens), at its front), then
    // the manifest. Fills manifest.blocks[i].checksum. Holds the store lock shared. On any error the previous
    // manifest is untouched (new block files may remain; gc removes them if unreferenced).
    // Returns the block files written (the others were already stored) and their bytes.
    using PayloadFn = std::function<void(size_t block_index, std::vector<uint8_t>& payload)>;
    SavedBlocks save(const std::string& name, SessionManifest& manifest, const BlockHash& kv_namespace,
                 const BlockRecordShape& shape, const PayloadFn& read_payload,
                 const std::unordered_set<BlockHash, BlockHashHasher>& rewrite = {});
    // Rewrites only the manifest (pin/unpin, last-used time). Holds the store lock shared.
    void write_manifest(const std::string& name, const SessionManifest& manifest);

    std::vector<SessionInfo> list() const;
    // Deletes everything session NAME owns: its manifest, its chat messages (chat_path, and .new) and every
    // block no other manifest references. Chat files left without a manifest (by an older kvlm) are removed
    // too. Throws, deleting nothing, if the session does not exist or is in use. Its lock file stays: a
    // lock file is never deleted (another process may have it open, about to lock it).
    RemoveReport remove(const std::string& name);
    // Full check of one session (name non-empty) or all of them.
    VerifyReport verify(const std::string& name) const;
    // Deletes unreferenced blocks in `candidates` (when candidates is null: all unreferenced blocks, and the
    // temporary files of killed writers - all in blocks/ and sessions/, those in chats/ once an hour old),
    // then, if quota > 0 and the store is larger, evicts least recently used blocks not referenced by
    // pinned sessions (the tail of a session first) until it fits. Shard directories it leaves empty are
    // removed (all empty ones when candidates is null). Lock files are never deleted.
    GcReport collect(const std::vector<BlockHash>* candidates, uint64_t quota);
    // Bytes of every file in sessions/, blocks/ and chats/: manifests, block files, chat messages and
    // leftover temporary files. Lock files (empty) are not counted. The quota applies to this sum.
    uint64_t total_bytes() const;

private:
    void make_owner_only() const;
    std::string dir_;
};

}  // namespace kvlm
