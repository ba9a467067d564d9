// Tensor naming and printing helpers.
#include "format/tensor.h"

#include <fmt/format.h>

namespace kvlm {

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

namespace tensor_names {
std::string layer(int layer_index, const char* suffix) { return fmt::format("blk.{}.{}", layer_index, suffix); }
}  // namespace tensor_names

}  // namespace kvlm
