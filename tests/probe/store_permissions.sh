#!/usr/bin/env bash
# Probe: who may read the session store (tests/probe/README.md). Usage: store_permissions.sh [TRIALS]
# (default 60)
#
# Each trial runs one to four store commands (run --session, chat --session, session pin/unpin, session gc)
# under a random umask (000 to 077), against a fresh store, a store an older kvlm left (0755 directories,
# 0644 files) or a store with a symbolic link planted at a lock file's path, and sometimes with a session name
# kvlm refuses. Expected: afterwards no directory or file of the store lets group or others in (a .chat held
# messages in plain text, manifests the token ids, for every user to read); a planted link is refused naming
# it and never followed (nothing is created where it points); a refused name leaves no lock file.
source "$(dirname "$0")/lib.sh"
probe_begin store_permissions 60 "${1:-}"

M=$WORK/stories.kvlm
make_stories_model "$M"
pick() {
    local words=("$@")
    echo "${words[RANDOM % ${#words[@]}]}"
}
# loose DIR: the entries of DIR (itself included) whose mode lets group or others in
loose() { find "$1" \( -perm /077 -a ! -type l \) -printf '%p %m\n'; }

for ((trial = 0; trial < TRIALS; trial++)); do
    trial_rng "$trial"
    store=$WORK/store$trial
    mask=$(printf '%03o' $((RANDOM % 64)))
    start=$(pick fresh fresh old link)
    name=$(pick s s s chat -x)
    if [[ $start != fresh ]]; then
        (umask 022 && "$KVLM_BIN" run -m "$M" -p Once -n 4 --temp 0 --session s --session-dir "$store" >/dev/null 2>&1)
        find "$store" -type d -exec chmod 755 {} + && find "$store" -type f -exec chmod 644 {} +
    fi
    target=$WORK/planted$trial
    [[ $start == link ]] && ln -sf "$target" "$store/locks/$name.lock"
    n_commands=$((RANDOM % 4 + 1))
    refused_link=0 wrote=0
    for ((c = 0; c < n_commands; c++)); do
        command=$(pick run run chat pin gc)
        case $command in
        run) args=(run -m "$M" -p Once -n 4 --temp 0 -t "$PROBE_THREADS" --session "$name" --session-dir "$store") ;;
        chat) args=(chat -m "$M" --chat-template chatml -n 4 --temp 0 --session "$name" --session-dir "$store") ;;
        pin) args=(session pin "$name" --session-dir "$store") ;;
        gc) args=(session gc --session-dir "$store") ;;
        esac
        KV_STDIN=$WORK/hello.txt
        echo Hello >"$KV_STDIN"
        OUTF=$WORK/t$trial.out ERRF=$WORK/t$trial.err CMD="umask $mask; $(printf '%q ' "$KVLM_BIN" "${args[@]}")"
        (umask "$mask"; ulimit -v "$PROBE_VMEM_KB"; exec timeout -k 5 "$PROBE_TIMEOUT" "$KVLM_BIN" "${args[@]}") \
            >"$OUTF" 2>"$ERRF" <"$KV_STDIN"
        RC=$?
        unset KV_STDIN
        check_generic "${args[0]} under umask $mask" "" || continue 2
        grep -aq 'is a symbolic link' "$ERRF" && refused_link=1
        [[ $command != gc ]] && ((RC == 0)) && wrote=1
    done
    if [[ -e $target ]]; then
        fail "a planted lock link was followed" "trial $trial: umask $mask, start $start, name $name"
        continue
    fi
    if [[ $start == link ]] && [[ $name != -x ]] && ((refused_link == 0)) && [[ ${args[0]} != session ]]; then
        fail "a planted lock link went unmentioned" "trial $trial: umask $mask, name $name, last: ${args[*]}"
        continue
    fi
    if [[ $name == -x ]] && [[ -e $store/locks/-x.lock ]]; then
        fail "a refused name left a lock file" "trial $trial: umask $mask, last: ${args[*]}"
        continue
    fi
    # What kvlm creates is owner-only; an older store is tightened by the first command that writes to it.
    bad=$([[ -d $store ]] && loose "$store")
    if [[ -n $bad ]] && { [[ $start == fresh ]] || ((wrote)); }; then
        fail "entries of the store others may read" "trial $trial: umask $mask, start $start, name $name" \
            "$(echo "$bad" | head -5 | tr '\n' '|')"
        continue
    fi
    if [[ -n $bad ]]; then
        count "older store, nothing written"
        continue
    fi
    count "owner-only ($start)"
done
probe_summary
