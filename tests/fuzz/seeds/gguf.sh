# Seeds for fuzz_gguf: stories260K.gguf whole and header-only; tiny llama models (1 layer, dim 32) rebuilt
# from its metadata with every importable tensor type (F32, F16, BF16, Q8_0, Q4_0, Q4_1), an untied output,
# llama3 rope_freqs and a byte-level BPE tokenizer; and the vocab-only GGUFs trimmed to 300 tokens.
set -euo pipefail
cp "$DATA/stories260K/stories260K.gguf" "$OUT_DIR/stories260K.gguf"
python3 - "$DATA" "$OUT_DIR" <<'EOF'
import math, struct, sys
import numpy as np

data_dir, out_dir = sys.argv[1], sys.argv[2]
SCALAR = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
STRING, ARRAY = 8, 9

class Reader:
    def __init__(self, b): self.b, self.p = b, 0
    def take(self, fmt):
        v = struct.unpack_from('<' + fmt, self.b, self.p); self.p += struct.calcsize('<' + fmt); return v[0]
    def string(self):
        n = self.take('Q'); s = self.b[self.p:self.p + n]; self.p += n; return s.decode('utf-8', 'replace')
    def value(self, t):
        if t in SCALAR: return self.take(SCALAR[t])
        if t == STRING: return self.string()
        et, n = self.take('I'), self.take('Q')
        return (et, [self.value(et) for _ in range(n)])

def read_metadata(path):  # -> list of (key, type, value); arrays are (element type, list)
    r = Reader(open(path, 'rb').read())
    assert r.take('I') == 0x46554747
    r.take('I'); r.take('Q'); n_kv = r.take('Q')
    out = []
    for _ in range(n_kv):
        k = r.string(); t = r.take('I'); out.append((k, t, r.value(t)))
    return out

def enc_string(s):
    b = s.encode('utf-8'); return struct.pack('<Q', len(b)) + b

def enc_value(t, v):
    if t in SCALAR: return struct.pack('<' + SCALAR[t], v)
    if t == STRING: return enc_string(v)
    et, items = v
    return struct.pack('<IQ', et, len(items)) + b''.join(enc_value(et, x) for x in items)

def write_gguf(path, kvs, tensors, alignment=32):  # tensors: (name, ggml dims ne0 first, ggml type, bytes)
    out = bytearray(struct.pack('<IIQQ', 0x46554747, 3, len(tensors), len(kvs)))
    for k, t, v in kvs: out += enc_string(k) + struct.pack('<I', t) + enc_value(t, v)
    offset, blobs = 0, []
    for name, dims, gtype, blob in tensors:
        out += enc_string(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        out += struct.pack('<IQ', gtype, offset)
        blobs.append((offset, blob)); offset += (len(blob) + alignment - 1) // alignment * alignment
    out += bytes(-len(out) % alignment)
    data = bytearray(offset)
    for o, blob in blobs: data[o:o + len(blob)] = blob
    open(path, 'wb').write(bytes(out + data))

def f16(x): return np.asarray(x, np.float32).astype(np.float16).tobytes()

def quantize(x, gtype):  # x: float32 rows with ne0 % 32 == 0 -> ggml bytes
    x = np.asarray(x, np.float32).reshape(-1)
    if gtype == 0: return x.tobytes()
    if gtype == 1: return f16(x)
    if gtype == 30: return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    out = bytearray()
    for b in x.reshape(-1, 32):
        if gtype == 8:
            d = float(np.abs(b).max()) / 127 or 1.0
            out += f16([d]) + np.clip(np.round(b / d), -127, 127).astype(np.int8).tobytes()
        elif gtype == 2:
            d = float(np.abs(b).max()) / 8 or 1.0
            q = np.clip(np.round(b / d) + 8, 0, 15).astype(np.uint8)
            out += f16([d]) + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
        elif gtype == 3:
            lo, hi = float(b.min()), float(b.max()); d = (hi - lo) / 15 or 1.0
            q = np.clip(np.round((b - lo) / d), 0, 15).astype(np.uint8)
            out += f16([d]) + f16([lo]) + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
    return bytes(out)

def meta_dict(kvs): return {k: (t, v) for k, t, v in kvs}

stories = read_metadata(f'{data_dir}/stories260K/stories260K.gguf')
write_gguf(f'{out_dir}/stories260K-header-only.gguf', stories, [])

# Tiny llama: kvlm shapes (outermost first) become GGUF dims reversed.
DIM, HEADS, KV_HEADS, FF, LAYERS, HEAD_DIM = 32, 4, 2, 32, 1, 8
rng = np.random.default_rng(7)

def tiny_model(path, kvs, n_vocab, gtype, untied=False, rope_freqs=None):
    hp = {'llama.embedding_length': DIM, 'llama.feed_forward_length': FF, 'llama.block_count': LAYERS,
          'llama.attention.head_count': HEADS, 'llama.attention.head_count_kv': KV_HEADS,
          'llama.rope.dimension_count': HEAD_DIM, 'llama.context_length': 64}
    kvs = [x for x in kvs if x[0] not in hp] + [(k, 4, v) for k, v in hp.items()]
    shapes = [('token_embd.weight', [n_vocab, DIM])]
    for suffix, shape in [('attn_norm.weight', [DIM]), ('attn_q.weight', [HEADS * HEAD_DIM, DIM]),
                          ('attn_k.weight', [KV_HEADS * HEAD_DIM, DIM]), ('attn_v.weight', [KV_HEADS * HEAD_DIM, DIM]),
                          ('attn_output.weight', [DIM, HEADS * HEAD_DIM]), ('ffn_norm.weight', [DIM]),
                          ('ffn_gate.weight', [FF, DIM]), ('ffn_up.weight', [FF, DIM]), ('ffn_down.weight', [DIM, FF])]:
        shapes += [(f'blk.{i}.{suffix}', shape) for i in range(LAYERS)]
    shapes.append(('output_norm.weight', [DIM]))
    if untied: shapes.append(('output.weight', [n_vocab, DIM]))
    tensors = []
    for name, shape in shapes:
        x = rng.normal(0, 0.02, size=shape).astype(np.float32)
        t = gtype if len(shape) == 2 else 0
        tensors.append((name, shape[::-1], t, quantize(x, t)))
    if rope_freqs is not None: tensors.append(('rope_freqs.weight', [len(rope_freqs)], 0, quantize(rope_freqs, 0)))
    write_gguf(path, kvs, tensors)

for name, gtype in [('f32', 0), ('f16', 1), ('bf16', 30), ('q8_0', 8), ('q4_0', 2), ('q4_1', 3)]:
    tiny_model(f'{out_dir}/tiny-llama-{name}.gguf', stories, 512, gtype)
tiny_model(f'{out_dir}/tiny-llama-untied.gguf', stories, 512, 0, untied=True)

def llama3_rope_freqs(theta, head_dim, factor=8.0, low=1.0, high=4.0, orig=8192):
    out = []
    for i in range(head_dim // 2):
        wavelen = 2 * math.pi * theta ** (2 * i / head_dim)
        if wavelen < orig / high: out.append(1.0)
        elif wavelen > orig / low: out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low); out.append(1 / ((1 - smooth) / factor + smooth))
    return out
rope_kvs = [(k, t, 500000.0 if k == 'llama.rope.freq_base' else v) for k, t, v in stories]
if 'llama.rope.freq_base' not in meta_dict(stories): rope_kvs.append(('llama.rope.freq_base', 6, 500000.0))
tiny_model(f'{out_dir}/tiny-llama3-rope-freqs.gguf', rope_kvs, 512, 0, rope_freqs=llama3_rope_freqs(500000.0, HEAD_DIM))

# Vocab-only files trimmed to their first 300 tokens (BPE: merges whose pieces all survive).
def trim_vocab(kvs, n):
    m = meta_dict(kvs)
    tokens = m['tokenizer.ggml.tokens'][1][1][:n]
    keep = set(tokens)
    out = []
    for k, t, v in kvs:
        if k in ('tokenizer.ggml.tokens', 'tokenizer.ggml.scores', 'tokenizer.ggml.token_type'):
            v = (v[0], v[1][:n])
        elif k == 'tokenizer.ggml.merges':
            v = (v[0], [x for x in v[1] if len(x.split(' ')) == 2 and all(p in keep for p in x.split(' ')) and
                        x.replace(' ', '') in keep])
        elif (k.endswith('_token_id') and t in (4, 5) and v >= n) or k == 'llama.vocab_size':
            continue
        out.append((k, t, v))
    return out

for name in ['gpt-2', 'llama-spm', 'phi-3', 'starcoder']:
    kvs = trim_vocab(read_metadata(f'{data_dir}/vocab-tests/ggml-vocab-{name}.gguf'), 300)
    write_gguf(f'{out_dir}/vocab-{name}-300.gguf', kvs, [])
    if name == 'gpt-2':  # a byte-level BPE model: gpt2 tokenizer in a tiny llama
        model_kvs = [x for x in stories if not x[0].startswith('tokenizer.')] + \
                    [x for x in kvs if x[0].startswith('tokenizer.')]
        model_kvs.append(('llama.vocab_size', 4, 320))  # padded past the tokenizer's 300 tokens
        tiny_model(f'{out_dir}/tiny-llama-bpe.gguf', model_kvs, 320, 0)
EOF
# The other block types (q5_0, q5_1, iq4_nl, the k-quants, iq4_xs): a tensor of each, and a small model
# whose matrices hold them all.
root=$(cd "$(dirname "$0")/../../.." && pwd)
cp "$root/tests/data/gguf_kquant_types.gguf" "$OUT_DIR/kquant-types.gguf"
python3 "$root/tests/data/gen_gguf_kquant_model.py" "$DATA/stories260K/stories260K.gguf" "$OUT_DIR/kquant-model.gguf"
