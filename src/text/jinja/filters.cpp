// text/jinja/filters.cpp — Jinja2 builtin filters with their Python semantics (sort and
// unique ignore case by default, join/trim/upper stringify their input, ...) and the
// transformers `tojson` (json.dumps with ensure_ascii=False).
#include "text/jinja/filters.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "text/jinja/json_dump.h"
#include "text/jinja/pystr.h"

namespace rill::text::jinja {
namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);

std::string soft_str(const Value& v) { return v.str(); }

int64_t int_arg(const Value* v, int64_t fallback, const char* what) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_integral()) fail("TypeError: {} must be an integer, not {}", what, v->type_name());
  return v->as_int();
}

// Jinja's make_attrgetter: "a.b.0" walks attributes, integer parts index.
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  for (const std::string& part : py_split(path, std::string("."), -1, false)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
  }
  return cur;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(py_lower(v.s)) : v; }

// --- string filters ---
Value f_upper(const Value& v, CallArgs& a) { ArgBinder("upper", a, {}); return Value::string(py_upper(soft_str(v))); }
Value f_lower(const Value& v, CallArgs& a) { ArgBinder("lower", a, {}); return Value::string(py_lower(soft_str(v))); }
Value f_capitalize(const Value& v, CallArgs& a) {
  ArgBinder("capitalize", a, {});
  return Value::string(py_capitalize(soft_str(v)));
}
Value f_title(const Value& v, CallArgs& a) {
  ArgBinder("title", a, {});
  // Jinja splits on runs of [-\s({\[<] and capitalises each piece.
  std::u32string u = utf8_decode(soft_str(v));
  std::string out;
  bool word_start = true;
  for (char32_t c : u) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    std::string one = utf8_encode(std::u32string(1, c));
    out += sep ? one : (word_start ? py_upper(one) : py_lower(one));
    word_start = sep;
  }
  return Value::string(out);
}
Value f_trim(const Value& v, CallArgs& a) {
  ArgBinder b("trim", a, {"chars"});
  std::optional<std::string> chars;
  if (const Value* c = b.get(0); c && !c->is_none()) chars = soft_str(*c);
  return Value::string(py_strip(soft_str(v), chars, true, true));
}
Value f_replace(const Value& v, CallArgs& a) {
  ArgBinder b("replace", a, {"old", "new", "count"});
  if (!b.get(0) || !b.get(1)) fail("replace filter needs 'old' and 'new'");
  return Value::string(py_replace(soft_str(v), soft_str(*b.get(0)), soft_str(*b.get(1)), int_arg(b.get(2), -1, "count")));
}
Value f_center(const Value& v, CallArgs& a) {
  ArgBinder b("center", a, {"width"});
  return Value::string(py_center(soft_str(v), int_arg(b.get(0), 80, "width")));
}
Value f_indent(const Value& v, CallArgs& a) {
  ArgBinder b("indent", a, {"width", "first", "blank"});
  Value w = b.get_or(0, Value::integer(4));
  std::string indention = w.is_string() ? w.s : std::string(static_cast<size_t>(std::max<int64_t>(0, int_arg(&w, 4, "width"))), ' ');
  bool first = b.get_or(1, Value::boolean(false)).truthy();
  bool blank = b.get_or(2, Value::boolean(false)).truthy();
  std::vector<std::string> lines = py_splitlines(soft_str(v) + "\n");
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + indention : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : indention + lines[k]);
  }
  return Value::string(first ? indention + rv : rv);
}
Value f_wordcount(const Value& v, CallArgs& a) {
  ArgBinder("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(soft_str(v))) {
    bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}
Value f_truncate(const Value& v, CallArgs& a) {
  ArgBinder b("truncate", a, {"length", "killwords", "end", "leeway"});
  std::u32string s = utf8_decode(soft_str(v));
  int64_t length = int_arg(b.get(0), 255, "length");
  bool killwords = b.get_or(1, Value::boolean(false)).truthy();
  std::u32string end = utf8_decode(soft_str(b.get_or(2, Value::string("..."))));
  int64_t leeway = int_arg(b.get(3), 5, "leeway");
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::string(utf8_encode(s));
  std::u32string head = s.substr(0, static_cast<size_t>(std::max<int64_t>(0, length - static_cast<int64_t>(end.size()))));
  if (!killwords) {
    size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head.resize(sp);
  }
  return Value::string(utf8_encode(head + end));
}
std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}
Value f_escape(const Value& v, CallArgs& a) { ArgBinder("escape", a, {}); return Value::string(html_escape(soft_str(v))); }
Value f_safe(const Value& v, CallArgs& a) { ArgBinder("safe", a, {}); return v.is_undefined() ? Value::string("") : v; }
Value f_string(const Value& v, CallArgs& a) { ArgBinder("string", a, {}); return Value::string(soft_str(v)); }
Value f_pprint(const Value& v, CallArgs& a) { ArgBinder("pprint", a, {}); return Value::string(v.repr()); }

// Python's `%` string formatting for the |format filter.
Value f_format(const Value& v, CallArgs& a) {
  std::string fmt_text = soft_str(v), out;
  size_t next_arg = 0;
  for (size_t k = 0; k < fmt_text.size(); ++k) {
    if (fmt_text[k] != '%') {
      out += fmt_text[k];
      continue;
    }
    size_t j = k + 1;
    std::string key;
    if (j < fmt_text.size() && fmt_text[j] == '(') {
      size_t close = fmt_text.find(')', j);
      if (close == std::string::npos) fail("ValueError: incomplete format key");
      key = fmt_text.substr(j + 1, close - j - 1);
      j = close + 1;
    }
    size_t spec_start = j;
    while (j < fmt_text.size() && std::strchr("-+ #0123456789.", fmt_text[j])) ++j;
    if (j >= fmt_text.size()) fail("ValueError: incomplete format");
    char type = fmt_text[j];
    std::string flags = fmt_text.substr(spec_start, j - spec_start);
    k = j;
    if (type == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (!key.empty()) {
      for (auto& [name, value] : a.kwargs)
        if (name == key) arg = &value;
      if (!arg) fail("KeyError: '{}'", key);
    } else {
      if (next_arg >= a.args.size()) fail("TypeError: not enough arguments for format string");
      arg = &a.args[next_arg++];
    }
    char buf[128];
    std::string cfmt = "%" + flags;
    if (type == 's' || type == 'r' || type == 'a') {
      std::string s = type == 's' ? soft_str(*arg) : arg->repr();
      std::snprintf(buf, sizeof(buf), (cfmt + "s").c_str(), s.c_str());
      out += s.size() >= sizeof(buf) - 1 ? s : std::string(buf);
    } else if (type == 'd' || type == 'i' || type == 'x' || type == 'X' || type == 'o') {
      std::snprintf(buf, sizeof(buf), (cfmt + "ll" + (type == 'i' ? 'd' : type)).c_str(),
                    static_cast<long long>(arg->kind == Kind::Float ? static_cast<int64_t>(arg->f) : arg->as_int()));
      out += buf;
    } else if (std::strchr("eEfFgG", type)) {
      std::snprintf(buf, sizeof(buf), (cfmt + type).c_str(), arg->as_double());
      out += buf;
    } else {
      fail("ValueError: unsupported format character '{}'", type);
    }
  }
  return Value::string(out);
}

// --- sequence filters ---
Value f_length(const Value& v, CallArgs& a) {
  ArgBinder("length", a, {});
  switch (v.kind) {
    case Kind::Undefined: return Value::integer(0);
    case Kind::String: return Value::integer(static_cast<int64_t>(code_point_count(v.s)));
    case Kind::List: return Value::integer(static_cast<int64_t>(v.list->size()));
    case Kind::Dict: return Value::integer(static_cast<int64_t>(v.dict->items.size()));
    default: fail("TypeError: object of type '{}' has no len()", v.type_name());
  }
}
Value f_list(const Value& v, CallArgs& a) { ArgBinder("list", a, {}); return Value::make_list(iterate(v)); }
Value f_first(const Value& v, CallArgs& a) {
  ArgBinder("first", a, {});
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(const Value& v, CallArgs& a) {
  ArgBinder("last", a, {});
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}
Value f_reverse(const Value& v, CallArgs& a) {
  ArgBinder("reverse", a, {});
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.s);
    std::reverse(u.begin(), u.end());
    return Value::string(utf8_encode(u));
  }
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}
Value f_join(const Value& v, CallArgs& a) {
  ArgBinder b("join", a, {"d", "attribute"});
  std::string sep = soft_str(b.get_or(0, Value::string("")));
  const Value* attr = b.get(1);
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += soft_str(attr && !attr->is_none() ? attr_path(x, soft_str(*attr)) : x);
  }
  return Value::string(out);
}
Value f_items(const Value& v, CallArgs& a) {
  ArgBinder("items", a, {});
  if (v.is_undefined()) return Value::make_list();
  if (!v.is_dict() || v.is_namespace) fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_tuple({k, x}));
  return Value::make_list(std::move(out));
}
Value f_dictsort(const Value& v, CallArgs& a) {
  ArgBinder b("dictsort", a, {"case_sensitive", "by", "reverse"});
  bool case_sensitive = b.get_or(0, Value::boolean(false)).truthy();
  std::string by = soft_str(b.get_or(1, Value::string("key")));
  bool reverse = b.get_or(2, Value::boolean(false)).truthy();
  if (!v.is_dict()) fail("dictsort: expected a mapping");
  size_t pos = by == "key" ? 0 : by == "value" ? 1 : 2;
  if (pos == 2) fail("You can only sort by either \"key\" or \"value\"");
  ValueList items;
  for (const auto& [k, x] : v.dict->items) items.push_back(Value::make_tuple({k, x}));
  auto key = [&](const Value& t) { return case_sensitive ? (*t.list)[pos] : ignore_case((*t.list)[pos]); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? py_less(key(y), key(x)) : py_less(key(x), key(y));
  });
  return Value::make_list(std::move(items));
}
Value f_sort(const Value& v, CallArgs& a) {
  ArgBinder b("sort", a, {"reverse", "case_sensitive", "attribute"});
  bool reverse = b.get_or(0, Value::boolean(false)).truthy();
  bool case_sensitive = b.get_or(1, Value::boolean(false)).truthy();
  const Value* attr = b.get(2);
  ValueList items = iterate(v);
  auto key = [&](const Value& x) {
    Value k = attr && !attr->is_none() ? attr_path(x, soft_str(*attr)) : x;
    return case_sensitive ? k : ignore_case(k);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? py_less(key(y), key(x)) : py_less(key(x), key(y));
  });
  return Value::make_list(std::move(items));
}
Value f_unique(const Value& v, CallArgs& a) {
  ArgBinder b("unique", a, {"case_sensitive", "attribute"});
  bool case_sensitive = b.get_or(0, Value::boolean(false)).truthy();
  const Value* attr = b.get(1);
  ValueList out, seen;
  for (const Value& x : iterate(v)) {
    Value k = attr && !attr->is_none() ? attr_path(x, soft_str(*attr)) : x;
    if (!case_sensitive) k = ignore_case(k);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); })) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return Value::make_list(std::move(out));
}
Value min_max(const Value& v, CallArgs& a, bool want_max) {
  ArgBinder b(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  bool case_sensitive = b.get_or(0, Value::boolean(false)).truthy();
  const Value* attr = b.get(1);
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined(want_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    Value k = attr && !attr->is_none() ? attr_path(x, soft_str(*attr)) : x;
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k)
    if (want_max ? py_less(key(items[best]), key(items[k])) : py_less(key(items[k]), key(items[best]))) best = k;
  return items[best];
}
Value f_max(const Value& v, CallArgs& a) { return min_max(v, a, true); }
Value f_min(const Value& v, CallArgs& a) { return min_max(v, a, false); }
Value f_sum(const Value& v, CallArgs& a);
Value f_batch(const Value& v, CallArgs& a) {
  ArgBinder b("batch", a, {"linecount", "fill_with"});
  int64_t n = int_arg(b.get(0), 0, "linecount");
  if (n <= 0) fail("batch: linecount must be positive");
  const Value* fill = b.get(1);
  ValueList out, cur;
  for (const Value& x : iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::make_list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::make_list(std::move(cur)));
  }
  return Value::make_list(std::move(out));
}

// --- value filters ---
Value f_default(const Value& v, CallArgs& a) {
  ArgBinder b("default", a, {"default_value", "boolean"});
  bool boolean = b.get_or(1, Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return b.get_or(0, Value::string(""));
  return v;
}
Value f_abs(const Value& v, CallArgs& a) {
  ArgBinder("abs", a, {});
  if (v.kind == Kind::Float) return Value::floating(std::fabs(v.f));
  if (v.is_integral()) return Value::integer(std::llabs(v.as_int()));
  fail("TypeError: bad operand type for abs(): '{}'", v.type_name());
}
std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}
Value f_int(const Value& v, CallArgs& a) {
  ArgBinder b("int", a, {"default", "base"});
  Value fallback = b.get_or(0, Value::integer(0));
  int64_t base = int_arg(b.get(1), 10, "base");
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.kind == Kind::Float) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : fallback;
  if (v.is_string()) {
    std::string s = py_strip(v.s, std::nullopt, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty()) {
      char* end = nullptr;
      long long r = std::strtoll(s.c_str(), &end, static_cast<int>(base));
      if (end == s.c_str() + s.size()) return Value::integer(r);
    }
    if (auto d = parse_float(v.s); d && std::isfinite(*d)) return Value::integer(static_cast<int64_t>(*d));
  }
  return fallback;
}
Value f_float(const Value& v, CallArgs& a) {
  ArgBinder b("float", a, {"default"});
  Value fallback = b.get_or(0, Value::floating(0.0));
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.s)) return Value::floating(*d);
  return fallback;
}
Value f_round(const Value& v, CallArgs& a) {
  ArgBinder b("round", a, {"precision", "method"});
  int64_t precision = int_arg(b.get(0), 0, "precision");
  std::string method = soft_str(b.get_or(1, Value::string("common")));
  if (!v.is_number()) fail("TypeError: round() needs a number, not {}", v.type_name());
  if (method == "common" && v.is_integral()) return Value::integer(v.as_int());
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  double r;
  if (method == "common") {
    std::fesetround(FE_TONEAREST);
    r = std::nearbyint(x);  // Python's round() rounds half to even
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    fail("method must be 'common', 'ceil' or 'floor'");
  }
  return Value::floating(r / scale);
}
Value f_tojson(const Value& v, CallArgs& a) {
  ArgBinder b("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions opt;
  opt.ensure_ascii = b.get_or(0, Value::boolean(false)).truthy();
  if (const Value* ind = b.get(1); ind && !ind->is_none()) {
    if (ind->is_string())
      opt.indent = ind->s;
    else
      opt.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, int_arg(ind, 0, "indent"))), ' ');
  }
  if (const Value* sep = b.get(2); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->list->size() != 2) fail("tojson: separators must be a (item, key) pair");
    opt.item_separator = soft_str((*sep->list)[0]);
    opt.key_separator = soft_str((*sep->list)[1]);
  }
  opt.sort_keys = b.get_or(3, Value::boolean(false)).truthy();
  return Value::string(json_dumps(v, opt));
}
Value f_attr(const Value& v, CallArgs& a) {
  ArgBinder b("attr", a, {"name"});
  if (!b.get(0)) fail("attr filter needs a name");
  // Python getattr only (no item lookup), so dict keys are not attributes here.
  const std::string name = soft_str(*b.get(0));
  if (auto m = bound_method(v, name)) return *m;
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", v.type_name(), name));
}

// --- higher-order filters ---
Value f_map(const Value& v, CallArgs& a) {
  ValueList out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, x] : a.kwargs) {
    if (k == "attribute") attribute = &x;
    else if (k == "default") fallback = &x;
  }
  if (attribute) {
    for (const Value& x : iterate(v)) {
      Value r = attr_path(x, soft_str(*attribute));
      out.push_back(r.is_undefined() && fallback ? *fallback : r);
    }
    return Value::make_list(std::move(out));
  }
  if (a.args.empty()) fail("map requires a filter argument");
  int idx = filter_index(soft_str(a.args[0]));
  if (idx < 0) fail("No filter named '{}'", soft_str(a.args[0]));
  for (const Value& x : iterate(v)) {
    CallArgs rest{ValueList(a.args.begin() + 1, a.args.end()), a.kwargs};
    out.push_back(apply_filter(idx, x, rest));
  }
  return Value::make_list(std::move(out));
}
Value select_impl(const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t first = by_attr ? 1 : 0;
  if (by_attr && a.args.empty()) fail("selectattr/rejectattr need an attribute name");
  std::string attr = by_attr ? soft_str(a.args[0]) : "";
  int test = -1;
  if (a.args.size() > first) {
    test = test_index(soft_str(a.args[first]));
    if (test < 0) fail("No test named '{}'", soft_str(a.args[first]));
  }
  ValueList out;
  for (const Value& x : iterate(v)) {
    Value item = by_attr ? attr_path(x, attr) : x;
    bool ok;
    if (test < 0) {
      ok = item.truthy();
    } else {
      CallArgs rest{ValueList(a.args.begin() + static_cast<std::ptrdiff_t>(first) + 1, a.args.end()), a.kwargs};
      ok = apply_test(test, item, rest);
    }
    if (ok == keep) out.push_back(x);
  }
  return Value::make_list(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }

Value f_sum(const Value& v, CallArgs& a) {
  ArgBinder b("sum", a, {"attribute", "start"});
  const Value* attr = b.get(0);
  Value total = b.get_or(1, Value::integer(0));
  for (const Value& x : iterate(v)) {
    Value item = attr && !attr->is_none() ? attr_path(x, soft_str(*attr)) : x;
    if (!total.is_number() || !item.is_number())
      fail("TypeError: unsupported operand type(s) for +: '{}' and '{}'", total.type_name(), item.type_name());
    if (total.kind == Kind::Float || item.kind == Kind::Float)
      total = Value::floating(total.as_double() + item.as_double());
    else
      total = Value::integer(total.as_int() + item.as_int());
  }
  return total;
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},         {"batch", f_batch},         {"capitalize", f_capitalize},
    {"center", f_center},     {"count", f_length},      {"d", f_default},           {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},       {"first", f_first},
    {"float", f_float},       {"forceescape", f_escape}, {"format", f_format},      {"indent", f_indent},
    {"int", f_int},           {"items", f_items},       {"join", f_join},           {"last", f_last},
    {"length", f_length},     {"list", f_list},         {"lower", f_lower},         {"map", f_map},
    {"max", f_max},           {"min", f_min},           {"pprint", f_pprint},       {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},  {"round", f_round},
    {"safe", f_safe},         {"select", f_select},     {"selectattr", f_selectattr}, {"sort", f_sort},
    {"string", f_string},     {"sum", f_sum},           {"title", f_title},         {"tojson", f_tojson},
    {"trim", f_trim},         {"truncate", f_truncate}, {"unique", f_unique},       {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

int filter_index(std::string_view name) {
  for (size_t k = 0; k < std::size(kFilters); ++k)
    if (name == kFilters[k].name) return static_cast<int>(k);
  return -1;
}

Value apply_filter(int index, const Value& input, CallArgs& args) {
  RILL_CHECK(index >= 0 && static_cast<size_t>(index) < std::size(kFilters), "bad filter index {}", index);
  return kFilters[index].fn(input, args);
}

}  // namespace rill::text::jinja
