#!/usr/bin/env bash
# Builds the peer, llama.cpp as vendored in llama-cpp-python==0.3.36, with CUDA for a lent H100/H200 into
# .carry-peer/ (git-ignored), so that tools/gpu_session.sh's `peer` stage runs llama-bench beside kvlm bench
# on the same GPU and the same weights (bench/export_gguf.py). Nothing is built on the device: its minutes
# are few, and ggml-cuda takes about an hour on the development VM's 2 cores (start it at once when a GPU is lent,
# while the kvlm stages run).
#   - sm_90 only (H100/H200: the machines lent), the CPU part for AVX2/FMA/F16C (the device's CPU is unknown),
#     no OpenMP (libgomp may be missing there), libstdc++/libgcc static; cuBLAS and cudart stay dynamic and are
#     found through LD_LIBRARY_PATH, as kvlm's cuBLAS is (tools/gpu_session.sh, find_cublas).
#   - The source comes from PEER_CACHE (bench/peer_llamacpp.sh's, default ~/.cache/kvlm-peer) when it is
#     there, else from the sdist through pip.
# Usage: tools/build_peer_for_device.sh   (or: make carry-peer)   env: JOBS (default: the cores)
set -euo pipefail
cd "$(dirname "$0")/.."

source bench/peer_source.sh
PEER_CACHE=${PEER_CACHE:-$HOME/.cache/kvlm-peer}
SOURCE="$PEER_CACHE/llama.cpp"
BUILD="$PEER_CACHE/build-cuda"
say() { echo "build_peer_for_device: $*" >&2; }

command -v cmake >/dev/null || { say "cmake is required (apt-get install cmake)"; exit 1; }
command -v "${NVCC:-nvcc}" >/dev/null || { say "nvcc not found (needed for llama.cpp's CUDA build)"; exit 1; }
peer_source "$SOURCE"

say "configuring (CUDA sm_90, AVX2 CPU part, static libstdc++)"
cmake -S "$SOURCE" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_OPENMP=OFF \
    -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >&2
say "building llama-bench (every ggml-cuda kernel: long; progress below)"
start=$(date +%s)
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target llama-bench >&2
say "built in $(( ($(date +%s) - start) / 60 )) min"

# xz-compressed (49 MB -> 22 MB): what a run call carries, with the working tree, must stay under 64 MiB, and
# the peer call carries .carry/kvlm, .carry/models/tokenizers and .carry-peer (docs/CUDA.md). The peer stage
# unpacks it on the device with Python's lzma.
rm -rf .carry-peer && mkdir -p .carry-peer
cp "$BUILD/bin/llama-bench" "$BUILD/llama-bench.stripped"
strip "$BUILD/llama-bench.stripped"
say "dynamic dependencies of llama-bench:"
ldd "$BUILD/llama-bench.stripped" | sed 's/^/  /' >&2 || true
xz -T0 -6 -c "$BUILD/llama-bench.stripped" > .carry-peer/llama-bench.xz
echo "$PEER_SDIST_SPEC, CUDA sm_90, built $(date -u +%FT%TZ) with $(${NVCC:-nvcc} --version | tail -1)" > .carry-peer/VERSION
du -sh .carry-peer >&2
