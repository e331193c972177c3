// text/jinja/template.h — the public face of the engine: parse once, render many times.
// Semantics are Jinja2's with trim_blocks and lstrip_blocks on (the environment transformers
// renders chat templates with). The parsed tree is immutable and render() keeps its state
// on its own stack, so one Template may render from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace rill::text::jinja {

class Template {
 public:
  /// Parses source; throws rill::Error "template line N: ..." on syntax errors,
  /// unknown tags, filters or tests.
  explicit Template(std::string_view source);

  /// context: a dict Value whose entries become global variables (next to range, namespace...).
  /// A raise_exception() in the template surfaces as rill::Error with exactly its message.
  std::string render(const Value& context) const;

 private:
  std::shared_ptr<const NodeList> body_;
};

}  // namespace rill::text::jinja
