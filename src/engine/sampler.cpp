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

namespace {
constexpr size_t align16(size_t n) { return (n + 15) / 16 * 16; }
// Byte offsets of a slot's logprobs and top ids for R rows, and its size.
size_t logprobs_offset(int64_t R) { return align16(size_t(R) * sizeof(int32_t)); }
size_t top_ids_offset(int64_t R) {
  return align16(logprobs_offset(R) + size_t(R) * (1 + kMaxTopLogprobs) * sizeof(float));
}
size_t slot_bytes(int64_t R) { return top_ids_offset(R) + size_t(R) * kMaxTopLogprobs * sizeof(int32_t); }
}  // namespace

void Sampler::sample(const Tensor& logits, std::span<const SampleRow> rows, std::vector<SampledToken>& out) {
  RILL_CHECK(pending_ == 0, "Sampler::sample with {} launches uncollected", pending_);
  launch(logits, rows);
  collect(out);
}

Tensor Sampler::last_tokens() const {
  RILL_CHECK(slots_[next_ ^ 1u].rows > 0, "Sampler::last_tokens without a launch of at least one row");
  const Slot& s = slots_[next_ ^ 1u];
  return Tensor(s.out.data(), DType::i32, {s.rows}, s.out.device());
}

void Sampler::pack_adjust(const std::unordered_map<int32_t, SamplingAdjust>& adjust, std::span<const int32_t> counted) {
  const auto is_counted = [&](int32_t t) { return std::find(counted.begin(), counted.end(), t) != counted.end(); };
  for (const auto& [token, a] : adjust)
    if (counted.empty() || !is_counted(token)) host_adjust_.push_back(a);
  // Each counted token once: its entry (or none) with its occurrences added as output tokens.
  for (size_t k = 0; k < counted.size(); ++k) {
    const int32_t t = counted[k];
    if (std::find(counted.begin(), counted.begin() + std::ptrdiff_t(k), t) != counted.begin() + std::ptrdiff_t(k))
      continue;
    const auto it = adjust.find(t);
    SamplingAdjust a = it != adjust.end() ? it->second : SamplingAdjust{};
    a.token = t;
    a.output_count += int32_t(std::count(counted.begin(), counted.end(), t));
    a.in_context = 1;
    host_adjust_.push_back(a);
  }
}

void Sampler::launch(const Tensor& logits, std::span<const SampleRow> rows, const Tensor& pending_tokens) {
  RILL_CHECK(pending_ < 2, "Sampler::launch with two launches uncollected");
  const int64_t R = int64_t(rows.size()), V = logits.size(1);
  Slot& slot = slots_[next_];
  slot.rows = R;
  slot.num_top.clear();
  host_params_.clear();
  host_adjust_.clear();
  bool want_logprobs = false;
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
    if (row.adjust) pack_adjust(*row.adjust, row.counted);
    p.adjust_end = int32_t(host_adjust_.size());
    const bool logprobs = s.logprobs || row.score_token >= 0;
    p.num_top_logprobs = row.score_token >= 0 ? std::max(s.prompt_logprobs, 0) : s.logprobs ? s.top_logprobs : 0;
    p.logprobs = logprobs ? 1 : 0;
    p.score_token = row.score_token;
    p.pending = row.pending;
    RILL_CHECK(row.pending < 0 || (pending_tokens.defined() && row.pending < pending_tokens.numel()),
               "sample row pending {} of {} pending ids", row.pending,
               pending_tokens.defined() ? pending_tokens.numel() : 0);
    want_logprobs |= logprobs;
    slot.num_top.push_back(logprobs ? p.num_top_logprobs : -1);
    host_params_.push_back(p);
  }
  slot.logprobs = want_logprobs;
  next_ ^= 1u;
  ++pending_;
  if (R == 0) return;
  // The slot was collected (its last copy has arrived), so its buffers may be replaced. The shared
  // inputs below may be replaced while the other slot's draw is still queued: every op, upload and
  // free of this backend is ordered on one queue, so that draw has read them before they change.
  const size_t bytes = slot_bytes(R);
  if (slot.out.size() < bytes) {
    slot.out = Buffer(kernels_.allocator(), std::max<size_t>(bytes * 3 / 2, 256));
    slot.readback.reset();
  }
  if (!slot.readback) slot.readback = kernels_.make_readback(slot.out.size());
  char* base = static_cast<char*>(slot.out.data());
  const Device dev = slot.out.device();
  SampleArgs a;
  a.logits = logits;
  a.params = device_tensor(params_, DType::u8, {int64_t(R * int64_t(sizeof(SamplingRowParams)))});
  kernels_.upload(host_params_.data(), a.params);
  if (!host_adjust_.empty()) {
    a.adjust = device_tensor(adjust_, DType::u8, {int64_t(host_adjust_.size() * sizeof(SamplingAdjust))});
    kernels_.upload(host_adjust_.data(), a.adjust);
  }
  a.workspace = device_tensor(workspace_, DType::f32, {R, V});
  a.tokens = Tensor(base, DType::i32, {R}, dev);
  a.logprobs = Tensor(base + logprobs_offset(R), DType::f32, {R, 1 + kMaxTopLogprobs}, dev);
  a.top_ids = Tensor(base + top_ids_offset(R), DType::i32, {R, kMaxTopLogprobs}, dev);
  a.pending_tokens = pending_tokens;
  kernels_.sample(a);
  // Only the ids come back unless a row asked for logprobs.
  const int64_t copy = want_logprobs ? int64_t(bytes) : R * int64_t(sizeof(int32_t));
  slot.readback->start(Tensor(base, DType::u8, {copy}, dev));
}

void Sampler::abandon() { pending_ = 0; }

void Sampler::collect(std::vector<SampledToken>& out) {
  RILL_CHECK(pending_ > 0, "Sampler::collect with nothing launched");
  Slot& slot = slots_[pending_ == 2 ? next_ : next_ ^ 1u];
  --pending_;
  const int64_t R = slot.rows;
  out.resize(size_t(R));
  if (R == 0) return;
  const char* bytes = static_cast<const char*>(slot.readback->wait());
  const int32_t* tokens = reinterpret_cast<const int32_t*>(bytes);
  const float* logprobs = reinterpret_cast<const float*>(bytes + logprobs_offset(R));
  const int32_t* top_ids = reinterpret_cast<const int32_t*>(bytes + top_ids_offset(R));
  for (int64_t r = 0; r < R; ++r) {
    SampledToken& t = out[size_t(r)];
    t.token = tokens[r];
    t.logprob = 0.f;
    t.top_logprobs.clear();
    const int32_t num_top = slot.num_top[size_t(r)];
    if (num_top < 0) continue;
    const float* lp = logprobs + r * (1 + kMaxTopLogprobs);
    t.logprob = lp[0];
    for (int32_t j = 0; j < num_top; ++j) {
      const int32_t id = top_ids[r * kMaxTopLogprobs + j];
      if (id >= 0) t.top_logprobs.emplace_back(id, lp[1 + j]);
    }
  }
}

}  // namespace rill
