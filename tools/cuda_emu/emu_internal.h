// What the emulator's parts (emu.cpp: scheduler and kernels; runtime.cpp: memory, streams, events and
// graphs; cublas.cpp: GEMMs) share; not seen by the code under test.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace kvlm_emu {

// ---- emu.cpp
// The shared-memory limits of the emulated device (KVLM_CUDA_EMU_SMEM_OPTIN).
int default_smem_per_block();
int smem_optin();
// cudaLaunchKernel's configuration checks; false (and the sticky launch error set) when it would fail.
bool check_launch(const void* kernel, const LaunchConfig& cfg);
// Reports faults in kernels and host accesses to device memory with what was hit (describe_address).
void install_segv_handler();

// ---- runtime.cpp
// Work on a stream: run in stream order when the host synchronises with it (or at once for a capturing
// stream's replay). Inside an operation, device memory is accessible to the host thread.
using Operation = std::function<void()>;
// Queues op on stream (nullptr: the legacy default stream), or records it when the stream is capturing.
// Returns cudaErrorInvalidResourceHandle for a destroyed or unknown stream.
cudaError_t submit(cudaStream_t stream, Operation op);
// "device allocation of N bytes at P (+offset)", "pinned host buffer ...", or "" for other addresses: for
// the fault handler's message.
std::string describe_address(const void* p);
// A programmatic launch's block before its dependency wait: device allocations unmapped, those declared
// immutable read-only; open_device_memory maps them all read-write again (as during any stream work).
void close_device_memory_before_dependency();
void open_device_memory();
// Dies unless [p, p + bytes) lies inside one device allocation (what: the API call and operand).
void check_device_range(const void* p, size_t bytes, const char* what);

}  // namespace kvlm_emu
