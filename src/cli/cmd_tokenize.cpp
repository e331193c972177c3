// cli/cmd_tokenize.cpp — `rill tokenize` (UTF-8 text on stdin → ids on one line) and
// `rill detokenize` (ids on stdin, separated by whitespace or commas → text, printed exactly).
// Same results as transformers' tok(text)["input_ids"] and tok.decode(ids).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "text/tokenizer.h"

namespace rill::cli {
namespace {

std::string read_stdin() {
  std::string s{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  return s;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '[' || c == ']') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != '\t' && text[j] != '\n' &&
           text[j] != '\r' && text[j] != ']')
      ++j;
    std::string tok = text.substr(i, j - i);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || v < 0 || v > INT32_MAX) fail("detokenize: stdin: '{}' is not a token id", tok);
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  struct Args {
    std::string model;
    bool no_special = false, skip_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* tok = app.add_subcommand("tokenize", "Encode UTF-8 text from stdin; print the ids on one line");
  tok->add_option("--model,model", args->model, "Model directory (tokenizer.json, tokenizer_config.json)")->required();
  tok->add_flag("--no-special", args->no_special,
                "Add no BOS/EOS (special-token text in the input is still matched)");
  tok->callback([args] {
    text::Tokenizer t = text::Tokenizer::load(args->model);
    std::vector<int32_t> ids = t.encode(read_stdin(), {.add_special_tokens = !args->no_special});
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  });

  CLI::App* detok = app.add_subcommand("detokenize", "Decode ids from stdin (whitespace/comma separated); print the text");
  detok->add_option("--model,model", args->model, "Model directory (tokenizer.json, tokenizer_config.json)")
      ->required();
  detok->add_flag("--skip-special", args->skip_special, "Drop special tokens (skip_special_tokens=True)");
  detok->callback([args] {
    text::Tokenizer t = text::Tokenizer::load(args->model);
    std::string out = t.decode(parse_ids(read_stdin()), args->skip_special);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  });
}

}  // namespace rill::cli
