// llama-quantize's file types as `kvlm convert --dtype` names: a base type and the tensors that get a higher
// (or, where rows are not whole 256-element super-blocks, a fallback) type, as llama-quantize chooses them
// without an importance matrix.
#pragma once
#include <optional>
#include <string>

#include "format/dtype.h"
#include "format/model_config.h"

namespace kvlm {

enum class QuantMix { q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_xs };

// q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_xs; q3_k, q4_k and q5_k name the
// _m mixes (llama-quantize's aliases). nullopt for any other name.
std::optional<QuantMix> quant_mix_from_name(const std::string& name);
const char* quant_mix_names();  // for error messages
DType quant_mix_base_type(QuantMix mix);  // q4_k for q4_k_s and q4_k_m, ...

// The type of matrix `tensor` (a kvlm tensor name, its row length) in a model of `config` under `mix`.
DType quant_mix_tensor_type(QuantMix mix, const std::string& tensor, int64_t row_len, const ModelConfig& config);

}  // namespace kvlm
