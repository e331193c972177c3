// text/pre_tokenizer.cpp — Split / ByteLevel / Metaspace / Sequence with Hugging Face semantics
// (tokenizers' NormalizedString::split with SplitDelimiterBehavior).
#include "text/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <vector>

#include "core/error.h"
#include "text/pre_tokenizer_regex.h"
#include "text/utf8.h"

namespace rill::text {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& s, const std::string& where) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  fail("{}: unsupported Split behavior '{}'", where, s);
}

struct Span {
  size_t begin, end;
  bool is_match;
};

// Literal or regex delimiter, with HF's find_matches: spans covering the whole text.
class Pattern {
 public:
  Pattern() = default;
  static Pattern literal(std::string s) {
    Pattern p;
    p.literal_ = std::move(s);
    return p;
  }
  static Pattern regex(std::string_view hf_regex, const std::string& where) {
    Pattern p;
    p.regex_.emplace(translate_hf_regex(hf_regex), where);
    return p;
  }
  void find(std::string_view text, std::vector<Span>& out) const {
    out.clear();
    if (text.empty()) return;
    size_t prev = 0;
    auto on_match = [&](size_t b, size_t e) {
      if (prev != b) out.push_back({prev, b, false});
      out.push_back({b, e, true});
      prev = e;
    };
    if (regex_) {
      regex_->for_each_match(text, on_match);
    } else if (!literal_.empty()) {
      for (size_t p = text.find(literal_); p != std::string_view::npos; p = text.find(literal_, prev))
        on_match(p, p + literal_.size());
    }
    if (prev != text.size()) out.push_back({prev, text.size(), false});
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

// Applies a delimiter behaviour to spans; returns the kept pieces (pairs of offsets).
void apply_behavior(Behavior behavior, std::vector<Span>& spans) {
  std::vector<Span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& s : spans) out.push_back({s.begin, s.end, false});
      break;
    case Behavior::kRemoved:
      for (auto& s : spans)
        if (!s.is_match) out.push_back(s);
      break;
    case Behavior::kContiguous:
      for (auto& s : spans) {
        if (s.is_match == previous_match && !out.empty()) out.back().end = s.end;
        else out.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (auto& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) out.back().end = s.end;
        else out.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !previous_match && !out.empty()) out.back().begin = s.begin;
        else out.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  spans.swap(out);
}

void emit_spans(std::string_view text, bool at_origin, const std::vector<Span>& spans, const PieceFn& emit) {
  for (const Span& s : spans)
    if (s.end > s.begin) emit(text.substr(s.begin, s.end - s.begin), at_origin && s.begin == 0);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const nlohmann::json& j, const std::string& where) {
    const auto& pat = j.at("pattern");
    if (pat.contains("String")) pattern_ = Pattern::literal(pat.at("String").get<std::string>());
    else if (pat.contains("Regex")) pattern_ = Pattern::regex(pat.at("Regex").get<std::string>(), where);
    else fail("{}: Split pattern must be String or Regex", where);
    behavior_ = parse_behavior(j.at("behavior").get<std::string>(), where);
    invert_ = j.value("invert", false);
  }
  void split(std::string_view text, bool at_origin, const PieceFn& emit) const override {
    std::vector<Span> spans;
    pattern_.find(text, spans);
    if (invert_)
      for (auto& s : spans) s.is_match = !s.is_match;
    apply_behavior(behavior_, spans);
    emit_spans(text, at_origin, spans, emit);
  }

 private:
  Pattern pattern_;
  Behavior behavior_ = Behavior::kIsolated;
  bool invert_ = false;
};

constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const nlohmann::json& j, const std::string& where)
      : add_prefix_space_(j.value("add_prefix_space", true)) {
    if (j.value("use_regex", true)) regex_ = Pattern::regex(kGpt2Pattern, where), use_regex_ = true;
  }
  void split(std::string_view text, bool at_origin, const PieceFn& emit) const override {
    std::string prefixed;
    if (add_prefix_space_ && (text.empty() || text[0] != ' ')) {
      prefixed.reserve(text.size() + 1);
      prefixed += ' ';
      prefixed += text;
      text = prefixed;
    }
    auto map_emit = [&](std::string_view piece, bool origin) {
      const auto& table = byte_level_chars();
      std::string mapped;
      mapped.reserve(piece.size() * 2);
      for (unsigned char c : piece) mapped += table[c];
      emit(mapped, origin);
    };
    if (!use_regex_) {
      if (!text.empty()) map_emit(text, at_origin);
      return;
    }
    std::vector<Span> spans;
    regex_.find(text, spans);
    apply_behavior(Behavior::kIsolated, spans);
    emit_spans(text, at_origin, spans, map_emit);
  }

 private:
  bool add_prefix_space_;
  bool use_regex_ = false;
  Pattern regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(const nlohmann::json& j, const std::string& where) {
    replacement_ = j.value("replacement", "\u2581");
    if (j.contains("prepend_scheme")) {
      std::string s = j.at("prepend_scheme").get<std::string>();
      if (s == "always") scheme_ = PrependScheme::kAlways;
      else if (s == "first") scheme_ = PrependScheme::kFirst;
      else if (s == "never") scheme_ = PrependScheme::kNever;
      else fail("{}: unsupported Metaspace prepend_scheme '{}'", where, s);
    } else {
      scheme_ = j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    split_ = j.value("split", true);
  }
  void split(std::string_view text, bool at_origin, const PieceFn& emit) const override {
    std::string s;
    s.reserve(text.size() + replacement_.size());
    for (char c : text) {
      if (c == ' ') s += replacement_;
      else s += c;
    }
    bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && at_origin);
    if (prepend && s.compare(0, replacement_.size(), replacement_) != 0) s.insert(0, replacement_);
    if (!split_) {
      if (!s.empty()) emit(s, at_origin);
      return;
    }
    std::vector<Span> spans;
    Pattern::literal(replacement_).find(s, spans);
    apply_behavior(Behavior::kMergedWithNext, spans);
    emit_spans(s, at_origin, spans, emit);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_ = PrependScheme::kAlways;
  bool split_ = true;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::string_view text, bool at_origin, const PieceFn& emit) const override { run(0, text, at_origin, emit); }

 private:
  void run(size_t stage, std::string_view text, bool at_origin, const PieceFn& emit) const {
    if (stage == parts_.size()) {
      emit(text, at_origin);
      return;
    }
    parts_[stage]->split(text, at_origin,
                         [&](std::string_view piece, bool origin) { run(stage + 1, piece, origin, emit); });
  }
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[b], printable ? b : 256 + n++);
    }
    return t;
  }();
  return table;
}

int byte_level_byte(uint32_t cp) {
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> inv;
    inv.fill(-1);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      inv[printable ? b : 256 + n++] = int16_t(b);
    }
    return inv;
  }();
  return cp < 512 ? inverse[cp] : -1;
}

std::unique_ptr<Regex> byte_level_split_regex(const nlohmann::json& j, const std::string& where) {
  auto plain_byte_level = [](const nlohmann::json& b, bool want_regex) {
    return b.is_object() && b.value("type", "") == "ByteLevel" && !b.value("add_prefix_space", true) &&
           b.value("use_regex", true) == want_regex;
  };
  if (plain_byte_level(j, true)) return std::make_unique<Regex>(translate_hf_regex(kGpt2Pattern), where);
  if (!j.is_object() || j.value("type", "") != "Sequence" || !j.contains("pretokenizers")) return nullptr;
  const auto& parts = j["pretokenizers"];
  if (parts.size() != 2 || !plain_byte_level(parts[1], false)) return nullptr;
  const auto& split = parts[0];
  if (split.value("type", "") != "Split" || split.value("behavior", "") != "Isolated" || split.value("invert", false) ||
      !split.contains("pattern") || !split["pattern"].contains("Regex"))
    return nullptr;
  return std::make_unique<Regex>(translate_hf_regex(split["pattern"]["Regex"].get<std::string>()), where);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j, where);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(j, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers"))
      if (auto x = make_pre_tokenizer(p, where)) parts.push_back(std::move(x));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  fail("{}: unsupported pre_tokenizer type '{}'", where, type);
}

}  // namespace rill::text
