// text/jinja/ast.h — syntax tree of a parsed template: expressions (Expr) and statements
// (Node). Every node carries its template line for error messages. Owned by Template;
// evaluation lives in evaluator.cpp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace rill::text::jinja {

struct Expr;
struct Node;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

enum class ExprKind {
  Const,     // value
  Name,      // name
  List,      // children
  Tuple,     // children
  Dict,      // children: key, value, key, value...
  Getattr,   // children[0].name
  Getitem,   // children[0][children[1]]
  Slice,     // children[0][children[1]:children[2]:children[3]] (null parts allowed)
  Call,      // children[0](children[1..], kwargs)
  Filter,    // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
  Test,      // children[0] is [not] name(children[1..])
  Neg,       // -children[0]
  Pos,       // +children[0]
  Not,       // not children[0]
  And,       // children[0] and children[1]
  Or,        // children[0] or children[1]
  Binary,    // children[0] name children[1], name in + - * / // % **
  Compare,   // children[0] ops[0] children[1] ops[1] children[2]...
  Concat,    // children joined with ~
  CondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  int builtin = -1;  ///< resolved filter/test index (see filters.h / tests_builtin.h)
};

enum class NodeKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // branches
  For,          // for target in expr [if cond] body [else else_body]
  Set,          // set target = expr
  SetBlock,     // set target [| filters] body endset
  Macro,        // macro name(params=defaults) body
  CallBlock,    // call(params) expr body
  FilterBlock,  // filter filters body
  Break,
  Continue,
  With,         // with assigns body
  Scope,        // a body rendered in place ({% generation %})
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // If: (condition or null for else, body)
  NodeList body;
  NodeList else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params, null when no default
  std::vector<ExprPtr> filters;   // Filter exprs whose input is null
  std::vector<std::pair<ExprPtr, ExprPtr>> assigns;
  bool recursive = false;
};

}  // namespace rill::text::jinja
