// The process-wide switch for programmatic dependent launches (programmatic_launch.cuh): on by default;
// CudaBackend sets it from CudaSettings::programmatic_launches (KVLM_CUDA_PDL=0 turns it off), the
// A/B switch and the way out should a device misbehave with it.
#pragma once

namespace kvlm {

void set_programmatic_launches(bool on);
bool programmatic_launches();
// programmatic_launches() on a device that has them (compute capability 9.0+): what the device line reports.
bool programmatic_launches_on_device();

// The device allocation at p is never written by kernels (weights, the RoPE table): what a programmatic
// launch may read before its wait. Nothing on a GPU; the emulator keeps it readable there and unmaps the rest.
void declare_immutable(const void* device_allocation);

}  // namespace kvlm
