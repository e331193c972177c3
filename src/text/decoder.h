// text/decoder.h — tokenizer.json "decoder" section as a streaming pipeline: ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, Sequence. Tokens go in one at a time and text comes out
// as soon as it is final, so that one code path serves both Tokenizer::decode (push all, finish)
// and the incremental detokenizer: their outputs are equal by construction.
// Invariant: every chunk returned is valid UTF-8 and never ends inside a character.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rill::text {

/// The immutable decoder description built from tokenizer.json.
class Decoder {
 public:
  /// j null → tokens joined with " " (tokenizers' behaviour without a decoder).
  static std::shared_ptr<const Decoder> from_json(const nlohmann::json& j, const std::string& where);

  struct Step;  // defined in decoder.cpp
  std::vector<Step> steps;
  bool join_with_space = false;
  ~Decoder();
};

/// Streaming state for one sequence.
class DecodeStream {
 public:
  explicit DecodeStream(std::shared_ptr<const Decoder> decoder);
  ~DecodeStream();
  DecodeStream(DecodeStream&&) noexcept;
  DecodeStream& operator=(DecodeStream&&) noexcept;

  /// Feeds one token's text; appends the text that became final to out.
  void push(std::string_view token, std::string& out);
  /// Ends the sequence; appends what was held back (an incomplete UTF-8 tail becomes U+FFFD).
  void finish(std::string& out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace rill::text
