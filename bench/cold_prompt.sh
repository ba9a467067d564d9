#!/usr/bin/env bash
# A cold long prompt, whole process, kvlm beside llama.cpp: process start to exit for a ~1709-token prompt
# (the start of /usr/share/common-licenses/GPL-3) and one generated token, greedy, same threads, same model
# type, interleaved A B A B, median of REPS. Then the next turn after that prompt as a saved history
# (issue 17): llama-completion --prompt-cache (read-only after the first run) against kvlm run --session
# (restored from a fresh copy of the store each time, and saved again), the history plus " Thanks.", 4
# tokens, whole process; and each one's bytes on disk for the history, for each KV type of KV_TYPES in both
# engines (llama.cpp: -ctk/-ctv, with flash attention on, which its quantized V cache needs). Uses the peer
# build and models of bench/peer_llamacpp.sh (run that first). Not part of `make test` or CI.
#   usage: bench/cold_prompt.sh     env: TYPES="f16 q4_1" KV_TYPES="f16 q8_0" REPS=3 THREADS=<cores> TOKENS=1709
#                                        PEER_CACHE KVLM PEER_CPU (avx2: as bench/peer_llamacpp.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
TYPES=${TYPES:-"f16 q4_1"}
KV_TYPES=${KV_TYPES:-"f16 q8_0"}
REPS=${REPS:-3}
THREADS=${THREADS:-$(nproc)}
TOKENS=${TOKENS:-1709}
PEER_CPU=${PEER_CPU:-native}
case "$PEER_CPU" in
    native) PEER_CACHE=${PEER_CACHE:-$HOME/.cache/kvlm-peer} ;;
    avx2) PEER_CACHE=${PEER_CACHE:-$HOME/.cache/kvlm-peer}-avx2; export KVLM_CPU_PATH=avx2 ;;
    *) echo "cold_prompt: error: PEER_CPU must be native or avx2" >&2; exit 1 ;;
esac
BIN="$PEER_CACHE/llama.cpp/build/bin"
WORK="${PEER_CACHE%-avx2}/models"
TEXT=/usr/share/common-licenses/GPL-3

die() { echo "cold_prompt: error: $*" >&2; exit 1; }
[ -x "$BIN/llama-completion" ] || die "llama-completion not built: run bench/peer_llamacpp.sh first"
[ -f "$TEXT" ] || die "$TEXT not found (Debian's base-files)"

# The prompt: the longest prefix of whole lines of the text with at most TOKENS tokens (kvlm's tokenizer; the
# same GGUF vocabulary in both engines). Both engines add BOS.
prompt=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "$prompt" "$work"' EXIT
first_model="$WORK/smollm2-135m-$(echo "$TYPES" | awk '{print $1}').kvlm"
[ -f "$first_model" ] || die "$first_model not found: run bench/peer_llamacpp.sh first"
python3 - "$KVLM" "$first_model" "$TEXT" "$TOKENS" "$prompt" <<'EOF'
import subprocess, sys
kvlm, model, text_path, limit, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
lines = open(text_path, encoding="utf-8").read().splitlines(keepends=True)
def count(text):
    r = subprocess.run([kvlm, "tokenize", model], input=text, capture_output=True, text=True, check=True)
    return len(r.stdout.split())
lo, hi = 0, len(lines)
while lo < hi:  # the most lines whose text stays within the limit
    mid = (lo + hi + 1) // 2
    if count("".join(lines[:mid])) <= limit: lo = mid
    else: hi = mid - 1
open(out, "w", encoding="utf-8").write("".join(lines[:lo]))
print(f"cold_prompt: prompt of {count(''.join(lines[:lo]))} tokens ({lo} lines of {text_path})", file=sys.stderr)
EOF

seconds() {  # command... -> wall seconds of the whole process
    python3 -c 'import subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(f"{time.perf_counter() - t:.3f}")' "$@"
}
median() { python3 -c 'import statistics, sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.2f}")' "$@"; }

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
echo "cold prompt, whole process (start to exit, 1 generated token, greedy), $cpu, $THREADS threads, median of $REPS interleaved, $(date -u +%Y-%m-%d)"
echo
echo "| type | llama.cpp s | kvlm s | speed kvlm / llama.cpp |"
echo "| --- | ---: | ---: | ---: |"
for t in $TYPES; do
    peer=() ours=()
    for _ in $(seq "$REPS"); do
        peer+=("$(seconds "$BIN/llama-completion" -m "$WORK/smollm2-135m-$t.gguf" -f "$prompt" -n 1 --temp 0 \
            -t "$THREADS" -c 4096 -no-cnv)")
        ours+=("$(seconds "$KVLM" run -m "$WORK/smollm2-135m-$t.kvlm" -n 1 --temp 0 -t "$THREADS" -c 4096 < "$prompt")")
    done
    p=$(median "${peer[@]}") o=$(median "${ours[@]}")
    echo "| $t | $p | $o | $(python3 -c "print(f'{$p / $o:.2f}')") |"
done

echo
echo "next turn after that history (\" Thanks.\", 4 tokens, greedy), whole process, median of $REPS interleaved"
echo
# Sizes: llama.cpp saves its cache before the prompt's last token (its log: "saved session before last token";
# "prompt eval ... / N tokens" counts the tokens whose K/V it holds) and evaluates that token again in the next
# turn; kvlm's store holds the K/V of every history token (`session show`: "(N with K/V ...)"). So the files
# hold K/V of different token counts, and the last column compares bytes per token of K/V.
echo "| type | KV | llama.cpp --prompt-cache s | kvlm --session s | speed kvlm / llama.cpp | llama.cpp cache bytes (K/V tokens) | kvlm store file bytes (K/V tokens) | bytes per K/V token kvlm / llama.cpp |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
next="$work/next.txt"
{ cat "$prompt"; printf ' Thanks.'; } > "$next"
for t in $TYPES; do
    for kv in $KV_TYPES; do
        cache="$work/$t-$kv.cache" store="$work/$t-$kv.store"
        peer_kv=(-ctk "$kv" -ctv "$kv" -fa on)
        "$BIN/llama-completion" -m "$WORK/smollm2-135m-$t.gguf" -f "$prompt" -n 1 --temp 0 -t "$THREADS" -c 4096 \
            -no-cnv "${peer_kv[@]}" --prompt-cache "$cache" > /dev/null 2> "$work/peer.log"
        peer_kv_tokens=$(sed -n 's|.*prompt eval time.*/ *\([0-9][0-9]*\) tokens.*|\1|p' "$work/peer.log" | head -n 1)
        [ -n "$peer_kv_tokens" ] || die "no 'prompt eval ... tokens' line in llama-completion's log"
        "$KVLM" run -m "$WORK/smollm2-135m-$t.kvlm" -n 1 --temp 0 -t "$THREADS" -c 4096 --kv-dtype "$kv" \
            --session s --session-dir "$store" < "$prompt" > /dev/null 2>&1
        peer=() ours=()
        for _ in $(seq "$REPS"); do
            peer+=("$(seconds "$BIN/llama-completion" -m "$WORK/smollm2-135m-$t.gguf" -f "$next" -n 4 --temp 0 \
                -t "$THREADS" -c 4096 -no-cnv "${peer_kv[@]}" --prompt-cache "$cache" --prompt-cache-ro)")
            rm -rf "$work/copy" && cp -a "$store" "$work/copy"
            ours+=("$(seconds "$KVLM" run -m "$WORK/smollm2-135m-$t.kvlm" -p " Thanks." -n 4 --temp 0 \
                -t "$THREADS" -c 4096 --session s --session-dir "$work/copy")")
        done
        p=$(median "${peer[@]}") o=$(median "${ours[@]}")
        our_kv_tokens=$("$KVLM" session show s --session-dir "$store" | sed -n 's|^tokens:.*(\([0-9][0-9]*\) with K/V.*|\1|p')
        peer_bytes=$(stat -c %s "$cache") our_bytes=$(find "$store" -type f -printf "%s\n" | awk '{s += $1} END {print s}')
        per_token=$(python3 -c "print(f'{($our_bytes / $our_kv_tokens) / ($peer_bytes / $peer_kv_tokens):.4f}')")
        echo "| $t | $kv | $p | $o | $(python3 -c "print(f'{$p / $o:.2f}')") | $peer_bytes ($peer_kv_tokens) | $our_bytes ($our_kv_tokens) | $per_token |"
    done
done
