// text/jinja/globals.cpp — Jinja's global functions: range, namespace, dict, joiner, cycler.
#include "core/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/filters.h"

namespace rill::text::jinja {
namespace {

Value range_fn(CallArgs& a) {
  if (!a.kwargs.empty()) fail("range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3) fail("range expected 1 to 3 arguments, got {}", a.args.size());
  for (const Value& v : a.args)
    if (!v.is_integral()) fail("TypeError: '{}' object cannot be interpreted as an integer", v.type_name());
  int64_t start = 0, stop, step = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) step = a.args[2].as_int();
  }
  if (step == 0) fail("ValueError: range() arg 3 must not be zero");
  ValueList out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    out.push_back(Value::integer(k));
    if (out.size() > 100000) fail("range() too big: at most 100000 items are allowed");
  }
  return Value::make_list(std::move(out));
}

// dict(mapping_or_pairs, **kwargs) as a fresh dict.
Value dict_from(CallArgs& a, const char* what) {
  if (a.args.size() > 1) fail("{} expected at most 1 positional argument, got {}", what, a.args.size());
  Value d = Value::make_dict();
  if (!a.args.empty()) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      d.dict->items = src.dict->items;
    } else {
      for (const Value& pair : iterate(src)) {
        ValueList kv = iterate(pair);
        if (kv.size() != 2) fail("{}: sequence elements must have length 2", what);
        d.dict->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.kwargs) d.dict->set(k, v);
  return d;
}

}  // namespace

void add_builtin_globals(Frame& frame) {
  frame.set("range", Value::function("range", range_fn));
  frame.set("dict", Value::function("dict", [](CallArgs& a) { return dict_from(a, "dict"); }));
  frame.set("namespace", Value::function("namespace", [](CallArgs& a) {
    Value ns = dict_from(a, "namespace");
    ns.is_namespace = true;
    return ns;
  }));
  frame.set("joiner", Value::function("joiner", [](CallArgs& a) {
    ArgBinder b("joiner", a, {"sep"});
    std::string sep = b.get_or(0, Value::string(", ")).str();
    auto used = std::make_shared<bool>(false);
    return Value::function("joiner", [sep, used](CallArgs&) {
      if (!*used) {
        *used = true;
        return Value::string("");
      }
      return Value::string(sep);
    });
  }));
  frame.set("cycler", Value::function("cycler", [](CallArgs& a) {
    if (a.args.empty()) fail("cycler needs at least one item");
    auto items = std::make_shared<ValueList>(a.args);
    auto pos = std::make_shared<size_t>(0);
    Value c = Value::make_dict();
    c.dict->set("next", Value::function("next", [items, pos](CallArgs&) {
      Value v = (*items)[*pos];
      *pos = (*pos + 1) % items->size();
      return v;
    }));
    c.dict->set("reset", Value::function("reset", [pos](CallArgs&) {
      *pos = 0;
      return Value::none();
    }));
    return c;
  }));
}

}  // namespace rill::text::jinja
