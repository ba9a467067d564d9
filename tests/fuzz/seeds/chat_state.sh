# Seeds for fuzz_chat_state: the chats/NAME.chat files of real stories260K chat sessions (ChatML): two
# exchanges, two with the second undone, a system prompt continued by `kvlm run --chat`, and the first
# one rewritten as a version-2 state (no checksum) and a version-1 state (no template strings, no
# checksum): version 3's checksum stops nearly every mutation at the first check, the older versions let
# the fuzzer reach the structure behind it.
set -euo pipefail
model="$WORK/stories.kvlm"
"$KVLM_BIN" convert "$DATA/stories260K/stories260K.gguf" -o "$model" -q 2>/dev/null
flags=(-m "$model" --chat-template chatml -n 8 -c 512 --temp 0 -t 1 --session-dir "$WORK/sessions")
chat() {  # NAME INPUT [FLAG...]
    local name=$1 input=$2
    shift 2
    printf '%s' "$input" | "$KVLM_BIN" chat "${flags[@]}" --session "$name" "$@" >/dev/null 2>&1
}
chat two $'Once upon a time\nThen\n'
chat undone $'Once upon a time\nThen\n/undo\n'
chat system $'Once upon a time\n' --system "Tell a story."
"$KVLM_BIN" run "${flags[@]}" --session system --chat -p "Then" >/dev/null 2>&1
cp "$WORK"/sessions/chats/*.chat "$OUT_DIR/"
python3 - "$OUT_DIR/two.chat" "$OUT_DIR/two-version1.chat" "$OUT_DIR/two-version2.chat" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert struct.unpack_from("<I", data, 4)[0] == 3
body = data[:-8]  # version 3 ends with the checksum
at = 20  # magic, version, transcript hash and length; then the template name and source (v2 and later)
for _ in range(2):
    at += 4 + struct.unpack_from("<I", body, at)[0]
open(sys.argv[2], "wb").write(body[:4] + struct.pack("<I", 1) + body[8:20] + body[at:])
open(sys.argv[3], "wb").write(body[:4] + struct.pack("<I", 2) + body[8:])
PY
