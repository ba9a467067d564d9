#!/usr/bin/env bash
# Chat figure: a 20-turn scripted conversation, total tokens prefilled and wall time, `kvlm chat` (each turn
# prefills only its own tokens) vs a stateless client that re-sends the whole conversation every turn to a
# server without prefix caching (each turn prefills the full history).
#
# kvlm:      one `kvlm chat --verbose` process, the 20 messages piped; prefilled = the sum of the per-turn
#            "N prefilled" counts of its stats lines; wall = the whole process (one model load).
# stateless: for turn k, a fresh `kvlm run --verbose` process (empty KV, nothing on disk) given the conversation
#            so far as one prompt: the model's template (SmolLM2's ChatML, default system prompt) rendered
#            over user messages 1..k and kvlm's answers 1..k-1 (read back from the chat session's messages),
#            ending with the generation prompt; it prefills all of it and answers turn k. prefilled = the sum
#            of the k runs' prefilled counts; wall = the sum of the 20 processes (20 model loads, each
#            reported as "load" and small next to the prefill). "prompts equal" counts the turns whose prompt
#            token count equals kvlm's prompt of that turn (re-tokenizing the answers' text can differ from
#            the generated ids by a token or so).
# Usage: bench/chat.sh [MODEL.kvlm]  (env: KVLM=./kvlm, N_PREDICT=24, TURNS=20, THREADS=all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
MODEL=${1:-models/cache/smollm2-135m-instruct.kvlm}
N_PREDICT=${N_PREDICT:-24}
TURNS=${TURNS:-20}
THREADS=${THREADS:-$(nproc)}
[ -f "$MODEL" ] || { echo "error: $MODEL is missing (make models)" >&2; exit 1; }
STORE=$(mktemp -d)
trap 'rm -rf "$STORE"' EXIT
FLAGS=(-m "$MODEL" -n "$N_PREDICT" --temp 0 -t "$THREADS" -c 4096)

for k in $(seq 1 "$TURNS"); do echo "Question $k: what is $k plus $((k * 3))? Answer in one sentence."; done >"$STORE/messages.txt"
now() { date +%s.%N; }
sum_field() { sed -nE "s#.*$1.*#\\1#p" | awk '{s += $1} END {print s + 0}'; }  # sum_field REGEX-one-group < text

start=$(now)
"$KVLM" chat "${FLAGS[@]}" --verbose --session bench --session-dir "$STORE" <"$STORE/messages.txt" \
    >"$STORE/chat.out" 2>"$STORE/chat.err"
kvlm_wall=$(python3 -c "print(f'{$(now) - $start:.1f}')")
n_turns=$(grep -c ' prefilled ' "$STORE/chat.err" || true)
[ "$n_turns" -eq "$TURNS" ] || { echo "error: kvlm chat answered $n_turns of $TURNS turns" >&2; cat "$STORE/chat.err" >&2; exit 1; }
kvlm_prefilled=$(sum_field ' ([0-9]+) prefilled' <"$STORE/chat.err")
sed -nE 's#.*prompt ([0-9]+) tokens:.*#\1#p' "$STORE/chat.err" >"$STORE/prompts.txt"

# The stateless prompts: ChatML over the session's messages (chats/NAME.chat: magic, u32 version, u64 hash,
# u32 n, then u32-length strings system, pending, u32 n_messages x (role, content)).
python3 - "$STORE/chats/bench.chat" "$STORE" "$TURNS" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
pos = 4 + 4 + 8 + 4
def string():
    global pos
    (n,) = struct.unpack_from("<I", data, pos)
    pos += 4 + n
    return data[pos - n:pos].decode("utf-8")
system, _pending = string(), string()
(n_messages,) = struct.unpack_from("<I", data, pos)
pos += 4
messages = [(string(), string()) for _ in range(n_messages)]
head = f"<|im_start|>system\n{system or 'You are a helpful AI assistant named SmolLM, trained by Hugging Face'}<|im_end|>\n"
text = head
for k in range(int(sys.argv[3])):
    role, content = messages[2 * k]
    assert role == "user", role
    text += f"<|im_start|>user\n{content}<|im_end|>\n"
    # One more "\n": `kvlm run` drops a final newline of a prompt read from stdin.
    open(f"{sys.argv[2]}/prompt{k + 1}.txt", "w").write(text + "<|im_start|>assistant\n\n")
    text += f"<|im_start|>assistant\n{messages[2 * k + 1][1]}<|im_end|>\n"
EOF

stateless_prefilled=0
stateless_wall=0
equal=0
for k in $(seq 1 "$TURNS"); do
    start=$(now)
    "$KVLM" run "${FLAGS[@]}" --verbose <"$STORE/prompt$k.txt" >/dev/null 2>"$STORE/run.err"
    stateless_wall=$(python3 -c "print($stateless_wall + $(now) - $start)")
    n=$(sum_field ' ([0-9]+) prefilled' <"$STORE/run.err")
    stateless_prefilled=$((stateless_prefilled + n))
    [ "$(sed -nE 's#.*prompt ([0-9]+) tokens:.*#\1#p' "$STORE/run.err")" = "$(sed -n "${k}p" "$STORE/prompts.txt")" ] &&
        equal=$((equal + 1))
done

echo "| turns | kvlm chat: tokens prefilled | kvlm chat: wall s | stateless: tokens prefilled | stateless: wall s | prompts equal |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '| %s | %s | %s | %s | %.1f | %s/%s |\n' "$TURNS" "$kvlm_prefilled" "$kvlm_wall" "$stateless_prefilled" \
    "$stateless_wall" "$equal" "$TURNS"
echo
echo "$(basename "$MODEL" .kvlm), CPU, $THREADS threads, -n $N_PREDICT --temp 0, messages \"Question K: what is K plus 3K? Answer in one sentence.\" (K = 1..$TURNS)"
