#!/usr/bin/env bash
# Builds portable CUDA binaries for a lent GPU machine into .carry/ (git-ignored): kvlm and kvlm_tests for
# x86-64-v3, libstdc++/libgcc linked statically, fmt compiled header-only and pcre2/xxhash/libedit linked from
# their static archives when present, so the binaries need nothing on the device but glibc, the NVIDIA
# driver and (found at run time through LD_LIBRARY_PATH) libcublas.so.13. cudart is always static.
# Also copies the stories260K test model so the GPU tests can run there (KVLM_TEST_DATA=.carry/models).
# Usage: tools/build_for_device.sh   (or: make carry)   -- then see docs/CUDA.md, "Running the GPU tests".
set -euo pipefail
cd "$(dirname "$0")/.."

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
command -v "${NVCC:-nvcc}" >/dev/null || { echo "build_for_device: nvcc not found (needed for the CUDA build)" >&2; exit 1; }

static_or_dynamic() {  # -l flags for a library: its .a between -Bstatic/-Bdynamic when installed, else the .so
    local name=$1 dir
    for dir in /usr/lib/x86_64-linux-gnu /usr/local/lib /usr/lib; do
        if [ -f "$dir/lib$name.a" ]; then echo "-Wl,-Bstatic -l$name -Wl,-Bdynamic"; return; fi
    done
    echo "build_for_device: warning: no static lib$name.a, linking it dynamically" >&2
    echo "-l$name"
}

# libedit (the chat line editor) needs the terminal database and libbsd when linked statically.
LIBS="$(static_or_dynamic pcre2-8) $(static_or_dynamic xxhash) $(static_or_dynamic edit) $(static_or_dynamic tinfo)"
LIBS+=" $(static_or_dynamic bsd) $(static_or_dynamic md) -pthread"
LIBS+=" -L$CUDA_HOME/lib64 -lcudart_static -ldl -lrt -static-libstdc++ -static-libgcc"

make -j"${JOBS:-2}" CUDA=1 BUILD=build/carry BIN=build/carry/kvlm ARCH=x86-64-v3 \
    CXXFLAGS="-O3 -march=x86-64-v3 -g0 -DFMT_HEADER_ONLY" LDLIBS="$LIBS" \
    build/carry/kvlm build/carry/kvlm_tests

mkdir -p .carry/models
cp build/carry/kvlm build/carry/kvlm_tests .carry/
strip .carry/kvlm .carry/kvlm_tests
if [ -d ../shared/models/stories260K ]; then
    rm -rf .carry/models/stories260K .carry/models/tokenizers
    cp -r ../shared/models/stories260K .carry/models/
    # Tokenizers for synthetic benchmark models (kvlm convert --synthetic ... --tokenizer).
    mkdir -p .carry/models/tokenizers
    cp -r ../shared/models/tokenizers/llama3 ../shared/models/tokenizers/smollm2 .carry/models/tokenizers/
fi
echo "build_for_device: dynamic dependencies of .carry/kvlm:"
ldd .carry/kvlm | sed 's/^/  /' || true
du -sh .carry
