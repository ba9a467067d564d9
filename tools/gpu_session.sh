#!/usr/bin/env bash
# What to run on a lent GPU machine (the `run` tool), in stages that each fit its 10-minute command limit.
# Build here first: `make carry` (binaries + test data in .carry/), then on the device, carrying .carry:
#   bash tools/gpu_session.sh tests   # CUDA parity tests, the whole suite, compute-sanitizer on the kernels
#   bash tools/gpu_session.sh bench   # kvlm bench: stories260K and synthetic SmolLM2-135M, Llama-3.2-1B, Llama-3-8B
#   bash tools/gpu_session.sh hf      # the same synthetic weights through PyTorch/transformers (side by side)
#   bash tools/gpu_session.sh all     # the three in order (only when the whole fits one command)
# Logs and tables go to $OUT (they come back with the tool's reply); converted models stay in
# $KVLM_GPU_MODELS (default /tmp/kvlm-models) while the machine is warm, so later stages reuse them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-session}
MODELS=${KVLM_GPU_MODELS:-/tmp/kvlm-models}
CARRY=${CARRY:-.carry}
KVLM=$PWD/$CARRY/kvlm
DATA=$PWD/$CARRY/models
mkdir -p "$OUT" "$MODELS"

find_cublas() {  # the directory holding libcublas.so.13 (the GPU image ships it inside PyTorch's wheels)
    local dir
    dir=$(python3 -c "import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + '/lib')" 2>/dev/null)
    if [ -n "$dir" ] && ls "$dir"/libcublas.so.13* >/dev/null 2>&1; then echo "$dir"; return; fi
    dir=$(find / -name 'libcublas.so.13*' -not -path '*/proc/*' 2>/dev/null | head -1)
    [ -n "$dir" ] && dirname "$dir"
}
CUBLAS_DIR=$(find_cublas)
[ -n "$CUBLAS_DIR" ] && export LD_LIBRARY_PATH="$CUBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVLM_BIN=$KVLM KVLM_TEST_DATA=$DATA

header() {
    echo "== $1: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "   cublas: ${CUBLAS_DIR:-not found}"
}

model() {  # model NAME convert-args... -> path of the converted model (converted once per machine)
    local name=$1; shift
    [ -f "$MODELS/$name.kvlm" ] || "$KVLM" convert "$@" -o "$MODELS/$name.kvlm" --quiet >&2 || return 1
    echo "$MODELS/$name.kvlm"
}

synthetic() {  # synthetic SHAPE TOKENIZER
    model "synthetic-$1-bf16" --synthetic "$1" --tokenizer "$DATA/tokenizers/$2" --dtype bf16
}

stage_tests() {
    header tests
    "$CARRY/kvlm_tests" -tc='cuda*' 2>&1 | tee "$OUT/tests-cuda.log"
    # Everything (the smollm2 cases skip: its GGUF does not travel).
    "$CARRY/kvlm_tests" 2>&1 | tail -40 | tee "$OUT/tests-all.log"
    if command -v compute-sanitizer >/dev/null; then
        timeout 240 compute-sanitizer --error-exitcode 9 "$CARRY/kvlm_tests" -tc='cuda kernels*' 2>&1 | tail -30 |
            tee "$OUT/tests-sanitizer.log"
    fi
}

stage_bench() {
    header bench
    local stories l1b smol l8b
    stories=$(model stories260K "$DATA/stories260K/stories260K.gguf")
    smol=$(synthetic smollm2-135m smollm2)
    l1b=$(synthetic llama-3.2-1b llama3)
    l8b=$(synthetic llama-3-8b llama3)
    {
        echo "kvlm bench, $(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
        # bf16 weights with a bf16 KV cache (what a GPU user runs; prefill attention on tensor cores).
        local plan="-p 512,2048 -n 128 -d 0,4096 -r 5 --kv-dtype bf16"
        for m in "$smol" "$l1b" "$l8b"; do
            [ -n "$m" ] || continue
            echo && echo "### $(basename "$m" .kvlm): kvlm bench $plan" && echo
            "$KVLM" bench -m "$m" --device cuda $plan
        done
        echo && echo "### stories260K (f32): kvlm bench -p 512 -n 128 -r 5" && echo
        "$KVLM" bench -m "$stories" --device cuda -p 512 -n 128 -r 5
        echo && echo "### f32 KV cache (flash-decoding prefill attention), Llama-3.2-1B shape" && echo
        "$KVLM" bench -m "$l1b" --device cuda -p 512,2048 -n 128 -r 5 --kv-dtype f32 --no-scenarios
        echo && echo "### decode with CUDA graphs off (KVLM_CUDA_GRAPHS=0), SmolLM2-135M shape" && echo
        KVLM_CUDA_GRAPHS=0 "$KVLM" bench -m "$smol" --device cuda -p 0 -n 128 -r 5 --kv-dtype bf16 --no-scenarios
    } 2>&1 | tee "$OUT/bench.md"
}

stage_hf() {
    header hf
    {
        for shape in smollm2-135m:smollm2 llama-3.2-1b:llama3 llama-3-8b:llama3; do
            local m dir
            m=$(synthetic "${shape%%:*}" "${shape##*:}") || continue
            dir="$MODELS/$(basename "$m" .kvlm)-hf"
            [ -f "$dir/config.json" ] || python3 bench/export_hf.py "$m" "$dir"
            echo "### $(basename "$m" .kvlm) through transformers"
            PYTHONUNBUFFERED=1 python3 bench/transformers_bench.py "$dir" -p 2048 -n 128 -r 3
            PYTHONUNBUFFERED=1 python3 bench/transformers_bench.py "$dir" -p 0 -n 128 -r 3 --static-cache
        done
    } 2>&1 | tee "$OUT/hf.md"
}

case "${1:-}" in
tests) stage_tests ;;
bench) stage_bench ;;
hf) stage_hf ;;
all) stage_tests; stage_bench; stage_hf ;;
*) echo "usage: $0 tests|bench|hf|all" >&2; exit 2 ;;
esac
