#!/usr/bin/env python3
"""Writes a .kvlm model (llama architecture) as a GGUF file, so llama.cpp runs the very same weights and
tokenizer side by side with kvlm (tools/gpu_session.sh's `peer` stage: llama-bench on the GPU).

Reads the file through kvlm_file.py and writes GGUF v3 with the standard library only (no numpy, no
gguf package: the GPU machine has neither for certain). Tensors keep their type (f32, f16, bf16, and the
quantized q8_0/q4_0/q4_1 blocks, which are GGUF's layouts byte for byte); q/k rows go back from kvlm's
rotate_half order to GGUF's interleaved one, as llama.cpp's converter permutes them; Llama 3 RoPE scaling
becomes a rope_freqs.weight tensor, as that converter writes it.

Checked in tests/tools/test_export_gguf.cpp: stories260K's export holds the tensors of llama.cpp's own GGUF
byte for byte, and `kvlm convert OUT.gguf` gives the source's fingerprint (weights, tokenizer, hyperparameters).

Usage: export_gguf.py MODEL.kvlm OUT.gguf [--set KEY=TYPE:VALUE ...] [--add-tensor NAME:N ...]
  --set        one more metadata key (TYPE u32, i32, f32, bool or string), after the model's own
  --add-tensor one more f32 tensor of N zeros
(both for tests: a GGUF carrying a key or tensor kvlm does not implement, which convert must refuse by name)
"""
import math
import os
import struct
import sys

from kvlm_file import read_kvlm

# kvlm DType -> (GGML type id, elements per block, bytes per block)
GGML_TYPES = {0: (0, 1, 4), 1: (1, 1, 2), 2: (30, 1, 2), 3: (8, 32, 34), 4: (2, 32, 18), 5: (3, 32, 20),
              6: (6, 32, 22), 7: (7, 32, 24), 8: (10, 256, 84), 9: (11, 256, 110), 10: (12, 256, 144),
              11: (13, 256, 176), 12: (14, 256, 210), 13: (20, 32, 18), 14: (23, 256, 136)}
ALIGNMENT = 32
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9


def rope_factors(m):
    """llama.cpp's rope_freqs.weight for Llama 3 scaling: per frequency, the divisor of its RoPE frequency."""
    factor, low, high = m["rope.scaling.factor"], m["rope.scaling.low_freq_factor"], m["rope.scaling.high_freq_factor"]
    original = m["rope.scaling.original_max_position"]
    if (low, high, original) != (1.0, 4.0, 8192):
        # kvlm's GGUF import recovers the parameters from the tensor assuming these (as Llama 3.1/3.2 use).
        raise ValueError(f"llama3 RoPE scaling with low {low}, high {high}, original context {original}: "
                         "a GGUF rope_freqs tensor carries only low 1, high 4, original 8192")
    head_dim, theta = m["head_dim"], m["rope.theta"]
    out = []
    for i in range(head_dim // 2):
        freq = 1.0 / theta ** (2.0 * i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return struct.pack(f"<{len(out)}f", *out)


def interleaved_rows(data, n_rows, head_dim):
    """q/k rows from rotate_half order (HF's, kvlm's) to GGUF's interleaved order: GGUF row h*hd + 2j + s is
    kvlm row h*hd + s*hd/2 + j."""
    row_bytes = len(data) // n_rows
    half = head_dim // 2
    out = bytearray(len(data))
    for row in range(n_rows):
        head, rest = divmod(row, head_dim)
        j, s = divmod(rest, 2)
        src = head * head_dim + s * half + j
        out[row * row_bytes:(row + 1) * row_bytes] = data[src * row_bytes:(src + 1) * row_bytes]
    return out


class GgufWriter:
    def __init__(self):
        self.kv = []  # (key, encoded type + value)

    @staticmethod
    def string(s):
        b = s if isinstance(s, bytes) else s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def add(self, key, gguf_type, value):
        if gguf_type == GGUF_STRING:
            body = self.string(value)
        elif gguf_type == GGUF_BOOL:
            body = struct.pack("<?", value)
        else:
            body = struct.pack({GGUF_U32: "<I", GGUF_I32: "<i", GGUF_F32: "<f"}[gguf_type], value)
        self.kv.append((key, struct.pack("<I", gguf_type) + body))

    def add_array(self, key, gguf_type, values):
        if gguf_type == GGUF_STRING:
            body = b"".join(self.string(v) for v in values)
        else:
            body = struct.pack(f"<{len(values)}" + {GGUF_I32: "i", GGUF_F32: "f"}[gguf_type], *values)
        self.kv.append((key, struct.pack("<IIQ", GGUF_ARRAY, gguf_type, len(values)) + body))

    def write(self, path, tensors):
        """tensors: (name, ggml type, GGUF dims (innermost first), bytes-like)."""
        infos, offset = [], 0
        for name, ggml_type, dims, data in tensors:
            infos.append(self.string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset))
            offset += len(data) + (-len(data) % ALIGNMENT)
        with open(path + ".part", "wb") as f:  # renamed when whole: a failed export leaves no GGUF behind
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(self.kv)))
            for key, value in self.kv:
                f.write(self.string(key) + value)
            for info in infos:
                f.write(info)
            f.write(b"\0" * (-f.tell() % ALIGNMENT))
            for i, (_, _, _, data) in enumerate(tensors):
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGNMENT))
                if sys.stderr.isatty():
                    print(f"\rexport: {i + 1}/{len(tensors)} tensors", end="", file=sys.stderr)
        os.replace(path + ".part", path)
        if sys.stderr.isatty():
            print(file=sys.stderr)


def add_tokenizer(w, m):
    spm = m["tokenizer.type"] == "spm"
    w.add("tokenizer.ggml.model", GGUF_STRING, "llama" if spm else "gpt2")
    if not spm:
        pre = m.get("tokenizer.pre") or "default"
        w.add("tokenizer.ggml.pre", GGUF_STRING, "gpt-2" if pre == "gpt2" else pre)  # llama.cpp's name for it
    w.add_array("tokenizer.ggml.tokens", GGUF_STRING, m["tokenizer.tokens"])
    if m.get("tokenizer.scores"):
        w.add_array("tokenizer.ggml.scores", GGUF_F32, m["tokenizer.scores"])
    w.add_array("tokenizer.ggml.token_type", GGUF_I32, m["tokenizer.token_types"])
    if m.get("tokenizer.merges"):
        w.add_array("tokenizer.ggml.merges", GGUF_STRING, m["tokenizer.merges"])
    for name in ("bos", "eos", "unk", "pad"):
        token = m.get(f"tokenizer.{name}_id", -1)
        if token >= 0:
            key = {"unk": "unknown", "pad": "padding"}.get(name, name)
            w.add(f"tokenizer.ggml.{key}_token_id", GGUF_U32, token)
    w.add("tokenizer.ggml.add_bos_token", GGUF_BOOL, m.get("tokenizer.add_bos", False))
    if spm:
        w.add("tokenizer.ggml.add_space_prefix", GGUF_BOOL, m.get("tokenizer.add_space_prefix", False))
    if m.get("chat_template"):
        w.add("tokenizer.chat_template", GGUF_STRING, m["chat_template"])


def main():
    args = sys.argv[1:]
    if len(args) < 2 or len(args) % 2 != 0:
        sys.exit(__doc__)
    extra_kv, extra_tensors = [], []
    try:
        for flag, value in zip(args[2::2], args[3::2]):
            if flag == "--set":
                key, typed = value.split("=", 1)
                kind, text = typed.split(":", 1)
                types = {"u32": (GGUF_U32, int), "i32": (GGUF_I32, int), "f32": (GGUF_F32, float),
                         "bool": (GGUF_BOOL, lambda s: s == "true"), "string": (GGUF_STRING, str)}
                gguf_type, parse = types[kind]
                extra_kv.append((key, gguf_type, parse(text)))
            elif flag == "--add-tensor":
                name, n = value.rsplit(":", 1)
                extra_tensors.append((name, 0, [int(n)], bytes(4 * int(n))))
            else:
                sys.exit(__doc__)
        export(args[0], args[1], extra_kv, extra_tensors)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"export_gguf: error: {e}")


def export(source, target, extra_kv=(), extra_tensors=()):
    m, tensors = read_kvlm(source)
    if m["arch"] != "llama" or m["qkv_bias"]:
        raise ValueError(f"{source}: architecture {m['arch']}, this script writes llama models only")
    w = GgufWriter()
    w.add("general.architecture", GGUF_STRING, "llama")
    w.add("general.name", GGUF_STRING, os.path.splitext(os.path.basename(source))[0])
    w.add("general.alignment", GGUF_U32, ALIGNMENT)
    for key, field in (("context_length", "n_ctx"), ("embedding_length", "n_embd"), ("block_count", "n_layers"),
                       ("feed_forward_length", "n_ff"), ("attention.head_count", "n_heads"),
                       ("attention.head_count_kv", "n_kv_heads"), ("attention.key_length", "head_dim"),
                       ("attention.value_length", "head_dim"), ("rope.dimension_count", "head_dim"),
                       ("vocab_size", "n_vocab")):
        w.add(f"llama.{key}", GGUF_U32, m[field])
    w.add("llama.rope.freq_base", GGUF_F32, m["rope.theta"])
    w.add("llama.attention.layer_norm_rms_epsilon", GGUF_F32, m["norm_eps"])
    add_tokenizer(w, m)
    for key, gguf_type, value in extra_kv:
        w.add(key, gguf_type, value)

    out = list(extra_tensors)
    if m.get("rope.scaling.type", "none") == "llama3":
        factors = rope_factors(m)
        out.append(("rope_freqs.weight", 0, [len(factors) // 4], factors))
    for name, dtype, dims, data in tensors:
        ggml_type, per_block, block_bytes = GGML_TYPES[dtype]
        if len(data) != math.prod(dims) // per_block * block_bytes:
            raise ValueError(f"{source}: tensor {name}: {len(data)} bytes for dims {dims}")
        if name.endswith("attn_q.weight") or name.endswith("attn_k.weight"):
            data = interleaved_rows(data, dims[0], m["head_dim"])
        out.append((name, ggml_type, list(reversed(dims)), data))
    w.write(target, out)
    print(f"export: {len(out)} tensors -> {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
