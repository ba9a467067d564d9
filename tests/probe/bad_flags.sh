#!/usr/bin/env bash
# Probe: bad flags, paths and prompts (tests/probe/README.md). Usage: bad_flags.sh [TRIALS] (default 130)
#
# A fixed table of bad command lines across run, chat, convert, inspect, tokenize, session and bench (the
# cases of tests/cli/test_bad_input.cpp and more), then TRIALS random ones: one run or chat flag given a
# value from a list of junk (empty, NaN, Inf, 2^64, hex, trailing garbage, non-ASCII digits, ...).
# Expected of a bad one ("refuse"): a non-zero exit below 128, stderr whose first line that is not a
# "kvlm: " note starts with "error: ", nothing on stdout, no hang (fifos included). A few documented
# acceptances ("ok") must exit 0. A random one ("any") may run (exit 0) or be refused as above.
# Convert cases also check that the source (a copy) is unchanged. PROBE_VERBOSE=1 prints each table case
# with the error it got.
source "$(dirname "$0")/lib.sh"
PROBE_TIMEOUT=${PROBE_TIMEOUT_BAD_FLAGS:-10}
probe_begin bad_flags 130 "${1:-}"

M=$WORK/stories.kvlm
make_stories_model "$M"
cd "$WORK" || exit 2
mkfifo fifo fifo.gguf fifo.bin fifo.kvlm
mkdir adir
echo "not a model" >notes.txt
cp "$STORIES/stories260K.gguf" src.gguf
cp "$STORIES/stories260K.bin" src.bin
ln -s src.gguf link.kvlm
GGUF_SUM=$(sha256sum <src.gguf)
LONG_PROMPT="Once upon a time there was a little girl named Lily who loved to play outside in the sun with her dog"
SD=$WORK/store
R=(-m "$M" -n 4 --temp 0 -t "$PROBE_THREADS")
kv setup run "${R[@]}" -p "Once upon a time" --session s --session-dir "$SD"
kv setup run "${R[@]}" -p "Hi" --chat --chat-template chatml --session c --session-dir "$SD"
kv setup run "${R[@]}" -p "Once upon a time, there was a little girl named Lily" --session long --session-dir "$SD"
((RC == 0)) || { echo "bad_flags: setup failed: $(cat "$ERRF")" >&2; exit 2; }
NTABLE=0

# expect KIND ARGS...: runs kvlm ARGS (stdin from $KV_STDIN) and checks the outcome (see the top).
expect() {
    local kind=$1
    shift
    NTABLE=$((NTABLE + 1))
    kv "case" "$@"
    check_generic "$kind" "" "case: $*" || return
    [[ ${PROBE_VERBOSE:-0} == 1 ]] && echo "$kind $CLASS $RC: ${*#"$M"} -> $(first_error)" | sed "s|$WORK/||g" >&2
    case $kind-$CLASS in
    ok-ok) count "documented, ran" ;;
    refuse-error | any-error)
        if [[ -s $OUTF ]]; then
            fail_call "refused, but after printing on stdout" "case: $*"
        else
            count "refused with error:"
        fi
        ;;
    any-ok) count "accepted, ran" ;;
    refuse-ok) fail_call "accepted (exit 0) a bad command line" "case: $*" ;;
    ok-error) fail_call "refused a documented command line" "case: $*" ;;
    esac
}
# base_without ARGS...: sets B to the base run flags (R) less those that ARGS set again (-m, -n, --temp, -t).
base_without() {
    local i a
    B=()
    for ((i = 0; i < ${#R[@]}; i += 2)); do # R is flag-value pairs
        for a in "$@"; do [[ $a == "${R[$i]}" ]] && continue 2; done
        B+=("${R[$i]}" "${R[$((i + 1))]}")
    done
}
# expect_run KIND ARGS...: expect KIND run BASE ARGS, where ARGS override the base flags.
expect_run() {
    local kind=$1
    shift
    base_without "$@"
    expect "$kind" run "${B[@]}" "$@"
}
source_unchanged() {
    [[ $(sha256sum <src.gguf) == "$GGUF_SUM" ]] || {
        fail "convert changed its source src.gguf (case: $*)"
        cp "$STORIES/stories260K.gguf" src.gguf
    }
}

# ---------------------------------------------------------------------------------------------- run
expect refuse run -p x
expect refuse run -m /dev/null -p x
expect refuse run -m adir -p x
expect refuse run -m fifo -p x
expect refuse run -m fifo.kvlm -p x
expect refuse run -m missing.kvlm -p x
expect refuse run -m notes.txt -p x
expect refuse run -m src.gguf -p x
for bad in "--temp nan" "--temp inf" "--temp -1" "--temp abc" "--top-p 2" "--top-p -1" "--top-p nan" "--top-p 0" \
    "--top-k -5" "--min-p 5" "--min-p -0.1" "--repeat-penalty 0" "--repeat-penalty -1" "--repeat-last-n -2" \
    "-t -3" "-t abc" "-c -1" "-c 100000" "-c abc" "-c 99999999999" "-c 1" "-n -5" "--kv-mem garbage" "--kv-mem 1" \
    "--kv-mem 200%" "--kv-mem -5GiB" "--kv-dtype x" "--device x" "--block-size 0" "--block-size -1" \
    "--block-size 5000" "--seed abc" "--seed 18446744073709551616" "--seed -2" "--samples 0" "--bogus" \
    "--chat" "--chat --chat-template missing.jinja" "--session-quota -5 --session z --session-dir $SD"; do
    read -r -a flags <<<"$bad"
    expect_run refuse -p Once "${flags[@]}"
done
# --repeat-penalty near FLT_MAX is accepted, then overflows a logit to -inf (issue-15 probe finding).
expect_run any -p Once --repeat-penalty 1e38
expect_run refuse -p x --samples 2 --session z --session-dir "$SD"
expect_run refuse -p x --session "" --session-dir "$SD"
expect_run refuse -p x --session a/b --session-dir "$SD"
expect_run refuse -p x --session .. --session-dir "$SD"
expect_run refuse -p x --session -x --session-dir "$SD"
expect_run refuse -p x --session=-x --session-dir "$SD"
expect_run refuse -p x --session .hidden --session-dir "$SD"
expect_run refuse -p x --session "$(printf 'a%.0s' {1..129})" --session-dir "$SD"
expect_run refuse -p x --session s --block-size 32 --session-dir "$SD"
expect_run refuse -p x --session s --kv-dtype bf16 --session-dir "$SD"
expect_run refuse -p x --session c --session-dir "$SD"
expect_run refuse -p x --session s --chat --chat-template chatml --session-dir "$SD"
expect_run refuse -p x --session c --chat --chat-template llama3 --session-dir "$SD"
expect_run refuse -p x --session long -c 16 --session-dir "$SD"
expect_run refuse -p x --session z --session-dir /dev/null/x
expect_run refuse -p x --session z --session-dir notes.txt
expect_run refuse -c 16 -p "$LONG_PROMPT"
echo "$LONG_PROMPT" >long.txt
KV_STDIN=long.txt expect_run refuse -c 16
# documented: -t 0 = all cores, more than the cores is capped with a warning, --seed -1 = random
expect_run ok -p Once -t 0
expect_run ok -p Once -t 100000
expect_run ok -p Once --seed -1
expect_run ok -p Once --seed 18446744073709551615
if ! command -v nvidia-smi >/dev/null; then expect_run refuse -p x --device cuda; fi

# ---------------------------------------------------------------------------------------------- chat
echo hi >hi.txt
KV_STDIN=hi.txt expect refuse chat -m "$M"
KV_STDIN=hi.txt expect refuse chat -m "$M" --chat-template chatml --top-p 0
KV_STDIN=hi.txt expect refuse chat -m fifo
KV_STDIN=hi.txt expect refuse chat -m "$M" --chat-template chatml --system-file missing.txt
KV_STDIN=hi.txt expect refuse chat -m "$M" --chat-template chatml --session s --session-dir "$SD"
KV_STDIN=hi.txt expect refuse chat -m "$M" --chat-template chatml --temp nan

# ---------------------------------------------------------------------------------------------- convert
expect refuse convert
expect refuse convert src.gguf
expect refuse convert src.gguf -o src.gguf -q
source_unchanged convert src.gguf -o src.gguf
expect refuse convert src.gguf -o link.kvlm -q
source_unchanged convert src.gguf -o link.kvlm
expect refuse convert src.gguf -o "$WORK/./src.gguf" -q
source_unchanged convert src.gguf -o ./src.gguf
expect refuse convert src.gguf -o notes.txt -q
[[ $(cat notes.txt) == "not a model" ]] || fail "convert without --force replaced notes.txt"
expect refuse convert src.gguf -o adir -q
expect refuse convert src.gguf -o /nonexistent-dir/x.kvlm -q
expect refuse convert missing.gguf -o x.kvlm -q
expect refuse convert /dev/zero -o x.kvlm -q
expect refuse convert adir -o x.kvlm -q
expect refuse convert fifo.gguf -o x.kvlm -q
# A fifo whose name does not say GGUF is opened as a llama2.c checkpoint and blocks (issue-15 probe finding).
expect refuse convert fifo.bin --tokenizer "$STORIES/tok512.bin" -o x.kvlm -q
expect refuse convert fifo -o x.kvlm -q
expect refuse convert src.bin -o x.kvlm -q
expect refuse convert src.bin --tokenizer fifo -o x.kvlm -q
expect refuse convert src.bin --tokenizer missing.bin -o x.kvlm -q
expect refuse convert src.gguf -o x.kvlm --dtype q3 -q
expect refuse convert --synthetic nope -o x.kvlm -q
expect refuse convert src.gguf --synthetic smollm2-135m -o x.kvlm -q
rm -f x.kvlm

# ---------------------------------------------------------------------------------------------- inspect, tokenize
expect refuse inspect
expect refuse inspect missing.kvlm
expect refuse inspect fifo
expect refuse inspect adir
expect refuse inspect notes.txt
expect refuse inspect "$M" --kv-mem garbage
expect refuse tokenize
expect refuse tokenize missing.kvlm hi
expect refuse tokenize fifo hi
expect refuse tokenize notes.txt hi

# ---------------------------------------------------------------------------------------------- session
expect refuse session
expect refuse session foo
expect refuse session show nope --session-dir "$SD"
expect refuse session rm nope --session-dir "$SD"
expect refuse session rm "" --session-dir "$SD"
expect refuse session rm ../x --session-dir "$SD"
expect refuse session verify nope --session-dir "$SD"
expect refuse session pin nope --session-dir "$SD"
expect refuse session gc --quota garbage --session-dir "$SD"
expect refuse session ls --session-dir notes.txt
# `session show s -m MODEL` with a model it cannot open prints the session, then fails (issue-15 probe finding).
expect refuse session show s -m missing.kvlm --session-dir "$SD"
expect refuse session show s -m fifo --session-dir "$SD"

# ---------------------------------------------------------------------------------------------- bench, top level
expect refuse bench
expect refuse bench -m fifo
expect refuse bench -m "$M" -r 0
expect refuse bench -m "$M" -o xml
expect refuse bench -m "$M" -n -3
expect refuse bench -m "$M" -p abc
expect refuse bench -m "$M" -p 0 -n 0
expect refuse
expect refuse foo
expect refuse --bogus
expect refuse run -m "$M" -p Once extra-positional
extra=$(find "$WORK/store/sessions" -type f ! -name s.manifest ! -name c.manifest ! -name long.manifest -printf '%f ')
[[ -z $extra ]] || fail "a refused command created a session: $extra"

# ---------------------------------------------------------------------------------------------- random values
VALUES=("" " " "0" "-0" "1" "-1" "2" "-2" "3.5" "0.5" "1e-45" "1e38" "1e39" "-1e39" "nan" "-nan" "inf" "-inf"
    "NaN" "Infinity" "0x10" "010" "1e3" "1,5" "5abc" "abc" " 7" "2147483647" "2147483648" "-2147483648"
    "4294967296" "9223372036854775807" "18446744073709551615" "18446744073709551616" "99999999999999999999999"
    "٣" "１" "--" "-p" "1GiB" "512MiB" "90%" "101%" "-5%" "0.0000001" "1e-300" $'\x01' "%s%n" "f16" "bf16" "cpu"
    "chatml" "../x" "a b")
FLAGS=(--temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n --seed -t -c -n --kv-mem --kv-dtype
    --block-size --device --session --session-quota --samples --chat-template)
random_case() {
    local t=$1 flag value base=() chat=0
    trial_rng "$t"
    flag=${FLAGS[$((RANDOM % ${#FLAGS[@]}))]}
    value=${VALUES[$((RANDOM % ${#VALUES[@]}))]}
    # --samples N runs N completions: keep N small enough to finish
    if [[ $flag == --samples && $value =~ ^[0-9]+$ && ${#value} -gt 3 ]]; then value=999; fi
    ((RANDOM % 5 == 0)) && chat=1
    base=(-m "$M" -p Once -n 4 --temp 0 -t "$PROBE_THREADS" --session-dir "$WORK/fuzz-store")
    local b=() i=0
    while ((i < ${#base[@]})); do # drop the base flag the case sets
        if [[ ${base[$i]} == "$flag" ]]; then i=$((i + 2)); else b+=("${base[$i]}"); i=$((i + 1)); fi
    done
    if ((chat)); then
        local c=() j
        for ((j = 0; j < ${#b[@]}; j++)); do [[ ${b[$j]} == -p ]] && { j=$((j + 1)); continue; }; c+=("${b[$j]}"); done
        [[ $flag == --chat-template ]] || c+=(--chat-template chatml)
        KV_STDIN=hi.txt kv "case" chat "${c[@]}" "$flag" "$value"
    else
        [[ $flag == --chat-template ]] && b+=(--chat)
        kv "case" run "${b[@]}" "$flag" "$value"
    fi
    check_generic "random $flag" "" "random case $t: $flag '$value'" || return
    [[ ${PROBE_VERBOSE:-0} == 1 ]] && echo "random $t $CLASS $RC: $((chat)) $flag '$value' -> $(first_error)" >&2
    if [[ $CLASS == ok ]]; then
        count "random: accepted, ran"
    elif [[ -s $OUTF ]]; then
        fail_call "random $flag '$value': refused after printing on stdout" "random case $t"
    else
        count "random: refused with error:"
    fi
}
for ((trial = 1; trial <= TRIALS; trial++)); do random_case "$trial"; done
TRIALS="$((NTABLE + TRIALS)) ($NTABLE table + $TRIALS random)"
probe_summary
