// engine/spec/ngram.cpp — see ngram.h.
#include "engine/spec/ngram.h"

#include <algorithm>

#include "core/error.h"

namespace rill {

NgramDraftSource::NgramDraftSource(const NgramOptions& options) : options_(options) {
  RILL_ENSURE(options.min_n >= 1, "speculative ngram min: must be >= 1, got {}", options.min_n);
  RILL_ENSURE(options.max_n >= options.min_n, "speculative ngram max: must be >= the min ({}), got {}", options.min_n,
              options.max_n);
}

void NgramDraftSource::propose(std::span<const int32_t> context, int32_t max_drafts, std::vector<int32_t>& out) {
  const int64_t L = int64_t(context.size());
  if (max_drafts <= 0 || L < 2) return;
  const int32_t last = context[size_t(L - 1)];
  // One backward scan: every earlier position holding the last token ends a match of the suffix;
  // its length is counted backwards up to max_n. The longest wins, the latest among equals (the
  // first seen), and a match of max_n ends the scan.
  int64_t best_end = -1;
  int32_t best_len = 0;
  for (int64_t i = L - 2; i >= 0; --i) {
    if (context[size_t(i)] != last) continue;
    int32_t m = 1;
    while (m < options_.max_n && i - m >= 0 && context[size_t(i - m)] == context[size_t(L - 1 - m)]) ++m;
    if (m > best_len) {
      best_len = m;
      best_end = i;
      if (m == options_.max_n) break;
    }
  }
  if (best_len < options_.min_n) return;
  // The tokens that followed the match (at least one: best_end <= L - 2). Where they run into the
  // context's end, the text repeats with period L - from, so the drafts go on from the drafts
  // themselves: a run of one token, or a cycle the output has entered, is drafted in full.
  const int64_t from = best_end + 1;
  const size_t base = out.size();
  for (int64_t pos = from; pos < from + max_drafts; ++pos)
    out.push_back(pos < L ? context[size_t(pos)] : out[base + size_t(pos - L)]);
}

}  // namespace rill
