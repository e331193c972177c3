// text/tokenizer.cpp — encode/decode with Hugging Face's pipeline order: added tokens are split
// out of the raw text, each remaining segment is normalized, then split on normalized added
// tokens, pre-tokenized and BPE-encoded; the post-processor adds BOS/EOS. Loading lives in
// tokenizer_load.cpp.
#include "text/tokenizer.h"

#include <algorithm>

#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace rill::text {

void Tokenizer::Impl::encode_pieces(std::string_view text, bool at_origin, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (byte_level_regex) {  // regex matches and the gaps between them, byte-level mapped
    size_t prev = 0, pos = 0, b = 0, e = 0;
    while (pos <= text.size() && byte_level_regex->find(text, pos, b, e)) {
      if (b > prev) model->encode_byte_level(text.substr(prev, b - prev), out);
      if (e > b) model->encode_byte_level(text.substr(b, e - b), out);
      prev = e;
      pos = e;
      if (e == b) {  // empty match: search again one character further
        if (e >= text.size()) break;
        pos = e + size_t(std::max(1, utf8_sequence_length(static_cast<unsigned char>(text[e]))));
      }
    }
    if (prev < text.size()) model->encode_byte_level(text.substr(prev), out);
    return;
  }
  if (!pre_tokenizer) {
    model->encode(text, out);
    return;
  }
  pre_tokenizer->split(text, at_origin, [&](std::string_view p, bool) { model->encode(p, out); });
}

void Tokenizer::Impl::encode_segment(std::string_view text, bool at_origin, bool parse_special,
                                     std::vector<int32_t>& out) const {
  std::string s(text);
  if (normalizer) normalizer->normalize(s);
  auto encode_piece = [&](std::string_view piece, bool origin) { encode_pieces(piece, origin, out); };
  if (!added.has_normalized()) {
    encode_piece(s, at_origin);
    return;
  }
  std::vector<AddedSplit> splits;
  added.split(s, /*normalized=*/true, !parse_special, splits);
  for (const AddedSplit& sp : splits) {
    if (sp.id >= 0) out.push_back(sp.id);
    else encode_piece(std::string_view(s).substr(sp.begin, sp.end - sp.begin), at_origin && sp.begin == 0);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& d = *impl_;
  std::string sanitized;
  if (!is_valid_utf8(text)) {
    sanitized = sanitize_utf8(text);
    text = sanitized;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) out.insert(out.end(), d.prefix_ids.begin(), d.prefix_ids.end());
  std::vector<AddedSplit> splits;
  d.added.split(text, /*normalized=*/false, !options.parse_special, splits);
  for (const AddedSplit& sp : splits) {
    if (sp.id >= 0) out.push_back(sp.id);
    else d.encode_segment(text.substr(sp.begin, sp.end - sp.begin), sp.begin == 0, options.parse_special, out);
  }
  if (options.add_special_tokens) out.insert(out.end(), d.suffix_ids.begin(), d.suffix_ids.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& d = *impl_;
  DecodeStream stream(d.decoder);
  std::string out;
  for (int32_t id : ids) {
    const std::string* t = d.token_text(id);
    if (t == nullptr || (skip_special_tokens && d.is_special(id))) continue;
    stream.push(*t, out);
  }
  stream.finish(out);
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.find(token)) return id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = impl_->added.find(id)) return t->content;
  const std::string* t = impl_->model->id_to_token(id);
  return t ? *t : std::string();
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }
std::string Tokenizer::bos_token() const { return impl_->bos_token; }
std::string Tokenizer::eos_token() const { return impl_->eos_token; }
bool Tokenizer::is_special(int32_t id) const { return impl_->is_special(id); }

}  // namespace rill::text
