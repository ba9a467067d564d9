# Seeds for fuzz_constraint: every regex (first byte 0) and JSON Schema (first byte 1) of the corpus in
# tests/data/constrained/, each followed by a NUL and one of its matches (or a made-up JSON text) to walk.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
python3 - "$root/tests/data/constrained" "$OUT_DIR" <<'PY'
import json, sys
data, out = sys.argv[1:3]
for k, case in enumerate(json.load(open(f"{data}/regexes.json"))):
    walk = case["matches"][0] if case["matches"] else ""
    open(f"{out}/regex-{k}", "wb").write(b"\x00" + case["regex"].encode() + b"\x00" + walk.encode())
for k, case in enumerate(json.load(open(f"{data}/schemas.json"))):
    schema = case["schema"]
    example = schema.get("examples", [None])[0] if isinstance(schema, dict) else None
    walk = json.dumps(example) if example is not None else '{"name": "x", "id": 1}'
    open(f"{out}/schema-{k}", "wb").write(b"\x01" + json.dumps(schema).encode() + b"\x00" + walk.encode())
PY
