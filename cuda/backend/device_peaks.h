// Peak memory bandwidth and bf16 tensor throughput of a CUDA device, for `kvlm bench` roofline fractions:
// datasheet figures for the GPUs kvlm targets, else bandwidth from the memory clock and bus width.
#pragma once
#include <string>

#include "compute/backend.h"

namespace kvlm {

// `name` as cudaDeviceProp::name reports it; memory_clock_khz and bus_width_bits from the device
// attributes (0 if unknown).
DevicePeaks cuda_device_peaks(const std::string& name, int memory_clock_khz, int bus_width_bits);

}  // namespace kvlm
