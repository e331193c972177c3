// bench/kernels/read_probe.cu — a standalone lab file: how fast can a batch-1 decode GEMM read its
// weight from HBM, by access pattern? Read-only kernels over a bf16 matrix [N][K] (K = 4096), each
// timed with the L2 flushed first (median of 15), in GB/s next to the device-to-device copy rate
// measured in the same run:
//   contig      — every warp reads 512 contiguous bytes an instruction, 4 loads in flight a lane
//   rows<R>     — the streaming decode GEMM's pattern: a warp owns 8 rows; an instruction reads
//                 64 bytes of each of the 8; a batch is R bytes a row; the next batch is requested
//                 before the current one is consumed (two in flight)
//   line<R>     — the same bytes, but each instruction reads 512 contiguous bytes of one row
//   bulk<R,S>   — a warp owns 8 rows; 8 lanes each issue one bulk copy (R bytes of its row) into
//                 a per-warp ring of S shared-memory stages completing on an mbarrier
// Built and run by tools/gpu_run.sh (mode decode, RILL_READ_PROBE=1): nvcc -O3 -arch=sm_90a -I src. Its loads
// carry the evict-first L2 policy, as the library's weight streams do.
// Not part of the library or of any test: a measurement (bench/RESULTS.md, run G).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cuda/device_utils.cuh"
#include "probe_util.cuh"
#include "kernels/cuda/mbarrier.cuh"

namespace {

using rill::probe::median_us;

__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Keeps the loads alive: a value no random matrix produces.
__device__ __forceinline__ void sink(uint32_t v, uint32_t* out) {
  if (v == 0x9e3779b9u) out[threadIdx.x] = v;
}

__global__ void __launch_bounds__(256) contig_kernel(const uint4* p, int64_t n16, uint32_t* out) {
  uint32_t acc = 0;
  const uint64_t policy = rill::cuda::l2_evict_first_policy();  // as the library's weight streams
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      v[u] = i + u * stride < n16 ? rill::cuda::load_stream16(p + i + u * stride, policy) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= fold(v[u]);
  }
  sink(acc, out);
}

// kLine false: lane (g, t) reads row g at byte 64 i + 16 t (8 rows × 64 B an instruction);
// kLine true: instruction i reads row i % 8, 512 contiguous bytes at (i / 8) · 512.
template <int kRunBytes, bool kLine>
__global__ void __launch_bounds__(256, 2) rows_kernel(const char* w, int64_t n, int64_t row_bytes, uint32_t* out) {
  constexpr int kLoads = kRunBytes * 8 / 512;  // 16-byte loads a lane per batch
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row0 = (int64_t(blockIdx.x) * 8 + warp) * 8;
  if (row0 >= n) return;
  auto addr = [&](int64_t b, int i) -> const char* {
    if (kLine) return w + (row0 + i % 8) * row_bytes + b + (i / 8) * 512 + 16 * lane;
    return w + (row0 + g) * row_bytes + b + 64 * i + 16 * t;
  };
  const uint64_t policy = rill::cuda::l2_evict_first_policy();  // as the library's weight streams
  uint4 cur[kLoads], nxt[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) cur[i] = rill::cuda::load_stream16(addr(0, i), policy);
  uint32_t acc = 0;
  for (int64_t b = 0; b < row_bytes; b += kRunBytes) {
    const bool more = b + kRunBytes < row_bytes;
    if (more) {
#pragma unroll
      for (int i = 0; i < kLoads; ++i) nxt[i] = rill::cuda::load_stream16(addr(b + kRunBytes, i), policy);
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) acc ^= fold(cur[i]);
    if (more) {
#pragma unroll
      for (int i = 0; i < kLoads; ++i) cur[i] = nxt[i];
    }
  }
  sink(acc, out);
}

__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   rill::cuda::smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(rill::cuda::smem_addr(bar))
               : "memory");
}

// kWarps warps a CTA, each with its own ring of kStages stages of 8 rows × kRunBytes.
template <int kRunBytes, int kStages, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) bulk_kernel(const char* w, int64_t n, int64_t row_bytes, uint32_t* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t bars[kWarps][kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* ring = smem + size_t(warp) * kStages * 8 * kRunBytes;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarps + warp) * 8;
  if (lane == 0)
    for (int s = 0; s < kStages; ++s) rill::cuda::mbar_init(&bars[warp][s], 1);
  rill::cuda::mbar_init_fence();
  __syncwarp();
  if (row0 >= n) return;
  const int64_t batches = row_bytes / kRunBytes;
  auto issue = [&](int64_t b) {
    const int s = int(b % kStages);
    if (lane == 0) rill::cuda::mbar_arrive_expect_tx(&bars[warp][s], 8 * kRunBytes);
    __syncwarp();
    if (lane < 8) bulk_g2s(ring + (s * 8 + lane) * kRunBytes, w + (row0 + lane) * row_bytes + b * kRunBytes, kRunBytes,
                           &bars[warp][s]);
  };
  for (int64_t b = 0; b < kStages && b < batches; ++b) issue(b);
  uint32_t acc = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const int s = int(b % kStages);
    rill::cuda::mbar_wait(&bars[warp][s], unsigned((b / kStages) & 1));
    const uint4* p = reinterpret_cast<const uint4*>(ring + s * 8 * kRunBytes);
    for (int i = lane; i < 8 * kRunBytes / 16; i += 32) acc ^= fold(p[i]);
    __syncwarp();
    if (b + kStages < batches) issue(b + kStages);
  }
  sink(acc, out);
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t K = 4096, row_bytes = K * 2, max_rows = 151936;
  const size_t wbytes = size_t(max_rows) * row_bytes;
  char* w = nullptr;
  uint32_t* out = nullptr;
  void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CK(cudaMalloc(&w, wbytes));
  CK(cudaMalloc(&out, 4096));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMemset(w, 0x5a, wbytes));
  // Copy ceiling: 2 GiB device to device (read + write bytes).
  {
    char* a = nullptr;
    char* b = nullptr;
    const size_t cb = size_t(1) << 30;
    CK(cudaMalloc(&a, cb));
    CK(cudaMalloc(&b, cb));
    double us = median_us([&] { CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice)); }, flush, flush_bytes);
    std::printf("copy 1 GiB D2D: %.0f GB/s (read+write)\n", 2.0 * cb / us / 1e3);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  std::printf("| rows (N x 4096) | MB | pattern | us | GB/s |\n|---|---:|---|---:|---:|\n");
  for (int64_t n : {int64_t(24576), max_rows}) {
    const double mb = double(n) * row_bytes / 1e6;
    auto row = [&](const char* name, double us) {
      std::printf("| %lld | %.1f | %s | %.1f | %.0f |\n", (long long)n, mb, name, us, double(n) * row_bytes / us / 1e3);
    };
    const int64_t n16 = n * row_bytes / 16;
    row("contig", median_us([&] { contig_kernel<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(w), n16, out); },
                            flush, flush_bytes));
    const unsigned g8 = unsigned((n + 63) / 64);
    row("rows<256>",
        median_us([&] { rows_kernel<256, false><<<g8, 256>>>(w, n, row_bytes, out); }, flush, flush_bytes));
    row("rows<512>",
        median_us([&] { rows_kernel<512, false><<<g8, 256>>>(w, n, row_bytes, out); }, flush, flush_bytes));
    row("line<512>", median_us([&] { rows_kernel<512, true><<<g8, 256>>>(w, n, row_bytes, out); }, flush, flush_bytes));
    row("line<1024>",
        median_us([&] { rows_kernel<1024, true><<<g8, 256>>>(w, n, row_bytes, out); }, flush, flush_bytes));
    auto bulk = [&](const char* name, auto kernel, int warps, int run, int stages) {
      const size_t smem = size_t(warps) * stages * 8 * run;
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      const unsigned grid = unsigned((n + 8 * warps - 1) / (8 * warps));
      row(name, median_us([&] { kernel<<<grid, 32 * warps, smem>>>(w, n, row_bytes, out); }, flush, flush_bytes));
    };
    bulk("bulk<1024,4> 4 warps", bulk_kernel<1024, 4, 4>, 4, 1024, 4);
    bulk("bulk<2048,3> 4 warps", bulk_kernel<2048, 3, 4>, 4, 2048, 3);
    bulk("bulk<512,4> 8 warps", bulk_kernel<512, 4, 8>, 8, 512, 4);
    bulk("bulk<1024,2> 8 warps", bulk_kernel<1024, 2, 8>, 8, 1024, 2);
    bulk("bulk<1024,3> 2 warps", bulk_kernel<1024, 3, 2>, 2, 1024, 3);
  }
  return 0;
}
