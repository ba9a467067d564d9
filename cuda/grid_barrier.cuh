// A barrier across every block of a grid, for kernels launched cooperatively (launch_cooperative_kernel):
// the blocks are then all resident, so blocks that arrive early can spin until the last one arrives. Thread 0
// of each block arrives with an atomic increment; the last arrival resets the count and bumps the generation
// the others spin on. The fences order each block's writes before its arrival and the reads after it, as
// cooperative_groups' grid sync does; data written before the barrier by other blocks must then be read with
// coherent loads (not __ldg / ld.global.nc). The state is two words of device memory, zeroed once: count
// returns to 0 at every barrier and the generation only grows, so launches reuse it without a reset.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kvlm {

struct GridBarrierState {
    unsigned int count;
    unsigned int generation;
};

// Every thread of every block must call it, the same number of times.
__device__ __forceinline__ void grid_barrier(GridBarrierState* state) {
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        volatile unsigned int* generation = &state->generation;
        // Read before arriving: it cannot move until every block, this one included, has arrived.
        const unsigned int seen = *generation;
        __threadfence();
        const unsigned int n_blocks = gridDim.x * gridDim.y * gridDim.z;
        if (atomicAdd(&state->count, 1u) == n_blocks - 1) {
            atomicExch(&state->count, 0u);
            __threadfence();
            atomicAdd(&state->generation, 1u);
        } else {
            while (*generation == seen) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

}  // namespace kvlm
