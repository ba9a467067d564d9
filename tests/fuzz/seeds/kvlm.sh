# Seeds for fuzz_kvlm: models written by `kvlm convert`: stories260K (f32, f16, bf16), the tiny GGUF models
# of the gguf seeds (quantized source, untied, llama3 rope scaling, byte-level BPE tokenizer, every block
# type) and a tiny synthetic Qwen2 (q/k/v biases) from a config.json.
set -euo pipefail
convert() { "$KVLM_BIN" convert "$@" -q >/dev/null 2>&1; }
for dtype in f32 f16 bf16; do
    convert "$DATA/stories260K/stories260K.gguf" --dtype "$dtype" -o "$OUT_DIR/stories260K-$dtype.kvlm"
done
mkdir -p "$WORK/gguf"
OUT_DIR="$WORK/gguf" bash "$(dirname "$0")/gguf.sh"
for name in q8_0 untied bpe; do
    convert "$WORK/gguf/tiny-llama-$name.gguf" -o "$OUT_DIR/tiny-llama-$name.kvlm"
done
convert "$WORK/gguf/kquant-model.gguf" -o "$OUT_DIR/kquant-model.kvlm"
convert "$WORK/gguf/tiny-llama3-rope-freqs.gguf" --dtype bf16 -o "$OUT_DIR/tiny-llama3-rope-bf16.kvlm"
cat >"$WORK/qwen2-config.json" <<'EOF'
{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 64,
 "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": true}
EOF
convert --synthetic "$WORK/qwen2-config.json" --tokenizer "$DATA/stories260K/tok512.bin" --dtype f16 \
    -o "$OUT_DIR/tiny-qwen2-synthetic.kvlm"
