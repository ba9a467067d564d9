#include "backend/graph_cache.h"

#include "runtime/cuda_check.h"

namespace kvlm {

void GraphCache::launch(int64_t key, cudaStream_t stream, const std::function<void()>& enqueue) {
    auto found = graphs_.find(key);
    if (found == graphs_.end()) {
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        cudaGraph_t graph = nullptr;
        try {
            enqueue();
        } catch (...) {
            cudaStreamEndCapture(stream, &graph);  // leaves capture mode; the partial graph is dropped
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
            throw;
        }
        CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        cudaGraphExec_t exec = nullptr;
        cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);  // the executable graph is independent of it
        CUDA_CHECK(status);
        found = graphs_.emplace(key, exec).first;
    }
    CUDA_CHECK(cudaGraphLaunch(found->second, stream));
}

void GraphCache::clear() {
    for (auto& entry : graphs_) cudaGraphExecDestroy(entry.second);
    graphs_.clear();
}

}  // namespace kvlm
