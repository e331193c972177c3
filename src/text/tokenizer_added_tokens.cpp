// text/tokenizer_added_tokens.cpp — added-token matching. Word and space classes follow Rust's
// regex crate (\w: Alphabetic, Mark, Nd, Pc, Join_Control; \s: White_Space), via ICU.
#include "text/tokenizer_added_tokens.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/normalizer.h"

namespace rill::text {
namespace {

UChar32 char_at(std::string_view s, size_t i) {
  UChar32 c;
  int32_t idx = int32_t(i);
  U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), idx, int32_t(s.size()), c);
  return c;
}

UChar32 char_before(std::string_view s, size_t end) {
  UChar32 c;
  int32_t idx = int32_t(end);
  U8_PREV(reinterpret_cast<const uint8_t*>(s.data()), 0, idx, c);
  return c;
}

bool is_word_char(UChar32 c) {
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
  int8_t t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool is_space_char(UChar32 c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }

size_t char_len_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) --i;
  return end - i;
}

}  // namespace

void AddedTokens::Trie::add(std::string_view s, int32_t token_index) {
  if (nodes.empty()) nodes.push_back(-1);
  int32_t node = 0;
  for (unsigned char c : s) {
    uint64_t k = (uint64_t(node) << 8) | c;
    auto it = children.find(k);
    if (it == children.end()) {
      nodes.push_back(-1);
      it = children.emplace(k, int32_t(nodes.size() - 1)).first;
    }
    node = it->second;
  }
  if (nodes[size_t(node)] < 0) nodes[size_t(node)] = token_index;  // first token with this text wins
  first_byte[static_cast<unsigned char>(s[0])] = true;
}

std::pair<int32_t, size_t> AddedTokens::Trie::longest(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = children.find((uint64_t(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == children.end()) break;
    node = it->second;
    if (nodes[size_t(node)] >= 0) best = {nodes[size_t(node)], i + 1 - pos};
  }
  return best;
}

AddedTokens::AddedTokens(const nlohmann::json& list, const Normalizer* normalizer, const std::string& where) {
  if (list.is_null()) return;
  if (!list.is_array()) fail("{}: added_tokens must be an array", where);
  for (const auto& j : list) {
    AddedToken t;
    t.id = j.at("id").get<int32_t>();
    t.content = j.at("content").get<std::string>();
    t.single_word = j.value("single_word", false);
    t.lstrip = j.value("lstrip", false);
    t.rstrip = j.value("rstrip", false);
    t.normalized = j.value("normalized", !j.value("special", false));
    t.special = j.value("special", false);
    if (t.content.empty()) continue;  // tokenizers ignores empty added tokens
    // tokenizers decodes a normalized added token as its normalized form (seen with 0.23:
    // Prepend("▁") makes "<n>" decode as " <n>"), so keep that text for decoding.
    t.decode_text = t.content;
    if (t.normalized && normalizer) normalizer->normalize(t.decode_text);
    by_id_[t.id] = tokens_.size();
    by_content_.emplace(t.content, t.id);
    tokens_.push_back(std::move(t));
  }
  // tokenizers builds its matcher from the special tokens first, then the others.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const AddedToken& t = tokens_[i];
      if (t.special != (pass == 0)) continue;
      if (!t.normalized) {
        tries_[0].add(t.content, int32_t(i));
      } else {
        std::string n = t.content;
        if (normalizer) normalizer->normalize(n);
        if (!n.empty()) tries_[1].add(n, int32_t(i));
      }
    }
}

void AddedTokens::split(std::string_view text, bool normalized, bool skip_special,
                        std::vector<AddedSplit>& out) const {
  out.clear();
  const Trie& trie = tries_[normalized ? 1 : 0];
  size_t start_offset = 0;
  if (!trie.nodes.empty()) {
    for (size_t pos = 0; pos < text.size();) {
      if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      auto [index, len] = trie.longest(text, pos);
      if (index < 0) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + len;
      pos = stop;  // matches never overlap, whatever happens to this one
      const AddedToken& t = tokens_[size_t(index)];
      if (skip_special && t.special) continue;
      if (t.single_word) {
        bool start_space = start == 0 || !is_word_char(char_before(text, start));
        bool stop_space = stop == text.size() || !is_word_char(char_at(text, stop));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t s = start;
        while (s > 0 && is_space_char(char_before(text, s))) s -= char_len_before(text, s);
        start = std::max(s, start_offset);
      }
      if (t.rstrip) {
        while (stop < text.size() && is_space_char(char_at(text, stop))) {
          size_t n = size_t(U8_LENGTH(char_at(text, stop)));
          stop += n;
        }
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, t.id});
      start_offset = stop;
    }
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

const AddedToken* AddedTokens::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokens::find(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace rill::text
