// bench/kernels/tile_stream_probe.cu — a standalone lab file: does the layout of a weight in HBM
// change how fast the batch-1 decode GEMM's weight stream runs? The decode GEMM (configuration 18,
// kernels/cuda/gemm_wgmma_decode.cu) streams 64-row × 64-k tiles of a row-major [N, K] bf16 matrix
// by 2-D tensor copies into 8 stages a CTA, three CTAs an SM: each tile is 64 runs of 128 bytes,
// 2·K bytes apart. Here the same schedule (persistent CTAs, items = (column tile, split range),
// item b, b + grid, ...; a producer thread keeping the stages full; a consumer releasing each stage
// as it lands — no arithmetic) reads the same bytes from three layouts:
//   rowmajor — [N, K], 2-D tensor copies of {64 k, 64 rows} boxes, 128-byte swizzle (today);
//   tiled    — each 64 × 64 tile stored as 8 contiguous KB (tile (n, k) at (n · K/64 + k) · 8 KB),
//              2-D tensor copies of {64, 64} boxes of that buffer viewed as [N · K/64, 64]: the
//              same bytes land in shared memory as from rowmajor;
//   bulk     — the tiled buffer, one 8 KB bulk copy a stage (no swizzle: a timing reference).
// Each shape is timed alone with the L2 flushed (median of 15), then a chain of 8 layers' four
// projections (the decode step's order and shapes, split as gemm_split splits them) launched back
// to back, with programmatic launches, and as one persistent grid with a device-counter barrier
// between projections, in GB/s, next to the device-to-device copy rate measured in the same run;
// also the row-major maps' L2 promotion (none, 64, 128, 256 bytes), and each projection's tail: when
// the CTAs of one launch finish, with its items static or in finer ranges taken from a counter.
// Grouped issue (run AO's question): the same schedule with the producer waiting until kGroup stages are
// free and then requesting them back to back, so that each of a tile's 64 rows is asked for as one run of
// kGroup · 128 bytes at once instead of 128 bytes at a time (the decode GEMM refills one stage as it is
// consumed). A sweep of the whole matrix in address order streams ~4.55-4.65 TB/s (latency_probe.cu's
// stream) where this schedule streams ~3.8-4.1: is the gap the DRAM's row locality?
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/tile_stream_probe.cu -o tile_stream_probe; run alone on an H100 / H200 (~2 s,
// ~6 GB). Not part of the library or of any test: a measurement (bench/RESULTS.md, run Y).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "kernels/cuda/device_utils.cuh"
#include "probe_util.cuh"
#include "kernels/cuda/mbarrier.cuh"

namespace {

using rill::probe::bulk_load;
using rill::probe::median_us;

constexpr int kStages = 8;
constexpr int kTileBytes = 64 * 64 * 2;
constexpr size_t kSmem = size_t(kStages) * (kTileBytes + 1024) + 1024;  // the GEMM's: three CTAs an SM

// kSweep (a reference, not a layout): 8 KB bulk copies of the matrix in address order across the grid — a
// CTA's n-th copy is chunk blockIdx + n · grid — the order in which latency_probe.cu's stream reads.
// kBulkK: 8 KB tiles as bulk, but stored k-major — tile (n, k) at (k · N/64 + n) · 8 KB — so that CTAs
// walking their column tiles' k in step read neighbouring tiles at any moment, as the sweep does.
enum Layout { kRowMajor = 0, kTiled = 1, kBulk = 2, kSweep = 3, kBulkK = 4 };

struct Job {
  const char* w;
  int tiles, ktiles, tiles_per_split, splits;
};

__device__ __forceinline__ void grid_dep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void grid_dep_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// The 1024-aligned stages and their barriers (thread 0 initialises them; every thread then syncs).
__device__ __forceinline__ unsigned char* init_stages(unsigned char* smem_raw, uint64_t* full, uint64_t* empty) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) rill::cuda::mbar_init(&full[s], 1), rill::cuda::mbar_init(&empty[s], 1);
    rill::cuda::mbar_init_fence();
  }
  __syncthreads();
  return smem_raw + ((1024 - (rill::cuda::smem_addr(smem_raw) & 1023u)) & 1023u);
}

// Work item `item` of a job: its column tile and k tiles [kb, ke).
__device__ __forceinline__ void item_tiles(const Job& job, int item, int& tile, int& kb, int& ke) {
  const bool split = job.splits > 1;
  const int range = item / job.tiles;
  tile = item % job.tiles;
  kb = split ? range * job.tiles_per_split : 0;
  ke = split ? min(job.ktiles, kb + job.tiles_per_split) : job.ktiles;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Tile (tile, kt) of the job's weight into dst, in the layout's way.
template <int kLayout>
__device__ __forceinline__ void load_tile(unsigned char* dst, const CUtensorMap* map, const Job& job, int tile, int kt,
                                          uint64_t* bar, uint64_t policy) {
  if constexpr (kLayout == kRowMajor) {
    rill::cuda::tma_load_2d_hint(dst, map, kt * 64, tile * 64, bar, policy);
  } else if constexpr (kLayout == kTiled) {
    rill::cuda::tma_load_2d_hint(dst, map, 0, (tile * job.ktiles + kt) * 64, bar, policy);
  } else if constexpr (kLayout == kBulk) {
    bulk_load(dst, job.w + (int64_t(tile) * job.ktiles + kt) * kTileBytes, kTileBytes, bar, policy);
  } else if constexpr (kLayout == kBulkK) {
    bulk_load(dst, job.w + (int64_t(kt) * job.tiles + tile) * kTileBytes, kTileBytes, bar, policy);
  } else {  // kSweep: `tile` is the CTA's copy count
    const int64_t chunks = int64_t(job.tiles) * job.ktiles;
    bulk_load(dst, job.w + ((blockIdx.x + int64_t(tile) * gridDim.x) % chunks) * kTileBytes, kTileBytes, bar, policy);
  }
}

// The consumer's side of one stage: wait for it, touch it, release it.
__device__ __forceinline__ uint32_t take_stage(unsigned char* sw, uint64_t* full, uint64_t* empty, int& s,
                                               unsigned& phase, int kt) {
  rill::cuda::mbar_wait(&full[s], phase);
  const uint32_t v = *reinterpret_cast<const uint32_t*>(sw + s * kTileBytes + (kt & 7) * 128);
  rill::cuda::mbar_arrive(&empty[s]);
  if (++s == kStages) s = 0, phase ^= 1u;
  return v;
}

// The producer's wait before stage s is refilled: for the first tile of a group, until stage s and the
// n − 1 after it are free (consumed); the group's other tiles then need no wait.
__device__ __forceinline__ void wait_free(uint64_t* empty, int s, unsigned phase, int n) {
  for (int g = 0; g < n; ++g) {
    const int sg = s + g;
    rill::cuda::mbar_wait(&empty[sg % kStages], (phase ^ (sg >= kStages ? 1u : 0u)) ^ 1u);
  }
}
#endif

// kPdl: launched with programmatic stream serialization, as the decode graph's GEMMs are — the
// producer requests its first kPrewait tiles, then waits for the previous grid, and lets the next
// grid launch once it has requested its last tile; the consumer waits for the previous grid first.
template <int kLayout, bool kPdl = false, int kGroup = 1>
__global__ void __launch_bounds__(64) stream_kernel(const __grid_constant__ CUtensorMap map, Job job, uint32_t* out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  unsigned char* sw = init_stages(smem_raw, full, empty);
  const int items = job.tiles * job.splits;
  if (threadIdx.x == 0) {
    const uint64_t policy = rill::cuda::l2_evict_first_policy();
    int s = 0, issued = 0, copies = 0;
    unsigned phase = 0;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      int tile, kb, ke;
      item_tiles(job, item, tile, kb, ke);
      for (int kt = kb; kt < ke; ++kt) {
        if (kPdl && issued++ == 5) grid_dep_wait();
        if ((kt - kb) % kGroup == 0) wait_free(empty, s, phase, min(kGroup, ke - kt));
        rill::cuda::mbar_arrive_expect_tx(&full[s], kTileBytes);
        load_tile<kLayout>(sw + s * kTileBytes, &map, job, kLayout == kSweep ? copies++ : tile, kt, &full[s], policy);
        if (++s == kStages) s = 0, phase ^= 1u;
      }
    }
    if (kPdl) {
      if (issued <= 5) grid_dep_wait();
      grid_dep_trigger();
    }
  } else if (threadIdx.x == 32) {
    if (kPdl) grid_dep_wait();
    int s = 0;
    unsigned phase = 0;
    uint32_t acc = 0;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      int tile, kb, ke;
      item_tiles(job, item, tile, kb, ke);
      for (int kt = kb; kt < ke; ++kt) acc ^= take_stage(sw, full, empty, s, phase, kt);
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
  }
#endif
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One persistent grid streams a list of projections (jobs) in order: the producer never waits on
// anything but free stages, so it requests the next projection's first tiles while the consumer
// waits; the consumer starts projection p only once every CTA's consumer has finished p − 1 (a
// device counter a projection, the dependency of a decode step), then makes one dependent L2 load
// (the input row's round trip) when dep_load.
template <int kLayout, int kGroup = 1>
__global__ void __launch_bounds__(64) chain_kernel(const CUtensorMap* maps, const Job* jobs, int njobs,
                                                   unsigned* counters, const unsigned* xrow, int dep_load,
                                                   uint32_t* out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  unsigned char* sw = init_stages(smem_raw, full, empty);
  if (threadIdx.x == 0) {
    const uint64_t policy = rill::cuda::l2_evict_first_policy();
    int s = 0;
    unsigned phase = 0;
    for (int p = 0; p < njobs; ++p) {
      const Job job = jobs[p];
      for (int item = blockIdx.x; item < job.tiles * job.splits; item += gridDim.x) {
        int tile, kb, ke;
        item_tiles(job, item, tile, kb, ke);
        for (int kt = kb; kt < ke; ++kt) {
          if ((kt - kb) % kGroup == 0) wait_free(empty, s, phase, min(kGroup, ke - kt));
          rill::cuda::mbar_arrive_expect_tx(&full[s], kTileBytes);
          load_tile<kLayout>(sw + s * kTileBytes, maps + p, job, tile, kt, &full[s], policy);
          if (++s == kStages) s = 0, phase ^= 1u;
        }
      }
    }
  } else if (threadIdx.x == 32) {
    int s = 0;
    unsigned phase = 0;
    uint32_t acc = 0;
    for (int p = 0; p < njobs; ++p) {
      if (p > 0) {
        while (load_acquire(counters + p - 1) < gridDim.x) {
        }
        if (dep_load) acc ^= load_acquire(xrow + (blockIdx.x * 37 + p) % 4096);
      }
      const Job job = jobs[p];
      for (int item = blockIdx.x; item < job.tiles * job.splits; item += gridDim.x) {
        int tile, kb, ke;
        item_tiles(job, item, tile, kb, ke);
        for (int kt = kb; kt < ke; ++kt) acc ^= take_stage(sw, full, empty, s, phase, kt);
      }
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counters + p) : "memory");
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
  }
#endif
}

// The tail of one projection: the stream schedule of stream_kernel (row-major, 2-D tensor copies)
// with items either static (b, b + grid, ...) or taken from a device counter as the producer needs
// the next (kDynamic); the producer tags each stage with its k tile and ends with an untagged
// arrival, so the consumer needs no item list. times: per CTA, %globaltimer when its consumer
// started and after its last stage — how unevenly the CTAs of one launch finish.
__device__ __forceinline__ unsigned long long timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <bool kDynamic>
__global__ void __launch_bounds__(64) tail_kernel(const __grid_constant__ CUtensorMap map, Job job, unsigned* next_item,
                                                  unsigned long long* times, uint32_t* out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ int tag[kStages];  // the k tile stage s holds; -1: no more
  unsigned char* sw = init_stages(smem_raw, full, empty);
  const int items = job.tiles * job.splits;
  if (threadIdx.x == 0) {
    const uint64_t policy = rill::cuda::l2_evict_first_policy();
    int s = 0;
    unsigned phase = 0;
    int item = kDynamic ? int(atomicAdd(next_item, 1u)) : int(blockIdx.x);
    while (item < items) {
      int tile, kb, ke;
      item_tiles(job, item, tile, kb, ke);
      for (int kt = kb; kt < ke; ++kt) {
        rill::cuda::mbar_wait(&empty[s], phase ^ 1u);
        tag[s] = kt;
        rill::cuda::mbar_arrive_expect_tx(&full[s], kTileBytes);
        load_tile<kRowMajor>(sw + s * kTileBytes, &map, job, tile, kt, &full[s], policy);
        if (++s == kStages) s = 0, phase ^= 1u;
      }
      item = kDynamic ? int(atomicAdd(next_item, 1u)) : item + int(gridDim.x);
    }
    rill::cuda::mbar_wait(&empty[s], phase ^ 1u);
    tag[s] = -1;
    rill::cuda::mbar_arrive(&full[s]);
  } else if (threadIdx.x == 32) {
    const unsigned long long t0 = timer_ns();
    int s = 0;
    unsigned phase = 0;
    uint32_t acc = 0;
    for (;;) {
      rill::cuda::mbar_wait(&full[s], phase);
      const int kt = tag[s];
      if (kt < 0) break;
      acc ^= *reinterpret_cast<const uint32_t*>(sw + s * kTileBytes + (kt & 7) * 128);
      rill::cuda::mbar_arrive(&empty[s]);
      if (++s == kStages) s = 0, phase ^= 1u;
    }
    times[2 * blockIdx.x] = t0;
    times[2 * blockIdx.x + 1] = timer_ns();
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
  }
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !p) std::exit(2);
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
}

// rows × cols bf16, row-major, {64, 64} boxes, 128-byte swizzle.
CUtensorMap map_2d(const void* base, int64_t rows, int64_t cols,
                   CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {64, 64}, elem[2] = {1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                               elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) std::fprintf(stderr, "cuTensorMapEncodeTiled %d\n", int(r)), std::exit(3);
  return map;
}

struct Shape {
  const char* name;
  int64_t n, k;
  int splits;
};

struct Launch {
  CUtensorMap map;
  Job job;
  unsigned grid;
};

Launch make_launch(int layout, const char* w, const Shape& s, int slots,
                   CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  Launch l;
  l.job.w = w;
  l.job.tiles = int(s.n / 64);
  l.job.ktiles = int(s.k / 64);
  l.job.splits = s.splits;
  l.job.tiles_per_split = l.job.ktiles / s.splits;
  l.map = layout == kRowMajor ? map_2d(w, s.n, s.k, promotion) : map_2d(w, s.n * s.k / 64, 64, promotion);
  l.grid = unsigned(std::min<int64_t>(int64_t(l.job.tiles) * s.splits, slots));
  return l;
}

void launch_pdl(int layout, const Launch& l, uint32_t* out) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(l.grid);
  cfg.blockDim = dim3(64);
  cfg.dynamicSmemBytes = kSmem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (layout == kRowMajor) CK(cudaLaunchKernelEx(&cfg, stream_kernel<kRowMajor, true>, l.map, l.job, out));
  if (layout == kBulk) CK(cudaLaunchKernelEx(&cfg, stream_kernel<kBulk, true>, l.map, l.job, out));
}

void launch(int layout, const Launch& l, uint32_t* out) {
  if (layout == kRowMajor) stream_kernel<kRowMajor><<<l.grid, 64, kSmem>>>(l.map, l.job, out);
  if (layout == kTiled) stream_kernel<kTiled><<<l.grid, 64, kSmem>>>(l.map, l.job, out);
  if (layout == kBulk) stream_kernel<kBulk><<<l.grid, 64, kSmem>>>(l.map, l.job, out);
}

// stream_kernel with grouped issue (row-major), plain launch.
template <int kGroup>
void launch_grouped(const Launch& l, uint32_t* out) {
  static const bool attr = [] {
    CK(cudaFuncSetAttribute(stream_kernel<kRowMajor, false, kGroup>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(kSmem)));
    CK(cudaFuncSetAttribute(chain_kernel<kRowMajor, kGroup>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(kSmem)));
    return true;
  }();
  (void)attr;
  stream_kernel<kRowMajor, false, kGroup><<<l.grid, 64, kSmem>>>(l.map, l.job, out);
}

void launch_grouped(int group, const Launch& l, uint32_t* out) {
  if (group == 1) launch_grouped<1>(l, out);
  if (group == 2) launch_grouped<2>(l, out);
  if (group == 4) launch_grouped<4>(l, out);
  if (group == 8) launch_grouped<8>(l, out);
}

// One projection's tail (tail_kernel): GB/s and when its CTAs finish, as the decode step splits it
// (static items) and in finer split ranges taken from a counter, at three CTAs an SM and, with the
// shared memory of the decode GEMM's few-item CTAs, two.
void tails(const char* w, int sms, int slots3, void* flush, size_t flush_bytes, uint32_t* out) {
  for (auto f : {(const void*)tail_kernel<false>, (const void*)tail_kernel<true>})
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10));
  unsigned* next = nullptr;
  unsigned long long* times = nullptr;
  CK(cudaMalloc(&next, sizeof(unsigned)));
  CK(cudaMalloc(&times, sizeof(unsigned long long) * 2 * 4096));
  struct Case {
    Shape s;
    bool dynamic;
    int per_sm;
  };
  const Shape gu1{"gate/up 24576x4096 fold", 24576, 4096, 1}, gu4{"gate/up 24576x4096 /4", 24576, 4096, 4},
      gu8{"gate/up 24576x4096 /8", 24576, 4096, 8}, o4{"o 4096x4096 /4", 4096, 4096, 4},
      o16{"o 4096x4096 /16", 4096, 4096, 16}, d4{"down 4096x12288 /4", 4096, 12288, 4},
      d16{"down 4096x12288 /16", 4096, 12288, 16}, q8{"q/k/v 6144x4096 /8", 6144, 4096, 8},
      q16{"q/k/v 6144x4096 /16", 6144, 4096, 16};
  const Case cases[] = {{gu1, false, 3}, {gu4, false, 3}, {gu4, true, 3}, {gu8, true, 3}, {o4, false, 3},
                        {o4, false, 2},  {o16, true, 3},  {o16, true, 2}, {d4, false, 3}, {d4, false, 2},
                        {d16, true, 3},  {d16, true, 2},  {q8, false, 3}, {q8, true, 3},  {q16, true, 3}};
  std::printf("| projection | items | CTAs | us | GB/s | CTA ends (us after the first start): "
              "min / p10 / p50 / p90 / max |\n"
              "|---|---:|---:|---:|---:|---|\n");
  for (const Case& c : cases) {
    const int slots = c.per_sm == 3 ? slots3 : 2 * sms;
    const size_t smem = c.per_sm == 3 ? kSmem : size_t(100) << 10;
    Launch l = make_launch(kRowMajor, w, c.s, slots, CU_TENSOR_MAP_L2_PROMOTION_NONE);
    auto run = [&] {
      CK(cudaMemsetAsync(next, 0, sizeof(unsigned)));
      if (c.dynamic) tail_kernel<true><<<l.grid, 64, smem>>>(l.map, l.job, next, times, out);
      else tail_kernel<false><<<l.grid, 64, smem>>>(l.map, l.job, next, times, out);
    };
    const double us = median_us(run, flush, flush_bytes, 9);
    CK(cudaMemset(flush, 7, flush_bytes));
    run();
    CK(cudaDeviceSynchronize());
    std::vector<unsigned long long> t(2 * l.grid);
    CK(cudaMemcpy(t.data(), times, sizeof(unsigned long long) * t.size(), cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull;
    std::vector<double> ends;
    for (unsigned b = 0; b < l.grid; ++b) t0 = std::min(t0, t[2 * b]);
    for (unsigned b = 0; b < l.grid; ++b) ends.push_back(double(t[2 * b + 1] - t0) / 1e3);
    std::sort(ends.begin(), ends.end());
    auto at = [&](double q) { return ends[std::min(ends.size() - 1, size_t(q * double(ends.size())))]; };
    const double mb = double(c.s.n) * c.s.k * 2 / 1e6;
    std::printf("| %s, %s, %d an SM | %d | %u | %.1f | %.0f | %.1f / %.1f / %.1f / %.1f / %.1f |\n", c.s.name,
                c.dynamic ? "taken from a counter" : "static", c.per_sm, l.job.tiles * l.job.splits, l.grid, us,
                mb * 1e3 / us, ends.front(), at(0.1), at(0.5), at(0.9), ends.back());
  }
  CK(cudaFree(next));
  CK(cudaFree(times));
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (auto f : {(const void*)stream_kernel<kRowMajor>, (const void*)stream_kernel<kTiled>,
                 (const void*)stream_kernel<kBulk>, (const void*)stream_kernel<kRowMajor, true>,
                 (const void*)stream_kernel<kBulk, true>, (const void*)chain_kernel<kRowMajor>,
                 (const void*)chain_kernel<kBulk>})
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stream_kernel<kRowMajor>, 64, kSmem));
  const int slots = per_sm * sms;
  uint32_t* out = nullptr;
  void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CK(cudaMalloc(&out, 1 << 16));
  CK(cudaMalloc(&flush, flush_bytes));
  {
    char* a = nullptr;
    char* b = nullptr;
    const size_t cb = size_t(1) << 30;
    CK(cudaMalloc(&a, cb));
    CK(cudaMalloc(&b, cb));
    const double us = median_us([&] { CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice)); }, flush, flush_bytes);
    std::printf("copy 1 GiB D2D: %.0f GB/s (read+write); %d CTAs an SM, %d slots\n", 2.0 * cb / us / 1e3, per_sm,
                slots);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  // The 8B shape's projections as the decode step splits them (gemm_split on 132 SMs).
  const Shape qkv{"q/k/v 6144x4096 /8", 6144, 4096, 8}, o{"o 4096x4096 /4", 4096, 4096, 4},
      gu{"gate/up 24576x4096 fold", 24576, 4096, 1}, down{"down 4096x12288 /4", 4096, 12288, 4},
      lm{"lm_head 151936x4096 fold", 151936, 4096, 1};
  const char* names[3] = {"rowmajor", "tiled", "bulk"};
  char* big = nullptr;
  const size_t big_bytes = size_t(lm.n) * lm.k * 2;
  CK(cudaMalloc(&big, big_bytes));
  CK(cudaMemset(big, 0x5a, big_bytes));
  std::printf("| shape | MB | rowmajor us | GB/s | tiled us | GB/s | bulk us | GB/s |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : {qkv, o, gu, down, lm}) {
    const double mb = double(s.n) * s.k * 2 / 1e6;
    std::printf("| %s | %.1f", s.name, mb);
    for (int layout = 0; layout < 3; ++layout) {
      const Launch l = make_launch(layout, big, s, slots);
      const double us = median_us([&] { launch(layout, l, out); }, flush, flush_bytes);
      std::printf(" | %.1f | %.0f", us, mb * 1e3 / us);
    }
    std::printf(" |\n");
  }
  // A chain of 8 layers, each its own buffers, launched back to back (plain stream order).
  constexpr int kLayers = 8;
  const Shape layer[4] = {qkv, o, gu, down};
  std::vector<char*> bufs;
  double chain_mb = 0;
  for (int i = 0; i < kLayers; ++i)
    for (const Shape& s : layer) {
      char* p = nullptr;
      CK(cudaMalloc(&p, size_t(s.n) * s.k * 2));
      CK(cudaMemset(p, 0x33, size_t(s.n) * s.k * 2));
      bufs.push_back(p);
      chain_mb += double(s.n) * s.k * 2 / 1e6;
    }
  for (int rep = 0; rep < 2; ++rep)
    for (int layout = 0; layout < 3; ++layout) {
      std::vector<Launch> ls;
      for (int i = 0; i < kLayers; ++i)
        for (int j = 0; j < 4; ++j) ls.push_back(make_launch(layout, bufs[size_t(i) * 4 + j], layer[j], slots));
      const double us = median_us(
          [&] {
            for (const Launch& l : ls) launch(layout, l, out);
          },
          flush, flush_bytes, 9);
      std::printf("chain of %d layers (%.0f MB), %s: %.1f us, %.0f GB/s\n", kLayers, chain_mb, names[layout], us,
                  chain_mb * 1e3 / us);
    }
  // The L2 promotion of the row-major map (the library's: 256 B).
  for (auto [name, promo] : {std::pair{"none", CU_TENSOR_MAP_L2_PROMOTION_NONE},
                             std::pair{"128B", CU_TENSOR_MAP_L2_PROMOTION_L2_128B},
                             std::pair{"256B", CU_TENSOR_MAP_L2_PROMOTION_L2_256B}}) {
    std::vector<Launch> ls;
    for (int i = 0; i < kLayers; ++i)
      for (int j = 0; j < 4; ++j) {
        Launch l = make_launch(kRowMajor, bufs[size_t(i) * 4 + j], layer[j], slots);
        l.map = map_2d(bufs[size_t(i) * 4 + j], layer[j].n, layer[j].k, promo);
        ls.push_back(l);
      }
    const double us = median_us(
        [&] {
          for (const Launch& l : ls) launch(kRowMajor, l, out);
        },
        flush, flush_bytes, 9);
    std::printf("chain, rowmajor, L2 promotion %s: %.1f us, %.0f GB/s\n", name, us, chain_mb * 1e3 / us);
  }
  // Programmatic launches (the decode graph's hand-off: 5 tiles requested before the wait).
  const CUtensorMapL2promotion promos[4] = {CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_64B};
  const char* promo_names[4] = {"256B", "none", "128B", "64B"};
  for (int rep = 0; rep < 2; ++rep)
    for (int v = 0; v < 5; ++v) {
      const int layout = v < 4 ? int(kRowMajor) : int(kBulk);
      std::vector<Launch> ls;
      for (int i = 0; i < kLayers; ++i)
        for (int j = 0; j < 4; ++j)
          ls.push_back(make_launch(layout, bufs[size_t(i) * 4 + j], layer[j], slots, promos[v % 4]));
      const double us = median_us(
          [&] {
            for (const Launch& l : ls) launch_pdl(layout, l, out);
          },
          flush, flush_bytes, 9);
      std::printf("chain, programmatic launches, %s%s%s: %.1f us, %.0f GB/s\n", names[layout],
                  v < 4 ? ", L2 promotion " : "", v < 4 ? promo_names[v] : "", us, chain_mb * 1e3 / us);
    }
  for (int v = 0; v < 4; ++v) {
    const Launch l = make_launch(kRowMajor, big, lm, slots, promos[v]);
    const double us = median_us([&] { launch(kRowMajor, l, out); }, flush, flush_bytes);
    std::printf("lm_head alone, rowmajor, L2 promotion %s: %.1f us, %.0f GB/s\n", promo_names[v], us,
                double(lm.n) * lm.k * 2 / 1e3 / us);
  }
  // Grouped issue: each shape alone (row-major, no promotion), a group of 1 (today) to 8 stages at once.
  CK(cudaFuncSetAttribute(stream_kernel<kSweep>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  CK(cudaFuncSetAttribute(stream_kernel<kBulkK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  CK(cudaFuncSetAttribute(chain_kernel<kBulkK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  std::printf("| grouped issue (row-major, no promotion): shape | MB | group 1 GB/s | 2 | 4 | 8 | 8 KB tiles "
              "k-major | sweep (8 KB bulk copies in address order) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& sh : {qkv, o, gu, down, lm}) {
    const double mb = double(sh.n) * sh.k * 2 / 1e6;
    const Launch l = make_launch(kRowMajor, big, sh, slots, CU_TENSOR_MAP_L2_PROMOTION_NONE);
    std::printf("| %s | %.1f", sh.name, mb);
    for (int group : {1, 2, 4, 8}) {
      const double us = median_us([&] { launch_grouped(group, l, out); }, flush, flush_bytes);
      std::printf(" | %.0f", mb * 1e3 / us);
    }
    const Launch bulk = make_launch(kBulk, big, sh, slots);
    const double kus = median_us([&] { stream_kernel<kBulkK><<<bulk.grid, 64, kSmem>>>(bulk.map, bulk.job, out); },
                                 flush, flush_bytes);
    const double us = median_us([&] { stream_kernel<kSweep><<<bulk.grid, 64, kSmem>>>(bulk.map, bulk.job, out); },
                                flush, flush_bytes);
    std::printf(" | %.0f | %.0f |\n", mb * 1e3 / kus, mb * 1e3 / us);
  }
  tails(big, sms, slots, flush, flush_bytes, out);
  // One persistent grid over the 32 projections, a device-counter barrier between them.
  {
    const int njobs = kLayers * 4;
    std::vector<CUtensorMap> maps;
    std::vector<Job> jobs;
    for (int i = 0; i < njobs; ++i) {
      const Launch l = make_launch(kRowMajor, bufs[size_t(i)], layer[i % 4], slots, CU_TENSOR_MAP_L2_PROMOTION_NONE);
      maps.push_back(l.map);
      jobs.push_back(l.job);
    }
    CUtensorMap* dmaps = nullptr;
    Job* djobs = nullptr;
    unsigned* counters = nullptr;
    unsigned* xrow = nullptr;
    CK(cudaMalloc(&dmaps, sizeof(CUtensorMap) * njobs));
    CK(cudaMalloc(&djobs, sizeof(Job) * njobs));
    CK(cudaMalloc(&counters, sizeof(unsigned) * njobs));
    CK(cudaMalloc(&xrow, sizeof(unsigned) * 4096));
    CK(cudaMemset(xrow, 1, sizeof(unsigned) * 4096));
    CK(cudaMemcpy(dmaps, maps.data(), sizeof(CUtensorMap) * njobs, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(djobs, jobs.data(), sizeof(Job) * njobs, cudaMemcpyHostToDevice));
    for (int rep = 0; rep < 2; ++rep)
      for (int layout : {int(kRowMajor), int(kBulk)})
        for (int dep : {0, 1}) {
          const double us = median_us(
              [&] {
                CK(cudaMemsetAsync(counters, 0, sizeof(unsigned) * njobs));
                if (layout == kRowMajor)
                  chain_kernel<kRowMajor><<<slots, 64, kSmem>>>(dmaps, djobs, njobs, counters, xrow, dep, out);
                else
                  chain_kernel<kBulk><<<slots, 64, kSmem>>>(dmaps, djobs, njobs, counters, xrow, dep, out);
              },
              flush, flush_bytes, 9);
          std::printf("persistent chain, %s (promotion none), barrier%s: %.1f us, %.0f GB/s\n", names[layout],
                      dep ? " + one dependent load" : "", us, chain_mb * 1e3 / us);
        }
    {  // k-major 8 KB tiles, with the input's dependent load
      const double us = median_us(
          [&] {
            CK(cudaMemsetAsync(counters, 0, sizeof(unsigned) * njobs));
            chain_kernel<kBulkK><<<slots, 64, kSmem>>>(dmaps, djobs, njobs, counters, xrow, 1, out);
          },
          flush, flush_bytes, 9);
      std::printf("persistent chain, bulk k-major, barrier + one dependent load: %.1f us, %.0f GB/s\n", us,
                  chain_mb * 1e3 / us);
    }
    for (int group : {1, 2, 4}) {  // grouped issue, row-major, with the input's dependent load
      launch_grouped(group, make_launch(kRowMajor, bufs[0], layer[0], slots), out);  // (sets the attributes)
      auto* chain = group == 1   ? chain_kernel<kRowMajor, 1>
                    : group == 2 ? chain_kernel<kRowMajor, 2>
                                 : chain_kernel<kRowMajor, 4>;
      const double us = median_us(
          [&] {
            CK(cudaMemsetAsync(counters, 0, sizeof(unsigned) * njobs));
            chain<<<slots, 64, kSmem>>>(dmaps, djobs, njobs, counters, xrow, 1, out);
          },
          flush, flush_bytes, 9);
      std::printf("persistent chain, rowmajor (promotion none), barrier + one dependent load, grouped issue %d: "
                  "%.1f us, %.0f GB/s\n", group, us, chain_mb * 1e3 / us);
    }
  }
  return 0;
}
