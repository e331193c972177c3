// text/normalizer.cpp — the normalizers used by tokenizer.json files. Unicode normalization goes
// through ICU's Normalizer2 with a quick "already normalized" check first (the common case).
#include "text/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>
#include <unicode/locid.h>

#include <nlohmann/json.hpp>

#include <vector>

#include "core/error.h"
#include "text/pre_tokenizer_regex.h"
#include "text/utf8.h"

namespace rill::text {
namespace {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// tokenizers 0.23 normalizes with unicode-normalization-alignments 0.1.12, whose tables are
// Unicode 9.0: characters assigned later have no decomposition there. Filtering ICU's normalizer
// to [:age=9.0:] reproduces that (e.g. NFKC leaves U+1FBF9 alone instead of mapping it to "9").
const icu::UnicodeSet& unicode9_set() {
  static const icu::UnicodeSet* set = [] {
    UErrorCode status = U_ZERO_ERROR;
    auto* s = new icu::UnicodeSet(icu::UnicodeString(u"[:age=9.0:]"), status);
    RILL_CHECK(U_SUCCESS(status), "ICU cannot build [:age=9.0:]: {}", u_errorName(status));
    s->freeze();
    return s;
  }();
  return *set;
}

class UnicodeNormalizer final : public Normalizer {
 public:
  UnicodeNormalizer(const std::string& form, const std::string& where) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* base;
    if (form == "NFC") base = icu::Normalizer2::getNFCInstance(status);
    else if (form == "NFD") base = icu::Normalizer2::getNFDInstance(status);
    else if (form == "NFKC") base = icu::Normalizer2::getNFKCInstance(status);
    else base = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) fail("{}: ICU has no {} normalizer: {}", where, form, u_errorName(status));
    filtered_ = std::make_unique<icu::FilteredNormalizer2>(*base, unicode9_set());
    impl_ = filtered_.get();
  }
  void normalize(std::string& s) const override {
    if (is_ascii(s)) return;  // ASCII is invariant under all four forms
    UErrorCode status = U_ZERO_ERROR;
    if (impl_->isNormalizedUTF8(s, status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, int32_t(s.size()));
    impl_->normalizeUTF8(0, s, sink, nullptr, status);
    RILL_CHECK(U_SUCCESS(status), "ICU normalization failed: {}", u_errorName(status));
    s = std::move(out);
  }

 private:
  std::unique_ptr<icu::FilteredNormalizer2> filtered_;
  const icu::Normalizer2* impl_ = nullptr;
};

// Replace with a literal string or a regex pattern (all occurrences, left to right).
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const nlohmann::json& j, const std::string& where) {
    const auto& pat = j.at("pattern");
    content_ = j.at("content").get<std::string>();
    if (pat.contains("String")) {
      literal_ = pat.at("String").get<std::string>();
    } else if (pat.contains("Regex")) {
      regex_ = std::make_unique<Regex>(translate_hf_regex(pat.at("Regex").get<std::string>()), where);
    } else {
      fail("{}: Replace normalizer pattern must be String or Regex", where);
    }
  }
  void normalize(std::string& s) const override {
    std::string out;
    size_t last = 0;
    if (regex_) {
      regex_->for_each_match(s, [&](size_t b, size_t e) {
        out.append(s, last, b - last);
        out += content_;
        last = e;
      });
    } else {
      if (literal_.empty()) return;
      for (size_t p = s.find(literal_); p != std::string::npos; p = s.find(literal_, last)) {
        out.append(s, last, p - last);
        out += content_;
        last = p + literal_.size();
      }
    }
    if (last == 0 && out.empty()) return;
    out.append(s, last, std::string::npos);
    s = std::move(out);
  }

 private:
  std::string literal_, content_;
  std::unique_ptr<Regex> regex_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    if (is_ascii(s)) {
      for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      return;
    }
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
    u.toLower(icu::Locale::getRoot());
    s.clear();
    u.toUTF8String(s);
  }
};

// Strip: removes Unicode whitespace on the left and/or right.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
    int32_t b = 0, e = u.length();
    if (left_)
      while (b < e && u_isUWhiteSpace(u.char32At(b))) b = u.moveIndex32(b, 1);
    if (right_)
      while (e > b && u_isUWhiteSpace(u.char32At(u.moveIndex32(e, -1)))) e = u.moveIndex32(e, -1);
    std::string out;
    u.tempSubStringBetween(b, e).toUTF8String(out);
    s = std::move(out);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(type, where);
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j, where);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(j.at("prepend").get<std::string>());
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") return std::make_unique<StripNormalizer>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& n : j.at("normalizers"))
      if (auto p = make_normalizer(n, where)) parts.push_back(std::move(p));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  fail("{}: unsupported normalizer type '{}'", where, type);
}

}  // namespace rill::text
