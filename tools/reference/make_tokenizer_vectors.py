#!/usr/bin/env python3
"""Writes the reference token ids kvlm's tokenizer tests compare against:
- tests/data/smollm2_starcoder_vectors.json: what Hugging Face `tokenizers` gives for SmolLM2's tokenizer.json on
  llama.cpp's starcoder vocab-test strings (plus chat-formatted strings with special tokens), to check kvlm's
  byte-level BPE + "smollm" pre-tokenizer.
- tests/data/llama2c_tok512_vectors.json: what llama2.c's encode() (run.c, transcribed below) gives with
  stories260K's tok512.bin, to check that kvlm's spm encoder reproduces llama2.c exactly.

usage: python3 tools/reference/make_tokenizer_vectors.py [DATA_DIR]   (default: $KVLM_TEST_DATA or ../shared/models)
"""
import json
import os
import struct
import sys

import tokenizers

SEPARATOR = "\n__ggml_vocab_test__\n"

# Strings with special tokens: HF always matches added special tokens, i.e. kvlm's parse_special=true.
SPECIAL_TEXTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "<|im_start|>assistant\n12345 apples<|im_end|><|endoftext|>",
    "a<|im_start|>b <|im_end|> c",
]

# Control characters, some of which (\x04, \x06, \x14, ...) have no token in SmolLM2's vocabulary: HF drops them.
CONTROL_TEXTS = [
    "a\x04b",
    "\x04",
    "\x00\x01\x02\x7f end",
    "tab\tbell\x07 \x1b[0m \x06\x13\x14\x16\x1d done",
]


def read_inputs(path):
    with open(path, encoding="utf-8", newline="") as f:
        raw = f.read()
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEPARATOR, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEPARATOR)
    return texts


LLAMA2C_TEXTS = [
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "",
    " leading space",
    "two  spaces and\nnew lines\n\n",
    "Tom's cat said: \"Hi!\" 123 4567",
    "na\u00efve caf\u00e9 \u00bd",
    "\U0001f999 llama \u4f60\u597d",
    "\t tab",
]


def read_llama2c_tokenizer(path):
    with open(path, "rb") as f:
        data = f.read()
    (max_len,) = struct.unpack_from("<i", data, 0)
    pos, vocab, scores = 4, [], []
    while pos < len(data):
        score, n = struct.unpack_from("<fi", data, pos)
        pos += 8
        vocab.append(data[pos:pos + n])
        scores.append(score)
        pos += n
    return vocab, scores


def llama2c_encode(vocab, scores, text):
    """run.c encode(t, text, bos=1, eos=0): dummy prefix, per-codepoint lookup with byte fallback (+3),
    then repeatedly merge the leftmost best-scoring adjacent pair."""
    lookup = {}
    for i, piece in enumerate(vocab):
        lookup.setdefault(piece, i)
    tokens = [1]
    raw = text.encode("utf-8")
    if raw:
        tokens.append(lookup[b" "])
    i = 0
    while i < len(raw):
        j = i + 1
        while j < len(raw) and (raw[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        chunk = raw[i:j]
        if chunk in lookup:
            tokens.append(lookup[chunk])
        else:
            tokens.extend(b + 3 for b in chunk)
        i = j
    while True:
        best_score, best_id, best_idx = -1e10, -1, -1
        for k in range(len(tokens) - 1):
            merged = vocab[tokens[k]] + vocab[tokens[k + 1]]
            tid = lookup.get(merged, -1)
            if tid != -1 and scores[tid] > best_score:
                best_score, best_id, best_idx = scores[tid], tid, k
        if best_idx == -1:
            break
        tokens[best_idx:best_idx + 2] = [best_id]
    return tokens


def write_vectors(path, header, tests):
    with open(path, "w", encoding="utf-8") as f:  # one test per line: small, diff-friendly
        f.write("{\n")
        for key, value in header.items():
            f.write(f"{json.dumps(key)}: {json.dumps(value)},\n")
        f.write('"tests": [\n' + ",\n".join(json.dumps(t, ensure_ascii=True) for t in tests) + "\n]}\n")
    print(f"wrote {len(tests)} tests to {path}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    data = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KVLM_TEST_DATA", os.path.join(repo, "..", "shared", "models"))
    tok = tokenizers.Tokenizer.from_file(os.path.join(data, "tokenizers", "smollm2", "tokenizer.json"))
    texts = read_inputs(os.path.join(data, "vocab-tests", "ggml-vocab-starcoder.gguf.inp"))
    tests = [{"text": t, "parse_special": False, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]
    tests += [{"text": t, "parse_special": True, "ids": tok.encode(t, add_special_tokens=False).ids} for t in SPECIAL_TEXTS]
    tests += [{"text": t, "parse_special": False, "ids": tok.encode(t, add_special_tokens=False).ids} for t in CONTROL_TEXTS]
    write_vectors(os.path.join(repo, "tests", "data", "smollm2_starcoder_vectors.json"), {
        "source": "tokenizers/smollm2/tokenizer.json + vocab-tests/ggml-vocab-starcoder.gguf.inp",
        "generator": "tools/reference/make_tokenizer_vectors.py, tokenizers " + tokenizers.__version__,
    }, tests)

    vocab, scores = read_llama2c_tokenizer(os.path.join(data, "stories260K", "tok512.bin"))
    tests = [{"text": t, "ids": llama2c_encode(vocab, scores, t)} for t in LLAMA2C_TEXTS]
    write_vectors(os.path.join(repo, "tests", "data", "llama2c_tok512_vectors.json"), {
        "source": "stories260K/tok512.bin, encoded with BOS as llama2.c run.c encode() does",
        "generator": "tools/reference/make_tokenizer_vectors.py",
    }, tests)


if __name__ == "__main__":
    main()
