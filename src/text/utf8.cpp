// text/utf8.cpp — strict UTF-8 validation and replacement following the Unicode
// "maximal subpart" rule, which is what Python's bytes.decode(errors="replace") does.
#include "text/utf8.h"

namespace rill::text {
namespace {

// Decodes one sequence at s[i]; returns its length if valid, else the length of the maximal
// invalid subpart (≥ 1) negated.
int decode_one(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) need = 1;
  else if (c == 0xe0) need = 2, lo = 0xa0;
  else if (c >= 0xe1 && c <= 0xec) need = 2;
  else if (c == 0xed) need = 2, hi = 0x9f;
  else if (c >= 0xee && c <= 0xef) need = 2;
  else if (c == 0xf0) need = 3, lo = 0x90;
  else if (c >= 0xf1 && c <= 0xf3) need = 3;
  else if (c == 0xf4) need = 3, hi = 0x8f;
  else return -1;
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    unsigned char x = b(i + k);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
    if (x < l || x > h) return -k;
  }
  return need + 1;
}

}  // namespace

int utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) return 2;
  if (lead >= 0xe0 && lead <= 0xef) return 3;
  if (lead >= 0xf0 && lead <= 0xf4) return 4;
  return 0;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int n = decode_one(s, i);
    if (n < 0) return false;
    i += size_t(n);
  }
  return true;
}

size_t incomplete_utf8_suffix(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead
    int len = utf8_sequence_length(c);
    if (len > int(back)) {
      int r = decode_one(s, n - back);  // a valid prefix runs off the end: -(back)
      return r == -int(back) ? back : 0;
    }
    return 0;
  }
  return 0;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int n = decode_one(s, i);
    if (n > 0) {
      out.append(s.substr(i, size_t(n)));
      i += size_t(n);
    } else {
      out.append("\xEF\xBF\xBD");
      i += size_t(-n);
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xc0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xe0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(char(0xf0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cp & 0x3f)));
  }
}

}  // namespace rill::text
