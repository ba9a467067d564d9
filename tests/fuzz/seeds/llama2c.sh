# Seeds for fuzz_llama2c (first byte = mode: 0 checkpoint, 1 tokenizer.bin to its end, 2 tokenizer.bin of
# 512 tokens): stories260K.bin whole, tiny checkpoints (dim 8, 1 layer, vocab 32) in the legacy layout
# (shared and separate classifier), version 1 and version 2 (Q8_0); tok512.bin whole and cut to 40 tokens.
set -euo pipefail
python3 - "$DATA" "$OUT_DIR" <<'EOF'
import struct, sys
import numpy as np

data_dir, out_dir = sys.argv[1], sys.argv[2]
def save(name, mode, body): open(f'{out_dir}/{name}', 'wb').write(bytes([mode]) + body)

save('stories260K.bin', 0, open(f'{data_dir}/stories260K/stories260K.bin', 'rb').read())
tok = open(f'{data_dir}/stories260K/tok512.bin', 'rb').read()
save('tok512-to-end.bin', 1, tok)
save('tok512-n512.bin', 2, tok)
pos = 4  # cut after 40 tokens: f32 score, i32 length, bytes
for _ in range(40): pos += 8 + struct.unpack_from('<i', tok, pos + 4)[0]
save('tok512-first40.bin', 1, tok[:pos])

DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, SEQ = 8, 16, 1, 2, 1, 32, 16
HEAD = DIM // HEADS
KV_DIM = HEAD * KV_HEADS
rng = np.random.default_rng(3)
def w(*shape): return rng.normal(0, 0.1, size=shape).astype(np.float32)
embd, out = w(VOCAB, DIM), w(VOCAB, DIM)
attn_norm, ffn_norm, norm = w(LAYERS, DIM) + 1, w(LAYERS, DIM) + 1, w(DIM) + 1
wq, wk, wv, wo = w(LAYERS, DIM, DIM), w(LAYERS, KV_DIM, DIM), w(LAYERS, KV_DIM, DIM), w(LAYERS, DIM, DIM)
w1, w2, w3 = w(LAYERS, HIDDEN, DIM), w(LAYERS, DIM, HIDDEN), w(LAYERS, HIDDEN, DIM)
matrices = [wq, wk, wv, wo, w1, w2, w3]
def f32(*arrays): return b''.join(a.astype(np.float32).tobytes() for a in arrays)

def legacy(shared):
    header = struct.pack('<7i', DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB if shared else -VOCAB, SEQ)
    freq = np.zeros(2 * SEQ * HEAD // 2, np.float32)
    body = f32(embd, attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3, norm, freq)
    return header + body + (b'' if shared else f32(out))

def versioned_header(version, shared, group_size=0):
    h = struct.pack('<Ii7iB', 0x616b3432, version, DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, SEQ, int(shared))
    if version == 2: h += struct.pack('<i', group_size)
    return h + bytes(256 - len(h))

def q8_0(x, group_size):  # int8 values then one f32 scale per group
    g = x.reshape(-1, group_size)
    scale = np.abs(g).max(axis=1) / 127
    q = np.round(g / np.where(scale == 0, 1, scale)[:, None]).astype(np.int8)
    return q.tobytes() + scale.astype(np.float32).tobytes()

save('tiny-legacy-shared.bin', 0, legacy(True))
save('tiny-legacy-unshared.bin', 0, legacy(False))
save('tiny-v1-unshared.bin', 0, versioned_header(1, False) + f32(attn_norm, ffn_norm, norm, embd, *matrices, out))
v2 = versioned_header(2, True, 8) + f32(attn_norm, ffn_norm, norm) + q8_0(embd, 8)
v2 += b''.join(q8_0(m[l], 8) for m in matrices for l in range(LAYERS))
save('tiny-v2-q8_0.bin', 0, v2)
EOF
