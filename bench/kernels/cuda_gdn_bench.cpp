// bench/kernels/cuda_gdn_bench.cpp — the CUDA Gated DeltaNet ops at the Qwen3.5-9B layer shape
// (Hk 16, Hv 32, dk = dv = 128, conv channels 2048 + 2048 + 4096, K 4): the recurrent gated delta
// rule for one 4096-token prefill row and for decode batches (state bytes read + written against
// the HBM copy bandwidth), causal conv1d prefill/decode, and the row ops of a prefill. CUDA-event
// timing after warm-up, median of 20, random (never all-zero) data. Prints a Markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace rill {
namespace {

using cuda::CudaKernels;

constexpr int64_t kHk = 16, kHv = 32, kD = 128, kCk = kHk * kD, kCv = kHv * kD, kK = 4;
std::vector<std::string> g_rows;

double median_ms(CudaKernels& k, const std::function<void()>& fn, int warmup = 3, int reps = 20) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<cuda::Event> ev;
  for (int i = 0; i <= reps; ++i) ev.push_back(cuda::Event::create());
  ev[0].record(k.stream());
  for (int i = 0; i < reps; ++i) {
    fn();
    ev[size_t(i + 1)].record(k.stream());
  }
  ev.back().synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(cuda::Event::elapsed_ms(ev[size_t(i)], ev[size_t(i + 1)]));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const std::string& name, double ms, const std::string& figure) {
  char line[512];
  std::snprintf(line, sizeof line, "| %s | %.4f | %s |", name.c_str(), ms, figure.c_str());
  g_rows.emplace_back(line);
  std::printf("%s\n", line);
  std::fflush(stdout);
}

struct Dev {
  Buffer buf;
  Tensor t;
  Dev(CudaKernels& k, DType d, std::vector<int64_t> shape, float lo, float hi, uint64_t seed) {
    Tensor probe(nullptr, d, std::span<const int64_t>(shape), Device::cuda);
    buf = Buffer(k.allocator(), std::max<size_t>(probe.nbytes(), 16));
    t = buf.as(d, std::span<const int64_t>(shape));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    if (d == DType::f32) {
      std::vector<float> h(size_t(t.numel()));
      for (auto& v : h) v = dist(rng);
      k.upload(h.data(), t);
    } else if (d == DType::bf16) {
      std::vector<bf16_t> h(size_t(t.numel()));
      for (auto& v : h) v = f32_to_bf16(dist(rng));
      k.upload(h.data(), t);
    }
  }
};

struct Batch {
  Dev cu, slots, has;
  StateBatch sb;
  Batch(CudaKernels& k, int rows, int len)
      : cu(k, DType::i32, {rows + 1}, 0, 0, 0), slots(k, DType::i32, {rows}, 0, 0, 0), has(k, DType::i32, {rows}, 0, 0, 0) {
    std::vector<int32_t> c(static_cast<size_t>(rows + 1)), s(static_cast<size_t>(rows)), h(static_cast<size_t>(rows), 1);
    for (int r = 0; r <= rows; ++r) c[size_t(r)] = r * len;
    for (int r = 0; r < rows; ++r) s[size_t(r)] = r;
    k.upload(c.data(), cu.t);
    k.upload(s.data(), slots.t);
    k.upload(h.data(), has.t);
    sb = StateBatch{cu.t, slots.t, has.t, rows};
  }
};

double bench_copy(CudaKernels& k) {
  const size_t bytes = size_t(1) << 31;
  void *a = nullptr, *b = nullptr;
  RILL_CUDA_CHECK(cudaMalloc(&a, bytes));
  RILL_CUDA_CHECK(cudaMalloc(&b, bytes));
  const double ms = median_ms(k, [&] { RILL_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, k.stream())); }, 2, 10);
  RILL_CUDA_CHECK(cudaFree(a));
  RILL_CUDA_CHECK(cudaFree(b));
  const double gbs = 2.0 * double(bytes) / (ms * 1e6);
  report("HBM copy 2 GiB (read + write)", ms, std::to_string(int(gbs)) + " GB/s");
  return gbs;
}

void bench_delta(CudaKernels& k, int rows, int len, double copy_gbs) {
  const int64_t T = int64_t(rows) * len;
  Dev q(k, DType::bf16, {T, kHk, kD}, -0.1f, 0.1f, 1), kk(k, DType::bf16, {T, kHk, kD}, -0.1f, 0.1f, 2);
  Dev v(k, DType::bf16, {T, kHv, kD}, -1, 1, 3), g(k, DType::f32, {T, kHv}, -1, 0, 4), b(k, DType::f32, {T, kHv}, 0, 1, 5);
  Dev st(k, DType::f32, {rows, kHv, kD, kD}, -1, 1, 6), out(k, DType::bf16, {T, kHv, kD}, 0, 0, 7);
  Batch batch(k, rows, len);
  DeltaRuleParams p;
  const double ms = median_ms(k, [&] { k.gated_delta_rule(q.t, kk.t, v.t, g.t, b.t, batch.sb, st.t, out.t, p); });
  const double state_bytes = 2.0 * double(st.t.nbytes());
  char fig[256];
  if (len == 1) {
    std::snprintf(fig, sizeof fig, "state r+w %.0f GB/s (%.0f%% of copy)", state_bytes / (ms * 1e6),
                  100.0 * state_bytes / (ms * 1e6) / copy_gbs);
  } else {
    std::snprintf(fig, sizeof fig, "%.2f us/token; x24 layers = %.1f ms per row", 1e3 * ms / double(len), 24 * ms);
  }
  report("gated_delta_rule " + std::to_string(rows) + " rows x " + std::to_string(len) + " tokens", ms, fig);
}

void bench_conv(CudaKernels& k, int rows, int len, double copy_gbs) {
  const int64_t T = int64_t(rows) * len, C = kCv;
  Dev x(k, DType::bf16, {T, C}, -1, 1, 8), w(k, DType::f32, {C, kK}, -0.5f, 0.5f, 9);
  Dev st(k, DType::f32, {rows, kK - 1, C}, -1, 1, 10), y(k, DType::bf16, {T, C}, 0, 0, 11);
  Batch batch(k, rows, len);
  const double ms = median_ms(k, [&] { k.causal_conv1d(x.t, w.t, batch.sb, st.t, y.t, true); });
  const double bytes = double(x.t.nbytes() + y.t.nbytes() + 2 * st.t.nbytes());
  char fig[160];
  std::snprintf(fig, sizeof fig, "%.0f GB/s (%.0f%% of copy)", bytes / (ms * 1e6), 100.0 * bytes / (ms * 1e6) / copy_gbs);
  report("causal_conv1d C=4096 " + std::to_string(rows) + " rows x " + std::to_string(len) + " tokens", ms, fig);
}

void bench_rows(CudaKernels& k, double copy_gbs) {
  const int64_t T = 4096;
  Dev x(k, DType::bf16, {T * kHv, kD}, -1, 1, 12), z(k, DType::bf16, {T * kHv, kD}, -1, 1, 13);
  Dev w(k, DType::f32, {kD}, 0.5f, 1.5f, 14);
  double ms = median_ms(k, [&] { k.gated_rms_norm(x.t, z.t, w.t, 1e-6f, x.t); });
  double bytes = 3.0 * double(x.t.nbytes());
  report("gated_rms_norm 4096 x 32 heads x 128", ms, std::to_string(int(bytes / (ms * 1e6) / copy_gbs * 100)) + "% of copy");
  Dev qk(k, DType::bf16, {T * kHk, kD}, -1, 1, 15);
  ms = median_ms(k, [&] { k.l2_norm(qk.t, 1e-6f, 0.088f, qk.t); });
  bytes = 2.0 * double(qk.t.nbytes());
  report("l2_norm 4096 x 16 heads x 128", ms, std::to_string(int(bytes / (ms * 1e6) / copy_gbs * 100)) + "% of copy");
}

int run() {
  CudaKernels k(0);
  const double copy = bench_copy(k);
  bench_delta(k, 1, 4096, copy);
  bench_delta(k, 4, 1024, copy);
  bench_delta(k, 1, 16, copy);
  for (int rows : {1, 16, 64, 256}) bench_delta(k, rows, 1, copy);
  bench_conv(k, 1, 4096, copy);
  bench_conv(k, 1, 1, copy);
  bench_conv(k, 64, 1, copy);
  bench_rows(k, copy);
  std::printf("\n| benchmark (Qwen3.5-9B layer shape) | median ms | figure |\n|---|---|---|\n");
  for (const auto& r : g_rows) std::printf("%s\n", r.c_str());
  return 0;
}

}  // namespace
}  // namespace rill

int main() {
  try {
    return rill::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gdn_bench: %s\n", e.what());
    return 1;
  }
}
