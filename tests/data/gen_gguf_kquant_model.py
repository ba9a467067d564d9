# Writes a small llama GGUF whose matrices are random blocks of every quantized type kvlm keeps (tests run it
# at test time: tests/import/test_kquant_model.cpp). Shape: n_embd 256, 2 layers, 4 heads of 64, 2 KV heads,
# n_ff 512, the tokenizer (512 pieces) copied from the GGUF given. No quantizer exists for most of these types
# in the gguf package, so each block's bytes are random, its f16 scales finite and of either sign, and the
# scales then scaled so the tensor's largest value is a chosen amplitude (every value is linear in them).
# Usage: python3 gen_gguf_kquant_model.py TOKENIZER.gguf OUT.gguf
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# type -> (elements per block, bytes per block, byte offsets of its f16 scales)
LAYOUTS = {
    T.Q8_0: (32, 34, [0]), T.Q4_0: (32, 18, [0]), T.Q4_1: (32, 20, [0, 2]),
    T.Q5_0: (32, 22, [0]), T.Q5_1: (32, 24, [0, 2]), T.IQ4_NL: (32, 18, [0]),
    T.Q2_K: (256, 84, [80, 82]), T.Q3_K: (256, 110, [108]), T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]), T.Q6_K: (256, 210, [208]), T.IQ4_XS: (256, 136, [0]),
}
N_EMBD, N_LAYERS, N_HEADS, N_KV_HEADS, HEAD_DIM, N_FF = 256, 2, 4, 2, 64, 512
# Every type in one model (ffn_down's 512 inputs and the others' 256 are whole super-blocks).
LAYER_TYPES = [
    {"attn_q": T.Q5_0, "attn_k": T.Q5_1, "attn_v": T.IQ4_NL, "attn_output": T.Q2_K,
     "ffn_gate": T.Q3_K, "ffn_up": T.Q4_K, "ffn_down": T.Q5_K},
    {"attn_q": T.IQ4_XS, "attn_k": T.Q6_K, "attn_v": T.Q8_0, "attn_output": T.Q4_0,
     "ffn_gate": T.Q4_1, "ffn_up": T.Q5_K, "ffn_down": T.IQ4_XS},
]

rng = np.random.default_rng(47)


def random_blocks(qtype, rows, cols, amplitude):
    block, size, scales = LAYOUTS[qtype]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for at in scales:
        d = (rng.uniform(0.5, 1.0, n_blocks) * rng.choice([-1, 1], n_blocks)).astype(np.float16)
        raw[:, at:at + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    largest = np.abs(dequantize(raw.reshape(rows, -1), qtype)).max()
    for at in scales:
        d = raw[:, at:at + 2].copy().view(np.float16).astype(np.float32) * (amplitude / largest)
        raw[:, at:at + 2] = d.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, -1)


def main(tokenizer_path, out_path):
    src = gguf.GGUFReader(tokenizer_path)
    field = lambda name: src.fields[name]
    tokens = [bytes(field("tokenizer.ggml.tokens").parts[i]).decode() for i in field("tokenizer.ggml.tokens").data]
    scores = [float(field("tokenizer.ggml.scores").parts[i][0]) for i in field("tokenizer.ggml.scores").data]
    types = [int(field("tokenizer.ggml.token_type").parts[i][0]) for i in field("tokenizer.ggml.token_type").data]
    scalar = lambda name: int(field(name).parts[field(name).data[0]][0])
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(out_path, "llama")
    w.add_name("random k-quant test model")
    w.add_context_length(512)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYERS)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEADS)
    w.add_head_count_kv(N_KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(scalar("tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(scalar("tokenizer.ggml.eos_token_id"))
    w.add_unk_token_id(scalar("tokenizer.ggml.unknown_token_id"))

    def matrix(name, qtype, rows, cols, amplitude):
        w.add_tensor(name, random_blocks(qtype, rows, cols, amplitude), raw_dtype=qtype)

    def norm(name, n):
        w.add_tensor(name, rng.uniform(0.8, 1.2, n).astype(np.float32))

    matrix("token_embd.weight", T.Q4_K, n_vocab, N_EMBD, 1.0)
    for i, kinds in enumerate(LAYER_TYPES):
        norm(f"blk.{i}.attn_norm.weight", N_EMBD)
        q, kv = N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM
        shapes = {"attn_q": (q, N_EMBD), "attn_k": (kv, N_EMBD), "attn_v": (kv, N_EMBD),
                  "attn_output": (N_EMBD, q), "ffn_gate": (N_FF, N_EMBD), "ffn_up": (N_FF, N_EMBD),
                  "ffn_down": (N_EMBD, N_FF)}
        for role, qtype in kinds.items():
            rows, cols = shapes[role]
            matrix(f"blk.{i}.{role}.weight", qtype, rows, cols, 2.0 / np.sqrt(cols))
        norm(f"blk.{i}.ffn_norm.weight", N_EMBD)
    norm("output_norm.weight", N_EMBD)
    matrix("output.weight", T.Q6_K, n_vocab, N_EMBD, 0.25)  # logits of a few units: a peaked distribution
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gen_gguf_kquant_model.py TOKENIZER.gguf OUT.gguf")
    main(sys.argv[1], sys.argv[2])
