#!/usr/bin/env bash
# A stand-in for llama.cpp's llama-bench in `make test-gpu-script-emu` (there is no GPU build of llama.cpp
# here): checks that tools/gpu_session.sh's peer stage hands it a GGUF file and the flags it passes on a
# GPU, and answers in llama-bench's JSON (-o json) with made-up rates, one object per test and depth.
set -euo pipefail
model="" p="" n="" d="0" json=0 seen=""
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model=$2; shift ;;
        -p) p=$2; shift ;;
        -n) n=$2; shift ;;
        -d) d=$2; shift ;;
        -o) [ "$2" = json ] && json=1; shift ;;
        -ngl|-fa|-ctk|-ctv|-r) seen="$seen $1"; shift ;;
        *) echo "fake llama-bench: unknown argument $1" >&2; exit 1 ;;
    esac
    shift
done
[ "$(head -c 4 "$model")" = GGUF ] || { echo "fake llama-bench: $model is not a GGUF file" >&2; exit 1; }
for flag in -ngl -fa -ctk -ctv; do
    [[ " $seen " == *" $flag "* ]] || { echo "fake llama-bench: no $flag (given:$seen)" >&2; exit 1; }
done
[ $json = 1 ] && [ -n "$p$n" ] || { echo "fake llama-bench: no -o json, -p or -n" >&2; exit 1; }
rows=()
for depth in ${d//,/ }; do
    [ "$p" != 0 ] && rows+=("{\"n_prompt\": $p, \"n_gen\": 0, \"n_depth\": $depth, \"avg_ts\": 1000.0, \"stddev_ts\": 1.0}")
    [ "$n" != 0 ] && rows+=("{\"n_prompt\": 0, \"n_gen\": $n, \"n_depth\": $depth, \"avg_ts\": 100.0, \"stddev_ts\": 0.5}")
done
(IFS=,; echo "[${rows[*]}]")
