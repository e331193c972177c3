// text/jinja/json_dump.cpp — CPython json.dumps encoder (see json_dump.h).
#include "text/jinja/json_dump.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "text/jinja/pystr.h"

namespace rill::text::jinja {
namespace {

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  auto hex4 = [&](unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", v);
    out += buf;
  };
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          hex4(static_cast<unsigned>(c));
        } else if (ensure_ascii && c > 0x7E) {  // Python escapes everything outside ' '..'~'
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            hex4(0xD800 + static_cast<unsigned>(v >> 10));
            hex4(0xDC00 + static_cast<unsigned>(v & 0x3FF));
          } else {
            hex4(static_cast<unsigned>(c));
          }
        } else {
          out += utf8_encode(std::u32string(1, c));
        }
    }
  }
  out += '"';
}

std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return float_repr(v);
}

std::string key_string(const Value& k) {
  switch (k.kind) {
    case Kind::String: return k.s;
    case Kind::Int: return std::to_string(k.i);
    case Kind::Float: return json_float(k.f);
    case Kind::Bool: return k.b ? "true" : "false";
    case Kind::None: return "null";
    default:
      fail("TypeError: keys must be str, int, float, bool or None, not {}", k.type_name());
  }
}

struct Encoder {
  const JsonDumpOptions& opt;
  std::string item_sep;
  std::string key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int k = 0; k < level; ++k) out += *opt.indent;
  }

  void encode(const Value& v, int level) {
    switch (v.kind) {
      case Kind::None: out += "null"; return;
      case Kind::Bool: out += v.b ? "true" : "false"; return;
      case Kind::Int: out += std::to_string(v.i); return;
      case Kind::Float: out += json_float(v.f); return;
      case Kind::String: append_json_string(out, v.s, opt.ensure_ascii); return;
      case Kind::List: {
        if (v.list->empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k) out += item_sep;
          if (opt.indent) newline(level + 1);
          encode((*v.list)[k], level + 1);
        }
        if (opt.indent) newline(level);
        out += ']';
        return;
      }
      case Kind::Dict: {
        if (v.is_namespace) break;
        if (v.dict->items.empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict->items) items.push_back(&kv);
        if (opt.sort_keys)
          std::stable_sort(items.begin(), items.end(),
                           [](const auto* a, const auto* b) { return py_less(a->first, b->first); });
        out += '{';
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += item_sep;
          if (opt.indent) newline(level + 1);
          append_json_string(out, key_string(items[k]->first), opt.ensure_ascii);
          out += key_sep;
          encode(items[k]->second, level + 1);
        }
        if (opt.indent) newline(level);
        out += '}';
        return;
      }
      default:
        break;
    }
    fail("TypeError: Object of type {} is not JSON serializable", v.type_name());
  }
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Encoder enc{options, options.item_separator.value_or(options.indent ? "," : ", "),
              options.key_separator.value_or(": "), {}};
  enc.encode(v, 0);
  return std::move(enc.out);
}

}  // namespace rill::text::jinja
