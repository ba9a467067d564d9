// CUDA entry points for builds without CUDA (CUDA=0): make_cuda_backend throws, cuda_available is false.
// With KVLM_CUDA the real definitions live in cuda/ and this file compiles to nothing.
#include "compute/backend.h"
#include "util/error.h"

#ifndef KVLM_CUDA
namespace kvlm {

namespace {
const char* kNoCuda = "this kvlm was built without CUDA (rebuild with nvcc installed, CUDA=1)";
}

std::unique_ptr<Backend> make_cuda_backend(const ModelFile&, const BackendOptions&) { throw Error(kNoCuda); }

bool cuda_available(std::string* why_not) {
    if (why_not) *why_not = kNoCuda;
    return false;
}

}  // namespace kvlm
#endif
