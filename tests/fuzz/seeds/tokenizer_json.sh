# Seeds for fuzz_tokenizer_json: SmolLM2's tokenizer.json trimmed to its first 400 tokens and the merges
# among them (with and without its tokenizer_config.json after the separator), the same vocabulary with the
# other pre-tokenizers kvlm recognizes (gpt2, Llama 3 and Qwen2 Split regexes) and pair-style merges, and a
# small SentencePiece-style (Metaspace, byte fallback) tokenizer.json.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
python3 - "$DATA/tokenizers/smollm2" "$root/src/import/tokenizer/from_hf.cpp" "$OUT_DIR" <<'PY'
import copy, json, re, sys
src, importer, out = sys.argv[1:4]
sep = "\n--- tokenizer_config.json ---\n"
n_keep = 400
tok = json.load(open(f"{src}/tokenizer.json"))
config = json.load(open(f"{src}/tokenizer_config.json"))
vocab = {p: i for p, i in tok["model"]["vocab"].items() if i < n_keep}
merges = []
for m in tok["model"]["merges"]:
    a, b = m.split(" ", 1) if isinstance(m, str) else m
    if a in vocab and b in vocab and a + b in vocab:
        merges.append(m)
tok["model"]["vocab"], tok["model"]["merges"] = vocab, merges
tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < n_keep]
config["added_tokens_decoder"] = {k: v for k, v in config["added_tokens_decoder"].items() if int(k) < n_keep}

def write(name, tokenizer, cfg=None):
    text = json.dumps(tokenizer, ensure_ascii=False, indent=1)
    if cfg is not None:
        text += sep + json.dumps(cfg, ensure_ascii=False, indent=1)
    open(f"{out}/{name}", "w").write(text)

write("smollm2-400.json", tok)
write("smollm2-400-config.json", tok, config)
pairs = copy.deepcopy(tok)
pairs["model"]["merges"] = [m.split(" ", 1) for m in merges]
write("smollm2-400-pair-merges.json", pairs)
gpt2 = copy.deepcopy(tok)
gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
write("gpt2-style.json", gpt2)
regexes = dict(re.findall(r'k(Llama3|Qwen2)Regex =\s*R"\((.*?)\)";', open(importer).read(), re.S))
for name, regex in regexes.items():
    split = copy.deepcopy(tok)
    split["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    split["post_processor"] = {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}
    write(f"{name.lower()}-split.json", split, config)

# SentencePiece-style BPE as Llama 2 / Mistral tokenizer.json files have it.
pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
pieces += ["\u2581", "h", "e", "l", "o", "w", "r", "d", "\u2581h", "he", "ll", "\u2581he", "llo", "\u2581hello",
           "\u2581w", "or", "\u2581wor", "ld", "\u2581world", "1", "2", "3"]
spm_merges = ["\u2581 h", "h e", "l l", "\u2581h e", "ll o", "\u2581he llo", "\u2581 w", "o r", "\u2581w or",
              "l d", "\u2581wor ld"]
spm = {
    "version": "1.0",
    "added_tokens": [{"id": i, "content": p, "special": True} for i, p in enumerate(pieces[:3])],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                               {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
              "vocab": {p: i for i, p in enumerate(pieces)}, "merges": spm_merges},
}
write("spm-style.json", spm, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True})
PY
