// bench/kernels/cluster_barrier_probe.cu — a standalone lab file: what does the decode cluster
// attention's barrier cost? A batch-1 step at 512 keys runs the attention as 8 clusters of 16 blocks
// (attention_decode_cluster_kernel): each block computes one span into its shared memory, the cluster
// barrier, then each block folds a share of the outputs over every block's partial (distributed
// shared memory). Run AE's trace put the barrier's release 1.1 µs after the last block's span ended —
// long for a barrier — so this probe times the barrier alone, and the alternatives a kernel could use:
//   sync     cooperative_groups' cluster.sync(): barrier.cluster.arrive (release) + wait (acquire), every
//            thread (what the kernel does);
//   relaxed  barrier.cluster.arrive.relaxed + wait: no memory ordering (not enough for the kernel: a
//            floor for the hardware barrier);
//   mbar     point to point: after the block's own barrier, threads 0..C-1 of each block arrive
//            (release, cluster scope) on an mbarrier in block j's shared memory, every thread waits
//            on its own block's (acquire) — one fresh mbarrier a round, as a kernel would use it once;
//   push     st.async of the values into every block's shared memory on its mbarrier (no fence);
//   init     thread 0 initializes an mbarrier and issues fence.mbarrier_init (what every decode GEMM
//            CTA does at its start), or a CTA-scope proxy fence, then the relaxed barrier.
// Each round a block writes 128 floats into its shared memory, passes the barrier and (with "+ read")
// reads one float of every block of the cluster (the fold's one distributed round trip), the next
// round's value depending on what it read. 8 clusters of C blocks (C = 2, 4, 8, 16), 128 threads a
// block, 64 rounds a launch; ns a round = block 0's time over the rounds / 64, the median of 21
// launches. No other work on the GPU: the barrier's own cost.
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/cluster_barrier_probe.cu -o cluster_barrier_probe; run alone on an H100 / H200
// (< 1 s). Not part of the library or of any test: a measurement (bench/RESULTS.md, run AE).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_util.cuh"

namespace {

namespace cg = cooperative_groups;
using rill::probe::median;

constexpr int kThreads = 128, kRounds = 64, kClusters = 8;

enum Mode { kSync, kRelaxed, kFenceRelaxed, kMbar, kPush, kInitFence, kInitProxyFence };

__device__ __forceinline__ float ld_remote(const float* local, unsigned rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(rill::cuda::smem_addr(local)),
               "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

__device__ __forceinline__ void mbar_arrive_remote(uint64_t* local_bar, unsigned rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(rill::cuda::smem_addr(local_bar)),
               "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra wait;\n"
      "}\n" ::"r"(rill::cuda::smem_addr(bar))
      : "memory");
}

// 4 bytes into block `rank`'s shared memory at the address of `local` there, completing on its mbarrier
// at the address of `local_bar` there (st.async: no fence; the receiver's wait on the mbarrier orders it).
__device__ __forceinline__ void push_remote(float* local, uint64_t* local_bar, unsigned rank, float v) {
  uint32_t at, bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(at) : "r"(rill::cuda::smem_addr(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar) : "r"(rill::cuda::smem_addr(local_bar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(at),
               "r"(__float_as_uint(v)), "r"(bar)
               : "memory");
}

template <Mode kMode, bool kRead>
__global__ void __launch_bounds__(kThreads) barrier_kernel(unsigned long long* ns, float* sink) {
  __shared__ float slot[kThreads];
  __shared__ __align__(8) uint64_t bars[kRounds];
  __shared__ float recv[16][kThreads];  // kPush: block j's values at recv[j]
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned n = cluster.num_blocks(), rank = cluster.block_rank();
  if constexpr (kMode == kMbar) {
    for (int i = threadIdx.x; i < kRounds; i += kThreads) rill::cuda::mbar_init(&bars[i], n);
    rill::cuda::mbar_init_fence();
  }
  if constexpr (kMode == kPush) {  // one arrival (with the bytes expected) and n blocks' pushes a round
    for (int i = threadIdx.x; i < kRounds; i += kThreads) {
      rill::cuda::mbar_init(&bars[i], 1);
      rill::cuda::mbar_arrive_expect_tx(&bars[i], n * kThreads * 4u);
    }
    rill::cuda::mbar_init_fence();
  }
  cluster.sync();  // every block's mbarriers are initialized before any arrives
  float v = float(threadIdx.x + rank);
  const unsigned long long t0 = rill::probe::global_ns();
  for (int r = 0; r < kRounds; ++r) {
    slot[threadIdx.x] = v;
    if constexpr (kMode == kSync) {
      cluster.sync();
    } else if constexpr (kMode == kRelaxed) {
      asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    } else if constexpr (kMode == kFenceRelaxed) {
      asm volatile("fence.acq_rel.cluster;" ::: "memory");
      asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    } else if constexpr (kMode == kInitFence || kMode == kInitProxyFence) {
      // What a decode GEMM CTA does at its start: thread 0 initializes an mbarrier and fences (the
      // cluster-scope init fence, or a CTA-scope proxy fence), then the relaxed barrier of "relaxed".
      if (threadIdx.x == 0) {
        rill::cuda::mbar_init(&bars[r], 1);
        if constexpr (kMode == kInitFence) rill::cuda::mbar_init_fence();
        else rill::cuda::fence_proxy_async_shared();
      }
      asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    } else if constexpr (kMode == kPush) {
      for (unsigned j = 0; j < n; ++j) push_remote(&recv[rank][threadIdx.x], &bars[r], j, v);
      rill::cuda::mbar_wait(&bars[r], 0);
    } else {
      __syncthreads();  // the block's writes, then its arrivals (release: they cover them)
      if (threadIdx.x < n) mbar_arrive_remote(&bars[r], threadIdx.x);
      mbar_wait_cluster(&bars[r]);
    }
    if constexpr (kMode == kPush) {  // the values are here already: a local read
      float s = 0.f;
      for (unsigned j = 0; j < n; ++j) s += recv[j][threadIdx.x];
      v = s * 0.5f;
    } else if constexpr (kRead) {
      float s = 0.f;
      for (unsigned j = 0; j < n; ++j) s += ld_remote(&slot[threadIdx.x], j);
      v = s * 0.5f;
    }
    // The next round's write must not overtake another block's read of this one: a second barrier
    // (what the kernel's exit barrier is), kept out of the timed path's meaning by timing both.
    cluster.sync();
  }
  const unsigned long long t1 = rill::probe::global_ns();
  if (blockIdx.x == 0 && threadIdx.x == 0) *ns = t1 - t0;
  if (v == 12345.f) *sink = v;
}

// The weight stream beside the clusters (probe_util's stream_until; block 0 idle): kStreamCtas CTAs an SM,
// kMaxDepth 8 KB copies in flight each (~128 KB an SM, the decode GEMMs' 120-192 KB).
constexpr int kStreamCtas = 2;
constexpr size_t kStreamSmem = size_t(rill::probe::kMaxDepth) * rill::probe::kChunk + 1024;
__global__ void stream_kernel(const unsigned char* stream, int64_t chunks, const int* done, unsigned long long* res) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[rill::probe::kMaxDepth];
  if (blockIdx.x == 0 || threadIdx.x != 0) return;
  rill::probe::stream_until(stream, chunks, rill::probe::kMaxDepth, done, smem_raw, full, res);
}

struct Load {
  const unsigned char* stream = nullptr;
  int64_t chunks = 0;
  int* done = nullptr;
  unsigned long long* res = nullptr;
  cudaStream_t side = nullptr, main = nullptr;
  int sms = 0;
};

template <Mode kMode, bool kRead>
double time_rounds(int c, unsigned long long* d_ns, float* d_sink, const Load* load = nullptr) {
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = rill::probe::cluster_launch(kClusters, c, kThreads, 0, attr);
  auto kernel = barrier_kernel<kMode, kRead>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::vector<double> t;
  for (int i = 0; i < 21; ++i) {
    if (load) {  // the stream first, on its own stream; the clusters beside it; then the stream stops
      CK(cudaMemsetAsync(load->done, 0, sizeof(int), load->side));
      stream_kernel<<<kStreamCtas * load->sms + 1, 32, kStreamSmem, load->side>>>(load->stream, load->chunks,
                                                                                    load->done, load->res);
      CK(cudaGetLastError());
      CK(cudaStreamSynchronize(load->main));
      cfg.stream = load->main;
      // (give the stream a moment to fill: a short spin on the host)
      const auto t = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t < std::chrono::microseconds(200)) {
      }
    }
    CK(cudaLaunchKernelEx(&cfg, kernel, d_ns, d_sink));
    if (load) {
      CK(cudaStreamSynchronize(load->main));
      const int one = 1;
      CK(cudaMemcpyAsync(load->done, &one, sizeof(int), cudaMemcpyHostToDevice, load->main));
    }
    CK(cudaDeviceSynchronize());
    unsigned long long ns = 0;
    CK(cudaMemcpy(&ns, d_ns, sizeof(ns), cudaMemcpyDeviceToHost));
    t.push_back(double(ns) / kRounds);
  }
  return median(t);
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  const int sms = rill::probe::device_sms(prop);
  std::printf("cluster barrier probe: %s, %d SMs; %d clusters of C blocks x %d threads, %d rounds a launch\n",
              prop.name, sms, kClusters, kThreads, kRounds);
  unsigned long long* d_ns = nullptr;
  float* d_sink = nullptr;
  CK(cudaMalloc(&d_ns, sizeof(unsigned long long)));
  CK(cudaMalloc(&d_sink, sizeof(float)));
  // A round is the barrier under test, (the read,) then a cluster.sync so that the next round's write
  // cannot overtake another block's read: the barrier's own ns = the round's less half a sync round.
  std::printf("ns a round: the barrier under test (+ read), then a cluster.sync; [its own: less half a sync round]\n");
  Load load;
  load.sms = sms;
  const size_t stream_bytes = size_t(4) << 30;
  unsigned char* d_stream = nullptr;
  CK(cudaMalloc(&d_stream, stream_bytes));
  CK(cudaMemset(d_stream, 1, stream_bytes));
  load.stream = d_stream;
  load.chunks = int64_t(stream_bytes / rill::probe::kChunk);
  CK(cudaMalloc(&load.done, sizeof(int)));
  CK(cudaMalloc(&load.res, 3 * sizeof(unsigned long long)));
  CK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kStreamSmem)));
  CK(cudaStreamCreateWithFlags(&load.side, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&load.main, cudaStreamNonBlocking));
  for (const Load* l : {static_cast<const Load*>(nullptr), static_cast<const Load*>(&load)}) {
    std::printf("%s\n", l ? "beside a weight stream (2 CTAs an SM, 8 x 8 KB bulk copies in flight each)" : "GPU idle");
    std::printf("%4s %16s %16s %16s %16s %18s %18s %18s %18s %18s\n", "C", "sync", "relaxed", "fence+relaxed",
                "mbar", "sync + read", "mbar + read", "push (st.async)", "init+init fence", "init+proxy fence");
    for (int c : {2, 4, 8, 16}) {
      const double s = time_rounds<kSync, false>(c, d_ns, d_sink, l);
      const double r = time_rounds<kRelaxed, false>(c, d_ns, d_sink, l);
      const double f = time_rounds<kFenceRelaxed, false>(c, d_ns, d_sink, l);
      const double m = time_rounds<kMbar, false>(c, d_ns, d_sink, l);
      const double sr = time_rounds<kSync, true>(c, d_ns, d_sink, l);
      const double mr = time_rounds<kMbar, true>(c, d_ns, d_sink, l);
      const double p = time_rounds<kPush, true>(c, d_ns, d_sink, l);
      const double fi = time_rounds<kInitFence, false>(c, d_ns, d_sink, l);
      const double fp = time_rounds<kInitProxyFence, false>(c, d_ns, d_sink, l);
      const double h = s / 2;
      std::printf("%4d %7.0f [%5.0f] %7.0f [%5.0f] %7.0f [%5.0f] %7.0f [%5.0f] %9.0f [%5.0f] %9.0f [%5.0f]"
                  " %9.0f [%5.0f] %9.0f [%5.0f] %9.0f [%5.0f]\n",
                  c, s, h, r, r - h, f, f - h, m, m - h, sr, sr - h, mr, mr - h, p, p - h, fi, fi - h, fp, fp - h);
    }
  }
  CK(cudaFree(d_stream));
  CK(cudaFree(load.done));
  CK(cudaFree(load.res));
  CK(cudaFree(d_ns));
  CK(cudaFree(d_sink));
  return 0;
}
