// bench/kernels/cuda_kernels_bench.cpp — CUDA kernel figures next to their bounds: HBM copy
// bandwidth (cudaMemcpy D2D), bf16 GEMM TFLOP/s through the backend's matmul (4096³ and the
// Qwen3-8B projection shapes), M ≤ 8 matvec GB/s per path against the copy bandwidth, paged
// attention decode GB/s (KV bytes) and prefill TFLOP/s. CUDA-event timing after warm-up, median
// of many runs, random (never all-zero) data. Prints a Markdown table; not a test.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops.h"

namespace rill {
namespace {

using cuda::CudaKernels;

struct Result {
  std::string name;
  double ms;
  std::string figure;
};
std::vector<Result> g_results;

double median_ms(CudaKernels& k, const std::function<void(int)>& fn, int warmup = 3, int reps = 20) {
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<cuda::Event> ev;
  for (int i = 0; i <= reps; ++i) ev.push_back(cuda::Event::create());
  ev[0].record(k.stream());
  for (int i = 0; i < reps; ++i) {
    fn(warmup + i);
    ev[size_t(i + 1)].record(k.stream());
  }
  ev.back().synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(cuda::Event::elapsed_ms(ev[size_t(i)], ev[size_t(i + 1)]));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const std::string& name, double ms, const std::string& figure) {
  g_results.push_back({name, ms, figure});
  std::printf("%-58s %10.4f ms  %s\n", name.c_str(), ms, figure.c_str());
  std::fflush(stdout);
}

// Fills device memory with random bf16 in [-1, 1) (generated on the host once per call).
void fill_random_bf16(CudaKernels& k, Tensor t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<bf16_t> chunk(size_t(1) << 22);
  for (auto& v : chunk) v = f32_to_bf16(dist(rng));
  size_t n = size_t(t.numel());
  char* dst = static_cast<char*>(t.data());
  for (size_t off = 0; off < n; off += chunk.size()) {
    size_t len = std::min(chunk.size(), n - off);
    RILL_CUDA_CHECK(cudaMemcpy(dst + off * 2, chunk.data(), len * 2, cudaMemcpyHostToDevice));
  }
  RILL_CUDA_CHECK(cudaDeviceSynchronize());  // the backend's stream does not wait for the legacy stream
}

struct Dev {
  Buffer buf;
  Tensor t;
  Dev(CudaKernels& k, DType d, std::vector<int64_t> shape) {
    Tensor probe(nullptr, d, std::span<const int64_t>(shape), Device::cuda);
    buf = Buffer(k.allocator(), std::max<size_t>(probe.nbytes(), 16));
    t = buf.as(d, std::span<const int64_t>(shape));
  }
};

double bench_copy(CudaKernels& k) {
  const size_t bytes = size_t(2) << 30;
  Dev a(k, DType::bf16, {int64_t(bytes / 2)}), b(k, DType::bf16, {int64_t(bytes / 2)});
  fill_random_bf16(k, a.t, 1);
  double ms = median_ms(k, [&](int) {
    RILL_CUDA_CHECK(cudaMemcpyAsync(b.t.data(), a.t.data(), bytes, cudaMemcpyDeviceToDevice, k.stream()));
  });
  double gbs = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  report("HBM copy D2D 2 GiB (read+write)", ms, std::to_string(int(gbs)) + " GB/s");
  return gbs;
}

double bench_gemm(CudaKernels& k, const char* name, int64_t m, int64_t n, int64_t kk, double peak_tflops) {
  Dev x(k, DType::bf16, {m, kk}), w(k, DType::bf16, {n, kk}), y(k, DType::bf16, {m, n});
  fill_random_bf16(k, x.t, 2);
  fill_random_bf16(k, w.t, 3);
  k.matmul(x.t, w.t, nullptr, y.t);  // autotune
  double ms = median_ms(k, [&](int) { k.matmul(x.t, w.t, nullptr, y.t); });
  double tf = 2.0 * double(m) * double(n) * double(kk) / (ms * 1e-3) / 1e12;
  const auto* c = k.matmul_engine().cached_choice(m, n, kk, false);
  char fig[160];
  std::snprintf(fig, sizeof fig, "%.0f TFLOP/s%s [%s]", tf,
                peak_tflops > 0 ? (" (" + std::to_string(int(100 * tf / peak_tflops)) + "% of 4096^3)").c_str() : "",
                c ? c->describe().c_str() : "?");
  report(std::string("GEMM ") + name + " M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" +
             std::to_string(kk),
         ms, fig);
  return tf;
}

void bench_matvec(CudaKernels& k, int64_t m, int64_t n, int64_t kk, double copy_gbs) {
  // Several weight copies so repeated runs do not hit L2 when a matrix fits in it.
  const size_t wbytes = size_t(n * kk * 2);
  const int copies = int(std::max<size_t>(1, std::min<size_t>(8, (size_t(256) << 20) / wbytes + 1)));
  std::vector<Dev> ws;
  for (int i = 0; i < copies; ++i) {
    ws.emplace_back(k, DType::bf16, std::vector<int64_t>{n, kk});
    fill_random_bf16(k, ws.back().t, 10 + uint64_t(i));
  }
  Dev x(k, DType::bf16, {m, kk}), y(k, DType::bf16, {m, n});
  fill_random_bf16(k, x.t, 4);
  auto& eng = k.matmul_engine();
  auto cands = eng.candidates(x.t.data(), ws[0].t.data(), nullptr, y.t.data(), m, n, kk);
  std::string shape = "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(kk);
  double best_cublas = 1e30, best_matvec = 1e30;
  for (const auto& c : cands) {
    double ms = median_ms(k, [&](int i) {
      eng.run_with(c, x.t.data(), ws[size_t(i % copies)].t.data(), nullptr, y.t.data(), m, n, kk);
    });
    if (c.path == cuda::MatmulChoice::Path::matvec) best_matvec = std::min(best_matvec, ms);
    else best_cublas = std::min(best_cublas, ms);
    double gbs = double(wbytes) / (ms * 1e-3) / 1e9;
    char fig[128];
    std::snprintf(fig, sizeof fig, "%.0f GB/s (%.0f%% of copy)", gbs, 100 * gbs / copy_gbs);
    report("matvec " + shape + " " + c.describe(), ms, fig);
  }
  k.matmul(x.t, ws[0].t, nullptr, y.t);  // the automatic choice
  double ms = median_ms(k, [&](int i) { k.matmul(x.t, ws[size_t(i % copies)].t, nullptr, y.t); });
  double gbs = double(wbytes) / (ms * 1e-3) / 1e9;
  char fig[200];
  std::snprintf(fig, sizeof fig, "%.0f GB/s (%.0f%% of copy) [%s]; matvec vs best cuBLASLt: %.2fx", gbs,
                100 * gbs / copy_gbs,
                eng.cached_choice(m, n, kk, false) ? eng.cached_choice(m, n, kk, false)->describe().c_str() : "invariant",
                best_cublas / best_matvec);
  report("matmul(auto) " + shape, ms, fig);
}

void bench_attention(CudaKernels& k, const char* label, int rows, int q_len, int ctx_len, double copy_gbs,
                     double gemm_tflops, int splits = 0, int warps = 0, int bn = 0) {
  const int hq = 32, hkv = 8, d = 128, bs = 16;
  const int blocks_per_row = (ctx_len + bs - 1) / bs;
  const int num_blocks = rows * blocks_per_row;
  const int64_t tokens = int64_t(rows) * q_len;
  Dev q(k, DType::bf16, {tokens, hq, d}), out(k, DType::bf16, {tokens, hq, d});
  Dev kc(k, DType::bf16, {num_blocks, bs, hkv, d}), vc(k, DType::bf16, {num_blocks, bs, hkv, d});
  fill_random_bf16(k, q.t, 5);
  fill_random_bf16(k, kc.t, 6);
  fill_random_bf16(k, vc.t, 7);
  std::vector<int32_t> cu(size_t(rows) + 1), ctx(size_t(rows), ctx_len), table(static_cast<size_t>(num_blocks));
  for (int r = 0; r <= rows; ++r) cu[size_t(r)] = r * q_len;
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(8));
  Dev dcu(k, DType::i32, {rows + 1}), dctx(k, DType::i32, {rows}), dtab(k, DType::i32, {rows, blocks_per_row});
  k.upload(cu.data(), dcu.t);
  k.upload(ctx.data(), dctx.t);
  k.upload(table.data(), dtab.t);
  AttentionBatch batch;
  batch.cu_seqlens_q = dcu.t;
  batch.context_lens = dctx.t;
  batch.block_tables = dtab.t;
  batch.num_rows = rows;
  batch.max_seqlen_q = q_len;
  batch.max_context_len = ctx_len;
  AttentionParams p{1.f / std::sqrt(float(d)), 0, 0.f};
  KvLayer cache{kc.t, vc.t};
  k.set_attention_splits(splits);
  k.set_attention_variant(warps, bn);
  double ms = median_ms(k, [&](int) { k.attention(q.t, cache, batch, p, out.t); });
  k.set_attention_splits(0);
  k.set_attention_variant(0, 0);
  char name[200], fig[160];
  std::string forced = (splits ? " splits=" + std::to_string(splits) : std::string()) +
                       (warps ? " warps=" + std::to_string(warps) + " bn=" + std::to_string(bn) : std::string());
  std::snprintf(name, sizeof name, "attention %s rows=%d q=%d ctx=%d (32/8 heads, d128)%s", label, rows, q_len,
                ctx_len, forced.c_str());
  if (q_len <= 16) {
    double bytes = double(rows) * ctx_len * hkv * d * 2 * 2;
    double gbs = bytes / (ms * 1e-3) / 1e9;
    std::snprintf(fig, sizeof fig, "%.0f GB/s KV (%.0f%% of copy)", gbs, 100 * gbs / copy_gbs);
  } else {
    // Causal: each query sees pos+1 keys; 2 matmuls of 2 flops per (q, k, dim).
    double pairs = 0;
    for (int i = 0; i < q_len; ++i) pairs += double(ctx_len - q_len + i + 1);
    double flops = 4.0 * rows * pairs * d * hq;
    double tf = flops / (ms * 1e-3) / 1e12;
    std::snprintf(fig, sizeof fig, "%.0f TFLOP/s (%.0f%% of GEMM 4096^3)", tf, 100 * tf / gemm_tflops);
  }
  report(name, ms, fig);
}

int run() {
  if (!cuda_available()) {
    std::printf("no CUDA GPU\n");
    return 1;
  }
  CudaKernels k(0);
  // The machine's ceilings and the autotuned kernels (cuBLASLt / matvec, chosen per shape): the
  // batch-invariant GEMM's figures come from CudaInvariance.DISABLED_GemmTiming, next to these.
  k.set_batch_invariant(false);
  std::printf("device: %s, %d SMs\n\n", k.info().name.c_str(), k.info().num_sms);
  double copy = bench_copy(k);
  double gemm = bench_gemm(k, "square", 4096, 4096, 4096, 0);
  if (const char* only = std::getenv("RILL_BENCH_GEMM_ONLY"); only && *only == '1') return 0;  // (a profile of it)
  // Qwen3-8B projections at a 4096-token prefill: qkv, o, gate+up, down, lm_head.
  bench_gemm(k, "qkv", 4096, 6144, 4096, gemm);
  bench_gemm(k, "o_proj", 4096, 4096, 4096, gemm);
  bench_gemm(k, "gate_up", 4096, 24576, 4096, gemm);
  bench_gemm(k, "down", 4096, 4096, 12288, gemm);
  bench_gemm(k, "lm_head", 4096, 151936, 4096, gemm);
  bench_gemm(k, "qkv M=256", 256, 6144, 4096, gemm);
  for (int64_t m : {1, 4, 8}) {
    bench_matvec(k, m, 4096, 12288, copy);
    bench_matvec(k, m, 12288, 4096, copy);
  }
  bench_matvec(k, 1, 151936, 4096, copy);
  bench_matvec(k, 1, 6144, 4096, copy);
  bench_matvec(k, 1, 4096, 4096, copy);
  for (int ctx : {512, 8192}) {
    bench_attention(k, "decode", 1, 1, ctx, copy, gemm);
    bench_attention(k, "decode", 32, 1, ctx, copy, gemm);
    bench_attention(k, "decode", 32, 4, ctx, copy, gemm);
  }
  // Variants: 64-key tiles for one-warp decode blocks, and split counts.
  for (int s : {0, 32, 64, 128}) bench_attention(k, "decode", 1, 1, 8192, copy, gemm, s);
  bench_attention(k, "decode", 1, 1, 8192, copy, gemm, 0, 1, 64);
  for (int s : {0, 2, 4, 8}) bench_attention(k, "decode", 32, 1, 8192, copy, gemm, s);
  for (int s : {0, 2, 4}) bench_attention(k, "decode", 32, 1, 8192, copy, gemm, s, 1, 64);
  bench_attention(k, "decode", 32, 1, 8192, copy, gemm, 0, 2, 32);
  for (int s : {0, 1, 4}) bench_attention(k, "decode", 128, 1, 2048, copy, gemm, s);
  bench_attention(k, "decode", 128, 1, 2048, copy, gemm, 0, 1, 64);
  bench_attention(k, "prefill", 1, 4096, 4096, copy, gemm, 0, 8, 64);
  bench_attention(k, "prefill", 1, 4096, 4096, copy, gemm, 0, 4, 32 * 2);
  bench_attention(k, "prefill", 1, 4096, 4096, copy, gemm);
  bench_attention(k, "prefill", 4, 4096, 4096, copy, gemm);
  bench_attention(k, "prefill", 8, 512, 512, copy, gemm);

  std::printf("\n| benchmark | median ms | figure |\n|---|---|---|\n");
  for (const auto& r : g_results) std::printf("| %s | %.4f | %s |\n", r.name.c_str(), r.ms, r.figure.c_str());
  return 0;
}

}  // namespace
}  // namespace rill

int main() {
  try {
    return rill::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
