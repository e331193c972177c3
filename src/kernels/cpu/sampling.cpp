// kernels/cpu/sampling.cpp — CpuKernels::sample() and copy_kv_blocks(). One row at a time, in
// parallel over rows; a row reads only its own logits, params and adjust entries, and every
// threshold is exact (nth_element / a sorted scan in a fixed order), so a row's token does not
// depend on the rest of the batch. Semantics: SamplingRowParams (kernels.h), engine/sampler.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sampling_math.h"

namespace rill::cpu {
namespace {

using sampling::order_key;

float load(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const bf16_t*>(base)[i]);
    case DType::f16: return f16_to_f32(static_cast<const f16_t*>(base)[i]);
    default: return NAN;
  }
}

// The best `n` (value, id) pairs of x, best first: larger value, then lower id; NaN never enters.
void top_n(const float* x, int64_t V, int32_t n, float* values, int32_t* ids) {
  int32_t have = 0;
  for (int64_t i = 0; i < V && n > 0; ++i) {
    const float v = x[i];
    if (std::isnan(v) || (have == n && !(v > values[n - 1]))) continue;
    int32_t at = have < n ? have++ : n - 1;
    // Strictly greater moves up: an equal value keeps the lower id in front.
    while (at > 0 && v > values[at - 1]) {
      values[at] = values[at - 1];
      ids[at] = ids[at - 1];
      --at;
    }
    values[at] = v;
    ids[at] = int32_t(i);
  }
  for (int32_t j = have; j < n; ++j) {
    values[j] = -INFINITY;
    ids[j] = -1;
  }
}

int32_t argmax_row(const float* x, int64_t V) {
  int64_t best = -1;
  for (int64_t i = 0; i < V; ++i)
    if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
  return int32_t(std::max<int64_t>(best, 0));
}

struct RowScratch {
  std::vector<uint32_t> keys;
  std::vector<float> values;
};

int32_t draw(const SamplingRowParams& p, float* w, int64_t V, RowScratch& s) {
  const float inv_t = 1.f / p.temperature;
  float m = -INFINITY;
  for (int64_t i = 0; i < V; ++i) {
    w[i] *= inv_t;
    if (w[i] > m) m = w[i];
  }
  if (m == -INFINITY) return argmax_row(w, V);  // nothing samplable (all banned or NaN)
  // Keys below `lo` are cut. top-k: the k-th largest key (ties at the boundary are kept).
  uint32_t lo = 0;
  if (p.top_k > 0 && p.top_k < V) {
    s.keys.clear();
    for (int64_t i = 0; i < V; ++i)
      if (!std::isnan(w[i])) s.keys.push_back(order_key(w[i]));
    if (int64_t(s.keys.size()) > p.top_k) {
      auto kth = s.keys.begin() + (p.top_k - 1);
      std::nth_element(s.keys.begin(), kth, s.keys.end(), std::greater<uint32_t>());
      lo = *kth;
    }
  }
  // top-p over the top-k survivors: the largest threshold whose kept mass is >= top_p of theirs.
  if (p.top_p < 1.f) {
    s.values.clear();
    double total = 0;
    for (int64_t i = 0; i < V; ++i)
      if (!std::isnan(w[i]) && order_key(w[i]) >= lo) {
        s.values.push_back(w[i]);
        total += std::exp(double(w[i]) - double(m));
      }
    std::sort(s.values.begin(), s.values.end(), std::greater<float>());
    const double target = double(p.top_p) * total;
    double cumulative = 0;
    for (float v : s.values) {
      cumulative += std::exp(double(v) - double(m));
      if (cumulative >= target) {
        lo = std::max(lo, order_key(v));
        break;
      }
    }
  }
  // min-p: keep p_i >= min_p * p_max, i.e. w_i - m >= log(min_p).
  const double min_gap = p.min_p > 0.f ? std::log(double(p.min_p)) : -INFINITY;
  uint64_t key = sampling::draw_key(p.seed, p.step);
  int32_t best = -1;
  double best_score = -INFINITY;
  for (int64_t i = 0; i < V; ++i) {
    const float v = w[i];
    if (std::isnan(v) || order_key(v) < lo) continue;
    const double gap = double(v) - double(m);
    if (gap < min_gap) continue;
    const double score = gap + sampling::gumbel(key, int32_t(i));
    if (best < 0 || score > best_score) {
      best = int32_t(i);
      best_score = score;
    }
  }
  return best < 0 ? argmax_row(w, V) : best;
}

}  // namespace

void CpuKernels::sample(const SampleArgs& a) {
  constexpr const char* op = "sample";
  RILL_ENSURE(a.logits.defined() && a.logits.ndim() == 2, "[{}] logits must be [L, V], got {}", op,
              a.logits.describe());
  const int64_t L = a.logits.size(0), V = a.logits.size(1);
  RILL_ENSURE(a.params.nbytes() % sizeof(SamplingRowParams) == 0, "[{}] params: {} bytes is not a whole number of rows",
              op, a.params.nbytes());
  const int64_t R = int64_t(a.params.nbytes() / sizeof(SamplingRowParams));
  const int64_t E = a.adjust.defined() ? int64_t(a.adjust.nbytes() / sizeof(SamplingAdjust)) : 0;
  RILL_ENSURE(a.workspace.dtype() == DType::f32 && a.workspace.numel() >= R * V, "[{}] workspace {} is smaller than [{}, {}] f32",
              op, a.workspace.describe(), R, V);
  RILL_ENSURE(a.tokens.dtype() == DType::i32 && a.tokens.numel() >= R, "[{}] tokens {} must hold {} i32", op,
              a.tokens.describe(), R);
  RILL_ENSURE(a.logprobs.dtype() == DType::f32 && a.logprobs.numel() >= R * (1 + kMaxTopLogprobs),
              "[{}] logprobs {} must be [{}, {}] f32", op, a.logprobs.describe(), R, 1 + kMaxTopLogprobs);
  RILL_ENSURE(a.top_ids.dtype() == DType::i32 && a.top_ids.numel() >= R * kMaxTopLogprobs,
              "[{}] top_ids {} must be [{}, {}] i32", op, a.top_ids.describe(), R, kMaxTopLogprobs);
  std::vector<SamplingRowParams> params(static_cast<size_t>(R));
  if (R) std::memcpy(params.data(), a.params.data(), size_t(R) * sizeof(SamplingRowParams));
  const auto* adjust = static_cast<const SamplingAdjust*>(a.adjust.defined() ? a.adjust.data() : nullptr);
  const int64_t P = a.pending_tokens.defined() ? a.pending_tokens.numel() : 0;
  RILL_ENSURE(P == 0 || a.pending_tokens.dtype() == DType::i32, "[{}] pending_tokens {} must be i32", op,
              a.pending_tokens.describe());
  const int32_t* pending = P ? a.pending_tokens.data_as<const int32_t>() : nullptr;
  for (const SamplingRowParams& p : params) {
    RILL_ENSURE(p.pending < P, "[{}] pending {} outside the {} pending_tokens", op, p.pending, P);
    RILL_ENSURE(p.logit_row >= 0 && p.logit_row < L, "[{}] logit_row {} outside [0, {})", op, p.logit_row, L);
    RILL_ENSURE(p.adjust_begin >= 0 && p.adjust_begin <= p.adjust_end && p.adjust_end <= E,
                "[{}] adjust range [{}, {}) outside [0, {})", op, p.adjust_begin, p.adjust_end, E);
    RILL_ENSURE(p.num_top_logprobs >= 0 && p.num_top_logprobs <= kMaxTopLogprobs,
                "[{}] num_top_logprobs {} outside [0, {}]", op, p.num_top_logprobs, kMaxTopLogprobs);
    RILL_ENSURE(p.score_token < V, "[{}] score_token {} outside the vocabulary of {}", op, p.score_token, V);
  }
  ThreadPool::global().parallel_for(R, 1, [&](int64_t r0, int64_t r1) {
    thread_local RowScratch scratch;
    for (int64_t r = r0; r < r1; ++r) {
      const SamplingRowParams& p = params[size_t(r)];
      const char* raw = static_cast<const char*>(a.logits.data()) +
                        size_t(p.logit_row) * size_t(V) * dtype_size(a.logits.dtype());
      float* w = a.workspace.data_as<float>() + r * V;
      for (int64_t i = 0; i < V; ++i) w[i] = load(raw, a.logits.dtype(), i);
      // Logprobs of the raw distribution (before penalties, bias and temperature), when asked.
      float lse = 0.f;
      float* lp = a.logprobs.data_as<float>() + r * (1 + kMaxTopLogprobs);
      int32_t* top = a.top_ids.data_as<int32_t>() + r * kMaxTopLogprobs;
      if (p.logprobs) {
        float m0 = -INFINITY;
        for (int64_t i = 0; i < V; ++i) m0 = std::max(m0, w[i]);
        double sum = 0;
        for (int64_t i = 0; i < V; ++i) sum += std::exp(double(w[i]) - double(m0));
        lse = float(double(m0) + std::log(sum));
        top_n(w, V, p.num_top_logprobs, lp + 1, top);
        for (int32_t j = 0; j < kMaxTopLogprobs; ++j) {
          if (j < p.num_top_logprobs && top[j] >= 0) {
            lp[1 + j] -= lse;
          } else {
            lp[1 + j] = -INFINITY;
            top[j] = -1;
          }
        }
      }
      if (p.score_token >= 0) {  // a scored token: no draw, its raw logprob (above) is the result
        a.tokens.data_as<int32_t>()[r] = p.score_token;
        if (p.logprobs) lp[0] = load(raw, a.logits.dtype(), p.score_token) - lse;
        continue;
      }
      // A pending draw counts as one more output token: its entry's count + 1, or an entry of its own.
      const int32_t t = p.pending >= 0 ? pending[p.pending] : -1;
      bool t_seen = false;
      for (int32_t e = p.adjust_begin; e < p.adjust_end; ++e) {
        const SamplingAdjust& d = adjust[e];
        if (d.token < 0 || d.token >= V) continue;
        const bool is_t = d.token == t;
        t_seen |= is_t;
        w[d.token] = sampling::adjust_logit(w[d.token], d.output_count + (is_t ? 1 : 0), is_t ? 1 : d.in_context,
                                            d.bias, p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
      }
      if (t >= 0 && t < V && !t_seen)
        w[t] = sampling::adjust_logit(w[t], 1, 1, 0.f, p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
      const int32_t chosen = p.temperature > 0.f ? draw(p, w, V, scratch) : argmax_row(w, V);
      a.tokens.data_as<int32_t>()[r] = chosen;
      if (p.logprobs) lp[0] = load(raw, a.logits.dtype(), chosen) - lse;
    }
  });
}

void CpuKernels::copy_kv_blocks(KvLayer& cache, const Tensor& src_dst) {
  RILL_ENSURE(src_dst.dtype() == DType::i32 && src_dst.ndim() == 2 && src_dst.size(1) == 2,
              "[copy_kv_blocks] src_dst must be i32 [n, 2], got {}", src_dst.describe());
  const int64_t blocks = cache.k.size(0);
  const size_t block_bytes = cache.k.nbytes() / size_t(blocks);
  const int32_t* pairs = src_dst.data_as<const int32_t>();
  for (int64_t i = 0; i < src_dst.size(0); ++i) {
    const int32_t s = pairs[2 * i], d = pairs[2 * i + 1];
    RILL_ENSURE(s >= 0 && s < blocks && d >= 0 && d < blocks, "[copy_kv_blocks] pair ({}, {}) outside [0, {})", s, d,
                blocks);
    for (Tensor* t : {&cache.k, &cache.v}) {
      char* base = static_cast<char*>(t->data());
      std::memcpy(base + size_t(d) * block_bytes, base + size_t(s) * block_bytes, block_bytes);
    }
  }
}

}  // namespace rill::cpu
