// Where the K/V bytes of the pool's blocks live. KV bookkeeping (kv_pool.h, prefix_cache.h) never touches
// them; it asks the storage - the backend, in host or device memory - to move whole block records.
// A block record is [n_layers][2 (K, V)][block_size][n_kv_heads][head_dim] in the cache's element type.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kvlm {

class KvBlockStorage {
public:
    virtual ~KvBlockStorage() = default;
    virtual int32_t n_kv_blocks() const = 0;                           // blocks in the pool
    virtual size_t kv_block_bytes() const = 0;                         // bytes of one block record
    virtual void read_kv_block(int32_t block, void* dst) const = 0;    // block record -> host memory
    virtual void write_kv_block(int32_t block, const void* src) = 0;   // host memory -> block record
    virtual void copy_kv_block(int32_t src_block, int32_t dst_block) = 0;
    // The block record itself when it lives in host memory the caller may fill directly (a session restore
    // reads files straight into it, several blocks at once); nullptr when it does not (use write_kv_block).
    virtual void* host_kv_block(int32_t block) { return nullptr; }
    // Gives every block fresh untouched memory, as a new process's pool has it (for a benchmark of a cold
    // restore; no block may be in use). A no-op where that makes no difference (device memory).
    virtual void make_kv_memory_cold() {}
    // Host memory for n block records one after another, from which write_kv_blocks copies fastest (a device
    // backend's pinned buffer, kept for later restores: no page faults, no zeroing, a direct DMA); valid until
    // the next call. nullptr where the caller's own memory does as well.
    virtual void* kv_staging(size_t n) { return nullptr; }
    // write_kv_block for n blocks whose records lie one after another at src (a restore's batch): a device
    // backend copies them without waiting between blocks.
    virtual void write_kv_blocks(const int32_t* blocks, size_t n, const void* src) {
        for (size_t k = 0; k < n; k++) write_kv_block(blocks[k], static_cast<const char*>(src) + k * kv_block_bytes());
    }
};

}  // namespace kvlm
