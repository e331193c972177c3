// text/pre_tokenizer_regex.cpp — PCRE2 wrapper: JIT-compiled code shared between threads, match
// data and JIT stack per thread.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pre_tokenizer_regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace rill::text {
namespace {

constexpr std::string_view kOnigSpaceItems = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";

// Per-thread matching resources: a JIT stack large enough for long whitespace runs.
struct ThreadScratch {
  pcre2_match_data* data = pcre2_match_data_create(4, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

std::string translate_hf_regex(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      ++i;
      if (e == 's') {
        if (in_class) out += kOnigSpaceItems;
        else out += "[" + std::string(kOnigSpaceItems) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kOnigSpaceItems) + "]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern, std::string_view where) : code_(std::make_shared<Code>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail("{}: cannot compile regex '{}' at offset {}: {}", where, pattern, offset,
         reinterpret_cast<const char*>(msg));
  }
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

bool Regex::find(std::string_view text, size_t pos, size_t& begin, size_t& end) const {
  ThreadScratch& s = scratch();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), pos, 0, s.data, s.context)
                      : pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  RILL_CHECK(rc > 0, "pcre2 match failed with code {}", rc);
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

void Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& fn) const {
  size_t pos = 0, b = 0, e = 0;
  while (pos <= text.size() && find(text, pos, b, e)) {
    fn(b, e);
    if (e == b) {  // empty match: step over one whole character
      if (e >= text.size()) return;
      ++e;
      while (e < text.size() && (static_cast<unsigned char>(text[e]) & 0xc0) == 0x80) ++e;
    }
    pos = e;
  }
}

}  // namespace rill::text
