// cuda_test::sample: the device sampler on host logits (cuda_test_api.h).
#include "cuda_test_api.h"
#include "cuda_test_guard.h"
#include "sample_host.h"

namespace kvlm::cuda_test {

SampleOutcome sample(float* logits, int32_t n_vocab, const SampleRequest& request, int32_t* step_token) {
    require_device();
    if (n_vocab < 1) throw_error("cuda_test::sample: n_vocab must be positive");
    SampleInputs inputs{};
    const size_t input_bytes = fill_sample_inputs(&inputs, request);
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

}  // namespace kvlm::cuda_test
