// text/jinja/parser.h — recursive-descent parser for the Jinja2 grammar that chat templates
// use, with Jinja's operator precedence (filters and tests bind tighter than arithmetic,
// `~` between +/- and * /). Unknown tags, filters and tests fail here, at parse time.
#pragma once

#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace rill::text::jinja {

/// Throws rill::Error "template line N: ..." on syntax errors.
NodeList parse(const std::vector<Token>& tokens);

}  // namespace rill::text::jinja
