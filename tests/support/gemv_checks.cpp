// The decode GEMVs' parity checks (gemv_checks.h).
#include "support/gemv_checks.h"

#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "compute/cpu_ops.h"
#include "support/random_model.h"

#ifdef KVLM_CUDA
#include "cuda/testing/cuda_test_api.h"
#endif

namespace kvlm::test {

float gemv_atol(int32_t n_in) { return 2e-6f * std::sqrt(float(n_in)); }

size_t count_off(const std::vector<float>& got, const std::vector<float>& want, int32_t n_in, std::string* first) {
    REQUIRE(got.size() == want.size());
    const float atol = gemv_atol(n_in);
    size_t bad = 0;
    std::ostringstream s;
    for (size_t i = 0; i < want.size(); i++) {
        if (!(std::fabs(got[i] - want[i]) <= atol + kGemvRtol * std::fabs(want[i]))) {
            if (bad < 5) s << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
            bad++;
        }
    }
    if (first) *first = s.str();
    return bad;
}

void check_gemv_close(const std::vector<float>& got, const std::vector<float>& want, int32_t n_in,
                      const std::string& what) {
    std::string first;
    const size_t bad = count_off(got, want, n_in, &first);
    INFO(what << ": " << bad << " of " << got.size() << " elements off (atol " << gemv_atol(n_in) << ", rtol "
              << kGemvRtol << ")\n"
              << first);
    CHECK(bad == 0);
}

std::vector<uint8_t> to_dtype(const std::vector<float>& f, DType dtype) {
    std::vector<uint8_t> out(size_t(dtype_bytes(dtype, f.size())));
    convert_from_f32(dtype, f.data(), out.data(), f.size());
    return out;
}

std::vector<float> random_matrix(int32_t n_out, int32_t n_in, uint64_t seed) {
    const float a = 1.0f / std::sqrt(float(n_in));
    return random_floats(size_t(n_out) * size_t(n_in), -a, a, seed);
}

std::vector<float> x_hat_cpu(const std::vector<float>& x, const float* norm_weight) {
    std::vector<float> x_hat = x;
    if (norm_weight) rmsnorm_cpu(x_hat.data(), x.data(), norm_weight, 1, int32_t(x.size()), kGemvEps);
    return x_hat;
}

std::vector<float> product_cpu(const std::vector<float>& w_f32, int32_t n_out, const std::vector<float>& x_hat) {
    std::vector<float> y(static_cast<size_t>(n_out));
    matmul_cpu(y.data(), x_hat.data(), w_f32.data(), DType::f32, 1, int64_t(x_hat.size()), n_out, nullptr);
    return y;
}

GemvOutput make_gemv_output(const std::vector<float>& weight_f32, int32_t n_out, DType dtype, uint64_t seed) {
    GemvOutput o;
    o.n_out = n_out, o.dtype = dtype;
    o.weight = to_dtype(weight_f32, dtype);
    o.decoded.resize(weight_f32.size());
    convert_to_f32(dtype, o.weight.data(), o.decoded.data(), weight_f32.size());
    o.bias = random_floats(size_t(n_out), -1, 1, seed);
    o.init = random_floats(size_t(n_out), -1, 1, seed + 1);
    return o;
}

GemvOutput random_gemv_output(int32_t n_out, int32_t n_in, DType dtype, uint64_t seed) {
    return make_gemv_output(random_matrix(n_out, n_in, seed), n_out, dtype, seed + 1);
}

std::vector<float> reference_output(const GemvOutput& o, const std::vector<float>& x_hat, bool bias, bool accumulate) {
    std::vector<float> y = product_cpu(o.decoded, o.n_out, x_hat);
    if (bias) add_bias_cpu(y.data(), o.bias.data(), 1, o.n_out);
    if (!accumulate) return y;
    std::vector<float> out = o.init;
    add_cpu(out.data(), y.data(), o.n_out);
    return out;
}

#ifdef KVLM_CUDA
void check_gemv(const std::vector<GemvOutput>& outputs, const std::vector<float>& x, const float* norm_weight,
                unsigned bias_mask, bool accumulate, int32_t weight_offset, const std::string& what) {
    const int32_t n_in = int32_t(x.size()), n_outputs = int32_t(outputs.size());
    std::vector<std::vector<float> > got(outputs.size());
    std::vector<float*> outs;
    std::vector<const void*> weights;
    std::vector<DType> dtypes;
    std::vector<const float*> biases;
    std::vector<int32_t> n_outs;
    for (size_t i = 0; i < outputs.size(); i++) {
        const GemvOutput& o = outputs[i];
        got[i] = accumulate ? o.init : std::vector<float>(size_t(o.n_out));
        outs.push_back(got[i].data());
        weights.push_back(o.weight.data());
        dtypes.push_back(o.dtype);
        biases.push_back(bias_mask >> i & 1 ? o.bias.data() : nullptr);
        n_outs.push_back(o.n_out);
    }
    cuda_test::gemv_offset_weights(outs.data(), weights.data(), dtypes.data(), biases.data(), n_outs.data(), n_outputs,
                                   x.data(), n_in, norm_weight, kGemvEps, accumulate, weight_offset);
    const std::vector<float> x_hat = x_hat_cpu(x, norm_weight);
    for (size_t i = 0; i < outputs.size(); i++) {
        const GemvOutput& o = outputs[i];
        std::ostringstream s;
        s << what << " output " << i << " (" << dtype_name(o.dtype) << ", n_out " << o.n_out << ") n_in " << n_in
          << (norm_weight ? " norm" : "") << (bias_mask >> i & 1 ? " bias" : "") << (accumulate ? " accumulate" : "")
          << (weight_offset ? " weights offset " + std::to_string(weight_offset) : "");
        check_gemv_close(got[i], reference_output(o, x_hat, bias_mask >> i & 1, accumulate), n_in, s.str());
    }
}

void check_gemv_swiglu(const GemvOutput& gate, const GemvOutput& up, const std::vector<float>& x,
                       const float* norm_weight, const std::string& what) {
    REQUIRE(gate.dtype == up.dtype);
    REQUIRE(gate.n_out == up.n_out);
    const int32_t n_in = int32_t(x.size()), n_ff = gate.n_out;
    const std::vector<float> x_hat = x_hat_cpu(x, norm_weight);
    const std::vector<float> g = product_cpu(gate.decoded, n_ff, x_hat), u = product_cpu(up.decoded, n_ff, x_hat);
    std::vector<float> want(static_cast<size_t>(n_ff)), got(static_cast<size_t>(n_ff));
    swiglu_cpu(want.data(), g.data(), u.data(), 1, n_ff);
    cuda_test::gemv_swiglu(got.data(), x.data(), gate.weight.data(), up.weight.data(), gate.dtype, n_in, n_ff,
                           norm_weight, kGemvEps);
    std::ostringstream s;
    s << what << " " << dtype_name(gate.dtype) << " n_in " << n_in << " n_ff " << n_ff << (norm_weight ? " norm" : "");
    check_gemv_close(got, want, n_in, s.str());
}
#endif

}  // namespace kvlm::test
