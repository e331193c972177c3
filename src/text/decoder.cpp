// text/decoder.cpp — streaming versions of tokenizers' decoders. Steps before the first joining
// step (Fuse, ByteLevel) see separate tokens, as tokenizers' decode_chain does; steps after it
// see one logical token that arrives in chunks, and hold back only what a later chunk can change.
#include "text/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace rill::text {

enum class StepKind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };

struct Decoder::Step {
  StepKind kind;
  bool text_mode = false;   // a joining step came before: the input is one token in chunks
  std::string from, to;     // Replace: literal pattern and its replacement; Metaspace: replacement
  std::string strip;        // Strip: the character to strip (UTF-8)
  int strip_start = 0, strip_stop = 0;
  bool drop_first = true;   // Metaspace: drop the replacement character in the first token
};

Decoder::~Decoder() = default;

namespace {

void add_steps(const nlohmann::json& j, const std::string& where, std::vector<Decoder::Step>& steps) {
  std::string type = j.value("type", "");
  Decoder::Step s{};
  if (type == "Sequence") {
    for (const auto& d : j.at("decoders")) add_steps(d, where, steps);
    return;
  } else if (type == "ByteLevel") {
    s.kind = StepKind::kByteLevel;
  } else if (type == "Fuse") {
    s.kind = StepKind::kFuse;
  } else if (type == "ByteFallback") {
    s.kind = StepKind::kByteFallback;
  } else if (type == "Replace") {
    s.kind = StepKind::kReplace;
    const auto& p = j.at("pattern");
    if (!p.contains("String")) fail("{}: decoder Replace supports only a String pattern", where);
    s.from = p.at("String").get<std::string>();
    s.to = j.at("content").get<std::string>();
    if (s.from.empty()) return;  // replacing "" changes nothing
  } else if (type == "Strip") {
    s.kind = StepKind::kStrip;
    s.strip = j.at("content").get<std::string>();
    s.strip_start = j.value("start", 0);
    s.strip_stop = j.value("stop", 0);
  } else if (type == "Metaspace") {
    s.kind = StepKind::kMetaspace;
    s.from = j.value("replacement", "\u2581");
    if (j.contains("prepend_scheme")) s.drop_first = j.at("prepend_scheme").get<std::string>() != "never";
    else s.drop_first = j.value("add_prefix_space", true);
  } else {
    fail("{}: unsupported decoder type '{}'", where, type);
  }
  steps.push_back(std::move(s));
}

// "<0xXX>" → the byte, as tokenizers' ByteFallback parses it (u8::from_str_radix, base 16).
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    char c = t[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c == '+' && i == 3) continue;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

void replace_all(std::string_view s, std::string_view from, std::string_view to, std::string& out) {
  size_t last = 0;
  for (size_t p = s.find(from); p != std::string_view::npos; p = s.find(from, last)) {
    out.append(s.substr(last, p - last));
    out.append(to);
    last = p + from.size();
  }
  out.append(s.substr(last));
}

size_t utf8_len_at(std::string_view s, size_t i) {
  int n = utf8_sequence_length(static_cast<unsigned char>(s[i]));
  return n <= 0 ? 1 : size_t(n);
}

}  // namespace

std::shared_ptr<const Decoder> Decoder::from_json(const nlohmann::json& j, const std::string& where) {
  auto d = std::make_shared<Decoder>();
  if (j.is_null()) {
    d->join_with_space = true;
    return d;
  }
  add_steps(j, where, d->steps);
  bool joined = false;
  for (auto& s : d->steps) {
    s.text_mode = joined;
    if (s.kind == StepKind::kFuse || s.kind == StepKind::kByteLevel) joined = true;
  }
  return d;
}

struct DecodeStream::State {
  std::shared_ptr<const Decoder> decoder;
  struct StepState {
    std::string held;        // ByteLevel: incomplete UTF-8 tail; ByteFallback: pending bytes;
                             // Replace/Strip (text mode): a tail that the next chunk may change
    int64_t tokens_seen = 0; // Metaspace: index of the next token; Strip: chars stripped on the left
    bool left_done = false;  // Strip (text mode): the left side is finished
  };
  std::vector<StepState> states;
  bool first_token = true;
  std::string* out = nullptr;

  void feed(size_t i, std::string_view tok) {
    if (i == decoder->steps.size()) {
      out->append(tok);
      return;
    }
    const Decoder::Step& step = decoder->steps[i];
    StepState& st = states[i];
    switch (step.kind) {
      case StepKind::kFuse:
        feed(i + 1, tok);
        return;
      case StepKind::kByteLevel: {
        // Token → bytes through the byte-level table; a token with any other character keeps
        // its own UTF-8 bytes. The concatenation is then decoded lossily, as one string.
        std::string& b = st.held;
        size_t mark = b.size();
        bool mapped = true;
        for (size_t k = 0; k < tok.size();) {
          size_t n = utf8_len_at(tok, k);
          uint32_t cp = 0;
          unsigned char c0 = static_cast<unsigned char>(tok[k]);
          if (n == 1) cp = c0;
          else if (n == 2 && k + 1 < tok.size()) cp = ((c0 & 0x1fu) << 6) | (static_cast<unsigned char>(tok[k + 1]) & 0x3fu);
          else cp = 0x110000;
          int byte = byte_level_byte(cp);
          if (byte < 0) {
            mapped = false;
            break;
          }
          b.push_back(char(byte));
          k += n;
        }
        if (!mapped) {
          b.resize(mark);
          b.append(tok);
        }
        size_t keep = incomplete_utf8_suffix(b);
        if (keep == b.size()) return;
        std::string ready = sanitize_utf8(std::string_view(b).substr(0, b.size() - keep));
        b.erase(0, b.size() - keep);
        feed(i + 1, ready);
        return;
      }
      case StepKind::kByteFallback: {
        if (step.text_mode) {
          feed(i + 1, tok);
          return;
        }
        int byte = parse_byte_token(tok);
        if (byte >= 0) {
          st.held.push_back(char(byte));
          return;
        }
        flush_bytes(i);
        feed(i + 1, tok);
        return;
      }
      case StepKind::kReplace: {
        if (!step.text_mode) {
          std::string r;
          replace_all(tok, step.from, step.to, r);
          feed(i + 1, r);
          return;
        }
        std::string s = std::move(st.held);
        st.held.clear();
        s.append(tok);
        std::string r;
        size_t last = 0;
        for (size_t p = s.find(step.from); p != std::string::npos; p = s.find(step.from, last)) {
          r.append(s, last, p - last);
          r += step.to;
          last = p + step.from.size();
        }
        // Hold the longest tail that is a proper prefix of the pattern (whole characters only).
        size_t hold = 0;
        for (size_t k = std::min(step.from.size() - 1, s.size() - last); k > 0; --k)
          if (s.compare(s.size() - k, k, step.from, 0, k) == 0) {
            hold = k;
            break;
          }
        r.append(s, last, s.size() - last - hold);
        st.held = s.substr(s.size() - hold);
        if (!r.empty()) feed(i + 1, r);
        return;
      }
      case StepKind::kMetaspace: {
        bool first = step.text_mode || st.tokens_seen == 0;
        ++st.tokens_seen;
        std::string r;
        replace_all(tok, step.from, first && step.drop_first ? "" : " ", r);
        feed(i + 1, r);
        return;
      }
      case StepKind::kStrip:
        strip(i, tok);
        return;
    }
  }

  void strip(size_t i, std::string_view tok) {
    const Decoder::Step& step = decoder->steps[i];
    StepState& st = states[i];
    const std::string& c = step.strip;
    auto strip_left = [&](std::string_view s, int64_t max, int64_t& count) {
      while (count < max && s.size() >= c.size() && s.substr(0, c.size()) == c) s.remove_prefix(c.size()), ++count;
      return s;
    };
    if (!step.text_mode) {
      int64_t n = 0;
      std::string_view s = strip_left(tok, step.strip_start, n);
      // Right side: at most strip_stop characters, never past what the left side kept.
      for (int k = 0; k < step.strip_stop && s.size() >= c.size() && s.substr(s.size() - c.size()) == c; ++k)
        s.remove_suffix(c.size());
      feed(i + 1, s);
      return;
    }
    std::string_view s = tok;
    if (!st.left_done) {
      s = strip_left(s, step.strip_start, st.tokens_seen);
      if (s.empty()) return;
      st.left_done = true;
    }
    if (step.strip_stop == 0) {
      feed(i + 1, s);
      return;
    }
    std::string all = std::move(st.held);
    st.held.clear();
    all.append(s);
    size_t cut = all.size();
    for (int k = 0; k < step.strip_stop && cut >= c.size() && all.compare(cut - c.size(), c.size(), c) == 0; ++k)
      cut -= c.size();
    st.held = all.substr(cut);
    if (cut > 0) feed(i + 1, std::string_view(all).substr(0, cut));
  }

  void flush_bytes(size_t i) {
    std::string bytes = std::move(states[i].held);
    states[i].held.clear();
    if (bytes.empty()) return;
    if (is_valid_utf8(bytes)) {
      feed(i + 1, bytes);
    } else {
      for (size_t k = 0; k < bytes.size(); ++k) feed(i + 1, "\xEF\xBF\xBD");  // one U+FFFD per byte token
    }
  }

  void finish(size_t i) {
    if (i == decoder->steps.size()) return;
    const Decoder::Step& step = decoder->steps[i];
    StepState& st = states[i];
    switch (step.kind) {
      case StepKind::kByteLevel:
        if (!st.held.empty()) {
          std::string r = sanitize_utf8(st.held);
          st.held.clear();
          feed(i + 1, r);
        }
        break;
      case StepKind::kByteFallback:
        flush_bytes(i);
        break;
      case StepKind::kReplace:
        if (!st.held.empty()) {
          std::string r = std::move(st.held);
          st.held.clear();
          feed(i + 1, r);
        }
        break;
      case StepKind::kStrip:
        st.held.clear();  // trailing characters to strip
        break;
      default:
        break;
    }
    finish(i + 1);
  }
};

DecodeStream::DecodeStream(std::shared_ptr<const Decoder> decoder) : state_(std::make_unique<State>()) {
  state_->states.resize(decoder->steps.size());
  state_->decoder = std::move(decoder);
}
DecodeStream::~DecodeStream() = default;
DecodeStream::DecodeStream(DecodeStream&&) noexcept = default;
DecodeStream& DecodeStream::operator=(DecodeStream&&) noexcept = default;

void DecodeStream::push(std::string_view token, std::string& out) {
  state_->out = &out;
  if (state_->decoder->join_with_space) {
    if (!state_->first_token) out.push_back(' ');
    state_->first_token = false;
    out.append(token);
    return;
  }
  state_->feed(0, token);
}

void DecodeStream::finish(std::string& out) {
  state_->out = &out;
  state_->finish(0);
}

}  // namespace rill::text
