// text/jinja/lexer.cpp — Jinja2-compatible tokenizer (see lexer.h). The whitespace rules
// follow jinja2/lexer.py: `-` strips all whitespace, lstrip_blocks removes a tag's
// indentation only when the tag starts its line, trim_blocks eats one newline after a tag.
#include "text/jinja/lexer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "text/jinja/pystr.h"
#include "text/utf8.h"

namespace rill::text::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

// Python str.rstrip() on the tail of a text run (unicode whitespace included).
std::string rstrip_all(const std::string& text) { return py_strip(text, std::nullopt, false, true); }

size_t skip_all_ws(const std::string& s, size_t pos) {
  // Python `\s*` after `-%}`: decode so that unicode spaces are skipped too.
  while (pos < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      if (!py_isspace(c)) break;
      ++pos;
      continue;
    }
    int n = utf8_sequence_length(c);
    if (n == 0 || pos + n > s.size()) break;
    std::u32string cp = utf8_decode(std::string_view(s).substr(pos, static_cast<size_t>(n)));
    if (cp.size() != 1 || !py_isspace(cp[0])) break;
    pos += static_cast<size_t>(n);
  }
  return pos;
}

class Lexer {
 public:
  Lexer(std::string src, const LexerOptions& opt) : src_(std::move(src)), opt_(opt) {
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') newlines_.push_back(k);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t idx = find_tag(pos);
      if (idx == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      std::string text = src_.substr(pos, idx - pos);
      char kind = src_[idx + 1];
      size_t p = idx + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      size_t raw_end = kind == '%' ? match_raw_begin(p) : std::string::npos;
      if (sign == '-') {
        text = rstrip_all(text);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            py_strip(std::string_view(text).substr(l_pos), std::nullopt, true, true).empty())
          text.resize(l_pos);
      }
      emit_text(text, pos);
      if (raw_end != std::string::npos) {
        pos = lex_raw(raw_end, line_starting);
      } else if (kind == '#') {
        pos = lex_comment(p, idx, line_starting);
      } else {
        pos = lex_tag(kind, p, idx, line_starting);
      }
    }
    tokens_.push_back({TokenType::End, "", line_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  std::string src_;
  LexerOptions opt_;
  std::vector<Token> tokens_;
  std::vector<char> balance_;
  std::vector<size_t> newlines_;  // positions of '\n', for line numbers

  int line_of(size_t pos) const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), pos) - newlines_.begin());
  }

  [[noreturn]] void error(size_t pos, const std::string& what) const {
    fail("template line {}: syntax error: {}", line_of(pos), what);
  }

  size_t find_tag(size_t pos) const {
    while (true) {
      size_t idx = src_.find('{', pos);
      if (idx == std::string::npos || idx + 1 >= src_.size()) return std::string::npos;
      char c = src_[idx + 1];
      if (c == '{' || c == '%' || c == '#') return idx;
      pos = idx + 1;
    }
  }

  void emit_text(const std::string& text, size_t pos) {
    if (!text.empty()) tokens_.push_back({TokenType::Text, text, line_of(pos)});
  }

  // `{%[-+]? raw [-]?%}` → position after it (no trim_blocks newline), else npos.
  size_t match_raw_begin(size_t p) const {
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
      return std::string::npos;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) return skip_all_ws(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t p, bool& line_starting) {
    size_t search = p;
    while (true) {
      size_t idx = src_.find("{%", search);
      if (idx == std::string::npos) error(p, "missing end of raw directive");
      size_t q = idx + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = idx + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      size_t end;
      if (src_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-%}") == 0) {
        end = skip_all_ws(src_, q + 3);
      } else if (src_.compare(q, 2, "%}") == 0) {
        end = q + 2;
        if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      } else {
        search = idx + 2;
        continue;
      }
      std::string text = src_.substr(p, idx - p);
      if (sign == '-') {
        text = rstrip_all(text);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 && l_pos < text.size() &&
            py_strip(std::string_view(text).substr(l_pos), std::nullopt, true, true).empty())
          text.resize(l_pos);
      }
      emit_text(text, p);
      line_starting = src_[end - 1] == '\n';
      return end;
    }
  }

  size_t lex_comment(size_t p, size_t start, bool& line_starting) {
    size_t j = src_.find("#}", p);
    if (j == std::string::npos) error(start, "missing end of comment tag");
    size_t end = j + 2;
    if (j > p && src_[j - 1] == '-') {
      end = skip_all_ws(src_, end);
    } else if (j > p && src_[j - 1] == '+') {
      // keep
    } else if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    line_starting = src_[end - 1] == '\n';
    return end;
  }

  // Inside {{ }} or {% %}: expression tokens until the (balanced) end delimiter.
  size_t lex_tag(char kind, size_t p, size_t start, bool& line_starting) {
    bool block = kind == '%';
    tokens_.push_back({block ? TokenType::BlockBegin : TokenType::VarBegin, "", line_of(start)});
    balance_.clear();
    while (true) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
      if (p >= src_.size()) error(start, block ? "unexpected end of template, expected '%}'" : "expected '}}'");
      if (balance_.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (src_.compare(p, 3, "+%}") == 0) {
            end = p + 3;
          } else if (src_.compare(p, 3, "-%}") == 0) {
            end = skip_all_ws(src_, p + 3);
          } else if (src_.compare(p, 2, "%}") == 0) {
            end = p + 2;
            if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
          }
        } else {
          if (src_.compare(p, 3, "-}}") == 0)
            end = skip_all_ws(src_, p + 3);
          else if (src_.compare(p, 2, "}}") == 0)
            end = p + 2;
        }
        if (end != std::string::npos) {
          tokens_.push_back({block ? TokenType::BlockEnd : TokenType::VarEnd, "", line_of(p)});
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      p = lex_expr_token(p);
    }
  }

  size_t lex_expr_token(size_t p) {
    const int line = line_of(p);
    unsigned char c = static_cast<unsigned char>(src_[p]);
    if (std::isdigit(c)) return lex_number(p, line);
    if (std::isalpha(c) || c == '_' || c >= 0x80) {
      size_t q = p;
      while (q < src_.size()) {
        unsigned char d = static_cast<unsigned char>(src_[q]);
        if (std::isalnum(d) || d == '_' || d >= 0x80)
          ++q;
        else
          break;
      }
      tokens_.push_back({TokenType::Name, src_.substr(p, q - p), line});
      return q;
    }
    if (c == '\'' || c == '"') return lex_string(p, line);
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                       "(",  ")",  "{",  "}",  "|",  ",",  ".", ":", ";", "=", "<", ">"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(p, n, op) != 0) continue;
      char o = op[0];
      if (n == 1 && (o == '(' || o == '[' || o == '{')) {
        balance_.push_back(o == '(' ? ')' : o == '[' ? ']' : '}');
      } else if (n == 1 && (o == ')' || o == ']' || o == '}')) {
        if (balance_.empty()) error(p, fmt::format("unexpected '{}'", o));
        if (balance_.back() != o) error(p, fmt::format("unexpected '{}', expected '{}'", o, balance_.back()));
        balance_.pop_back();
      }
      tokens_.push_back({TokenType::Op, op, line});
      return p + n;
    }
    error(p, fmt::format("unexpected char '{}'", src_[p]));
  }

  size_t lex_number(size_t p, int line) {
    auto digits = [&](size_t q) {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                                 (src_[q] == '_' && q + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[q + 1])))))
        ++q;
      return q;
    };
    size_t q = digits(p);
    bool is_float = false;
    bool after_dot = p > 0 && src_[p - 1] == '.';  // Jinja's (?<!\.) keeps x.0.1 as items
    if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      q = digits(q + 1);
      is_float = true;
    }
    if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string text = src_.substr(p, q - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({is_float ? TokenType::Float : TokenType::Int, text, line});
    return q;
  }

  size_t lex_string(size_t p, int line) {
    char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    while (true) {
      if (q >= src_.size()) error(p, "unexpected end of string");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) error(p, "unexpected end of string");
      char e = src_[q + 1];
      q += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (q + n > src_.size()) error(p, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[q + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) error(p, "truncated \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                              : (std::tolower(h) - 'a' + 10));
          }
          q += n;
          append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k)
              cp = cp * 8 + static_cast<uint32_t>(src_[q++] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({TokenType::String, out, line});
    return q + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalize_newlines(source), options).run();
}

}  // namespace rill::text::jinja
