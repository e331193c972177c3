// text/detokenizer.cpp — IncrementalDetokenizer: the tokenizer's streaming decode pipeline
// (decoder.h) fed one id at a time, so its output concatenates to Tokenizer::decode exactly.
#include "text/detokenizer.h"

#include "text/decoder.h"
#include "text/tokenizer_impl.h"

namespace rill::text {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : impl_(tok.impl_), skip_special_(skip_special_tokens), stream_(std::make_unique<DecodeStream>(impl_->decoder)) {}
IncrementalDetokenizer::~IncrementalDetokenizer() = default;
IncrementalDetokenizer::IncrementalDetokenizer(IncrementalDetokenizer&&) noexcept = default;
IncrementalDetokenizer& IncrementalDetokenizer::operator=(IncrementalDetokenizer&&) noexcept = default;

std::string IncrementalDetokenizer::push(int32_t id) {
  std::string out;
  const std::string* t = impl_->token_text(id);
  if (t == nullptr || (skip_special_ && impl_->is_special(id))) return out;
  stream_->push(*t, out);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  stream_->finish(out);
  stream_ = std::make_unique<DecodeStream>(impl_->decoder);  // ready for reuse
  return out;
}

}  // namespace rill::text
