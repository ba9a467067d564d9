// CudaSettings::gemv (a plain struct, so that the GEMV launchers and the backend's settings share it).
#pragma once
#include <cstdint>

namespace kvlm {

// The CUDA decode GEMVs' launch shape other than its rules (cuda/kernels/gemv_shared.cuh), for a GPU session's
// sweep (tools/gpu_session.sh tune); 0 keeps each rule. Process-wide on the device: every GEMV launch follows it.
struct GemvLaunchRules {
    int32_t rows_per_warp = 0;  // 1, 2 or 4 (SwiGLU at most 2, RoPE pairs always 2)
    int32_t threads = 0;        // per block: 128 or 256
    // Split each row's dot product across 2 or 4 warps of a block while the launch keeps at most this many
    // warps per SM (of 132) and each warp at least one full step of loads; 0: never split.
    int32_t split_warps_per_sm = 0;
    int32_t stage_x = 1;  // 1: x_hat staged in shared memory when it fits; 0: read from global memory
};

}  // namespace kvlm
