#!/usr/bin/env bash
# Session figures (issue: KV-cache reuse): time to first token of a new turn with the history restored
# from disk vs the same history recomputed, bytes written per turn, restore throughput, and disk bytes for
# two sessions sharing a system prompt vs two independent copies. CPU, through `kvlm run --verbose`.
# Beside it, where a model is given with the GGUF it came from (MODEL.kvlm:MODEL.gguf) and the peer build of
# bench/peer_llamacpp.sh exists: the same next turn through llama.cpp's llama-completion --prompt-cache (the
# history saved by a first run, then read with --prompt-cache-ro), whole process each, and the ratio.
# Usage: bench/sessions.sh [MODEL.kvlm[:MODEL.gguf] ...] (default: stories260K, and SmolLM2-135M-Instruct with
# its GGUF, from models/cache)   env: PEER_CACHE (default ~/.cache/kvlm-peer), KVLM
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
DATA=${KVLM_TEST_DATA:-../shared/models}
CACHE=models/cache
mkdir -p "$CACHE"
[ -f "$CACHE/stories260K.kvlm" ] || "$KVLM" convert "$DATA/stories260K/stories260K.gguf" -o "$CACHE/stories260K.kvlm" -q
PEER_CACHE=${PEER_CACHE:-$HOME/.cache/kvlm-peer}
PEER="$PEER_CACHE/llama.cpp/build/bin/llama-completion"
models=("$@")
[ ${#models[@]} -gt 0 ] ||
    models=("$CACHE/stories260K.kvlm" "$CACHE/smollm2-135m-instruct.kvlm:$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf")
STORE=$(mktemp -d)
trap 'rm -rf "$STORE"' EXIT
seconds() {  # command... -> wall seconds of the whole process
    python3 -c 'import subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(f"{time.perf_counter() - t:.3f}")' "$@"
}
PARAGRAPH="Lily and Ben went to the park to play with a big red ball. They ran and laughed under the warm sun, and their mother watched them from a bench near the pond. "

tokens_of() { "$KVLM" tokenize "$1" "$2" --no-bos | wc -w; }
field() { sed -nE "s#.*$1.*#\\1#p" | head -1; }  # field REGEX-with-one-group < text

echo "| model | history tokens | TTFT restored (s) | TTFT recomputed (s) | speed-up | restore GB/s | written by turn 2 | next turn kvlm --session (s) | next turn llama.cpp --prompt-cache (s) | speed kvlm / llama.cpp |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for spec in "${models[@]}"; do
    model=${spec%%:*} gguf=""
    [ "$spec" = "$model" ] || gguf=${spec#*:}
    [ -f "$model" ] || { echo "skipping $model (missing)" >&2; continue; }
    if [ -n "$gguf" ] && { [ ! -f "$gguf" ] || [ ! -x "$PEER" ]; }; then
        echo "no llama.cpp column for $model ($gguf or $PEER missing: run bench/peer_llamacpp.sh)" >&2
        gguf=""
    fi
    n_ctx=$("$KVLM" inspect "$model" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["n_ctx"])')
    for target in 256 1024 4096; do
        [ $((target + 64)) -le "$n_ctx" ] || continue
        history=""
        while [ "$(tokens_of "$model" "$history")" -lt "$target" ]; do history+="$PARAGRAPH"; done
        n_hist=$(tokens_of "$model" "$history")
        name="h$target-$(basename "$model" .kvlm)"
        "$KVLM" run -m "$model" -c "$n_ctx" --session "$name" --session-dir "$STORE" -p "$history" -n 1 --temp 0 -q >/dev/null
        restored=$("$KVLM" run -m "$model" -c "$n_ctx" --session "$name" --session-dir "$STORE" -p " Then they" -n 4 --temp 0 -v 2>&1 >/dev/null)
        recomputed=$("$KVLM" run -m "$model" -c "$n_ctx" -p "$history Then they" -n 4 --temp 0 -v 2>&1 >/dev/null)
        t_rest=$(echo "$restored" | field 'start to first token ([0-9.]+) s')
        t_reco=$(echo "$recomputed" | field 'start to first token ([0-9.]+) s')
        gbps=$(echo "$restored" | field 'KV\) in [0-9.]+ s \(([0-9.]+) GB/s')
        written=$(echo "$restored" | field 'saved ([0-9]+ new block files \([0-9.]+ MiB\))')
        speedup=$(python3 -c "print(f'{$t_reco/$t_rest:.1f}x')")
        ours="-" peer="-" ratio="-"
        if [ -n "$gguf" ]; then  # whole process, the same next turn, each history saved by its own engine
            printf '%s' "$history" > "$STORE/history.txt"
            printf '%s Then they' "$history" > "$STORE/next.txt"
            "$PEER" -m "$gguf" -f "$STORE/history.txt" -n 1 --temp 0 -c "$n_ctx" -no-cnv \
                --prompt-cache "$STORE/$name.cache" > /dev/null 2>&1
            "$KVLM" run -m "$model" -c "$n_ctx" --session "p$name" --session-dir "$STORE" -p "$history" -n 1 --temp 0 -q \
                > /dev/null
            cp -a "$STORE" "$STORE.copy"
            ours=$(seconds "$KVLM" run -m "$model" -c "$n_ctx" --session "p$name" --session-dir "$STORE.copy" \
                -p " Then they" -n 4 --temp 0)
            rm -rf "$STORE.copy"
            peer=$(seconds "$PEER" -m "$gguf" -f "$STORE/next.txt" -n 4 --temp 0 -c "$n_ctx" -no-cnv \
                --prompt-cache "$STORE/$name.cache" --prompt-cache-ro)
            ratio=$(python3 -c "print(f'{$peer/$ours:.2f}')")
        fi
        echo "| $(basename "$model" .kvlm) | $n_hist | $t_rest | $t_reco | $speedup | $gbps | $written | $ours | $peer | $ratio |"
    done
    # Two sessions sharing a ~1000-token system prompt vs two independent stores.
    system=""
    while [ "$(tokens_of "$model" "$system")" -lt 1000 ]; do system+="$PARAGRAPH"; done
    shared=$(mktemp -d); solo_a=$(mktemp -d); solo_b=$(mktemp -d)
    "$KVLM" run -m "$model" --session a --session-dir "$shared" -p "$system Question one:" -n 8 --temp 0 -q >/dev/null
    "$KVLM" run -m "$model" --session b --session-dir "$shared" -p "$system Question two:" -n 8 --temp 0 -q >/dev/null
    "$KVLM" run -m "$model" --session a --session-dir "$solo_a" -p "$system Question one:" -n 8 --temp 0 -q >/dev/null
    "$KVLM" run -m "$model" --session b --session-dir "$solo_b" -p "$system Question two:" -n 8 --temp 0 -q >/dev/null
    echo "| $(basename "$model" .kvlm) | two sessions, shared 1000-token system prompt: $(du -sk "$shared" | cut -f1) KiB on disk vs $(( $(du -sk "$solo_a" | cut -f1) + $(du -sk "$solo_b" | cut -f1) )) KiB as two independent stores | | | | | | | | |"
    rm -rf "$shared" "$solo_a" "$solo_b"
done
