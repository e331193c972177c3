// cli/generator.cpp — see generator.h.
#include "cli/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cli/common.h"
#include "core/error.h"

namespace rill::cli {

int32_t HostSampler::sample(std::vector<float> logits) {
  const int32_t V = int32_t(logits.size());
  if (o_.temperature <= 0.f) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  int32_t keep = o_.top_k > 0 ? std::min(o_.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  order.resize(size_t(keep));
  const float top = logits[size_t(order[0])];
  std::vector<double> p(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += p[i] = std::exp(double(logits[size_t(order[i])] - top) / o_.temperature);
  double cumulative = 0;
  size_t cut = order.size();
  for (size_t i = 0; i < order.size(); ++i) {
    cumulative += p[i] / sum;
    if (cumulative >= o_.top_p) {
      cut = i + 1;
      break;
    }
  }
  std::discrete_distribution<size_t> pick(p.begin(), p.begin() + long(cut));
  return order[pick(rng_)];
}

Generator::Generator(Model& model, int32_t max_context, int32_t block_size, int32_t prefill_chunk)
    : model_(model),
      block_size_(block_size),
      prefill_chunk_(prefill_chunk),
      max_context_(max_context),
      kv_(model.kernels(), model.kv_spec(), (max_context + block_size - 1) / block_size, block_size) {
  for (int32_t b = 0; b < kv_.num_blocks(); ++b) blocks_.push_back(b);
}

std::vector<float> Generator::feed(const std::vector<int32_t>& tokens) {
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
  return logits_to_host(model_.kernels(), logits);
}

}  // namespace rill::cli
