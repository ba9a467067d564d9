#!/usr/bin/env bash
# Probe: config keys and tensors that change the computation (tests/probe/README.md). Usage: config_keys.sh
# [TRIALS] (default 100)
#
# Each trial is stories260K's HF directory with one to three keys of config_keys.py set in config.json, or its
# GGUF (bench/export_gguf.py) with one more llama.* key or tensor. Expected: `kvlm convert` refuses it naming
# one of the keys (or the tensor) that change what the model computes, and converts it (exit 0) where every
# value set is the key's no-op; a model converted with a key ignored (the outside probe's finding: its text
# was the unmodified model's) is a failure, as is any crash, hang or badly formed error.
source "$(dirname "$0")/lib.sh"
probe_begin config_keys 100 "${1:-}"

M=$WORK/stories.kvlm
make_stories_model "$M"
HF=$STORIES/hf
TOK=$STORIES/tok512.bin

for ((trial = 0; trial < TRIALS; trial++)); do
    trial_rng "$trial"
    if ((RANDOM % 2 == 0)); then
        src=$WORK/hf$trial
        mkdir -p "$src"
        ln -sf "$HF/model.safetensors" "$src/model.safetensors"
        expect=$(python3 "$PROBE_HERE/config_keys.py" hf "$PROBE_SEED" "$trial" "$HF/config.json" "$src/config.json")
        repro="python3 tests/probe/config_keys.py hf $PROBE_SEED $trial $HF/config.json config.json"
        kv "t$trial" convert "$src" --tokenizer "$TOK" -o "$WORK/out$trial.kvlm" -q
    else
        mapfile -t plan < <(python3 "$PROBE_HERE/config_keys.py" gguf "$PROBE_SEED" "$trial")
        src=$WORK/g$trial.gguf
        # shellcheck disable=SC2086  # the flags split on purpose
        python3 "$PROBE_ROOT/bench/export_gguf.py" "$M" "$src" ${plan[0]} 2>/dev/null ||
            { fail "export_gguf.py failed: ${plan[0]}"; continue; }
        expect=${plan[1]}
        repro="python3 bench/export_gguf.py stories.kvlm g.gguf ${plan[0]}"
        kv "t$trial" convert "$src" -o "$WORK/out$trial.kvlm" -q
    fi
    check_generic "convert" "" "$repro" || continue
    if [[ $expect == ok ]]; then
        if [[ $CLASS == ok ]]; then count "no-op values converted"; else fail_call "a no-op value was refused" "$repro"; fi
    elif [[ $CLASS == ok ]]; then
        fail_call "converted with a key that changes the computation ($expect)" "$repro"
    else
        named=0
        for key in ${expect#refuse }; do grep -aqF "$key" "$ERRF" && named=1; done
        if ((named)); then count "refused naming the key"; else fail_call "refused, but not naming $expect" "$repro"; fi
    fi
    rm -f "$WORK/out$trial.kvlm"
done
probe_summary
