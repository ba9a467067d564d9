#!/usr/bin/env bash
# `make bench-peer`: kvlm beside its peer, llama.cpp as vendored in the PyPI sdist llama-cpp-python==0.3.36,
# on this machine, in one run. Builds llama-bench, llama-perplexity, llama-quantize and llama-completion once
# (cmake Release, GGML_NATIVE=ON but AMX, see below; about 7 minutes on 2 cores) into a cache outside git, makes a GGUF of each
# type from the default model (SmolLM2-135M-Instruct Q4_1, `make models`) with llama-quantize, converts each
# to .kvlm (quantized blocks copied as they are), then runs `llama-bench` and `kvlm bench` interleaved
# (A B A B ..., one repetition each, same threads) for pp512 and tg128, and prints one markdown table with
# both means and the ratio. Not part of `make test` or CI.
#   usage: bench/peer_llamacpp.sh     env: TYPES="bf16 f16 q8_0 q4_0 q4_1" REPS=3 THREADS=<cores> PP=512 TG=128
#          PEER_CACHE (default ~/.cache/kvlm-peer), KVLM (default ./kvlm)
#          TYPES may also hold llama-quantize's k-quant and other mixes: q2_k q3_k_m q4_k_m q5_k_m q6_k q5_0
#          q5_1 iq4_nl iq4_xs (each GGUF tensor kept in its type by kvlm convert)
#          MODEL=llama-3.2-1b: kvlm's synthetic Llama-3.2-1B shape (random weights, the Llama 3 tokenizer from
#          $KVLM_TEST_DATA, bf16 exported by bench/export_gguf.py, then each type by llama-quantize) instead of
#          SmolLM2: a model larger than the caches, as real ones are
#          PEER_CPU=avx2: both engines as on an AVX2-only machine (llama.cpp built with AVX2/FMA/F16C/BMI2 and
#          no AVX-512 into $PEER_CACHE-avx2, kvlm with KVLM_CPU_PATH=avx2), to measure that path on this one
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
TYPES=${TYPES:-"bf16 f16 q8_0 q4_0 q4_1"}
REPS=${REPS:-3}
THREADS=${THREADS:-$(nproc)}
PP=${PP:-512}
TG=${TG:-128}
PEER_CPU=${PEER_CPU:-native}
case "$PEER_CPU" in
    native) PEER_CACHE=${PEER_CACHE:-$HOME/.cache/kvlm-peer} ;;
    avx2) PEER_CACHE=${PEER_CACHE:-$HOME/.cache/kvlm-peer}-avx2; export KVLM_CPU_PATH=avx2 ;;
    *) echo "peer: error: PEER_CPU must be native or avx2" >&2; exit 1 ;;
esac
MODEL=${MODEL:-smollm2}
source bench/peer_source.sh
WORK="${PEER_CACHE%-avx2}/models"  # the same models whatever the CPU flags
case "$MODEL" in
    smollm2) SOURCE_GGUF=models/cache/SmolLM2-135M-Instruct.Q4_1.gguf; PREFIX=smollm2-135m ;;
    llama-3.2-1b) SOURCE_GGUF="$WORK/llama-3.2-1b-bf16.gguf"; PREFIX=llama-3.2-1b ;;
    *) echo "peer: error: MODEL must be smollm2 or llama-3.2-1b" >&2; exit 1 ;;
esac

say() { echo "peer: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ -x "$KVLM" ] || die "$KVLM not found: run make first"
command -v cmake >/dev/null || die "cmake is required (apt-get install cmake)"
mkdir -p "$PEER_CACHE" "$WORK"
if [ "$MODEL" = llama-3.2-1b ] && [ ! -f "$SOURCE_GGUF" ]; then
    tokenizer="${KVLM_TEST_DATA:-../shared/models}/tokenizers/llama3"
    [ -d "$tokenizer" ] || die "$tokenizer not found: set KVLM_TEST_DATA"
    say "making the synthetic Llama-3.2-1B shape in bf16 (2.5 GB) and its GGUF"
    "$KVLM" convert --synthetic llama-3.2-1b --tokenizer "$tokenizer" --dtype bf16 -o "$WORK/$PREFIX-bf16.kvlm" --quiet
    python3 bench/export_gguf.py "$WORK/$PREFIX-bf16.kvlm" "$SOURCE_GGUF"
fi
[ -f "$SOURCE_GGUF" ] || die "$SOURCE_GGUF not found: run make models first"

# llama.cpp's CPU flags: GGML_NATIVE=ON, except where the CPU lists AMX: -march=native then compiles ggml's
# AMX kernels, and a VM that lists AMX without letting processes use its tile state kills llama-bench with
# SIGILL (tilezero) on the first Q8_0 matmul. There, every other feature the CPU lists, explicitly.
has_flag() { grep -m1 '^flags' /proc/cpuinfo | grep -qw "$1"; }
peer_arch_flags() {
    if [ "$PEER_CPU" = avx2 ]; then
        echo "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
        return
    fi
    if ! has_flag amx_tile; then echo "-DGGML_NATIVE=ON"; return; fi
    local f="-DGGML_NATIVE=OFF"
    for pair in avx:GGML_AVX avx2:GGML_AVX2 fma:GGML_FMA f16c:GGML_F16C bmi2:GGML_BMI2 avx_vnni:GGML_AVX_VNNI \
                avx512f:GGML_AVX512 avx512vbmi:GGML_AVX512_VBMI avx512_vnni:GGML_AVX512_VNNI \
                avx512_bf16:GGML_AVX512_BF16; do
        has_flag "${pair%%:*}" && f="$f -D${pair#*:}=ON"
    done
    echo "$f"
}
peer_arch_text() {
    if [ "$PEER_CPU" = avx2 ]; then echo "both engines AVX2 only: llama.cpp AVX2/FMA/F16C/BMI2, kvlm's avx2 path"
    elif has_flag amx_tile; then echo "the CPU's features but AMX"
    else echo "GGML_NATIVE=ON"; fi
}

# 1. llama.cpp's source from the sdist, built once.
LLAMA="$PEER_CACHE/llama.cpp"
BIN="$LLAMA/build/bin"
if [ ! -x "$BIN/llama-bench" ] || [ ! -x "$BIN/llama-quantize" ] || [ ! -x "$BIN/llama-perplexity" ]; then
    peer_source "$LLAMA" || exit 1
    say "building llama.cpp (cmake Release, $(peer_arch_text))"
    cmake -S "$LLAMA" -B "$LLAMA/build" -DCMAKE_BUILD_TYPE=Release $(peer_arch_flags) -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >&2
    cmake --build "$LLAMA/build" -j "$(nproc)" --target llama-bench llama-quantize llama-perplexity llama-completion >&2
fi

# 2. One GGUF per type from the default model, and its .kvlm.
declare -A GGML_NAME=([bf16]=BF16 [f16]=F16 [q8_0]=Q8_0 [q4_0]=Q4_0 [q4_1]=Q4_1 [q2_k]=Q2_K [q3_k_m]=Q3_K_M
                      [q4_k_m]=Q4_K_M [q5_k_m]=Q5_K_M [q6_k]=Q6_K [q5_0]=Q5_0 [q5_1]=Q5_1 [iq4_nl]=IQ4_NL
                      [iq4_xs]=IQ4_XS)
for t in $TYPES; do
    [ -n "${GGML_NAME[$t]:-}" ] || die "unknown type $t (expected one of: ${!GGML_NAME[*]})"
    gguf="$WORK/$PREFIX-$t.gguf"
    if [ ! -f "$gguf" ]; then
        if [ "$SOURCE_GGUF" != "${SOURCE_GGUF%.Q4_1.gguf}" ] && [ "$t" = q4_1 ]; then
            cp "$SOURCE_GGUF" "$gguf"
        else  # SmolLM2: from the Q4_1 model's values (the only source this project ships); 1B: from bf16
            "$BIN/llama-quantize" --allow-requantize "$SOURCE_GGUF" "$gguf" "${GGML_NAME[$t]}" >/dev/null 2>&1 \
                || die "llama-quantize to ${GGML_NAME[$t]} failed"
        fi
    fi
    [ -f "$WORK/$PREFIX-$t.kvlm" ] || "$KVLM" convert "$gguf" -o "$WORK/$PREFIX-$t.kvlm" --quiet
done

# 3. Interleaved runs: one repetition of each engine at a time, REPS times.
peer_tps() {  # gguf test(pp|tg) n -> tokens/s
    local args=(-p 0 -n 0)
    [ "$2" = pp ] && args=(-p "$3" -n 0) || args=(-p 0 -n "$3")
    "$BIN/llama-bench" -m "$1" "${args[@]}" -t "$THREADS" -r 1 -o json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
kvlm_tps() {
    local args
    [ "$2" = pp ] && args=(-p "$3" -n 0) || args=(-p 0 -n "$3")
    "$KVLM" bench -m "$1" "${args[@]}" -t "$THREADS" -r 1 --no-scenarios -o json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["tokens_per_second"]["mean"])'
}
stats() {  # values... -> "mean ± sd"
    python3 -c 'import statistics as s, sys; v=[float(x) for x in sys.argv[1:]]; print(f"{s.mean(v):.1f} ± {s.stdev(v) if len(v) > 1 else 0:.1f}")' "$@"
}

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
echo "kvlm vs llama.cpp ($PEER_SDIST_SPEC, $(peer_arch_text)), $PREFIX, $cpu, $THREADS threads, $REPS interleaved repetitions, $(date -u +%Y-%m-%d)"
echo
echo "| type | test | llama.cpp t/s | kvlm t/s | kvlm / llama.cpp |"
echo "| --- | --- | ---: | ---: | ---: |"
for t in $TYPES; do
    for test in "pp $PP" "tg $TG"; do
        set -- $test
        peer=() ours=()
        for _ in $(seq "$REPS"); do
            peer+=("$(peer_tps "$WORK/$PREFIX-$t.gguf" "$1" "$2")")
            ours+=("$(kvlm_tps "$WORK/$PREFIX-$t.kvlm" "$1" "$2")")
        done
        ratio=$(python3 -c 'import statistics as s, sys; n=len(sys.argv)//2; a=[float(x) for x in sys.argv[1:n+1]]; b=[float(x) for x in sys.argv[n+1:]]; print(f"{s.mean(b)/s.mean(a):.2f}")' "${peer[@]}" "${ours[@]}")
        echo "| $t | $1$2 | $(stats "${peer[@]}") | $(stats "${ours[@]}") | $ratio |"
    done
done
