// model/qwen3_5_moe.cpp — Qwen3.5-MoE sparse block: host routing, per-expert Kernels matmuls on
// gathered rows, routed sum in f32, shared expert with its sigmoid gate. Works in either
// activation dtype (f32 on the CPU, bf16 on CUDA): the host side reads and writes through f32.
#include "model/qwen3_5_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"

namespace rill {
namespace {

// Device → host f32 copy of an f32 or bf16 tensor (out holds t.numel() values or more).
void download_f32(Kernels& k, const Tensor& t, std::vector<float>& out) {
  if (t.dtype() == DType::f32) {
    k.download(t, out.data());
    return;
  }
  std::vector<bf16_t> raw(size_t(t.numel()));
  k.download(t, raw.data());
  for (size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_f32(raw[i]);
}

void upload_f32(Kernels& k, const std::vector<float>& v, Tensor t) {
  if (t.dtype() == DType::f32) {
    k.upload(v.data(), t);
    return;
  }
  std::vector<bf16_t> raw(v.size());
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = f32_to_bf16(v[i]);
  k.upload(raw.data(), t);
}

}  // namespace

void MoeBlock::load(WeightLoader& w, const WeightStore& store, const std::string& p, const MoeSizes& s) {
  s_ = s;
  router_ = w.linear(p + "mlp.gate.weight", {s.E, s.H});
  gate_up_.clear();
  down_.clear();
  if (store.contains(p + "mlp.experts.gate_up_proj")) {
    Tensor gu = w.get(p + "mlp.experts.gate_up_proj", {s.E, 2 * s.I, s.H});
    Tensor dn = w.get(p + "mlp.experts.down_proj", {s.E, s.H, s.I});
    for (int64_t e = 0; e < s.E; ++e) {
      gate_up_.push_back(gu.slice(e, e + 1).view({2 * s.I, s.H}));
      down_.push_back(dn.slice(e, e + 1).view({s.H, s.I}));
    }
  } else {
    for (int64_t e = 0; e < s.E; ++e) {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      gate_up_.push_back(w.linear_rows({q + "gate_proj.weight", q + "up_proj.weight"}, {{s.I, s.H}, {s.I, s.H}}));
      down_.push_back(w.linear(q + "down_proj.weight", {s.H, s.I}));
    }
  }
  const std::string q = p + "mlp.shared_expert.";
  shared_gate_up_ = w.linear_rows({q + "gate_proj.weight", q + "up_proj.weight"}, {{s.Is, s.H}, {s.Is, s.H}});
  shared_down_ = w.linear(q + "down_proj.weight", {s.H, s.Is});
  shared_gate_ = w.get(p + "mlp.shared_expert_gate.weight", {1, s.H});
}

size_t MoeBlock::arena_bytes(const MoeSizes& s, int64_t T, size_t act) {
  const int64_t per_token = s.E + 1 + 3 * s.H + 3 * s.I + 3 * s.Is + 1 + 16;
  return size_t(T * per_token) * std::max<size_t>(act, 4) + 64 * 1024;
}

void MoeBlock::forward(Kernels& k, Arena& arena, const Tensor& h, Tensor& delta) const {
  const int64_t T = h.size(0), H = s_.H, E = s_.E, K = s_.k;
  RILL_ENSURE(h.dtype() == DType::f32 || h.dtype() == DType::bf16, "[moe] activations must be f32 or bf16, got {}",
              h.describe());
  const DType act = h.dtype();
  Tensor logits = arena.tensor(act, {T, E});
  k.matmul(h, router_, nullptr, logits);
  std::vector<float> rl(static_cast<size_t>(T * E));
  download_f32(k, logits, rl);
  // Route: softmax in f32, top-k (larger first, lower index on ties), renormalise.
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::vector<float> p(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = &rl[size_t(t * E)];
    const float mx = *std::max_element(l, l + E);
    float sum = 0.f;
    for (int64_t e = 0; e < E; ++e) sum += p[size_t(e)] = std::exp(l[e] - mx);
    for (int64_t e = 0; e < E; ++e) p[size_t(e)] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
    float top = 0.f;
    for (int64_t j = 0; j < K; ++j) top += p[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = order[size_t(j)];
      rows[size_t(e)].push_back(int32_t(t));
      weights[size_t(e)].push_back(p[size_t(e)] / top);
    }
  }
  Tensor idx = arena.tensor(DType::i32, {T});
  Tensor xe = arena.tensor(act, {T, H}), gu = arena.tensor(act, {T, 2 * s_.I}), ae = arena.tensor(act, {T, s_.I});
  Tensor ye = arena.tensor(act, {T, H});
  std::vector<float> routed(static_cast<size_t>(T * H), 0.f), y(static_cast<size_t>(T * H));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = int64_t(rows[size_t(e)].size());
    if (n == 0) continue;
    Tensor ie = idx.slice(0, n), x = xe.slice(0, n), g = gu.slice(0, n), a = ae.slice(0, n), o = ye.slice(0, n);
    k.upload(rows[size_t(e)].data(), ie);
    k.gather_rows(h, ie, x);
    k.matmul(x, gate_up_[size_t(e)], nullptr, g);
    k.swiglu(g, a);
    k.matmul(a, down_[size_t(e)], nullptr, o);
    download_f32(k, o, y);
    for (int64_t i = 0; i < n; ++i) {
      const float wgt = weights[size_t(e)][size_t(i)];
      float* dst = &routed[size_t(rows[size_t(e)][size_t(i)] * H)];
      for (int64_t c = 0; c < H; ++c) dst[c] += wgt * y[size_t(i * H + c)];
    }
  }
  Tensor sgu = arena.tensor(act, {T, 2 * s_.Is}), sa = arena.tensor(act, {T, s_.Is}), so = arena.tensor(act, {T, H});
  Tensor sg = arena.tensor(act, {T, 1});
  k.matmul(h, shared_gate_up_, nullptr, sgu);
  k.swiglu(sgu, sa);
  k.matmul(sa, shared_down_, nullptr, so);
  k.matmul(h, shared_gate_, nullptr, sg);
  std::vector<float> shared(static_cast<size_t>(T * H)), gate(static_cast<size_t>(T));
  download_f32(k, so, shared);
  download_f32(k, sg, gate);
  for (int64_t t = 0; t < T; ++t) {
    const float s = 1.f / (1.f + std::exp(-gate[size_t(t)]));
    for (int64_t c = 0; c < H; ++c) routed[size_t(t * H + c)] += s * shared[size_t(t * H + c)];
  }
  upload_f32(k, routed, delta);
}

}  // namespace rill
