#!/usr/bin/env bash
# Probe: mutated model files (tests/probe/README.md). Usage: mutated_models.sh [TRIALS] (default 300)
#
# Each trial runs a clean copy of the converted stories260K .kvlm once (so that a kvlm that remembers
# verified models has it on record: KVLM_VERIFY_EVERY_LOAD_UP_TO=0 below), then mutates it in place once
# (tests/probe/mutate.py kvlm: flipped bits in the header, its reserved bytes, metadata, directory, padding
# or tensor data; a header integer set to a boundary value; an f32 weight set to Inf/NaN; truncation;
# appended garbage; a zeroed range; or a weight or hyperparameter changed with every checksum and the
# fingerprint recomputed, "reseal") and runs
#     kvlm run -m M -p Once -n 8 --temp 0,  kvlm inspect M,  kvlm inspect --verify M.
# Each must refuse with a clear error, or exit 0 with exactly the unmutated output. A resealed file is a
# valid, different model: it may print other text, but an error must still be clean (a NaN logit is one).
# Each trial also mutates one converter source in turn (GGUF, llama2.c .bin, its tokenizer.bin, an HF
# directory's config.json or model.safetensors) and runs kvlm convert: exit 0 or a clean error; a model it
# writes must pass inspect --verify and run (any text) or refuse cleanly; a refused convert leaves no file.
source "$(dirname "$0")/lib.sh"
probe_begin mutated_models 300 "${1:-}"

# Every model takes the path of big models: verified on first use and remembered by file identity
# (kvlm builds without that path ignore the variable and verify stories260K at every load).
export KVLM_VERIFY_EVERY_LOAD_UP_TO=0
M0=$WORK/ref/stories.kvlm
mkdir -p "$WORK/ref" "$WORK/t"
make_stories_model "$M0"
mutate reseal-selftest "$M0" || exit 2
RUN_ARGS=(-p Once -n 8 --temp 0 -t "$PROBE_THREADS")
# inspect prints the path and the file size: drop those lines before comparing.
strip() { grep -v -e '^model:' -e '^file size:' "$1"; }
kv ref-run run -m "$M0" "${RUN_ARGS[@]}" && cp "$OUTF" "$WORK/ref/run.out"
if ((RC != 0)) || [[ ! -s $WORK/ref/run.out ]]; then
    echo "mutated_models: the unmutated run failed: $(cat "$ERRF")" >&2
    exit 2
fi
kv ref-inspect inspect "$M0" && strip "$OUTF" >"$WORK/ref/inspect.out"
kv ref-verify inspect --verify "$M0" && strip "$OUTF" >"$WORK/ref/verify.out"
((RC == 0)) || { echo "mutated_models: inspect --verify of the unmutated model failed" >&2; exit 2; }

# Converter sources: stories260K as GGUF, llama2.c checkpoint + tokenizer, and HF directory.
SOURCES=(gguf llama2c tok json safetensors)

model_trial() {
    local trial=$1 m=$WORK/t/stories.kvlm what kind resealed=0 repro
    # The clean file is run once first, so that a kvlm that remembers verified models (KVLM_VERIFY_EVERY_LOAD_UP_TO=0
    # below, docs/FORMAT.md) has this file on record; the mutation then edits it in place.
    cp "$M0" "$m"
    kv clean run -m "$m" "${RUN_ARGS[@]}"
    ((RC == 0)) || fail_call "run of an unmutated copy failed"
    what=$(mutate kvlm "$PROBE_SEED" "$trial" "$M0" "$m") || { fail "mutate.py kvlm failed (trial $trial)"; return; }
    kind=${what%%:*}
    [[ $kind == reseal-* ]] && resealed=1
    repro="mutation: $what (python3 tests/probe/mutate.py kvlm $PROBE_SEED $trial MODEL OUT; MODEL = kvlm convert of stories260K.gguf)"
    local keep=$WORK/failed-model-$trial.kvlm before=$NFAIL

    kv run run -m "$m" "${RUN_ARGS[@]}"
    if check_generic "run" "" "$repro"; then
        if [[ $CLASS == ok ]]; then
            if cmp -s "$OUTF" "$WORK/ref/run.out"; then
                count "run identical"
            elif ((resealed)); then
                count "run different (resealed model)"
            else
                fail_call "run: exit 0 with different output (silent wrong output)" "$repro"
            fi
        elif [[ -s $OUTF ]]; then
            count "run error after some text"
            ((resealed)) || fail_call "run: text on stdout, then an error, for a file whose checksums are wrong" "$repro"
        else
            count "run refused"
        fi
    fi
    local run_class=$CLASS

    kv inspect inspect "$m"
    if check_generic "inspect" "" "$repro"; then
        if [[ $CLASS == ok ]]; then
            if diff -q <(strip "$OUTF") "$WORK/ref/inspect.out" >/dev/null; then
                count "inspect identical"
            elif ((resealed)); then
                count "inspect shows the changed model"
            else
                fail_call "inspect: exit 0 describing a different model (damage not detected)" "$repro"
            fi
        else
            count "inspect refused"
        fi
    fi

    kv verify inspect --verify "$m"
    if check_generic "inspect --verify" "" "$repro"; then
        if [[ $CLASS == ok ]]; then
            if diff -q <(strip "$OUTF") "$WORK/ref/verify.out" >/dev/null; then
                count "verify identical"
            elif ((resealed)); then
                count "verify passes the changed model"
            else
                fail_call "inspect --verify: exit 0 for a damaged model" "$repro"
            fi
            if [[ $run_class == error ]] && ((!resealed)); then
                fail_call "inspect --verify accepts a file that run refuses" "$repro"
            fi
        else
            count "verify refused"
        fi
    fi
    ((NFAIL > before)) && cp "$m" "$keep" && echo "    mutated file kept: $keep" >>"$FAILS"
    rm -f "$m"
}

convert_trial() {
    local trial=$1 fmt dir what src args=() repro
    fmt=${SOURCES[$((trial % ${#SOURCES[@]}))]}
    dir=$WORK/t/src-$trial
    local out=$WORK/t/out-$trial/converted.kvlm before=$NFAIL
    mkdir -p "$dir" "$(dirname "$out")"
    case $fmt in
    gguf)
        src=$dir/stories260K.gguf
        what=$(mutate gguf "$PROBE_SEED" "$trial" "$STORIES/stories260K.gguf" "$src")
        args=("$src")
        ;;
    llama2c)
        src=$dir/stories260K.bin
        what=$(mutate llama2c "$PROBE_SEED" "$trial" "$STORIES/stories260K.bin" "$src")
        args=("$src" --tokenizer "$STORIES/tok512.bin")
        ;;
    tok)
        src=$dir/tok512.bin
        what=$(mutate tok "$PROBE_SEED" "$trial" "$STORIES/tok512.bin" "$src")
        args=("$STORIES/stories260K.bin" --tokenizer "$src")
        ;;
    json | safetensors)
        cp "$STORIES/hf/config.json" "$STORIES/hf/model.safetensors" "$dir/" && chmod u+w "$dir"/*
        if [[ $fmt == json ]]; then src=$dir/config.json; else src=$dir/model.safetensors; fi
        what=$(mutate "$fmt" "$PROBE_SEED" "$trial" "$STORIES/hf/$(basename "$src")" "$src")
        args=("$dir" --tokenizer "$STORIES/tok512.bin")
        ;;
    esac
    repro="source mutation: $what (python3 tests/probe/mutate.py $fmt $PROBE_SEED $trial ORIGINAL $src)"
    kv convert convert "${args[@]}" -o "$out" -q
    if check_generic "convert $fmt" "" "$repro"; then
        if [[ $CLASS == error ]]; then
            count "convert refused"
            if compgen -G "$(dirname "$out")/*" >/dev/null; then
                fail_call "convert $fmt: refused but left files: $(ls "$(dirname "$out")" | tr '\n' ' ')" "$repro"
            fi
        else
            kv converted-verify inspect --verify "$out"
            if ! check_generic "inspect --verify of a converted model" "" "$repro"; then
                :
            elif [[ $CLASS != ok ]]; then
                fail_call "convert $fmt: exit 0, but the model it wrote does not verify" "$repro"
            else
                kv converted-run run -m "$out" "${RUN_ARGS[@]}"
                if check_generic "run of a converted model" "" "$repro"; then
                    if [[ $CLASS == ok ]]; then
                        if cmp -s "$OUTF" "$WORK/ref/run.out"; then
                            count "converted, runs as the original"
                        else
                            count "converted, runs with other text"
                        fi
                    else
                        count "converted, run refused"
                    fi
                fi
            fi
        fi
    fi
    if ((NFAIL > before)); then
        echo "    mutated source kept: $dir" >>"$FAILS"
    else
        rm -rf "$dir"
    fi
    rm -rf "$(dirname "$out")"
}

for ((trial = 1; trial <= TRIALS; trial++)); do
    model_trial "$trial"
    convert_trial "$trial"
done
probe_summary
