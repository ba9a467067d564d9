#!/usr/bin/env bash
# Builds the seed corpus of every fuzz target: OUT/<target>/ from tests/fuzz/seeds/<target>.sh, each run
# with OUT_DIR (its folder), DATA (the shared test data: $KVLM_TEST_DATA, default ../shared/models),
# KVLM_BIN and WORK (a scratch folder). Seeds are derived from the real files, often trimmed so that
# libFuzzer's mutations stay fast. Usage: make_corpus.sh OUT
set -euo pipefail
out=${1:?usage: make_corpus.sh OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
export DATA=${KVLM_TEST_DATA:-$root/../shared/models}
export KVLM_BIN=${KVLM_BIN:-$root/kvlm}
[[ -d $DATA ]] || { echo "make_corpus: test data $DATA is missing (set KVLM_TEST_DATA)" >&2; exit 1; }
for script in "$root"/tests/fuzz/seeds/*.sh; do
    target=$(basename "$script" .sh)
    export OUT_DIR="$out/$target" WORK
    WORK=$(mktemp -d)
    rm -rf "$OUT_DIR" && mkdir -p "$OUT_DIR"
    bash "$script" || { echo "make_corpus: $script failed" >&2; rm -rf "$WORK"; exit 1; }
    rm -rf "$WORK"
    n=$(find "$OUT_DIR" -type f | wc -l)
    (( n > 0 )) || { echo "make_corpus: $target has no seeds" >&2; exit 1; }
    echo "fuzz corpus: $target: $n seeds" >&2
done
