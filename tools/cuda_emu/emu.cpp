// The CUDA emulator's scheduler and runtime (see include/cuda_runtime.h). A block's threads are fibers
// (ucontext); the scheduler resumes every runnable fiber once per round, in forward, reverse or a seeded
// random order, each running until it reaches a barrier or warp collective or exits. Invariant: a barrier
// (warp collective) releases only when every thread of the block (lane of the warp) waits at it; anything
// else that leaves no fiber runnable is reported as divergence or deadlock and aborts.
#include <cuda_runtime.h>

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "emu_internal.h"

// Fiber switches: on x86-64 a minimal switch of the callee-saved registers (glibc's swapcontext makes a
// sigprocmask system call per switch, which dominated the run time); elsewhere ucontext.
#if defined(__x86_64__)
extern "C" void kvlm_emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl kvlm_emu_switch
    .type kvlm_emu_switch, @function
kvlm_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kvlm_emu_switch, .-kvlm_emu_switch
)");
#define KVLM_EMU_FAST_SWITCH 1
#else
#define KVLM_EMU_FAST_SWITCH 0
#endif

namespace kvlm_emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kMaxDynamicSmem = 256 * 1024;      // above any device's opt-in limit
constexpr int kDefaultSmemOptin = 227 * 1024;       // H100 / H200
constexpr int kDefaultSmem = 48 * 1024;             // without cudaFuncSetAttribute

enum class State { runnable, at_barrier, at_warp_op, at_dependency_wait, napping, done };
enum class Order { forward, reverse, random };

struct Fiber {
#if KVLM_EMU_FAST_SWITCH
    void* sp = nullptr;  // saved stack pointer while suspended
#else
    ucontext_t ctx;
#endif
    char* stack = nullptr;  // kStackBytes, lowest page PROT_NONE
    State state = State::done;
    const char* op = nullptr;  // the barrier or collective it waits at
    const char* file = nullptr;
    int line = 0;
    int parity = 0;            // which of the two exchange buffers its next collective uses
    uint64_t wmma_ops = 0;
};

struct Emulator {
    Order order = Order::random;
    uint64_t rng = 1;  // xorshift64* state: a shuffle per scheduling round must be cheap
    int smem_optin = kDefaultSmemOptin;
    std::map<const void*, int> max_dynamic_smem;  // per kernel, from cudaFuncSetAttribute
    cudaError_t last_error = cudaSuccess;

    std::vector<Fiber> fibers;                     // the running block's threads
    std::vector<std::vector<Fiber>> spare_fibers;  // cooperative grids' blocks' threads, kept between launches
    std::vector<uint64_t> slots[2];  // [n_threads] values deposited by warp collectives
#if KVLM_EMU_FAST_SWITCH
    void* scheduler_sp = nullptr;
#else
    ucontext_t scheduler;
    ucontext_t fiber_template;
#endif
    int current = -1;  // running fiber, -1 outside kernels
    const char* kernel_name = nullptr;
    const char* kernel_site = nullptr;
    const char* next_launch_name = nullptr;  // name_next_launch
    bool before_dependency = false;  // a checked block of a programmatic launch, before its dependency wait
    Body body = nullptr;
    void* closure = nullptr;

    // Dynamic shared memory: the launch's bytes end at a PROT_NONE page; below them is PROT_NONE too.
    char* arena = nullptr;  // [page][kMaxDynamicSmem][page]
    char* arena_end = nullptr;  // start of the trailing guard page
    char* smem_base = nullptr;
    size_t smem_bytes = 0;
    std::vector<std::pair<void*, size_t>> static_shared;

    Emulator() {
        const char* o = std::getenv("KVLM_CUDA_EMU_ORDER");
        std::string order_name = o ? o : "random";
        if (order_name == "forward") order = Order::forward;
        else if (order_name == "reverse") order = Order::reverse;
        else if (order_name == "random") order = Order::random;
        else die("KVLM_CUDA_EMU_ORDER=%s: expected forward, reverse or random", o);
        const char* seed = std::getenv("KVLM_CUDA_EMU_SEED");
        rng = (seed ? std::strtoull(seed, nullptr, 10) : 1) * 0x9E3779B97F4A7C15ull | 1;
        if (const char* optin = std::getenv("KVLM_CUDA_EMU_SMEM_OPTIN")) smem_optin = std::atoi(optin);
        if (smem_optin < kDefaultSmem || smem_optin > int(kMaxDynamicSmem))
            die("KVLM_CUDA_EMU_SMEM_OPTIN=%d: expected %d..%zu", smem_optin, kDefaultSmem, kMaxDynamicSmem);
#if !KVLM_EMU_FAST_SWITCH
        if (getcontext(&fiber_template) != 0) die("getcontext failed");
#endif
        const size_t page = size_t(sysconf(_SC_PAGESIZE));
        const size_t span = kMaxDynamicSmem + 2 * page;
        arena = static_cast<char*>(mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (arena == MAP_FAILED) die("mmap of the shared memory arena failed");
        arena_end = arena + page + kMaxDynamicSmem;
    }
};

Emulator g_emulator;
inline Emulator& emu() { return g_emulator; }

uint64_t next_random() {
    uint64_t& x = emu().rng;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    return x * 0x2545F4914F6CDD1Dull;
}

template <typename T>
void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[size_t((next_random() >> 32) * i >> 32)]);
}

bool same_site(const char* a, const char* b) { return a == b || std::strcmp(a, b) == 0; }

const char* order_name(Order o) { return o == Order::forward ? "forward" : o == Order::reverse ? "reverse" : "random"; }

// "kernel K, block (x,y,z), thread (x,y,z)" for messages; empty outside kernels.
std::string where() {
    Emulator& e = emu();
    if (!e.kernel_name) return "";
    char buf[1024];
    std::snprintf(buf, sizeof buf, "\n  in kernel %s launched by %s\n  block (%u,%u,%u) of (%u,%u,%u), thread (%u,%u,%u) of (%u,%u,%u), order %s",
                  e.kernel_name, e.kernel_site, g_block_idx.x, g_block_idx.y, g_block_idx.z, g_grid_dim.x, g_grid_dim.y, g_grid_dim.z,
                  g_thread_idx.x, g_thread_idx.y, g_thread_idx.z, g_block_dim.x, g_block_dim.y, g_block_dim.z,
                  order_name(e.order));
    return buf;
}

void on_segv(int, siginfo_t* info, void*) {
    Emulator& e = emu();
    const char* addr = static_cast<const char*>(info->si_addr);
    char buf[1024];
    int n;
    if (e.arena && addr >= e.arena && addr < e.arena_end + sysconf(_SC_PAGESIZE))
        n = std::snprintf(buf, sizeof buf,
                          "kvlm CUDA emulator: dynamic shared memory access out of bounds at byte %td of %zu%s\n",
                          addr - e.smem_base, e.smem_bytes, where().c_str());
    else {
        std::string what = describe_address(addr);
        const char* who = e.kernel_name && e.before_dependency
                              ? " before cudaGridDependencySynchronize in a programmatic launch (until then a kernel "
                                "may only read memory declared immutable, and write nothing)"
                          : e.kernel_name || what.empty()
                              ? ""
                              : " by host code (device memory is reachable only by kernels and copies)";
        n = std::snprintf(buf, sizeof buf, "kvlm CUDA emulator: invalid memory access at %p%s%s%s%s\n", info->si_addr,
                          what.empty() ? "" : ", ", what.c_str(), who, where().c_str());
    }
    if (n > 0) (void)!write(2, buf, size_t(std::min<int>(n, sizeof buf - 1)));
    abort();  // doctest's SIGABRT handler names the test case
}

}  // namespace

// Installed at every launch and whenever device memory is closed to the host again: doctest installs its
// own handlers at the start of each test case.
void install_segv_handler() {
    static std::vector<char> alt(1 << 16);
    stack_t ss{};
    ss.ss_sp = alt.data(), ss.ss_size = alt.size();
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

namespace {

void to_scheduler(Fiber& f) {
#if KVLM_EMU_FAST_SWITCH
    kvlm_emu_switch(&f.sp, emu().scheduler_sp);
#else
    swapcontext(&f.ctx, &emu().scheduler);
#endif
}

void to_fiber(Fiber& f) {
#if KVLM_EMU_FAST_SWITCH
    kvlm_emu_switch(&emu().scheduler_sp, f.sp);
#else
    swapcontext(&emu().scheduler, &f.ctx);
#endif
}

void fiber_entry() {
    Emulator& e = emu();
    e.body(e.closure);
    Fiber& f = e.fibers[size_t(e.current)];
    f.state = State::done;
    to_scheduler(f);  // never resumed
}

// Makes f start at fiber_entry on its own stack when next switched to.
void start_fiber(Fiber& f) {
#if KVLM_EMU_FAST_SWITCH
    // kvlm_emu_switch pops: mxcsr + x87 control word (8 bytes), r15, r14, r13, r12, rbx, rbp, then returns.
    // The entry must see rsp = 8 (mod 16), as right after a call.
    uint64_t* top = reinterpret_cast<uint64_t*>(f.stack + kStackBytes);
    uint64_t* sp = top - 9;
    uint32_t mxcsr = __builtin_ia32_stmxcsr();
    uint16_t fpu_cw;
    asm volatile("fnstcw %0" : "=m"(fpu_cw));
    std::memcpy(sp, &mxcsr, 4);
    std::memcpy(reinterpret_cast<char*>(sp) + 4, &fpu_cw, 2);
    for (int i = 1; i <= 6; i++) sp[i] = 0;
    sp[7] = reinterpret_cast<uint64_t>(&fiber_entry);
    sp[8] = 0;  // fiber_entry's return address: it never returns
    f.sp = sp;
#else
    f.ctx = emu().fiber_template;
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry, 0);
#endif
}

void set_current(int t) {
    Emulator& e = emu();
    e.current = t;
    const unsigned bx = g_block_dim.x, by = g_block_dim.y;
    g_thread_idx = {unsigned(t) % bx, unsigned(t) / bx % by, unsigned(t) / (bx * by)};
    g_lane = t % 32;
}

// Suspends the running fiber until the scheduler releases it.
void wait_at(State state, const char* op, const char* file, int line) {
    Emulator& e = emu();
    if (e.current < 0) die("%s called outside a kernel", op);
    Fiber& f = e.fibers[size_t(e.current)];
    f.state = state, f.op = op, f.file = file, f.line = line;
    const int t = e.current;
    to_scheduler(f);
    set_current(t);
}

std::string describe(const Fiber& f, int t) {
    char buf[256];
    if (f.state == State::done) std::snprintf(buf, sizeof buf, "thread %d exited", t);
    else std::snprintf(buf, sizeof buf, "thread %d waits at %s (%s:%d)", t, f.op, f.file, f.line);
    return buf;
}

void fail_block(const char* what, int t0, int t1) {
    Emulator& e = emu();
    std::string detail;
    for (int t = t0; t < t1; t++) {
        if (t > t0 && (t == t0 + 8 || t == t1 - 1) && t1 - t0 > 9) detail += "\n    ...";
        if (t - t0 >= 8 && t < t1 - 1 && t1 - t0 > 9) continue;
        detail += "\n    " + describe(e.fibers[size_t(t)], t);
    }
    e.current = -1;
    die("%s%s", what, detail.c_str());
}

void check_wmma_counts(int t0, int t1) {
    Emulator& e = emu();
    for (int t = t0 + 1; t < t1; t++)
        if (e.fibers[size_t(t)].wmma_ops != e.fibers[size_t(t0)].wmma_ops)
            fail_block("WMMA operations not executed by every lane of the warp (divergent wmma::*_sync)", t0, t1);
}

// Releases warps whose lanes all wait at the same collective; aborts on a warp split between a collective
// and a barrier or exit. True when some warp was released.
bool release_warps(int n_threads) {
    Emulator& e = emu();
    bool released = false;
    for (int w0 = 0; w0 < n_threads; w0 += 32) {
        const int w1 = std::min(w0 + 32, n_threads);
        int at_op = 0;
        for (int t = w0; t < w1; t++) at_op += e.fibers[size_t(t)].state == State::at_warp_op;
        if (at_op == 0) continue;
        if (w1 - w0 < 32) fail_block("warp collective in a partial warp (block size not a multiple of 32)", w0, w1);
        if (at_op < 32) {
            bool others_stuck = true;
            for (int t = w0; t < w1; t++)  // lanes at the dependency wait will come once it is released
                others_stuck &= e.fibers[size_t(t)].state != State::runnable &&
                                e.fibers[size_t(t)].state != State::at_dependency_wait;
            if (others_stuck) fail_block("warp collective not reached by all 32 lanes", w0, w1);
            continue;
        }
        const Fiber& first = e.fibers[size_t(w0)];
        for (int t = w0; t < w1; t++) {
            const Fiber& f = e.fibers[size_t(t)];
            // __syncwarp may converge from different call sites; a data exchange must be the same one.
            const bool same = (f.op == first.op && f.line == first.line && f.file == first.file) ||
                              (same_site(f.op, first.op) && (std::strcmp(f.op, "__syncwarp") == 0 ||
                                                             (f.line == first.line && same_site(f.file, first.file))));
            if (!same) fail_block("lanes of a warp wait at different collectives", w0, w1);
        }
        check_wmma_counts(w0, w1);
        for (int t = w0; t < w1; t++) e.fibers[size_t(t)].state = State::runnable;
        released = true;
    }
    return released;
}

// The block's dependency check is over: device memory mapped read-write again.
void end_dependency_check() {
    Emulator& e = emu();
    if (!e.before_dependency) return;
    e.before_dependency = false;
    open_device_memory();
}

// When nothing else can run: releases the threads waiting at cudaGridDependencySynchronize (the prior
// kernel has finished by now) and maps device memory back. On a GPU the wait is per thread; here every
// thread of the block gets as far as it can before any is released, so each one's accesses before its wait
// are checked. True when some thread was released.
bool release_dependency_wait(int n_threads) {
    Emulator& e = emu();
    bool released = false;
    for (int t = 0; t < n_threads; t++) {
        Fiber& f = e.fibers[size_t(t)];
        if (f.state != State::at_dependency_wait) continue;
        f.state = State::runnable;
        released = true;
    }
    if (released) end_dependency_check();
    return released;
}

// Makes the first n_threads of e.fibers fresh threads of a block (stacks mapped on first use) and poisons
// its shared memory. check_dependency: unmap device memory until the block's threads have passed the
// dependency wait.
void start_block(int n_threads, bool check_dependency) {
    Emulator& e = emu();
    if (e.fibers.size() < size_t(n_threads)) {
        const size_t page = size_t(sysconf(_SC_PAGESIZE));
        for (size_t t = e.fibers.size(); t < size_t(n_threads); t++) {
            e.fibers.emplace_back();
            char* s = static_cast<char*>(mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
            if (s == MAP_FAILED)
                die("mmap of a fiber stack failed (a cooperative grid maps every thread's stack at once, two "
                    "mappings each; vm.max_map_count bounds them: launch fewer blocks)");
            mprotect(s, page, PROT_NONE);  // overflow faults instead of corrupting the next stack
            e.fibers.back().stack = s;
        }
    }
    for (auto& buf : e.slots) buf.assign(size_t(n_threads), 0);
    for (int t = 0; t < n_threads; t++) {
        Fiber& f = e.fibers[size_t(t)];
        start_fiber(f);
        f.state = State::runnable, f.op = nullptr, f.parity = 0, f.wmma_ops = 0;
    }
    for (auto& [p, bytes] : e.static_shared) std::memset(p, 0xFF, bytes);
    if (e.smem_bytes) std::memset(e.smem_base, 0xFF, size_t(e.arena_end - e.smem_base));
    if (check_dependency) {
        close_device_memory_before_dependency();
        e.before_dependency = true;
    }
}

// Runs the block's threads until they have all exited (true) or, in a cooperative grid, until every thread
// still running waits on other blocks: it napped (__nanosleep, as a spin on a grid barrier does) and the
// rest wait at a barrier or collective (false; the nappers run again when the block is next resumed).
// `progress` is set when a barrier or collective was released or a thread exited.
bool step_block(int n_threads, bool& progress) {
    Emulator& e = emu();
    std::vector<int> order(static_cast<size_t>(n_threads));
    for (;;) {
        for (int t = 0; t < n_threads; t++) order[size_t(t)] = t;
        if (e.order == Order::reverse) std::reverse(order.begin(), order.end());
        if (e.order == Order::random) shuffle(order);
        for (int t : order) {
            if (e.fibers[size_t(t)].state != State::runnable) continue;
            set_current(t);
            to_fiber(e.fibers[size_t(t)]);
            if (e.fibers[size_t(t)].state == State::done) progress = true;
        }
        e.current = -1;
        if (release_warps(n_threads)) {
            progress = true;
            continue;
        }
        if (release_dependency_wait(n_threads)) continue;
        int n_done = 0, n_barrier = 0, n_napping = 0;
        for (int t = 0; t < n_threads; t++) {
            n_done += e.fibers[size_t(t)].state == State::done;
            n_barrier += e.fibers[size_t(t)].state == State::at_barrier;
            n_napping += e.fibers[size_t(t)].state == State::napping;
        }
        if (n_done == n_threads) return true;
        if (n_napping > 0) {
            for (int t = 0; t < n_threads; t++)
                if (e.fibers[size_t(t)].state == State::napping) e.fibers[size_t(t)].state = State::runnable;
            return false;
        }
        if (n_done + n_barrier < n_threads) fail_block("deadlock: no thread can run", 0, n_threads);
        if (n_done > 0) fail_block("__syncthreads not reached by every thread of the block", 0, n_threads);
        const Fiber& first = e.fibers[0];
        for (int t = 0; t < n_threads; t++) {
            const Fiber& f = e.fibers[size_t(t)];
            if (f.line != first.line || !same_site(f.file, first.file))
                fail_block("threads wait at different __syncthreads (divergent barrier)", 0, n_threads);
        }
        for (int w0 = 0; w0 < n_threads; w0 += 32) check_wmma_counts(w0, std::min(w0 + 32, n_threads));
        for (int t = 0; t < n_threads; t++) e.fibers[size_t(t)].state = State::runnable;
        progress = true;
    }
}

// After the block's last thread exited.
void finish_block(int n_threads) {
    Emulator& e = emu();
    for (int w0 = 0; w0 < n_threads; w0 += 32) check_wmma_counts(w0, std::min(w0 + 32, n_threads));
    end_dependency_check();  // when every thread exited without waiting
    // Bytes past the launch's dynamic shared memory (up to the guard page) must still hold the poison.
    for (char* p = e.smem_base + e.smem_bytes; p < e.arena_end; p++)
        if (static_cast<unsigned char>(*p) != 0xFF)
            die("dynamic shared memory written past its %zu bytes at byte %td [kernel %s, block (%u,%u,%u)]",
                e.smem_bytes, p - e.smem_base, e.kernel_name, g_block_idx.x, g_block_idx.y, g_block_idx.z);
}

// Rounds of a grid in which every live thread only napped, before the emulator calls it a deadlock: a spin on
// a flag another block sets ends within two rounds once that block runs.
constexpr int kMaxIdleRounds = 1000;

// A block of an ordinary grid: it runs alone, so a thread that naps can only wait on its own block.
void run_block(int n_threads, bool check_dependency) {
    start_block(n_threads, check_dependency);
    int idle = 0;
    for (bool progress = false; !step_block(n_threads, progress); progress = false)
        if (!progress && ++idle > kMaxIdleRounds)
            die("a thread spins (__nanosleep) on what no thread of its block changes: blocks of a grid launched "
                "without cudaLaunchAttributeCooperative do not run side by side");
    finish_block(n_threads);
}

// A block of a cooperative grid, parked between its turns: its threads (fibers) and shared memory.
struct ParkedBlock {
    std::vector<Fiber> fibers;
    std::vector<char> shared;  // static shared arrays, then the dynamic bytes up to the guard page
    uint3 index{};
    bool started = false, done = false;
};

void save_shared(std::vector<char>& out) {
    Emulator& e = emu();
    out.clear();
    for (auto& [p, bytes] : e.static_shared)
        out.insert(out.end(), static_cast<char*>(p), static_cast<char*>(p) + bytes);
    out.insert(out.end(), e.smem_base, e.arena_end);
}
void restore_shared(const std::vector<char>& in) {
    Emulator& e = emu();
    const char* at = in.data();
    for (auto& [p, bytes] : e.static_shared) std::memcpy(p, at, bytes), at += bytes;
    std::memcpy(e.smem_base, at, size_t(e.arena_end - e.smem_base));
}

// Every block of the grid side by side, as a cooperative launch guarantees: each runs until it has exited
// or waits on other blocks (step_block), then the next one takes its turn, with its own threads and shared
// memory, in the emulator's order, until all have exited.
void run_cooperative_grid(int n_threads, const std::vector<uint64_t>& blocks, dim3 g) {
    Emulator& e = emu();
    std::vector<ParkedBlock> parked(blocks.size());
    for (size_t b = 0; b < blocks.size(); b++) {
        const uint64_t i = blocks[b];
        parked[b].index = {unsigned(i % g.x), unsigned(i / g.x % g.y), unsigned(i / (uint64_t(g.x) * g.y))};
        if (b < e.spare_fibers.size()) parked[b].fibers = std::move(e.spare_fibers[b]);  // stacks mapped before
    }
    std::vector<size_t> turn(blocks.size());
    for (size_t b = 0; b < turn.size(); b++) turn[b] = b;
    for (int idle = 0;;) {
        bool progress = false, all_done = true;
        for (size_t b : turn) {
            ParkedBlock& pb = parked[b];
            if (pb.done) continue;
            std::swap(e.fibers, pb.fibers);
            g_block_idx = pb.index;
            if (!pb.started) {
                start_block(n_threads, false);
                pb.started = true;
            } else {
                restore_shared(pb.shared);
                for (auto& buf : e.slots) buf.assign(size_t(n_threads), 0);  // no collective spans a turn
            }
            pb.done = step_block(n_threads, progress);
            if (pb.done)
                finish_block(n_threads);
            else
                save_shared(pb.shared);
            std::swap(e.fibers, pb.fibers);
            all_done &= pb.done;
        }
        if (all_done) break;
        if (progress)
            idle = 0;
        else if (++idle > kMaxIdleRounds)
            die("cooperative grid: every block spins (__nanosleep) and none moves on: a grid barrier not reached by "
                "every block, or a flag no block sets");
        if (e.order == Order::random) shuffle(turn);
    }
    e.spare_fibers.resize(std::max(e.spare_fibers.size(), parked.size()));
    for (size_t b = 0; b < parked.size(); b++) e.spare_fibers[b] = std::move(parked[b].fibers);
}

}  // namespace

void die(const char* format, ...) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvlm CUDA emulator: ");
    va_list args;
    va_start(args, format);
    std::vfprintf(stderr, format, args);
    va_end(args);
    std::fprintf(stderr, "%s\n", where().c_str());
    std::fflush(stderr);
    std::abort();
}

void block_barrier(const char* file, int line) { wait_at(State::at_barrier, "__syncthreads", file, line); }

void nap(const char* file, int line) { wait_at(State::napping, "__nanosleep", file, line); }

void grid_dependency_wait() {
    Emulator& e = emu();
    if (e.current < 0) die("cudaGridDependencySynchronize called outside a kernel");
    // Outside programmatic launches, in blocks not checked, and once the block's wait has been released, it
    // returns at once.
    if (e.before_dependency) wait_at(State::at_dependency_wait, "cudaGridDependencySynchronize", __FILE__, __LINE__);
}

void name_next_launch(const char* name) { emu().next_launch_name = name; }
const char* take_launch_name() {
    const char* name = emu().next_launch_name;
    emu().next_launch_name = nullptr;
    return name ? name : "a kernel launched by cudaLaunchKernelEx";
}

const uint64_t* warp_exchange(uint64_t value, unsigned mask, const char* op, const char* file, int line) {
    Emulator& e = emu();
    if (mask != 0xffffffffu) die("%s with mask 0x%08x at %s:%d: only full-warp masks are emulated", op, mask, file, line);
    const int t = e.current;
    if (t < 0) die("%s called outside a kernel", op);
    const int parity = e.fibers[size_t(t)].parity;
    e.fibers[size_t(t)].parity ^= 1;
    // Double-buffered: a lane cannot deposit into this buffer again before the next collective has
    // released, i.e. before every lane has read this one's values.
    e.slots[parity][size_t(t)] = value;
    wait_at(State::at_warp_op, op, file, line);
    return e.slots[parity].data() + (t & ~31);
}

void count_wmma_op() {
    Emulator& e = emu();
    if (e.current < 0) die("wmma operation outside a kernel");
    e.fibers[size_t(e.current)].wmma_ops++;
}

void* dynamic_smem() { return emu().smem_base; }

void register_static_shared(void* p, size_t bytes) {
    emu().static_shared.emplace_back(p, bytes);
    std::memset(p, 0xFF, bytes);
}
bool register_static_shared_once(void* p, size_t bytes) {
    register_static_shared(p, bytes);
    return true;
}

void check_smem_range(const void* first, const void* last, const char* what) {
    Emulator& e = emu();
    const char *a = static_cast<const char*>(first), *b = static_cast<const char*>(last);
    const bool in_arena = (a >= e.arena && a < e.arena_end) || (b >= e.arena && b < e.arena_end);
    if (in_arena && (a < e.smem_base || b >= e.smem_base + e.smem_bytes))
        die("%s: bytes %td..%td outside the %zu bytes of dynamic shared memory", what, a - e.smem_base,
            b - e.smem_base, e.smem_bytes);
}

bool emulated_launch_error(cudaError_t error) {
    if (emu().last_error == cudaSuccess) emu().last_error = error;
    return false;
}

void run_grid(const char* name, const char* site, const void* kernel, const LaunchConfig& cfg, Body body, void* closure) {
    Emulator& e = emu();
    install_segv_handler();
    const dim3 g = cfg.grid, b = cfg.block;
    const uint64_t n_threads = uint64_t(b.x) * b.y * b.z;
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    e.smem_bytes = cfg.smem;
    e.smem_base = e.arena_end - (cfg.smem + 127) / 128 * 128;
    char* accessible = e.arena + (size_t(e.smem_base - e.arena) / page) * page;
    mprotect(e.arena, size_t(accessible - e.arena), PROT_NONE);
    if (e.arena_end > accessible) mprotect(accessible, size_t(e.arena_end - accessible), PROT_READ | PROT_WRITE);

    e.kernel_name = name, e.kernel_site = site, e.body = body, e.closure = closure;
    g_grid_dim = g, g_block_dim = b;
    const uint64_t n_blocks = uint64_t(g.x) * g.y * g.z;
    std::vector<uint64_t> blocks(n_blocks);
    for (uint64_t i = 0; i < n_blocks; i++) blocks[i] = i;
    if (e.order == Order::reverse) std::reverse(blocks.begin(), blocks.end());
    if (e.order == Order::random) shuffle(blocks);
    // A programmatic launch's first two blocks (in the run order, random by default) are checked for accesses
    // before the dependency wait: remapping every allocation around each block of every grid doubled the
    // emulated suites' time, and the blocks of a grid take the same path up to their wait.
    if (cfg.cooperative) {
        run_cooperative_grid(int(n_threads), blocks, g);
        e.kernel_name = nullptr;
        return;
    }
    uint64_t n_run = 0;
    for (uint64_t i : blocks) {
        g_block_idx = {unsigned(i % g.x), unsigned(i / g.x % g.y), unsigned(i / (uint64_t(g.x) * g.y))};
        run_block(int(n_threads), cfg.programmatic && n_run++ < 2);
    }
    e.kernel_name = nullptr;
}

int default_smem_per_block() { return kDefaultSmem; }
int smem_optin() { return emu().smem_optin; }

bool check_launch(const void* kernel, const LaunchConfig& cfg) {
    Emulator& e = emu();
    const dim3 g = cfg.grid, b = cfg.block;
    const uint64_t n_threads = uint64_t(b.x) * b.y * b.z;
    const auto limit = e.max_dynamic_smem.count(kernel) ? e.max_dynamic_smem[kernel] : kDefaultSmem;
    // As cudaLaunchKernel: a bad configuration is an error at the next cudaGetLastError, nothing runs.
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535 || n_threads == 0 || n_threads > 1024 ||
        b.z > 64)
        return emulated_launch_error(cudaErrorInvalidConfiguration);
    if (cfg.smem > size_t(limit)) return emulated_launch_error(cudaErrorInvalidValue);
    return true;
}

void ptx_prefetch_global_l2(const void* p) { check_device_range(p, 1, "prefetch.global.L2"); }

void ptx_ld_global_nc_v4_u32(unsigned& a, unsigned& b, unsigned& c, unsigned& d, const void* p) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) die("ld.global.nc.v4.u32 from %p: not 16-byte aligned", p);
    uint4 v;
    std::memcpy(&v, p, 16);
    a = v.x, b = v.y, c = v.z, d = v.w;
}

}  // namespace kvlm_emu

// ---- Runtime API.
using kvlm_emu::emu;

cudaError_t cuda_emu_func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > emu().smem_optin)
        return cudaErrorInvalidValue;
    emu().max_dynamic_smem[kernel] = value;
    return cudaSuccess;
}
// Every emulated kernel stands for an sm_90 binary compiled from PTX 9.0 (the Makefile's CUARCH).
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* kernel) {
    if (!attributes || !kernel) return cudaErrorInvalidValue;
    attributes->binaryVersion = 90, attributes->ptxVersion = 90;
    return cudaSuccess;
}
cudaError_t cudaGetLastError() {
    cudaError_t e = emu().last_error;
    emu().last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return emu().last_error; }
const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    }
    return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
        default: return cudaGetErrorName(error);
    }
}
