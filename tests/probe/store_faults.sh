#!/usr/bin/env bash
# Probe: the session store changed under a running session (tests/probe/README.md). Usage: store_faults.sh
# [TRIALS] (default 60)
#
# Each trial continues a chat session in a `kvlm chat` that reads its next message after a random delay, while
# its block files are changed at a random moment before or after the restore: truncated, overwritten in
# place with random bytes, removed or replaced by another block's file. Expected, whatever the timing: no
# crash (a mapped block file truncated in place killed kvlm with SIGBUS, exit 135), exit 0, and the answer the
# same undisturbed continuation gives (a damaged file found by the restore is recomputed; one damaged after
# it is no longer read).
source "$(dirname "$0")/lib.sh"
probe_begin store_faults 60 "${1:-}"

M=$WORK/stories.kvlm
make_stories_model "$M"
FIRST="Once upon a time there was a little girl named Lily. She loved to play with her ball in the park every day"
chat_args() { echo "chat -m $M --chat-template chatml -n 24 --temp 0 -t $PROBE_THREADS --session c --session-dir $1"; }

# The session every trial starts from, and its undisturbed continuation.
BASE=$WORK/base
KV_STDIN=$WORK/first.txt
echo "$FIRST" >"$KV_STDIN"
# shellcheck disable=SC2046
kv base $(chat_args "$BASE")
((RC == 0)) || { echo "store_faults: setup failed: $(cat "$ERRF")" >&2; exit 2; }
echo "Then what happened?" >"$WORK/second.txt"
cp -r "$BASE" "$WORK/ref-store"
KV_STDIN=$WORK/second.txt
# shellcheck disable=SC2046
kv ref $(chat_args "$WORK/ref-store")
((RC == 0)) || { echo "store_faults: reference failed: $(cat "$ERRF")" >&2; exit 2; }
cp "$OUTF" "$WORK/want.txt"
unset KV_STDIN

for ((trial = 0; trial < TRIALS; trial++)); do
    trial_rng "$trial"
    store=$WORK/s$trial
    rm -rf "$store"
    cp -r "$BASE" "$store"
    damage=$(printf '%s\n' truncate overwrite remove swap | sed -n "$((RANDOM % 4 + 1))p")
    damage_ms=$((RANDOM % 400))  # the damage: before, during or after the restore
    message_ms=$((damage_ms + RANDOM % 300))  # the message that decodes over the restored blocks
    # The damage script: every block file, or one, changed as `damage` says.
    cat >"$WORK/damage.sh" <<EOF
sleep $(printf '0.%03d' "$damage_ms")
files=(\$(find "$store/blocks" -name '*.kvb' | sort))
case $damage in
truncate) for f in "\${files[@]}"; do truncate -s \$((RANDOM % 200)) "\$f"; done ;;
overwrite) for f in "\${files[@]}"; do head -c \$(stat -c %s "\$f") /dev/urandom | dd of="\$f" conv=notrunc status=none; done ;;
remove) rm -f "\${files[@]}" ;;
swap) ((\${#files[@]} > 1)) && cp "\${files[0]}" "\${files[1]}" ;;
esac
EOF
    # shellcheck disable=SC2046
    CMD_LINE="{ bash $WORK/damage.sh & sleep $(printf '0.%03d' $((message_ms % 1000))); echo 'Then what happened?'; wait; } | $KVLM_BIN $(chat_args "$store")"
    OUTF=$WORK/t$trial.out ERRF=$WORK/t$trial.err
    CMD=$CMD_LINE
    (ulimit -v "$PROBE_VMEM_KB"; timeout -k 5 "$PROBE_TIMEOUT" bash -c "$CMD_LINE") >"$OUTF" 2>"$ERRF"
    RC=$?
    check_generic "chat continued while its blocks were changed ($damage at ${damage_ms} ms)" "" || continue
    if [[ $CLASS != ok ]]; then
        fail_call "chat refused while its blocks were changed ($damage at ${damage_ms} ms)"
    elif ! cmp -s "$OUTF" "$WORK/want.txt"; then
        fail_call "another answer than the undisturbed continuation ($damage at ${damage_ms} ms)"
    else
        count "same answer ($damage)"
    fi
done
probe_summary
