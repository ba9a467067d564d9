// cuda_test::sample and best_tokens: the device's token pickers on host logits (cuda_test_api.h).
#include <algorithm>
#include <vector>

#include "backend/sample_host.h"
#include "kernels/cuda_ops.h"
#include "testing/cuda_test_api.h"
#include "testing/cuda_test_guard.h"

namespace kvlm::cuda_test {

SampleOutcome sample(float* logits, int32_t n_vocab, const SampleRequest& request, int32_t* step_token) {
    require_device();
    if (n_vocab < 1) throw_error("cuda_test::sample: n_vocab must be positive");
    // The allowed set (if any) as the backend uploads it: a bitset in device memory.
    std::vector<uint32_t> bits(allowed_words(n_vocab));
    fill_allowed_bits(bits.data(), n_vocab, request);
    GuardedBuffer d_allowed("sample allowed bits", bits.size() * sizeof(uint32_t));
    d_allowed.upload(bits.data());
    SampleInputs inputs{};
    const size_t input_bytes = fill_sample_inputs(&inputs, request, d_allowed.get<uint32_t>());
    GuardedBuffer d_logits("sample logits", size_t(n_vocab) * sizeof(float)), d_in("sample inputs", input_bytes),
        d_out("sample result", sizeof(SampleResult)), d_step("sample step token", sizeof(int32_t));
    d_logits.upload(logits);
    d_in.upload(&inputs);
    int32_t token = step_token ? *step_token : 0;
    d_step.upload(&token);
    launch_sample(d_logits.get<float>(), n_vocab, d_in.get<SampleInputs>(), d_out.get<SampleResult>(),
                  d_step.get<int32_t>(), nullptr);
    finish();
    SampleResult result;
    d_out.download(&result);
    d_step.download(&token);
    if (step_token) *step_token = token;
    d_logits.download(logits);
    return sample_outcome(result);
}

void best_tokens(const float* logits, int32_t n_rows, int32_t n_vocab, const float* bases, int32_t n, TokenScore* out) {
    require_device();
    if (n_vocab < 1 || n_rows < 1 || n_rows > kMaxBestRows)
        throw_error("cuda_test::best_tokens: n_vocab must be positive, rows 1 to {}", kMaxBestRows);
    BestTokensBases b{};
    for (int32_t r = 0; r < n_rows; r++) b.base[r] = bases[r];
    GuardedBuffer d_logits("best_tokens logits", size_t(n_rows) * size_t(n_vocab) * sizeof(float)),
        d_out("best_tokens out", size_t(n_rows) * size_t(std::max(n, 0)) * sizeof(TokenScore));
    d_logits.upload(logits);
    launch_best_tokens(d_logits.get<float>(), n_vocab, n_rows, n, b, d_out.get<TokenScore>(), n, nullptr);
    finish();
    d_out.download(out);
}

}  // namespace kvlm::cuda_test
