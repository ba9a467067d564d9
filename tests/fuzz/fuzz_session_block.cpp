// Session KV block loader (SessionStore::read_block in src/session/session_store.h, decode_block_header in
// src/session/session_format.h) on arbitrary bytes. The input is a block file, stored where a ref naming the hash in
// its own header finds it (blocks/ab/<hash>.kvb of a scratch store); the ref's hash, n_tokens and checksum
// and the namespace come from that header too, so inputs get past the naming checks to the size and
// payload checks. Both layouts: the header after the payload (version 2) or before it (version 1). read_block is asked for the record shapes of real models; it must report problems as
// text, never throw, and hand back exactly the payload (a partial block's rows in their slots) when it
// accepts the file.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "session/session_format.h"
#include "session/session_store.h"
#include "util/error.h"

namespace {

// Block records of real models at block size 16: n_layers x 2 slabs, [16][n_kv_heads x head_dim] rows each.
const kvlm::BlockRecordShape kShapes[] = {
    {5 * 2, 16, 4 * 8 * 2},    // stories260K, f16 KV (the seeds: kvlm run's default on the CPU)
    {5 * 2, 16, 4 * 8 * 4},    // stories260K, f32
    {30 * 2, 16, 3 * 64 * 4},  // SmolLM2-135M, f32
    {16 * 2, 16, 8 * 64 * 2},  // Llama 3.2 1B, f16
};

template <typename T>
T field(const uint8_t* data, size_t size, size_t offset) {  // little-endian header field, 0 past the end
    T value{};
    if (offset + sizeof(T) <= size) std::memcpy(&value, data + offset, sizeof(T));
    return value;
}

// Where read_block takes the header from: the last kBlockHeaderSize bytes when they decode as a header of
// version 2 or later, else the first (version 1). Returns its offset in the file.
size_t header_offset(const uint8_t* data, size_t size) {
    if (size < kvlm::kBlockHeaderSize) return 0;
    const size_t at_end = size - kvlm::kBlockHeaderSize;
    bool version_2 = false;
    KVLM_FUZZ_ACCEPT_ERRORS(
        version_2 = kvlm::decode_block_header(data + at_end, kvlm::kBlockHeaderSize, size, "fuzz.kvb").format_version != 1);
    return version_2 ? at_end : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Header layout (session_format.cpp): magic, version, namespace @8, hash @24, n_tokens @40, payload
    // size @48, payload checksum @56; at the end of the file (version 2) or its start (version 1).
    const size_t at = header_offset(data, size);
    const uint8_t* head = data + at;
    const size_t head_size = size - at;
    const size_t payload_offset = at == 0 ? kvlm::kBlockHeaderSize : 0;
    kvlm::BlockHash kv_namespace{field<uint64_t>(head, head_size, 8), field<uint64_t>(head, head_size, 16)};
    kvlm::SessionBlockRef ref;
    ref.hash = {field<uint64_t>(head, head_size, 24), field<uint64_t>(head, head_size, 32)};
    ref.n_tokens = field<int32_t>(head, head_size, 40);
    ref.checksum = field<uint64_t>(head, head_size, 56);

    const kvlm::SessionStore store(kvlm::fuzz::scratch_dir() + "/store");
    const std::string path = store.block_path(ref.hash);
    kvlm::fuzz::write_scratch(path.substr(kvlm::fuzz::scratch_dir().size() + 1), data, size);
    for (const kvlm::BlockRecordShape& shape : kShapes) {
        std::vector<uint8_t> record(shape.full_bytes());
        const std::string problem = store.read_block(ref, kv_namespace, shape, record.data());
        if (!problem.empty()) continue;
        // Accepted: the record must be exactly this file's payload, whole or (a partial block) packed.
        const size_t payload_size = size - kvlm::kBlockHeaderSize;
        if (payload_size != shape.full_bytes()) {
            if (payload_size != shape.stored_bytes(ref.n_tokens)) std::abort();
            kvlm::pack_partial_record(shape, ref.n_tokens, record.data());
        }
        if (std::memcmp(record.data(), data + payload_offset, payload_size) != 0) std::abort();
    }
    std::filesystem::remove(path);  // one file per hash: do not let the scratch store grow

    bool accepted = false;
    KVLM_FUZZ_ACCEPT_ERRORS(kvlm::decode_block_header(head, head_size, size, "fuzz.kvb"); accepted = true);
    if (accepted) {  // the same header must refuse a file of any other size
        bool also_longer = false;
        KVLM_FUZZ_ACCEPT_ERRORS(kvlm::decode_block_header(head, head_size, size + 1, "fuzz.kvb"); also_longer = true);
        if (also_longer) std::abort();
    }
    return 0;
}
