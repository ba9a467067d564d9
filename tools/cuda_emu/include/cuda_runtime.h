// CPU stand-in for the CUDA runtime and the device built-ins kvlm's kernels use (KVLM_CUDA_EMU builds,
// `make test-cuda-emu`, docs/CUDA.md). Kernels compile as plain host C++: each thread of a block is a fiber,
// run one at a time and switched only at __syncthreads and warp collectives, so every barrier interval runs
// thread after thread in a configurable order (KVLM_CUDA_EMU_ORDER=forward|reverse|random) and a missing
// barrier shows up as a wrong result. One block runs at a time; device memory is host memory.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>

#ifndef KVLM_CUDA_EMU
#error "tools/cuda_emu/include is only for the emulated build (-DKVLM_CUDA_EMU=1)"
#endif

// ---- Qualifiers. tools/cuda_emu/prep.py rewrites every __shared__ declaration before compiling; the
// fallback below still shares a block's arrays between its threads (one block runs at a time).
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __constant__ static

// ---- Vector types.
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned x, y, z; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// ---- Runtime API types.
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
};
using cudaError = cudaError_t;
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
using cudaGraph_t = struct CUgraph_st*;
using cudaGraphExec_t = struct CUgraphExec_st*;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrCooperativeLaunch = 95,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int warpSize;
    int maxThreadsPerBlock;
    int multiProcessorCount;
    int major, minor;
    int memoryBusWidth;
    int l2CacheSize;
};
constexpr int warpSize = 32;

// ---- The emulator (tools/cuda_emu/emu.cpp).
namespace kvlm_emu {

// Where the current fiber is: set by the scheduler before it resumes a thread.
inline uint3 g_thread_idx, g_block_idx;
inline dim3 g_block_dim, g_grid_dim;
inline int g_lane = 0;  // linear thread index % 32

[[noreturn]] void die(const char* format, ...) __attribute__((format(printf, 1, 2)));
void block_barrier(const char* file, int line);
// __nanosleep: the thread yields; the rest of its block runs, and in a cooperative grid the other blocks, before
// it runs again (a spin on another block's flag makes progress).
void nap(const char* file, int line);
// Deposits `value` and waits for every lane of the warp (a full-mask collective at file:line); returns the
// 32 deposited values of this collective, indexed by lane.
const uint64_t* warp_exchange(uint64_t value, unsigned mask, const char* op, const char* file, int line);
void count_wmma_op();             // per-lane count, compared across the warp at every convergence point
void* dynamic_smem();             // this launch's extern __shared__ bytes (guard-paged)
void register_static_shared(void* p, size_t bytes);  // poisoned at the start of every block
bool register_static_shared_once(void* p, size_t bytes);
// When [first, last] lies in the dynamic shared memory arena it must lie inside this launch's bytes.
void check_smem_range(const void* first, const void* last, const char* what);
bool emulated_launch_error(cudaError_t e);  // sets the sticky launch error

// A launch: kernel(args...) for every thread of every block. programmatic (cudaLaunchKernelEx with
// cudaLaunchAttributeProgrammaticStreamSerialization): in the first two blocks the grid runs, until the
// block's threads have all called cudaGridDependencySynchronize (or exited), every device allocation not
// declared immutable is unmapped and the immutable ones are read-only, so a kernel that touches what the
// prior kernel may still be writing faults; on a GPU it would race.
struct LaunchConfig {
    dim3 grid, block;
    size_t smem = 0;
    cudaStream_t stream = nullptr;
    bool programmatic = false;
    bool cooperative = false;  // cudaLaunchAttributeCooperative: every block runs side by side (grid barriers)
};
inline LaunchConfig config(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr) {
    return {grid, block, smem, stream};
}
using Body = void (*)(void* closure);
// name: the launch expression; site: the launching function (__PRETTY_FUNCTION__, with template arguments).
// Runs every block of the grid now (called when the launch reaches the front of its stream).
void run_grid(const char* name, const char* site, const void* kernel, const LaunchConfig& cfg, Body body, void* closure);
// Checks the configuration as cudaLaunchKernel does (an error for the next cudaGetLastError, nothing
// queued) and queues run_grid(..., closure) on cfg.stream, or records it into the stream's capture.
void enqueue_grid(const char* name, const char* site, const void* kernel, const LaunchConfig& cfg, Body body,
                  std::shared_ptr<void> closure);

template <typename Kernel>
struct Launcher {
    const char *name, *site;
    Kernel kernel;
    LaunchConfig cfg;
    // Arguments are copied once, as into the parameter space (they outlive the call: the launch runs when
    // its stream reaches it, or at every replay of a graph it was captured into); every thread calls
    // kernel(copies...).
    template <typename... Args>
    void operator()(Args... args) const {
        struct Closure {
            Kernel kernel;
            std::tuple<Args...> args;
        };
        auto closure = std::make_shared<Closure>(Closure{kernel, std::tuple<Args...>(args...)});
        enqueue_grid(name, site, reinterpret_cast<const void*>(kernel), cfg,
                     [](void* c) {
                         auto* cl = static_cast<Closure*>(c);
                         std::apply(cl->kernel, cl->args);
                     },
                     std::move(closure));
    }
};
template <typename Kernel>
Launcher<Kernel> launch(const char* name, const char* site, Kernel kernel, const LaunchConfig& cfg) {
    return {name, site, kernel, cfg};
}

template <typename T>
uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move up to 8 bytes");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    return bits;
}
template <typename T>
T from_bits(uint64_t bits) {
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
}

// The kernel name the next launch through cudaLaunchKernelEx gets in messages (kvlm's launch_kernel sets it).
void name_next_launch(const char* name);
// Marks the device allocation containing p as never written by kernels (weights, tables): readable before
// cudaGridDependencySynchronize in a programmatic launch. Dies unless p is device memory.
void declare_immutable(const void* p);
void grid_dependency_wait();  // cudaGridDependencySynchronize: a point every thread of the block meets
const char* take_launch_name();  // the name set by name_next_launch (then cleared), or a generic one

// Inline PTX the kernels use outside __CUDA_ARCH__-only code, rewritten to these calls by prep.py.
void ptx_ld_global_nc_v4_u32(unsigned& a, unsigned& b, unsigned& c, unsigned& d, const void* p);
void ptx_prefetch_global_l2(const void* p);  // dies unless p is device memory (a GPU ignores a bad prefetch)

}  // namespace kvlm_emu

// ---- Programmatic dependent launch: cudaLaunchKernelEx with its one attribute kvlm uses, the device-side
// wait and trigger, and the kernel attributes launch_kernel asks for (an sm_90 binary from PTX 9.0). Above
// the threadIdx/blockDim/gridDim macros, which would rewrite the members' names; code below them
// initialises a cudaLaunchConfig_t by position.
enum cudaLaunchAttributeID {  // the real values
    cudaLaunchAttributeCooperative = 2,
    cudaLaunchAttributeProgrammaticStreamSerialization = 6
};
union cudaLaunchAttributeValue {
    int cooperative;
    int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute* attrs;
    unsigned numAttrs;
};
cudaError_t cudaPeekAtLastError();
template <typename... Params, typename... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(Params...), Args&&... args) {
    ::kvlm_emu::LaunchConfig cfg =
        ::kvlm_emu::config(config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream);
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs[i].id == cudaLaunchAttributeProgrammaticStreamSerialization)
            cfg.programmatic = config->attrs[i].val.programmaticStreamSerializationAllowed != 0;
        else if (config->attrs[i].id == cudaLaunchAttributeCooperative)
            cfg.cooperative = config->attrs[i].val.cooperative != 0;
    // The launch's own configuration error (the sticky error keeps only the first one).
    const bool clean_before = cudaPeekAtLastError() == cudaSuccess;
    ::kvlm_emu::launch(::kvlm_emu::take_launch_name(), "cudaLaunchKernelEx", kernel, cfg)(Params(args)...);
    return clean_before ? cudaPeekAtLastError() : cudaSuccess;
}
struct cudaFuncAttributes {
    int binaryVersion, ptxVersion;
};
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* kernel);
inline void cudaGridDependencySynchronize() { ::kvlm_emu::grid_dependency_wait(); }
inline void cudaTriggerProgrammaticLaunchCompletion() {}

#define threadIdx (static_cast<const uint3&>(::kvlm_emu::g_thread_idx))
#define blockIdx (static_cast<const uint3&>(::kvlm_emu::g_block_idx))
#define blockDim (static_cast<const dim3&>(::kvlm_emu::g_block_dim))
#define gridDim (static_cast<const dim3&>(::kvlm_emu::g_grid_dim))

// ---- Barriers and warp collectives (full masks only: a partial mask aborts).
#define __syncthreads() ::kvlm_emu::block_barrier(__FILE__, __LINE__)
#define __syncwarp(...) ::kvlm_emu::SyncWarp{__FILE__, __LINE__}(__VA_ARGS__)
#define __shfl_xor_sync(...) ::kvlm_emu::shfl_xor(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_sync(...) ::kvlm_emu::shfl(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::kvlm_emu::shfl_down(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::kvlm_emu::shfl_up(__FILE__, __LINE__, __VA_ARGS__)
#define __all_sync(mask, p) ::kvlm_emu::vote(mask, p, 0, __FILE__, __LINE__)
#define __any_sync(mask, p) ::kvlm_emu::vote(mask, p, 1, __FILE__, __LINE__)
#define __ballot_sync(mask, p) ::kvlm_emu::vote(mask, p, 2, __FILE__, __LINE__)

namespace kvlm_emu {
inline void check_width(int width) {
    if (width != 32) die("shuffles with width != 32 are not emulated");
}
struct SyncWarp {
    const char* file;
    int line;
    void operator()(unsigned mask = 0xffffffffu) const { warp_exchange(0, mask, "__syncwarp", file, line); }
};
template <typename T>
T shfl_xor(const char* file, int line, unsigned mask, T v, int lane_mask, int width = 32) {
    check_width(width);
    const uint64_t* slots = warp_exchange(to_bits(v), mask, "__shfl_xor_sync", file, line);
    return from_bits<T>(slots[(g_lane ^ lane_mask) & 31]);
}
template <typename T>
T shfl(const char* file, int line, unsigned mask, T v, int src, int width = 32) {
    check_width(width);
    const uint64_t* slots = warp_exchange(to_bits(v), mask, "__shfl_sync", file, line);
    return from_bits<T>(slots[src & 31]);
}
template <typename T>
T shfl_down(const char* file, int line, unsigned mask, T v, unsigned delta, int width = 32) {
    check_width(width);
    const uint64_t* slots = warp_exchange(to_bits(v), mask, "__shfl_down_sync", file, line);
    return from_bits<T>(slots[g_lane + delta < 32 ? g_lane + delta : g_lane]);
}
template <typename T>
T shfl_up(const char* file, int line, unsigned mask, T v, unsigned delta, int width = 32) {
    check_width(width);
    const uint64_t* slots = warp_exchange(to_bits(v), mask, "__shfl_up_sync", file, line);
    return from_bits<T>(slots[unsigned(g_lane) >= delta ? g_lane - delta : g_lane]);
}
// kind 0: all, 1: any, 2: ballot.
inline unsigned vote(unsigned mask, bool p, int kind, const char* file, int line) {
    static const char* const kNames[] = {"__all_sync", "__any_sync", "__ballot_sync"};
    const uint64_t* slots = warp_exchange(p ? 1 : 0, mask, kNames[kind], file, line);
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++) ballot |= unsigned(slots[l] & 1) << l;
    return kind == 0 ? ballot == 0xffffffffu : kind == 1 ? ballot != 0 : ballot;
}
}  // namespace kvlm_emu

// ---- Device math and bit casts.
// CUDA declares the classification functions in the global namespace, as C's math.h does.
using std::isfinite;
using std::isinf;
using std::isnan;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
// Round-to-nearest products and sums that are never contracted into a fused multiply-add (g++ in ISO C++
// mode on baseline x86-64 contracts nothing, so plain operators are exact twins).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float __uint_as_float(unsigned u) { return kvlm_emu::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return kvlm_emu::to_bits(f) & 0xffffffffu; }
inline float __int_as_float(int i) { return kvlm_emu::from_bits<float>(uint32_t(i)); }
inline int __float_as_int(float f) { return int(kvlm_emu::to_bits(f) & 0xffffffffu); }
template <typename T>
T __ldg(const T* p) { return *p; }
// Atomics: one host thread runs every fiber, switching only at barriers, warp collectives and __nanosleep, so
// a plain read-modify-write is atomic here.
template <typename T, typename = std::enable_if_t<std::is_integral<T>::value || std::is_floating_point<T>::value>>
T atomicAdd(T* address, T value) {
    const T old = *address;
    *address = old + value;
    return old;
}
template <typename T, typename = std::enable_if_t<std::is_integral<T>::value>>
T atomicExch(T* address, T value) {
    const T old = *address;
    *address = value;
    return old;
}
inline void __threadfence() {}  // one host thread runs every fiber: memory is always coherent
#define __nanosleep(ns) ((void)(ns), ::kvlm_emu::nap(__FILE__, __LINE__))
[[noreturn]] inline void __trap() { kvlm_emu::die("__trap()"); }
// CUDA's integer and float min/max overloads (std::min wants equal types).
template <typename A, typename B, typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
auto min(A a, B b) -> std::common_type_t<A, B> {
    using C = std::common_type_t<A, B>;
    return C(a) < C(b) ? C(a) : C(b);
}
template <typename A, typename B, typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
auto max(A a, B b) -> std::common_type_t<A, B> {
    using C = std::common_type_t<A, B>;
    return C(a) < C(b) ? C(b) : C(a);
}

// ---- Runtime API on host memory (tools/cuda_emu/emu.cpp).
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc(reinterpret_cast<void**>(p), bytes); }
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaMallocHost(reinterpret_cast<void**>(p), bytes); }
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cuda_emu_func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value);
// As an sm_90 multiprocessor would by threads (2,048) and shared memory (228 KB, 1 KB reserved per block);
// registers are not modelled.
cudaError_t cuda_emu_occupancy(int* blocks, int block_size, size_t dynamic_smem);
template <typename F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F, int block_size, size_t dynamic_smem) {
    return cuda_emu_occupancy(blocks, block_size, dynamic_smem);
}
template <typename F>
cudaError_t cudaFuncSetAttribute(F kernel, cudaFuncAttribute attr, int value) {
    return cuda_emu_func_set_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}
