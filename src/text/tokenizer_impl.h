// text/tokenizer_impl.h — the loaded pipeline behind Tokenizer (shared by the detokenizer).
// Internal header: only tokenizer*.cpp and detokenizer.cpp include it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/bpe.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/pre_tokenizer_regex.h"
#include "text/tokenizer.h"
#include "text/tokenizer_added_tokens.h"

namespace rill::text {

struct Tokenizer::Impl {
  std::string where;  // tokenizer.json path, for messages
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Regex> byte_level_regex;  // fast path equivalent to pre_tokenizer, when set
  std::unique_ptr<BpeModel> model;
  AddedTokens added;
  std::shared_ptr<const Decoder> decoder;
  std::vector<int32_t> prefix_ids, suffix_ids;  // added around the text when add_special_tokens
  std::vector<uint8_t> special;                 // by id: skipped by decode(skip_special_tokens)
  int32_t vocab_size = 0;
  std::optional<int32_t> bos_id, eos_id;
  std::string bos_token, eos_token;

  /// Token text for decoding: the added token's content, else the model's token; nullptr if unknown.
  const std::string* token_text(int32_t id) const {
    if (const AddedToken* t = added.find(id)) return &t->decode_text;
    return model->id_to_token(id);
  }
  bool is_special(int32_t id) const { return id >= 0 && size_t(id) < special.size() && special[size_t(id)]; }
  void encode_pieces(std::string_view text, bool at_origin, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view text, bool at_origin, bool parse_special, std::vector<int32_t>& out) const;
};

}  // namespace rill::text
