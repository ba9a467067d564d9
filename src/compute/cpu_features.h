// Which SIMD path the CPU kernels take, chosen at run time from CPUID: the binary is built for baseline
// x86-64 and carries one kernel set per path (compute/cpu_kernels.h), so it runs on any x86-64 machine.
#pragma once
#include <string>

namespace kvlm {

enum class CpuPath { scalar = 0, avx2 = 1, avx512 = 2 };

struct CpuFeatures {
    bool avx2 = false;         // AVX2 + FMA + F16C
    bool avx_vnni = false;     // AVX-VNNI (VEX-encoded int8 dot products)
    bool avx512 = false;       // AVX-512 F, BW, VL, DQ
    bool avx512_vnni = false;  // AVX-512 VNNI
    bool avx512_bf16 = false;  // AVX-512 BF16
};

CpuFeatures detect_cpu_features();
const char* cpu_path_name(CpuPath path);  // "scalar", "avx2", "avx512"
// The best path these features allow: avx512 needs AVX-512 F/BW/VL/DQ with VNNI, avx2 needs AVX2/FMA/F16C.
CpuPath best_cpu_path(const CpuFeatures& features);
bool cpu_path_supported(CpuPath path, const CpuFeatures& features);
// The path and the features it uses, for the device line: "avx512 (avx512 f/bw/vl/dq, vnni, bf16)".
std::string cpu_path_description(CpuPath path, const CpuFeatures& features);

}  // namespace kvlm
