// text/jinja/evaluator.cpp — statements: output, if, for (loop variables, filter, else,
// break/continue), set (names, tuples, namespace attributes, blocks), macro/call, filter
// blocks, with. Expressions are in evaluator_expr.cpp.
#include "text/jinja/evaluator.h"

#include <algorithm>

#include "text/jinja/error.h"
#include "text/jinja/filters.h"

namespace rill::text::jinja {

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get())
    for (const auto& [k, v] : f->vars)
      if (k == name) return &v;
  return nullptr;
}

void Frame::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

namespace {

FramePtr child_of(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

// Wraps a plain error with the template line once; located and raised errors pass through.
template <typename Fn>
auto with_line(int line, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const LocatedError&) {
    throw;
  } catch (const RaisedError&) {
    throw;
  } catch (const Error& e) {
    throw LocatedError(fmt::format("template line {}: {}", line, e.what()));
  }
}

}  // namespace

std::string Evaluator::render(const NodeList& body, const FramePtr& globals) {
  std::string out;
  FramePtr top = child_of(globals);
  exec(body, top, out);
  return out;
}

Evaluator::Flow Evaluator::exec(const NodeList& body, const FramePtr& frame, std::string& out) {
  for (const NodePtr& n : body) {
    Flow flow = exec_node(*n, frame, out);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_node(const Node& n, const FramePtr& frame, std::string& out) {
  switch (n.kind) {
    case NodeKind::Text:
      out += n.text;
      return Flow::Normal;
    case NodeKind::Output:
      out += eval(*n.expr, frame).str();
      return Flow::Normal;
    case NodeKind::If:
      for (const auto& [cond, body] : n.branches)
        if (!cond || eval(*cond, frame).truthy()) return exec(body, frame, out);
      return Flow::Normal;
    case NodeKind::For:
      with_line(n.line, [&] { exec_for(n, frame, out); });
      return Flow::Normal;
    case NodeKind::Set: {
      Value v = eval(*n.expr, frame);
      with_line(n.line, [&] { assign(*n.target, std::move(v), frame); });
      return Flow::Normal;
    }
    case NodeKind::SetBlock: {
      std::string body;
      exec(n.body, child_of(frame), body);
      Value v = apply_filters(n.filters, Value::string(std::move(body)), frame);
      with_line(n.line, [&] { assign(*n.target, std::move(v), frame); });
      return Flow::Normal;
    }
    case NodeKind::Macro:
      frame->set(n.name, make_macro(n, frame));
      return Flow::Normal;
    case NodeKind::CallBlock:
      exec_call_block(n, frame, out);
      return Flow::Normal;
    case NodeKind::FilterBlock: {
      std::string body;
      exec(n.body, child_of(frame), body);
      out += apply_filters(n.filters, Value::string(std::move(body)), frame).str();
      return Flow::Normal;
    }
    case NodeKind::Break:
      return Flow::Break;
    case NodeKind::Continue:
      return Flow::Continue;
    case NodeKind::With: {
      FramePtr inner = child_of(frame);
      for (const auto& [target, value] : n.assigns) {
        Value v = eval(*value, frame);
        assign(*target, std::move(v), inner);
      }
      return exec(n.body, inner, out);
    }
    case NodeKind::Scope:
      return exec(n.body, frame, out);
  }
  return Flow::Normal;
}

Value Evaluator::apply_filters(const std::vector<ExprPtr>& filters, Value v, const FramePtr& frame) {
  for (const ExprPtr& f : filters) {
    CallArgs args = eval_args(*f, 1, frame);
    v = with_line(f->line, [&] { return apply_filter(f->builtin, v, args); });
  }
  return v;
}

void Evaluator::assign(const Expr& target, Value v, const FramePtr& frame) {
  if (target.kind == ExprKind::Name) {
    frame->set(target.name, std::move(v));
    return;
  }
  if (target.kind == ExprKind::Getattr) {
    const std::string& ns_name = target.children[0]->name;
    const Value* ns = frame->find(ns_name);
    if (!ns || !ns->is_namespace) fail("cannot assign attribute on non-namespace object '{}'", ns_name);
    ns->dict->set(target.name, std::move(v));
    return;
  }
  // Tuple unpacking: `a, b = pair`.
  ValueList items = iterate(v);
  if (items.size() != target.children.size())
    fail("ValueError: cannot unpack {} values into {} names", items.size(), target.children.size());
  for (size_t k = 0; k < items.size(); ++k) assign(*target.children[k], std::move(items[k]), frame);
}

void Evaluator::exec_for(const Node& n, const FramePtr& frame, std::string& out) {
  if (n.recursive) fail("recursive for loops are not supported");
  Value seq = eval(*n.expr, frame);
  ValueList items = iterate(seq);
  if (n.cond) {
    ValueList kept;
    for (Value& item : items) {
      FramePtr probe = child_of(frame);
      assign(*n.target, item, probe);
      if (eval(*n.cond, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(n.else_body, child_of(frame), out);
    return;
  }
  const int64_t length = static_cast<int64_t>(items.size());
  auto last_changed = std::make_shared<std::vector<Value>>();
  for (int64_t k = 0; k < length; ++k) {
    FramePtr inner = child_of(frame);
    Value loop = Value::make_dict();
    Dict& d = *loop.dict;
    d.set("index0", Value::integer(k));
    d.set("index", Value::integer(k + 1));
    d.set("revindex0", Value::integer(length - k - 1));
    d.set("revindex", Value::integer(length - k));
    d.set("first", Value::boolean(k == 0));
    d.set("last", Value::boolean(k == length - 1));
    d.set("length", Value::integer(length));
    d.set("depth", Value::integer(1));
    d.set("depth0", Value::integer(0));
    if (k > 0) d.set("previtem", items[static_cast<size_t>(k - 1)]);
    if (k + 1 < length) d.set("nextitem", items[static_cast<size_t>(k + 1)]);
    d.set("cycle", Value::function("cycle", [k](CallArgs& a) {
      if (a.args.empty()) fail("no items for cycling given");
      return a.args[static_cast<size_t>(k) % a.args.size()];
    }));
    d.set("changed", Value::function("changed", [last_changed](CallArgs& a) {
      if (!last_changed->empty() && last_changed->size() == a.args.size() &&
          std::equal(a.args.begin(), a.args.end(), last_changed->begin(), py_equal))
        return Value::boolean(false);
      *last_changed = a.args;
      return Value::boolean(true);
    }));
    inner->set("loop", std::move(loop));
    assign(*n.target, items[static_cast<size_t>(k)], inner);
    if (exec(n.body, inner, out) == Flow::Break) break;
  }
}

Value Evaluator::make_macro(const Node& n, const FramePtr& frame) {
  const Node* node = &n;
  return Value::function(n.name, [this, node, frame](CallArgs& a) {
    FramePtr inner = child_of(frame);
    const size_t num_params = node->params.size();
    ValueList varargs;
    for (size_t k = 0; k < a.args.size(); ++k) {
      if (k < num_params)
        inner->set(node->params[k], a.args[k]);
      else
        varargs.push_back(a.args[k]);
    }
    Value kwargs = Value::make_dict();
    for (auto& [key, value] : a.kwargs) {
      auto it = std::find(node->params.begin(), node->params.end(), key);
      if (it != node->params.end()) {
        if (static_cast<size_t>(it - node->params.begin()) < a.args.size())
          fail("macro '{}' got multiple values for argument '{}'", node->name, key);
        inner->set(key, value);
      } else if (key == "caller") {
        inner->set("caller", value);
      } else {
        kwargs.dict->set(key, value);
      }
    }
    for (size_t k = a.args.size(); k < num_params; ++k) {
      const std::string& p = node->params[k];
      bool given = std::any_of(a.kwargs.begin(), a.kwargs.end(), [&](const auto& kv) { return kv.first == p; });
      if (given) continue;
      inner->set(p, node->defaults[k] ? eval(*node->defaults[k], inner)
                                      : Value::undefined(fmt::format("parameter '{}' was not provided", p)));
    }
    inner->set("varargs", Value::make_tuple(std::move(varargs)));
    inner->set("kwargs", std::move(kwargs));
    std::string out;
    exec(node->body, inner, out);
    return Value::string(std::move(out));
  });
}

void Evaluator::exec_call_block(const Node& n, const FramePtr& frame, std::string& out) {
  const Node* node = &n;
  Value caller = Value::function("caller", [this, node, frame](CallArgs& a) {
    FramePtr inner = child_of(frame);
    for (size_t k = 0; k < node->params.size(); ++k) {
      if (k < a.args.size())
        inner->set(node->params[k], a.args[k]);
      else
        inner->set(node->params[k], node->defaults[k] ? eval(*node->defaults[k], inner) : Value::undefined(""));
    }
    for (auto& [key, value] : a.kwargs) inner->set(key, value);
    std::string body;
    exec(node->body, inner, body);
    return Value::string(std::move(body));
  });
  out += eval_call(*n.expr, frame, &caller).str();
}

}  // namespace rill::text::jinja
