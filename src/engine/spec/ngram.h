// engine/spec/ngram.h — NgramDraftSource: drafts by looking the context's own last tokens up in
// the context (prompt lookup). The longest suffix of `max_n` down to `min_n` tokens that occurred
// before is found at its latest earlier occurrence, and the tokens that followed it there are the
// drafts (continued periodically where they reach the context's end). No second model, no device
// work: it pays where the output repeats its input (code edits, quoting a document, structured
// output) and costs nothing where it finds no match.
#pragma once

#include "engine/spec/draft_source.h"

namespace rill {

struct NgramOptions {
  int32_t min_n = 2;  ///< shortest suffix looked up (1 drafts from any earlier occurrence of the last token)
  int32_t max_n = 4;  ///< longest suffix looked up; the longest match wins
};

class NgramDraftSource final : public DraftSource {
 public:
  /// Throws rill::Error naming the field when 1 <= min_n <= max_n does not hold.
  explicit NgramDraftSource(const NgramOptions& options);
  void propose(std::span<const int32_t> context, int32_t max_drafts, std::vector<int32_t>& out) override;

 private:
  NgramOptions options_;
};

}  // namespace rill
