// The CUDA emulator's runtime (see include/cuda_runtime.h): device and pinned memory, streams, events and
// graphs, with the timing rules a GPU has, so that host-side mistakes fail here as they would there:
// - Stream work is deferred. Kernels, cuBLAS calls and asynchronous copies between device and pinned memory
//   run only when the host synchronises with their stream (cudaStreamSynchronize, cudaEventSynchronize,
//   cudaDeviceSynchronize, cudaFree, a synchronous copy on the legacy stream) or when an asynchronous copy
//   to or from pageable memory makes the runtime synchronise. A result read before its synchronisation,
//   or a pinned buffer refilled while its copy is still queued, gives wrong data, as on a GPU.
// - Device memory is mapped PROT_NONE except while stream work or a copy runs: host code that dereferences
//   a device pointer faults, and the message names the allocation. Each allocation ends at 64 KiB of guard
//   pages, so a kernel reading or writing past the end of a buffer faults too.
// - Stream capture records work into a graph instead of queueing it (arguments fixed at capture, as in a
//   CUDA graph); calls CUDA forbids while a thread captures (synchronisation, cudaMalloc, cudaFree,
//   synchronous copies) fail with cudaErrorStreamCaptureUnsupported and invalidate the capture.
// - Device memory is limited to KVLM_CUDA_EMU_MEM_GIB (default 4) GiB, so out-of-memory paths run.
// - The device reports KVLM_CUDA_EMU_SMS (default 132, an H100's) multiprocessors: a cooperative grid of several
//   blocks per SM over 132 would map more fiber stacks than vm.max_map_count allows.
// The legacy default stream and blocking streams are ordered with each other by running the other side's
// queued work before queueing new work; non-blocking streams are independent of the legacy stream.
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "emu_internal.h"

struct CUgraph_st {
    std::vector<kvlm_emu::Operation> operations;
};
struct CUgraphExec_st {
    std::shared_ptr<const std::vector<kvlm_emu::Operation>> operations;
};
struct CUstream_st {
    bool blocking = true;  // synchronises with the legacy default stream
    std::deque<std::pair<uint64_t, kvlm_emu::Operation>> queue;
    uint64_t last_queued = 0;  // sequence number of the newest queued operation
    CUgraph_st* capture = nullptr;
    cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
    bool capture_invalidated = false;
};
struct CUevent_st {
    CUstream_st* stream = nullptr;  // where it was last recorded (nullptr: never, or into a capture)
    uint64_t sequence = 0;          // the stream's operations up to this one precede it
    // Host time when the event was first seen complete (cudaEventElapsedTime): emulated work runs lazily,
    // so intervals say nothing about a GPU's speed.
    std::chrono::steady_clock::time_point done{};
    bool stamped = false;
};

namespace kvlm_emu {
namespace {

size_t page_size() {
    static const size_t page = size_t(sysconf(_SC_PAGESIZE));
    return page;
}
size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

enum class Memory { device, pinned, pageable };

struct Allocation {
    char* base = nullptr;  // what cudaMalloc / cudaMallocHost returned
    size_t bytes = 0;      // as requested
    Memory kind = Memory::device;
    // Device allocations: [guard page][data pages][guard page], base placed so the data ends at the guard.
    char* mapping = nullptr;
    size_t mapping_bytes = 0;
    char* data_pages = nullptr;
    size_t data_bytes = 0;
    bool immutable = false;  // declare_immutable: readable before a programmatic launch's dependency wait
};

constexpr size_t kGuardBytes = 64 * 1024;  // PROT_NONE after each device allocation (and one page before)

struct Runtime {
    std::map<const char*, Allocation> allocations;  // by base
    size_t device_bytes = 0;                       // in device allocations (data pages)
    size_t total_bytes = size_t(4) << 30;
    int n_sms = 132;
    int open_depth = 0;  // > 0 while stream work or a copy runs: device memory readable and writable
    CUstream_st legacy;  // the legacy default stream (stream 0)
    std::set<CUstream_st*> streams;  // live streams, the legacy one included
    std::set<CUstream_st*> capturing;

    Runtime() {
        streams.insert(&legacy);
        if (const char* gib = std::getenv("KVLM_CUDA_EMU_MEM_GIB")) {
            const double value = std::atof(gib);
            if (!(value >= 0.001 && value <= 1024)) die("KVLM_CUDA_EMU_MEM_GIB=%s: expected 0.001..1024", gib);
            total_bytes = size_t(value * double(size_t(1) << 30));
        }
        if (const char* sms = std::getenv("KVLM_CUDA_EMU_SMS")) {
            n_sms = std::atoi(sms);
            if (n_sms < 1 || n_sms > 132) die("KVLM_CUDA_EMU_SMS=%s: expected 1..132", sms);
        }
    }
};

Runtime& rt() {
    static Runtime runtime;
    return runtime;
}

cudaError_t fail(cudaError_t error) {
    emulated_launch_error(error);  // any failing runtime call is also reported by cudaGetLastError
    return error;
}

void protect_device_memory(int protection) {
    for (auto& entry : rt().allocations)
        if (entry.second.kind == Memory::device) mprotect(entry.second.data_pages, entry.second.data_bytes, protection);
}

// Device memory is reachable from this thread while one of these lives (stream work and copies).
struct DeviceAccess {
    DeviceAccess() {
        if (rt().open_depth++ == 0) protect_device_memory(PROT_READ | PROT_WRITE);
    }
    ~DeviceAccess() {
        if (--rt().open_depth == 0) {
            protect_device_memory(PROT_NONE);
            install_segv_handler();
        }
    }
    DeviceAccess(const DeviceAccess&) = delete;
    DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// The allocation whose mapping (device: guard pages included) or bytes (pinned) contain p.
const Allocation* find_allocation(const void* p) {
    const char* c = static_cast<const char*>(p);
    auto& all = rt().allocations;
    auto it = all.upper_bound(c);
    // A device allocation's guard page before its base belongs to it: look at the next one too.
    for (auto candidate : {it, it == all.begin() ? all.end() : std::prev(it)}) {
        if (candidate == all.end()) continue;
        const Allocation& a = candidate->second;
        if (a.kind == Memory::device && c >= a.mapping && c < a.mapping + a.mapping_bytes) return &a;
        if (a.kind == Memory::pinned && c >= a.base && c < a.base + a.bytes) return &a;
    }
    return nullptr;
}

Memory memory_of(const void* p) {
    const Allocation* a = find_allocation(p);
    return a ? a->kind : Memory::pageable;
}

const char* memory_name(Memory m) {
    return m == Memory::device ? "device memory" : m == Memory::pinned ? "pinned host memory" : "pageable host memory";
}

CUstream_st* resolve(cudaStream_t stream) {
    CUstream_st* s = stream ? stream : &rt().legacy;
    return rt().streams.count(s) ? s : nullptr;
}

// Runs the stream's queued work up to and including sequence number `last`.
void run_until(CUstream_st* s, uint64_t last) {
    if (s->queue.empty() || s->queue.front().first > last) return;
    DeviceAccess access;
    while (!s->queue.empty() && s->queue.front().first <= last) {
        Operation op = std::move(s->queue.front().second);
        s->queue.pop_front();
        op();
    }
}
void run_all(CUstream_st* s) { run_until(s, UINT64_MAX); }

// What a synchronisation with the legacy stream waits for: it and every blocking stream.
void run_legacy_and_blocking() {
    for (CUstream_st* s : rt().streams)
        if (s->blocking) run_all(s);
}
void run_everything() {
    for (CUstream_st* s : rt().streams) run_all(s);
}

// True (and every ongoing capture invalidated) when this thread captures in a mode that forbids
// "potentially unsafe" calls: the caller returns cudaErrorStreamCaptureUnsupported.
bool forbidden_while_capturing() {
    bool forbidden = false;
    for (CUstream_st* s : rt().capturing)
        if (s->capture_mode != cudaStreamCaptureModeRelaxed) forbidden = true;
    if (forbidden)
        for (CUstream_st* s : rt().capturing) s->capture_invalidated = true;
    return forbidden;
}

// Checks a copy's direction and extents; dies on what would be undefined behaviour on a GPU.
void check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* api) {
    const Memory to = memory_of(dst), from = memory_of(src);
    bool dst_device = to == Memory::device, src_device = from == Memory::device;
    bool ok = true;
    switch (kind) {
        case cudaMemcpyHostToHost: ok = !dst_device && !src_device; break;
        case cudaMemcpyHostToDevice: ok = dst_device && !src_device; break;
        case cudaMemcpyDeviceToHost: ok = !dst_device && src_device; break;
        case cudaMemcpyDeviceToDevice: ok = dst_device && src_device; break;
        case cudaMemcpyDefault: break;
    }
    if (!ok)
        die("%s of %zu bytes with kind %d: the destination %p is %s and the source %p is %s", api, bytes, int(kind), dst,
            memory_name(to), src, memory_name(from));
    if (dst_device) check_device_range(dst, bytes, api);
    if (src_device) check_device_range(src, bytes, api);
    for (const void* p : {static_cast<const void*>(dst), src}) {
        const Allocation* a = find_allocation(p);
        if (a && a->kind == Memory::pinned && static_cast<const char*>(p) + bytes > a->base + a->bytes)
            die("%s: %zu bytes at %p run past the end of a pinned host buffer of %zu bytes at %p", api, bytes, p, a->bytes,
                a->base);
    }
}

// cudaFree / cudaFreeHost: both synchronise the device first (queued work may still use the memory).
cudaError_t release(void* p, Memory kind) {
    if (!p) return cudaSuccess;
    if (forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    auto it = rt().allocations.find(static_cast<char*>(p));
    if (it == rt().allocations.end() || it->second.kind != kind) return fail(cudaErrorInvalidValue);
    run_everything();
    if (kind == Memory::device) {
        munmap(it->second.mapping, it->second.mapping_bytes);
        rt().device_bytes -= it->second.data_bytes;
    } else {
        std::free(p);
    }
    rt().allocations.erase(it);
    return cudaSuccess;
}

}  // namespace

cudaError_t submit(cudaStream_t stream, Operation op) {
    CUstream_st* s = resolve(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (s->capture) {
        if (!s->capture_invalidated) s->capture->operations.push_back(std::move(op));
        return cudaSuccess;
    }
    if (s == &rt().legacy) {
        for (CUstream_st* other : rt().streams)
            if (other != s && other->blocking) run_all(other);
    } else if (s->blocking) {
        run_all(&rt().legacy);
    }
    s->queue.emplace_back(++s->last_queued, std::move(op));
    return cudaSuccess;
}

std::string describe_address(const void* p) {
    const Allocation* a = find_allocation(p);
    if (!a) return "";
    const char* c = static_cast<const char*>(p);
    char buf[256];
    const char* kind = a->kind == Memory::device ? "device allocation" : "pinned host buffer";
    if (c < a->base)
        std::snprintf(buf, sizeof buf, "%td bytes before a %s of %zu bytes at %p", a->base - c, kind, a->bytes,
                      static_cast<void*>(a->base));
    else if (c >= a->base + a->bytes)
        std::snprintf(buf, sizeof buf, "byte %td of a %s of %zu bytes at %p (past its end)", c - a->base, kind, a->bytes,
                      static_cast<void*>(a->base));
    else
        std::snprintf(buf, sizeof buf, "byte %td of a %s of %zu bytes at %p", c - a->base, kind, a->bytes,
                      static_cast<void*>(a->base));
    return buf;
}

void close_device_memory_before_dependency() {
    for (auto& entry : rt().allocations) {
        const Allocation& a = entry.second;
        if (a.kind == Memory::device) mprotect(a.data_pages, a.data_bytes, a.immutable ? PROT_READ : PROT_NONE);
    }
}
void open_device_memory() { protect_device_memory(PROT_READ | PROT_WRITE); }

void declare_immutable(const void* p) {
    const Allocation* a = find_allocation(p);
    if (!a || a->kind != Memory::device) die("declare_immutable(%p): not device memory", p);
    rt().allocations[a->base].immutable = true;
}

void check_device_range(const void* p, size_t bytes, const char* what) {
    const Allocation* a = find_allocation(p);
    const char* c = static_cast<const char*>(p);
    if (!a || a->kind != Memory::device || c < a->base || c + bytes > a->base + a->bytes) {
        std::string where = describe_address(p);
        die("%s: %zu bytes at %p are not inside one device allocation%s%s", what, bytes, p, where.empty() ? "" : " (",
            where.empty() ? "" : (where + ")").c_str());
    }
}

void enqueue_grid(const char* name, const char* site, const void* kernel, const LaunchConfig& cfg, Body body,
                  std::shared_ptr<void> closure) {
    if (!check_launch(kernel, cfg)) return;
    submit(cfg.stream, [=] { run_grid(name, site, kernel, cfg, body, closure.get()); });
}

}  // namespace kvlm_emu

// ---- Runtime API.
using kvlm_emu::fail;
using kvlm_emu::Memory;
using kvlm_emu::rt;

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return fail(cudaErrorInvalidDevice);
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof prop->name, "kvlm CUDA emulator (CPU, sm_90-like)");
    prop->totalGlobalMem = rt().total_bytes;
    prop->sharedMemPerBlock = size_t(kvlm_emu::default_smem_per_block());
    prop->sharedMemPerBlockOptin = size_t(kvlm_emu::smem_optin());
    prop->warpSize = 32, prop->maxThreadsPerBlock = 1024, prop->multiProcessorCount = rt().n_sms;
    prop->major = 9, prop->minor = 0, prop->memoryBusWidth = 5120, prop->l2CacheSize = 50 << 20;
    return cudaSuccess;
}
cudaError_t cuda_emu_occupancy(int* blocks, int block_size, size_t dynamic_smem) {
    if (!blocks || block_size < 1 || block_size > 1024) return fail(cudaErrorInvalidValue);
    const size_t per_block = dynamic_smem + 1024, per_sm = 228 * 1024;
    *blocks = std::min<int>({2048 / block_size, 32, int(per_sm / per_block)});
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return fail(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = kvlm_emu::default_smem_per_block(); break;
        case cudaDevAttrWarpSize: *value = 32; break;
        case cudaDevAttrMultiProcessorCount:
            *value = rt().n_sms;
            break;
        case cudaDevAttrMemoryClockRate: *value = 2619000; break;  // kHz, as an H100 SXM reports
        case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kvlm_emu::smem_optin(); break;
        case cudaDevAttrCooperativeLaunch:
            *value = 1;
            break;
        default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = nullptr;
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    const size_t page = kvlm_emu::page_size();
    kvlm_emu::Allocation a;
    a.bytes = bytes;
    a.data_bytes = kvlm_emu::round_up(std::max<size_t>(bytes, 1), page);
    if (rt().device_bytes + a.data_bytes > rt().total_bytes) return fail(cudaErrorMemoryAllocation);
    a.mapping_bytes = page + a.data_bytes + kvlm_emu::kGuardBytes;
    void* mapping = mmap(nullptr, a.mapping_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
    a.mapping = static_cast<char*>(mapping);
    a.data_pages = a.mapping + page;
    a.base = a.data_pages + a.data_bytes - kvlm_emu::round_up(std::max<size_t>(bytes, 1), 256);
    if (rt().open_depth > 0) mprotect(a.data_pages, a.data_bytes, PROT_READ | PROT_WRITE);
    rt().allocations[a.base] = a;
    rt().device_bytes += a.data_bytes;
    kvlm_emu::install_segv_handler();  // host code touching it faults with a message naming it
    *p = a.base;
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) { return kvlm_emu::release(p, Memory::device); }
cudaError_t cudaMallocHost(void** p, size_t bytes) {
    *p = nullptr;
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    const size_t page = kvlm_emu::page_size();
    void* host = std::aligned_alloc(page, kvlm_emu::round_up(std::max<size_t>(bytes, 1), page));
    if (!host) return fail(cudaErrorMemoryAllocation);
    kvlm_emu::Allocation a;
    a.base = static_cast<char*>(host), a.bytes = std::max<size_t>(bytes, 1), a.kind = Memory::pinned;
    rt().allocations[a.base] = a;
    *p = host;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) { return kvlm_emu::release(p, Memory::pinned); }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    *total_bytes = rt().total_bytes;
    *free_bytes = rt().total_bytes - rt().device_bytes;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    if (bytes == 0) return cudaSuccess;
    kvlm_emu::check_copy(dst, src, bytes, kind, "cudaMemcpy");
    kvlm_emu::run_legacy_and_blocking();
    kvlm_emu::DeviceAccess access;
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    CUstream_st* s = kvlm_emu::resolve(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (bytes == 0) return cudaSuccess;
    kvlm_emu::check_copy(dst, src, bytes, kind, "cudaMemcpyAsync");
    const bool pageable = kvlm_emu::memory_of(dst) == Memory::pageable || kvlm_emu::memory_of(src) == Memory::pageable;
    if (pageable && !s->capture) {
        // The runtime synchronises the stream and stages pageable memory: the copy is done on return.
        kvlm_emu::run_all(s);
        kvlm_emu::DeviceAccess access;
        std::memmove(dst, src, bytes);
        return cudaSuccess;
    }
    return kvlm_emu::submit(stream, [=] { std::memmove(dst, src, bytes); });
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    if (bytes == 0) return cudaSuccess;
    kvlm_emu::check_device_range(p, bytes, "cudaMemset");
    kvlm_emu::run_legacy_and_blocking();
    kvlm_emu::DeviceAccess access;
    std::memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    kvlm_emu::check_device_range(p, bytes, "cudaMemsetAsync");
    return kvlm_emu::submit(stream, [=] { std::memset(p, value, bytes); });
}

cudaError_t cudaDeviceSynchronize() {
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    kvlm_emu::run_everything();
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    CUstream_st* s = kvlm_emu::resolve(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (s->capture) {
        s->capture_invalidated = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    if (s == &rt().legacy) kvlm_emu::run_legacy_and_blocking();
    else kvlm_emu::run_all(s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
    auto* s = new CUstream_st;
    s->blocking = (flags & cudaStreamNonBlocking) == 0;
    rt().streams.insert(s);
    *stream = s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    CUstream_st* s = kvlm_emu::resolve(stream);
    if (!s || s == &rt().legacy) return fail(cudaErrorInvalidResourceHandle);
    if (s->capture) return fail(cudaErrorStreamCaptureUnsupported);
    kvlm_emu::run_all(s);  // its queued work still runs
    rt().streams.erase(s);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
    *event = new CUevent_st;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    CUstream_st* s = kvlm_emu::resolve(stream);
    if (!s || !event) return fail(cudaErrorInvalidResourceHandle);
    if (s->capture) {
        event->stream = nullptr;  // an event node in the graph: nothing to wait for from the host
        return cudaSuccess;
    }
    event->stream = s, event->sequence = s->last_queued, event->stamped = false;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    if (event->stream && rt().streams.count(event->stream)) kvlm_emu::run_until(event->stream, event->sequence);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end) return fail(cudaErrorInvalidResourceHandle);
    if (kvlm_emu::forbidden_while_capturing()) return fail(cudaErrorStreamCaptureUnsupported);
    for (cudaEvent_t event : {start, end}) {
        if (!event->stream) return fail(cudaErrorInvalidResourceHandle);  // never recorded outside a capture
        if (rt().streams.count(event->stream)) kvlm_emu::run_until(event->stream, event->sequence);
        if (!event->stamped) event->done = std::chrono::steady_clock::now(), event->stamped = true;
    }
    *ms = std::chrono::duration<float, std::milli>(end->done - start->done).count();
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    CUstream_st* s = kvlm_emu::resolve(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (s == &rt().legacy || s->capture) return fail(cudaErrorStreamCaptureUnsupported);
    s->capture = new CUgraph_st;
    s->capture_mode = mode;
    s->capture_invalidated = false;
    rt().capturing.insert(s);
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    *graph = nullptr;
    CUstream_st* s = kvlm_emu::resolve(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (!s->capture) return fail(cudaErrorStreamCaptureUnmatched);
    std::unique_ptr<CUgraph_st> captured(s->capture);
    s->capture = nullptr;
    rt().capturing.erase(s);
    if (s->capture_invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    *graph = captured.release();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    if (!graph) return fail(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{std::make_shared<const std::vector<kvlm_emu::Operation>>(graph->operations)};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return fail(cudaErrorInvalidValue);
    auto operations = exec->operations;  // outlives cudaGraphExecDestroy while the launch is queued
    return kvlm_emu::submit(stream, [operations] {
        for (const kvlm_emu::Operation& op : *operations) op();
    });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}
