#!/usr/bin/env bash
# Runs every fuzzer in BUILD/fuzzers: first over its kept regression inputs (tests/fuzz/regressions/<target>,
# each must pass), then for SECONDS seconds from its seed corpus (BUILD/fuzz-corpus/<target>), two at a
# time (CI has 2 cores), with tests/fuzz/dicts/<target>.dict as its dictionary where one exists. Any crash,
# sanitizer report, leak, timeout or out-of-memory fails the run; the failing input is left in
# BUILD/fuzz-findings/<target>/. Prints executions per target.
# Usage: run_fuzzers.sh BUILD SECONDS [TARGET...]
set -euo pipefail
build=${1:?usage: run_fuzzers.sh BUILD SECONDS [TARGET...]}
seconds=${2:?usage: run_fuzzers.sh BUILD SECONDS [TARGET...]}
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
export KVLM_TEST_DATA=${KVLM_TEST_DATA:-$root/../shared/models}
targets=("$@")
if (( ${#targets[@]} == 0 )); then
    for bin in "$build"/fuzzers/fuzz_*; do
        [[ -x $bin && $bin != *.d ]] && targets+=("$(basename "$bin")")  # skip the make dependency files
    done
fi
logs="$build/fuzz-logs" && mkdir -p "$logs"

run_one() {
    local target=$1 seeds=${1#fuzz_}
    local bin="$build/fuzzers/$target" work="$build/fuzz-work/$target" findings="$build/fuzz-findings/$target"
    local log="$logs/$target.log" regressions="$root/tests/fuzz/regressions/$seeds"
    mkdir -p "$work" "$findings"
    # Leak checking is on by default with ASan; 2 GiB RSS and 1 GiB per allocation catch absurd sizes.
    local opts=(-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 -artifact_prefix="$findings/")
    # Syntax the mutator would rarely find byte by byte (Jinja tags, JSON keys kvlm reads).
    local dict="$root/tests/fuzz/dicts/$seeds.dict"
    [[ -f $dict ]] && opts+=(-dict="$dict")
    if [[ -d $regressions ]] && compgen -G "$regressions/*" >/dev/null; then
        if ! "$bin" "${opts[@]}" "$regressions"/* >"$log.regressions" 2>&1; then
            echo "$target: a kept regression input fails again (log: $log.regressions)"; return 1
        fi
    fi
    if ! "$bin" "${opts[@]}" -max_total_time="$seconds" -print_final_stats=1 "$work" \
            "$build/fuzz-corpus/$seeds" >"$log" 2>&1; then
        echo "$target: FINDING after $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?') executions; input in $findings (log: $log)"
        grep -m3 -E 'ERROR|runtime error|SUMMARY' "$log" | sed 's/^/    /'
        return 1
    fi
    local execs
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    echo "$target: $execs executions in ${seconds} s, no findings"
}
export -f run_one
export build seconds root logs
printf '%s\n' "${targets[@]}" | xargs -P 2 -I{} bash -c 'run_one {}'
