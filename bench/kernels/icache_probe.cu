// bench/kernels/icache_probe.cu — a standalone lab file: what does running code that is not in the
// SM's instruction caches cost while a weight stream is in flight? The latency-bound kernels of a
// decode step are large (the cluster attention kernel ~63 KB of SASS, the norm ~45 KB, a decode GEMM
// ~89 KB) and each runs once a layer on an SM that ran other kernels' code in between, so their
// instructions may come from L2 — whose round trip the weight stream makes ~0.5-1.2 µs (latency_probe).
//
// One launch: block 0 (one warp) runs straight-line code of independent multiply-adds (~16 B of SASS
// each, 8 independent chains, so that issue — not latency — bounds a warm run at ~1 a cycle): body A
// (~32 KB) once after a 30 µs spin and again (warm); then, with every small body (~8 KB each, 32 of
// them) brought into L2, N KB of them and A again — how much other code evicts A from the SM's
// instruction caches, and what A costs then; then a body inlined in the runner's own code behind
// 256 KB of other code, reached after a 20 µs spin or straight away — whether the SM fetches ahead in
// sequence while the warp stalls (as a kernel's code after its griddepcontrol.wait). The other blocks
// stream as latency_probe's (CTAs an SM × 8 KB bulk copies in flight). Medians of 5 launches, ns.
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/icache_probe.cu -o icache_probe; run alone on an H100 / H200 (~1 s, 4 GB).
// Not part of the library or of any test: a measurement (bench/RESULTS.md, run AC).
#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "probe_util.cuh"

namespace {

using rill::probe::kChunk;
using rill::probe::median;
using rill::probe::kMaxDepth;
using rill::probe::now_ns;
constexpr int kBody = 2048;   // multiply-adds of body A (~32 KB of code)
constexpr int kSmall = 512;   // of each small body (~8 KB), the code run in between
constexpr int kSmalls = 32;   // up to 256 KB of other code
constexpr size_t kSmem = size_t(kMaxDepth) * kChunk + 1024;

struct Params {
  const unsigned char* stream;
  int64_t chunks;
  int depth;
  unsigned m;      // a runtime multiplier: nothing folds
  int between;     // small bodies run between A's two timed runs (each 8 KB of other code)
  int* done;
  // [0] A first (after the runner's 30 µs spin), [1] A warm, [2] A after `between` small bodies,
  // [3] A inlined after a 20 µs spin behind 256 KB of other code, [4] the same code without the spin,
  // [5] sink; [8..10] the stream's bytes, first start, last end.
  unsigned long long* res;
};

// n multiply-adds over 8 registers (each reads the next: 8 independent chains, so that issue — not
// latency — bounds a warm run); K makes each instantiation code of its own.
template <int K, int n>
__device__ __forceinline__ unsigned body_inline(unsigned x, unsigned m) {
  unsigned r[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) r[j] = x + unsigned(j * K + j);
#pragma unroll
  for (int i = 0; i < n; ++i)
    asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(r[i % 8]) : "r"(m), "r"(r[(i + 1) % 8]));
  unsigned s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s ^= r[j];
  return s;
}
template <int K, int n>
__device__ __noinline__ unsigned body(unsigned x, unsigned m) {
  return body_inline<K, n>(x, m);
}

template <int... K>
__device__ __forceinline__ unsigned smalls(unsigned x, unsigned m, int count, std::integer_sequence<int, K...>) {
  ((x = K < count ? body<K + 1, kSmall>(x, m) : x), ...);
  return x;
}

__device__ __forceinline__ unsigned long long timed(unsigned long long& t) {
  const unsigned long long now = now_ns(), d = now - t;
  t = now;
  return d;
}
__device__ __forceinline__ void spin(unsigned long long ns) {
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < ns) {
  }
}

__global__ void __launch_bounds__(32) probe_kernel(Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kMaxDepth];
  if (blockIdx.x == 0) {  // the code runner (its whole warp, as a kernel's warp fetches)
    const auto all = std::make_integer_sequence<int, kSmalls>{};
    unsigned x = threadIdx.x;
    unsigned long long d[5];
    spin(30000);  // for the stream to reach its rate
    unsigned long long t = now_ns();
    x = body<0, kBody>(x, p.m), d[0] = timed(t);
    x = body<0, kBody>(x, p.m), d[1] = timed(t);
    x = smalls(x, p.m, kSmalls, all);       // every small body's code into L2
    x = body<0, kBody>(x, p.m);             // A into the SM's caches again
    x = smalls(x, p.m, p.between, all);     // `between` × 8 KB of other code run since A
    t = now_ns();
    x = body<0, kBody>(x, p.m), d[2] = timed(t);
    // Code reached in sequence after a wait (as a kernel's code after griddepcontrol.wait): does the
    // SM fetch ahead while the warp stalls? The same inline body with and without a spin before it.
    for (int pass = 0; pass < 2; ++pass) {
      x = smalls(x, p.m, kSmalls, all);  // 256 KB of other code: the inline body is not in the SM
      if (pass == 0) spin(20000);
      t = now_ns();
      x = body_inline<99, kBody>(x, p.m), d[3 + pass] = timed(t);
    }
    if (threadIdx.x == 0) {
      for (int i = 0; i < 5; ++i) p.res[i] = d[i];
      p.res[5] = x;
      asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p.done), "r"(1) : "memory");
    }
    return;
  }
  if (threadIdx.x != 0 || p.depth == 0) return;
  rill::probe::stream_until(p.stream, p.chunks, p.depth, p.done, smem_raw, full, p.res + 8);
#endif
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  std::printf("device %s, %d SMs; body A: %d multiply-adds (~%d KB of code), small bodies ~%d KB\n", prop.name, sms,
              kBody, kBody * 16 / 1024, kSmall * 16 / 1024);
  const size_t stream_bytes = size_t(4) << 30;
  unsigned char* stream;
  CK(cudaMalloc(&stream, stream_bytes));
  CK(cudaMemset(stream, 1, stream_bytes));
  int* done;
  unsigned long long* res;
  CK(cudaMalloc(&done, sizeof(int)));
  CK(cudaMalloc(&res, 16 * sizeof(unsigned long long)));
  CK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));

  std::printf("ns of body A (medians of 5): first = after the runner's spin; between = after N KB of other code;\n"
              "inline = the same code reached in sequence behind 256 KB of other code, after a 20 µs spin or not\n");
  std::printf("%-10s %6s %9s %9s", "stream", "KB/SM", "A first", "A warm");
  const int betweens[] = {0, 2, 4, 6, 8, 12, 16, 32};
  for (int b : betweens) std::printf(" %8s", (std::to_string(b * kSmall * 16 / 1024) + "KB").c_str());
  std::printf(" %11s %11s %9s\n", "inline spin", "inline", "GB/s");
  const std::pair<int, int> settings[] = {{0, 0}, {1, 8}, {2, 5}, {3, 5}, {3, 8}};
  for (const auto& [per_sm, depth] : settings) {
    std::vector<double> first, warm, spin_in, plain_in, gbs;
    std::vector<std::vector<double>> after(std::size(betweens));
    for (size_t bi = 0; bi < std::size(betweens); ++bi)
      for (int rep = 0; rep < 5; ++rep) {
        Params p;
        p.stream = stream;
        p.chunks = int64_t(stream_bytes / kChunk);
        p.depth = depth;
        p.m = 0x9e3779b9u + unsigned(rep);
        p.between = betweens[bi];
        p.done = done;
        p.res = res;
        unsigned long long init[16] = {};
        init[9] = ~0ull;
        CK(cudaMemcpy(res, init, sizeof(init), cudaMemcpyHostToDevice));
        CK(cudaMemset(done, 0, sizeof(int)));
        const unsigned grid = per_sm > 0 ? unsigned(per_sm * sms) : 1u;  // the runner takes a stream slot
        probe_kernel<<<grid, 32, kSmem>>>(p);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        unsigned long long r[16];
        CK(cudaMemcpy(r, res, sizeof(r), cudaMemcpyDeviceToHost));
        first.push_back(double(r[0]));
        warm.push_back(double(r[1]));
        after[bi].push_back(double(r[2]));
        spin_in.push_back(double(r[3]));
        plain_in.push_back(double(r[4]));
        gbs.push_back(per_sm > 0 && r[10] > r[9] ? double(r[8]) / double(r[10] - r[9]) : 0.0);
      }
    char label[32];
    std::snprintf(label, sizeof(label), per_sm ? "%d x %d" : "none", per_sm, depth);
    std::printf("%-10s %6d %9.0f %9.0f", label, per_sm * depth * int(kChunk / 1024), median(first), median(warm));
    for (auto& v : after) std::printf(" %8.0f", median(v));
    std::printf(" %11.0f %11.0f %9.0f\n", median(spin_in), median(plain_in), median(gbs));
  }
  return 0;
}
