// text/utf8.h — UTF-8 primitives shared by the tokenizer, the detokenizer and the templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rill::text {

/// Length of the UTF-8 sequence announced by a lead byte (1..4), or 0 for a continuation/invalid byte.
int utf8_sequence_length(unsigned char lead);

/// True when s is well-formed UTF-8 (no overlongs, no surrogates, ≤ U+10FFFF).
bool is_valid_utf8(std::string_view s);

/// Number of bytes at the end of s that form an incomplete (but so far valid) sequence: 0..3.
size_t incomplete_utf8_suffix(std::string_view s);

/// Replaces each maximal invalid subsequence with U+FFFD (as Python's errors="replace").
std::string sanitize_utf8(std::string_view s);

/// Appends the UTF-8 encoding of a code point.
void append_utf8(std::string& out, uint32_t code_point);

}  // namespace rill::text
