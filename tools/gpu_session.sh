#!/usr/bin/env bash
# What to run on a lent GPU machine (the `run` tool), in stages that each end well inside its 10-minute
# command limit: every step under `timeout`, every log written into $OUT as it runs, and a one-line verdict
# at the end of each stage ("VERDICT smoke: PASS | ..."), so the reply's output tail always carries it.
# Build here first: `make carry` (binaries + test data in .carry/), then on the device, carrying .carry:
#   bash tools/gpu_session.sh smoke    # ~1 min: the GPU, cuBLAS, stories260K text GPU == CPU (graphs on, off), kernel cases
#   bash tools/gpu_session.sh tests    # ~1 min: backend, model and CLI cases; compute-sanitizer memcheck, racecheck, synccheck
#   bash tools/gpu_session.sh bench    # ~2 min: kvlm bench, SmolLM2-135M and Llama-3.2-1B shapes; decode profile per stage and, with ncu, per kernel
#   bash tools/gpu_session.sh bench8b  # ~2 min: kvlm bench, Llama-3-8B shape, its profile and ncu tables
#   bash tools/gpu_session.sh hf       # ~2 min a shape: the same synthetic weights through PyTorch/transformers
#   bash tools/gpu_session.sh cpu      # ~3 min: CPU decode and prefill from 1 to all cores (the dev VMs have 2)
#   bash tools/gpu_session.sh peer     # llama.cpp's llama-bench beside kvlm bench, same GPU, same weights (carry .carry-peer too)
#   bash tools/gpu_session.sh peer8b   # the same for the Llama-3-8B shape in bf16
#   bash tools/gpu_session.sh peerquant # the same for the k-quant mixes (issue 47): 1B q4_k_m/q5_k_m/q6_k, SmolLM2 q4_k_m
#   bash tools/gpu_session.sh tune     # ~6 min: attention's and the GEMVs' launch rules and the persistent decode kernel swept (1B bf16/q4_0, SmolLM2; 8B GEMVs)
# Times are session 15's on an H200 (bench/RESULTS.md, "GPU"); docs/CUDA.md says what to do with each verdict.
# Converted models stay in $KVLM_GPU_MODELS (default /tmp/kvlm-models) while the machine is warm.
# `make test-gpu-script-emu` runs the smoke and tests stages over the CPU emulator (KVLM_CUDA_EMU=1, with
# KVLM_GPU_KVLM / KVLM_GPU_TESTS / KVLM_GPU_DATA pointing at its build and the shared data, and fewer cases
# through KVLM_GPU_KERNEL_CASES / KVLM_GPU_TEST_CASES), so the script is known to work before a GPU sees it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-session}
MODELS=${KVLM_GPU_MODELS:-/tmp/kvlm-models}
CARRY=${CARRY:-.carry}
KVLM=$(realpath -m "${KVLM_GPU_KVLM:-$CARRY/kvlm}")
TESTS=$(realpath -m "${KVLM_GPU_TESTS:-$CARRY/kvlm_tests}")
DATA=$(realpath -m "${KVLM_GPU_DATA:-$CARRY/models}")
KERNEL_CASES=${KVLM_GPU_KERNEL_CASES:-cuda kernels*,cuda device peaks*}
TEST_CASES=${KVLM_GPU_TEST_CASES:-cuda backend*,cuda models*,cuda cli*}
mkdir -p "$OUT" "$MODELS"
export KVLM_BIN=$KVLM KVLM_TEST_DATA=$DATA

FAILS=()
fail() { FAILS+=("$1"); echo "FAILED: $1"; }
verdict() {  # verdict STAGE SUMMARY: the stage's last line
    if ((${#FAILS[@]})); then
        echo "VERDICT $1: FAIL ($(IFS=';'; echo "${FAILS[*]}")) | $2"
        return 1
    fi
    echo "VERDICT $1: PASS | $2"
}

# libcublas.so.13 from the usual places (CUDA toolkits, then the Python wheels' nvidia/*/lib folders); never a
# walk of the whole file system.
find_cublas() {
    local dir site
    for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/targets/x86_64-linux/lib \
               /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu; do
        ls "$dir"/libcublas.so.13* >/dev/null 2>&1 && { echo "$dir"; return; }
    done
    for site in $(python3 -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null); do
        for dir in "$site"/nvidia/cu13/lib "$site"/nvidia/cublas/lib "$site"/nvidia/*/lib; do
            ls "$dir"/libcublas.so.13* >/dev/null 2>&1 && { echo "$dir"; return; }
        done
    done
}
CUBLAS_DIR=$(find_cublas)
[ -n "$CUBLAS_DIR" ] && export LD_LIBRARY_PATH="$CUBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

header() {
    echo "== $1: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "   kvlm: $KVLM; cublas: ${CUBLAS_DIR:-not found}${KVLM_CUDA_EMU:+; emulated (KVLM_CUDA_EMU=$KVLM_CUDA_EMU)}"
}

model() {  # model NAME convert-args... -> path of the converted model (converted once per machine)
    local name=$1; shift
    [ -f "$MODELS/$name.kvlm" ] || timeout 300 "$KVLM" convert "$@" -o "$MODELS/$name.kvlm" --quiet >&2 || return 1
    echo "$MODELS/$name.kvlm"
}

synthetic() {  # synthetic SHAPE TOKENIZER [DTYPE (bf16)]; SHAPE: a named shape or a folder with a config.json
    model "synthetic-$(basename "$1")-${3:-bf16}" --synthetic "$1" --tokenizer "$DATA/tokenizers/$2" --dtype "${3:-bf16}"
}

# run_cases LOG TIMEOUT FILTER: doctest cases with durations; the slowest and any errors on stderr, doctest's
# summary on stdout; fails when a case does.
run_cases() {
    local log=$1 limit=$2 filter=$3 rc summary
    timeout "$limit" "$TESTS" -tc="$filter" -d >"$log" 2>&1
    rc=$?
    summary=$(grep -E '^\[doctest\] test cases' "$log" | tail -1 | sed 's/\[doctest\] test cases: *//')
    [ $rc -eq 124 ] && summary="timed out after ${limit}s (${summary:-no summary})"
    { grep -E '^[0-9.]+ s: ' "$log" | sort -rn | head -5 | sed 's/^/   slowest: /'
      grep -E 'ERROR|CRASHED' "$log" | head -20; } >&2
    echo "${summary:-no doctest summary (exit $rc)}"
    [ $rc -eq 0 ] || return $rc
    [[ $summary =~ [1-9][0-9]*\ passed ]]  # a filter that matched nothing is no pass
}

stage_smoke() {
    header smoke
    local stories args cpu_out gpu_out eager_out pdl_out rc kernels loading=""
    if command -v nvidia-smi >/dev/null; then nvidia-smi >"$OUT/smoke-nvidia-smi.txt" 2>&1 || fail "nvidia-smi"
    else echo "nvidia-smi: not found"; fi
    [ -n "$CUBLAS_DIR" ] || [ -n "${KVLM_CUDA_EMU:-}" ] || fail "libcublas.so.13 not found"
    ldd "$KVLM" | sed 's/^/   ldd: /'
    stories=$(model stories260K "$DATA/stories260K/stories260K.gguf") || fail "convert stories260K"
    args=(run -m "$stories" -p "Once upon a time" -n 64 --temp 0)
    cpu_out=$(timeout 60 "$KVLM" "${args[@]}" --device cpu 2>"$OUT/smoke-cpu.err") || fail "stories260K on the CPU"
    gpu_out=$(timeout 60 "$KVLM" "${args[@]}" --device cuda -v 2>"$OUT/smoke-cuda.err")
    rc=$?
    if [ $rc -ne 0 ]; then  # e.g. a graph capture that met a lazily loaded module: try eager loading once
        tail -3 "$OUT/smoke-cuda.err"
        gpu_out=$(CUDA_MODULE_LOADING=EAGER timeout 60 "$KVLM" "${args[@]}" --device cuda -v 2>"$OUT/smoke-cuda.err") &&
            loading=" (only with CUDA_MODULE_LOADING=EAGER)" || fail "stories260K on CUDA: $(tail -1 "$OUT/smoke-cuda.err")"
    fi
    grep -E "kvlm: (device|load)" "$OUT/smoke-cuda.err"
    eager_out=$(KVLM_CUDA_GRAPHS=0 timeout 60 "$KVLM" "${args[@]}" --device cuda 2>"$OUT/smoke-eager.err") ||
        fail "stories260K on CUDA with graphs off"
    # Programmatic launches off (docs/CUDA.md): if only the runs with them differ from the CPU, a kernel reads
    # before its wait; KVLM_CUDA_PDL=0 is the way out until it is found.
    pdl_out=$(KVLM_CUDA_PDL=0 timeout 60 "$KVLM" "${args[@]}" --device cuda 2>"$OUT/smoke-nopdl.err") ||
        fail "stories260K on CUDA with KVLM_CUDA_PDL=0"
    [ "$pdl_out" = "$cpu_out" ] || fail "stories260K: KVLM_CUDA_PDL=0 text differs from the CPU's"
    [ "$gpu_out" = "$cpu_out" ] || fail "stories260K: CUDA text differs from the CPU's"
    [ "$eager_out" = "$gpu_out" ] || fail "stories260K: graphs off differ from graphs on"
    # The persistent decode kernel (KVLM_CUDA_PERSISTENT, 16-bit models): its grid barriers meet real
    # co-resident blocks here first; a hang ends at the timeout. 24 tokens: ~15 s in emulation.
    local bf16 stage_out persistent_out
    bf16=$(model stories260K-bf16 "$DATA/stories260K/stories260K.gguf" --dtype bf16) || fail "convert stories260K bf16"
    stage_out=$(timeout 60 "$KVLM" run -m "$bf16" -p "Once upon a time" -n 24 --temp 0 --device cuda 2>"$OUT/smoke-bf16.err") ||
        fail "stories260K bf16 on CUDA"
    persistent_out=$(KVLM_CUDA_PERSISTENT=1 timeout 60 "$KVLM" run -m "$bf16" -p "Once upon a time" -n 24 --temp 0 \
        --device cuda -v 2>"$OUT/smoke-persistent.err") || fail "KVLM_CUDA_PERSISTENT=1: $(tail -1 "$OUT/smoke-persistent.err")"
    grep -E "kvlm: device" "$OUT/smoke-persistent.err"
    [ "$persistent_out" = "$stage_out" ] || fail "stories260K bf16: KVLM_CUDA_PERSISTENT=1 text differs from a launch per stage"
    kernels=$(run_cases "$OUT/smoke-kernels.log" 240 "$KERNEL_CASES") ||
        fail "kernel cases: $kernels"
    verdict smoke "stories260K 64 tokens CUDA == CPU == graphs off == KVLM_CUDA_PDL=0$loading; bf16 24 tokens KVLM_CUDA_PERSISTENT=1 == per stage; kernel cases: $kernels"
}

# sanitize TOOL TIMEOUT FILTER [LABEL]: compute-sanitizer over some cases; its summary line.
sanitize() {
    local tool=$1 limit=$2 filter=$3 label=${4:-$1} rc
    local log="$OUT/tests-$label.log"
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$TESTS" -tc="$filter" >"$log" 2>&1
    rc=$?
    grep -E '^=========' "$log" | grep -v -E 'COMPUTE-SANITIZER' | head -10 >&2
    if [ $rc -eq 124 ]; then echo "$label: timed out after ${limit}s (no error before)"; return 0; fi
    # A filter that matched no case exits 255 ("terminated before first instrumented API call"): name it.
    grep -qE '^\[doctest\] test cases: *[0-9]+ \| *[1-9][0-9]* passed' "$log" ||
        { echo "$label: no case ran (exit $rc; does the filter match a case?)"; return 1; }
    [ $rc -eq 0 ] || { echo "$label: errors (exit $rc, $log)"; return 1; }
    echo "$label: clean"
}

stage_tests() {
    header tests
    local cases memcheck="-" samplecheck="-" racecheck="-" synccheck="-"
    cases=$(run_cases "$OUT/tests-cases.log" 300 "$TEST_CASES") || fail "cases: $cases"
    if command -v compute-sanitizer >/dev/null; then
        memcheck=$(sanitize memcheck 120 'cuda kernels: gemv*,cuda kernels: decode-step*') ||
            fail "$memcheck"
        samplecheck=$(sanitize memcheck 90 'cuda kernels: the device sampler*,cuda backend: sequences sampled*,cuda kernels: beam picks*,cuda backend: a beam*' memcheck-sampler) ||
            fail "$samplecheck"
        # The tensor-core prefill attention, the multi-token GEMVs (several tokens' rms sums and staging
        # through one block's shared memory), the split GEMV rows (their warps' sums handed over there) and the
        # beam picks (a block's reductions, round after round).
        local shared='cuda kernels: prefill attention on tensor cores vs the CPU twin and the paged kernel,cuda kernels: gemv over several tokens*,cuda kernels: gemv rows split*,cuda kernels: beam picks*'
        racecheck=$(sanitize racecheck 90 "$shared") || fail "$racecheck"
        synccheck=$(sanitize synccheck 60 "$shared") || fail "$synccheck"
    else
        memcheck="compute-sanitizer not found"
    fi
    verdict tests "cases: $cases; $memcheck; $samplecheck; $racecheck; $synccheck"
}

# tg_rate BENCH_OUTPUT: the tg128 t/s of a markdown bench table.
tg_rate() { grep -E '\| tg[0-9]+ \|' | head -1 | awk -F'|' '{gsub(/ /, "", $7); print $7}'; }

# bench_model NAME MODEL: throughput, scenarios, q8_0 KV and the decode profile of one model.
bench_model() {
    local name=$1 m=$2 plan="-p 512 -n 128 -d 0,4096 -r 3"
    echo && echo "### $name: kvlm bench $plan --kv-dtype bf16" && echo
    timeout 150 "$KVLM" bench -m "$m" --device cuda $plan --kv-dtype bf16 2>&1 | tee "$OUT/bench-$name.md" ||
        fail "$name bench"
    echo && echo "### $name, programmatic launches off (KVLM_CUDA_PDL=0, the A/B): -p 0 -n 128 -r 3 --no-scenarios" && echo
    KVLM_CUDA_PDL=0 timeout 60 "$KVLM" bench -m "$m" --device cuda -p 0 -n 128 -r 3 --kv-dtype bf16 --no-scenarios 2>&1 |
        tee "$OUT/bench-$name-nopdl.md" || fail "$name bench KVLM_CUDA_PDL=0"
    echo && echo "### $name, the persistent decode kernel (KVLM_CUDA_PERSISTENT=2): -p 0 -n 128 -d 0,4096 -r 3 --no-scenarios" && echo
    KVLM_CUDA_PERSISTENT=2 timeout 90 "$KVLM" bench -m "$m" --device cuda -p 0 -n 128 -d 0,4096 -r 3 --kv-dtype bf16 \
        --no-scenarios 2>&1 | tee "$OUT/bench-$name-persistent.md" || fail "$name bench KVLM_CUDA_PERSISTENT=2"
    echo && echo "### $name, q8_0 KV: -p 512 -n 128 -r 3 --no-scenarios" && echo
    timeout 60 "$KVLM" bench -m "$m" --device cuda -p 512 -n 128 -r 3 --kv-dtype q8_0 --no-scenarios 2>&1 |
        tee -a "$OUT/bench-$name.md" || fail "$name bench q8_0"
    echo && echo "### $name: decode profile (KVLM_CUDA_PROFILE=1, 64 tokens at depth 0)" && echo
    KVLM_CUDA_PROFILE=1 timeout 60 "$KVLM" bench -m "$m" --device cuda -p 0 -n 64 -r 1 --kv-dtype bf16 --no-scenarios \
        2>&1 >/dev/null | grep -E '^(\||kvlm: decode profile)' | tee "$OUT/profile-$name.md" || fail "$name profile"
    ncu_profile "$name" "$m"
}

# ncu_profile NAME MODEL: the decode steps per kernel from the hardware counters (400 launches, graphs off),
# then per kernel instance and launch shape (each matrix's GEMV apart), into $OUT/profile-NAME.md.
ncu_profile() {
    local name=$1 m=$2
    command -v ncu >/dev/null || return 0
    echo && echo "### $name: ncu over 400 decode launches (graphs off), bench/ncu_table.py [--shapes]" && echo
    KVLM_CUDA_GRAPHS=0 timeout 100 ncu --clock-control none --csv --print-units base \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --launch-skip 3000 \
        --launch-count 400 "$KVLM" bench -m "$m" --device cuda -p 0 -n 64 -r 1 --kv-dtype bf16 --no-scenarios \
        >"$OUT/ncu-$name.csv" 2>&1 && python3 bench/ncu_table.py "$OUT/ncu-$name.csv" | tee -a "$OUT/profile-$name.md" &&
        echo && python3 bench/ncu_table.py --shapes "$OUT/ncu-$name.csv" | tee -a "$OUT/profile-$name.md" ||
        echo "ncu: no table (see $OUT/ncu-$name.csv)"
}

# Whole-run decode, each step queued behind the one before (issue 18: what `kvlm run` gets, sampling on the
# device included, unlike bench's tg rows); batched decode rows (issue 19): N samples decoded side by side,
# one forward per step for all of them, and beams. Each line is `-v`'s summary (with samples, the decode rate
# per sample: N times it is the aggregate).
bench_batched() {
    local name=$1 m=$2 n
    {
        for settings in "--temp 0" "--temp 0.8 --seed 5"; do
            for ahead in 1 0; do  # steps queued ahead, then each waiting for the one before (A/B)
                echo "### $name: KVLM_CUDA_STEPS_AHEAD=$ahead run --device cuda -n 256 $settings (KVLM_CUDA_TRANSFERS=1)"
                KVLM_CUDA_STEPS_AHEAD=$ahead KVLM_CUDA_TRANSFERS=1 timeout 60 "$KVLM" run -m "$m" --device cuda \
                    -p "Once upon a time" -n 256 $settings -v 2>&1 >/dev/null | grep -E 'generated|CUDA transfers' ||
                    fail "$name run $settings"
            done
        done
        for n in 1 4 8; do
            echo "### $name: run --device cuda --samples $n -n 128 --temp 0.7 --seed 5"
            timeout 60 "$KVLM" run -m "$m" --device cuda -p "Once upon a time" -n 128 --temp 0.7 --seed 5 --samples $n -v \
                2>&1 >/dev/null | grep -E '^kvlm: sample 1:|generated' | head -1 || fail "$name samples $n"
        done
        for n in 4 8; do
            echo "### $name: run --device cuda --beams $n -n 64"
            timeout 60 "$KVLM" run -m "$m" --device cuda -p "Once upon a time" -n 64 --beams $n -v 2>&1 >/dev/null |
                grep '^kvlm: beam search' || fail "$name beams $n"
        done
        # Session 27's device picks, unmeasured until now: speculative verification rows, constrained steps
        # (allowed sets on the device), perplexity scored on the device.
        for spec in off lookup; do
            echo "### $name: run --device cuda --spec $spec -n 128 --temp 0 (a prompt that repeats; KVLM_CUDA_TRANSFERS=1)"
            KVLM_CUDA_TRANSFERS=1 timeout 60 "$KVLM" run -m "$m" --device cuda -n 128 --temp 0 --spec $spec -v \
                -p "one two three four five six seven. one two three four five six seven. one two three" 2>&1 >/dev/null |
                grep -E 'generated|speculation|CUDA transfers' || fail "$name spec $spec"
        done
        echo "### $name: run --device cuda --regex '[a-z ]{1,400}' -n 128 --temp 0.8 --seed 5 (KVLM_CUDA_TRANSFERS=1)"
        KVLM_CUDA_TRANSFERS=1 timeout 60 "$KVLM" run -m "$m" --device cuda -p "Once upon a time" -n 128 --temp 0.8 \
            --seed 5 --regex '[a-z ]{1,400}' -v 2>&1 >/dev/null | grep -E 'generated|constraint:|CUDA transfers' ||
            fail "$name constrained"
        echo "### $name: perplexity --device cuda -f README.md -c 512"
        timeout 60 "$KVLM" perplexity -m "$m" --device cuda -f README.md -c 512 2>&1 | grep -E 'tokens evaluated|PPL' ||
            fail "$name perplexity"
    } 2>&1 | tee "$OUT/batched-$name.md"
    local line  # the block ran in a pipeline's subshell: its failures come back through the log
    while read -r line; do FAILS+=("${line#FAILED: }"); done < <(grep '^FAILED: ' "$OUT/batched-$name.md")
}

stage_bench() {
    header bench
    local smol l1b
    smol=$(synthetic smollm2-135m smollm2) || fail "convert SmolLM2 shape"
    l1b=$(synthetic llama-3.2-1b llama3) || fail "convert Llama-3.2-1B shape"
    [ -n "$smol" ] && bench_model smollm2-135m "$smol"
    [ -n "$l1b" ] && bench_model llama-3.2-1b "$l1b"
    [ -n "$smol" ] && bench_batched smollm2-135m "$smol"
    verdict bench "tg128 t/s: SmolLM2-135M $(tg_rate <"$OUT/bench-smollm2-135m.md" 2>/dev/null) (KVLM_CUDA_PDL=0: $(tg_rate <"$OUT/bench-smollm2-135m-nopdl.md" 2>/dev/null); persistent: $(tg_rate <"$OUT/bench-smollm2-135m-persistent.md" 2>/dev/null)), Llama-3.2-1B $(tg_rate <"$OUT/bench-llama-3.2-1b.md" 2>/dev/null) (KVLM_CUDA_PDL=0: $(tg_rate <"$OUT/bench-llama-3.2-1b-nopdl.md" 2>/dev/null); persistent: $(tg_rate <"$OUT/bench-llama-3.2-1b-persistent.md" 2>/dev/null)) (bf16 weights and KV)"
}

stage_bench8b() {
    header bench8b
    local l8b
    l8b=$(synthetic llama-3-8b llama3) || fail "convert Llama-3-8B shape"
    [ -n "$l8b" ] && {
        echo "### llama-3-8b: kvlm bench -p 512,2048 -n 128 -r 3 --kv-dtype bf16 --no-scenarios"
        timeout 150 "$KVLM" bench -m "$l8b" --device cuda -p 512,2048 -n 128 -r 3 --kv-dtype bf16 --no-scenarios 2>&1 |
            tee "$OUT/bench-llama-3-8b.md" || fail "8B bench"
        echo "### llama-3-8b: KVLM_CUDA_PDL=0 -p 0 -n 128 -r 3 (programmatic launches off, the A/B)"
        KVLM_CUDA_PDL=0 timeout 60 "$KVLM" bench -m "$l8b" --device cuda -p 0 -n 128 -r 3 --kv-dtype bf16 --no-scenarios \
            2>&1 | tee "$OUT/bench-llama-3-8b-nopdl.md" || fail "8B bench KVLM_CUDA_PDL=0"
        echo "### llama-3-8b: KVLM_CUDA_PERSISTENT=1 -p 0 -n 128 -r 3 (the persistent decode kernel)"
        KVLM_CUDA_PERSISTENT=1 timeout 60 "$KVLM" bench -m "$l8b" --device cuda -p 0 -n 128 -r 3 --kv-dtype bf16 \
            --no-scenarios 2>&1 | tee "$OUT/bench-llama-3-8b-persistent.md" || fail "8B bench KVLM_CUDA_PERSISTENT=1"
        KVLM_CUDA_PROFILE=1 timeout 60 "$KVLM" bench -m "$l8b" --device cuda -p 0 -n 32 -r 1 --kv-dtype bf16 --no-scenarios \
            2>&1 >/dev/null | grep -E '^(\||kvlm: decode profile)' | tee "$OUT/profile-llama-3-8b.md" || fail "8B profile"
        ncu_profile llama-3-8b "$l8b"
    }
    verdict bench8b "tg128 t/s: Llama-3-8B $(tg_rate <"$OUT/bench-llama-3-8b.md" 2>/dev/null) (KVLM_CUDA_PDL=0: $(tg_rate <"$OUT/bench-llama-3-8b-nopdl.md" 2>/dev/null); persistent: $(tg_rate <"$OUT/bench-llama-3-8b-persistent.md" 2>/dev/null))"
}

# The lent machine's 16 cores: CPU decode and prefill from 1 to all of its threads (issue 16 asks for scaling
# to 16 cores; the development VMs have 2), a SmolLM2-135M-shaped model with q4_0 weights, then bf16.
stage_cpu() {
    header cpu
    local q4 bf16 t cores rate1 line
    cores=$(nproc)
    q4=$(synthetic smollm2-135m smollm2 q4_0) || fail "convert SmolLM2 shape q4_0"
    bf16=$(synthetic smollm2-135m smollm2) || fail "convert SmolLM2 shape"
    for m in $q4 $bf16; do
        echo "### $(basename "$m" .kvlm): kvlm bench --device cpu -p 512 -n 128 -r 2 -t T, $cores cores ($(lscpu | sed -n 's/^Model name: *//p'))"
        for t in $(printf '%s\n' 1 2 4 8 16 "$cores" | sort -nu); do
            [ "$t" -le "$cores" ] || continue
            timeout 120 "$KVLM" bench -m "$m" --device cpu -p 512 -n 128 -r 2 -t "$t" --no-scenarios 2>&1 | grep -E '\| (pp|tg)[0-9]+ \|' ||
                fail "cpu bench $(basename "$m" .kvlm) -t $t"
        done
    done 2>&1 | tee "$OUT/cpu.md"
    while read -r line; do FAILS+=("${line#FAILED: }"); done < <(grep '^FAILED: ' "$OUT/cpu.md")
    rate1=$(grep -m1 -E '\| tg128 \|' "$OUT/cpu.md" | awk -F'|' '{gsub(/ /, "", $7); print $7}')
    line=$(grep -E 'q4_0.*cpu \('"$cores"' threads.*\| tg128 \|' "$OUT/cpu.md" | head -1 | awk -F'|' '{gsub(/ /, "", $7); print $7}')
    verdict cpu "q4_0 tg128 t/s: 1 thread ${rate1:-?}, $cores threads ${line:-?}; table in $OUT/cpu.md"
}

stage_hf() {
    header hf
    local shape m dir
    for shape in smollm2-135m:smollm2 llama-3.2-1b:llama3 llama-3-8b:llama3; do
        m=$(synthetic "${shape%%:*}" "${shape##*:}") || { fail "convert ${shape%%:*}"; continue; }
        dir="$MODELS/$(basename "$m" .kvlm)-hf"
        [ -f "$dir/config.json" ] || timeout 200 python3 bench/export_hf.py "$m" "$dir" || { fail "export ${shape%%:*}"; continue; }
        echo "### $(basename "$m" .kvlm) through transformers"
        PYTHONUNBUFFERED=1 timeout 100 python3 bench/transformers_bench.py "$dir" -p 2048 -n 128 -r 3 2>&1 | grep '^|' ||
            fail "transformers ${shape%%:*}"
        PYTHONUNBUFFERED=1 timeout 100 python3 bench/transformers_bench.py "$dir" -p 0 -n 128 -r 3 --static-cache 2>&1 |
            grep '^|' || fail "transformers static ${shape%%:*}"
    done 2>&1 | tee "$OUT/hf.md"
    local line  # the loop ran in a pipeline's subshell: its failures come back through the log
    while read -r line; do FAILS+=("${line#FAILED: }"); done < <(grep '^FAILED: ' "$OUT/hf.md")
    verdict hf "$(grep -c '^| transformers' "$OUT/hf.md") transformers rows in $OUT/hf.md"
}

# The peer beside kvlm on the same GPU and the same weights: each synthetic model exported to GGUF
# (bench/export_gguf.py) and run by llama.cpp's llama-bench (built here by `make carry-peer` into .carry-peer,
# CUDA sm_90), then by kvlm bench with the same tests and the same f16 K/V; one table (bench/peer_table.py).
# KVLM_GPU_PEER_BENCH, KVLM_GPU_PEER_MODELS (SHAPE:TOKENIZER:DTYPE ...), KVLM_GPU_PEER_TESTS and
# KVLM_GPU_PEER_NGL run the stage small without a GPU: `make test-gpu-script-emu` with a stand-in llama-bench
# (tests/tools/fake_llama_bench.sh) over the emulator, or by hand with a CPU build of llama.cpp.
peer_model() {  # peer_model SHAPE:TOKENIZER:DTYPE FIRST(1|0) -> table rows (stdout)
    local spec=$1 shape tok dtype m name gguf
    IFS=: read -r shape tok dtype <<<"$spec"
    m=$(synthetic "$shape" "$tok" "$dtype") || { fail "convert $spec"; return; }
    name=$(basename "$m" .kvlm)
    gguf="$MODELS/$name.gguf"
    [ -f "$gguf" ] || timeout 300 python3 bench/export_gguf.py "$m" "$gguf" >&2 || { fail "export $name to GGUF"; return; }
    # shellcheck disable=SC2086
    timeout 240 "$PEER_BENCH" -m "$gguf" -ngl "$PEER_NGL" -fa on $PEER_TESTS -ctk f16 -ctv f16 -o json \
        >"$OUT/peer-$name-llama.json" 2>"$OUT/peer-$name-llama.log" || { fail "llama-bench $name (log: $OUT/peer-$name-llama.log)"; return; }
    # shellcheck disable=SC2086
    timeout 240 "$KVLM" bench -m "$m" --device cuda $PEER_TESTS --kv-dtype f16 --no-scenarios -o json \
        >"$OUT/peer-$name-kvlm.json" 2>"$OUT/peer-$name-kvlm.log" || { fail "kvlm bench $name (log: $OUT/peer-$name-kvlm.log)"; return; }
    python3 bench/peer_table.py "$name" "$OUT/peer-$name-llama.json" "$OUT/peer-$name-kvlm.json" \
        $([ "$2" = 1 ] && echo --header) || fail "peer table $name"
}

# run_peer STAGE MODELS DEFAULT_TESTS: the peer stages' body (peer: the small shapes, peer8b: Llama-3-8B).
run_peer() {
    local stage=$1 models=${KVLM_GPU_PEER_MODELS:-$2}
    header "$stage"
    PEER_BENCH=${KVLM_GPU_PEER_BENCH:-$MODELS/llama-bench}
    if [ -z "${KVLM_GPU_PEER_BENCH:-}" ] && [ ! -x "$PEER_BENCH" ] && [ -f .carry-peer/llama-bench.xz ]; then
        # carried compressed (tools/build_peer_for_device.sh); Python's lzma, in case the machine has no xz
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
            .carry-peer/llama-bench.xz "$PEER_BENCH.part" && chmod +x "$PEER_BENCH.part" && mv "$PEER_BENCH.part" "$PEER_BENCH" ||
            fail "unpack .carry-peer/llama-bench.xz"
    fi
    PEER_BENCH=$(realpath -m "$PEER_BENCH")
    PEER_TESTS=${KVLM_GPU_PEER_TESTS:-$3}
    PEER_NGL=${KVLM_GPU_PEER_NGL:-99}
    if [ ! -x "$PEER_BENCH" ]; then
        fail "no $PEER_BENCH (make carry-peer here, then carry .carry-peer)"
    else
        echo "   peer: $PEER_BENCH ($(cat .carry-peer/VERSION 2>/dev/null || echo "no .carry-peer/VERSION"))"
        local spec first=1
        for spec in $models; do
            peer_model "$spec" $first
            first=0
        done 2>&1 | tee "$OUT/$stage.md"
        local line  # the loop ran in a pipeline's subshell: its failures come back through the log
        while read -r line; do FAILS+=("${line#FAILED: }"); done < <(grep '^FAILED: ' "$OUT/$stage.md")
    fi
    verdict "$stage" "kvlm / llama.cpp, decode at depth 0: $(awk -F'|' '$3 ~ /^ tg[0-9]+ $/ {gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $6); printf "%s%s %s %s", sep, $2, $3, $6; sep=", "}' "$OUT/$stage.md" 2>/dev/null); table in $OUT/$stage.md"
}

stage_peer() {
    run_peer peer "smollm2-135m:smollm2:bf16 smollm2-135m:smollm2:q4_0 llama-3.2-1b:llama3:bf16 llama-3.2-1b:llama3:q4_0" \
        "-p 512 -n 128 -d 0,4096 -r 3"
}

# Llama-3-8B in bf16 on its own (its GGUF is 16 GB beside the 16 GB .kvlm that bench8b made: removed after).
stage_peer8b() {
    local rc=0
    run_peer peer8b "llama-3-8b:llama3:bf16" "-p 512 -n 128 -r 3" || rc=$?
    rm -f "$MODELS"/synthetic-llama-3-8b-bf16.gguf
    return $rc
}

# tune_row CELLS ENV...: a table row, CELLS then the tg rates of `kvlm bench $tests` on $m under the given
# environment ("tgN: rate; ..."), or a FAILED line naming them.
tune_row() {
    local cells=$1 bench_out
    shift
    # shellcheck disable=SC2086
    if bench_out=$(env "$@" timeout 120 "$KVLM" bench -m "$m" --device cuda $tests --kv-dtype bf16 --no-scenarios 2>&1); then
        echo "| $(basename "$m" .kvlm) | $cells | $(echo "$bench_out" | awk -F'|' '$6 ~ / tg[0-9]+/ {gsub(/^ +| +$/, "", $6);
            gsub(/ /, "", $7); printf "%s%s: %s", sep, $6, $7; sep="; "}') |"
    else
        echo "FAILED: tune $(basename "$m") $*: $(echo "$bench_out" | tail -1)"
    fi
}

# The k-quant kernels (gemv_quantized.cu over super-blocks; prefill through f16 tiles) beside llama.cpp's, on
# the mixes llama-quantize makes (kvlm convert --dtype q4_k_m etc. gives the same per-tensor types).
stage_peerquant() {
    run_peer peerquant "llama-3.2-1b:llama3:q4_k_m llama-3.2-1b:llama3:q5_k_m llama-3.2-1b:llama3:q6_k smollm2-135m:smollm2:q4_k_m" \
        "-p 512 -n 128 -r 3"
}

# Launch rules swept, for issue 18's bandwidth targets and the gaps session 25's H100 showed (docs/CUDA.md):
# attention's (KVLM_CUDA_ATTN_SPLIT_KEYS:_FILL:_ONE_HEAD) at depths 1024 and 4096, where the 1B shape decoded
# at 0.93x llama.cpp's rate (0.79x in q4_0); the GEMVs' (KVLM_CUDA_GEMV_ROWS:_THREADS:_SPLIT:_STAGE) at depth
# 0, where the 1B's Q/K/V, O and down launches streamed at 1,100-1,400 GB/s against the head's 3,000 (0, 1 and
# auto: the defaults; _SPLIT shares a row among 2-4 warps of 16-bit weights, _STAGE=0 reads x from global
# memory; the 8B too when bench8b converted it). One row per model and rule set; make the best the
# defaults (AttentionScratch in cuda/kernels/cuda_ops.h; launch_shape in cuda/kernels/gemv_shared.cuh, or
# GemvLaunchRules in cuda/kernels/gemv_launch_rules.h for the split and staging).
# KVLM_GPU_TUNE_MODELS (SHAPE:TOKENIZER:DTYPE ...), _RULES, _TESTS, _GEMV_RULES, _GEMV_TESTS run it small.
stage_tune() {
    header tune
    local models=${KVLM_GPU_TUNE_MODELS:-"llama-3.2-1b:llama3:bf16 llama-3.2-1b:llama3:q4_0 smollm2-135m:smollm2:bf16"}
    local rules=${KVLM_GPU_TUNE_RULES:-"0:0:auto 128:2:auto 128:4:auto 128:8:auto 256:4:auto 256:8:auto 128:4:0 128:8:0 256:4:0 128:4:1 256:4:1"}
    local gemv_rules=${KVLM_GPU_TUNE_GEMV_RULES:-"0:0:0:1 1:0:0:1 2:0:0:1 4:0:0:1 0:128:0:1 0:256:0:1 0:0:16:1 0:0:32:1 0:0:48:1 0:0:64:1 0:0:0:0 0:0:48:0"}
    local spec shape tok dtype m rule split fill one rows threads warps stage tests ms=()
    for spec in $models; do
        IFS=: read -r shape tok dtype <<<"$spec"
        m=$(synthetic "$shape" "$tok" "$dtype") && ms+=("$m") || fail "convert $spec"
    done
    [ -f "$MODELS/synthetic-llama-3-8b-bf16.kvlm" ] && [ -z "${KVLM_GPU_TUNE_MODELS:-}" ] &&
        ms+=("$MODELS/synthetic-llama-3-8b-bf16.kvlm")
    {
        tests=${KVLM_GPU_TUNE_TESTS:-"-p 0 -n 64 -d 1024,4096 -r 2"}
        echo "| model | attention: split past keys | blocks per SM | a block per head | tg t/s ($tests) |"
        echo "| --- | ---: | ---: | --- | --- |"
        for m in "${ms[@]}"; do
            case $m in *llama-3-8b*) continue ;; esac  # the 8B: its GEMVs only (each of its runs loads 15 GB)
            for rule in $rules; do
                IFS=: read -r split fill one <<<"$rule"
                tune_row "$split | $fill | $one" KVLM_CUDA_ATTN_SPLIT_KEYS="$split" KVLM_CUDA_ATTN_FILL="$fill" \
                    KVLM_CUDA_ATTN_ONE_HEAD="$one"
            done
        done
        tests=${KVLM_GPU_TUNE_GEMV_TESTS:-"-p 0 -n 128 -r 3"}
        echo
        echo "| model | GEMV: rows per warp | threads | rows split up to warps per SM | x staged | tg t/s ($tests) |"
        echo "| --- | ---: | ---: | ---: | ---: | --- |"
        for m in "${ms[@]}"; do
            for rule in $gemv_rules; do
                IFS=: read -r rows threads warps stage <<<"$rule"
                tune_row "$rows | $threads | $warps | $stage" KVLM_CUDA_GEMV_ROWS="$rows" KVLM_CUDA_GEMV_THREADS="$threads" \
                    KVLM_CUDA_GEMV_SPLIT="$warps" KVLM_CUDA_GEMV_STAGE="$stage"
            done
        done
        # The persistent decode kernel (KVLM_CUDA_PERSISTENT=N blocks per SM, 0: a launch per stage) on the
        # 16-bit models it runs (not q4_0); the 8B at depth 0 only (each of its runs loads 15 GB).
        tests=${KVLM_GPU_TUNE_PERSISTENT_TESTS:-"-p 0 -n 128 -d 0,4096 -r 3"}
        echo
        echo "| model | persistent kernel: blocks per SM | tg t/s ($tests) |"
        echo "| --- | ---: | --- |"
        for m in "${ms[@]}"; do
            case $m in *q4_0*) continue ;; esac
            for per_sm in ${KVLM_GPU_TUNE_PERSISTENT:-0 1 2 3}; do
                case $m in *llama-3-8b*) tests="-p 0 -n 128 -r 3" tune_row "$per_sm" KVLM_CUDA_PERSISTENT="$per_sm" ;;
                *) tune_row "$per_sm" KVLM_CUDA_PERSISTENT="$per_sm" ;;
                esac
            done
        done
    } 2>&1 | tee "$OUT/tune.md"
    local line  # the block ran in a pipeline's subshell: its failures come back through the log
    while read -r line; do FAILS+=("${line#FAILED: }"); done < <(grep '^FAILED: ' "$OUT/tune.md")
    verdict tune "$(grep -c '^| synthetic' "$OUT/tune.md") rule rows in $OUT/tune.md (0 / auto = the defaults)"
}

case "${1:-}" in
smoke) stage_smoke ;;
tests) stage_tests ;;
bench) stage_bench ;;
bench8b) stage_bench8b ;;
hf) stage_hf ;;
cpu) stage_cpu ;;
peer) stage_peer ;;
peer8b) stage_peer8b ;;
peerquant) stage_peerquant ;;
tune) stage_tune ;;
*) echo "usage: $0 smoke|tests|bench|bench8b|hf|cpu|peer|peer8b|peerquant|tune" >&2; exit 2 ;;
esac
