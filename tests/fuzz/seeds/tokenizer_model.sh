# Seeds for fuzz_tokenizer_model (selector byte, then files separated by "\n--- next file ---\n"):
# Llama 2's SentencePiece tokenizer.model trimmed to its first 600 pieces (the byte pieces included);
# Llama 3's tiktoken tokenizer.model trimmed to its first 1000 ranks, with its tokenizer_config.json whose
# first 16 special tokens are renumbered to follow them; Qwen2's vocab.json trimmed to 600 tokens with the
# merges among them and its added_tokens.json renumbered likewise; stories260K's llama2.c tok512.bin.
# Each as a file and as a directory (selector + 129).
set -euo pipefail
python3 - "$DATA" "$OUT_DIR" <<'PY'
import json, sys
data, out = sys.argv[1:3]
sep = b"\n--- next file ---\n"

def seed(name, selector, *files):
    for sel, suffix in ((selector, ""), (selector + 129, "-dir")):
        open(f"{out}/{name}{suffix}", "wb").write(bytes([sel]) + sep.join(files))

def varint(buf, pos):
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos

# SentencePiece ModelProto: keep the first 600 `pieces` (field 1) and every other top-level field.
proto = open(f"{data}/tokenizers/llama2/tokenizer.model", "rb").read()
kept, pos, n_pieces = bytearray(), 0, 0
while pos < len(proto):
    start = pos
    key, pos = varint(proto, pos)
    wire = key & 7
    if wire == 0:
        _, pos = varint(proto, pos)
    elif wire == 2:
        length, pos = varint(proto, pos)
        pos += length
    elif wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    if key >> 3 == 1:
        n_pieces += 1
        if n_pieces > 600:
            continue
    kept += proto[start:pos]
seed("llama2-spm-600.model", ord("0"), bytes(kept))

# tiktoken: the first 1000 ranks; special tokens renumbered from 1000.
ranks = open(f"{data}/tokenizers/llama3/tokenizer.model", "rb").read().split(b"\n")[:1000]
config = json.load(open(f"{data}/tokenizers/llama3/tokenizer_config.json"))
specials = sorted(config["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))[:16]
config["added_tokens_decoder"] = {str(1000 + k): v for k, (_, v) in enumerate(specials)}
config.pop("chat_template", None)
tiktoken = b"\n".join(ranks) + b"\n"
seed("llama3-tiktoken-1000.model", ord("0"), tiktoken, json.dumps(config, indent=1).encode())
seed("llama3-tiktoken-1000-no-config.model", ord("0"), tiktoken)

# GPT-2 style vocab.json + merges.txt (Qwen2), with added_tokens.json.
vocab = {p: i for p, i in json.load(open(f"{data}/tokenizers/qwen2/vocab.json")).items() if i < 600}
merges = ["#version: 0.2"]
for line in open(f"{data}/tokenizers/qwen2/merges.txt", encoding="utf-8").read().split("\n")[1:]:
    parts = line.split(" ")
    if len(parts) == 2 and parts[0] in vocab and parts[1] in vocab and parts[0] + parts[1] in vocab:
        merges.append(line)
added = json.load(open(f"{data}/tokenizers/qwen2/added_tokens.json"))
added = {token: 600 + k for k, token in enumerate(sorted(added, key=added.get))}
vocab_json = json.dumps(vocab, ensure_ascii=False).encode()
merges_txt = "\n".join(merges).encode() + b"\n"
seed("qwen2-600.vocab", ord("1"), vocab_json, merges_txt, json.dumps(added).encode())
seed("qwen2-600-no-added.vocab", ord("1"), vocab_json, merges_txt)

seed("stories260K-tok512.bin", ord("2"), open(f"{data}/stories260K/tok512.bin", "rb").read())
PY
