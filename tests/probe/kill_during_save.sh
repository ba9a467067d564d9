#!/usr/bin/env bash
# Probe: kill -9 during session saves, concurrent writers, gc racing saves (tests/probe/README.md).
# Usage: kill_during_save.sh [TRIALS] (default 150): TRIALS kill trials, TRIALS/4 concurrent-writer trials
# and TRIALS/2 turns with session gc running beside them.
#
# Every turn runs on two stores: D, the store under test, and S, a shadow store that nothing disturbs.
# - kill: a turn of session kN (kvlm run --session kN -n 20 --temp 0) is SIGKILLed after a random delay,
#   uniform between 0 and 1.25 x the time the same turn took on S (a turn of stories260K takes a few ms,
#   the save about a third of it, so the kills spread over start, prefill, decode and save; about a fifth
#   finish first; PROBE_KILL_MAX_MS=300 draws from 0-300 ms instead). Afterwards the session in D must hold exactly S's transcript before or after the turn
#   (never lost, never a mix), `session verify` must exit 0, and a further turn must work and print what
#   the same turn prints on S. Trials are classified by what the kill hit: before the save, during it (new
#   block files or temporary files, old manifest), after the manifest rename, or nothing (finished).
# - concurrent writers: two turns of one session start at once (0-3 ms apart): each must succeed or be
#   refused with 'in use'; the store must then hold what running them one after the other gives.
# - gc racing saves: `session gc`, `session gc --quota 100KiB` (evicting) and a gc killed after 0-10 ms run
#   in a loop while turns of three sessions run; every turn must print what it prints on S and leave the
#   same transcript; verify must exit 0 at the end.
source "$(dirname "$0")/lib.sh"
probe_begin kill_during_save 150 "${1:-}"

M=$WORK/stories.kvlm
make_stories_model "$M"
D=$WORK/store-D
S=$WORK/store-S
mkdir -p "$D" "$S"
PROMPTS=(" Then the dog barked." " She smiled at the sun." " One day," " The end. Once upon a time" " Suddenly")
EPOCH=1
turn_args() { # STORE NAME PROMPT
    TURN=(run -m "$M" --session "$2" --session-dir "$1" -p "$3" -n 20 --temp 0 -t "$PROBE_THREADS" -q)
}

# state STORE NAME: sets STATE to the session's token counts and ids ("absent" when it does not exist).
state() {
    kv show session show "$2" --session-dir "$1"
    if ((RC == 0)); then
        STATE=$(grep -E '^(tokens|token ids):' "$OUTF")
    elif grep -q 'does not exist' "$ERRF"; then
        STATE=absent
    else
        check_generic "session show" "" || true
        STATE="unreadable: $(first_error)"
    fi
}
# same_state NAME: the session holds the same transcript in D and S.
same_state() {
    local d
    state "$D" "$1"
    d=$STATE
    state "$S" "$1"
    [[ $d == "$STATE" ]]
}
ntokens() { sed -n 's/^tokens: *\([0-9]*\).*/\1/p' <<<"$1"; }

# run_turn STORE NAME PROMPT TAG: an undisturbed turn; sets RC, OUTF, ERRF, CMD and DUR (seconds).
run_turn() {
    local t0=$EPOCHREALTIME
    turn_args "$1" "$2" "$3"
    kv "$4" "${TURN[@]}"
    DUR=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.6f", b - a }')
}

verify_store() { # WHAT
    kv verify session verify --session-dir "$D"
    if check_verify "session verify ($1)"; then
        if ((RC == 0)); then count "verify ok"; else fail_call "session verify reports damage ($1)"; fi
    fi
}

blocks_of() { find "$1/blocks" -name '*.kvb' -printf '%f\n' 2>/dev/null | sort; }
temps_of() { find "$1" -name '.tmp-*' -printf '%P\n' 2>/dev/null | sort; }

next_epoch_if_long() { # NAME
    local n
    state "$S" "$1"
    n=$(ntokens "$STATE")
    if [[ -n $n ]] && ((n > 1200)); then EPOCH=$((EPOCH + 1)); fi
}

# ---------------------------------------------------------------------------------------------- kill -9
kill_trial() {
    local t=$1 name=k$EPOCH prompt before after got line rc killed
    prompt=${PROMPTS[$((t % ${#PROMPTS[@]}))]}
    local elapsed delay blocks0 temps0 new_blocks new_temps
    trial_rng "$t"
    rm -rf "$S.prev" && cp -a "$S" "$S.prev"
    state "$S" "$name"
    before=$STATE
    run_turn "$S" "$name" "$prompt" ref
    ((RC == 0)) || { fail_call "kill trial $t: the undisturbed turn on the shadow store failed"; return; }
    state "$S" "$name"
    after=$STATE
    blocks0=$(blocks_of "$D")
    temps0=$(temps_of "$D")
    if [[ -n ${PROBE_KILL_MAX_MS:-} ]]; then
        delay=$(awk -v m="$PROBE_KILL_MAX_MS" -v r="$RANDOM" 'BEGIN { printf "%.6f", m / 1000 * r / 32768 }')
    else
        delay=$(awk -v d="$DUR" -v r="$RANDOM" 'BEGIN { printf "%.6f", d * 1.25 * r / 32768 }')
    fi
    turn_args "$D" "$name" "$prompt"
    CMD="$(printf '%q ' "$KVLM_BIN" "${TURN[@]}") (SIGKILL after ${delay} s)"
    OUTF=$WORK/kill.out ERRF=$WORK/kill.err
    line=$(procs "$PROBE_TIMEOUT" "kill:0:$delay:$OUTF:$ERRF:$(IFS=$'\x1f'; echo "$KVLM_BIN${IFS}${TURN[*]}")")
    read -r _ rc killed elapsed <<<"$line"
    RC=$rc
    local repro="kill trial $t: session $name, turn \"$prompt\", killed after ${delay} s (the turn took $DUR s undisturbed)"
    if ((killed == 0)); then
        if ! check_generic "turn" "" "$repro"; then
            rm -rf "$D" && cp -a "$S" "$D" # go on from a known state
            return
        elif ((RC != 0)); then
            fail_call "a turn that was not killed failed" "$repro"
            rm -rf "$D" && cp -a "$S" "$D"
            return
        elif ! cmp -s "$OUTF" "$WORK/ref.out"; then
            fail_call "the turn printed other text than on the shadow store" "$repro"
        fi
    fi
    state "$D" "$name"
    got=$STATE
    new_blocks=$(comm -13 <(echo "$blocks0") <(blocks_of "$D") | grep -c . || true)
    new_temps=$(comm -13 <(echo "$temps0") <(temps_of "$D") | grep -c . || true)
    if [[ $got == "$after" ]]; then
        if ((killed)); then count "killed after the manifest rename"; else count "finished before the kill"; fi
    elif [[ $got == "$before" ]] && ((killed)); then
        if ((new_blocks > 0 || new_temps > 0)); then
            count "killed during the save (manifest unchanged)"
        else
            count "killed before the save"
        fi
        rm -rf "$S" && mv "$S.prev" "$S"
    else
        fail "session $name lost or changed by a kill -9" "$repro" "before: $(head -c 300 <<<"$before")" \
            "after (expected, from the shadow store): $(head -c 300 <<<"$after")" "got: $(head -c 300 <<<"$got")"
        rm -rf "$D" && cp -a "$S" "$D" # go on from a known state
        return
    fi
    verify_store "after kill trial $t"
    if ((killed)); then # the session must go on, and give the shadow's text
        run_turn "$S" "$name" " And" ref2
        run_turn "$D" "$name" " And" rec
        if ! check_generic "turn after a kill" "" "$repro"; then
            :
        elif ((RC != 0)); then
            fail_call "the session does not continue after a kill -9" "$repro"
        elif ! cmp -s "$OUTF" "$WORK/ref2.out"; then
            fail_call "after a kill -9 the next turn prints other text than on the shadow store" "$repro"
            rm -rf "$D" && cp -a "$S" "$D"
        else
            local turn=$CMD
            if ! same_state "$name"; then
                fail "after a kill -9 the next turn leaves another transcript than on the shadow store" "$repro" \
                    "turn: $turn"
                rm -rf "$D" && cp -a "$S" "$D"
            fi
        fi
    fi
    if ((t % 25 == 0)); then
        kv gc session gc --session-dir "$D"
        check_generic "session gc after kills" "" && ((RC != 0)) && fail_call "session gc failed"
        [[ -z $(temps_of "$D") ]] || fail "session gc left temporary files: $(temps_of "$D" | tr '\n' ' ')"
        verify_store "after gc"
    fi
    next_epoch_if_long "$name"
}

# ---------------------------------------------------------------------------------------------- concurrent
conc_trial() {
    local t=$1 name=k$EPOCH pa=" The cat sat." pb=" It rained." stagger line ra rb got
    trial_rng "$((t + 100000))"
    stagger=$(awk -v r="$RANDOM" 'BEGIN { printf "%.4f", (r % 31) / 10000 }')
    # The four outcomes that running them one after the other gives, from copies of the shadow store.
    rm -rf "$WORK"/X-*
    cp -a "$S" "$WORK/X-A" && run_turn "$WORK/X-A" "$name" "$pa" A1
    cp -a "$WORK/X-A" "$WORK/X-AB" && run_turn "$WORK/X-AB" "$name" "$pb" B2
    cp -a "$S" "$WORK/X-B" && run_turn "$WORK/X-B" "$name" "$pb" B1
    cp -a "$WORK/X-B" "$WORK/X-BA" && run_turn "$WORK/X-BA" "$name" "$pa" A2
    local -A want
    for x in A AB B BA; do
        state "$WORK/X-$x" "$name"
        want[$x]=$STATE
    done
    turn_args "$D" "$name" "$pa"
    local a=("${TURN[@]}")
    turn_args "$D" "$name" "$pb"
    local b=("${TURN[@]}")
    CMD="$(printf '%q ' "$KVLM_BIN" "${a[@]}") & (${stagger} s later) $(printf '%q ' "$KVLM_BIN" "${b[@]}")"
    local repro="concurrent trial $t: session $name, B started ${stagger} s after A"
    line=$(procs "$PROBE_TIMEOUT" \
        "A:0:-:$WORK/ca.out:$WORK/ca.err:$(IFS=$'\x1f'; echo "$KVLM_BIN${IFS}${a[*]}")" \
        "B:$stagger:-:$WORK/cb.out:$WORK/cb.err:$(IFS=$'\x1f'; echo "$KVLM_BIN${IFS}${b[*]}")")
    ra=$(awk '$1 == "A" { print $2 }' <<<"$line")
    rb=$(awk '$1 == "B" { print $2 }' <<<"$line")
    local res=() x
    for x in a b; do
        OUTF=$WORK/c$x.out ERRF=$WORK/c$x.err
        if [[ $x == a ]]; then RC=$ra; else RC=$rb; fi
        check_generic "concurrent writer" "" "$repro" || { rm -rf "$D" && cp -a "$S" "$D"; return; }
        if ((RC == 0)); then
            res+=(ok)
        elif grep -q 'in use' "$ERRF" && [[ ! -s $OUTF ]]; then
            res+=(refused)
        else
            fail_call "concurrent writer failed other than 'in use'" "$repro"
            rm -rf "$D" && cp -a "$S" "$D"
            return
        fi
    done
    state "$D" "$name"
    got=$STATE
    local match=""
    case ${res[0]}-${res[1]} in
    ok-refused) [[ $got == "${want[A]}" ]] && cmp -s "$WORK/ca.out" "$WORK/A1.out" && match=A ;;
    refused-ok) [[ $got == "${want[B]}" ]] && cmp -s "$WORK/cb.out" "$WORK/B1.out" && match=B ;;
    ok-ok)
        if [[ $got == "${want[AB]}" ]] && cmp -s "$WORK/ca.out" "$WORK/A1.out" && cmp -s "$WORK/cb.out" "$WORK/B2.out"; then
            match=AB
        elif [[ $got == "${want[BA]}" ]] && cmp -s "$WORK/cb.out" "$WORK/B1.out" && cmp -s "$WORK/ca.out" "$WORK/A2.out"; then
            match=BA
        fi
        ;;
    *)
        fail "both concurrent writers were refused" "$repro" "A: $(head -c 300 "$WORK/ca.err")" "B: $(head -c 300 "$WORK/cb.err")"
        return
        ;;
    esac
    if [[ -z $match ]]; then
        fail "concurrent writers left a state that no serial order gives" "$repro" "results: ${res[*]}" "got: $(head -c 300 <<<"$got")"
        rm -rf "$D" && cp -a "$S" "$D"
        return
    fi
    if [[ $match == A || $match == B ]]; then count "concurrent: one refused 'in use'"; else count "concurrent: both ran, one after the other"; fi
    rm -rf "$S" && mv "$WORK/X-$match" "$S"
    verify_store "after concurrent trial $t"
    next_epoch_if_long "$name"
}

# ---------------------------------------------------------------------------------------------- gc racing
gc_loop() { # runs until $WORK/stop-gc exists; one line per gc: CLASS RC KILLED WHAT
    local i=0 kind line
    while [[ ! -e $WORK/stop-gc ]]; do
        i=$((i + 1))
        kind=$((RANDOM % 3))
        if ((kind == 0)); then
            kv gcl session gc --session-dir "$D"
            classify ""
            echo "$CLASS $RC 0 gc"
        elif ((kind == 1)); then
            kv gcl session gc --quota 100KiB --session-dir "$D"
            classify ""
            echo "$CLASS $RC 0 gc --quota 100KiB"
        else
            local delay
            delay=$(awk -v r="$RANDOM" 'BEGIN { printf "%.4f", (r % 101) / 10000 }')
            line=$(procs "$PROBE_TIMEOUT" "gc:0:$delay:$WORK/gck.out:$WORK/gck.err:$KVLM_BIN"$'\x1f'"session"$'\x1f'"gc"$'\x1f'"--session-dir"$'\x1f'"$D")
            read -r _ RC killed _ <<<"$line"
            ERRF=$WORK/gck.err
            if ((killed)); then CLASS=killed; else classify ""; fi
            echo "$CLASS $RC $killed gc killed after $delay s"
        fi
    done >"$WORK/gc-loop.log"
}

gc_race() {
    local n=$1 i name prompt
    trial_rng 200000
    rm -f "$WORK/stop-gc"
    gc_loop &
    local loop_pid=$!
    for ((i = 1; i <= n; i++)); do
        name=g$((i % 3))-$EPOCH
        prompt=${PROMPTS[$((i % ${#PROMPTS[@]}))]}
        run_turn "$S" "$name" "$prompt" gref
        run_turn "$D" "$name" "$prompt" grun
        local repro="gc race turn $i: session $name, prompt \"$prompt\", while session gc ran in a loop"
        if ! check_generic "turn during gc" "" "$repro"; then
            :
        elif ((RC != 0)); then
            fail_call "a turn failed while session gc ran" "$repro"
        elif ! cmp -s "$OUTF" "$WORK/gref.out"; then
            fail_call "a turn printed other text while session gc ran" "$repro"
        else
            local turn=$CMD
            if same_state "$name"; then
                count "gc race: turn identical"
            else
                fail "a turn left another transcript while session gc ran" "$repro" "turn: $turn"
            fi
        fi
        if ((i % 3 == 0)); then next_epoch_if_long "$name"; fi
    done
    touch "$WORK/stop-gc"
    wait "$loop_pid"
    local class rc killed what
    while read -r class rc killed what; do
        case $class in
        ok) count "gc race: gc ran" ;;
        killed) count "gc race: gc killed" ;;
        error) fail "session gc failed while turns ran: $what (exit $rc)" ;;
        *) fail "session gc: $class while turns ran: $what (exit $rc)" ;;
        esac
    done <"$WORK/gc-loop.log"
    verify_store "after the gc race"
    kv gc session gc --session-dir "$D"
    check_generic "session gc" "" && ((RC != 0)) && fail_call "session gc failed"
    verify_store "after the final gc"
}

for ((trial = 1; trial <= TRIALS; trial++)); do
    kill_trial "$trial"
    if ((trial % 4 == 0)); then conc_trial "$trial"; fi
done
EPOCH=$((EPOCH + 1))
gc_race $((TRIALS / 2))
probe_summary
