#!/usr/bin/env bash
# Constrained-output figures (docs/CONSTRAINED.md), SmolLM2-135M-Instruct on the CPU:
#   corpus   every schema and regex of tests/data/constrained/ with SEEDS seeds (the first greedy, the others
#            sampled at kvlm's defaults), every output checked by tools/check_constrained.py
#   mask     decode tok/s of a --json answer and of an answer under a regex that allows every token against an
#            unconstrained one (-n 128 each, greedy; constrained runs without jump-forward, so that every token
#            is one forward), RUNS interleaved runs, medians
#   jump     whole-process wall time of the long_fixed_keys schema, greedy, with and without jump-forward,
#            RUNS interleaved runs, medians, outputs compared
#   peer     llama.cpp's llama-completion -jf beside kvlm --json-schema over every corpus schema (greedy): validity
#            and decode tok/s of both (needs the peer build of bench/peer_llamacpp.sh)
# Usage: bench/constrained.sh [corpus|mask|jump|peer ...] (default: corpus mask jump)
#   env: MODEL, SEEDS (3), RUNS (5), KVLM, PEER_CACHE, GGUF
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM=${KVLM:-./kvlm}
MODEL=${MODEL:-models/cache/smollm2-135m-instruct.kvlm}
SEEDS=${SEEDS:-3}
RUNS=${RUNS:-5}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(corpus mask jump)
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
decode_rate() { grep -o 'decode [0-9.]* tok/s' | grep -o '[0-9.]*'; }
seconds() {  # command... -> wall seconds of the whole process
    python3 -c 'import subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(f"{time.perf_counter() - t:.3f}")' "$@"
}

for part in "${parts[@]}"; do
case $part in
corpus)
    python3 - "$KVLM" "$MODEL" "$SEEDS" "$WORK" <<'PY'
import json, subprocess, sys
kvlm, model, n_seeds, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = "tests/data/constrained"
lines, failed_runs = [], 0
for kind, file in (("schema", "schemas.json"), ("regex", "regexes.json")):
    for case in json.load(open(f"{data}/{file}")):
        for seed in range(1, n_seeds + 1):
            args = [kvlm, "run", "-m", model, "--chat", "-p", case["prompt"], "-n", "400", "-t", "2", "-q",
                    "--seed", str(seed)] + (["--temp", "0"] if seed == 1 else [])
            args += ["--json-schema", json.dumps(case["schema"])] if kind == "schema" else ["--regex", case["regex"]]
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode != 0:
                failed_runs += 1
                print(f"{case['name']} seed {seed}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
            line = {"kind": kind, "name": case["name"], "seed": seed, "output": r.stdout}
            line[kind] = case[kind]
            lines.append(json.dumps(line))
open(f"{work}/cases.jsonl", "w").write("\n".join(lines) + "\n")
print(f"corpus: {len(lines)} runs ({n_seeds} seeds), {failed_runs} exited non-zero")
PY
    python3 tools/check_constrained.py "$WORK/cases.jsonl" | tail -5
    ;;
mask)
    # The unconstrained prompt writes past -n, so every run decodes 128 tokens; --regex '[\s\S]*' allows every
    # token (the largest masks), so its tokens are the unconstrained run's and the difference is the masks alone.
    story="Write a long story about a baker named Bob who finds a lost dog."
    prompt="List ten fictional employees of a small bakery with their names, ages, roles, start dates and favourite breads, as a JSON object."
    : > "$WORK/plain"; : > "$WORK/json"; : > "$WORK/any"; : > "$WORK/masks"
    for i in $(seq "$RUNS"); do
        "$KVLM" run -m "$MODEL" --chat -p "$story" -n 128 --temp 0 -t 2 -v 2>&1 >/dev/null | decode_rate >> "$WORK/plain"
        "$KVLM" run -m "$MODEL" --chat -p "$prompt" -n 128 --temp 0 -t 2 -v --json --no-jump-forward 2>"$WORK/err" >/dev/null || true
        decode_rate < "$WORK/err" >> "$WORK/json"
        grep -o 'masks .*per token)' "$WORK/err" >> "$WORK/masks" || true
        "$KVLM" run -m "$MODEL" --chat -p "$story" -n 128 --temp 0 -t 2 -v --regex '[\s\S]*' 2>&1 >/dev/null | decode_rate >> "$WORK/any"
    done
    p=$(median < "$WORK/plain"); j=$(median < "$WORK/json"); a=$(median < "$WORK/any")
    echo "mask: decode tok/s, 128 tokens each: unconstrained $(tr '\n' ' ' < "$WORK/plain")(median $p)"
    echo "mask: --json (another prompt, so other tokens) $(tr '\n' ' ' < "$WORK/json")(median $j, $(python3 -c "print(f'{$j / $p:.3f}')")x)"
    echo "mask: --regex '[\s\S]*' (the same tokens) $(tr '\n' ' ' < "$WORK/any")(median $a, $(python3 -c "print(f'{$a / $p:.3f}')")x)"
    echo "mask: mask time of the last --json run: $(tail -1 "$WORK/masks")"
    ;;
jump)
    python3 -c 'import json; [json.dump(c["schema"], open("'"$WORK"'/lfk.json", "w")) or print(c["prompt"], file=open("'"$WORK"'/lfk.prompt", "w"))
                for c in json.load(open("tests/data/constrained/schemas.json")) if c["name"] == "long_fixed_keys"]'
    prompt=$(cat "$WORK/lfk.prompt")
    args=(run -m "$MODEL" --chat -p "$prompt" -n 400 --temp 0 -t 2 --json-schema "$WORK/lfk.json")
    "$KVLM" "${args[@]}" -v > "$WORK/on.txt" 2> "$WORK/on.err"
    "$KVLM" "${args[@]}" -v --no-jump-forward > "$WORK/off.txt" 2> "$WORK/off.err"
    cmp -s "$WORK/on.txt" "$WORK/off.txt" && same=identical || same=DIFFERENT
    : > "$WORK/t_on"; : > "$WORK/t_off"
    for i in $(seq "$RUNS"); do
        seconds "$KVLM" "${args[@]}" >> "$WORK/t_on"
        seconds "$KVLM" "${args[@]}" --no-jump-forward >> "$WORK/t_off"
    done
    on=$(median < "$WORK/t_on"); off=$(median < "$WORK/t_off")
    echo "jump: long_fixed_keys, whole process: jump-forward $(tr '\n' ' ' < "$WORK/t_on")(median $on s); --no-jump-forward $(tr '\n' ' ' < "$WORK/t_off")(median $off s); speed-up $(python3 -c "print(f'{$off / $on:.2f}')")x; outputs $same"
    echo "jump: $(grep -o 'constraint: .*' "$WORK/on.err")"
    echo "jump: $(wc -c < "$WORK/on.txt") bytes: $(head -c 200 "$WORK/on.txt")"
    ;;
peer)
    # llama.cpp's llama-completion -jf (GBNF from the schema) beside kvlm --json-schema: every corpus schema,
    # greedy, the same raw ChatML prompt (SmolLM2's default system prompt) and the same Q4_1 GGUF / .kvlm;
    # both outputs validated by tools/check_constrained.py; decode tok/s as each reports it.
    PEER_BIN=${PEER_CACHE:-$HOME/.cache/kvlm-peer}/llama.cpp/build/bin
    GGUF=${GGUF:-models/cache/SmolLM2-135M-Instruct.Q4_1.gguf}
    [ -x "$PEER_BIN/llama-completion" ] || { echo "peer: run bench/peer_llamacpp.sh first (no $PEER_BIN/llama-completion)" >&2; exit 1; }
    python3 - "$KVLM" "$MODEL" "$PEER_BIN" "$GGUF" "$WORK" <<'PY'
import json, os, re, statistics, subprocess, sys
kvlm, model, peer_bin, gguf, work = sys.argv[1:6]
env = dict(os.environ, LD_LIBRARY_PATH=peer_bin)
cases = {"kvlm": [], "llama.cpp": []}
rates = {"kvlm": [], "llama.cpp": []}
failed = {"kvlm": 0, "llama.cpp": 0}
for case in json.load(open("tests/data/constrained/schemas.json")):
    prompt = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              f"<|im_start|>user\n{case['prompt']}<|im_end|>\n<|im_start|>assistant\n")
    open(f"{work}/p.txt", "w").write(prompt)
    json.dump(case["schema"], open(f"{work}/s.json", "w"))
    r = subprocess.run([f"{peer_bin}/llama-completion", "-m", gguf, "-f", f"{work}/p.txt", "-n", "400", "--temp", "0",
                        "-t", "2", "-no-cnv", "-jf", f"{work}/s.json"], capture_output=True, text=True, env=env)
    # llama-completion echoes the prompt without its special tokens and ends with " [end of text]": keep what
    # follows the last "assistant".
    out = r.stdout[r.stdout.rfind("assistant") + len("assistant"):].lstrip("\n").rstrip("\n")
    out = out[: -len(" [end of text]")] if out.endswith(" [end of text]") else out
    m = re.search(r"eval time =\s*[0-9.]+ ms /\s*[0-9]+ runs.*?([0-9.]+) tokens per second", r.stderr)
    if m: rates["llama.cpp"].append(float(m.group(1)))
    if r.returncode != 0: failed["llama.cpp"] += 1
    cases["llama.cpp"].append({"kind": "schema", "name": case["name"], "schema": case["schema"], "output": out})
    r = subprocess.run([kvlm, "run", "-m", model, "-p", prompt, "-n", "400", "--temp", "0", "-t", "2", "-v",
                        "--json-schema", f"{work}/s.json"], capture_output=True, text=True)
    m = re.search(r"decode ([0-9.]+) tok/s", r.stderr)
    if m: rates["kvlm"].append(float(m.group(1)))
    if r.returncode != 0: failed["kvlm"] += 1
    cases["kvlm"].append({"kind": "schema", "name": case["name"], "schema": case["schema"], "output": r.stdout})
for engine in cases:
    path = f"{work}/{engine}.jsonl"
    open(path, "w").write("\n".join(json.dumps(c) for c in cases[engine]) + "\n")
    check = subprocess.run(["python3", "tools/check_constrained.py", path], capture_output=True, text=True)
    summary = check.stdout.strip().splitlines()[-1] if check.stdout.strip() else check.stderr.strip()
    print(f"peer: {engine}: {len(cases[engine])} schemas, {failed[engine]} exited non-zero; {summary}; decode tok/s "
          f"median {statistics.median(rates[engine]):.1f} ({min(rates[engine]):.1f}-{max(rates[engine]):.1f})")
    if check.returncode != 0:
        for line in check.stdout.splitlines()[:-1][:8]: print(f"peer:   {line[:300]}")
PY
    ;;
*) echo "bench/constrained.sh: unknown part '$part' (corpus, mask, jump, peer)" >&2; exit 2 ;;
esac
done
