# Seeds for fuzz_session_block: the KV block files of a real stories260K session (a prompt of 16+ tokens
# and 8 generated ones, so both full and partial blocks), as written under blocks/.
set -euo pipefail
model="$WORK/stories.kvlm"
"$KVLM_BIN" convert "$DATA/stories260K/stories260K.gguf" -o "$model" -q 2>/dev/null
"$KVLM_BIN" run -m "$model" --session-dir "$WORK/sessions" --session a -n 8 --temp 0 -q \
    -p "Once upon a time, there was a little girl named Lily. She loved to play outside." >/dev/null 2>&1
find "$WORK/sessions/blocks" -name '*.kvb' -exec cp {} "$OUT_DIR/" \;
