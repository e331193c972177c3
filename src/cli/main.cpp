// cli/main.cpp — the `rill` binary: registers the subcommands (cli/cmd_*.cpp) and turns
// rill::Error into a one-line message and exit code 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"rill — LLM inference engine and server", "rill"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may also follow the subcommand
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->each([](const std::string& level) { rill::set_log_level(level); });
  rill::cli::add_run_command(app);
  rill::cli::add_make_model_command(app);
  rill::cli::add_bench_command(app);
  rill::cli::add_bench_serve_command(app);
  rill::cli::add_template_command(app);
  rill::cli::add_tokenize_commands(app);
  rill::cli::add_serve_command(app);
  if (argc == 1) {  // `rill` alone: the commands and what each does, not only "a subcommand is required"
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const rill::Error& e) {
    std::fprintf(stderr, "rill: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rill: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
