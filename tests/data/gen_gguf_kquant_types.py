# Generates gguf_kquant_types.gguf (a [2, 512] tensor of each type kvlm keeps besides f32/f16/bf16/q8_0/q4_0/q4_1:
# Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) and gguf_kquant_types.expected.f32 (the tensors
# dequantized by the gguf Python package, concatenated in file order) for tests/import/test_gguf.cpp. The blocks
# are random bytes with finite f16 scales in them, so every bit of every field is exercised (no quantizer
# needed). Run from tests/data: python3 gen_gguf_kquant_types.py
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# type -> (elements per block, bytes per block, byte offsets of its f16 scales)
LAYOUTS = {
    T.Q5_0: (32, 22, [0]), T.Q5_1: (32, 24, [0, 2]), T.IQ4_NL: (32, 18, [0]),
    T.Q2_K: (256, 84, [80, 82]), T.Q3_K: (256, 110, [108]), T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]), T.Q6_K: (256, 210, [208]), T.IQ4_XS: (256, 136, [0]),
}

rng = np.random.default_rng(11)
w = gguf.GGUFWriter("gguf_kquant_types.gguf", "llama")
expected = []
for qtype, (block, size, scales) in LAYOUTS.items():
    n_blocks = 2 * 512 // block
    raw = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for at in scales:  # finite scales of either sign, 1e-3 .. 1e-1
        d = (rng.uniform(1e-3, 1e-1, n_blocks) * rng.choice([-1, 1], n_blocks)).astype(np.float16)
        raw[:, at:at + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    data = raw.reshape(2, -1)
    w.add_tensor("t." + qtype.name.lower(), data, raw_dtype=qtype)
    expected.append(dequantize(data, qtype).astype(np.float32).reshape(-1))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
np.concatenate(expected).astype("<f4").tofile("gguf_kquant_types.expected.f32")
