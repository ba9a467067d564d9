#!/usr/bin/env python3
"""Writes a .kvlm model's weights as a Hugging Face Llama/Qwen2 directory (config.json + model.safetensors),
so PyTorch/transformers can run the very same weights side by side with kvlm (bench/transformers_bench.py).

Reads the file through kvlm_file.py (standard library only; bf16 bytes are copied as they are). kvlm already
stores q/k rows in Hugging Face's rotate_half order, so tensors are renamed, not permuted. The tokenizer is
not exported: benchmarks feed token ids.

Checked by round trip: `kvlm convert OUT_DIR --tokenizer DIR -o again.kvlm` gives the same fingerprint
(SmolLM2-135M bf16, 2026-11-22), and transformers' greedy continuation of the exported stories260K
(f32) equals the golden reference ids (40 tokens, 2026-11-22). No numpy needed.

Usage: export_hf.py MODEL.kvlm OUT_DIR
"""
import json
import os
import struct
import sys

from kvlm_file import read_kvlm

DTYPES = {0: ("F32", 4), 1: ("F16", 2), 2: ("BF16", 2)}


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    block, index, rest = name.split(".", 2)
    assert block == "blk", name
    mapping = {
        "attn_norm.weight": "input_layernorm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
        "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
        "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
        "attn_output.weight": "self_attn.o_proj.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight",
    }
    return f"model.layers.{index}.{mapping[rest]}"


def hf_config(m, torch_dtype):
    arch = m["arch"]
    config = {
        "architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM"],
        "model_type": "qwen2" if arch == "qwen2" else "llama",
        "vocab_size": m["n_vocab"], "hidden_size": m["n_embd"], "num_hidden_layers": m["n_layers"],
        "num_attention_heads": m["n_heads"], "num_key_value_heads": m["n_kv_heads"], "head_dim": m["head_dim"],
        "intermediate_size": m["n_ff"], "max_position_embeddings": m["n_ctx"], "rope_theta": m["rope.theta"],
        "rms_norm_eps": m["norm_eps"], "tie_word_embeddings": m["tied_embeddings"], "hidden_act": "silu",
        "torch_dtype": torch_dtype, "bos_token_id": m.get("tokenizer.bos_id", 1),
        "eos_token_id": m.get("tokenizer.eos_id", 2), "attention_bias": m["qkv_bias"],
    }
    if m.get("rope.scaling.type", "none") == "llama3":
        config["rope_scaling"] = {
            "rope_type": "llama3", "factor": m["rope.scaling.factor"],
            "low_freq_factor": m["rope.scaling.low_freq_factor"],
            "high_freq_factor": m["rope.scaling.high_freq_factor"],
            "original_max_position_embeddings": m["rope.scaling.original_max_position"],
        }
    return config


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, dtype, dims, data in tensors:
        header[hf_name(name)] = {"dtype": DTYPES[dtype][0], "shape": dims, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for i, (_, _, _, data) in enumerate(tensors):
            f.write(data)
            if sys.stderr.isatty():
                print(f"\rexport: {i + 1}/{len(tensors)} tensors", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    metadata, tensors = read_kvlm(sys.argv[1])
    matrix_dtypes = {DTYPES[t[1]][0] for t in tensors if len(t[2]) == 2}
    torch_dtype = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[sorted(matrix_dtypes)[0]]
    os.makedirs(sys.argv[2], exist_ok=True)
    with open(os.path.join(sys.argv[2], "config.json"), "w") as f:
        json.dump(hf_config(metadata, torch_dtype), f, indent=2)
    write_safetensors(os.path.join(sys.argv[2], "model.safetensors"), tensors)
    print(f"export: {len(tensors)} tensors ({torch_dtype}) -> {sys.argv[2]}", file=sys.stderr)


if __name__ == "__main__":
    main()
