// Session store directory management: block files, manifests, locks, listing, verify and gc.
// Locks: locks/<NAME>.lock (exclusive, non-blocking) serializes writers of one session for a whole run;
// store.lock is held shared while reading or writing blocks/ and sessions/ and exclusive while deleting
// (rm, gc, quota), so a deletion never races a save that is about to reference an existing block.
#include "session/session_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_map>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/input_file.h"

namespace kvlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestSuffix = ".manifest";
constexpr const char* kBlockSuffix = ".kvb";
// `kvlm chat` writes chats/ under its session lock only, never the store lock (src/cli/chat.cpp), so gc
// cannot tell a live temporary file there from a killed writer's by locking; it takes the file's age
// instead. A live write of a small file (write, fsync, rename) takes far less than this, and a writer
// stalled for longer only fails its save, with the previous state intact (its rename finds no file).
constexpr int64_t kStaleChatTempSeconds = 3600;

std::string store_lock_path(const std::string& dir) { return dir + "/store.lock"; }

// What a file takes on disk (allocated blocks), which the quota and `session ls` count: a sparse or
// preallocated file's apparent size says nothing about the space it uses.
uint64_t disk_bytes_or_zero(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : 0;
}

// False for any failure (missing, or no permission to look): callers then treat the path as absent.
bool path_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

bool is_temp_file_name(const std::string& name) { return name.rfind(kTempFilePrefix, 0) == 0; }

std::string file_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The regular files directly in `dir` (none if it is missing or cannot be listed).
std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> files;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
        if (it->is_regular_file(ec)) files.push_back(it->path().string());
    return files;
}

uint64_t bytes_of_files_in(const std::string& dir) {
    uint64_t total = 0;
    for (const std::string& f : files_in(dir)) total += disk_bytes_or_zero(f);
    return total;
}

bool modified_before(const std::string& path, int64_t seconds_ago) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && int64_t(st.st_mtime) <= int64_t(std::time(nullptr)) - seconds_ago;
}

struct BlockFile {
    std::string path;
    BlockHash hash;
    uint64_t bytes = 0;
};

// Every block file (and stale temporary file, hash zero) under blocks/.
std::vector<BlockFile> scan_blocks(const std::string& dir, std::vector<std::string>* temp_files) {
    std::vector<BlockFile> files;
    std::error_code ec;
    fs::path root = fs::path(dir) / "blocks";
    if (!fs::is_directory(root, ec)) return files;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        std::string name = it->path().filename().string();
        if (is_temp_file_name(name)) {
            if (temp_files) temp_files->push_back(it->path().string());
            continue;
        }
        if (name.size() != 32 + std::strlen(kBlockSuffix) || name.compare(32, std::string::npos, kBlockSuffix) != 0)
            continue;
        BlockFile f;
        if (!BlockHash::from_hex(name.substr(0, 32), &f.hash)) continue;
        f.path = it->path().string();
        f.bytes = disk_bytes_or_zero(f.path);
        files.push_back(f);
    }
    return files;
}

// Temporary files in sessions/ and chats/ that no live writer can still be writing (blocks/ ones come
// from scan_blocks). Call with the store lock held exclusively.
std::vector<std::string> stale_temp_files(const std::string& dir) {
    std::vector<std::string> stale;
    // sessions/ is written only under the store lock (save, write_manifest), so its temporary files are stale.
    for (const std::string& f : files_in(dir + "/sessions"))
        if (is_temp_file_name(file_name(f))) stale.push_back(f);
    for (const std::string& f : files_in(dir + "/chats"))
        if (is_temp_file_name(file_name(f)) && modified_before(f, kStaleChatTempSeconds)) stale.push_back(f);
    return stale;
}

std::vector<std::string> shard_dirs(const std::string& dir) {
    std::vector<std::string> dirs;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir + "/blocks", ec); !ec && it != fs::directory_iterator(); it.increment(ec))
        if (it->is_directory(ec)) dirs.push_back(it->path().string());
    return dirs;
}

// Removes those of `dirs` that are empty (rmdir refuses the others) and returns how many. Only with the
// store lock held exclusively: a save creates its shard directory just before writing into it.
int32_t remove_empty_directories(std::vector<std::string> dirs) {
    std::sort(dirs.begin(), dirs.end());
    dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
    int32_t n_removed = 0;
    for (const std::string& d : dirs) n_removed += ::rmdir(d.c_str()) == 0;
    return n_removed;
}

// The manifest always names the session it is written for (a copy under another name is then refused).
void write_manifest_file(const std::string& path, const std::string& name, SessionManifest manifest) {
    manifest.session_name = name;
    std::vector<uint8_t> bytes = encode_manifest(manifest);
    write_file_atomic(path, bytes.data(), bytes.size(), fmt::format("session '{}': manifest", name));
}

}  // namespace

SessionStore::SessionStore(std::string dir) : dir_(std::move(dir)) {
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string SessionStore::default_dir() {
    if (const char* env = std::getenv("KVLM_SESSION_DIR"); env && *env) return env;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kvlm";
    const char* home = std::getenv("HOME");
    if (!home || !*home) throw_error("no session directory: set KVLM_SESSION_DIR or HOME, or pass --session-dir");
    return std::string(home) + "/.cache/kvlm";
}

void SessionStore::check_name(const std::string& name, NameUse use) {
    bool ok = !name.empty() && name.size() <= 128 && name[0] != '.';
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) ok = false;
    if (!ok)
        throw_error("session name '{}' is not valid: use 1-128 letters, digits, '.', '_' or '-', not starting with '.' "
                    "or '-'",
                    name);
    if (use == NameUse::create && name[0] == '-')
        throw_error("session name '{}' is not valid: it starts with '-', so commands would read it as an option; "
                    "use 1-128 letters, digits, '.', '_' or '-', not starting with '.' or '-'",
                    name);
}

std::string SessionStore::manifest_path(const std::string& name) const {
    return dir_ + "/sessions/" + name + kManifestSuffix;
}

std::string SessionStore::chat_path(const std::string& name) const { return dir_ + "/chats/" + name + ".chat"; }

std::string SessionStore::block_path(const BlockHash& hash) const {
    std::string hex = hash.hex();
    return dir_ + "/blocks/" + hex.substr(0, 2) + "/" + hex + kBlockSuffix;
}

void SessionStore::ensure_writable() const {
    for (const char* sub : {"", "/sessions", "/blocks", "/locks"}) {
        std::string path = dir_ + sub;
        std::string problem;
        try {
            make_private_directories(path);
        } catch (const Error& e) {
            problem = e.what();
        }
        if (problem.empty() && ::access(path.c_str(), W_OK | X_OK) != 0) problem = std::strerror(errno);
        if (!problem.empty())
            throw_error("session directory {} is not usable: cannot create or write {}: {} (choose another with "
                        "--session-dir or KVLM_SESSION_DIR)",
                        dir_, path, problem);
    }
    make_owner_only();
}

// The store holds chats' text and every session's token ids and K/V: it is owner-only. A store a kvlm before
// 2026-12-02 made (0755 directories, 0644 files under the usual umask) is tightened on its first write, with a
// note.
void SessionStore::make_owner_only() const {
    struct stat st;
    if (::stat(dir_.c_str(), &st) != 0 || (st.st_mode & 077) == 0) return;
    const unsigned before = st.st_mode & 0777;
    // Once per store: every directory 0700 and every file 0600 (a walk of the block files too, which is why it
    // runs only on a store found loose).
    ::chmod(dir_.c_str(), 0700);
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (it->is_symlink(ec)) continue;
        if (it->is_directory(ec)) ::chmod(it->path().c_str(), 0700);
        else if (it->is_regular_file(ec)) ::chmod(it->path().c_str(), 0600);
    }
    std::fprintf(stderr,
                 "kvlm: note: session directory %s could be read by other users (mode %03o); made it owner-only "
                 "(directories 0700, files 0600)\n",
                 dir_.c_str(), before);
}

FileLock SessionStore::lock_session(const std::string& name, const std::string& what_to_do) const {
    // A session that does not exist yet is about to be created: its name must pass as a new one before its lock
    // file is made (a refused "-x" left locks/-x.lock behind).
    check_name(name, has_session(name) ? NameUse::existing : NameUse::create);
    ensure_writable();
    FileLock lock;
    if (!lock.try_lock(dir_ + "/locks/" + name + ".lock", FileLock::Mode::exclusive))
        throw_error("session '{}' is in use by another kvlm process (lock {}/locks/{}.lock is held); {}", name, dir_,
                    name, what_to_do);
    return lock;
}

bool SessionStore::has_session(const std::string& name) const {
    struct stat st;
    return ::stat(manifest_path(name).c_str(), &st) == 0;
}

bool SessionStore::has_chat_messages(const std::string& name) const {
    struct stat st;
    return ::stat(chat_path(name).c_str(), &st) == 0 || ::stat((chat_path(name) + ".new").c_str(), &st) == 0;
}

std::vector<std::string> SessionStore::session_names() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir_ + "/sessions", ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
        std::string file = it->path().filename().string();
        size_t n = std::strlen(kManifestSuffix);
        if (file.size() > n && file.compare(file.size() - n, n, kManifestSuffix) == 0 && file[0] != '.')
            names.push_back(file.substr(0, file.size() - n));
    }
    // A store that does not exist yet has no sessions; one that cannot be read is not "empty".
    if (ec && ec != std::errc::no_such_file_or_directory)
        throw_error("session directory {}: cannot list {}/sessions: {} (choose another with --session-dir or "
                    "KVLM_SESSION_DIR)",
                    dir_, dir_, ec.message());
    std::sort(names.begin(), names.end());
    return names;
}

SessionManifest SessionStore::load_manifest(const std::string& name) const {
    std::string path = manifest_path(name);
    std::vector<uint8_t> bytes;
    if (!read_whole_file(path, &bytes)) throw_error("session '{}' does not exist ({} not found)", name, path);
    SessionManifest manifest = decode_manifest(bytes.data(), bytes.size(), path);
    // A manifest copied or renamed by hand would continue another session's transcript under this name.
    if (!manifest.session_name.empty() && manifest.session_name != name)
        throw_error("{}: this manifest belongs to session '{}', not '{}' (copied or renamed by hand?)", path,
                    manifest.session_name, name);
    return manifest;
}

namespace {

// A block file's header: its last kBlockHeaderSize bytes (version 2) or, in a file written before
// 2026-11-26, its first (version 1). Throws Error naming the file when neither holds a header of its place.
BlockFileHeader read_block_header(InputFile& file, const std::string& path) {
    uint8_t head[kBlockHeaderSize];
    const uint64_t size = file.size();
    std::string at_end_problem = fmt::format("{}: file is {} bytes, too short for a block header", path, size);
    if (size >= kBlockHeaderSize) {
        try {
            const size_t n = file.read_at(head, kBlockHeaderSize, size - kBlockHeaderSize);
            BlockFileHeader h = decode_block_header(head, n, size, path);
            if (h.format_version != 1) return h;
            at_end_problem = fmt::format("{}: a version-1 block header at the end of the file (damaged)", path);
        } catch (const Error& e) {
            at_end_problem = fmt::format("{} at its end (truncated or damaged: a block file ends with its header)",
                                         e.what());
        }
    }
    try {
        const size_t n = file.read_at(head, kBlockHeaderSize, 0);
        BlockFileHeader h = decode_block_header(head, n, size, path);
        if (h.format_version == 1) return h;
    } catch (const Error&) {
        // not a version-1 file either: report what the end of it said (version 2 is what kvlm writes)
    }
    throw Error(at_end_problem);
}

}  // namespace

bool SessionStore::block_cached(const BlockHash& hash) const {
    try {
        InputFile file;
        uint8_t byte;
        return file.open(block_path(hash)) && file.read_cached_at(&byte, 1, 0);
    } catch (const Error&) {
        return false;
    }
}

std::string SessionStore::read_block(const SessionBlockRef& ref, const BlockHash& kv_namespace,
                                     const BlockRecordShape& shape, void* record) const {
    const std::string path = block_path(ref.hash);
    try {
        // One descriptor. A version-2 file of a size this block can have: its payload is read straight into the
        // record in the same call as the header after it (from a cold cache, one read per file) and is kept once
        // the header checks out. Any other file: the header first, so a damaged or foreign file is refused
        // without reading (or allocating) its size.
        InputFile file;
        if (!file.open(path)) return "missing";
        const uint64_t file_size = file.size();
        const size_t full = shape.full_bytes();
        const bool plausible_tokens = ref.n_tokens >= 1 && ref.n_tokens <= shape.block_size;
        std::optional<BlockFileHeader> h;
        if (plausible_tokens && file_size >= kBlockHeaderSize &&
            (file_size - kBlockHeaderSize == full || file_size - kBlockHeaderSize == shape.stored_bytes(ref.n_tokens))) {
            const size_t size = size_t(file_size - kBlockHeaderSize);
            uint8_t footer[kBlockHeaderSize];
            // A small read first, then the rest of the payload, then the header: from a cold cache this ran 2x
            // faster here than one read of the whole file, a readv of payload and header 1.3x slower (the
            // kernel's readahead; bench/RESULTS.md, session 17).
            uint8_t* bytes = static_cast<uint8_t*>(record);
            const size_t head = std::min<size_t>(size, kBlockHeaderSize);
            if (file.read_at(bytes, head, 0) != head || file.read_at(bytes + head, size - head, head) != size - head ||
                file.read_at(footer, kBlockHeaderSize, size) != kBlockHeaderSize)
                return "changed while being read";
            try {
                h = decode_block_header(footer, kBlockHeaderSize, file_size, path);
                if (h->format_version == 1) h.reset();
            } catch (const Error&) {
                // not a version-2 header: read_block_header below says what the file is
            }
        }
        const bool payload_read = h.has_value();
        if (!h) h = read_block_header(file, path);
        if (h->kv_namespace != kv_namespace) return "belongs to another model or KV layout (namespace mismatch)";
        if (h->hash != ref.hash) return "header names another block (" + h->hash.hex() + ")";
        if (h->n_tokens != ref.n_tokens || !plausible_tokens)
            return fmt::format("holds {} tokens, expected {}", h->n_tokens, ref.n_tokens);
        // A partial block is stored packed, or whole by a kvlm before 2026-11-26.
        const size_t packed = shape.stored_bytes(ref.n_tokens);
        if (h->payload_size != packed && h->payload_size != full)
            return fmt::format("payload is {} bytes, expected {}", h->payload_size, packed);
        const size_t size = size_t(h->payload_size);
        if (!payload_read && file.read_at(record, size, block_payload_offset(*h)) != size)
            return "changed while being read";
        uint64_t actual = payload_checksum(record, size);
        if (actual != h->payload_checksum || actual != ref.checksum)
            return "checksum mismatch (the file is damaged)";
        if (size != full) unpack_partial_record(shape, ref.n_tokens, static_cast<uint8_t*>(record));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

SavedBlocks SessionStore::save(const std::string& name, SessionManifest& manifest, const BlockHash& kv_namespace,
                        const BlockRecordShape& shape, const PayloadFn& read_payload,
                        const std::unordered_set<BlockHash, BlockHashHasher>& rewrite) {
    check_name(name);
    ensure_writable();
    FileLock store_lock;
    store_lock.lock(store_lock_path(dir_), FileLock::Mode::shared);
    std::vector<std::string> dirs_to_sync;
    std::vector<uint8_t> payload;
    SavedBlocks written;
    for (size_t i = 0; i < manifest.blocks.size(); i++) {
        SessionBlockRef& ref = manifest.blocks[i];
        const size_t payload_size = shape.stored_bytes(ref.n_tokens);
        std::string path = block_path(ref.hash);
        if (!rewrite.count(ref.hash)) {
            std::optional<BlockFileHeader> stored;
            try {
                InputFile existing;
                if (existing.open(path)) stored = read_block_header(existing, path);
            } catch (const Error&) {
                // unreadable or damaged header: rewrite the block below
            }
            if (stored && stored->kv_namespace == kv_namespace && stored->hash == ref.hash &&
                stored->n_tokens == ref.n_tokens && stored->payload_size == payload_size) {
                ref.checksum = stored->payload_checksum;  // already stored (dedup)
                continue;
            }
        }
        payload.assign(shape.full_bytes(), 0);
        read_payload(i, payload);
        BlockFileHeader h;
        h.kv_namespace = kv_namespace;
        h.hash = ref.hash;
        h.n_tokens = ref.n_tokens;
        h.payload_size = payload_size;
        h.payload_checksum = payload_checksum(payload.data(), payload_size);
        ref.checksum = h.payload_checksum;
        std::string sub = path.substr(0, path.rfind('/'));
        make_private_directories(sub);
        std::vector<uint8_t> file = encode_block_file(h, payload.data());
        write_file_atomic(path, file.data(), file.size(), fmt::format("session '{}': block {}", name, i), false);
        written.n_files++;
        written.n_bytes += file.size();
        if (std::find(dirs_to_sync.begin(), dirs_to_sync.end(), sub) == dirs_to_sync.end()) {
            dirs_to_sync.push_back(sub);
            dirs_to_sync.push_back(sub.substr(0, sub.rfind('/')));  // blocks/ (a new ab/ entry)
        }
    }
    // Every block rename is durable before the manifest that names it appears.
    std::sort(dirs_to_sync.begin(), dirs_to_sync.end());
    dirs_to_sync.erase(std::unique(dirs_to_sync.begin(), dirs_to_sync.end()), dirs_to_sync.end());
    for (const std::string& d : dirs_to_sync) fsync_directory(d);
    write_manifest_file(manifest_path(name), name, manifest);
    return written;
}

void SessionStore::write_manifest(const std::string& name, const SessionManifest& manifest) {
    // Shared, like save(): gc, holding it exclusively, knows every temporary file in sessions/ is a leftover.
    FileLock store_lock;
    store_lock.lock(store_lock_path(dir_), FileLock::Mode::shared);
    write_manifest_file(manifest_path(name), name, manifest);
}

std::vector<SessionInfo> SessionStore::list() const {
    std::vector<SessionInfo> out;
    FileLock store_lock;
    if (path_exists(store_lock_path(dir_))) store_lock.lock(store_lock_path(dir_), FileLock::Mode::shared);
    for (const std::string& name : session_names()) {
        SessionInfo info;
        info.name = name;
        info.bytes = disk_bytes_or_zero(manifest_path(name)) + disk_bytes_or_zero(chat_path(name)) +
                     disk_bytes_or_zero(chat_path(name) + ".new");
        try {
            info.manifest = load_manifest(name);
            info.readable = true;
            for (const SessionBlockRef& b : info.manifest.blocks) {
                info.bytes += disk_bytes_or_zero(block_path(b.hash));
                info.n_blocks_present += path_exists(block_path(b.hash));
            }
        } catch (const Error& e) {
            info.problem = e.what();
        }
        out.push_back(std::move(info));
    }
    return out;
}

RemoveReport SessionStore::remove(const std::string& name) {
    check_name(name, NameUse::existing);
    const std::vector<std::string> chat_files = {chat_path(name), chat_path(name) + ".new"};
    auto any_exists = [&] {
        return has_session(name) || path_exists(chat_files[0]) || path_exists(chat_files[1]);
    };
    if (!any_exists()) throw_error("session '{}' does not exist in {}", name, dir_);
    // Held until the end: no run or chat of this session can save (and recreate its files) meanwhile.
    FileLock session_lock = lock_session(
        name, fmt::format("nothing was removed (run `kvlm session rm {}` again once it has finished)", name));
    if (!any_exists()) throw_error("session '{}' does not exist in {}", name, dir_);  // a concurrent rm was first
    RemoveReport report;
    std::vector<BlockHash> candidates;
    try {
        for (const SessionBlockRef& b : load_manifest(name).blocks) candidates.push_back(b.hash);
    } catch (const Error&) {
        // unreadable or no manifest: delete what there is; a later gc removes orphaned blocks
    }
    auto unlink_file = [&](const std::string& path) {
        uint64_t bytes = disk_bytes_or_zero(path);
        if (::unlink(path.c_str()) == 0) {
            report.files.push_back(path);
            report.bytes_freed += bytes;
            return true;
        }
        if (errno != ENOENT) throw_error("{}: cannot delete: {}", path, std::strerror(errno));
        return false;
    };
    {
        FileLock store_lock;
        store_lock.lock(store_lock_path(dir_), FileLock::Mode::exclusive);
        // The manifest first: once it is gone the session is gone, and a stop before the chat files are
        // deleted leaves only files that a second rm removes.
        if (unlink_file(manifest_path(name))) fsync_directory(dir_ + "/sessions");
        bool chat_removed = false;
        for (const std::string& path : chat_files) chat_removed = unlink_file(path) || chat_removed;
        if (chat_removed) fsync_directory(dir_ + "/chats");
    }
    GcReport gc = collect(&candidates, 0);
    report.n_blocks_removed = gc.n_removed;
    report.bytes_freed += gc.bytes_freed;
    return report;
}

VerifyReport SessionStore::verify(const std::string& name) const {
    VerifyReport report;
    std::vector<std::string> names = name.empty() ? session_names() : std::vector<std::string>{name};
    if (!name.empty()) {
        check_name(name, NameUse::existing);
        if (!has_session(name)) throw_error("session '{}' does not exist in {}", name, dir_);
    }
    FileLock store_lock;
    if (path_exists(store_lock_path(dir_))) store_lock.lock(store_lock_path(dir_), FileLock::Mode::shared);
    std::vector<uint8_t> payload;
    for (const std::string& n : names) {
        report.n_sessions++;
        SessionManifest m;
        try {
            m = load_manifest(n);
        } catch (const Error& e) {
            report.problems.push_back(fmt::format("{}: manifest unreadable: {}", n, e.what()));
            continue;
        }
        BlockHash ns = kv_namespace_hash(m.identity.model_fingerprint, m.identity.kv_dtype, m.identity.block_size);
        const BlockRecordShape shape = block_record_shape(m.identity);
        BlockHash parent = ns;
        size_t n_missing = 0, first_missing = 0;
        for (size_t i = 0; i < m.blocks.size(); i++) {
            const SessionBlockRef& ref = m.blocks[i];
            BlockHash want = chain_block_hash(parent, m.tokens.data() + i * m.identity.block_size, ref.n_tokens);
            if (want != ref.hash)
                report.problems.push_back(fmt::format("{}: block {} ({}): hash does not match the transcript", n, i,
                                                      ref.hash.hex()));
            parent = ref.hash;
            report.n_blocks_checked++;
            payload.resize(shape.full_bytes());
            std::string problem = read_block(ref, ns, shape, payload.data());
            if (problem == "missing") {
                if (n_missing++ == 0) first_missing = i;
            } else if (!problem.empty())
                report.problems.push_back(fmt::format("{}: block {} ({}): {} ({} tokens from position {} would be "
                                                      "recomputed)",
                                                      n, i, ref.hash.hex(), problem,
                                                      m.tokens.size() - i * size_t(m.identity.block_size),
                                                      i * size_t(m.identity.block_size)));
        }
        if (n_missing > 0) {
            size_t from = first_missing * size_t(m.identity.block_size);
            report.notes.push_back(fmt::format("{}: {} of {} blocks evicted (session gc --quota) or deleted: its next "
                                               "run recomputes {} tokens from position {}",
                                               n, n_missing, m.blocks.size(), m.tokens.size() - from, from));
        }
    }
    return report;
}

uint64_t SessionStore::total_bytes() const {
    std::vector<std::string> temp_files;
    uint64_t total = bytes_of_files_in(dir_ + "/sessions") + bytes_of_files_in(dir_ + "/chats");
    for (const BlockFile& f : scan_blocks(dir_, &temp_files)) total += f.bytes;
    for (const std::string& t : temp_files) total += disk_bytes_or_zero(t);
    return total;
}

GcReport SessionStore::collect(const std::vector<BlockHash>* candidates, uint64_t quota) {
    GcReport report;
    if (!path_exists(dir_ + "/blocks")) return report;
    FileLock store_lock;
    store_lock.lock(store_lock_path(dir_), FileLock::Mode::exclusive);

    // Reference map: per block, the most recent last-use of a session naming it, its position in that
    // session (later blocks go first), and whether a pinned session protects it.
    struct Use {
        int64_t last_used = 0;
        size_t index = 0;
        bool pinned = false;
    };
    std::unordered_map<BlockHash, Use, BlockHashHasher> uses;
    for (const std::string& n : session_names()) {
        SessionManifest m;
        try {
            m = load_manifest(n);
        } catch (const Error&) {
            continue;  // an unreadable manifest protects nothing
        }
        for (size_t i = 0; i < m.blocks.size(); i++) {
            auto [it, fresh] = uses.try_emplace(m.blocks[i].hash);
            Use& u = it->second;
            if (fresh || m.last_used_unix > u.last_used) {
                u.last_used = m.last_used_unix;
                u.index = i;
            }
            u.pinned = u.pinned || m.pinned;
        }
    }

    std::vector<std::string> temp_files;
    std::vector<BlockFile> files = scan_blocks(dir_, &temp_files);
    auto drop = [&](const std::string& path, uint64_t bytes) {
        if (::unlink(path.c_str()) == 0) report.bytes_freed += bytes;
    };
    std::vector<std::string> touched_dirs;  // shard directories that lost a block file
    auto drop_block = [&](const BlockFile& f) {
        drop(f.path, f.bytes);
        touched_dirs.push_back(f.path.substr(0, f.path.rfind('/')));
    };
    // `total` is what stays: the same sum as total_bytes(), which `session ls` reports.
    uint64_t total = 0;
    if (candidates) {
        for (const std::string& t : temp_files) total += disk_bytes_or_zero(t);  // left for a full gc
    } else {
        // No save is in progress (we hold the store lock exclusively), so every temporary file in blocks/
        // is a leftover; stale_temp_files() adds the ones of sessions/ and chats/.
        for (const std::string& t : stale_temp_files(dir_)) temp_files.push_back(t);
        for (const std::string& t : temp_files) {
            drop(t, disk_bytes_or_zero(t));
            report.n_removed++;
        }
    }
    total += bytes_of_files_in(dir_ + "/sessions") + bytes_of_files_in(dir_ + "/chats");
    std::unordered_set<BlockHash, BlockHashHasher> wanted;
    if (candidates) wanted.insert(candidates->begin(), candidates->end());
    std::vector<BlockFile> kept;
    for (const BlockFile& f : files) {
        if (!uses.count(f.hash) && (!candidates || wanted.count(f.hash))) {
            drop_block(f);
            report.n_removed++;
        } else {
            kept.push_back(f);
            total += f.bytes;
        }
    }
    if (quota > 0 && total > quota) {
        std::vector<BlockFile> order;
        for (const BlockFile& f : kept)
            if (!uses.count(f.hash) || !uses[f.hash].pinned) order.push_back(f);
        std::sort(order.begin(), order.end(), [&](const BlockFile& a, const BlockFile& b) {
            const Use &ua = uses[a.hash], &ub = uses[b.hash];
            if (ua.last_used != ub.last_used) return ua.last_used < ub.last_used;
            return ua.index > ub.index;
        });
        for (const BlockFile& f : order) {
            if (total <= quota) break;
            drop_block(f);
            total -= f.bytes;
            report.n_evicted++;
        }
    }
    // A full gc also clears shard directories emptied earlier (by an older kvlm, or of their temporary
    // files just now). Lock files stay: deleting one another process has open breaks its exclusion.
    if (!candidates) touched_dirs = shard_dirs(dir_);
    report.n_dirs_removed = remove_empty_directories(touched_dirs);
    report.bytes_after = total;
    return report;
}

}  // namespace kvlm
