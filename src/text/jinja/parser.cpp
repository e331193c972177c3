// text/jinja/parser.cpp — statement grammar of templates (if/for/set/macro/call/filter/with,
// jinja2/parser.py semantics, our own code) on top of the expression parser (parser_expr.h).
#include "text/jinja/parser.h"

#include <initializer_list>

#include "text/jinja/error.h"
#include "text/jinja/parser_expr.h"

namespace rill::text::jinja {
namespace {

NodePtr make_node(NodeKind kind, int line) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->line = line;
  return n;
}

class Parser : public ExprParser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : ExprParser(tokens) {}

  NodeList parse_template() {
    NodeList body = parse_body({});
    if (cur().type != TokenType::End) error(cur().line, "unexpected token");
    return body;
  }

 private:
  // ---- statements ----

  // Parses until `{% <one of end_tags>` (left unconsumed) or the end of the tokens.
  NodeList parse_body(std::initializer_list<const char*> end_tags) {
    NodeList body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::End) {
        if (end_tags.size() != 0) {
          std::string expected;
          for (const char* e : end_tags) expected += (expected.empty() ? "'" : ", '") + std::string(e) + "'";
          error(t.line, fmt::format("unexpected end of template, expected one of {}", expected));
        }
        return body;
      }
      if (t.type == TokenType::Text) {
        auto n = make_node(NodeKind::Text, t.line);
        n->text = t.value;
        body.push_back(std::move(n));
        next();
      } else if (t.type == TokenType::VarBegin) {
        auto n = make_node(NodeKind::Output, t.line);
        next();
        n->expr = parse_tuple(false, true, {}, false);
        if (cur().type != TokenType::VarEnd)
          error(cur().line, fmt::format("expected end of print statement, got {}", describe(cur())));
        next();
        body.push_back(std::move(n));
      } else if (t.type == TokenType::BlockBegin) {
        const Token& kw = peek();
        if (kw.type == TokenType::Name)
          for (const char* e : end_tags)
            if (kw.value == e) return body;
        next();
        body.push_back(parse_statement());
      } else {
        error(t.line, "unexpected token " + describe(t));
      }
    }
  }

  // Consumes `{% name` then the block end.
  void expect_end_tag(const char* name) {
    next();  // BlockBegin
    if (!skip_name(name)) error(cur().line, fmt::format("expected '{}'", name));
    expect_block_end();
  }

  NodePtr parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::Name) error(t.line, "tag name expected");
    const std::string kw = t.value;
    const int line = t.line;
    next();
    if (kw == "if") return parse_if(line);
    if (kw == "for") return parse_for(line);
    if (kw == "set") return parse_set(line);
    if (kw == "macro") return parse_macro(line);
    if (kw == "call") return parse_call_block(line);
    if (kw == "filter") return parse_filter_block(line);
    if (kw == "with") return parse_with(line);
    if (kw == "break" || kw == "continue") {
      auto n = make_node(kw == "break" ? NodeKind::Break : NodeKind::Continue, line);
      expect_block_end();
      return n;
    }
    if (kw == "generation") {
      auto n = make_node(NodeKind::Scope, line);
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      expect_end_tag("endgeneration");
      return n;
    }
    error(line, fmt::format("unknown tag '{}'", kw));
  }

  NodePtr parse_if(int line) {
    auto n = make_node(NodeKind::If, line);
    ExprPtr cond = parse_tuple(false, true, {}, false);
    expect_block_end();
    while (true) {
      NodeList body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      next();  // BlockBegin
      std::string tag = next().value;
      if (tag == "elif") {
        cond = parse_tuple(false, true, {}, false);
        expect_block_end();
      } else if (tag == "else") {
        expect_block_end();
        NodeList else_body = parse_body({"endif"});
        n->branches.emplace_back(nullptr, std::move(else_body));
        expect_end_tag("endif");
        return n;
      } else {
        expect_block_end();
        return n;
      }
    }
  }

  NodePtr parse_for(int line) {
    auto n = make_node(NodeKind::For, line);
    n->target = parse_assign_target({"in"}, false);
    if (!skip_name("in")) error(cur().line, "expected 'in' in for loop");
    n->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) n->cond = parse_expression(true);
    if (skip_name("recursive")) n->recursive = true;
    expect_block_end();
    n->body = parse_body({"endfor", "else"});
    next();
    if (next().value == "else") {
      expect_block_end();
      n->else_body = parse_body({"endfor"});
      expect_end_tag("endfor");
    } else {
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_set(int line) {
    ExprPtr target = parse_assign_target({}, true);
    if (skip_op("=")) {
      auto n = make_node(NodeKind::Set, line);
      n->target = std::move(target);
      n->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return n;
    }
    auto n = make_node(NodeKind::SetBlock, line);
    n->target = std::move(target);
    while (skip_op("|")) n->filters.push_back(parse_filter_call(nullptr));
    expect_block_end();
    n->body = parse_body({"endset"});
    expect_end_tag("endset");
    return n;
  }

  void parse_signature(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n.params.empty()) expect_op(",");
      if (is_op(")")) break;
      n.params.push_back(expect_name());
      n.defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_op(")");
  }

  NodePtr parse_macro(int line) {
    auto n = make_node(NodeKind::Macro, line);
    n->name = expect_name();
    parse_signature(*n);
    expect_block_end();
    n->body = parse_body({"endmacro"});
    expect_end_tag("endmacro");
    return n;
  }

  NodePtr parse_call_block(int line) {
    auto n = make_node(NodeKind::CallBlock, line);
    if (is_op("(")) parse_signature(*n);
    n->expr = parse_expression(true);
    if (n->expr->kind != ExprKind::Call) error(line, "expected call");
    expect_block_end();
    n->body = parse_body({"endcall"});
    expect_end_tag("endcall");
    return n;
  }

  NodePtr parse_filter_block(int line) {
    auto n = make_node(NodeKind::FilterBlock, line);
    n->filters.push_back(parse_filter_call(nullptr));
    while (skip_op("|")) n->filters.push_back(parse_filter_call(nullptr));
    expect_block_end();
    n->body = parse_body({"endfilter"});
    expect_end_tag("endfilter");
    return n;
  }

  NodePtr parse_with(int line) {
    auto n = make_node(NodeKind::With, line);
    while (cur().type != TokenType::BlockEnd) {
      if (!n->assigns.empty()) expect_op(",");
      ExprPtr target = parse_assign_target({}, false);
      expect_op("=");
      n->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    n->body = parse_body({"endwith"});
    expect_end_tag("endwith");
    return n;
  }

  // name | name.attr (namespace) | a, b (tuple of names)
  ExprPtr parse_assign_target(std::initializer_list<const char*> extra_end, bool with_namespace) {
    if (with_namespace && cur().type == TokenType::Name && peek().type == TokenType::Op && peek().value == ".") {
      auto e = make_expr(ExprKind::Getattr, cur().line);
      auto obj = make_expr(ExprKind::Name, cur().line);
      obj->name = next().value;
      next();
      e->name = expect_name();
      e->children.push_back(std::move(obj));
      return e;
    }
    ExprPtr target = parse_tuple(true, true, extra_end, false);
    auto check = [&](const Expr& x) {
      if (x.kind != ExprKind::Name) error(x.line, "can't assign to this expression");
    };
    if (target->kind == ExprKind::Tuple)
      for (auto& c : target->children) check(*c);
    else
      check(*target);
    return target;
  }

};

}  // namespace

NodeList parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace rill::text::jinja
