// Thread pool implementation: workers spin briefly on a generation counter (decode issues hundreds of
// small jobs per token), then sleep on a condition variable.
#include "util/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <system_error>

#include "util/error.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#else
static inline void cpu_relax() {}
#endif

namespace kvlm {

namespace {
constexpr int kSpinIterations = 4000;
}

void split_range(int64_t n, int32_t n_chunks, int32_t index, int64_t grain, int64_t* begin, int64_t* end) {
    int64_t n_units = (n + grain - 1) / grain;
    int64_t base = n_units / n_chunks, extra = n_units % n_chunks;
    int64_t first = index * base + std::min<int64_t>(index, extra);
    int64_t count = base + (index < extra ? 1 : 0);
    *begin = std::min(n, first * grain);
    *end = std::min(n, (first + count) * grain);
}

int32_t available_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return int32_t(CPU_COUNT(&set));
    return int32_t(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int32_t n_threads) {
    if (n_threads <= 0) n_threads = available_cores();
    n_threads_ = n_threads;
    workers_.reserve(size_t(n_threads - 1));
    for (int32_t i = 1; i < n_threads; i++) {
        try {
            workers_.emplace_back([this, i] { worker_loop(i); });
        } catch (const std::system_error& e) {
            // The destructor does not run for a constructor that throws: stop the started workers here.
            stop_workers();
            throw_error("cannot start CPU thread {} of {}: {} (use fewer threads with -t, or free memory)", i + 1,
                        n_threads, e.code().message());
        }
    }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_cv_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int32_t index) {
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen) {
            if (++spins < kSpinIterations) {
                cpu_relax();
                continue;
            }
            std::unique_lock<std::mutex> lock(mutex_);
            wake_cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        }
        seen = generation_.load(std::memory_order_acquire);
        const FunctionRef<void(int32_t)>* job;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (stop_) return;
            job = job_;
        }
        try {
            (*job)(index);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = std::current_exception();
        }
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);
            done_cv_.notify_one();
        }
    }
}

void ThreadPool::run(FunctionRef<void(int32_t)> fn) {
    if (n_threads_ == 1) {
        fn(0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &fn;
        error_ = nullptr;
        pending_.store(n_threads_ - 1, std::memory_order_release);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_cv_.notify_all();
    std::exception_ptr own_error;
    try {
        fn(0);
    } catch (...) {
        own_error = std::current_exception();
    }
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0 && spins < kSpinIterations; spins++) cpu_relax();
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    job_ = nullptr;
    if (own_error) std::rethrow_exception(own_error);
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int32_t n_chunks = int32_t(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
    if (n_chunks <= 1) {
        fn(0, n);
        return;
    }
    auto chunk = [&](int32_t thread_index) {
        if (thread_index >= n_chunks) return;
        int64_t begin, end;
        split_range(n, n_chunks, thread_index, grain, &begin, &end);
        if (begin < end) fn(begin, end);
    };
    run(chunk);
}

void ThreadPool::parallel_for_each(int64_t n, FunctionRef<void(int64_t)> fn) {
    if (n <= 0) return;
    if (n == 1 || n_threads_ == 1) {
        for (int64_t i = 0; i < n; i++) fn(i);
        return;
    }
    std::atomic<int64_t> next{0};
    run([&](int32_t) {
        for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n; i = next.fetch_add(1, std::memory_order_relaxed))
            fn(i);
    });
}

}  // namespace kvlm
