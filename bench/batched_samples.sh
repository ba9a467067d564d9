#!/usr/bin/env bash
# Issue 19's batched-samples row: `kvlm run --samples N` (the N samples decoded side by side, one forward per
# step) against the same N samples run one by one (N processes, seeds SEED..SEED+N-1), whole-process wall time,
# for N = 1, 4, 8; aggregate tok/s = N x TOKENS / time. Usage: [KVLM=./kvlm] [MODEL=...] [ROUNDS=2]
# [DEVICE=cpu|cuda] bash bench/batched_samples.sh
set -euo pipefail
KVLM=${KVLM:-./kvlm}
MODEL=${MODEL:-build/test-models/smollm2-q4_1.kvlm}
ROUNDS=${ROUNDS:-2}
DEVICE=${DEVICE:-cpu}
TOKENS=128 SEED=5
PROMPT="Write a long story about a dragon who learns to cook. Chapter 1:"
[ -f "$MODEL" ] || { echo "batched_samples: $MODEL not found (make models, or MODEL=...)" >&2; exit 1; }
seconds() {  # command... -> wall seconds of the whole process
    python3 -c 'import subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(f"{time.perf_counter() - t:.2f}")' "$@"
}
run() { seconds "$KVLM" run -m "$MODEL" --device "$DEVICE" -p "$PROMPT" -n "$TOKENS" --temp 0.7 "$@"; }
echo "| round | N | side by side | one by one | ratio |"
echo "| ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
    for n in 1 4 8; do
        together=$(run --seed "$SEED" --samples "$n")
        apart=0
        for i in $(seq 0 $((n - 1))); do apart=$(python3 -c "print(f'{$apart + $(run --seed $((SEED + i))):.2f}')"); done
        python3 -c "n, a, b = $n, $together, $apart
print(f'| $round | {n} | {a:.2f} s ({n * $TOKENS / a:.1f} tok/s) | {b:.2f} s ({n * $TOKENS / b:.1f} tok/s) | {b / a:.2f} |')"
    done
done
