// Checks of the CUDA emulator itself (emulated build only): its f16/bf16 conversions against src/format/dtype.cpp,
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

#include "cuda/runtime/cublas_loader.h"
#include "cuda/kernels/grid_barrier.cuh"
#include "format/dtype.h"

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

__global__ void add_one_kernel(float* x, int n) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] += 1.0f;
}

__global__ void write_at_kernel(float* x, int i) {
    if (threadIdx.x == 0) x[i] = 1.0f;
}

// Three phases over grid barriers: each block publishes a value, then reads its neighbour's; its shared
// memory (static and dynamic) must survive the other blocks' turns.
__global__ void grid_rounds_kernel(kvlm::GridBarrierState* barrier, int* values, int* out) {
    static int mine;  // as prep.py rewrites a __shared__ int
    [[maybe_unused]] static const bool registered = ::kvlm_emu::register_static_shared_once(&mine, sizeof mine);
    int* dynamic = static_cast<int*>(::kvlm_emu::dynamic_smem());
    const int b = int(blockIdx.x), n = int(gridDim.x);
    if (threadIdx.x == 0) mine = b * 10, dynamic[0] = b * 100;
    for (int round = 0; round < 3; round++) {
        if (threadIdx.x == 0) values[round * n + b] = b + round * 1000;
        kvlm::grid_barrier(barrier);
        if (threadIdx.x == 0)
            out[round * n + b] =
                values[round * n + (b + 1) % n] + (mine == b * 10 && dynamic[0] == b * 100 ? 0 : 1 << 20);
    }
}

// Block 0 leaves without the barrier the others wait at.
__global__ void grid_barrier_skipped_kernel(kvlm::GridBarrierState* barrier, int*, int*) {
    if (blockIdx.x == 0) return;
    kvlm::grid_barrier(barrier);
}

void launch_cooperative(void (*kernel)(kvlm::GridBarrierState*, int*, int*), int blocks, bool cooperative,
                        kvlm::GridBarrierState* barrier, int* values, int* out) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
    const cudaLaunchConfig_t config = {
        dim3(unsigned(blocks)), dim3(64), 16, nullptr, cooperative ? &attribute : nullptr, cooperative ? 1u : 0u};
    REQUIRE(cudaLaunchKernelEx(&config, kernel, barrier, values, out) == cudaSuccess);
}

// A device copy of a vector (cudaMalloc + synchronous copies on the legacy stream).
template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t count) : n(count) {
        REQUIRE(cudaMalloc(&ptr, n * sizeof(T)) == cudaSuccess);
        REQUIRE(cudaMemset(ptr, 0, n * sizeof(T)) == cudaSuccess);
    }
    explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) {
        REQUIRE(cudaMemcpy(ptr, v.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    }
    ~DeviceBuffer() { cudaFree(ptr); }
    std::vector<T> read() const {
        std::vector<T> v(n);
        REQUIRE(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
        return v;
    }
};

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

TEST_CASE("cuda kernels: emulator f16/bf16 conversions match src/format/dtype.cpp") {
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
    DeviceBuffer<float> dx(x), dsums(sums.size());
    LAUNCH(block_sum_kernel, 4, 256)(dx.ptr, dsums.ptr);
    CHECK(cudaGetLastError() == cudaSuccess);
    sums = dsums.read();
    for (int b = 0; b < 4; b++) {
        float want = 0;
        for (int i = 0; i < 256; i++) want += x[size_t(b * 256 + i)];
        CHECK(sums[size_t(b)] == want);
    }
    std::vector<float> w(64);
    for (size_t i = 0; i < w.size(); i++) w[i] = float(i);
    DeviceBuffer<float> dw(w);
    LAUNCH(warp_sum_kernel, 1, 64)(dw.ptr);
    w = dw.read();
    CHECK(w[0] == 496.0f);   // 0 + ... + 31
    CHECK(w[63] == 1520.0f);  // 32 + ... + 63
    LAUNCH(warp_sum_kernel, 1, 2048)(dw.ptr);  // too many threads: a launch error, nothing runs
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    LAUNCH(smem_overflow_kernel, 1, 32, 64 * 1024)(0);  // above 48 KB without cudaFuncSetAttribute
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

TEST_CASE("cuda kernels: emulator aborts on divergent barriers, partial shuffles, smem overflow, bad WMMA") {
    expect_abort([] { LAUNCH(divergent_barrier_kernel, 1, 64)(), cudaDeviceSynchronize(); }, "__syncthreads not reached by every thread");
    expect_abort(
        [] {
            DeviceBuffer<float> x(64);
            LAUNCH(partial_shuffle_kernel, 1, 64)(x.ptr);
            cudaDeviceSynchronize();
        },
        "warp collective not reached by all 32 lanes");
    expect_abort([] { LAUNCH(smem_overflow_kernel, 1, 64, 1000 * sizeof(float))(960), cudaDeviceSynchronize(); },
                 "dynamic shared memory");
    expect_abort([] { LAUNCH(smem_overflow_kernel, 1, 64, 4096)(1024), cudaDeviceSynchronize(); }, "dynamic shared memory access out of bounds");
    expect_abort([] { LAUNCH(wmma_misaligned_kernel, 1, 32, 4096)(), cudaDeviceSynchronize(); }, "not 256-bit aligned");
}

TEST_CASE("cuda kernels: emulator runs stream work when the host synchronises, as a GPU may") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    float* pinned = nullptr;
    REQUIRE(cudaMallocHost(&pinned, 4 * sizeof(float)) == cudaSuccess);
    DeviceBuffer<float> d(4);
    for (int i = 0; i < 4; i++) pinned[i] = 1.0f;
    REQUIRE(cudaMemcpyAsync(d.ptr, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
    for (int i = 0; i < 4; i++) pinned[i] = 2.0f;  // refilled before the copy ran: the copy reads 2
    LAUNCH(add_one_kernel, 1, 32, 0, s)(d.ptr, 4);
    cudaEvent_t after_add = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&after_add, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventRecord(after_add, s) == cudaSuccess);
    LAUNCH(add_one_kernel, 1, 32, 0, s)(d.ptr, 4);
    CHECK(d.read()[0] == 0.0f);  // a copy on the legacy stream does not wait for a non-blocking stream
    REQUIRE(cudaEventSynchronize(after_add) == cudaSuccess);
    CHECK(d.read()[0] == 3.0f);  // up to the event, not the second add
    REQUIRE(cudaMemcpyAsync(pinned, d.ptr, 4 * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(pinned[0] == 2.0f);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(pinned[0] == 4.0f);
    std::vector<float> pageable(4);  // copies to pageable memory synchronise: done on return
    LAUNCH(add_one_kernel, 1, 32, 0, s)(d.ptr, 4);
    REQUIRE(cudaMemcpyAsync(pageable.data(), d.ptr, 4 * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(pageable[3] == 5.0f);
    cudaEventDestroy(after_add);
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
}

TEST_CASE("cuda kernels: emulator graphs keep their launch arguments; capture refuses synchronisation") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    DeviceBuffer<float> d(4);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    LAUNCH(add_one_kernel, 1, 32, 0, s)(d.ptr, 4);
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    cudaGetLastError();

    int n = 2;  // captured by value: the graph adds to the first two elements however n changes later
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    LAUNCH(add_one_kernel, 1, 32, 0, s)(d.ptr, n);
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    n = 4;
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    cudaGraphDestroy(graph);
    CHECK(d.read()[0] == 0.0f);  // capturing ran nothing
    for (int i = 0; i < 3; i++) REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    cudaGraphExecDestroy(exec);  // queued launches still run
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(d.read() == std::vector<float>{3.0f, 3.0f, 0.0f, 0.0f});
    cudaStreamDestroy(s);
}

TEST_CASE("cuda kernels: emulator cuBLAS GEMMs are column-major with cuBLAS's transposes and checks") {
    const kvlm::CublasApi& api = kvlm::cublas_api();
    cublasHandle_t handle = nullptr;
    REQUIRE(api.create(&handle) == CUBLAS_STATUS_SUCCESS);
    const int m = 5, n = 3, k = 7, ld_pad = 2;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
        for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
            const int lda = (ta == CUBLAS_OP_N ? m : k) + ld_pad, ldb = (tb == CUBLAS_OP_N ? k : n) + ld_pad, ldc = m + 1;
            std::vector<float> a(size_t(lda) * (ta == CUBLAS_OP_N ? k : m)), b(size_t(ldb) * (tb == CUBLAS_OP_N ? n : k));
            std::vector<float> c(size_t(ldc) * n);
            for (float& x : a) x = u(rng);
            for (float& x : b) x = u(rng);
            for (float& x : c) x = u(rng);
            DeviceBuffer<float> da(a), db(b), dc(c);
            const float alpha = 0.5f, beta = 2.0f;
            REQUIRE(api.sgemm(handle, ta, tb, m, n, k, &alpha, da.ptr, lda, db.ptr, ldb, &beta, dc.ptr, ldc) ==
                    CUBLAS_STATUS_SUCCESS);
            const std::vector<float> got = dc.read();
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double sum = 0;
                    for (int l = 0; l < k; l++)
                        sum += double(ta == CUBLAS_OP_N ? a[size_t(i + l * lda)] : a[size_t(l + i * lda)]) *
                               double(tb == CUBLAS_OP_N ? b[size_t(l + j * ldb)] : b[size_t(j + l * ldb)]);
                    CHECK(got[size_t(i + j * ldc)] == doctest::Approx(alpha * sum + beta * c[size_t(i + j * ldc)]).epsilon(1e-5));
                }
            CHECK(got[size_t(m)] == c[size_t(m)]);  // the padding row of C is untouched
        }
    DeviceBuffer<float> x(64);
    const float one = 1.0f, zero = 0.0f;
    CHECK(api.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, x.ptr, 3, x.ptr, 4, &zero, x.ptr, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    CHECK(api.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 4, &one, x.ptr, CUDA_R_16F, 4, x.ptr, CUDA_R_16BF, 4, &zero,
                      x.ptr, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
    api.destroy(handle);
}

TEST_CASE("cuda kernels: emulator device memory is limited, and running out is an error, not a crash") {
    size_t free_before = 0, total = 0;
    REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, total + 1) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
    CHECK(cudaGetLastError() == cudaSuccess);
    REQUIRE(cudaMalloc(&p, size_t(1) << 20) == cudaSuccess);
    size_t free_after = 0;
    REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
    CHECK(free_before - free_after >= size_t(1) << 20);
    cudaFree(p);
}

TEST_CASE("cuda kernels: emulator faults host reads of device memory, kernels past a buffer, bad copies") {
    expect_abort(
        [] {
            float* d = nullptr;
            cudaMalloc(&d, 64 * sizeof(float));
            std::printf("%f\n", double(d[3]));  // host code dereferencing a device pointer
        },
        "by host code");
    expect_abort(
        [] {
            float* d = nullptr;
            cudaMalloc(&d, 256 * sizeof(float));
            LAUNCH(write_at_kernel, 1, 32)(d, 256 + 1000);
            cudaDeviceSynchronize();
        },
        "past its end");
    expect_abort(
        [] {
            float* d = nullptr;
            cudaMalloc(&d, 16 * sizeof(float));
            std::vector<float> h(32);
            cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
        },
        "not inside one device allocation");
    expect_abort(
        [] {
            float* d = nullptr;
            cudaMalloc(&d, 16 * sizeof(float));
            std::vector<float> h(16);
            cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyDeviceToHost);
        },
        "is device memory and the source");
}

namespace {

// out[i] = weights[i] * x[i], the weight read before the dependency wait (as the decode GEMVs prefetch) and x
// after it, or before it when early (the mistake the emulator must catch); the output written after it.
__global__ void scale_after_wait_kernel(const float* weights, const float* x, float* out, bool early) {
    const float w = weights[threadIdx.x];
    const float early_x = early ? x[threadIdx.x] : 0.0f;
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
    out[threadIdx.x] = w * (early ? early_x : x[threadIdx.x]);
}

__global__ void write_before_wait_kernel(float* out) {
    out[threadIdx.x] = 1.0f;
    cudaGridDependencySynchronize();
}

// A programmatic launch of scale_after_wait_kernel over 32 threads on the legacy stream.
void launch_scale(const float* weights, const float* x, float* out, bool early) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    const cudaLaunchConfig_t config = {dim3(1), dim3(32), 0, nullptr, &attribute, 1};
    ::kvlm_emu::name_next_launch("scale_after_wait_kernel");
    REQUIRE(cudaLaunchKernelEx(&config, scale_after_wait_kernel, weights, x, out, early) == cudaSuccess);
}

}  // namespace

TEST_CASE("cuda kernels: emulator programmatic launches: only immutable memory before the dependency wait") {
    std::vector<float> w(32), x(32);
    for (int i = 0; i < 32; i++) w[size_t(i)] = float(i), x[size_t(i)] = 0.5f;
    DeviceBuffer<float> dw(w), dx(x), dout(32);
    ::kvlm_emu::declare_immutable(dw.ptr);
    launch_scale(dw.ptr, dx.ptr, dout.ptr, false);
    std::vector<float> out = dout.read();
    for (int i = 0; i < 32; i++) CHECK(out[size_t(i)] == float(i) * 0.5f);

    // The same kernel launched plainly: the wait returns at once, reads before it are fine.
    const cudaLaunchConfig_t plain = {dim3(1), dim3(32), 0, nullptr, nullptr, 0};
    REQUIRE(cudaLaunchKernelEx(&plain, scale_after_wait_kernel, dw.ptr, dx.ptr, dout.ptr, true) == cudaSuccess);
    out = dout.read();
    for (int i = 0; i < 32; i++) CHECK(out[size_t(i)] == float(i) * 0.5f);

    cudaFuncAttributes attributes{};
    REQUIRE(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&scale_after_wait_kernel)) == cudaSuccess);
    CHECK(attributes.ptxVersion == 90);

    expect_abort(
        [] {  // an activation read before the wait
            float *w = nullptr, *x = nullptr, *out = nullptr;
            cudaMalloc(&w, 32 * sizeof(float)), cudaMalloc(&x, 32 * sizeof(float)), cudaMalloc(&out, 32 * sizeof(float));
            ::kvlm_emu::declare_immutable(w);
            launch_scale(w, x, out, true);
            cudaDeviceSynchronize();
        },
        "before cudaGridDependencySynchronize in a programmatic launch");
    expect_abort(
        [] {  // weights not declared immutable are no exception
            float *w = nullptr, *x = nullptr, *out = nullptr;
            cudaMalloc(&w, 32 * sizeof(float)), cudaMalloc(&x, 32 * sizeof(float)), cudaMalloc(&out, 32 * sizeof(float));
            launch_scale(w, x, out, false);
            cudaDeviceSynchronize();
        },
        "in kernel scale_after_wait_kernel");
    expect_abort(
        [] {  // a write before the wait, even to memory declared immutable
            float* out = nullptr;
            cudaMalloc(&out, 32 * sizeof(float));
            ::kvlm_emu::declare_immutable(out);
            cudaLaunchAttribute attribute{};
            attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attribute.val.programmaticStreamSerializationAllowed = 1;
            const cudaLaunchConfig_t config = {dim3(1), dim3(32), 0, nullptr, &attribute, 1};
            cudaLaunchKernelEx(&config, write_before_wait_kernel, out);
            cudaDeviceSynchronize();
        },
        "before cudaGridDependencySynchronize");
}

TEST_CASE("cuda kernels: emulator cooperative grids run blocks side by side across grid barriers") {
    const int n = 5;
    kvlm::GridBarrierState* barrier = nullptr;
    REQUIRE(cudaMalloc(&barrier, sizeof *barrier) == cudaSuccess);
    REQUIRE(cudaMemset(barrier, 0, sizeof *barrier) == cudaSuccess);
    DeviceBuffer<int> values(3 * n), out(3 * n);
    for (int launch = 0; launch < 2; launch++) {  // the count ends at a multiple of n: no reset between launches
        launch_cooperative(grid_rounds_kernel, n, true, barrier, values.ptr, out.ptr);
        const std::vector<int> got = out.read();
        for (int round = 0; round < 3; round++)
            for (int b = 0; b < n; b++) CHECK(got[size_t(round * n + b)] == (b + 1) % n + round * 1000);
    }
    kvlm::GridBarrierState state{};
    REQUIRE(cudaMemcpy(&state, barrier, sizeof state, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(state.arrived == 2 * 3 * n);  // launches x barriers x blocks
    cudaFree(barrier);

    expect_abort(
        [] {  // without the attribute the blocks run one after another: the first one spins forever
            kvlm::GridBarrierState* barrier = nullptr;
            int* buffer = nullptr;
            cudaMalloc(&barrier, sizeof *barrier), cudaMemset(barrier, 0, sizeof *barrier);
            cudaMalloc(&buffer, 64 * sizeof(int));
            launch_cooperative(grid_rounds_kernel, 3, false, barrier, buffer, buffer + 32);
            cudaDeviceSynchronize();
        },
        "do not run side by side");
    expect_abort(
        [] {
            kvlm::GridBarrierState* barrier = nullptr;
            cudaMalloc(&barrier, sizeof *barrier), cudaMemset(barrier, 0, sizeof *barrier);
            launch_cooperative(grid_barrier_skipped_kernel, 4, true, barrier, nullptr, nullptr);
            cudaDeviceSynchronize();
        },
        "every block spins");
}
