# Generates quantizer_reference.json for tests/import/test_convert.cpp: the XXH3-64 checksum (what a .kvlm
# directory stores per tensor) of every stories260K matrix quantized to Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 by the
# gguf Python package's reference quantizer, so that `kvlm convert --dtype q8_0|q4_0|q4_1|q5_0|q5_1` is checked
# to give the same blocks, byte for byte, on real trained weights. Matrices whose rows are not whole 32-element blocks
# (ffn_down: 172 columns) are left out: kvlm keeps them f16.
# Run from tests/data with the shared models at KVLM_TEST_DATA (default ../../../shared/models):
#   pip install gguf xxhash numpy && python3 gen_quantizer_reference.py
import json, os, struct
import numpy as np
import xxhash
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

data = os.environ.get("KVLM_TEST_DATA", os.path.join(os.path.dirname(__file__), "../../../shared/models"))
path = os.path.join(data, "stories260K/hf/model.safetensors")
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    blob = f.read()

# Hugging Face names -> kvlm names (HF q/k rows are already in kvlm's rotate_half order).
suffixes = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
            "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
            "mlp.down_proj": "ffn_down"}
def kvlm_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    parts = hf.split(".")
    if parts[0] == "model" and parts[1] == "layers":
        key = ".".join(parts[3:5])
        if key in suffixes:
            return f"blk.{parts[2]}.{suffixes[key]}.weight"
    return None

out = {}
for qtype, name in [(T.Q8_0, "q8_0"), (T.Q4_0, "q4_0"), (T.Q4_1, "q4_1"), (T.Q5_0, "q5_0"), (T.Q5_1, "q5_1")]:
    sums = {}
    for hf, info in header.items():
        if hf == "__metadata__" or len(info["shape"]) != 2 or kvlm_name(hf) is None:
            continue
        if info["shape"][1] % 32 != 0:
            continue
        begin, end = info["data_offsets"]
        x = np.frombuffer(blob[begin:end], dtype=np.float32).reshape(info["shape"])
        sums[kvlm_name(hf)] = format(xxhash.xxh3_64_intdigest(quantize(x, qtype).tobytes()), "016x")
    out[name] = dict(sorted(sums.items()))
with open("quantizer_reference.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print({k: len(v) for k, v in out.items()})
