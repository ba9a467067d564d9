// dlopen("libcublas.so.13") and dlsym of the functions in CublasApi; failure is remembered and reported
// as an Error that says how to point the loader at the library.
#include "runtime/cublas_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "util/error.h"

namespace kvlm {

namespace {

struct Loaded {
    CublasApi api;
    std::string error;  // empty when loaded
};

const Loaded& load() {
    static Loaded loaded;
    static std::once_flag once;
    std::call_once(once, [] {
        const char* ld_path = std::getenv("LD_LIBRARY_PATH");
        std::string hint = fmt::format(
            "put the directory holding {} on LD_LIBRARY_PATH (now '{}'); with PyTorch's CUDA 13 wheels it is "
            "the nvidia/cu13/lib or nvidia/cublas/lib folder of the venv, see docs/CUDA.md",
            kCublasLibrary, ld_path ? ld_path : "");
        void* library = dlopen(kCublasLibrary, RTLD_NOW | RTLD_LOCAL);
        if (!library) {
            const char* message = dlerror();
            loaded.error = fmt::format("cannot load cuBLAS ({}): {}; {}", kCublasLibrary, message ? message : "?", hint);
            return;
        }
        // The library stays loaded for the life of the process (handles may outlive any one backend).
        auto resolve = [&](auto& fn, const char* symbol) {
            void* address = dlsym(library, symbol);
            if (!address && loaded.error.empty())
                loaded.error = fmt::format("{} has no symbol {} (a different cuBLAS major version?); {}",
                                           kCublasLibrary, symbol, hint);
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(address);
        };
        resolve(loaded.api.create, "cublasCreate_v2");
        resolve(loaded.api.destroy, "cublasDestroy_v2");
        resolve(loaded.api.set_stream, "cublasSetStream_v2");
        resolve(loaded.api.sgemm, "cublasSgemm_v2");
        resolve(loaded.api.gemm_ex, "cublasGemmEx");
    });
    return loaded;
}

const char* status_name(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

}  // namespace

const CublasApi& cublas_api() {
    const Loaded& loaded = load();
    if (!loaded.error.empty()) throw Error(loaded.error);
    return loaded.api;
}

bool cublas_loadable(std::string* why_not) {
    const Loaded& loaded = load();
    if (loaded.error.empty()) return true;
    if (why_not) *why_not = loaded.error;
    return false;
}

void cublas_fail(cublasStatus_t status, const char* statement, const char* file, int line) {
    int device = -1;
    cudaGetDevice(&device);
    throw_error("cuBLAS error {} ({}) in `{}` at {}:{} on device {}", status_name(status), int(status), statement, file,
                line, device);
}

}  // namespace kvlm
