// The CUDA backend's own settings: debugging switches and a GPU session's launch rules. Only the CUDA backend
// reads them (from BackendOptions::cuda, or else from the KVLM_CUDA_* environment variables, docs/CUDA.md);
// the engine and the CLI forward nothing but the opaque pointer.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/gemv_launch_rules.h"

namespace kvlm {

struct CudaSettings {
    bool graphs = true;                 // replay decode steps as CUDA graphs (KVLM_CUDA_GRAPHS=0: off)
    bool profile = false;               // time each decode stage, graphs off (KVLM_CUDA_PROFILE=1)
    bool transfer_stats = false;        // device-to-host bytes per decode step on stderr (KVLM_CUDA_TRANSFERS=1)
    bool steps_ahead = true;            // queue each decode step behind the one before (KVLM_CUDA_STEPS_AHEAD=0: not)
    bool programmatic_launches = true;  // each kernel starts while the one before it ends (Hopper+; KVLM_CUDA_PDL=0)
    // Attention's launch rules for a GPU session's sweep (AttentionScratch in kernels/cuda_ops.h; 0 / -1: the
    // defaults): split contexts longer than this many keys (a multiple of 128), into splits enough for this many
    // blocks per multiprocessor; a block per query head: 1 always, 0 never, -1 on a small grid.
    int32_t attn_split_keys = 0;   // KVLM_CUDA_ATTN_SPLIT_KEYS
    int32_t attn_fill_per_sm = 0;  // KVLM_CUDA_ATTN_FILL
    int32_t attn_one_head = -1;    // KVLM_CUDA_ATTN_ONE_HEAD
    // The GEMVs' launch shape for the same sweep (KVLM_CUDA_GEMV_ROWS, _THREADS, _SPLIT, _STAGE).
    GemvLaunchRules gemv;
    // > 0: each decode step's layers as one persistent kernel with up to this many blocks per multiprocessor
    // (kernels/decode_persistent.cu; KVLM_CUDA_PERSISTENT=N); 0: a launch per stage.
    int32_t persistent_blocks_per_sm = 0;

    // The defaults overridden by whichever KVLM_CUDA_* variables are set; throws Error naming a variable whose
    // value is not one (the backend checks the ranges).
    static CudaSettings from_environment();
    // What differs from the defaults among the launch rules, for the device line (", attention split past
    // 512 keys, GEMV blocks of 256"); "" when none does.
    std::string launch_rules_text() const;
};

}  // namespace kvlm
