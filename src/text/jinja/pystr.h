// text/jinja/pystr.h — Python str semantics on UTF-8 strings (code-point indexing, isspace,
// strip/split/replace/case mapping) so template string operations match CPython byte for byte.
// Strings are assumed valid UTF-8 (invalid bytes decode as U+FFFD); not responsible for repr.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rill::text::jinja {

std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
size_t code_point_count(std::string_view s);

bool py_isspace(char32_t c);
bool py_isprintable(char32_t c);
bool py_isalnum(char32_t c);

/// str.strip/lstrip/rstrip: chars == nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
/// str.split / str.rsplit: sep == nullopt splits on whitespace runs; maxsplit < 0 is unlimited.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right);
/// str.splitlines(keepends=False).
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count);
int64_t py_count(std::string_view s, std::string_view sub);
/// str.find / str.rfind in code points, -1 when absent.
int64_t py_find(std::string_view s, std::string_view sub, bool from_right);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       ///< str.title()
std::string py_capitalize(std::string_view s);  ///< str.capitalize()
std::string py_center(std::string_view s, int64_t width, std::string_view fill = " ");

}  // namespace rill::text::jinja
