#!/usr/bin/env bash
# `make bench`: a standard set of CPU generation figures through `kvlm run --verbose` (prefill and
# decode tok/s, load and first-token time) for the models that exist here, printed as a markdown table.
# Models: stories260K (converted from ../shared), SmolLM2-135M-Instruct (make models) in f32 and bf16,
# and a synthetic Llama-3.2-1B shape in bf16 (generated once into models/cache/).
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
DATA=${KVLM_TEST_DATA:-../shared/models}
CACHE=models/cache
N_GEN=${N_GEN:-64}
REPS=${REPS:-1}
mkdir -p "$CACHE"

ensure() {  # ensure OUT convert-args...
    local out=$1; shift
    [ -f "$out" ] || "$KVLM" convert "$@" -o "$out" --quiet
}
ensure "$CACHE/stories260K.kvlm" "$DATA/stories260K/stories260K.gguf"
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$GGUF" ]; then
    ensure "$CACHE/smollm2-135m-f32.kvlm" "$GGUF" --dtype f32
    ensure "$CACHE/smollm2-135m-bf16.kvlm" "$GGUF" --dtype bf16
fi
ensure "$CACHE/synthetic-llama-3.2-1b-bf16.kvlm" --synthetic llama-3.2-1b --tokenizer "$DATA/tokenizers/llama3" --dtype bf16

# A prompt of about 128 tokens for every model.
PROMPT=$(printf 'The quick brown fox jumps over the lazy dog while the little girl named Lily plays in the park. %.0s' $(seq 1 6))

echo "| model | prompt tokens | prefill tok/s | decode tok/s | load s | start to first token s |"
echo "| --- | --- | --- | --- | --- | --- |"
for model in "$CACHE/stories260K.kvlm" "$CACHE/smollm2-135m-f32.kvlm" "$CACHE/smollm2-135m-bf16.kvlm" \
             "$CACHE/synthetic-llama-3.2-1b-bf16.kvlm"; do
    [ -f "$model" ] || continue
    for _ in $(seq 1 "$REPS"); do
        "$KVLM" run -m "$model" -p "$PROMPT" -n "$N_GEN" --temp 0 --verbose 2>&1 >/dev/null | grep 'prefill' | sed -E 's/.*load ([0-9.]+) s \| prompt ([0-9]+) tokens: .* prefilled in [0-9.]+ s \(([0-9.]+) tok\/s\) \| generated [0-9]+ tokens, decode ([0-9.]+) tok\/s \| start to first token ([0-9.]+) s.*/\2 \3 \4 \1 \5/' |
        while read -r n_prompt prefill decode load first; do
            echo "| $(basename "$model" .kvlm) | $n_prompt | $prefill | $decode | $load | $first |"
        done
    done
done
