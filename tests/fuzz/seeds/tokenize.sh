# Seeds for fuzz_tokenize: llama.cpp's tokenizer test strings (vocab-tests/*.inp, one per test block) for
# each of the four tokenizers, plus chat-formatted text with special tokens parsed (and BOS added).
set -euo pipefail
python3 - "$DATA/vocab-tests" "$OUT_DIR" <<'PY'
import glob, hashlib, sys
tests, out = sys.argv[1:3]
texts = set()
for path in glob.glob(f"{tests}/*.inp"):
    for block in open(path, "rb").read().split(b"\n__ggml_vocab_test__\n"):
        texts.add(block)
texts |= {b"<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
          b"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
          b"<s>[INST] Hi there [/INST] Hello</s>"}
for text in sorted(texts):
    digest = hashlib.sha1(text).hexdigest()[:12]
    for tokenizer in range(4):
        open(f"{out}/{digest}-{tokenizer}", "wb").write(bytes([tokenizer]) + text)
    open(f"{out}/{digest}-special", "wb").write(bytes([12 | (text[0] % 4 if text else 0)]) + text)
PY
