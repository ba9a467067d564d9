// Session store in-process: manifest/block encodings (round trip, truncation, bit flips, future
// versions), identity checks, resume equivalence (3 turns in one engine == 3 turns each restored from
// disk into a fresh engine, same tokens and bit-identical logits), prefill counts after a restore,
// dedup of shared prefixes, rm/gc/quota, what gc cleans up and what the sizes count.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>

#include "cli/cli.h"
#include "engine/engine.h"
#include "generate/generate.h"
#include "session/session_format.h"
#include "session/session_run.h"
#include "session/session_store.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

SessionManifest sample_manifest() {
    SessionManifest m;
    m.session_name = "a";
    m.identity.model_fingerprint = "0123456789abcdef0123456789abcdef";
    m.identity.model_description = "tiny.kvlm (llama, from GGUF tiny.gguf)";
    m.identity.n_layers = 2;
    m.identity.n_kv_heads = 2;
    m.identity.head_dim = 4;
    m.identity.block_size = 4;
    m.identity.rope_theta = 10000;
    m.tokens = {1, 5, 6, 7, 8, 9, 10};
    m.n_kv_tokens = 6;
    BlockHash ns = kv_namespace_hash(m.identity.model_fingerprint, DType::f32, 4);
    SessionBlockRef a{chain_block_hash(ns, m.tokens.data(), 4), 4, 11};
    SessionBlockRef b{chain_block_hash(a.hash, m.tokens.data() + 4, 2), 2, 22};
    m.blocks = {a, b};
    m.created_unix = 100;
    m.last_used_unix = 200;
    return m;
}

template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

const std::vector<std::string> kTurns = {"Once upon a time", " Lily saw a big red ball.", " Then"};

// Session "a" of sample_manifest() with made-up block contents.
SessionManifest save_sample(SessionStore& store) {
    SessionManifest m = sample_manifest();
    BlockHash ns = kv_namespace_hash(m.identity.model_fingerprint, DType::f32, 4);
    store.save("a", m, ns, block_record_shape(m.identity),
               [](size_t i, std::vector<uint8_t>& p) { std::fill(p.begin(), p.end(), uint8_t(i)); });
    return m;
}

// What a file uses on disk: the size the store's accounting counts.
uint64_t disk_bytes(const std::string& path) {
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return uint64_t(st.st_blocks) * 512;
}

// Moves a file's modification time `seconds` into the past, as a killed writer's leftover would have it.
void age_file(const std::string& path, int64_t seconds) {
    struct timespec times[2] = {{std::time(nullptr) - seconds, 0}, {std::time(nullptr) - seconds, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::string parent_dir(const std::string& path) { return std::filesystem::path(path).parent_path().string(); }

// A greedy run of 40 new tokens per turn, continuing session `name` in `dir`.
RunOptions greedy_session(const std::string& dir, const std::string& name) {
    RunOptions options;
    options.session.name = name;
    options.session.dir = dir;
    options.n_predict = 40;
    options.sampling.temperature = 0;
    return options;
}

// The session's first turn on stories260K, "Once upon a time": 44 tokens in KV, 3 blocks at block size 16.
void first_story_turn(const RunOptions& options, const EngineOptions& engine_options = quiet_cpu_engine()) {
    Engine engine(stories(), engine_options);
    run_session_turn(engine, options, "Once upon a time", engine.tokenizer().encode("Once upon a time", true, true),
                     [](const std::string&) {});
}

}  // namespace

TEST_CASE("session format: manifest round trip; truncation, bit flips and future versions are refused") {
    SessionManifest m = sample_manifest();
    std::vector<uint8_t> bytes = encode_manifest(m);
    SessionManifest back = decode_manifest(bytes.data(), bytes.size(), "m");
    CHECK(back.tokens == m.tokens);
    CHECK(back.session_name == "a");
    CHECK(back.identity.model_description == m.identity.model_description);
    CHECK(back.n_kv_tokens == 6);
    REQUIRE(back.blocks.size() == 2);
    CHECK(back.blocks[1].hash == m.blocks[1].hash);
    CHECK(back.blocks[1].checksum == 22);
    CHECK(back.last_used_unix == 200);
    CHECK(identity_mismatch(back.identity, m.identity).empty());

    for (size_t cut : {size_t(0), size_t(3), size_t(12), bytes.size() / 2, bytes.size() - 1})
        CHECK_MESSAGE(!error_of([&] { decode_manifest(bytes.data(), cut, "m"); }).empty(), cut);
    std::vector<uint8_t> flipped = bytes;
    flipped[bytes.size() - 10] ^= 0x04;
    CHECK(error_of([&] { decode_manifest(flipped.data(), flipped.size(), "m"); }).find("checksum") != std::string::npos);
    std::vector<uint8_t> future = bytes;
    future[4] = 3;
    std::string e = error_of([&] { decode_manifest(future.data(), future.size(), "m"); });
    CHECK_MESSAGE(e.find("version 3 is not supported (this kvlm reads versions 1 to 2)") != std::string::npos, e);

    SessionIdentity other = m.identity;
    other.block_size = 32;
    CHECK(identity_mismatch(m.identity, other) ==
          "block size: session has 4, this run has 32 (run with --block-size 4 to continue it)");
    other = m.identity;
    other.kv_dtype = DType::f16;
    CHECK(identity_mismatch(m.identity, other).find("KV dtype: session has f32, this run has f16") == 0);
    other = m.identity;
    other.rope_scaling.type = "llama3";
    CHECK(identity_mismatch(m.identity, other).find("RoPE scaling type") == 0);

    // KV types: q8_0 round trips where head_dim holds whole blocks; a weight-only type never does.
    SessionManifest q8 = sample_manifest();
    q8.identity.kv_dtype = DType::q8_0;
    q8.identity.head_dim = 64;
    std::vector<uint8_t> q8_bytes = encode_manifest(q8);
    CHECK(decode_manifest(q8_bytes.data(), q8_bytes.size(), "m").identity.kv_dtype == DType::q8_0);
    q8.identity.head_dim = 8;
    q8_bytes = encode_manifest(q8);
    e = error_of([&] { decode_manifest(q8_bytes.data(), q8_bytes.size(), "m"); });
    CHECK_MESSAGE(e.find("a q8_0 KV cache with head_dim 8 (not a multiple of 32)") != std::string::npos, e);
    q8.identity.kv_dtype = DType::q4_0;
    q8_bytes = encode_manifest(q8);
    e = error_of([&] { decode_manifest(q8_bytes.data(), q8_bytes.size(), "m"); });
    CHECK_MESSAGE(e.find("unknown KV dtype 4") != std::string::npos, e);
}

TEST_CASE("session store: block files verify namespace, size and checksum") {
    TempDir dir;
    SessionStore store(dir.path());
    SessionManifest m = sample_manifest();
    BlockHash ns = kv_namespace_hash(m.identity.model_fingerprint, DType::f32, 4);
    // 2 layers x K/V slabs x 4 slots x 2 heads x 4 dims x 4 bytes; block 1 holds 2 tokens: stored packed.
    const BlockRecordShape shape = block_record_shape(m.identity);
    REQUIRE(shape.full_bytes() == 512);
    const size_t payload_size = shape.full_bytes();
    int32_t n = store.save("a", m, ns, shape, [](size_t i, std::vector<uint8_t>& p) {
        for (size_t k = 0; k < p.size(); k++) p[k] = uint8_t(i * 31 + k);
    }).n_files;
    CHECK(n == 2);
    std::vector<uint8_t> payload(payload_size);
    CHECK(store.read_block(m.blocks[0], ns, shape, payload.data()) == "");
    CHECK(payload[5] == 5);
    // Format version 2: the payload opens the file (page-aligned, so a restore can map it), the header ends it.
    {
        const std::string file = read_file(store.block_path(m.blocks[0].hash));
        REQUIRE(file.size() == payload_size + kBlockHeaderSize);
        CHECK(std::memcmp(file.data(), payload.data(), payload_size) == 0);
        CHECK(file.substr(payload_size, 5) == std::string("KVSB\x02", 5));
    }
    CHECK(store.read_block(m.blocks[0], BlockHash{1, 2}, shape, payload.data()).find("namespace") != std::string::npos);
    BlockRecordShape smaller = shape;
    smaller.row_bytes = 16;
    CHECK(store.read_block(m.blocks[0], ns, smaller, payload.data()).find("payload") != std::string::npos);
    // The partial block: its file holds 2 of 4 rows per slab; read back, they are in their slots, the rest zero.
    CHECK(std::filesystem::file_size(store.block_path(m.blocks[1].hash)) == kBlockHeaderSize + 256);
    CHECK(store.read_block(m.blocks[1], ns, shape, payload.data()) == "");
    bool in_slots = true;
    for (size_t slab = 0; slab < 4; slab++)
        for (size_t j = 0; j < 128; j++)
            in_slots &= payload[slab * 128 + j] == (j < 64 ? uint8_t(31 + slab * 64 + j) : 0);
    CHECK(in_slots);
    // Saving again writes nothing new (dedup), and the manifest reloads.
    CHECK(store.save("b", m, ns, shape, [](size_t, std::vector<uint8_t>&) { FAIL("must not be read"); }).n_files == 0);
    CHECK(store.load_manifest("b").tokens == m.tokens);

    std::string path = store.block_path(m.blocks[1].hash);
    std::string bytes = read_file(path);
    bytes[kBlockHeaderSize + 3] ^= 1;
    write_file(path, bytes);
    CHECK(store.read_block(m.blocks[1], ns, shape, payload.data()).find("checksum") != std::string::npos);
    write_file(path, bytes.substr(0, bytes.size() - 1));
    CHECK(store.read_block(m.blocks[1], ns, shape, payload.data()).find("truncated") != std::string::npos);
    // A huge file where a block belongs is refused from its header alone: read_block used to read (and
    // allocate) the whole file before looking at it.
    write_file(path, bytes);
    std::filesystem::resize_file(path, uint64_t(64) << 30);  // sparse: no disk used
    CHECK(store.read_block(m.blocks[1], ns, shape, payload.data()).find("truncated") != std::string::npos);
    VerifyReport report = store.verify("");
    CHECK(report.n_sessions == 2);
    CHECK_MESSAGE(report.problems.size() == 2, fmt::format("{}", fmt::join(report.problems, "\n")));  // block 1 of each
    CHECK(report.notes.empty());
    // A missing block is not damage (quota eviction deletes blocks): one note per session, no problem.
    std::filesystem::remove(path);
    CHECK(store.read_block(m.blocks[1], ns, shape, payload.data()) == "missing");
    report = store.verify("");
    CHECK(report.problems.empty());
    REQUIRE(report.notes.size() == 2);
    CHECK_MESSAGE(report.notes[0].find("1 of 2 blocks evicted") != std::string::npos, report.notes[0]);
}

TEST_CASE("session store: block files of version 1 (header first, kvlm before 2026-11-26) still read") {
    TempDir dir;
    SessionStore store(dir.path());
    SessionManifest m = save_sample(store);
    BlockHash ns = kv_namespace_hash(m.identity.model_fingerprint, DType::f32, 4);
    const BlockRecordShape shape = block_record_shape(m.identity);
    std::vector<uint8_t> record(shape.full_bytes());
    REQUIRE(store.read_block(m.blocks[0], ns, shape, record.data()) == "");
    BlockFileHeader h;
    h.format_version = 1;
    h.kv_namespace = ns;
    h.hash = m.blocks[0].hash;
    h.n_tokens = 4;
    h.payload_size = record.size();
    h.payload_checksum = m.blocks[0].checksum;
    const std::vector<uint8_t> v1 = encode_block_file(h, record.data());
    REQUIRE(std::string(v1.begin(), v1.begin() + 5) == std::string("KVSB\x01", 5));
    const std::string path = store.block_path(h.hash);
    write_file(path, std::string(v1.begin(), v1.end()));
    std::vector<uint8_t> again(shape.full_bytes(), 0xee);
    CHECK(store.read_block(m.blocks[0], ns, shape, again.data()) == "");
    CHECK(again == record);
    // A save keeps a valid version-1 block (dedup reads its header where it is).
    CHECK(store.save("b", m, ns, shape, [](size_t, std::vector<uint8_t>&) { FAIL("must not be read"); }).n_files == 0);
    // A header where its version does not put it is damage, not a block.
    std::string moved = std::string(v1.begin() + kBlockHeaderSize, v1.end()) + std::string(v1.begin(), v1.begin() + 64);
    write_file(path, moved);
    const std::string problem = store.read_block(m.blocks[0], ns, shape, again.data());
    CHECK_MESSAGE(problem.find("version-1 block header at the end") != std::string::npos, problem);
}

TEST_CASE("session store: a partial block stored whole (kvlm before 2026-11-26) still reads; saving packs it") {
    TempDir dir;
    SessionStore store(dir.path());
    SessionManifest m = save_sample(store);
    BlockHash ns = kv_namespace_hash(m.identity.model_fingerprint, DType::f32, 4);
    const BlockRecordShape shape = block_record_shape(m.identity);
    // Block 1 (2 of 4 tokens) as an older kvlm wrote it: the whole record, its empty slots zero.
    std::vector<uint8_t> whole(shape.full_bytes(), 0);
    for (size_t slab = 0; slab < shape.n_slabs; slab++)
        for (size_t j = 0; j < 2 * shape.row_bytes; j++) whole[slab * 4 * shape.row_bytes + j] = uint8_t(7 + slab + j);
    BlockFileHeader h;
    h.format_version = 1;  // what an older kvlm wrote
    h.kv_namespace = ns;
    h.hash = m.blocks[1].hash;
    h.n_tokens = 2;
    h.payload_size = whole.size();
    h.payload_checksum = payload_checksum(whole.data(), whole.size());
    std::vector<uint8_t> file = encode_block_file(h, whole.data());
    write_file(store.block_path(h.hash), std::string(file.begin(), file.end()));
    m.blocks[1].checksum = h.payload_checksum;
    std::vector<uint8_t> record(shape.full_bytes(), 0xee);
    CHECK(store.read_block(m.blocks[1], ns, shape, record.data()) == "");
    CHECK(record == whole);
    // Any other size is refused, naming the packed size expected.
    h.payload_size = 3 * shape.n_slabs * shape.row_bytes;
    file = encode_block_file(h, std::vector<uint8_t>(h.payload_size).data());
    write_file(store.block_path(h.hash), std::string(file.begin(), file.end()));
    const std::string problem = store.read_block(m.blocks[1], ns, shape, record.data());
    CHECK_MESSAGE(problem.find("payload is 384 bytes, expected 256") != std::string::npos, problem);
    // A save over such a file (dedup looks for the packed size) writes the block again, packed.
    m.blocks[1].checksum = 0;
    CHECK(store.save("a", m, ns, shape, [&](size_t, std::vector<uint8_t>& p) {
        p = whole;
        pack_partial_record(shape, 2, p.data());
    }).n_files == 1);
    CHECK(std::filesystem::file_size(store.block_path(h.hash)) == kBlockHeaderSize + shape.stored_bytes(2));
    CHECK(store.read_block(store.load_manifest("a").blocks[1], ns, shape, record.data()) == "");
    CHECK(record == whole);
}

TEST_CASE("session: 3 turns in one engine == 3 turns restored from disk (tokens, logits, prefill counts)") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    SamplingParams greedy;
    greedy.temperature = 0;

    // Reference: one engine, one sequence, the transcript carried in memory.
    std::vector<GenerationResult> reference;
    {
        Engine engine(stories(), quiet_cpu_engine());
        Sequence seq;
        std::vector<int32_t> transcript;
        for (size_t t = 0; t < kTurns.size(); t++) {
            std::vector<int32_t> ids = engine.tokenizer().encode(kTurns[t], /*add_bos=*/t == 0, true);
            std::vector<int32_t> tokens(transcript.begin() + seq.table.n_tokens, transcript.end());
            tokens.insert(tokens.end(), ids.begin(), ids.end());
            Sampler sampler(greedy);
            reference.push_back(generate(engine, seq, tokens, 24, sampler, [](const std::string&) {}));
            transcript = reference.back().transcript;
        }
        engine.prefix_cache().release(seq);
    }

    TempDir dir;
    RunOptions options;
    options.session.name = "conv";
    options.session.dir = dir.path();
    options.n_predict = 24;
    options.sampling = greedy;
    size_t transcript_size = 0;
    for (size_t t = 0; t < kTurns.size(); t++) {
        Engine engine(stories(), quiet_cpu_engine());  // a fresh process, as far as the pool is concerned
        std::vector<int32_t> fresh = engine.tokenizer().encode(kTurns[t], true, true);
        GenerationResult r = run_session_turn(engine, options, kTurns[t], fresh, [](const std::string&) {});
        CAPTURE(t);
        CHECK(r.generated == reference[t].generated);
        CHECK(r.logits_hash == reference[t].logits_hash);
        CHECK(r.transcript == reference[t].transcript);
        if (t > 0) {
            // Everything but the pending token came from disk; only it and the new text were prefilled.
            size_t n_new = engine.tokenizer().encode(kTurns[t], false, true).size();
            CHECK(r.n_restored == int32_t(transcript_size) - 1);
            CHECK(r.n_prefilled == int32_t(n_new) + 1);
            CHECK(r.n_reused == 0);
        }
        transcript_size = r.transcript.size();
        SessionManifest m = SessionStore(dir.path()).load_manifest("conv");
        CHECK(m.tokens == r.transcript);
        CHECK(m.n_kv_tokens == int32_t(r.transcript.size()) - 1);
    }
    CHECK(SessionStore(dir.path()).verify("conv").problems.empty());
}

TEST_CASE("session: restore is transactional and never past what verifies") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    const RunOptions options = greedy_session(dir.path(), "s");
    first_story_turn(options);
    SessionStore store(dir.path());
    SessionManifest m = store.load_manifest("s");
    REQUIRE(m.blocks.size() == 3);  // 44 tokens in KV at block size 16

    // Another block size: refused before the pool is touched.
    {
        Engine engine(stories(), quiet_cpu_engine(32));
        Sequence seq;
        int32_t used = engine.pool().n_used();
        std::string e = error_of([&] { restore_session(engine, store, "s", seq); });
        CHECK_MESSAGE(e.find("block size: session has 16, this run has 32") != std::string::npos, e);
        CHECK_MESSAGE(e.find("kvlm session rm s") != std::string::npos, e);
        CHECK(engine.pool().n_used() == used);
        CHECK(seq.tokens.empty());
    }
    // Damaged block 1: blocks 0 restores, the rest is recomputed.
    std::string path = store.block_path(m.blocks[1].hash);
    std::string bytes = read_file(path);
    bytes[bytes.size() / 2] ^= 0x10;
    write_file(path, bytes);
    {
        Engine engine(stories(), quiet_cpu_engine());
        Sequence seq;
        RestoredSession r = restore_session(engine, store, "s", seq);
        CHECK(r.n_restored == 16);
        CHECK(seq.tokens.size() == 16);
        REQUIRE(r.warnings.size() == 1);
        CHECK(r.warnings[0].find("block 1") != std::string::npos);
        CHECK(r.warnings[0].find("recomputing 29 tokens from position 16") != std::string::npos);
        CHECK(r.bad_blocks.count(m.blocks[1].hash) == 1);
        engine.prefix_cache().release(seq);
    }
    // The next save repairs the damaged block.
    {
        Engine engine(stories(), quiet_cpu_engine());
        GenerationResult g = run_session_turn(engine, options, " The", {}, [](const std::string&) {});
        CHECK(g.n_restored == 16);
    }
    CHECK(store.verify("s").problems.empty());
}

TEST_CASE("session: block files truncated or overwritten while a restored session runs change nothing") {
    // A restore reads every block file into the pool (a mapped file truncated in place killed kvlm with
    // SIGBUS; one overwritten in place changed the KV under it, "the model computed a NaN logit"). Once
    // restored, the session decodes from its own copy whatever happens to the store; the next restore finds
    // the damage and recomputes.
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    const RunOptions options = greedy_session(dir.path(), "s");
    first_story_turn(options);
    SessionStore store(dir.path());
    const SessionManifest m = store.load_manifest("s");
    REQUIRE(m.blocks.size() == 3);  // 44 tokens in KV: 2 full blocks and a partial one
    auto continue_session = [&](bool damage_while_running, int32_t* n_restored) {
        Engine engine(stories(), quiet_cpu_engine());
        Sequence seq;
        RestoredSession r = restore_session(engine, store, "s", seq);
        *n_restored = r.n_restored;
        if (damage_while_running) {
            for (size_t i = 0; i < m.blocks.size(); i++) {
                const std::string path = store.block_path(m.blocks[i].hash);
                if (i % 2 == 0) {
                    REQUIRE(::truncate(path.c_str(), 100) == 0);
                } else {  // in place, as an outside writer would: NaN bytes over the payload
                    std::string bytes = read_file(path);
                    std::fill(bytes.begin(), bytes.end() - 64, char(0xff));
                    FILE* f = std::fopen(path.c_str(), "r+b");
                    REQUIRE(f);
                    std::fwrite(bytes.data(), 1, bytes.size(), f);
                    std::fclose(f);
                }
            }
        }
        Sampler sampler(options.sampling);
        // What the restore did not bring back is recomputed, then the new token, as a session turn does.
        const std::vector<int32_t> prompt(m.tokens.begin() + r.n_restored, m.tokens.begin() + 45);
        GenerationResult g = generate(engine, seq, prompt, 12, sampler, [](const std::string&) {});
        engine.prefix_cache().release(seq);
        return g.generated;
    };
    int32_t n_restored = 0;
    const std::vector<int32_t> want = continue_session(false, &n_restored);
    CHECK(n_restored == 44);
    CHECK(continue_session(true, &n_restored) == want);
    CHECK(n_restored == 44);
    // The next restore finds the damage and recomputes what it cannot read: the same tokens again.
    CHECK(!store.verify("s").problems.empty());
    CHECK(continue_session(false, &n_restored) == want);
    CHECK(n_restored == 0);
}

TEST_CASE("session: two sessions with the same system prompt share its blocks; rm and gc") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    SessionStore store(dir.path());
    std::string system = "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                         "sunshine with her dog, and every day she";
    RunOptions options;
    options.session.dir = dir.path();
    options.n_predict = 4;
    options.sampling.temperature = 0;
    auto turn = [&](const std::string& name, const std::string& prompt) {
        Engine engine(stories(), quiet_cpu_engine());
        options.session.name = name;
        return run_session_turn(engine, options, prompt, engine.tokenizer().encode(prompt, true, true),
                                [](const std::string&) {});
    };
    turn("a", system + " ran.");
    uint64_t one = store.total_bytes();
    turn("b", system + " sang a song.");
    uint64_t two = store.total_bytes();
    SessionManifest a = store.load_manifest("a"), b = store.load_manifest("b");
    size_t shared = 0;
    while (shared < a.blocks.size() && shared < b.blocks.size() && a.blocks[shared].hash == b.blocks[shared].hash)
        shared++;
    CHECK(shared >= 2);
    size_t block_file = std::filesystem::file_size(store.block_path(a.blocks[0].hash));
    CHECK(two - one < (b.blocks.size() - shared + 1) * block_file);  // b added only its own blocks (+ manifest)
    size_t n_files = 0;
    for (auto& e : std::filesystem::recursive_directory_iterator(dir.path() + "/blocks")) n_files += e.is_regular_file();
    CHECK(n_files == a.blocks.size() + b.blocks.size() - shared);

    // rm a keeps the shared blocks (b needs them) and drops a's own.
    store.remove("a");
    CHECK(!store.has_session("a"));
    CHECK(std::filesystem::exists(store.block_path(a.blocks[0].hash)));
    CHECK(!std::filesystem::exists(store.block_path(a.blocks.back().hash)));
    CHECK(store.verify("").problems.empty());

    // gc removes orphans and leftover temporary files, nothing referenced.
    write_file(dir.path() + "/blocks/" + a.blocks[0].hash.hex().substr(0, 2) + "/.tmp-1-dead", "partial");
    std::string orphan = store.block_path(BlockHash{7, 7});
    std::filesystem::create_directories(std::filesystem::path(orphan).parent_path());
    std::filesystem::copy_file(store.block_path(b.blocks[0].hash), orphan);
    GcReport r = store.collect(nullptr, 0);
    CHECK(r.n_removed == 2);
    CHECK(!std::filesystem::exists(orphan));
    CHECK(store.verify("b").problems.empty());

    // A quota evicts the tail of the least recently used unpinned session first; pinned sessions are kept.
    SessionManifest pinned = store.load_manifest("b");
    pinned.pinned = true;
    store.write_manifest("b", pinned);
    turn("c", "A cat sat on the mat and looked at the sky for a long time, thinking about fish and milk.");
    SessionManifest c = store.load_manifest("c");
    r = store.collect(nullptr, 1);
    CHECK(r.n_evicted == int32_t(c.blocks.size()));
    CHECK(store.verify("b").problems.empty());
    // Eviction is not damage: verify notes it in one line for c and reports no problem.
    VerifyReport evicted = store.verify("c");
    CHECK(evicted.problems.empty());
    REQUIRE(evicted.notes.size() == 1);
    CHECK(evicted.notes[0].find(fmt::format("{} of {} blocks evicted", c.blocks.size(), c.blocks.size())) !=
          std::string::npos);
    // c is now partially (here: fully) recomputed on its next turn.
    GenerationResult g = turn("c", " The end.");
    CHECK(g.n_restored == 0);
    CHECK(store.verify("c").problems.empty());
    CHECK(store.verify("c").notes.empty());
}

TEST_CASE("session store: rm and gc remove emptied shard directories and stale temporary files, not lock files") {
    namespace fs = std::filesystem;
    TempDir dir;
    SessionStore store(dir.path());
    SessionManifest m = save_sample(store);
    { FileLock done = store.lock_session("a"); }  // leaves locks/a.lock, as every run does
    const std::string shard0 = parent_dir(store.block_path(m.blocks[0].hash));
    const std::string shard1 = parent_dir(store.block_path(m.blocks[1].hash));
    const std::string old_shard = dir.file("blocks/00");  // emptied by an older kvlm
    REQUIRE(shard0 != shard1);
    REQUIRE(old_shard != shard1);
    write_file(shard1 + "/.tmp-1-dead", "partial block");  // a killed save's leftover

    // rm: the shard directory that held only a's block goes; the one with a leftover file stays for gc.
    CHECK(store.remove("a").n_blocks_removed == 2);
    CHECK(!fs::exists(shard0));
    CHECK(fs::exists(shard1));

    fs::create_directories(old_shard);
    fs::create_directories(dir.file("chats"));
    write_file(dir.file("sessions/.tmp-1-dead"), "partial manifest");
    write_file(dir.file("chats/.tmp-1-dead"), "partial messages");
    age_file(dir.file("chats/.tmp-1-dead"), 2 * 3600);
    write_file(dir.file("chats/.tmp-2-live"), "being written");  // a `kvlm chat` save may be about to rename it
    age_file(dir.file("chats/.tmp-2-live"), 30 * 60);
    GcReport gc = store.collect(nullptr, 0);
    CHECK(gc.n_removed == 3);
    CHECK(gc.n_dirs_removed == 2);
    CHECK(!fs::exists(shard1));
    CHECK(!fs::exists(old_shard));
    CHECK(fs::is_directory(dir.file("blocks")));
    CHECK(!fs::exists(dir.file("sessions/.tmp-1-dead")));
    CHECK(!fs::exists(dir.file("chats/.tmp-1-dead")));
    CHECK(fs::exists(dir.file("chats/.tmp-2-live")));
    CHECK(fs::exists(dir.file("locks/a.lock")));  // see SessionStore::remove
    CHECK(gc.bytes_after == disk_bytes(dir.file("chats/.tmp-2-live")));
    CHECK(store.total_bytes() == gc.bytes_after);
}

TEST_CASE("session store: sizes count a chat session's messages, total_bytes every file but the locks") {
    namespace fs = std::filesystem;
    TempDir dir;
    SessionStore store(dir.path());
    SessionManifest m = save_sample(store);
    { FileLock done = store.lock_session("a"); }
    // Sizes are disk usage (allocated blocks, as du counts), not apparent sizes.
    uint64_t own = disk_bytes(store.manifest_path("a"));
    for (const SessionBlockRef& b : m.blocks) own += disk_bytes(store.block_path(b.hash));
    fs::create_directories(dir.file("chats"));
    write_file(store.chat_path("a"), std::string(1000, 'm'));
    write_file(store.chat_path("a") + ".new", std::string(500, 'n'));  // a save stopped before its last rename
    const uint64_t messages = disk_bytes(store.chat_path("a")) + disk_bytes(store.chat_path("a") + ".new");
    std::vector<SessionInfo> sessions = store.list();
    REQUIRE(sessions.size() == 1);
    CHECK(sessions[0].bytes == own + messages);
    CHECK(store.total_bytes() == own + messages);
    // Files no session lists count too: chat messages without a manifest, leftover temporary files.
    write_file(dir.file("chats/old.chat"), std::string(100, 'o'));
    write_file(dir.file("sessions/.tmp-1-dead"), std::string(10, 't'));
    const uint64_t old_chat = disk_bytes(dir.file("chats/old.chat"));
    CHECK(store.total_bytes() == own + messages + old_chat + disk_bytes(dir.file("sessions/.tmp-1-dead")));
    CHECK(store.collect(nullptr, 0).bytes_after == own + messages + old_chat);
    CHECK(store.total_bytes() == own + messages + old_chat);
    // A sparse file counts what it uses on disk, not its apparent size.
    fs::resize_file(dir.file("chats/old.chat"), uint64_t(1) << 30);
    CHECK(store.total_bytes() < own + messages + old_chat + (uint64_t(1) << 20));
}
