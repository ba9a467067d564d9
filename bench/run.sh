#!/usr/bin/env bash
# `make bench`: the standard `kvlm bench` set on whatever device `--device auto` picks, as markdown on stdout
# and in build/bench/<date>-<device>.md. Models: stories260K (converted from ../shared), SmolLM2-135M-Instruct
# (make models) in bf16, synthetic Llama-3.2-1B in bf16, and on a GPU synthetic Llama-3-8B in bf16 (16 GB,
# generated once into models/cache/; BENCH_8B=0 skips it). The plan is smaller on a CPU, where the large
# shapes take minutes per repetition. Override with PLAN="-p ... -n ... -r ...".
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
DATA=${KVLM_TEST_DATA:-../shared/models}
CACHE=models/cache
DEVICE=${DEVICE:-auto}
mkdir -p "$CACHE" build/bench

ensure() {  # ensure OUT convert-args...
    local out=$1; shift
    [ -f "$out" ] || "$KVLM" convert "$@" -o "$out" --quiet
}

ensure "$CACHE/stories260K.kvlm" "$DATA/stories260K/stories260K.gguf"
gpu=0
if [ "$DEVICE" != cpu ] && "$KVLM" run -m "$CACHE/stories260K.kvlm" --device cuda -p Hi -n 1 -q >/dev/null 2>&1; then
    gpu=1
fi
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$GGUF" ] && ensure "$CACHE/smollm2-135m-bf16.kvlm" "$GGUF" --dtype bf16
ensure "$CACHE/synthetic-llama-3.2-1b-bf16.kvlm" --synthetic llama-3.2-1b --tokenizer "$DATA/tokenizers/llama3" --dtype bf16
models=("$CACHE/stories260K.kvlm" "$CACHE/smollm2-135m-bf16.kvlm" "$CACHE/synthetic-llama-3.2-1b-bf16.kvlm")
if [ "$gpu" = 1 ] && [ "${BENCH_8B:-1}" = 1 ]; then
    ensure "$CACHE/synthetic-llama-3-8b-bf16.kvlm" --synthetic llama-3-8b --tokenizer "$DATA/tokenizers/llama3" --dtype bf16
    models+=("$CACHE/synthetic-llama-3-8b-bf16.kvlm")
fi

plan_for() {  # plan_for MODEL -> kvlm bench flags
    if [ -n "${PLAN:-}" ]; then echo "$PLAN"; return; fi
    if [ "$gpu" = 1 ]; then
        case "$(basename "$1")" in
            stories260K.kvlm) echo "-p 512,2048 -n 128 -d 0,4096 -r 5" ;;
            *) echo "-p 512,2048 -n 128 -d 0,4096 -r 5 --kv-dtype bf16" ;;  # 16-bit weights: a 16-bit KV cache
        esac
        return
    fi
    case "$(basename "$1")" in
        stories260K.kvlm) echo "-p 512 -n 128 -r 5" ;;
        smollm2-*) echo "-p 128 -n 32 -r 3" ;;
        *) echo "-p 32 -n 8 -r 2 --no-scenarios" ;;
    esac
}

out="build/bench/$(date +%F)-$([ "$gpu" = 1 ] && echo gpu || echo cpu).md"
{
    echo "kvlm bench, $(date +%F), $([ "$gpu" = 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores)"
    for model in "${models[@]}"; do
        [ -f "$model" ] || continue
        # shellcheck disable=SC2046
        echo && echo "### $(basename "$model" .kvlm): kvlm bench $(plan_for "$model")" && echo
        "$KVLM" bench -m "$model" --device "$DEVICE" $(plan_for "$model")
    done
} | tee "$out"
echo "written to $out" >&2
