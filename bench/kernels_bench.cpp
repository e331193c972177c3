// bench/kernels_bench.cpp — CPU kernel throughput at the Qwen3-0.6B shapes (hidden 1024, 16 q /
// 8 kv heads of 128, intermediate 3072, vocab 151936, bf16 weights). Matvec (decode) reports the
// weight bytes streamed per second, matmul (prefill) GFLOP/s = 2·M·N·K / time, attention decode the
// KV bytes read per second. Threads: ThreadPool::global() (RILL_NUM_THREADS). Not a test.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

Kernels& cpu() {
  static std::unique_ptr<Kernels> k = make_cpu_kernels();
  return *k;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A bf16 weight [N, K] in 64-byte aligned memory, random (never all zeros).
Buffer bf16_weight(int64_t N, int64_t K) {
  Buffer b(cpu_allocator(), size_t(N * K) * 2);
  auto* p = static_cast<bf16_t*>(b.data());
  std::mt19937 rng(uint32_t(N * 31 + K));
  std::uniform_real_distribution<float> d(-0.05f, 0.05f);
  for (int64_t i = 0; i < N * K; ++i) p[i] = f32_to_bf16(d(rng));
  return b;
}

// Args: M, N, K.
void BM_MatmulBf16(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  Buffer w = bf16_weight(N, K);
  std::vector<float> x = random_floats(size_t(M * K), 1), y(size_t(M * N));
  Tensor xt(x.data(), DType::f32, {M, K});
  Tensor wt = w.as(DType::bf16, {N, K});
  Tensor yt(y.data(), DType::f32, {M, N});
  for (auto _ : state) {
    cpu().matmul(xt, wt, nullptr, yt);
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = double(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["weight_GB/s"] = benchmark::Counter(2.0 * N * K * iters / 1e9, benchmark::Counter::kIsRate);
}

void MatvecShapes(benchmark::internal::Benchmark* b) {
  // q_proj, k_proj (= v_proj), o_proj, gate+up fused, down_proj, lm_head
  for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{
           {2048, 1024}, {1024, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}, {151936, 1024}})
    b->Args({1, N, K});
}

void MatmulShapes(benchmark::internal::Benchmark* b) {
  for (int64_t M : {128, 512})
    for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{2048, 1024}, {6144, 1024}, {1024, 3072}})
      b->Args({M, N, K});
}

BENCHMARK(BM_MatmulBf16)->Name("matvec_bf16")->Apply(MatvecShapes)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulBf16)->Name("matmul_bf16")->Apply(MatmulShapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: rows (decode tokens, one per sequence), context length per row.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t rows = state.range(0), ctx = state.range(1);
  const int64_t Hq = 16, Hkv = 8, D = 128, bs = 16;
  const int64_t blocks_per_row = (ctx + bs - 1) / bs, num_blocks = rows * blocks_per_row;
  std::vector<float> k = random_floats(size_t(num_blocks * bs * Hkv * D), 2);
  std::vector<float> v = random_floats(k.size(), 3);
  std::vector<float> q = random_floats(size_t(rows * Hq * D), 4), out(q.size());
  std::vector<int32_t> cu(static_cast<size_t>(rows + 1)), lens(static_cast<size_t>(rows), int32_t(ctx));
  std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
  std::iota(cu.begin(), cu.end(), 0);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), std::mt19937(5));
  KvLayer cache{Tensor(k.data(), DType::f32, {num_blocks, bs, Hkv, D}),
                Tensor(v.data(), DType::f32, {num_blocks, bs, Hkv, D})};
  AttentionBatch batch;
  batch.cu_seqlens_q = Tensor(cu.data(), DType::i32, {rows + 1});
  batch.context_lens = Tensor(lens.data(), DType::i32, {rows});
  batch.block_tables = Tensor(tables.data(), DType::i32, {rows, blocks_per_row});
  batch.num_rows = int32_t(rows);
  AttentionParams p;
  p.scale = 1.f / std::sqrt(float(D));
  Tensor qt(q.data(), DType::f32, {rows, Hq, D}), ot(out.data(), DType::f32, {rows, Hq, D});
  for (auto _ : state) {
    cpu().attention(qt, cache, batch, p, ot);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["KV_GB/s"] = benchmark::Counter(double(rows * ctx * Hkv * D * 4 * 2) * double(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDecode)
    ->Name("attention_decode")
    ->Args({1, 512})
    ->Args({1, 4096})
    ->Args({8, 512})
    ->Args({8, 4096})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// One prefill chunk of 512 tokens attending causally to itself (plus nothing cached before).
void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t T = state.range(0), Hq = 16, Hkv = 8, D = 128, bs = 16;
  const int64_t num_blocks = (T + bs - 1) / bs;
  std::vector<float> k = random_floats(size_t(num_blocks * bs * Hkv * D), 2);
  std::vector<float> v = random_floats(k.size(), 3);
  std::vector<float> q = random_floats(size_t(T * Hq * D), 4), out(q.size());
  std::vector<int32_t> cu = {0, int32_t(T)}, lens = {int32_t(T)};
  std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
  std::iota(tables.begin(), tables.end(), 0);
  KvLayer cache{Tensor(k.data(), DType::f32, {num_blocks, bs, Hkv, D}),
                Tensor(v.data(), DType::f32, {num_blocks, bs, Hkv, D})};
  AttentionBatch batch;
  batch.cu_seqlens_q = Tensor(cu.data(), DType::i32, {2});
  batch.context_lens = Tensor(lens.data(), DType::i32, {1});
  batch.block_tables = Tensor(tables.data(), DType::i32, {1, num_blocks});
  batch.num_rows = 1;
  AttentionParams p;
  p.scale = 1.f / std::sqrt(float(D));
  Tensor qt(q.data(), DType::f32, {T, Hq, D}), ot(out.data(), DType::f32, {T, Hq, D});
  for (auto _ : state) {
    cpu().attention(qt, cache, batch, p, ot);
    benchmark::DoNotOptimize(out.data());
  }
  // q·k and p·v over the causal triangle: 2 · 2 · D FLOPs per (query head, key) pair.
  const double pairs = double(T) * double(T + 1) / 2 * double(Hq);
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * D * pairs * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionPrefill)->Name("attention_prefill")->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace rill

BENCHMARK_MAIN();
