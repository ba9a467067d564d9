# Shared by the probe scripts (tests/probe/README.md); sourced, not run.
#
# Environment: KVLM_BIN (default ./kvlm in the repository root), KVLM_TEST_DATA (default ../shared/models
# next to the repository), PROBE_TRIALS (when no count is given on the command line), PROBE_SEED (default
# 20261125), PROBE_TIMEOUT (seconds per kvlm call, default 30: a call that takes longer is a hang),
# PROBE_THREADS (-t for runs, default 1), PROBE_VMEM_KB (ulimit -v per call, default 8000000: a hostile
# file must be refused, not allowed to take the machine's memory; unlimited for a sanitizer build),
# PROBE_KEEP=1 (keep the work directory even when everything passed). Every kvlm call runs with
# KVLM_SESSION_DIR, XDG_CACHE_HOME and XDG_STATE_HOME inside the work directory.
set -u -o pipefail

PROBE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PROBE_HERE=$PROBE_ROOT/tests/probe
KVLM_BIN=$(realpath -m "${KVLM_BIN:-$PROBE_ROOT/kvlm}")
KVLM_TEST_DATA=$(realpath -m "${KVLM_TEST_DATA:-$PROBE_ROOT/../shared/models}")
PROBE_SEED=${PROBE_SEED:-20261125}
PROBE_TIMEOUT=${PROBE_TIMEOUT:-30}
PROBE_THREADS=${PROBE_THREADS:-1}
PROBE_VMEM_KB_SET=${PROBE_VMEM_KB:-}
PROBE_VMEM_KB=${PROBE_VMEM_KB:-8000000}
STORIES=$KVLM_TEST_DATA/stories260K

mutate() { python3 "$PROBE_HERE/mutate.py" "$@"; }
procs() { python3 "$PROBE_HERE/procs.py" "$@"; }

# probe_begin NAME DEFAULT_TRIALS [COUNT]: checks the binary and data, sets TRIALS, WORK (a fresh temporary
# directory) and the counters.
probe_begin() {
    PROBE_NAME=$1
    TRIALS=${3:-${PROBE_TRIALS:-$2}}
    [[ $TRIALS =~ ^[0-9]+$ ]] || { echo "$PROBE_NAME: the trial count '$TRIALS' is not a number" >&2; exit 2; }
    [[ -x $KVLM_BIN ]] || { echo "$PROBE_NAME: no kvlm binary at $KVLM_BIN (build it, or set KVLM_BIN)" >&2; exit 2; }
    [[ -f $STORIES/stories260K.gguf ]] ||
        { echo "$PROBE_NAME: test data $STORIES is missing (set KVLM_TEST_DATA)" >&2; exit 2; }
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvlm-probe-$PROBE_NAME.XXXXXX")
    FAILS=$WORK/failures.txt
    : >"$FAILS"
    NFAIL=0
    OUTCOME_KEYS=()
    declare -gA OUTCOME=()
    PROBE_START=$EPOCHREALTIME
    trap probe_cleanup EXIT
    ulimit -c 0
    # Never the user's session store, chat history or record of verified models, whatever a command says.
    export KVLM_SESSION_DIR=$WORK/default-store XDG_CACHE_HOME=$WORK/xdg-cache XDG_STATE_HOME=$WORK/xdg-state
    # A sanitizer build reserves terabytes of shadow address space: no ulimit -v for it.
    if [[ -z ${PROBE_VMEM_KB_SET:-} ]] && grep -aq -m1 '__asan_init' "$KVLM_BIN"; then PROBE_VMEM_KB=unlimited; fi
}

probe_cleanup() {
    if ((NFAIL == 0)) && [[ ${PROBE_KEEP:-0} != 1 ]]; then
        rm -rf "$WORK"
    else
        echo "$PROBE_NAME: work directory kept: $WORK" >&2
    fi
}

# kv TAG ARGS...: runs kvlm ARGS under timeout and ulimit -v, stdin from $KV_STDIN (default /dev/null);
# sets RC, OUTF ($WORK/TAG.out), ERRF ($WORK/TAG.err) and CMD (the command, shell-quoted).
kv() {
    local tag=$1
    shift
    OUTF=$WORK/$tag.out
    ERRF=$WORK/$tag.err
    CMD=$(printf '%q ' "$KVLM_BIN" "$@")
    CMD=${CMD% }
    (
        ulimit -v "$PROBE_VMEM_KB"
        exec timeout -k 5 "$PROBE_TIMEOUT" "$KVLM_BIN" "$@"
    ) >"$OUTF" 2>"$ERRF" <"${KV_STDIN:-/dev/null}"
    RC=$?
}

# Lines kvlm may print on stderr before an error: notes and warnings ("kvlm: ..."), inspect --verify's
# progress line.
NOTE_RE='^(kvlm: |verifying [0-9]+ tensors)'

# classify [ALLOWED_SIGNAL_EXITS]: sets CLASS for the last kv call: sanitizer, hang, crash, ok (exit 0), error
# (non-zero exit, and the first stderr line that is not a note matching NOTE_RE starts with "error: ") or
# badmsg.
classify() {
    local allowed=" ${1:-} "
    if grep -aqE 'ERROR: (Address|Leak|Memory|Thread)Sanitizer|runtime error:|UndefinedBehaviorSanitizer|SUMMARY: .*Sanitizer' "$ERRF"; then
        CLASS=sanitizer
    elif ((RC == 124 || RC == 137)); then
        CLASS=hang
    elif ((RC >= 128)) && [[ $allowed != *" $RC "* ]]; then
        CLASS=crash
    elif ((RC == 0)); then
        CLASS=ok
    elif grep -aEv "$NOTE_RE" "$ERRF" | head -n 1 | grep -aq '^error: '; then
        CLASS=error
    else
        CLASS=badmsg
    fi
}

# The first line of the last call's stderr that is not a note (for reports).
first_error() { grep -aEv "$NOTE_RE" "$ERRF" | head -n 1 | cut -c1-300; }

# count OUTCOME: one more of this kind of outcome (listed in the summary in order of first appearance).
count() {
    if [[ -z ${OUTCOME[$1]+x} ]]; then
        OUTCOME[$1]=0
        OUTCOME_KEYS+=("$1")
    fi
    OUTCOME[$1]=$((OUTCOME[$1] + 1))
}

# fail WHAT DETAILS...: records a failure; each DETAILS argument is printed on its own line.
fail() {
    NFAIL=$((NFAIL + 1))
    count "FAILED: $1"
    {
        echo "FAIL $NFAIL: $1"
        shift
        local line
        for line in "$@"; do echo "    $line"; done
    } >>"$FAILS"
}

# fail_call WHAT [REPRO...]: a failure of the last kv call: its command, exit status and stderr head.
fail_call() {
    local what=$1
    shift
    fail "$what" "$@" "command: $CMD" "exit status: $RC" \
        "stderr: $(head -c 600 "$ERRF" | tr '\n' '|')" "stdout: $(head -c 200 "$OUTF" | tr '\n' '|')"
}

# check_generic WHAT [ALLOWED_SIGNAL_EXITS] [REPRO...]: classify the last call; a crash, hang, sanitizer report
# or badly formatted error is a failure. Returns 1 if so.
check_generic() {
    local what=$1 allowed=${2:-}
    shift 2 || shift $#
    classify "$allowed"
    case $CLASS in
    sanitizer | hang | crash | badmsg)
        fail_call "$what: $CLASS" "$@"
        return 1
        ;;
    esac
    return 0
}

# check_verify WHAT [REPRO...]: like check_generic for `kvlm session verify`, whose exit 1 with the problems
# on stdout and nothing but notes on stderr is its report, not an error (CLASS=report).
check_verify() {
    local what=$1
    shift
    classify ""
    if [[ $CLASS == badmsg ]] && ((RC == 1)) && [[ -s $OUTF ]] && ! grep -aEvq "$NOTE_RE" "$ERRF"; then
        CLASS=report
    fi
    case $CLASS in
    sanitizer | hang | crash | badmsg)
        fail_call "$what: $CLASS" "$@"
        return 1
        ;;
    esac
    return 0
}

probe_summary() {
    local elapsed line parts=() key
    elapsed=$(awk -v a="$PROBE_START" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
    if ((NFAIL > 0)); then
        echo
        cat "$FAILS"
        echo
    fi
    while IFS= read -r key; do
        [[ -n $key ]] && parts+=("$key ${OUTCOME[$key]}")
    done < <(printf '%s\n' "${OUTCOME_KEYS[@]}" | LC_ALL=C sort)
    line=$(printf '%s, ' "${parts[@]}")
    printf 'probe %s: %s trials, seed %s, %.0f s | %s | failures %d\n' "$PROBE_NAME" "$TRIALS" "$PROBE_SEED" \
        "$elapsed" "${line%, }" "$NFAIL"
    ((NFAIL == 0))
}

# A converted copy of stories260K (GGUF): the probes' model.
make_stories_model() {
    kv convert-stories convert "$STORIES/stories260K.gguf" -o "$1" -q
    ((RC == 0)) || { echo "$PROBE_NAME: cannot convert stories260K: $(cat "$ERRF")" >&2; exit 2; }
}

# trial_rng TRIAL: reseeds bash's RANDOM from the seed and the trial, so a trial's choices do not depend on
# the trials before it.
trial_rng() { RANDOM=$(((PROBE_SEED * 7919 + $1 * 104729) % 2147483647)); }
