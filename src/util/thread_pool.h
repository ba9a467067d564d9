// Persistent worker threads for the CPU backend: run(fn) calls fn(thread_index) once on every thread
// (the caller is thread 0) and returns when all have finished. parallel_for's splits depend only on
// n_threads; parallel_for_each hands out indices as threads free up.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvlm {

// Non-owning reference to a callable (no heap allocation, unlike std::function): decode runs hundreds
// of parallel jobs per token. The callable must outlive the call it is passed to.
template <typename Signature>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
public:
    template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
    FunctionRef(F&& f)  // NOLINT: implicit on purpose, like std::function
        : object_(const_cast<void*>(static_cast<const void*>(&f))),
          call_([](void* object, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
          }) {}
    R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
    void* object_;
    R (*call_)(void*, Args...);
};

class ThreadPool {
public:
    // n_threads: total threads including the caller; 0 = available_cores(). Throws Error when the system
    // cannot start one of them (the ones started are stopped again first).
    explicit ThreadPool(int32_t n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int32_t n_threads() const { return n_threads_; }
    // fn(thread_index) on threads 0..n_threads-1; rethrows the first exception a thread threw.
    void run(FunctionRef<void(int32_t thread_index)> fn);
    // Splits [0, n) into n_threads contiguous near-equal chunks and calls fn(begin, end) for each
    // non-empty one. Chunk boundaries are multiples of `grain` (except the end).
    void parallel_for(int64_t n, FunctionRef<void(int64_t begin, int64_t end)> fn, int64_t grain = 1);
    // Calls fn(i) for every i in [0, n), each thread taking the next index as it finishes one: for tasks of
    // unequal cost (order them costliest first). Which thread runs an index varies from call to call.
    void parallel_for_each(int64_t n, FunctionRef<void(int64_t index)> fn);

private:
    void worker_loop(int32_t index);
    void stop_workers();  // wakes every worker to exit and joins it

    int32_t n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_cv_;
    std::condition_variable done_cv_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int32_t> pending_{0};
    bool stop_ = false;
    const FunctionRef<void(int32_t)>* job_ = nullptr;
    std::exception_ptr error_;
};

// CPUs this process may run on (its affinity mask, e.g. under taskset or a container's cpuset), at least 1.
int32_t available_cores();

// [begin, end) of chunk `index` when [0, n) is split into n_chunks near-equal parts aligned to grain.
void split_range(int64_t n, int32_t n_chunks, int32_t index, int64_t grain, int64_t* begin, int64_t* end);

}  // namespace kvlm
