// cli/speculative_options.cpp — see speculative_options.h.
#include "cli/speculative_options.h"

#include "core/error.h"

namespace rill::cli {

void add_speculative_options(CLI::App& cmd, SpeculativeArgs& a) {
  cmd.add_option("--speculative-tokens", a.tokens,
                 "Speculative decoding: tokens drafted per step for a sequence by looking its last tokens up in its "
                 "own prompt and output (n-gram lookup), verified in one forward; the output is the same as "
                 "without it, bit for bit. 0: off")
      ->capture_default_str();
  cmd.add_option("--speculative-ngram-min", a.ngram_min, "Shortest suffix of the context the lookup matches")
      ->capture_default_str();
  cmd.add_option("--speculative-ngram-max", a.ngram_max, "Longest suffix of the context the lookup matches")
      ->capture_default_str();
  cmd.add_option("--speculative-max-running", a.max_running,
                 "No drafts while more sequences than this run (larger batches gain little from them)")
      ->capture_default_str();
}

void apply_speculative_options(const SpeculativeArgs& a, EngineOptions& o) {
  if (a.tokens < 0 || a.tokens > 32) fail("--speculative-tokens: must be in [0, 32] (0: off), got {}", a.tokens);
  if (a.ngram_min < 1) fail("--speculative-ngram-min: must be >= 1, got {}", a.ngram_min);
  if (a.ngram_max < a.ngram_min)
    fail("--speculative-ngram-max: must be >= --speculative-ngram-min ({}), got {}", a.ngram_min, a.ngram_max);
  if (a.max_running < 1) fail("--speculative-max-running: must be >= 1, got {}", a.max_running);
  o.speculative_tokens = a.tokens;
  o.ngram = {a.ngram_min, a.ngram_max};
  o.speculative_max_running = a.max_running;
}

}  // namespace rill::cli
