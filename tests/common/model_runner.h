// tests/common/model_runner.h — drives a fixture model step by step (shared by the CPU parity
// tests and their CUDA twins): reference data, per-sequence block tables, host logits.
#pragma once

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace rill::test {

inline const std::string kFixtures = std::string(RILL_SOURCE_DIR) + "/tests/fixtures/models/";

struct Reference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> greedy;
  std::vector<std::vector<float>> logits;  // per prompt, [len * vocab]
  std::vector<std::vector<int32_t>> greedy_bf16;  // transformers with bf16 weights and activations (GPU)
  std::vector<std::vector<double>> greedy_bf16_margins;  // its top-1 minus top-2 logit per step
};

inline Reference load_reference(const std::string& name) {
  Reference r;
  std::ifstream in(kFixtures + name + "/reference.json");
  auto j = nlohmann::json::parse(in);
  r.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  r.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
  if (j.contains("greedy_bf16")) {
    r.greedy_bf16 = j["greedy_bf16"].get<std::vector<std::vector<int32_t>>>();
    r.greedy_bf16_margins = j["greedy_bf16_margins"].get<std::vector<std::vector<double>>>();
  }
  SafetensorsFile f(kFixtures + name + "/reference.safetensors");
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    const TensorInfo& t = f.tensors().at("logits." + std::to_string(p));
    const float* d = static_cast<const float*>(t.data);
    r.logits.emplace_back(d, d + t.nbytes / 4);
  }
  return r;
}

// One sequence's blocks in a shared pool.
struct Seq {
  std::vector<int32_t> blocks;
  int32_t len = 0;
  void reserve(SimpleBlockAllocator& alloc, int32_t total, int32_t block_size) {
    while (int32_t(blocks.size()) * block_size < total) blocks.push_back(*alloc.allocate());
  }
};

class Runner {
 public:
  Runner(const std::string& name, std::optional<DType> weight_dtype, int32_t block_size, bool cuda = false,
         int32_t num_blocks = 64, bool cuda_graphs = true)
      : kernels_(cuda ? make_cuda_kernels(0) : make_cpu_kernels()),
        model_(load_model(kFixtures + name, *kernels_, LoadOptions{weight_dtype, false, cuda_graphs})),
        block_size_(block_size),
        kv_(*kernels_, model_->kv_spec(), num_blocks, block_size),
        alloc_(num_blocks) {}

  Model& model() { return *model_; }
  int64_t vocab() const { return model_->config().vocab_size; }

  Kernels& kernels() { return *kernels_; }
  // Runs one step; rows are (seq, new tokens, logits mode). Returns [R * vocab] logits. With a
  // token_source the step's first ids come from that device tensor (StepBatch::token_source).
  std::vector<float> step(std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> rows,
                          const Tensor* token_source = nullptr) {
    return to_host(queue(std::move(rows), token_source));
  }
  // Queues one step without waiting for it; returns its logits on the device (valid until the
  // next step).
  Tensor queue(std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> rows, const Tensor* token_source = nullptr) {
    StepBatchBuilder b(block_size_);
    for (auto& [seq, toks, mode] : rows) {
      seq->reserve(alloc_, seq->len + int32_t(toks.size()), block_size_);
      b.add_row(toks, seq->len, seq->blocks, mode);
    }
    if (token_source) b.tokens_from(*token_source);
    StepBatch batch = b.build();
    Tensor logits = model_->forward(batch, kv_.layers());
    for (auto& [seq, toks, mode] : rows) seq->len += int32_t(toks.size());
    return logits;
  }
  // Logits (f32 or bf16, on this runner's device) as host floats.
  std::vector<float> to_host(const Tensor& logits) {
    std::vector<float> out(size_t(logits.numel()));
    if (logits.dtype() == DType::f32) {
      kernels_->download(logits, out.data());
    } else {
      std::vector<bf16_t> raw(out.size());
      kernels_->download(logits, raw.data());
      for (size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_f32(raw[i]);
    }
    return out;
  }

  static int32_t argmax(const float* row, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (row[i] > row[best]) best = int32_t(i);
    return best;
  }

 private:
  std::unique_ptr<Kernels> kernels_;
  std::unique_ptr<Model> model_;
  int32_t block_size_;
  KvBuffers kv_;
  SimpleBlockAllocator alloc_;
};

inline float max_abs_diff(const std::vector<float>& a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) {
    float d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace rill::test
