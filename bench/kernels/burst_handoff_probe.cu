// bench/kernels/burst_handoff_probe.cu — a standalone lab file: does a kernel's hand-off to its
// programmatic dependent wait for the weight copies that dependent requested before its wait?
//
// In a batch-1 decode step every latency-bound kernel (the add + RMSNorm, RoPE, the attention) lets the
// next decode GEMM launch early; the GEMM's CTAs, placed beside it on the same SMs, request their first
// weight tiles into shared memory and wait (the pre-wait burst). The trace of run AQ3 shows ~1.8 µs from
// the attention's last work to the o projection's release, and ~2 µs after each norm — several times the
// 0.5-0.8 µs that handoff_probe.cu measures for a boundary with no copies in flight. A kernel's completion
// makes its writes visible device-wide; if that flush waits for the SM's memory operations in flight (as a
// release fence does: cluster_barrier_probe.cu), the burst's copies sit on the critical path of every
// boundary. This probe measures it in isolation.
//
// Primary: one block of 128 threads an SM; each lets the dependent launch, spins `work` µs on the global
// timer (no memory traffic), stores one value and records when it was done (an atomic max). Dependent:
// two CTAs an SM of 80 KB shared memory (a few-item decode GEMM's); thread 0 of each requests `n` 8 KB
// tiles of a buffer range not read before (HBM, not L2), waits (griddepcontrol.wait), records its release
// (atomic min / max), then waits for its tiles. Hand-off = first release − last primary block done.
// Modes: the tiles as bulk copies into shared memory (today's pre-wait burst) or as L2 prefetches (no
// data reaches the SM), and the dependent in the default memory synchronization domain or the remote one.
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/burst_handoff_probe.cu -o burst_handoff_probe; run alone on an H100 / H200 (~2 s).
// Not part of the library or of any test: a measurement (bench/RESULTS.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_util.cuh"

namespace {

using rill::probe::global_ns;
constexpr int kReps = 25, kTileBytes = 8192, kCtasPerSm = 2;
constexpr size_t kDependentSmem = 80 * 1024;

struct Times {
  unsigned long long done;                      // the primary's last block
  unsigned long long release_min, release_max;  // the dependent's blocks
};

__global__ void primary_kernel(Times* t, int* sink, unsigned work_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (threadIdx.x == 0) {
    const unsigned long long end = global_ns() + work_ns;
    while (global_ns() < end) {
    }
    sink[blockIdx.x] = int(blockIdx.x);  // a write the completion must make visible
    atomicMax(&t->done, global_ns());
  }
#endif
}

// mode 0: bulk copies into shared memory; 1: L2 prefetches.
__global__ void dependent_kernel(Times* t, const unsigned char* weights, int tiles, int mode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bar;
  if (threadIdx.x == 0) {
    rill::cuda::mbar_init(&bar, 1);
    rill::cuda::mbar_init_fence();
    const unsigned char* mine = weights + size_t(blockIdx.x) * size_t(tiles) * kTileBytes;
    if (mode == 0 && tiles > 0) rill::cuda::mbar_arrive_expect_tx(&bar, unsigned(tiles * kTileBytes));
    for (int i = 0; i < tiles; ++i) {
      if (mode == 0) {
        rill::probe::bulk_load(smem + i * kTileBytes, mine + size_t(i) * kTileBytes, kTileBytes, &bar,
                               rill::cuda::l2_evict_first_policy());
      } else {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(mine + size_t(i) * kTileBytes),
                     "r"(kTileBytes)
                     : "memory");
      }
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned long long now = global_ns();
    atomicMin(&t->release_min, now);
    atomicMax(&t->release_max, now);
    if (mode == 0 && tiles > 0) rill::cuda::mbar_wait(&bar, 0);
  } else {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  const int ctas = kCtasPerSm * sms, max_tiles = int(kDependentSmem / kTileBytes);
  const size_t rep_bytes = size_t(ctas) * max_tiles * kTileBytes, buffer_bytes = rep_bytes * (kReps + 1);
  unsigned char* weights;
  Times* t;
  int* sink;
  CK(cudaMalloc(&weights, buffer_bytes));
  CK(cudaMemset(weights, 1, buffer_bytes));
  CK(cudaMalloc(&t, sizeof(Times)));
  CK(cudaMalloc(&sink, sizeof(int) * size_t(sms)));
  CK(cudaFuncSetAttribute(dependent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kDependentSmem)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("device %s, %d SMs; primary: %d blocks spinning, dependent: %d CTAs of %zu KB, 8 KB tiles from HBM\n",
              prop.name, sms, sms, ctas, kDependentSmem / 1024);
  std::printf("%-34s %5s %5s %12s %12s %12s\n", "mode", "work", "tiles", "handoff us", "spread us", "MB in burst");
  for (int domain = 0; domain < 2; ++domain) {
    for (int mode = 0; mode < 2; ++mode) {
      for (unsigned work : {1000u, 3000u}) {
        for (int tiles : {0, 1, 5, 9}) {
          std::vector<double> handoff, spread;
          for (int rep = 0; rep <= kReps; ++rep) {
            const Times init{0, ~0ull, 0};
            CK(cudaMemcpyAsync(t, &init, sizeof(Times), cudaMemcpyHostToDevice, s));
            primary_kernel<<<sms, 128, 0, s>>>(t, sink, work);
            CK(cudaGetLastError());
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(unsigned(ctas));
            cfg.blockDim = dim3(128);
            cfg.dynamicSmemBytes = kDependentSmem;
            cfg.stream = s;
            cudaLaunchAttribute attr[2] = {};
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            attr[1].id = cudaLaunchAttributeMemSyncDomain;
            attr[1].val.memSyncDomain = domain ? cudaLaunchMemSyncDomainRemote : cudaLaunchMemSyncDomainDefault;
            cfg.attrs = attr;
            cfg.numAttrs = 2;
            // A fresh range each rep: the tiles come from HBM.
            CK(cudaLaunchKernelEx(&cfg, dependent_kernel, t, weights + size_t(rep) * rep_bytes, tiles, mode));
            Times host{};
            CK(cudaMemcpyAsync(&host, t, sizeof(Times), cudaMemcpyDeviceToHost, s));
            CK(cudaStreamSynchronize(s));
            if (rep == 0) continue;  // warm-up
            handoff.push_back((double(host.release_min) - double(host.done)) / 1e3);
            spread.push_back((double(host.release_max) - double(host.release_min)) / 1e3);
          }
          auto med = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
          };
          char label[64];
          std::snprintf(label, sizeof(label), "%s, %s domain", mode ? "L2 prefetch" : "copies to smem",
                        domain ? "remote" : "default");
          std::printf("%-34s %5.1f %5d %12.2f %12.2f %12.1f\n", label, work / 1e3, tiles, med(handoff), med(spread),
                      double(ctas) * tiles * kTileBytes / 1e6);
        }
      }
    }
  }
  return 0;
}
