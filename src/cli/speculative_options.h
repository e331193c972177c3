// cli/speculative_options.h — the speculative-decoding flags that `rill serve` and `rill bench-serve`
// share, checked with errors that name the flag, and copied into EngineOptions.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

#include "engine/engine_core.h"

namespace rill::cli {

struct SpeculativeArgs {
  int32_t tokens = 0;  ///< 0: off
  int32_t ngram_min = 2, ngram_max = 4;
  int32_t max_running = 32;
};

/// Registers --speculative-tokens, --speculative-ngram-min/-max and --speculative-max-running.
void add_speculative_options(CLI::App& cmd, SpeculativeArgs& args);
/// Checks the values (rill::Error naming the flag) and sets the engine's speculative options.
void apply_speculative_options(const SpeculativeArgs& args, EngineOptions& options);

}  // namespace rill::cli
