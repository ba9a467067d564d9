// CPUID feature detection (leaf 1, leaf 7 subleaves 0 and 1) plus XGETBV, which says whether the OS saves
// the AVX and AVX-512 register state (a CPU can have the instructions while the OS has them switched off).
#include "compute/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kvlm {

CpuFeatures detect_cpu_features() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx) return f;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    const bool os_avx = (xcr0_lo & 0x6u) == 0x6u, os_avx512 = (xcr0_lo & 0xe6u) == 0xe6u;
    if (!os_avx || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17),
               avx512bw = b & (1u << 30), avx512vl = b & (1u << 31), avx512vnni = c & (1u << 11);
    unsigned leaf7_1_eax = 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) leaf7_1_eax = a;
    f.avx2 = avx2 && fma && f16c;
    f.avx_vnni = f.avx2 && (leaf7_1_eax & (1u << 4));
    f.avx512 = f.avx2 && os_avx512 && avx512f && avx512dq && avx512bw && avx512vl;
    f.avx512_vnni = f.avx512 && avx512vnni;
    f.avx512_bf16 = f.avx512 && (leaf7_1_eax & (1u << 5));
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
