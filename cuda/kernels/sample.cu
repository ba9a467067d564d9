// Picking the next token where the logits are: the decode step's last launch when kvlm samples on the device,
// so that only the token id goes back to the host, and the token is where the next step reads its input. One thread
// block runs the CPU sampler's rule (src/generate/sampler.cpp) step for step: the repetition penalty on the listed
// tokens, the finiteness check and argmax (lowest id among equal maxima), then greedy, or top-k -> softmax(temperature)
// over the kept set (over the whole vocabulary when top-k is off) -> top-p -> min-p -> the draw the host took from the
// sampler's generator. Candidates are ordered by (logit desc, id asc) as on the CPU, weights are
// exp(double((logit - max) * inv_temp)) and probabilities float(weight / total), summed in the CPU's order
// where it sums a kept set; so the same draw picks the same token, unless it falls within a double rounding
// of a boundary (the whole-vocabulary sum is a tree here, a loop there).
//
// Top-k: a radix select (four 8-bit passes over order-preserving keys) finds the k-th largest logit, then
// the k candidates are gathered in id order (so ties keep the lowest ids) and bitonic-sorted in shared
// memory. Top-k off: the min-p floor (the CPU's, same margin) bounds the candidates; more than
// kSampleMaxCandidates of them, and the kernel restores the penalized logits and reports kSampleNeedsHost.
//
// An allowed set (constrained output: a bitset over the vocabulary) limits the pick as the CPU's
// sample_allowed does: every logit is still checked and digested, the probability (-v) is still the whole
// vocabulary's, but the argmax, top-k, the min-p floor and the softmax's sum take allowed tokens only.
#include "kernels/cuda_ops.h"
#include "kernels/programmatic_launch.cuh"
#include "runtime/cuda_check.h"

namespace kvlm {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
static_assert(kSampleMaxCandidates == kThreads, "the sort gives each thread one candidate");

__device__ uint32_t order_key(float v) {  // unsigned order == float order (finite values; -0 == +0)
    const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ bool better(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

struct SampleShared {
    float value[kSampleMaxCandidates];
    int32_t id[kSampleMaxCandidates];
    double weight[kSampleMaxCandidates];
    float saved[kSampleMaxPenalty];  // the penalized tokens' logits before the penalty
    int32_t hist[256];
    int32_t warp_int[kWarps];
    int32_t warp_int2[kWarps];
    float warp_float[kWarps];
    double warp_double[kWarps];
    unsigned long long warp_u64[kWarps];
    int32_t broadcast[4];
    double total;
    double model_total;  // sum of exp(logit - max) over the vocabulary (want_probability)
};

// Exclusive prefix sum over the block's threads (thread order); *sum gets the block's total.
__device__ int32_t block_exclusive_scan(int32_t v, int32_t* warp_totals, int32_t* sum) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int32_t inclusive = v;
    for (int d = 1; d < 32; d *= 2) {
        const int32_t up = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += up;
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    int32_t before = 0, total = 0;
    for (int w = 0; w < kWarps; w++) {
        if (w < warp) before += warp_totals[w];
        total += warp_totals[w];
    }
    __syncthreads();  // warp_totals may be reused right after
    *sum = total;
    return before + inclusive - v;
}

__device__ bool is_allowed(const uint32_t* allowed, int32_t i) {
    return !allowed || ((allowed[i >> 5] >> (i & 31)) & 1u);
}

// The block's best (value, id) by `better` (id n_vocab: none yet), on every thread. Every thread calls it.
__device__ void block_best(float* best_v, int32_t* best_i, int32_t n_vocab, SampleShared& s) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int d = 16; d > 0; d /= 2) {
        const float v = __shfl_xor_sync(0xffffffffu, *best_v, d);
        const int32_t i = __shfl_xor_sync(0xffffffffu, *best_i, d);
        if (i < n_vocab && (*best_i == n_vocab || better(v, i, *best_v, *best_i))) *best_v = v, *best_i = i;
    }
    if (lane == 0) s.warp_float[warp] = *best_v, s.warp_int[warp] = *best_i;
    __syncthreads();
    *best_v = -INFINITY, *best_i = n_vocab;
    for (int w = 0; w < kWarps; w++)
        if (s.warp_int[w] < n_vocab && (*best_i == n_vocab || better(s.warp_float[w], s.warp_int[w], *best_v, *best_i)))
            *best_v = s.warp_float[w], *best_i = s.warp_int[w];
    __syncthreads();  // warp_float, warp_int are reused right after
}

// Block b picks row b's token: logits row b, inputs[b], result[b] (one row in a decode step, several in a
// forward_rows pass, which has no step_token).
__global__ void __launch_bounds__(kThreads) sample_kernel(float* logits, int32_t n_vocab, const SampleInputs* in,
                                                          SampleResult* result, int32_t* step_token) {
    __shared__ SampleShared s;
    wait_for_prior_kernel();  // the logits (and the inputs, uploaded before the step)
    allow_next_kernel();
    logits += int64_t(blockIdx.x) * n_vocab, in += blockIdx.x, result += blockIdx.x;
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    // Read by every thread before thread 0 overwrites it (after a barrier); without one, no input token to add.
    const int32_t input_token = step_token ? *step_token : -1;

    // 0. The penalty list: the host's, plus the step's input token when the host could not list it (a step
    //    enqueued before the host had its input), unless it is listed already. Entry t is thread t's.
    if (t == 0) s.broadcast[2] = 0;
    __syncthreads();
    if (t < in->n_penalty && in->penalty_tokens[t] == input_token) s.broadcast[2] = 1;
    __syncthreads();
    const bool add_input = in->penalize_step_token && s.broadcast[2] == 0 && in->n_penalty < kSampleMaxPenalty;
    const int32_t n_penalty = in->n_penalty + (add_input ? 1 : 0);
    const auto penalty_token = [&](int i) { return i < in->n_penalty ? in->penalty_tokens[i] : input_token; };

    // 1. Repetition penalty (each token once): positive logits divided, negative multiplied, finite ones
    //    kept finite.
    if (t < n_penalty) {
        const int32_t token = penalty_token(t);
        if (token >= 0 && token < n_vocab) {
            const float l = logits[token];
            s.saved[t] = l;
            if (isfinite(l)) {
                const float p = in->repeat_penalty, big = 3.402823466e38f;
                logits[token] = fminf(fmaxf(l > 0.0f ? l / p : l * p, -big), big);
            }
        }
    }
    __syncthreads();

    // 2. One pass: the digest, the first non-finite logit, the argmax (lowest id among equal maxima), and
    //    with an allowed set (constrained output: the pick is among those tokens) the argmax among it.
    const uint32_t* allowed = in->allowed;
    float best_v = -INFINITY, pick_v = -INFINITY;
    int32_t best_i = n_vocab, pick_i = n_vocab, bad_i = n_vocab;
    unsigned long long digest = 0;
    for (int32_t i = t; i < n_vocab; i += kThreads) {
        const float l = logits[i];
        digest += mix64((uint64_t(__float_as_uint(l)) << 32) ^ uint64_t(i));
        if (!isfinite(l)) {
            bad_i = min(bad_i, i);
            continue;
        }
        if (l > best_v || best_i == n_vocab) best_v = l, best_i = i;
        if (allowed && is_allowed(allowed, i) && (l > pick_v || pick_i == n_vocab)) pick_v = l, pick_i = i;
    }
    for (int d = 16; d > 0; d /= 2) {
        bad_i = min(bad_i, __shfl_xor_sync(0xffffffffu, bad_i, d));
        digest += __shfl_xor_sync(0xffffffffu, digest, d);
    }
    if (lane == 0) s.warp_int2[warp] = bad_i, s.warp_u64[warp] = digest;
    block_best(&best_v, &best_i, n_vocab, s);  // its barriers publish warp_int2 and warp_u64 too
    bad_i = n_vocab, digest = 0;
    for (int w = 0; w < kWarps; w++) bad_i = min(bad_i, s.warp_int2[w]), digest += s.warp_u64[w];
    if (allowed) {
        block_best(&pick_v, &pick_i, n_vocab, s);
    } else {
        pick_v = best_v, pick_i = best_i;
    }
    __syncthreads();
    if (t == 0) result->digest = digest, result->bad_index = -1, result->token = -1, result->probability = -1.0f;
    if (t == 0 && step_token) *step_token = 0;
    if (bad_i < n_vocab) {
        if (t == 0) {
            result->status = isnan(logits[bad_i]) ? kSampleBadNan : kSampleBadInf;
            result->bad_index = bad_i;
        }
        return;
    }
    // The model's probability for the token picked below (-v): softmax at temperature 1 over the vocabulary.
    if (in->want_probability) {
        double sum = 0.0;
        for (int32_t i = t; i < n_vocab; i += kThreads) sum += exp(double(logits[i] - best_v));
        for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
        if (lane == 0) s.warp_double[warp] = sum;
        __syncthreads();
        if (t == 0) {
            double total = 0.0;
            for (int w = 0; w < kWarps; w++) total += s.warp_double[w];
            s.model_total = total;
        }
        __syncthreads();
    }
    const auto probability_of = [&](int32_t token) {
        return in->want_probability ? float(exp(double(logits[token] - best_v)) / s.model_total) : -1.0f;
    };
    // The pick's candidates: every token, or the allowed ones (the host lists at least one).
    const int32_t n_choices = allowed ? in->n_allowed : n_vocab;
    const float temperature = in->temperature;
    if (temperature <= 0.0f || n_choices == 1) {
        if (t == 0) {
            result->token = pick_i, result->status = kSampleOk;
            if (step_token) *step_token = pick_i;
        }
        if (t == 0) result->probability = probability_of(pick_i);
        return;
    }

    // 3. The candidates, in id order: the top k, or (top-k off) those at or above the min-p floor.
    const float inv_temp = 1.0f / temperature, max_logit = pick_v;
    const int32_t k = in->top_k > 0 ? min(in->top_k, n_choices) : n_choices;
    const int32_t chunk = (n_vocab + kThreads - 1) / kThreads, begin = min(n_vocab, t * chunk),
                  end = min(n_vocab, begin + chunk);
    int32_t n_candidates = 0;
    if (k < n_choices) {
        uint32_t prefix = 0, mask = 0;
        int32_t wanted = k;  // how many of the keys matching prefix/mask still belong to the top k
        for (int shift = 24; shift >= 0; shift -= 8) {
            if (t < 256) s.hist[t] = 0;
            __syncthreads();
            for (int32_t i = t; i < n_vocab; i += kThreads) {
                const uint32_t key = order_key(logits[i]);
                if ((key & mask) == prefix && is_allowed(allowed, i)) atomicAdd(&s.hist[(key >> shift) & 255u], 1);
            }
            __syncthreads();
            if (t == 0) {
                int32_t above = 0, digit = 255;
                for (; digit > 0 && above + s.hist[digit] < wanted; digit--) above += s.hist[digit];
                s.broadcast[0] = digit, s.broadcast[1] = wanted - above;
            }
            __syncthreads();
            prefix |= uint32_t(s.broadcast[0]) << shift, mask |= 255u << shift, wanted = s.broadcast[1];
            __syncthreads();
        }
        // key > prefix: in the top k; key == prefix: the first `wanted` of them by id.
        int32_t n_above = 0, n_equal = 0;
        for (int32_t i = begin; i < end; i++) {
            if (!is_allowed(allowed, i)) continue;
            const uint32_t key = order_key(logits[i]);
            n_above += key > prefix, n_equal += key == prefix;
        }
        int32_t total_above = 0, total_equal = 0;
        int32_t at_above = block_exclusive_scan(n_above, s.warp_int, &total_above);
        int32_t at_equal = block_exclusive_scan(n_equal, s.warp_int, &total_equal);
        for (int32_t i = begin; i < end; i++) {
            if (!is_allowed(allowed, i)) continue;
            const float l = logits[i];
            const uint32_t key = order_key(l);
            if (key > prefix) s.value[at_above] = l, s.id[at_above] = i, at_above++;
            else if (key == prefix) {
                if (at_equal < wanted) s.value[total_above + at_equal] = l, s.id[total_above + at_equal] = i;
                at_equal++;
            }
        }
        n_candidates = k;
    } else {
        // The CPU's floor, margin included (none without min-p: an allowed set that top-k does not cut).
        const float floor_logit =
            in->min_p > 0.0f && in->min_p <= 1.0f ? max_logit + (logf(in->min_p) - 0.01f) * temperature : -INFINITY;
        const auto kept = [&](int32_t i) {
            return is_allowed(allowed, i) && (logits[i] >= floor_logit || i == pick_i);
        };
        int32_t n_kept = 0;
        for (int32_t i = begin; i < end; i++) n_kept += kept(i);
        int32_t at = block_exclusive_scan(n_kept, s.warp_int, &n_candidates);
        if (n_candidates > kSampleMaxCandidates) {
            // Too many to sort here: put the logits back as they came, for the host's sampler.
            if (t < n_penalty) {
                const int32_t token = penalty_token(t);
                if (token >= 0 && token < n_vocab) logits[token] = s.saved[t];
            }
            if (t == 0) result->status = kSampleNeedsHost;
            return;
        }
        for (int32_t i = begin; i < end; i++)
            if (kept(i)) s.value[at] = logits[i], s.id[at] = i, at++;
    }
    __syncthreads();

    // 4. Bitonic sort of the candidates by (logit desc, id asc); padding sorts last.
    if (t >= n_candidates) s.value[t] = -INFINITY, s.id[t] = 0x7fffffff;
    __syncthreads();
    for (int size = 2; size <= kThreads; size *= 2) {
        for (int stride = size / 2; stride > 0; stride /= 2) {
            const int partner = t ^ stride;
            if (partner > t) {
                const bool ascending = (t & size) == 0;  // "ascending" = better first
                const bool partner_first = better(s.value[partner], s.id[partner], s.value[t], s.id[t]);
                if (partner_first == ascending) {
                    const float v = s.value[t];
                    const int32_t i = s.id[t];
                    s.value[t] = s.value[partner], s.id[t] = s.id[partner];
                    s.value[partner] = v, s.id[partner] = i;
                }
            }
            __syncthreads();
        }
    }

    // 5. Weights, then the softmax's denominator: the kept set's sum in the CPU's order, or the whole
    //    vocabulary's (top-k off).
    const int32_t n_keep = min(n_candidates, k);
    if (t < n_keep) s.weight[t] = exp(double((s.value[t] - max_logit) * inv_temp));
    if (k >= n_choices) {
        double sum = 0.0;
        for (int32_t i = t; i < n_vocab; i += kThreads)
            if (is_allowed(allowed, i)) sum += exp(double((logits[i] - max_logit) * inv_temp));
        for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
        if (lane == 0) s.warp_double[warp] = sum;
    }
    __syncthreads();
    if (t != 0) return;
    double total = 0.0;
    if (k < n_choices) {
        for (int32_t i = 0; i < n_keep; i++) total += s.weight[i];
    } else {
        for (int w = 0; w < kWarps; w++) total += s.warp_double[w];
    }

    // 6. Probabilities as floats, top-p, min-p, the draw (one thread: the CPU's loops, in its order).
    float* prob = s.value;  // reused: candidate i's probability
    for (int32_t i = 0; i < n_keep; i++) prob[i] = float(s.weight[i] / total);
    int32_t kept = n_keep;
    if (in->top_p < 1.0f) {
        double cumulative = 0.0;
        for (int32_t i = 0; i < kept; i++) {
            cumulative += prob[i];
            if (cumulative >= in->top_p) {
                kept = i + 1;
                break;
            }
        }
    }
    if (in->min_p > 0.0f) {
        const float threshold = in->min_p * prob[0];
        int32_t i = 1;
        while (i < kept && prob[i] >= threshold) i++;
        kept = i;
    }
    double kept_mass = 0.0;
    for (int32_t i = 0; i < kept; i++) kept_mass += prob[i];
    const double u = in->u01 * kept_mass;
    double cumulative = 0.0;
    int32_t token = s.id[kept - 1];
    for (int32_t i = 0; i < kept; i++) {
        cumulative += prob[i];
        if (u < cumulative) {
            token = s.id[i];
            break;
        }
    }
    result->token = token;
    result->status = kSampleOk;
    result->probability = probability_of(token);
    if (step_token) *step_token = token;
}

}  // namespace

void launch_sample(float* logits, int32_t n_vocab, const SampleInputs* inputs, SampleResult* result,
                   int32_t* step_token, cudaStream_t stream, int32_t n_rows) {
    if (n_vocab <= 0) cuda_throw("launch_sample: n_vocab must be positive");
    if (n_rows < 1 || n_rows > 65535 || (step_token && n_rows != 1))
        cuda_throw("launch_sample: 1 to 65535 rows, and one when there is a step token");
    launch_kernel("sample_kernel", sample_kernel, n_rows, kThreads, 0, stream, logits, n_vocab, inputs, result,
                  step_token);
}

}  // namespace kvlm
