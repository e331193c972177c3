// text/jinja/evaluator.h — tree-walking interpreter for a parsed template. Scopes follow
// Jinja: a for-loop iteration, macro call, with/filter/call block opens a frame; `if` does
// not; `set` writes to the innermost frame (so loop-body assignments do not leak, which is
// why templates use namespace()). Errors carry "template line N:".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"

namespace rill::text::jinja {

struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value);
};
using FramePtr = std::shared_ptr<Frame>;

/// Adds Jinja's global functions: range, namespace, dict, joiner, cycler.
void add_builtin_globals(Frame& frame);

class Evaluator {
 public:
  /// Renders body with `globals` as the outermost frame.
  std::string render(const NodeList& body, const FramePtr& globals);

  Value eval(const Expr& e, const FramePtr& frame);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const NodeList& body, const FramePtr& frame, std::string& out);
  Flow exec_node(const Node& n, const FramePtr& frame, std::string& out);
  void exec_for(const Node& n, const FramePtr& frame, std::string& out);
  void exec_call_block(const Node& n, const FramePtr& frame, std::string& out);
  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const FramePtr& frame);
  void assign(const Expr& target, Value v, const FramePtr& frame);
  Value make_macro(const Node& n, const FramePtr& frame);

  Value eval_inner(const Expr& e, const FramePtr& frame);
  Value eval_call(const Expr& e, const FramePtr& frame, const Value* caller);
  CallArgs eval_args(const Expr& e, size_t first, const FramePtr& frame);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  Value eval_slice(const Expr& e, const FramePtr& frame);
  bool eval_compare(const Expr& e, const FramePtr& frame);
};

}  // namespace rill::text::jinja
