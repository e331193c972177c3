// text/jinja/template.cpp — Template = tokenize + parse at construction, evaluate per render.
#include "text/jinja/template.h"

#include "core/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace rill::text::jinja {

Template::Template(std::string_view source)
    : body_(std::make_shared<const NodeList>(parse(tokenize(source)))) {}

std::string Template::render(const Value& context) const {
  auto globals = std::make_shared<Frame>();
  add_builtin_globals(*globals);
  if (context.is_dict())
    for (const auto& [k, v] : context.dict->items) globals->set(k.str(), v);
  else
    RILL_CHECK(context.is_undefined() || context.is_none(), "template context must be a dict");
  Evaluator evaluator;
  return evaluator.render(*body_, globals);
}

}  // namespace rill::text::jinja
