# Seeds for fuzz_session_manifest: the manifests of real sessions (stories260K, one and two turns).
set -euo pipefail
model="$WORK/stories.kvlm"
"$KVLM_BIN" convert "$DATA/stories260K/stories260K.gguf" -o "$model" -q 2>/dev/null
for turns in 1 2; do
    for ((t = 0; t < turns; t++)); do
        "$KVLM_BIN" run -m "$model" --session-dir "$WORK/sessions" --session "s$turns" -p "Once upon a time $t" \
            -n 8 --temp 0 -q >/dev/null 2>&1
    done
done
find "$WORK/sessions" -name '*.manifest' -exec sh -c 'cp "$1" "$OUT_DIR/$(basename "$(dirname "$1")")-$(basename "$1")"' _ {} \;
