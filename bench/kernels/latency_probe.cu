// bench/kernels/latency_probe.cu — a standalone lab file: what does one dependent memory round
// trip cost while a weight stream is in flight? A batch-1 decode step is a weight stream (the
// decode GEMMs' bulk tensor copies) interleaved with latency-bound kernels (norms, RoPE, attention)
// whose time is a few dependent round trips each; a persistent decode layer would run those round
// trips *under* the stream. Whether that can pay depends on how much the stream's queued requests
// delay a round trip, which this probe measures.
//
// One launch: block 0 is the chain — one thread making dependent 4-byte loads (ld.global.cg, each
// address from the previous value: a pointer chase), first over a 256 KB buffer that sits in L2,
// then over 1,024 lines of a 1 GB buffer (HBM), then L2 again; the other blocks are the stream —
// each keeps `depth` 8 KB bulk copies (the decode GEMM's stage) in flight from a 4 GB buffer,
// evict-first as the GEMM's weights, until the chain is done. Swept over stream CTAs an SM and
// copies in flight a CTA (0 = no stream), each setting 5 times (medians): ns a hop for both
// chains and the stream's GB/s over the same time. The "chain SM quiet" settings send the stream
// CTAs that land on the chain's SM home at once, so that only other SMs stream: whether a round trip
// is slowed by its own SM's copies in flight or by the GPU's (an SM set aside for latency-bound work).
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/latency_probe.cu -o latency_probe; run alone on an H100 / H200 (~1 s,
// ~5.3 GB). Not part of the library or of any test: a measurement (bench/RESULTS.md, run Z).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "probe_util.cuh"

namespace {

using rill::probe::kChunk;
using rill::probe::median;
using rill::probe::kMaxDepth;
constexpr size_t kSmem = size_t(kMaxDepth) * kChunk + 1024;

struct Params {
  const unsigned char* stream;
  int64_t chunks;     // of kChunk bytes in `stream`
  int depth;          // copies in flight a stream CTA
  const unsigned* l2_chain;
  const unsigned* hbm_chain;
  int l2_hops, hbm_hops;
  int* done;
  int* chain_sm;  // the chain block's SM, published before it starts (-1 until then)
  bool quiet;     // stream CTAs on the chain's SM leave at once: the chain's SM has nothing in flight
  unsigned long long* res;  // [0..2] chain ns (L2, HBM, L2 again), [3] stream bytes, [4] first start, [5] last end
};

__device__ __forceinline__ unsigned load_cg(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Hops of the chain from entry 0; returns the ns they took (the last index kept live in `sink`).
__device__ unsigned long long chase(const unsigned* chain, int hops, unsigned& sink) {
  unsigned idx = 0;
  const unsigned long long t0 = rill::probe::now_ns();
  for (int h = 0; h < hops; ++h) idx = load_cg(chain + idx);
  const unsigned long long t1 = rill::probe::now_ns();
  sink ^= idx;
  return t1 - t0;
}

__global__ void __launch_bounds__(32) probe_kernel(Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kMaxDepth];
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) {  // the chain
    asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p.chain_sm), "r"(int(rill::probe::smid())) : "memory");
    unsigned sink = 0;
    chase(p.l2_chain, p.l2_hops, sink);  // into L2 (the stream's lines are evicted first)
    const unsigned long long t0 = rill::probe::now_ns();
    while (rill::probe::now_ns() - t0 < 30000) {  // 30 µs for the stream to reach its rate
    }
    p.res[0] = chase(p.l2_chain, p.l2_hops, sink);
    p.res[1] = chase(p.hbm_chain, p.hbm_hops, sink);
    p.res[2] = chase(p.l2_chain, p.l2_hops, sink);
    if (sink == 0x9e3779b9u) p.res[6] = sink;
    asm volatile("st.release.gpu.global.s32 [%0], 1;" ::"l"(p.done), "r"(1) : "memory");
    return;
  }
  if (p.depth == 0) return;
  if (p.quiet) {  // wait for the chain to say where it runs (it is resident: one wave)
    int sm = -1;
    while ((sm = rill::probe::load_flag(p.chain_sm)) < 0) {
    }
    if (unsigned(sm) == rill::probe::smid()) return;
  }
  rill::probe::stream_until(p.stream, p.chunks, p.depth, p.done, smem_raw, full, p.res + 3);
#endif
}

// A random cycle through `lines` 128-byte lines of a buffer of `words` u32, starting at line 0
// (entry = the next hop's index).
std::vector<unsigned> make_chain(size_t words, size_t lines, std::mt19937_64& rng) {
  std::vector<unsigned> chain(words, 0);
  std::vector<size_t> pick(words / 32 - 1);
  std::iota(pick.begin(), pick.end(), size_t(1));
  std::shuffle(pick.begin(), pick.end(), rng);
  pick.resize(lines - 1);
  pick.insert(pick.begin(), size_t(0));
  for (size_t i = 0; i < lines; ++i) chain[pick[i] * 32] = unsigned(pick[(i + 1) % lines] * 32);
  return chain;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);

  std::mt19937_64 rng(20261202);
  const size_t l2_words = 64 * 1024, hbm_words = size_t(1) << 28;  // 256 KB, 1 GB
  const std::vector<unsigned> l2_host = make_chain(l2_words, l2_words / 32, rng);
  const std::vector<unsigned> hbm_host = make_chain(hbm_words, 1024, rng);
  unsigned *l2_chain, *hbm_chain;
  CK(cudaMalloc(&l2_chain, l2_words * 4));
  CK(cudaMalloc(&hbm_chain, hbm_words * 4));
  CK(cudaMemcpy(l2_chain, l2_host.data(), l2_words * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(hbm_chain, hbm_host.data(), hbm_words * 4, cudaMemcpyHostToDevice));
  const size_t stream_bytes = size_t(4) << 30;
  unsigned char* stream;
  CK(cudaMalloc(&stream, stream_bytes));
  CK(cudaMemset(stream, 1, stream_bytes));
  int *done, *chain_sm;
  unsigned long long* res;
  CK(cudaMalloc(&done, sizeof(int)));
  CK(cudaMalloc(&chain_sm, sizeof(int)));
  CK(cudaMalloc(&res, 8 * sizeof(unsigned long long)));
  CK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));

  std::printf("%-28s %10s %10s %10s %10s %12s\n", "stream (CTAs/SM x copies)", "KB/SM", "L2 hop ns", "HBM hop ns",
              "L2 again", "stream GB/s");
  // (CTAs an SM, copies a CTA, quiet): quiet settings keep the chain's SM free of stream CTAs — what a
  // latency-bound step would see on SMs set aside from the weight stream.
  const std::tuple<int, int, bool> settings[] = {{0, 0, false}, {1, 1, false}, {1, 2, false}, {1, 4, false},
                                                 {1, 8, false}, {2, 5, false}, {2, 8, false}, {3, 5, false},
                                                 {3, 8, false}, {2, 5, true},  {2, 8, true},  {3, 5, true},
                                                 {3, 8, true}};
  for (const auto& setting : settings) {
    const int per_sm = std::get<0>(setting), depth = std::get<1>(setting);
    const bool quiet = std::get<2>(setting);
    std::vector<double> l2, hbm, l2b, gbs;
    for (int rep = 0; rep < 5; ++rep) {
      Params p;
      p.stream = stream;
      p.chunks = int64_t(stream_bytes / kChunk);
      p.depth = depth;
      p.l2_chain = l2_chain;
      p.hbm_chain = hbm_chain;
      p.l2_hops = 2048;
      p.hbm_hops = 1024;
      p.done = done;
      p.chain_sm = chain_sm;
      p.quiet = quiet;
      p.res = res;
      const unsigned long long init[8] = {0, 0, 0, 0, ~0ull, 0, 0, 0};
      CK(cudaMemcpy(res, init, sizeof(init), cudaMemcpyHostToDevice));
      CK(cudaMemset(done, 0, sizeof(int)));
      CK(cudaMemset(chain_sm, 0xff, sizeof(int)));
      CK(cudaMemset(stream, rep, size_t(256) << 20));  // the chains' lines out of L2
      // The chain takes one of the stream's slots, so that every block is resident at once.
      const unsigned grid = per_sm > 0 ? unsigned(per_sm * sms) : 1u;
      probe_kernel<<<grid, 32, kSmem>>>(p);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      unsigned long long r[8];
      CK(cudaMemcpy(r, res, sizeof(r), cudaMemcpyDeviceToHost));
      l2.push_back(double(r[0]) / p.l2_hops);
      hbm.push_back(double(r[1]) / p.hbm_hops);
      l2b.push_back(double(r[2]) / p.l2_hops);
      gbs.push_back(per_sm > 0 && r[5] > r[4] ? double(r[3]) / double(r[5] - r[4]) : 0.0);
    }
    char label[64];
    std::snprintf(label, sizeof(label), per_sm ? "%d x %d%s" : "none", per_sm, depth, quiet ? ", chain SM quiet" : "");
    std::printf("%-28s %10d %10.0f %10.0f %10.0f %12.0f\n", label, per_sm * depth * int(kChunk / 1024), median(l2),
                median(hbm), median(l2b), median(gbs));
  }
  return 0;
}
