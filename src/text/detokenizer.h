// text/detokenizer.h — incremental detokenizer for streaming generation (one per sequence).
// Invariant: the concatenation of every push() and the final flush() equals
// Tokenizer::decode(all ids, skip_special_tokens), and no chunk ends inside a UTF-8 character.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "text/tokenizer.h"

namespace rill::text {

class DecodeStream;

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = false);
  ~IncrementalDetokenizer();
  IncrementalDetokenizer(IncrementalDetokenizer&&) noexcept;
  IncrementalDetokenizer& operator=(IncrementalDetokenizer&&) noexcept;

  /// Text that became final with this token (may be ""); unknown ids decode to nothing.
  std::string push(int32_t id);
  /// Whatever is held back at the end (an invalid or incomplete tail becomes U+FFFD).
  std::string flush();

 private:
  std::shared_ptr<const Tokenizer::Impl> impl_;
  bool skip_special_;
  std::unique_ptr<DecodeStream> stream_;
};

}  // namespace rill::text
