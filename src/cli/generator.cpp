// cli/generator.cpp — see generator.h.
#include "cli/generator.h"

#include <algorithm>

#include "core/error.h"

namespace rill::cli {

TokenPicker::TokenPicker(Kernels& kernels, const SamplingOptions& o) : sampler_(kernels), seed_(o.seed) {
  params_.temperature = std::max(0.f, o.temperature);
  params_.top_p = o.top_p;
  params_.top_k = o.top_k;
}

int32_t TokenPicker::pick(const Tensor& logits) {
  SampleRow row;
  row.params = &params_;
  row.seed = seed_;
  row.step = step_++;
  row.logit_row = int32_t(logits.size(0) - 1);
  sampler_.sample(logits, std::span<const SampleRow>(&row, 1), out_);
  return out_[0].token;
}

Generator::Generator(Model& model, int32_t max_context, int32_t block_size, int32_t prefill_chunk)
    : model_(model),
      block_size_(block_size),
      prefill_chunk_(prefill_chunk),
      max_context_(max_context),
      kv_(model.kernels(), model.kv_spec(), (max_context + block_size - 1) / block_size, block_size) {
  for (int32_t b = 0; b < kv_.num_blocks(); ++b) blocks_.push_back(b);
}

Tensor Generator::feed(const std::vector<int32_t>& tokens) {
  RILL_ENSURE(!tokens.empty(), "[generate] nothing to feed");
  if (length_ + int32_t(tokens.size()) > max_context_)
    fail("the sequence would reach {} tokens, past the context of {} tokens", length_ + tokens.size(), max_context_);
  Tensor logits;
  for (size_t start = 0; start < tokens.size(); start += size_t(prefill_chunk_)) {
    size_t n = std::min(tokens.size() - start, size_t(prefill_chunk_));
    std::vector<int32_t> chunk(tokens.begin() + long(start), tokens.begin() + long(start + n));
    StepBatchBuilder b(block_size_);
    b.add_row(chunk, length_, blocks_, start + n == tokens.size() ? Logits::last : Logits::none);
    logits = model_.forward(b.build(), kv_.layers());
    length_ += int32_t(n);
  }
  return logits;
}

}  // namespace rill::cli
