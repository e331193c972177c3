// cli/cmd_make_model.cpp — `rill make-model`: write a deterministic random-weight model.
#include <chrono>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/log.h"
#include "model/random_model.h"

namespace rill::cli {

void add_make_model_command(CLI::App& app) {
  struct Args {
    std::string shape, out, tokenizer;
    uint64_t seed = 0;
  };
  auto args = std::make_shared<Args>();
  std::string shapes;
  for (auto& s : random_model_shapes()) shapes += (shapes.empty() ? "" : ", ") + s;
  CLI::App* cmd = app.add_subcommand("make-model", "Write a random-weight bf16 model of a named shape");
  cmd->add_option("--shape", args->shape, "Shape: " + shapes)->required();
  cmd->add_option("--out", args->out, "Output directory")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Directory with tokenizer.json (+ tokenizer_config.json) to copy");
  cmd->add_option("--seed", args->seed, "Seed of the weights")->capture_default_str();
  cmd->callback([args] {
    RandomModelOptions o;
    o.shape = args->shape;
    o.out_dir = args->out;
    if (!args->tokenizer.empty()) o.tokenizer_dir = args->tokenizer;
    o.seed = args->seed;
    Progress progress("make-model " + args->shape);
    o.progress = [&](size_t done, size_t total) { progress.update(double(done) / 1e6, double(total) / 1e6, "MB"); };
    auto t0 = std::chrono::steady_clock::now();
    make_random_model(o);
    progress.finish();
    logger().info("wrote {} in {:.1f} s", args->out,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

}  // namespace rill::cli
