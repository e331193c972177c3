// engine/sampler.cpp — see sampler.h.
#include "engine/sampler.h"

#include <algorithm>

#include "core/error.h"
#include "engine/request.h"

namespace rill {

Tensor Sampler::device_tensor(Buffer& buffer, DType dtype, std::initializer_list<int64_t> shape) {
  size_t bytes = dtype_size(dtype);
  for (int64_t d : shape) bytes *= size_t(d);
  if (buffer.size() < bytes) buffer = Buffer(kernels_.allocator(), std::max<size_t>(bytes * 3 / 2, 256));
  return buffer.as(dtype, shape);
}

void Sampler::sample(const Tensor& logits, std::span<const SampleRow> rows, std::vector<SampledToken>& out) {
  const int64_t R = int64_t(rows.size()), V = logits.size(1);
  out.resize(rows.size());
  if (R == 0) return;
  host_params_.clear();
  host_adjust_.clear();
  bool want_logprobs = false;
  int32_t max_top = 0;
  for (const SampleRow& row : rows) {
    const SamplingParams& s = *row.params;
    SamplingRowParams p;
    p.logit_row = row.logit_row;
    p.top_k = s.top_k > 0 ? s.top_k : 0;
    p.temperature = s.temperature;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.repetition_penalty = s.repetition_penalty;
    p.presence_penalty = s.presence_penalty;
    p.frequency_penalty = s.frequency_penalty;
    p.seed = row.seed;
    p.step = row.step;
    p.adjust_begin = int32_t(host_adjust_.size());
    if (row.adjust)
      for (const auto& [token, a] : *row.adjust) host_adjust_.push_back(a);
    p.adjust_end = int32_t(host_adjust_.size());
    p.num_top_logprobs = s.logprobs ? s.top_logprobs : 0;
    p.logprobs = s.logprobs ? 1 : 0;
    want_logprobs |= s.logprobs;
    max_top = std::max(max_top, p.num_top_logprobs);
    host_params_.push_back(p);
  }
  SampleArgs a;
  a.logits = logits;
  a.params = device_tensor(params_, DType::u8, {int64_t(R * int64_t(sizeof(SamplingRowParams)))});
  kernels_.upload(host_params_.data(), a.params);
  if (!host_adjust_.empty()) {
    a.adjust = device_tensor(adjust_, DType::u8, {int64_t(host_adjust_.size() * sizeof(SamplingAdjust))});
    kernels_.upload(host_adjust_.data(), a.adjust);
  }
  a.workspace = device_tensor(workspace_, DType::f32, {R, V});
  a.tokens = device_tensor(tokens_, DType::i32, {R});
  a.logprobs = device_tensor(logprobs_, DType::f32, {R, 1 + kMaxTopLogprobs});
  a.top_ids = device_tensor(top_ids_, DType::i32, {R, kMaxTopLogprobs});
  kernels_.sample(a);
  host_tokens_.resize(size_t(R));
  kernels_.download(a.tokens, host_tokens_.data());
  if (want_logprobs) {
    host_logprobs_.resize(size_t(R) * (1 + kMaxTopLogprobs));
    kernels_.download(a.logprobs, host_logprobs_.data());
    if (max_top > 0) {
      host_top_ids_.resize(size_t(R) * kMaxTopLogprobs);
      kernels_.download(a.top_ids, host_top_ids_.data());
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    SampledToken& t = out[size_t(r)];
    t.token = host_tokens_[size_t(r)];
    t.top_logprobs.clear();
    if (!rows[size_t(r)].params->logprobs) continue;
    const float* lp = host_logprobs_.data() + r * (1 + kMaxTopLogprobs);
    t.logprob = lp[0];
    for (int32_t j = 0; j < host_params_[size_t(r)].num_top_logprobs; ++j) {
      const int32_t id = host_top_ids_[size_t(r) * kMaxTopLogprobs + size_t(j)];
      if (id >= 0) t.top_logprobs.emplace_back(id, lp[1 + j]);
    }
  }
}

}  // namespace rill
