// text/jinja/lexer.h — turns template source into tokens the way Jinja2's lexer does with
// trim_blocks and lstrip_blocks on (the transformers environment): newline normalisation,
// one trailing newline dropped, `-`/`+` whitespace control, comments and raw blocks.
// Not responsible for grammar (parser.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rill::text::jinja {

enum class TokenType { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  TokenType type;
  std::string value;  ///< text, name, unescaped string literal, number text or operator
  int line;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

/// Throws rill::Error "template line N: ..." on unterminated tags or bad characters.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace rill::text::jinja
