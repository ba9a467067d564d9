# Seeds for fuzz_chat_template: every real chat template in the shared data (chat-templates/*.jinja, the
# SmolLM2 one, the Jinja templates of the ollama index), the repository's test templates and the
# built-in templates of src/chat/chat_template.cpp.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
n=0
for file in "$DATA"/tokenizers/chat-templates/*.jinja "$DATA"/tokenizers/smollm2/chat_template.jinja \
    "$root"/tests/data/templates/*.jinja; do
    n=$((n + 1))
    cp "$file" "$OUT_DIR/$(basename "$(dirname "$file")")-$(basename "$file")"
done
python3 - "$DATA/tokenizers/chat-templates/ollama_template_index.json" "$root/src/chat/chat_template.cpp" "$OUT_DIR" <<'PY'
import json, re, sys
index, source, out = sys.argv[1:4]
for k, entry in enumerate(json.load(open(index))):
    text = entry.get("template", "")
    if "{%" in text or "{{" in text:
        open(f"{out}/ollama-index-{k}.jinja", "w").write(text)
for name, text in re.findall(r'\{"(\w+)",\s*R"JINJA\((.*?)\)JINJA"\}', open(source).read(), re.S):
    open(f"{out}/builtin-{name}.jinja", "w").write(text)
PY
