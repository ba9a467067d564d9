// CUDA graphs of a fixed launch sequence, one per key: the first launch() of a key captures what
// `enqueue` puts on the stream into a graph and instantiates it; later launches of that key replay it with a
// single cudaGraphLaunch. Kernels in a captured sequence must read everything that changes between replays
// (token ids, positions, block tables) from device memory at fixed addresses: their arguments are frozen.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>

namespace kvlm {

class GraphCache {
public:
    GraphCache() = default;
    GraphCache(const GraphCache&) = delete;
    GraphCache& operator=(const GraphCache&) = delete;
    ~GraphCache() { clear(); }

    // Replays the graph of `key` on `stream`, capturing `enqueue` first when the key is new. When capture
    // fails (a launcher throws, or the driver refuses), the capture is ended and discarded and the error
    // propagates: nothing half-captured is kept.
    void launch(int64_t key, cudaStream_t stream, const std::function<void()>& enqueue);
    // Destroys every graph (when a frozen device address changes).
    void clear();
    size_t size() const { return graphs_.size(); }

private:
    std::map<int64_t, cudaGraphExec_t> graphs_;
};

}  // namespace kvlm
