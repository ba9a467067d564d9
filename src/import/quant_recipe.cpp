// The per-tensor choices of llama-quantize's k-quant mixes (its llama_tensor_get_type for a dense llama
// without an importance matrix), so that `kvlm convert --dtype q4_k_m` makes the mix users know.
#include "import/quant_recipe.h"

#include <cstdlib>
#include <cstring>

#include "format/tensor.h"

namespace kvlm {

namespace {

struct MixName {
    const char* name;
    QuantMix mix;
};
constexpr MixName kMixNames[] = {
    {"q2_k", QuantMix::q2_k},     {"q3_k_s", QuantMix::q3_k_s}, {"q3_k_m", QuantMix::q3_k_m},
    {"q3_k", QuantMix::q3_k_m},   {"q3_k_l", QuantMix::q3_k_l}, {"q4_k_s", QuantMix::q4_k_s},
    {"q4_k_m", QuantMix::q4_k_m}, {"q4_k", QuantMix::q4_k_m},   {"q5_k_s", QuantMix::q5_k_s},
    {"q5_k_m", QuantMix::q5_k_m}, {"q5_k", QuantMix::q5_k_m},   {"q6_k", QuantMix::q6_k},
    {"iq4_xs", QuantMix::iq4_xs},
};

// The first and last eighth of the layers and every third one between them.
bool use_more_bits(int layer, int n_layers) {
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// "blk.N.suffix" -> N and suffix; -1 for tensors outside the layers.
int layer_of(const std::string& name, std::string* suffix) {
    if (name.rfind("blk.", 0) != 0) return -1;
    char* end = nullptr;
    const long layer = std::strtol(name.c_str() + 4, &end, 10);
    if (!end || *end != '.') return -1;
    *suffix = end + 1;
    return int(layer);
}

// Rows that are not whole 256-element super-blocks take a 32-element type, as llama-quantize falls back.
DType fit_rows(DType type, int64_t row_len) {
    if (row_len % dtype_block_elements(type) == 0) return type;
    switch (type) {
        case DType::q2_k:
        case DType::q3_k: type = DType::q4_0; break;
        case DType::q4_k: type = DType::q5_0; break;
        case DType::q5_k: type = DType::q5_1; break;
        case DType::q6_k: type = DType::q8_0; break;
        case DType::iq4_xs: type = DType::iq4_nl; break;
        default: break;
    }
    return row_len % dtype_block_elements(type) == 0 ? type : DType::f16;
}

}  // namespace

std::optional<QuantMix> quant_mix_from_name(const std::string& name) {
    for (const MixName& m : kMixNames)
        if (name == m.name) return m.mix;
    return std::nullopt;
}

DType quant_mix_base_type(QuantMix mix) {
    switch (mix) {
        case QuantMix::q2_k: return DType::q2_k;
        case QuantMix::q3_k_s:
        case QuantMix::q3_k_m:
        case QuantMix::q3_k_l: return DType::q3_k;
        case QuantMix::q4_k_s:
        case QuantMix::q4_k_m: return DType::q4_k;
        case QuantMix::q5_k_s:
        case QuantMix::q5_k_m: return DType::q5_k;
        case QuantMix::q6_k: return DType::q6_k;
        case QuantMix::iq4_xs: return DType::iq4_xs;
    }
    return DType::q4_k;
}

const char* quant_mix_names() { return "q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_xs"; }

DType quant_mix_tensor_type(QuantMix mix, const std::string& tensor, int64_t row_len, const ModelConfig& config) {
    const DType base = quant_mix_base_type(mix);
    const bool output = tensor == tensor_names::output || (config.tied_embeddings && tensor == tensor_names::token_embd);
    if (output)  // q8_0 where the base type's blocks do not fit the rows
        return fit_rows(row_len % dtype_block_elements(base) == 0 ? DType::q6_k : DType::q8_0, row_len);
    std::string suffix;
    const int layer = layer_of(tensor, &suffix), n_layers = config.n_layers;
    const bool gqa4 = config.n_kv_heads > 0 && config.n_heads / config.n_kv_heads >= 4;
    DType type = base;
    if (suffix == "attn_v.weight") {
        switch (mix) {
            case QuantMix::q2_k: type = gqa4 ? DType::q4_k : DType::q3_k; break;
            case QuantMix::q3_k_m: type = layer < 2 ? DType::q5_k : DType::q4_k; break;
            case QuantMix::q3_k_l: type = DType::q5_k; break;
            case QuantMix::iq4_xs: type = gqa4 ? DType::q5_k : base; break;
            case QuantMix::q4_k_m:
            case QuantMix::q5_k_m: type = use_more_bits(layer, n_layers) ? DType::q6_k : base; break;
            case QuantMix::q4_k_s: type = layer < 4 ? DType::q5_k : base; break;
            default: break;
        }
    } else if (suffix == "ffn_down.weight") {
        switch (mix) {
            case QuantMix::q2_k: type = DType::q3_k; break;
            case QuantMix::q3_k_m: type = layer < n_layers / 16 ? DType::q5_k : DType::q4_k; break;
            case QuantMix::q3_k_l: type = DType::q5_k; break;
            case QuantMix::q4_k_m:
            case QuantMix::q5_k_m: type = use_more_bits(layer, n_layers) ? DType::q6_k : base; break;
            case QuantMix::iq4_xs:
            case QuantMix::q4_k_s: type = layer < n_layers / 8 ? DType::q5_k : base; break;
            default: break;
        }
    } else if (suffix == "attn_output.weight") {
        switch (mix) {
            case QuantMix::q2_k: type = DType::q3_k; break;
            case QuantMix::q3_k_m: type = DType::q4_k; break;
            case QuantMix::q3_k_l: type = DType::q5_k; break;
            default: break;
        }
    }
    return fit_rows(type, row_len);
}

}  // namespace kvlm
