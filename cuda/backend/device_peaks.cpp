// Datasheet peaks (dense, no sparsity; bf16 with f32 accumulation) of the data-center GPUs kvlm is tuned
// for. Names are matched by substring, most specific first.
#include "backend/device_peaks.h"

#include <fmt/format.h>

namespace kvlm {

namespace {

struct KnownDevice {
    const char* name_part;
    double memory_gb_s;
    double bf16_tflops;
    const char* label;
};

constexpr KnownDevice kKnownDevices[] = {
    {"GH200", 4000, 989.4, "GH200 datasheet"},  // before "H200", which its name contains
    {"H200", 4800, 989.4, "H200 SXM datasheet"},
    {"H100 NVL", 3900, 835.5, "H100 NVL datasheet"},
    {"H100 PCIe", 2000, 756.5, "H100 PCIe datasheet"},
    {"H100", 3350, 989.4, "H100 SXM5 datasheet"},
    {"A100-SXM4-80GB", 2039, 312, "A100 SXM 80GB datasheet"},
    {"A100 80GB PCIe", 1935, 312, "A100 PCIe 80GB datasheet"},
    {"A100", 1555, 312, "A100 40GB datasheet"},
    {"L40S", 864, 362, "L40S datasheet"},
    {"RTX 4090", 1008, 165, "RTX 4090 datasheet (f32 accumulate)"},
};

}  // namespace

DevicePeaks cuda_device_peaks(const std::string& name, int memory_clock_khz, int bus_width_bits) {
    for (const KnownDevice& device : kKnownDevices)
        if (name.find(device.name_part) != std::string::npos)
            return {device.memory_gb_s, device.bf16_tflops, device.label};
    DevicePeaks peaks;
    if (memory_clock_khz > 0 && bus_width_bits > 0) {
        // Double data rate: two transfers per clock.
        peaks.memory_gb_s = 2.0 * double(memory_clock_khz) * 1e3 * double(bus_width_bits) / 8.0 / 1e9;
        peaks.source = fmt::format("{} kHz memory clock x {}-bit bus (bf16 peak unknown)", memory_clock_khz, bus_width_bits);
    }
    return peaks;
}

}  // namespace kvlm
