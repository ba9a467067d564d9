// CudaSettings from the KVLM_CUDA_* environment variables: debugging switches (like llama.cpp's
// GGML_CUDA_DISABLE_GRAPHS) and the launch rules tools/gpu_session.sh's tune stage sweeps.
#include "backend/cuda_settings.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace kvlm {

namespace {

// A switch: set to "0", off; set to anything else, on; unset, its default.
void env_switch(const char* name, bool& out) {
    if (const char* value = std::getenv(name)) out = std::strcmp(value, "0") != 0;
}

// A whole number, or "auto" for `auto_value`.
void env_int(const char* name, int32_t& out, int32_t auto_value) {
    const char* value = std::getenv(name);
    if (!value) return;
    if (std::strcmp(value, "auto") == 0) {
        out = auto_value;
        return;
    }
    char* end = nullptr;
    const long parsed = std::strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || parsed < -1 || parsed > 1 << 20)
        throw_error("{}={}: expected a whole number (or auto)", name, value);
    out = int32_t(parsed);
}

}  // namespace

CudaSettings CudaSettings::from_environment() {
    CudaSettings s;
    env_switch("KVLM_CUDA_GRAPHS", s.graphs);
    env_switch("KVLM_CUDA_PROFILE", s.profile);
    env_switch("KVLM_CUDA_TRANSFERS", s.transfer_stats);
    env_switch("KVLM_CUDA_STEPS_AHEAD", s.steps_ahead);
    env_switch("KVLM_CUDA_PDL", s.programmatic_launches);
    env_int("KVLM_CUDA_ATTN_SPLIT_KEYS", s.attn_split_keys, 0);
    env_int("KVLM_CUDA_ATTN_FILL", s.attn_fill_per_sm, 0);
    env_int("KVLM_CUDA_ATTN_ONE_HEAD", s.attn_one_head, -1);
    env_int("KVLM_CUDA_GEMV_ROWS", s.gemv.rows_per_warp, 0);
    env_int("KVLM_CUDA_GEMV_THREADS", s.gemv.threads, 0);
    env_int("KVLM_CUDA_GEMV_SPLIT", s.gemv.split_warps_per_sm, 0);
    env_int("KVLM_CUDA_GEMV_STAGE", s.gemv.stage_x, 1);
    env_int("KVLM_CUDA_PERSISTENT", s.persistent_blocks_per_sm, 0);
    return s;
}

std::string CudaSettings::launch_rules_text() const {
    std::string rules;
    if (attn_split_keys != 0) rules += fmt::format(", attention split past {} keys", attn_split_keys);
    if (attn_fill_per_sm != 0) rules += fmt::format(", attention fill {} per SM", attn_fill_per_sm);
    if (attn_one_head != -1) rules += attn_one_head ? ", attention a block per head" : ", attention a block per group";
    if (gemv.rows_per_warp) rules += fmt::format(", GEMV {} rows per warp", gemv.rows_per_warp);
    if (gemv.threads) rules += fmt::format(", GEMV blocks of {}", gemv.threads);
    if (gemv.split_warps_per_sm)
        rules += fmt::format(", GEMV rows split up to {} warps per SM", gemv.split_warps_per_sm);
    if (!gemv.stage_x) rules += ", GEMV x from global memory";
    return rules;
}

}  // namespace kvlm
