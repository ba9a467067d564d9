# Seeds for fuzz_safetensors (first byte = mode: 0 one file, 1 index + shard, 2 config.json + weights):
# stories260K/hf whole and cut to its small tensors (F32, F16, BF16, an I64 and __metadata__); a sharded
# index over the cut file; and tiny HF models (hidden 8, 1 layer, vocab 32: llama tied and untied in F32
# and BF16, qwen2 with q/k/v biases) plus the whole stories260K directory.
set -euo pipefail
python3 - "$DATA" "$OUT_DIR" <<'EOF'
import json, struct, sys
import numpy as np

data_dir, out_dir = sys.argv[1], sys.argv[2]
def save(name, mode, body): open(f'{out_dir}/{name}', 'wb').write(bytes([mode]) + body)
def pair(first, second): return struct.pack('<I', len(first)) + first + second

DTYPES = {'F32': np.float32, 'F16': np.float16, 'I64': np.int64}
def encode(x, dtype):
    if dtype == 'BF16': return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.asarray(x).astype(DTYPES[dtype]).tobytes()

def safetensors(tensors, metadata=None):  # tensors: [(name, dtype, array)]
    header, data = {}, b''
    if metadata: header['__metadata__'] = metadata
    for name, dtype, x in tensors:
        b = encode(x, dtype)
        header[name] = {'dtype': dtype, 'shape': list(np.shape(x)), 'data_offsets': [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    return struct.pack('<Q', len(h)) + h + data

stories_dir = f'{data_dir}/stories260K/hf'
whole = open(f'{stories_dir}/model.safetensors', 'rb').read()
save('stories260K.safetensors', 0, whole)
n = struct.unpack('<Q', whole[:8])[0]
header = json.loads(whole[8:8 + n])
def stories_tensor(name):
    b, e = header[name]['data_offsets']
    return np.frombuffer(whole[8 + n + b:8 + n + e], np.float32).reshape(header[name]['shape'])
norm = stories_tensor('model.norm.weight')
small = [('model.norm.weight', 'F32', norm),
         ('model.layers.0.input_layernorm.weight', 'F16', stories_tensor('model.layers.0.input_layernorm.weight')),
         ('model.layers.0.post_attention_layernorm.weight', 'BF16',
          stories_tensor('model.layers.0.post_attention_layernorm.weight')),
         ('position_ids', 'I64', np.arange(8)), ('empty', 'F32', np.zeros((0, 4)))]
cut = safetensors(small, {'format': 'pt'})
save('stories260K-small-tensors.safetensors', 0, cut)
index = {'metadata': {'total_size': len(cut)}, 'weight_map': {t[0]: 'model-00001-of-00001.safetensors' for t in small}}
save('sharded-index.bin', 1, pair(json.dumps(index, indent=2).encode(), cut))

config = json.load(open(f'{stories_dir}/config.json'))
save('stories260K-hf.bin', 2, pair(json.dumps(config, indent=2).encode(), whole))

HIDDEN, FF, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 8, 16, 1, 2, 1, 4, 32
rng = np.random.default_rng(5)
def w(*shape): return rng.normal(0, 0.1, size=shape).astype(np.float32)
def tiny(name, arch, dtype, tied=True, qkv_bias=False):
    cfg = dict(config, architectures=[arch], model_type=arch.replace('ForCausalLM', '').lower(), hidden_size=HIDDEN,
               intermediate_size=FF, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
               num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=VOCAB, max_position_embeddings=64,
               tie_word_embeddings=tied)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    ts = [('model.embed_tokens.weight', [VOCAB, HIDDEN]), ('model.norm.weight', [HIDDEN])]
    for l in range(LAYERS):
        p = f'model.layers.{l}.'
        ts += [(p + 'input_layernorm.weight', [HIDDEN]), (p + 'post_attention_layernorm.weight', [HIDDEN]),
               (p + 'self_attn.q_proj.weight', [q, HIDDEN]), (p + 'self_attn.k_proj.weight', [kv, HIDDEN]),
               (p + 'self_attn.v_proj.weight', [kv, HIDDEN]), (p + 'self_attn.o_proj.weight', [HIDDEN, q]),
               (p + 'mlp.gate_proj.weight', [FF, HIDDEN]), (p + 'mlp.up_proj.weight', [FF, HIDDEN]),
               (p + 'mlp.down_proj.weight', [HIDDEN, FF])]
        if qkv_bias:
            ts += [(p + 'self_attn.q_proj.bias', [q]), (p + 'self_attn.k_proj.bias', [kv]),
                   (p + 'self_attn.v_proj.bias', [kv])]
    if not tied: ts.append(('lm_head.weight', [VOCAB, HIDDEN]))
    weights = safetensors([(n, dtype, w(*s)) for n, s in ts])
    save(name, 2, pair(json.dumps(cfg, indent=2).encode(), weights))

tiny('tiny-llama-f32.bin', 'LlamaForCausalLM', 'F32')
tiny('tiny-llama-untied-bf16.bin', 'LlamaForCausalLM', 'BF16', tied=False)
tiny('tiny-mistral-f16.bin', 'MistralForCausalLM', 'F16')
tiny('tiny-qwen2-f32.bin', 'Qwen2ForCausalLM', 'F32', qkv_bias=True)
EOF
