// A barrier across every block of a grid, for kernels launched cooperatively (launch_cooperative_kernel):
// the blocks are then all resident, so blocks that arrive early can spin until the last one arrives. Thread 0
// of each block arrives with one atomic increment of a 64-bit count that only grows, and waits until it
// reaches the next multiple of the block count: the last arrival's increment is itself the release, so no
// block waits on a reset or a second word after it (cooperative groups' grid sync also takes one atomic a
// block; a count and a generation word put two more serial L2 round trips after the last arrival, on
// every barrier of the persistent decode step's 150-odd). A block cannot arrive at barrier k + 1 before every
// block has arrived at barrier k, so the count seen on arriving at barrier k lies in [k n, (k + 1) n).
// The fences order each block's writes before its arrival and the reads after it, as cooperative groups'
// grid sync does; data written before the barrier by other blocks must then be read with coherent loads
// (not __ldg / ld.global.nc). The state is 8 bytes of device memory, zeroed once: each launch leaves the
// count at a multiple of its block count, so launches of the same grid size reuse it without a reset.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kvlm {

struct GridBarrierState {
    unsigned long long arrived;  // arrivals since the state was zeroed (2^64: never wraps)
};

// Every thread of every block must call it, the same number of times.
__device__ __forceinline__ void grid_barrier(GridBarrierState* state) {
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        const unsigned long long n_blocks = gridDim.x * gridDim.y * gridDim.z;
        __threadfence();
        const unsigned long long seen = atomicAdd(&state->arrived, 1ull);
        const unsigned long long all_arrived = (seen / n_blocks + 1) * n_blocks;
        const volatile unsigned long long* arrived = &state->arrived;
        while (*arrived < all_arrived) __nanosleep(32);
        __threadfence();
    }
    __syncthreads();
}

}  // namespace kvlm
