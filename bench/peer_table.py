#!/usr/bin/env python3
"""One markdown table of kvlm beside llama.cpp from their own JSON: `llama-bench -o json` and
`kvlm bench -o json` runs of the same model (tools/gpu_session.sh's peer stage). Rows are matched by test:
prompt processing (pp N) and generation (tg N), each at its context depth; a test only one engine ran is an
error, never a row with a blank.

Usage: peer_table.py LABEL LLAMA_BENCH.json KVLM_BENCH.json [--header]
"""
import json
import sys


def test_name(key):
    depth, kind, n = key
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")


def llama_rows(path):
    rows = {}
    for r in json.load(open(path)):
        kind, n = ("pp", r["n_prompt"]) if r["n_gen"] == 0 else ("tg", r["n_gen"])
        rows[(r.get("n_depth", 0), kind, n)] = (r["avg_ts"], r["stddev_ts"])
    return rows


def kvlm_rows(path):
    rows = {}
    for r in json.load(open(path))["results"]:
        if r["kind"] not in ("prefill", "decode"):
            continue
        kind = "pp" if r["kind"] == "prefill" else "tg"
        tps = r["tokens_per_second"]
        rows[(r.get("depth", 0), kind, r["n_tokens"])] = (tps["mean"], tps["stddev"])
    return rows


def main():
    args = [a for a in sys.argv[1:] if a != "--header"]
    if len(args) != 3:
        sys.exit(__doc__)
    label, peer_path, kvlm_path = args
    try:
        peer, ours = llama_rows(peer_path), kvlm_rows(kvlm_path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"peer_table: error: {e!r}")
    if set(peer) != set(ours):
        names = lambda rows: ", ".join(test_name(k) for k in sorted(rows))
        sys.exit(f"peer_table: error: {label}: llama.cpp ran {names(peer)}; kvlm ran {names(ours)}")
    if "--header" in sys.argv:
        print("| model | test | llama.cpp t/s | kvlm t/s | kvlm / llama.cpp |")
        print("| --- | --- | ---: | ---: | ---: |")
    for key in sorted(peer):  # by depth, then pp before tg
        (p, p_sd), (k, k_sd) = peer[key], ours[key]
        print(f"| {label} | {test_name(key)} | {p:,.1f} ± {p_sd:,.1f} | {k:,.1f} ± {k_sd:,.1f} | {k / p:.2f} |")


if __name__ == "__main__":
    main()
