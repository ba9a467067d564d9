#!/usr/bin/env bash
# Probe: damaged session-store files (tests/probe/README.md). Usage: damaged_store.sh [TRIALS] (default 150)
#
# A store holds two plain sessions sharing a prefix (s, s2) and a chat session (c, run --chat with
# --chat-template chatml), two turns each. Each trial copies it and damages one file
# (tests/probe/mutate.py damage: flipped bits, truncation, a zeroed range, appended bytes, deletion; or a
# manifest replaced by another session's): a KV block file (half the trials), a manifest (3 in 10) or the
# chat state file (1 in 5). Then:
# - `kvlm session verify` must exit 0 or 1 cleanly; every session it names must, when continued, warn on
#   stderr or refuse, and a session whose continuation finds damage must have been named by verify.
# - each session is continued on its own copy of the damaged store (kvlm run --session X -p ... -n 20
#   --temp 0): exit 0 with exactly the undamaged store's text (damaged blocks recomputed), or exactly a new
#   session's text when its manifest is gone, or a clean error naming a way out: a `kvlm session ...`
#   command (run with the store as KVLM_SESSION_DIR; must exit 0, and then the turn must run as a new
#   session) or `kvlm run --session X` (then the plain turn must run);
# - afterwards `kvlm session verify X` must exit 0: the save repaired what the restore recomputed.
source "$(dirname "$0")/lib.sh"
probe_begin damaged_store 150 "${1:-}"

M=$WORK/stories.kvlm
make_stories_model "$M"
P=$WORK/pristine
SESSIONS=(s s2 c)
declare -A PROMPT=([s]=" Then the dog barked." [s2]=" She smiled." [c]="Tell me a story")
# turn_args STORE NAME [PROMPT]: the command that continues session NAME (sets TURN)
turn_args() {
    local p=${3:-${PROMPT[$2]}}
    TURN=(run -m "$M" --session "$2" --session-dir "$1" -p "$p" -n 20 --temp 0 -t "$PROBE_THREADS")
    [[ $2 == c ]] && TURN+=(--chat --chat-template chatml)
}
setup() {
    local step
    for step in "s|Once upon a time" "s| Then" "s2|Once upon a time" "s2| Lily" "c|Hi" "c|What is your name?"; do
        turn_args "$P" "${step%%|*}" "${step#*|}"
        kv setup "${TURN[@]}"
        ((RC == 0)) || { echo "damaged_store: setup failed: $CMD: $(cat "$ERRF")" >&2; exit 2; }
    done
}
setup
# References: each session's next turn on an undamaged copy, and the same command on an empty store.
for x in "${SESSIONS[@]}"; do
    rm -rf "$WORK/ref" && cp -a "$P" "$WORK/ref"
    turn_args "$WORK/ref" "$x"
    kv "ref-$x" "${TURN[@]}"
    ((RC == 0)) || { echo "damaged_store: reference turn failed: $CMD: $(cat "$ERRF")" >&2; exit 2; }
    rm -rf "$WORK/empty" && mkdir "$WORK/empty"
    turn_args "$WORK/empty" "$x"
    kv "fresh-$x" "${TURN[@]}"
    ((RC == 0)) || { echo "damaged_store: fresh turn failed: $CMD: $(cat "$ERRF")" >&2; exit 2; }
done
kv verify0 session verify --session-dir "$P"
((RC == 0)) || { echo "damaged_store: the undamaged store does not verify: $(cat "$OUTF" "$ERRF")" >&2; exit 2; }
mapfile -t BLOCKS < <(cd "$P" && find blocks -name '*.kvb' | sort)

# way_out STORE NAME REPRO: the last call refused session NAME; follow the way out its message names.
way_out() {
    local store=$1 x=$2 repro=$3 msg cmds=() c args ran=0 rm=0
    msg=$(cat "$ERRF")
    mapfile -t cmds < <(grep -o '`kvlm [^`]*`' <<<"$msg" | tr -d '`' | awk '!seen[$0]++')
    for c in "${cmds[@]}"; do
        read -r -a args <<<"${c#kvlm }"
        if [[ ${args[0]} == session ]]; then
            KVLM_SESSION_DIR=$store kv wayout "${args[@]}"
            if check_generic "way out '$c'" "" "$repro"; then
                if ((RC != 0)); then
                    fail_call "the way out '$c' that the error names fails" "$repro" "the error: $msg"
                    return
                fi
                ran=1
                [[ ${args[1]} == rm ]] && rm=1
            fi
        elif [[ "${args[*]}" == "run --session $x" ]]; then
            kv wayout run -m "$M" --session "$x" --session-dir "$store" -p "${PROMPT[$x]}" -n 20 --temp 0 -t "$PROBE_THREADS"
            if check_generic "way out '$c'" "" "$repro" && ((RC != 0)); then
                fail_call "the way out '$c' that the error names fails" "$repro" "the error: $msg"
                return
            fi
            ran=1
        fi
    done
    if ((!ran)); then
        fail "session $x refused without a way out that works" "$repro" "the error: $msg"
        return
    fi
    if ((rm)); then # the name now starts a new session
        turn_args "$store" "$x"
        kv again "${TURN[@]}"
        if check_generic "turn after the way out" "" "$repro"; then
            if ((RC != 0)); then
                fail_call "after the way out, the session name still does not work" "$repro"
            elif ! cmp -s "$OUTF" "$WORK/fresh-$x.out"; then
                fail_call "after the way out, the turn is not a new session's" "$repro"
            fi
        fi
    fi
    count "$x: refused naming a way out that works"
}

trial() {
    local t=$1 T=$WORK/t kind file what r repro x flagged
    trial_rng "$t"
    rm -rf "$T" && cp -a "$P" "$T"
    r=$((RANDOM % 10))
    if ((r < 5)); then
        kind=block
        file=${BLOCKS[$((RANDOM % ${#BLOCKS[@]}))]}
    elif ((r < 8)); then
        kind=manifest
        file=sessions/${SESSIONS[$((RANDOM % 3))]}.manifest
    else
        kind=chat
        file=chats/c.chat
    fi
    if [[ $kind == manifest ]] && ((RANDOM % 8 == 0)); then
        local other=${SESSIONS[$((RANDOM % 3))]}
        [[ sessions/$other.manifest == "$file" ]] && other=s2
        [[ sessions/$other.manifest == "$file" ]] && other=s
        cp "$T/sessions/$other.manifest" "$T/$file"
        what="swap: copy sessions/$other.manifest over it"
    else
        what=$(mutate damage "$PROBE_SEED" "$t" "$T/$file")
    fi
    repro="trial $t: damaged $file: $what (python3 tests/probe/mutate.py damage $PROBE_SEED $t STORE/$file)"
    count "damaged: $kind ${what%%:*}"

    kv verify session verify --session-dir "$T"
    check_verify "session verify" "$repro" || return
    if ((RC == 0)); then count "verify: exit 0"; else count "verify: exit 1"; fi
    flagged=$(grep -aoE '^[A-Za-z0-9._-]+: ' "$OUTF" | tr -d ': ' | sort -u | tr '\n' ' ')

    for x in "${SESSIONS[@]}"; do
        local TX=$WORK/t-$x
        rm -rf "$TX" && cp -a "$T" "$TX"
        turn_args "$TX" "$x"
        kv "run-$x" "${TURN[@]}"
        check_generic "continuing session $x" "" "$repro" || continue
        local warned=0 named=0
        grep -aq '^kvlm: warning' "$ERRF" && warned=1
        [[ " $flagged " == *" $x "* ]] && named=1
        if ((RC == 0)); then
            if cmp -s "$OUTF" "$WORK/ref-$x.out"; then
                if ((warned)); then
                    count "$x: identical text, recomputed with a warning"
                    ((named)) || fail_call "session verify did not name session $x, whose restore found damage" "$repro"
                else
                    count "$x: identical text"
                    ((named)) && fail_call "session verify named session $x, but continuing it said nothing" "$repro"
                fi
            elif [[ ! -e $T/sessions/$x.manifest ]] && cmp -s "$OUTF" "$WORK/fresh-$x.out"; then
                count "$x: manifest gone, runs as a new session"
            else
                fail_call "continuing session $x: exit 0 with other text (silent wrong output)" "$repro" \
                    "expected: $(head -c 200 "$WORK/ref-$x.out" | tr '\n' '|')"
                continue
            fi
        else
            if [[ -s $OUTF ]]; then
                fail_call "continuing session $x: text on stdout, then an error" "$repro"
                continue
            fi
            if ((named)); then
                :
            elif [[ $x == c && $kind == chat && ! -e $T/chats/c.chat ]]; then
                # A manifest does not say whether its session is a chat: a deleted chats/c.chat leaves a
                # plain session that verify cannot tell from one; the error names the file and the way out.
                count "c: chat file deleted, not named by verify (a plain session now)"
            else
                fail_call "session verify did not name session $x, which cannot be continued" "$repro"
            fi
            way_out "$TX" "$x" "$repro"
        fi
        kv verify-after session verify "$x" --session-dir "$TX"
        if check_verify "session verify $x after the turn" "$repro"; then
            if ((RC != 0)) && [[ -e $TX/sessions/$x.manifest ]]; then
                fail_call "session $x still reports damage after a turn saved it" "$repro"
            fi
        fi
    done
}

for ((trial_no = 1; trial_no <= TRIALS; trial_no++)); do
    trial "$trial_no"
done
probe_summary
