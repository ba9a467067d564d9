# Generates gguf_quant_types.gguf (one small tensor per supported ggml type, plus metadata of every value type
# including nested arrays) and gguf_quant_types.expected.f32 (the tensors dequantized by the gguf Python package,
# concatenated in file order, without the final IQ2_XXS tensor) for tests/import/test_gguf.cpp. Run from tests/data: python3 gen_gguf_quant_types.py
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize, dequantize

rng = np.random.default_rng(7)
w = gguf.GGUFWriter("gguf_quant_types.gguf", "llama")
w.add_uint32("test.u32", 4000000000)
w.add_int32("test.i32", -7)
w.add_uint64("test.u64", 1 << 40)
w.add_float32("test.f32", 0.25)
w.add_float64("test.f64", -1.5)
w.add_bool("test.bool", True)
w.add_string("test.string", "héllo")
w.add_array("test.strings", ["a", "", "ccc"])
w.add_array("test.floats", [1.0, 2.5, -3.0])
w.add_array("test.ints", [1, -2, 3])
w.add_array("test.nested", [[1, 2], [3]])
expected = []
for name, t in [("t.f32", T.F32), ("t.f16", T.F16), ("t.bf16", T.BF16), ("t.q8_0", T.Q8_0),
                ("t.q4_0", T.Q4_0), ("t.q4_1", T.Q4_1)]:
    x = (rng.standard_normal((3, 64)) * 0.1).astype(np.float32)
    q = quantize(x, t) if t not in (T.F32,) else x
    deq = dequantize(q, t).astype(np.float32) if t != T.F32 else x
    w.add_tensor(name, q, raw_shape=x.shape if t == T.F32 else None, raw_dtype=None if t == T.F32 else t)
    expected.append(deq.reshape(-1))
# A type kvlm refuses (IQ2_XXS: 256-element blocks of 66 bytes); not part of the expected values.
w.add_tensor("t.iq2_xxs", rng.integers(0, 255, (1, 66), dtype=np.uint8), raw_dtype=T.IQ2_XXS)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
np.concatenate(expected).astype("<f4").tofile("gguf_quant_types.expected.f32")
