// text/jinja/pystr.cpp — Python str operations on UTF-8 (see pystr.h). Case mapping goes
// through ICU so non-ASCII text (ß → SS, final sigma) maps as CPython does.
#include "text/jinja/pystr.h"

#include <unicode/uchar.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <algorithm>

#include "core/error.h"
#include "text/utf8.h"

namespace rill::text::jinja {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = utf8_sequence_length(c);
    if (n == 0 || i + n > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool py_isprintable(char32_t c) {
  if (c < 0x80) return c >= 0x20 && c < 0x7F;
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool py_isalnum(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return u_isalnum(static_cast<UChar32>(c));
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  std::u32string u = utf8_decode(s);
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("ValueError: empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        out.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      out.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        rev.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      rev.emplace_back(s.substr(0, end));
      out.assign(rev.rbegin(), rev.rend());
    }
    return out;
  }
  std::u32string u = utf8_decode(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = u.size();
        while (e > i && py_isspace(u[e - 1])) --e;
        out.push_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  std::vector<std::string> rev;
  size_t e = u.size();
  while (true) {
    while (e > 0 && py_isspace(u[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) >= maxsplit) {
      size_t b = 0;
      while (b < e && py_isspace(u[b])) ++b;
      rev.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
      break;
    }
    size_t b = e;
    while (b > 0 && !py_isspace(u[b - 1])) --b;
    rev.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
    e = b;
  }
  out.assign(rev.rbegin(), rev.rend());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::u32string u = utf8_decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    out.push_back(utf8_encode(std::u32string_view(u).substr(start, i - start)));
    i += (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    start = i;
  }
  if (start < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    std::u32string u = utf8_decode(s);
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_text);
    pos = hit + old_text.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(code_point_count(s)) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
  size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(code_point_count(s.substr(0, hit)));
}

namespace {

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string icu_case(std::string_view s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  if (upper)
    u.toUpper(icu::Locale::getRoot());
  else
    u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string one_case(char32_t c, int mode) {  // 0 lower, 1 upper, 2 title
  if (c < 0x80) {
    char ch = static_cast<char>(c);
    if (mode == 0 && ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    if (mode != 0 && ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 'a' + 'A');
    return std::string(1, ch);
  }
  std::string one;
  append_utf8(one, c);
  if (mode == 2) {
    std::string out;
    append_utf8(out, static_cast<char32_t>(u_totitle(static_cast<UChar32>(c))));
    return out;
  }
  return icu_case(one, mode == 1);
}

bool is_cased(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
}

}  // namespace

std::string py_upper(std::string_view s) {
  if (!is_ascii(s)) return icu_case(s, true);
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string py_lower(std::string_view s) {
  if (!is_ascii(s)) return icu_case(s, false);
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    out += one_case(c, prev_cased ? 0 : 2);
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) out += one_case(u[i], i == 0 ? 2 : 0);
  return out;
}

std::string py_center(std::string_view s, int64_t width, std::string_view fill) {
  int64_t len = static_cast<int64_t>(code_point_count(s));
  if (width <= len) return std::string(s);
  int64_t marg = width - len;
  int64_t left = marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < marg - left; ++k) out += fill;
  return out;
}

}  // namespace rill::text::jinja
