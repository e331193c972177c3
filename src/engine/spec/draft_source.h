// engine/spec/draft_source.h — where speculative decoding's drafts come from. A draft source
// proposes the tokens a sequence is likely to generate next; the engine runs them through the model
// in one row with the sequence's last token, draws a token at every position as a plain decode step
// would (same logits, same noise key), keeps the drafts up to the first one that differs from its
// draw, and rolls the rest back (engine/engine_core.h, "Speculative decoding"). A draft source only
// decides how many steps one forward saves, never which tokens come out.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace rill {

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  /// Appends at most `max_drafts` tokens likely to follow `context` (the sequence's prompt and
  /// output so far) to `out`; appends none when it has no guess. Called on the engine thread.
  virtual void propose(std::span<const int32_t> context, int32_t max_drafts, std::vector<int32_t>& out) = 0;
};

}  // namespace rill
