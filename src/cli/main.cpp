// cli/main.cpp — the `rill` binary: subcommands are registered here, implemented in cli/*.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"rill — LLM inference engine and server"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const rill::Error& e) {
    std::fprintf(stderr, "rill: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
