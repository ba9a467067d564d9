# Seeds for fuzz_hf_config (each input is read as config.json, generation_config.json and
# tokenizer_config.json): stories260K's and SmolLM2's config.json, hand-written configs of real models
# (Llama 3.2 1B and 3.1 8B with llama3 rope_scaling, TinyLlama, Mistral 7B, Qwen2 0.5B, Qwen2.5 7B with
# YaRN scaling), generation configs with eos lists, and tokenizer configs carrying chat templates.
set -euo pipefail
cp "$DATA/stories260K/hf/config.json" "$OUT_DIR/stories260K-config.json"
cp "$DATA/tokenizers/smollm2/config.json" "$OUT_DIR/smollm2-135m-config.json"
python3 - "$DATA" "$OUT_DIR" <<'EOF'
import json, sys

data_dir, out_dir = sys.argv[1], sys.argv[2]
def save(name, obj): open(f'{out_dir}/{name}', 'w').write(json.dumps(obj, indent=2))

llama = {'architectures': ['LlamaForCausalLM'], 'model_type': 'llama', 'attention_bias': False,
         'hidden_act': 'silu', 'mlp_bias': False, 'rms_norm_eps': 1e-05, 'torch_dtype': 'bfloat16'}
llama3_scaling = {'factor': 32.0, 'high_freq_factor': 4.0, 'low_freq_factor': 1.0,
                  'original_max_position_embeddings': 8192, 'rope_type': 'llama3'}
save('llama-3.2-1b-config.json', dict(llama, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
     num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
     rope_theta=500000.0, rope_scaling=llama3_scaling, tie_word_embeddings=True, bos_token_id=128000,
     eos_token_id=[128001, 128008, 128009]))
save('llama-3.1-8b-config.json', dict(llama, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
     num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
     rope_theta=500000.0, rope_scaling=dict(llama3_scaling, factor=8.0, type='llama3'), tie_word_embeddings=False))
save('smollm2-1.7b-config.json', dict(llama, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
     num_attention_heads=32, num_key_value_heads=32, vocab_size=49152, max_position_embeddings=8192,
     rope_theta=130000, rope_scaling=None, tie_word_embeddings=True))
save('tinyllama-1.1b-config.json', dict(llama, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
     num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
     rope_scaling={'type': 'default'}, tie_word_embeddings=False))
save('mistral-7b-config.json', {'architectures': ['MistralForCausalLM'], 'model_type': 'mistral', 'hidden_size': 4096,
     'intermediate_size': 14336, 'num_hidden_layers': 32, 'num_attention_heads': 32, 'num_key_value_heads': 8,
     'vocab_size': 32000, 'max_position_embeddings': 32768, 'rope_theta': 10000.0, 'sliding_window': 4096,
     'hidden_act': 'silu', 'rms_norm_eps': 1e-05, 'tie_word_embeddings': False})
qwen2 = {'architectures': ['Qwen2ForCausalLM'], 'model_type': 'qwen2', 'hidden_act': 'silu', 'rms_norm_eps': 1e-06,
         'use_sliding_window': False, 'torch_dtype': 'bfloat16'}
save('qwen2-0.5b-config.json', dict(qwen2, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
     num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
     rope_theta=1000000.0, tie_word_embeddings=True, rope_scaling=None))
save('qwen2.5-7b-yarn-config.json', dict(qwen2, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
     num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
     rope_theta=1000000.0, tie_word_embeddings=False,
     rope_scaling={'factor': 4.0, 'original_max_position_embeddings': 32768, 'type': 'yarn'}))
save('generation-config-eos-list.json', {'bos_token_id': 1, 'eos_token_id': [2, 7, 9], 'do_sample': True})
save('generation-config-eos-int.json', {'eos_token_id': 5, 'pad_token_id': 0})
template = open(f'{data_dir}/tokenizers/chat-templates/smollm2-chatml.jinja').read()
llama3_config = json.load(open(f'{data_dir}/tokenizers/llama3/tokenizer_config.json'))
added = dict(list(llama3_config['added_tokens_decoder'].items())[:4])
save('tokenizer-config-llama3.json', dict(llama3_config, added_tokens_decoder=added))
save('tokenizer-config-named-templates.json', {'chat_template': [{'name': 'default', 'template': template},
     {'name': 'tool_use', 'template': '{{ tools }}'}], 'bos_token': '<s>', 'add_bos_token': True})
EOF
