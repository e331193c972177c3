// cli/commands.h — each `rill` subcommand registers itself on the app from its own file.
#pragma once

#include <CLI/CLI.hpp>

namespace rill::cli {

void add_run_command(CLI::App& app);         ///< cmd_run.cpp: rill run
void add_make_model_command(CLI::App& app);  ///< cmd_make_model.cpp: rill make-model
void add_bench_command(CLI::App& app);       ///< cmd_bench.cpp: rill bench
void add_bench_serve_command(CLI::App& app); ///< cmd_bench_engine.cpp: rill bench-serve
void add_template_command(CLI::App& app);    ///< cmd_template.cpp: rill template
void add_tokenize_commands(CLI::App& app);  ///< cmd_tokenize.cpp: rill tokenize, rill detokenize
void add_serve_command(CLI::App& app);       ///< cmd_serve.cpp: rill serve

}  // namespace rill::cli
