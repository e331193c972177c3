// text/pre_tokenizer_regex.h — PCRE2 (UTF + UCP, JIT) regex used by Split pre-tokenizers and
// Replace normalizers. Hugging Face compiles these patterns with Oniguruma; translate_hf_regex
// rewrites the few constructs whose meaning differs in PCRE2 (\s, \S).
// Not responsible for input validation: callers pass valid UTF-8 (matching skips the UTF check).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace rill::text {

/// Rewrites an Oniguruma pattern for PCRE2: \s / \S become Oniguruma's Unicode whitespace class
/// (U+0009-U+000D, U+0085, \p{Z}), which differs from PCRE2's UCP \s (that adds U+180E).
std::string translate_hf_regex(std::string_view pattern);

/// A compiled pattern; cheap to copy (shared), safe to use from several threads.
class Regex {
 public:
  /// Compiles `pattern` as-is (already PCRE2 syntax); `where` names the source for errors.
  Regex(std::string_view pattern, std::string_view where);
  /// First match at or after byte `pos`: sets [begin, end) and returns true, or returns false.
  bool find(std::string_view text, size_t pos, size_t& begin, size_t& end) const;
  /// Calls fn(begin, end) for each non-overlapping match, left to right (byte offsets).
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& fn) const;

 private:
  struct Code;
  std::shared_ptr<Code> code_;
};

}  // namespace rill::text
