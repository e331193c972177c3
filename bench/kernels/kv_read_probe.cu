// bench/kernels/kv_read_probe.cu — a standalone lab file: how fast do the decode attention's K/V reads come
// from HBM, by cache layout and by how many tiles a block keeps in flight? Batched decode reads its K/V at
// ~2.5-2.6 TB/s on an H100, ~80% of the die's read stream, where the weights stream at ~95% of it, and at 2,048
// keys whichever split schedule runs (bench/RESULTS.md run BH: the fold kernel and splits of 3, 5 and 10 blocks a
// (row, kv head) all decode batch 64 at 4,516-4,523 tok/s; BG1: the fold kernel's 151 MB a layer in 59.5 µs at
// 512 keys). This probe separates the two suspects:
//   - the layout: the cache is [slot][kv head][128] bf16, so a (row, kv head) block reads 256 bytes of every
//     2 KB slot row, and the DRAM pages' other bytes belong to the other kv heads' blocks, read whenever those
//     get there; against [block][kv head][slot in block][128] (a kv head's 16 slots one 4 KB run) and against
//     one contiguous run a (row, kv head);
//   - the depth: the walk keeps one tile (64 keys of K and V, 32 KB) in flight a block (attention_decode.cuh),
//     against two and three.
// Each block (128 threads, one (row, kv head), the attention's grid order: kv heads of a row adjacent) walks its
// row's tiles in order with cp.async 16-byte copies (no L2 policy: see issue() below), waiting for each tile and
// then for `work` ns (the tile's arithmetic, a busy wait: 0 to 4.5 µs), over a block table that is the
// identity or a random permutation of the pool's blocks (a pool after churn). GB/s of K/V bytes, the L2
// flushed before each launch (median of 9), next to the device-to-device copy rate.
// Built and run by tools/gpu_run.sh (mode probes, RILL_PROBES=kv_read): nvcc -O3 -arch=sm_90a -I src.
// Not part of the library or of any test: a measurement.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma.cuh"
#include "probe_util.cuh"

namespace {

using rill::probe::median_us;

constexpr int kD = 128, kHeads = 8, kBlockSize = 16, kTileKeys = 64, kThreads = 128;
constexpr int kTileBytes = kTileKeys * kD * 2;  // one kv head's 64 keys of K (or V): 16 KB
constexpr int kMaxDepth = 3;

enum Layout : int { kHeadMajor = 0, kHeadBlocked = 1, kContig = 2 };
const char* const kLayoutNames[] = {"[slot][head][d] (the library's)", "[block][head][slot][d]",
                                    "contiguous a (row, head)"};

struct Args {
  const char* k;
  const char* v;
  const int32_t* table;  // [rows][blocks_per_row] physical block of each logical block
  int blocks_per_row, tiles, layout, depth;
  unsigned work_ns;
  uint32_t* sink;
};

// Byte offset of key `key` of (row, head) in a cache of the layout.
__device__ __forceinline__ int64_t key_offset(const Args& a, int row, int head, int key) {
  const int64_t row_bytes = int64_t(kD) * 2;
  if (a.layout == kContig) return ((int64_t(row) * kHeads + head) * a.tiles * kTileKeys + key) * row_bytes;
  const int64_t block = a.table[int64_t(row) * a.blocks_per_row + key / kBlockSize];
  const int s = key % kBlockSize;
  if (a.layout == kHeadMajor) return ((block * kBlockSize + s) * kHeads + head) * row_bytes;
  return ((block * kHeads + head) * kBlockSize + s) * row_bytes;  // kHeadBlocked
}

__global__ void __launch_bounds__(kThreads) walk_kernel(const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];  // depth × (K tile, V tile)
  const int head = blockIdx.x, row = blockIdx.y;
  const uint64_t policy = rill::cuda::l2_evict_first_policy();
  // Thread t copies 16 bytes of keys t / 16 + 8 i (i < 8): 16 threads a 256-byte key row, as TileSlots.
  const int c = int(threadIdx.x) % 16, r0 = int(threadIdx.x) / 16;
  auto issue = [&](int tile) {
    unsigned char* st = smem + (tile % a.depth) * 2 * kTileBytes;
#pragma unroll
    for (int i = 0; i < kTileKeys / 8; ++i) {
      const int key = tile * kTileKeys + r0 + 8 * i;
      const int64_t off = key_offset(a, row, head, key) + c * 16;
      // The hinted copy stops this probe with an illegal instruction on an H100 (bench/RESULTS.md run BI: ptxas
      // made it LDGSTS...ZFILL, with the size operand a literal 16 or this runtime test alike; the library's
      // hinted copies compile to a predicated LDGSTS without .ZFILL and run). So the copies carry no L2 policy
      // unless KV_PROBE_HINT is defined — what run BI measured (the data is read once either way, the L2
      // flushed before a launch).
      const bool ok = off >= 0;
#if !defined(KV_PROBE_HINT)
      (void)policy;
      rill::cuda::cp_async16(st + (r0 + 8 * i) * 256 + c * 16, a.k + off, ok);
      rill::cuda::cp_async16(st + kTileBytes + (r0 + 8 * i) * 256 + c * 16, a.v + off, ok);
#else
      rill::cuda::cp_async16(st + (r0 + 8 * i) * 256 + c * 16, a.k + off, ok, policy);
      rill::cuda::cp_async16(st + kTileBytes + (r0 + 8 * i) * 256 + c * 16, a.v + off, ok, policy);
#endif
    }
    rill::cuda::cp_async_commit();
  };
  for (int t = 0; t < a.depth - 1 && t < a.tiles; ++t) issue(t);
  uint32_t acc = 0;
  for (int t = 0; t < a.tiles; ++t) {
    if (t + a.depth - 1 < a.tiles) issue(t + a.depth - 1);
    else rill::cuda::cp_async_commit();  // an empty group keeps the count
    // Tile t's group: every iteration commits one group, so at most depth − 1 may still be pending.
    if (a.depth == 1) rill::cuda::cp_async_wait<0>();
    else if (a.depth == 2) rill::cuda::cp_async_wait<1>();
    else rill::cuda::cp_async_wait<2>();
    __syncthreads();
    const unsigned char* st = smem + (t % a.depth) * 2 * kTileBytes;
    const uint32_t* kw = reinterpret_cast<const uint32_t*>(st);
    const uint32_t* vw = reinterpret_cast<const uint32_t*>(st + kTileBytes);
    acc ^= kw[threadIdx.x] ^ vw[threadIdx.x];
    if (a.work_ns) {
      const unsigned long long t0 = rill::probe::now_ns();
      while (rill::probe::now_ns() - t0 < a.work_ns) {
      }
    }
    __syncthreads();  // the stage is free for the copy issued next round
  }
  if (acc == 0x9e3779b9u) a.sink[threadIdx.x] = acc;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  const int rows = 64, keys = 2048, tiles = keys / kTileKeys, blocks_per_row = keys / kBlockSize;
  const int64_t pool_blocks = int64_t(rows) * blocks_per_row;
  const size_t cache_bytes = size_t(pool_blocks) * kBlockSize * kHeads * kD * 2;  // 268 MB each of K and V
  char *k = nullptr, *v = nullptr, *flush = nullptr;
  int32_t* table = nullptr;
  uint32_t* sink = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CK(cudaMalloc(&k, cache_bytes));
  CK(cudaMalloc(&v, cache_bytes));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&table, pool_blocks * sizeof(int32_t)));
  CK(cudaMalloc(&sink, kThreads * sizeof(uint32_t)));
  CK(cudaMemset(k, 1, cache_bytes));
  CK(cudaMemset(v, 2, cache_bytes));

  const double copy_us = median_us([&] { CK(cudaMemcpyAsync(k, v, cache_bytes, cudaMemcpyDeviceToDevice)); },
                                   flush, flush_bytes, 9);
  std::printf("copy rate: %.0f GB/s read + write (%zu MB)\n", 2.0 * cache_bytes / copy_us / 1e3, cache_bytes >> 20);
  std::printf("%d rows x %d kv heads x %d keys, K and V: %.0f MB a launch; %d blocks of %d threads\n", rows, kHeads,
              keys, 2.0 * cache_bytes / 1e6, rows * kHeads, kThreads);

  std::vector<int32_t> ident(pool_blocks), shuffled(pool_blocks);
  std::iota(ident.begin(), ident.end(), 0);
  shuffled = ident;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  std::printf("%-34s %-9s %5s %9s %8s %10s\n", "layout", "table", "depth", "blocks/SM", "work ns", "GB/s");
  for (int layout : {kHeadMajor, kHeadBlocked, kContig}) {
    for (int shuffle = 0; shuffle < (layout == kContig ? 1 : 2); ++shuffle) {
      CK(cudaMemcpy(table, shuffle ? shuffled.data() : ident.data(), pool_blocks * sizeof(int32_t),
                    cudaMemcpyHostToDevice));
      for (int depth = 1; depth <= kMaxDepth; ++depth) {
        const size_t smem = size_t(depth) * 2 * kTileBytes;
        CK(cudaFuncSetAttribute(walk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        int resident = 0;  // (depth 3: fewer than the 512 blocks fit at once — a second wave)
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, walk_kernel, kThreads, smem));
        const char* table_name = layout == kContig ? "-" : shuffle ? "shuffled" : "identity";
        for (unsigned work : {0u, 1500u, 3000u, 4500u}) {
          if (work > 1500u && (layout != kHeadMajor || shuffle)) continue;  // the sweep on the library's layout
          const Args a{k, v, table, blocks_per_row, tiles, layout, depth, work, sink};
          const double us = median_us([&] { walk_kernel<<<dim3(kHeads, rows), kThreads, smem>>>(a); }, flush,
                                      flush_bytes, 9);
          std::printf("%-34s %-9s %5d %9d %8u %10.0f\n", kLayoutNames[layout], table_name, depth, resident, work,
                      2.0 * cache_bytes / us / 1e3);
        }
      }
    }
  }
  CK(cudaFree(k));
  CK(cudaFree(v));
  CK(cudaFree(flush));
  CK(cudaFree(table));
  CK(cudaFree(sink));
  return 0;
}
