// text/tokenizer_added_tokens.h — the added-token vocabulary of tokenizer.json ("added_tokens"):
// finds added tokens in text with leftmost-longest matching and applies their single_word,
// lstrip and rstrip flags exactly as tokenizers' AddedVocabulary::find_matches does.
// Not responsible for normalizing the text between matches (tokenizer.cpp does that).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rill::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  std::string decode_text;  // what decode() feeds the decoder: content, normalized if `normalized`
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

/// One piece of a split: [begin, end) of the searched text; id >= 0 for an added token.
struct AddedSplit {
  size_t begin, end;
  int32_t id;
};

class Normalizer;

class AddedTokens {
 public:
  AddedTokens() = default;
  /// Reads the "added_tokens" array; normalized tokens are matched in their normalized form.
  AddedTokens(const nlohmann::json& list, const Normalizer* normalizer, const std::string& where);

  /// Splits text on added tokens (normalized = false: raw-text tokens; true: normalized-text tokens).
  /// With skip_special, special tokens are not matched (their text is encoded as ordinary text).
  void split(std::string_view text, bool normalized, bool skip_special, std::vector<AddedSplit>& out) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> find(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool has_normalized() const { return !tries_[1].nodes.empty() && tries_[1].nodes.size() > 1; }

 private:
  // Byte trie; children in one hash map keyed by (node << 8 | byte).
  struct Trie {
    std::vector<int32_t> nodes;  // token index ending at the node, or -1
    std::unordered_map<uint64_t, int32_t> children;
    bool first_byte[256] = {};
    void add(std::string_view s, int32_t token_index);
    /// Longest token starting at text[pos]: (token index, length) or (-1, 0).
    std::pair<int32_t, size_t> longest(std::string_view text, size_t pos) const;
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  Trie tries_[2];
};

}  // namespace rill::text
