#!/usr/bin/env bash
# Probe: --samples and --beams against the KV pool (tests/probe/README.md). Usage: pool_sizing.sh [TRIALS]
# (default 100)
#
# Each trial draws --samples or --beams (1 to 64, or 10^8 with -n), -n (0 to 2^31-1, or none), -c and sometimes --kv-mem.
# Expected: the run completes, or is refused with an error (a pool past what kvlm can address names the flag
# to lower); never an arithmetic error ("n_spare_blocks = -268435451"), a crash or a hang. A completed run
# without --kv-mem never stops a sample with "KV cache full" (the pool is sized for what the samples hold), and
# up to 3 samples each equal the plain run seeded seed + i - 1, as docs/CONSTRAINED.md's --samples promise says.
source "$(dirname "$0")/lib.sh"
probe_begin pool_sizing 100 "${1:-}"

M=$WORK/stories.kvlm
make_stories_model "$M"
pick() { # pick WORD...: one of the words, by RANDOM
    local words=("$@")
    echo "${words[RANDOM % ${#words[@]}]}"
}
# split_samples FILE N: sample i (1-based) of a --samples run's stdout into FILE.i
split_samples() {
    python3 -c 'import sys
text, n = open(sys.argv[1]).read(), int(sys.argv[2])
parts = []
for i in range(2, n + 1):
    head, sep, text = text.partition(f"\n--- sample {i} ---\n")
    parts.append(head)
parts.append(text)
for i, p in enumerate(parts, 1):
    open(f"{sys.argv[1]}.{i}", "w").write(p)' "$1" "$2"
}

for ((trial = 0; trial < TRIALS; trial++)); do
    trial_rng "$trial"
    mode=$(pick samples samples beams)
    # Up to 64 run (1000 side by side to a full context is half a million tokens of work: slow, not wrong); 10^8
    # side by side (with -n) is past what a pool can address, and without -n would run 10^8 samples in turn.
    count_flag=$(pick 1 2 3 3 5 8 64 100000000)
    n=$(pick none 0 1 7 40 100 600 2147483647)
    ctx=$(pick 16 32 64 128 512)
    seed=$((RANDOM + 1))
    args=(run -m "$M" -p "Once upon a time" -c "$ctx" -t "$PROBE_THREADS" --seed "$seed")
    ((count_flag > 64)) && [[ $n == none ]] && n=100
    [[ $n != none ]] && args+=(-n "$n")
    [[ $mode == samples ]] && args+=(--samples "$count_flag" --temp 0.8) || args+=(--beams "$count_flag")
    mem=""
    ((RANDOM % 5 == 0)) && mem=$(pick 64KiB 1MiB 50%) && args+=(--kv-mem "$mem")
    kv "t$trial" "${args[@]}"
    check_generic "$mode $count_flag -n $n -c $ctx" "" || continue
    if grep -aq 'n_spare_blocks\|must not be negative' "$ERRF"; then
        fail_call "pool arithmetic in the error"
        continue
    fi
    if [[ $CLASS == error ]]; then
        count "refused"
        continue
    fi
    [[ $CLASS == ok ]] || continue
    if [[ -z $mem ]] && grep -aq 'KV cache full' "$ERRF"; then
        fail_call "a sample stopped for a full pool the run sized itself"
        continue
    fi
    count "ran"
    if [[ $mode == samples ]] && ((count_flag <= 3 && count_flag > 1)); then
        samples_out=$OUTF
        split_samples "$samples_out" "$count_flag"
        for ((i = 1; i <= count_flag; i++)); do
            solo=()  # the same run without --samples N, seeded seed + i - 1
            for ((k = 0; k < ${#args[@]}; k++)); do
                case ${args[$k]} in
                --samples) k=$((k + 1)) ;;
                --seed) solo+=(--seed "$((seed + i - 1))") && k=$((k + 1)) ;;
                *) solo+=("${args[$k]}") ;;
                esac
            done
            kv "t$trial-solo$i" "${solo[@]}"
            if ! cmp -s "$OUTF" "$samples_out.$i"; then
                fail_call "sample $i differs from the run seeded $((seed + i - 1))"
                break
            fi
        done
        ((i > count_flag)) && count "samples equal their solo runs"
    fi
done
probe_summary
