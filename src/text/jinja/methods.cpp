// text/jinja/methods.cpp — attribute and item access with Jinja's sandbox rules, iteration,
// membership, and the Python methods of str/dict/list that templates call. Methods that
// mutate a container are "unsafe" in the immutable sandbox: they resolve to an undefined
// whose use raises, as in ImmutableSandboxedEnvironment.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "text/jinja/filters.h"
#include "text/jinja/pystr.h"

namespace rill::text::jinja {

ArgBinder::ArgBinder(const char* what, CallArgs& args, std::initializer_list<const char*> names)
    : args_(args), names_(names) {
  if (args.args.size() > names_.size())
    fail("{}() takes at most {} arguments ({} given)", what, names_.size(), args.args.size());
  for (const auto& [key, value] : args.kwargs) {
    auto it = std::find_if(names_.begin(), names_.end(), [&](const char* n) { return key == n; });
    if (it == names_.end()) fail("{}() got an unexpected keyword argument '{}'", what, key);
    if (static_cast<size_t>(it - names_.begin()) < args.args.size())
      fail("{}() got multiple values for argument '{}'", what, key);
  }
}

const Value* ArgBinder::get(size_t index) const {
  if (index < args_.args.size()) return &args_.args[index];
  if (index >= names_.size()) return nullptr;
  for (const auto& [key, value] : args_.kwargs)
    if (key == names_[index]) return &value;
  return nullptr;
}

Value ArgBinder::get_or(size_t index, Value fallback) const {
  const Value* v = get(index);
  return v ? *v : std::move(fallback);
}

namespace {

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace) return "jinja2.utils.Namespace object";
  return v.type_name() + " object";
}

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) fail("TypeError: {} must be str, not {}", what, v.type_name());
  return v.s;
}

std::optional<std::string> opt_str(const Value* v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return need_str(*v, what);
}

int64_t need_int(const Value& v, const char* what) {
  if (!v.is_integral()) fail("TypeError: {} must be an integer, not {}", what, v.type_name());
  return v.as_int();
}

ValueList strings(std::vector<std::string> parts) {
  ValueList out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

// Python str.format: {} {0} {name} with !r/!s and a simple format spec.
std::string str_format(const std::string& fmt_text, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < fmt_text.size(); ++k) {
    char c = fmt_text[k];
    if (c == '}' && k + 1 < fmt_text.size() && fmt_text[k + 1] == '}') {
      out += '}';
      ++k;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < fmt_text.size() && fmt_text[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    size_t close = fmt_text.find('}', k);
    if (close == std::string::npos) fail("ValueError: Single '{{' encountered in format string");
    std::string field = fmt_text.substr(k + 1, close - k - 1);
    k = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index >= args.args.size()) fail("IndexError: Replacement index {} out of range", auto_index);
      v = &args.args[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t idx = std::stoul(field);
      if (idx >= args.args.size()) fail("IndexError: Replacement index {} out of range", idx);
      v = &args.args[idx];
    } else {
      for (const auto& [key, value] : args.kwargs)
        if (key == field) v = &value;
      if (!v) fail("KeyError: '{}'", field);
    }
    if (conv == "r")
      out += format_with_spec(Value::string(v->repr()), spec);
    else
      out += format_with_spec(*v, spec);
  }
  return out;
}

}  // namespace

// [[fill]align][width][.precision][type] — the subset templates use.
std::string format_with_spec(const Value& v, std::string_view spec) {
  if (spec.empty()) return v.str();
  size_t p = 0;
  char fill = ' ', align = 0;
  if (spec.size() >= 2 && (spec[1] == '<' || spec[1] == '>' || spec[1] == '^')) {
    fill = spec[0];
    align = spec[1];
    p = 2;
  } else if (spec[0] == '<' || spec[0] == '>' || spec[0] == '^') {
    align = spec[0];
    p = 1;
  }
  if (p < spec.size() && spec[p] == '0' && !align) {
    fill = '0';
    align = '=';
  }
  size_t width = 0;
  while (p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) width = width * 10 + (spec[p++] - '0');
  int precision = -1;
  if (p < spec.size() && spec[p] == '.') {
    precision = 0;
    ++p;
    while (p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) precision = precision * 10 + (spec[p++] - '0');
  }
  char type = p < spec.size() ? spec[p] : 0;
  std::string body;
  if (type == 'f' || type == 'F' || (precision >= 0 && v.kind == Kind::Float && type == 0)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", precision < 0 ? 6 : precision, v.as_double());
    body = buf;
  } else if (type == 'd') {
    body = std::to_string(v.as_int());
  } else {
    body = v.str();
    if (precision >= 0) body = utf8_encode(utf8_decode(body).substr(0, static_cast<size_t>(precision)));
  }
  size_t len = code_point_count(body);
  if (len >= width) return body;
  if (!align) align = v.is_number() ? '>' : '<';
  size_t pad = width - len;
  if (align == '<') return body + std::string(pad, fill);
  if (align == '^') return std::string(pad / 2, fill) + body + std::string(pad - pad / 2, fill);
  if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+'))
    return body.substr(0, 1) + std::string(pad, fill) + body.substr(1);
  return std::string(pad, fill) + body;
}

namespace {

Value str_method(const Value& self, const std::string& name, CallArgs& a) {
  const std::string& s = self.s;
  auto affix = [&](bool prefix) {
    ArgBinder b(name.c_str(), a, {"prefix", "start", "end"});
    const Value* what = b.get(0);
    if (!what) fail("{}() takes at least 1 argument (0 given)", name);
    auto test = [&](const Value& x) {
      const std::string& t = need_str(x, name.c_str());
      return prefix ? s.compare(0, t.size(), t) == 0 && s.size() >= t.size()
                    : s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
    };
    if (what->is_list() && what->is_tuple) {
      for (const Value& x : *what->list)
        if (test(x)) return Value::boolean(true);
      return Value::boolean(false);
    }
    return Value::boolean(test(*what));
  };
  if (name == "startswith") return affix(true);
  if (name == "endswith") return affix(false);
  if (name == "split" || name == "rsplit") {
    ArgBinder b(name.c_str(), a, {"sep", "maxsplit"});
    int64_t maxsplit = b.get(1) ? need_int(*b.get(1), "maxsplit") : -1;
    return Value::make_list(strings(py_split(s, opt_str(b.get(0), "sep"), maxsplit, name == "rsplit")));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgBinder b(name.c_str(), a, {"chars"});
    return Value::string(py_strip(s, opt_str(b.get(0), "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower" || name == "casefold") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "replace") {
    ArgBinder b("replace", a, {"old", "new", "count"});
    if (!b.get(0) || !b.get(1)) fail("replace() takes at least 2 arguments");
    int64_t count = b.get(2) ? need_int(*b.get(2), "count") : -1;
    return Value::string(py_replace(s, need_str(*b.get(0), "replace() argument 1"),
                                    need_str(*b.get(1), "replace() argument 2"), count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    ArgBinder b(name.c_str(), a, {"sub"});
    if (!b.get(0)) fail("{}() takes at least 1 argument (0 given)", name);
    int64_t r = py_find(s, need_str(*b.get(0), "substring"), name[0] == 'r');
    if (r < 0 && name.find("index") != std::string::npos) fail("ValueError: substring not found");
    return Value::integer(r);
  }
  if (name == "count") {
    ArgBinder b("count", a, {"sub"});
    if (!b.get(0)) fail("count() takes at least 1 argument (0 given)");
    return Value::integer(py_count(s, need_str(*b.get(0), "substring")));
  }
  if (name == "format") return Value::string(str_format(s, a));
  if (name == "join") {
    ArgBinder b("join", a, {"iterable"});
    if (!b.get(0)) fail("join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(*b.get(0))) {
      if (!first) out += s;
      first = false;
      out += need_str(x, "sequence item");
    }
    return Value::string(out);
  }
  if (name == "splitlines") return Value::make_list(strings(py_splitlines(s)));
  if (name == "center" || name == "ljust" || name == "rjust") {
    ArgBinder b(name.c_str(), a, {"width", "fillchar"});
    int64_t width = b.get(0) ? need_int(*b.get(0), "width") : 0;
    std::string fill = b.get(1) ? need_str(*b.get(1), "fillchar") : " ";
    if (name == "center") return Value::string(py_center(s, width, fill));
    int64_t pad = width - static_cast<int64_t>(code_point_count(s));
    std::string padding;
    for (int64_t k = 0; k < pad; ++k) padding += fill;
    return Value::string(name == "ljust" ? s + padding : padding + s);
  }
  if (name == "zfill") {
    ArgBinder b("zfill", a, {"width"});
    int64_t width = b.get(0) ? need_int(*b.get(0), "width") : 0;
    int64_t pad = width - static_cast<int64_t>(code_point_count(s));
    if (pad <= 0) return self;
    bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    return Value::string(sign ? s.substr(0, 1) + std::string(static_cast<size_t>(pad), '0') + s.substr(1)
                              : std::string(static_cast<size_t>(pad), '0') + s);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgBinder b(name.c_str(), a, {"affix"});
    if (!b.get(0)) fail("{}() takes exactly one argument (0 given)", name);
    const std::string& t = need_str(*b.get(0), name.c_str());
    if (name == "removeprefix" && s.compare(0, t.size(), t) == 0 && s.size() >= t.size())
      return Value::string(s.substr(t.size()));
    if (name == "removesuffix" && !t.empty() && s.size() >= t.size() &&
        s.compare(s.size() - t.size(), t.size(), t) == 0)
      return Value::string(s.substr(0, s.size() - t.size()));
    return self;
  }
  if (name == "partition" || name == "rpartition") {
    ArgBinder b(name.c_str(), a, {"sep"});
    if (!b.get(0)) fail("{}() takes exactly one argument (0 given)", name);
    const std::string& sep = need_str(*b.get(0), "sep");
    if (sep.empty()) fail("ValueError: empty separator");
    size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos)
      return name == "partition" ? Value::make_tuple(strings({s, "", ""})) : Value::make_tuple(strings({"", "", s}));
    return Value::make_tuple(strings({s.substr(0, hit), sep, s.substr(hit + sep.size())}));
  }
  // is* predicates: true when non-empty and every code point satisfies the predicate.
  std::u32string u = utf8_decode(s);
  auto all = [&](auto pred) { return Value::boolean(!u.empty() && std::all_of(u.begin(), u.end(), pred)); };
  if (name == "isspace") return all(py_isspace);
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return all([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isalnum") return all(py_isalnum);
  if (name == "isalpha") return all([](char32_t c) { return py_isalnum(c) && !(c >= '0' && c <= '9'); });
  if (name == "islower" || name == "isupper") {
    std::string low = py_lower(s), up = py_upper(s);
    bool has_cased = low != up;
    return Value::boolean(has_cased && (name == "islower" ? s == low : s == up));
  }
  fail("'str' object has no attribute '{}'", name);
}

Value dict_method(const Value& self, const std::string& name, CallArgs& a) {
  const Dict& d = *self.dict;
  if (name == "items" || name == "keys" || name == "values") {
    ArgBinder b(name.c_str(), a, {});
    ValueList out;
    for (const auto& [k, v] : d.items) {
      if (name == "items")
        out.push_back(Value::make_tuple({k, v}));
      else
        out.push_back(name == "keys" ? k : v);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "get") {
    ArgBinder b("get", a, {"key", "default"});
    if (!b.get(0)) fail("get expected at least 1 argument, got 0");
    const Value* v = d.find(*b.get(0));
    return v ? *v : b.get_or(1, Value::none());
  }
  if (name == "copy") {
    Value out = Value::make_dict();
    out.dict->items = d.items;
    return out;
  }
  fail("'dict' object has no attribute '{}'", name);
}

Value list_method(const Value& self, const std::string& name, CallArgs& a) {
  const ValueList& l = *self.list;
  if (name == "index" || name == "count") {
    ArgBinder b(name.c_str(), a, {"value"});
    if (!b.get(0)) fail("{}() takes exactly one argument (0 given)", name);
    int64_t n = 0;
    for (size_t k = 0; k < l.size(); ++k) {
      if (!py_equal(l[k], *b.get(0))) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(k));
      ++n;
    }
    if (name == "index") fail("ValueError: {} is not in list", b.get(0)->repr());
    return Value::integer(n);
  }
  if (name == "copy") return Value::make_list(l);
  fail("'list' object has no attribute '{}'", name);
}

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

}  // namespace

std::optional<Value> bound_method(const Value& obj, const std::string& name) {
  auto bind = [&](Value (*impl)(const Value&, const std::string&, CallArgs&)) {
    Value self = obj;
    return Value::function(name, [self, name, impl](CallArgs& a) { return impl(self, name, a); });
  };
  auto unsafe = [&]() {
    return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name()));
  };
  if (obj.is_string()) {
    if (is_one_of(name, {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "upper", "lower",
                         "casefold", "title", "capitalize", "replace", "find", "rfind", "index", "rindex", "count",
                         "format", "join", "splitlines", "center", "ljust", "rjust", "zfill", "removeprefix",
                         "removesuffix", "partition", "rpartition", "isspace", "isdigit", "isnumeric", "isdecimal",
                         "isalnum", "isalpha", "islower", "isupper"}))
      return bind(str_method);
    return std::nullopt;
  }
  if (obj.is_dict() && !obj.is_namespace) {
    if (is_one_of(name, {"items", "keys", "values", "get", "copy"})) return bind(dict_method);
    if (is_one_of(name, {"update", "pop", "popitem", "setdefault", "clear", "fromkeys"})) return unsafe();
    return std::nullopt;
  }
  if (obj.is_list()) {
    if (is_one_of(name, {"index", "count"}) || (!obj.is_tuple && name == "copy")) return bind(list_method);
    if (!obj.is_tuple && is_one_of(name, {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear"}))
      return unsafe();
    return std::nullopt;
  }
  return std::nullopt;
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail("{}", obj.s);
  if (!name.empty() && name[0] == '_') return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
  if (auto m = bound_method(obj, name)) return *m;
  if (obj.is_dict())
    if (const Value* v = obj.dict->find(name)) return *v;
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

namespace {
// Python index of a code point in a UTF-8 string, or nullopt when out of range.
std::optional<std::string> string_at(const std::string& s, int64_t index) {
  std::u32string u = utf8_decode(s);
  int64_t n = static_cast<int64_t>(u.size());
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return utf8_encode(std::u32string(1, u[static_cast<size_t>(index)]));
}
}  // namespace

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail("{}", obj.s);
  if (obj.is_dict() && !obj.is_namespace) {
    if (const Value* v = obj.dict->find(key)) return *v;
  } else if (obj.is_list() && key.is_integral()) {
    int64_t n = static_cast<int64_t>(obj.list->size());
    int64_t idx = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (idx >= 0 && idx < n) return (*obj.list)[static_cast<size_t>(idx)];
  } else if (obj.is_string() && key.is_integral()) {
    if (auto c = string_at(obj.s, key.as_int())) return Value::string(*c);
  }
  if (key.is_string()) {
    if (auto m = bound_method(obj, key.s)) return *m;
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), key.s));
  }
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), key.repr()));
}

ValueList iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return {};
    case Kind::List:
      return *v.list;
    case Kind::Dict: {
      if (v.is_namespace) fail("TypeError: 'Namespace' object is not iterable");
      ValueList keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::String: {
      ValueList out;
      for (char32_t c : utf8_decode(v.s)) out.push_back(Value::string(utf8_encode(std::u32string(1, c))));
      return out;
    }
    default:
      fail("TypeError: '{}' object is not iterable", v.type_name());
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined:
      return false;
    case Kind::String:
      if (!item.is_string()) fail("TypeError: 'in <string>' requires string as left operand, not {}", item.type_name());
      return container.s.find(item.s) != std::string::npos;
    case Kind::List:
      return std::any_of(container.list->begin(), container.list->end(),
                         [&](const Value& x) { return py_equal(x, item); });
    case Kind::Dict:
      if (container.is_namespace) fail("TypeError: argument of type 'Namespace' is not iterable");
      return container.dict->find(item) != nullptr;
    default:
      fail("TypeError: argument of type '{}' is not iterable", container.type_name());
  }
}

}  // namespace rill::text::jinja
