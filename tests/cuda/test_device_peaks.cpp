// The datasheet table behind `kvlm bench`'s roofline fractions: names are matched by substring, so a name that
// contains another (GH200 contains H200) must find its own row. Host code only: runs wherever CUDA is built,
// no device needed.
#include <doctest/doctest.h>

#ifdef KVLM_CUDA
#include "cuda/backend/device_peaks.h"

using namespace kvlm;

TEST_CASE("cuda device peaks: each known GPU name finds its own datasheet row") {
    CHECK(cuda_device_peaks("NVIDIA GH200 480GB", 0, 0).memory_gb_s == 4000);
    CHECK(cuda_device_peaks("NVIDIA H200", 0, 0).memory_gb_s == 4800);
    CHECK(cuda_device_peaks("NVIDIA H100 80GB HBM3", 0, 0).memory_gb_s == 3350);
    CHECK(cuda_device_peaks("NVIDIA H100 PCIe", 0, 0).memory_gb_s == 2000);
    CHECK(cuda_device_peaks("NVIDIA A100-SXM4-80GB", 0, 0).memory_gb_s == 2039);
    // An unknown name falls back to the memory clock and bus width (2 transfers per clock).
    CHECK(cuda_device_peaks("Some GPU", 1000000, 256).memory_gb_s == doctest::Approx(64.0));
}
#else
TEST_CASE("cuda device peaks: each known GPU name finds its own datasheet row") {
    MESSAGE("SKIPPED: no CUDA device (this kvlm was built without CUDA)");
}
#endif
