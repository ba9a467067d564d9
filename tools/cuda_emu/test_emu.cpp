// Checks of the CUDA emulator itself (emulated build only): its f16/bf16 conversions against src/dtype.cpp,
// a block's shared memory and barriers, and that each misuse it promises to catch aborts with its message
// (run in a forked child, so the abort does not end the test binary).
#include <doctest/doctest.h>
#include <mma.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dtype.h"

namespace {

#define LAUNCH(kernel, ...) ::kvlm_emu::launch(#kernel, __func__, kernel, ::kvlm_emu::config(__VA_ARGS__))

// Block-wide sum through a static __shared__ array (all threads must see the same array).
__global__ void block_sum_kernel(const float* x, float* out) {
    static float partial[256];
    partial[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0;
        for (unsigned i = 0; i < blockDim.x; i++) s += partial[i];
        out[blockIdx.x] = s;
    }
}

__global__ void warp_sum_kernel(float* x) {
    float v = x[threadIdx.x];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    x[threadIdx.x] = v;
}

__global__ void divergent_barrier_kernel() {
    if (threadIdx.x < 32) __syncthreads();
}

__global__ void partial_shuffle_kernel(float* x) {
    if (threadIdx.x % 32 < 16) x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}

__global__ void smem_overflow_kernel(int n) {
    float* s = static_cast<float*>(::kvlm_emu::dynamic_smem());
    s[threadIdx.x + n] = 1.0f;
}

__global__ void wmma_misaligned_kernel() {
    __half* s = static_cast<__half*>(::kvlm_emu::dynamic_smem());
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> a;
    nvcuda::wmma::load_matrix_sync(a, s + 8, 16);  // 16 bytes past a 256-bit boundary
}

// Runs f in a child process; returns its stderr and whether it died of SIGABRT.
std::string run_aborting(void (*f)(), bool* aborted) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);  // not doctest's handler: the parent reports
        dup2(fds[1], 2);
        close(fds[0]);
        f();
        _exit(0);
    }
    close(fds[1]);
    std::string err;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    *aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    return err;
}

void expect_abort(void (*f)(), const char* message) {
    bool aborted = false;
    std::string err = run_aborting(f, &aborted);
    INFO("stderr: " << err);
    CHECK(aborted);
    CHECK(err.find(message) != std::string::npos);
}

}  // namespace

TEST_CASE("cuda kernels: emulator f16/bf16 conversions match src/dtype.cpp") {
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = __half2float(__ushort_as_half(uint16_t(h))), b = kvlm::f16_to_f32(uint16_t(h));
        if (std::isnan(b)) CHECK(std::isnan(a));
        else if (std::memcmp(&a, &b, 4) != 0) FAIL_CHECK("f16 " << h << ": " << a << " vs " << b);
        const float c = __bfloat162float(__ushort_as_bfloat16(uint16_t(h))), d = kvlm::bf16_to_f32(uint16_t(h));
        if (!std::isnan(d) && std::memcmp(&c, &d, 4) != 0) FAIL_CHECK("bf16 " << h);
    }
    // Every f32 exponent, random mantissas, plus the halfway cases of both formats.
    std::mt19937 rng(7);
    int bad_f16 = 0, bad_bf16 = 0;
    for (uint32_t e = 0; e < 256; e++) {
        for (int i = 0; i < 2000; i++) {
            uint32_t bits = (e << 23) | (rng() & 0x7fffffu) | (rng() & 1u) << 31;
            if (i % 4 == 1) bits = (bits & ~0x1fffu) | 0x1000u;  // f16 halfway
            if (i % 4 == 2) bits = (bits & ~0xffffu) | 0x8000u;  // bf16 halfway
            float f;
            std::memcpy(&f, &bits, 4);
            if (std::isnan(f)) continue;
            bad_f16 += __float2half_rn(f).x != kvlm::f32_to_f16(f);
            bad_bf16 += __float2bfloat16_rn(f).x != kvlm::f32_to_bf16(f);
        }
    }
    CHECK(bad_f16 == 0);
    CHECK(bad_bf16 == 0);
}

TEST_CASE("cuda kernels: emulator shares __shared__ arrays and exchanges shuffles") {
    std::vector<float> x(4 * 256), sums(4);
    for (size_t i = 0; i < x.size(); i++) x[i] = float(i % 7);
    LAUNCH(block_sum_kernel, 4, 256)(x.data(), sums.data());
    CHECK(cudaGetLastError() == cudaSuccess);
    for (int b = 0; b < 4; b++) {
        float want = 0;
        for (int i = 0; i < 256; i++) want += x[size_t(b * 256 + i)];
        CHECK(sums[size_t(b)] == want);
    }
    std::vector<float> w(64);
    for (size_t i = 0; i < w.size(); i++) w[i] = float(i);
    LAUNCH(warp_sum_kernel, 1, 64)(w.data());
    CHECK(w[0] == 496.0f);   // 0 + ... + 31
    CHECK(w[63] == 1520.0f);  // 32 + ... + 63
    LAUNCH(warp_sum_kernel, 1, 2048)(w.data());  // too many threads: a launch error, nothing runs
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    LAUNCH(smem_overflow_kernel, 1, 32, 64 * 1024)(0);  // above 48 KB without cudaFuncSetAttribute
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

TEST_CASE("cuda kernels: emulator aborts on divergent barriers, partial shuffles, smem overflow, bad WMMA") {
    expect_abort([] { LAUNCH(divergent_barrier_kernel, 1, 64)(); }, "__syncthreads not reached by every thread");
    expect_abort(
        [] {
            static std::vector<float> x(64);
            LAUNCH(partial_shuffle_kernel, 1, 64)(x.data());
        },
        "warp collective not reached by all 32 lanes");
    expect_abort([] { LAUNCH(smem_overflow_kernel, 1, 64, 1000 * sizeof(float))(960); },
                 "dynamic shared memory");
    expect_abort([] { LAUNCH(smem_overflow_kernel, 1, 64, 4096)(1024); }, "dynamic shared memory access out of bounds");
    expect_abort([] { LAUNCH(wmma_misaligned_kernel, 1, 32, 4096)(); }, "not 256-bit aligned");
}
