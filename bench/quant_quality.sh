#!/usr/bin/env bash
# Quantization quality beside llama.cpp: for each type, the perplexity of SmolLM2-135M-Instruct made by
# llama-quantize (from the default Q4_1 GGUF, as bench/peer_llamacpp.sh makes it) scored by llama-perplexity
# and by `kvlm perplexity` on the same file and on its weights widened to f32 (`convert --dtype f32`: the
# exact arithmetic, which tells whose figure is off when the two engines differ), and of kvlm's own
# `convert --dtype TYPE` from the same source scored by kvlm. Run bench/peer_llamacpp.sh with the same TYPES first (it builds the peer and the files).
#   usage: bench/quant_quality.sh    env: TYPES="q2_k q3_k_m q4_k_m q5_k_m q6_k q5_0 q5_1 iq4_xs" THREADS=<cores>
#          TEXT (default /usr/share/common-licenses/GPL-3) CTX=512 CHUNKS=8 PEER_CACHE KVLM
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
TYPES=${TYPES:-"q2_k q3_k_m q4_k_m q5_k_m q6_k q5_0 q5_1 iq4_xs"}
THREADS=${THREADS:-$(nproc)}
TEXT=${TEXT:-/usr/share/common-licenses/GPL-3}
CTX=${CTX:-512}
CHUNKS=${CHUNKS:-8}
PEER_CACHE=${PEER_CACHE:-$HOME/.cache/kvlm-peer}
BIN="$PEER_CACHE/llama.cpp/build/bin"
WORK="$PEER_CACHE/models"
SOURCE=models/cache/SmolLM2-135M-Instruct.Q4_1.gguf
die() { echo "quant_quality: error: $*" >&2; exit 1; }
[ -x "$BIN/llama-perplexity" ] || die "$BIN/llama-perplexity not found: run bench/peer_llamacpp.sh first"
[ -f "$SOURCE" ] || die "$SOURCE not found: run make models first"

kvlm_ppl() {
    "$KVLM" perplexity -m "$1" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" --json -q |
        python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["ppl"])'
}
llama_ppl() {  # the final estimate llama-perplexity prints: "Final estimate: PPL = 19.1472 +/- ..."
    "$BIN/llama-perplexity" -m "$1" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" 2>&1 |
        sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p'
}

source_f32="$WORK/smollm2-135m-source-f32.kvlm"
[ -f "$source_f32" ] || "$KVLM" convert "$SOURCE" --dtype f32 -o "$source_f32" -q
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
echo "SmolLM2-135M-Instruct from its Q4_1 GGUF, $(basename "$TEXT") -c $CTX --chunks $CHUNKS, $cpu, $THREADS threads, $(date -u +%Y-%m-%d)"
echo
f32_ppl=$(kvlm_ppl "$source_f32")
echo "the source's weights in f32, kvlm: $f32_ppl"
echo
echo "| type | llama-quantize file: llama-perplexity | same file: kvlm | kvlm / llama | same weights in f32: kvlm | kvlm convert --dtype: kvlm | kvlm's file / llama's file (kvlm scoring both) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in $TYPES; do
    gguf="$WORK/smollm2-135m-$t.gguf" kept="$WORK/smollm2-135m-$t.kvlm" ours="$WORK/smollm2-135m-$t-kvlm-quantized.kvlm"
    [ -f "$gguf" ] && [ -f "$kept" ] || die "$gguf or $kept not found: run TYPES=\"$t\" bench/peer_llamacpp.sh first"
    widened="$WORK/smollm2-135m-$t-widened-f32.kvlm"
    "$KVLM" convert "$SOURCE" --dtype "$t" -o "$ours" -q --force
    "$KVLM" convert "$gguf" --dtype f32 -o "$widened" -q --force
    peer=$(llama_ppl "$gguf") same=$(kvlm_ppl "$kept") exact=$(kvlm_ppl "$widened") own=$(kvlm_ppl "$ours")
    rm -f "$widened"
    python3 -c 'import sys; t, p, s, e, o = sys.argv[1], *map(float, sys.argv[2:]); print(f"| {t} | {p:.4f} | {s:.4f} | {s/p:.4f} | {e:.4f} | {o:.4f} | {o/s:.4f} |")' "$t" "$peer" "$same" "$exact" "$own"
done
