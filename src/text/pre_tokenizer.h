// text/pre_tokenizer.h — tokenizer.json "pre_tokenizer" section: Split (regex or literal, the five
// delimiter behaviours, invert), ByteLevel, Metaspace and Sequence. A pre-tokenizer turns one
// normalized segment into the pieces the model encodes; empty pieces are dropped (as HF does).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace rill::text {

/// Receives one piece; `at_origin` is true when the piece starts at offset 0 of the input text.
using PieceFn = std::function<void(std::string_view piece, bool at_origin)>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void split(std::string_view text, bool at_origin, const PieceFn& emit) const = 0;
};

/// Builds the pre-tokenizer described by j (null → nullptr). Unknown types fail naming `where`.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);

class Regex;
/// When j is exactly "split with a regex (Isolated), then map bytes to byte-level characters" —
/// Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)] or ByteLevel(use_regex=true),
/// without add_prefix_space — returns that regex, so the tokenizer can take a faster path that
/// maps bytes only on a cache miss. Otherwise nullptr.
std::unique_ptr<Regex> byte_level_split_regex(const nlohmann::json& j, const std::string& where);

/// GPT-2 byte-to-unicode table: byte b is written as the UTF-8 of byte_level_char(b).
const std::array<std::string, 256>& byte_level_chars();
/// Inverse table: code point → byte, or -1 when the code point is not a byte-level character.
int byte_level_byte(uint32_t code_point);

}  // namespace rill::text
