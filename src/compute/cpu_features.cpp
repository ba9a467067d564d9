// CPUID feature detection through the compiler's __builtin_cpu_supports (which also checks that the OS saves
// the wider registers).
#include "compute/cpu_features.h"

#include <fmt/format.h>

namespace kvlm {

CpuFeatures detect_cpu_features() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    f.avx_vnni = f.avx2 && __builtin_cpu_supports("avxvnni");
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && f.avx2;
    f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
    return f;
}

const char* cpu_path_name(CpuPath path) {
    switch (path) {
        case CpuPath::scalar: return "scalar";
        case CpuPath::avx2: return "avx2";
        case CpuPath::avx512: return "avx512";
    }
    return "unknown";
}

bool cpu_path_supported(CpuPath path, const CpuFeatures& f) {
    switch (path) {
        case CpuPath::scalar: return true;
        case CpuPath::avx2: return f.avx2;
        case CpuPath::avx512: return f.avx512 && f.avx512_vnni;
    }
    return false;
}

CpuPath best_cpu_path(const CpuFeatures& f) {
    if (cpu_path_supported(CpuPath::avx512, f)) return CpuPath::avx512;
    if (cpu_path_supported(CpuPath::avx2, f)) return CpuPath::avx2;
    return CpuPath::scalar;
}

std::string cpu_path_description(CpuPath path, const CpuFeatures& f) {
    switch (path) {
        case CpuPath::scalar: return "scalar";
        case CpuPath::avx2: return f.avx_vnni ? "avx2 (fma, f16c, avx-vnni)" : "avx2 (fma, f16c)";
        case CpuPath::avx512: return f.avx512_bf16 ? "avx512 (f/bw/vl/dq, vnni, bf16)" : "avx512 (f/bw/vl/dq, vnni)";
    }
    return "unknown";
}

}  // namespace kvlm
