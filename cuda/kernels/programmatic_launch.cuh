// Programmatic dependent launch (Hopper and later): a kernel launched with it may start while the kernel
// before it on the stream is still running, so its launch latency and whatever it does before
// wait_for_prior_kernel() (the weights it prefetches: they never change) overlap that kernel. A single-token
// decode step is 180+ kernels of a few microseconds each, so the gaps between them are much of its time.
//
// The rule every kernel launched through launch_kernel keeps: before wait_for_prior_kernel() it may read only
// immutable memory (weights, the RoPE table) and writes nothing; activations, the KV pool, the block table and
// positions come after it, through coherent loads (no __ldg / const __restrict__ on data a prior kernel
// writes: the compiler may hoist non-coherent loads above the wait). The emulator enforces the first half:
// in a programmatic launch every other device allocation is unmapped until the block's threads have waited
// (in the first two blocks of each grid; docs/CUDA.md, "Tests in emulation").
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "runtime/cuda_check.h"
#include "runtime/programmatic_launch.h"

namespace kvlm {

// Blocks until the prior kernel on the stream has completed and its writes are visible. A no-op when the
// kernel was not launched programmatically (and on devices or PTX without the feature).
__device__ __forceinline__ void wait_for_prior_kernel() {
#if defined(KVLM_CUDA_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
    cudaGridDependencySynchronize();
#endif
}

// Lets the next kernel on the stream be launched now (it still waits for this one to finish before it reads
// what this one writes). Called right after wait_for_prior_kernel(), so that at most one kernel ahead is
// resident and waiting.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(KVLM_CUDA_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// Whether `kernel` is launched programmatically: programmatic_launches() (programmatic_launch.h), a device of
// compute capability 9.0 or later and a kernel binary built from PTX 9.0 or later (one JIT-compiled from
// older PTX never waits).
bool programmatic_launch(const void* kernel);

// kernel<<<grid, block, smem, stream>>>(args...), programmatic when programmatic_launch(kernel); throws
// naming `name` when the launch is refused.
template <typename... Params, typename... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    const bool programmatic = programmatic_launch(reinterpret_cast<const void*>(kernel));
    // By position (gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs): the emulator's gridDim and
    // blockDim are macros.
    cudaLaunchConfig_t config = {grid, block, smem, stream, programmatic ? &attribute : nullptr, programmatic ? 1u : 0u};
#ifdef KVLM_CUDA_EMU
    ::kvlm_emu::name_next_launch(name);
#endif
    const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    if (status != cudaSuccess) {
        cudaGetLastError();  // the error is reported here; do not leave it for an unrelated check
        cuda_fail(status, name, __FILE__, __LINE__);
    }
}

// kernel<<<grid, block, smem, stream>>>(args...) as a cooperative launch: every block resident at once (the
// grid must fit the device: cudaOccupancyMaxActiveBlocksPerMultiprocessor x multiprocessors), so that blocks
// may wait on one another (grid_barrier.cuh). Never programmatic. Throws naming `name` when refused.
template <typename... Params, typename... Args>
void launch_cooperative_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, Args&&... args) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
    cudaLaunchConfig_t config = {grid, block, smem, stream, &attribute, 1u};
#ifdef KVLM_CUDA_EMU
    ::kvlm_emu::name_next_launch(name);
#endif
    const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    if (status != cudaSuccess) {
        cudaGetLastError();
        cuda_fail(status, name, __FILE__, __LINE__);
    }
}

}  // namespace kvlm
