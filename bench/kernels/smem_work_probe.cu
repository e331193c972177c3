// bench/kernels/smem_work_probe.cu — a standalone lab file: does a weight stream slow work that touches no
// global memory at all? Run AD's trace found the cluster attention's span walk at 512 keys 1.2 µs slower
// when the o projection's CTAs launch behind it and request their pre-wait weight tiles — with warm
// code, and (after run AD2) no global access between Q's landing and the span's end: the walk is
// ldmatrix, mma.sync, shared-memory stores and block barriers. Run AN3 ruled out the GEMM's waiting
// consumer warps (RILL_DECODE_CONSUMER_WAIT=0 changed nothing). What is left is the SM itself: the bulk
// copies land in the same shared memory the walk reads, or the traffic through the SM's L1/TEX path.
//
// One work block an SM (128 threads, the walk's layout: Q 16 × 128, K and V 64 × 128 bf16 in shared
// memory) runs kRounds rounds of the walk's arithmetic — Q·Kᵀ (8 k steps of ldmatrix + 2 mma), the row
// max across warps through shared memory and a barrier, exp2, P through shared memory and a barrier,
// P·V (ldmatrix.trans + mma), a barrier — and records its ns a round and its SM. Beside it, on the
// other stream and started first (each stream stops when told, or after 3 ms):
//   bulk       8 KB bulk copies into shared memory (2 CTAs an SM, 8 in flight each: the decode GEMM's
//              pre-wait burst, continued);
//   bulk rows  bulk copies of one 256-byte key row each, rows 2 KB apart (a kv head's rows of the cache),
//              a warp's 32 lanes issuing one each a stage;
//   cp.async   16 bytes a thread into shared memory (4 CTAs an SM of 128 threads, two groups of 8 in
//              flight: the decode attention's K/V copies);
//   loads      the same bytes by ordinary loads into registers (4 CTAs an SM of 128 threads, 8
//              independent 16-byte non-allocating loads a thread in flight), on every SM or on the odd
//              SMs only (the stream's CTAs on even SMs leave at once), so that the work blocks on even
//              SMs see the memory system busy but no stream on their own SM.
// Medians over the blocks and 11 launches, ns a round; the stream's rate from its bytes and time; the
// share of work blocks that ran wholly inside the stream's time.
//
// Run AN (H200): idle 505 ns a round; beside bulk copies 512 (+1.4%, the stream at 4.59 TB/s), bulk
// rows 518 (+2.6%, 2.14 TB/s), cp.async 544 (+7.7%, 4.59 TB/s); beside register loads 10,732 ns (21x),
// and with those on the odd SMs only 8,932 on the odd SMs against 503 on the even ones. So a copy
// stream into shared memory, by the copy engine or by cp.async, barely slows the walk's arithmetic on
// its own SM, and the memory system's load alone does not slow it at all: neither explains run AD's
// 1.2 µs. Loads into registers on the same SM do (plausibly their requests fill the SM's load/store
// path, which ldmatrix and the shared-memory stores share); the default decode path streams no weights
// that way (its GEMMs use the copy engine; the small kernels load a few KB a block).
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/smem_work_probe.cu -o smem_work_probe; run alone on an H100 / H200 (~1 s, 4 GB;
// tools/gpu_run.sh OUT probes with RILL_PROBES=smem_work). Not part of the library or of any test: a
// measurement (bench/RESULTS.md, run AN).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_util.cuh"

namespace {

using rill::probe::kChunk;
using rill::probe::kMaxDepth;
using rill::probe::load_flag;
using rill::probe::median;
using rill::probe::now_ns;
using rill::probe::smid;

constexpr int kThreads = rill::probe::WalkWork::kThreads, kRounds = 64;

// Stream placement: every SM (0), or only SMs whose id is odd (1).
__device__ __forceinline__ bool quiet_sm(int odd_only) { return odd_only && smid() % 2 == 0; }

// A stream stops when told (done) or after kDeadlineNs, whichever comes first: if the work blocks
// could not be placed beside it they run after it, and the host reports them as not co-resident
// instead of waiting forever.
constexpr unsigned long long kDeadlineNs = 3'000'000;
__device__ __forceinline__ bool stop(const int* done, unsigned long long t0) {
  return load_flag(done) || now_ns() - t0 > kDeadlineNs;
}

// probe_util's stream_until with the deadline: thread 0 keeps kMaxDepth 8 KB bulk copies in flight (block 0
// idle, as in the other probes).
constexpr int kBulkCtas = 2;
constexpr size_t kBulkSmem = size_t(kMaxDepth) * kChunk + 1024;
__global__ void bulk_stream_kernel(const unsigned char* stream, int64_t chunks, const int* done,
                                   unsigned long long* res) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kMaxDepth];
  if (blockIdx.x == 0 || threadIdx.x != 0) return;
  rill::probe::stream_until(stream, chunks, kMaxDepth, done, smem_raw, full, res, kDeadlineNs);
}

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

constexpr int kLoadCtas = 4, kLoadUnroll = 8;
constexpr int64_t kLoadStep = int64_t(kThreads) * kLoadUnroll;  // uint4s a CTA an iteration (16 KB)
__global__ void __launch_bounds__(kThreads) load_stream_kernel(const uint4* src, int64_t n16, const int* done,
                                                               int odd_only, unsigned long long* res, unsigned* sink) {
  if (quiet_sm(odd_only)) return;
  const int64_t stride = int64_t(gridDim.x) * kLoadStep;
  int64_t base = int64_t(blockIdx.x) * kLoadStep;
  unsigned acc = 0;
  int64_t it = 0;
  const unsigned long long t0 = now_ns();
  for (;; ++it) {
    if ((it & 15) == 0 && stop(done, t0)) break;
    uint4 v[kLoadUnroll];
#pragma unroll
    for (int u = 0; u < kLoadUnroll; ++u) v[u] = ld_stream(src + base + u * kThreads + threadIdx.x);
#pragma unroll
    for (int u = 0; u < kLoadUnroll; ++u) acc ^= v[u].x ^ v[u].w;
    base += stride;
    if (base + kLoadStep > n16) base %= stride;
  }
  const unsigned long long t1 = now_ns();
  if (acc == 0x9e3779b9u) sink[0] = acc;  // (keeps the loads)
  if (threadIdx.x == 0) {
    rill::probe::add_stream_result(res, (unsigned long long)(it)*kLoadStep * 16, t0, t1);
  }
}

// The decode attention's K/V copies: cp.async of 16 bytes a thread into shared memory (the LSU path,
// attention_decode.cuh's TileSlots), kCpGroups groups of kLoadUnroll copies a thread in flight.
constexpr int kCpCtas = 4, kCpGroups = 2;
constexpr size_t kCpSmem = size_t(kCpGroups) * kThreads * kLoadUnroll * 16;  // 32 KB
__global__ void __launch_bounds__(kThreads) cp_async_stream_kernel(const uint4* src, int64_t n16, const int* done,
                                                                   unsigned long long* res) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint4* dst = reinterpret_cast<uint4*>(smem_raw);
  const int64_t stride = int64_t(gridDim.x) * kLoadStep;
  int64_t base = int64_t(blockIdx.x) * kLoadStep;
  int64_t it = 0;
  const unsigned long long t0 = now_ns();
  for (;; ++it) {
    if ((it & 15) == 0 && stop(done, t0)) break;
    uint4* d = dst + (it % kCpGroups) * kThreads * kLoadUnroll;
#pragma unroll
    for (int u = 0; u < kLoadUnroll; ++u)
      rill::cuda::cp_async16(d + u * kThreads + threadIdx.x, src + base + u * kThreads + threadIdx.x, true);
    rill::cuda::cp_async_commit();
    rill::cuda::cp_async_wait<kCpGroups - 1>();  // the group before this one landed
    base += stride;
    if (base + kLoadStep > n16) base %= stride;
  }
  rill::cuda::cp_async_wait<0>();
  const unsigned long long t1 = now_ns();
  if (threadIdx.x == 0) {
    rill::probe::add_stream_result(res, (unsigned long long)(it)*kLoadStep * 16, t0, t1);
  }
}

// Bulk copies of one key row each (256 bytes, a kv head's 128 bf16 of a cache slot: rows 2 KB apart,
// the 8B shape's 8 kv heads a slot): a warp's 32 lanes each issue one a stage, 8 KB a stage as the
// decode GEMM's, kMaxDepth stages in flight.
__global__ void bulk_rows_stream_kernel(const unsigned char* stream, int64_t chunks, const int* done,
                                        unsigned long long* res) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kMaxDepth];
  const int lane = int(threadIdx.x);
  unsigned char* stage = smem_raw + ((1024 - (rill::cuda::smem_addr(smem_raw) & 1023u)) & 1023u);
  if (lane == 0) {
    for (int d = 0; d < kMaxDepth; ++d) rill::cuda::mbar_init(&full[d], 1);
    rill::cuda::mbar_init_fence();
  }
  __syncwarp();
  const uint64_t policy = rill::cuda::l2_evict_first_policy();
  // A stage reads 32 rows of 256 bytes, 2 KB apart: 64 KB of the stream, one chunk index per stage.
  const int64_t spans = chunks / 8;
  int64_t span = blockIdx.x, issued = 0;
  const unsigned long long t0 = now_ns();
  for (;; ++issued) {
    const int d = int(issued % kMaxDepth);
    const int64_t use = issued / kMaxDepth;
    if (use > 0) rill::cuda::mbar_wait(&full[d], unsigned(use - 1) & 1u);
    int quit = 0;
    if (lane == 0 && (issued & 15) == 0) quit = stop(done, t0);
    if (__shfl_sync(0xffffffffu, quit, 0)) break;
    if (lane == 0) rill::cuda::mbar_arrive_expect_tx(&full[d], kChunk);
    __syncwarp();
    rill::probe::bulk_load(stage + d * kChunk + lane * 256, stream + span * 8 * kChunk + lane * 2048, 256, &full[d],
                           policy);
    span += gridDim.x;
    if (span >= spans) span -= spans;
  }
  for (int64_t i = issued > kMaxDepth ? issued - kMaxDepth : 0; i < issued; ++i)
    rill::cuda::mbar_wait(&full[i % kMaxDepth], unsigned(i / kMaxDepth) & 1u);
  const unsigned long long t1 = now_ns();
  if (lane == 0) {
    rill::probe::add_stream_result(res, (unsigned long long)(issued)*kChunk, t0, t1);
  }
}

// The walk's arithmetic on shared memory only (probe_util.cuh's WalkWork), timed from first to last round.
__global__ void __launch_bounds__(kThreads) work_kernel(unsigned long long* ns, unsigned* sm, float* sink) {
  // ns[2i], ns[2i + 1]: block i's first and last time stamps
  __shared__ __align__(16) rill::probe::WalkWork w;
  w.fill();
  __syncthreads();
  float o[4][4] = {};
  const unsigned long long t0 = now_ns();
  for (int r = 0; r < kRounds; ++r) w.round(o);
  const unsigned long long t1 = now_ns();
  w.keep(o, sink);
  if (threadIdx.x == 0) {
    ns[2 * blockIdx.x] = t0;
    ns[2 * blockIdx.x + 1] = t1;
    sm[blockIdx.x] = smid();
  }
}

enum Stream { kNone, kBulk, kLoads, kCpAsync, kBulkRows };

struct Setup {
  unsigned char* bytes = nullptr;
  size_t n = 0;
  int* done = nullptr;
  unsigned long long* res = nullptr;
  unsigned* sink_u = nullptr;
  float* sink_f = nullptr;
  unsigned long long* ns = nullptr;
  unsigned* sm = nullptr;
  cudaStream_t side = nullptr, main = nullptr;
  int sms = 0;
};

struct Result {
  double stream_sm = 0, quiet_sm = 0, gbps = 0;  // ns a round on SMs with / without stream CTAs
  double inside = 1;  // the fraction of work blocks that ran wholly inside the stream's time
};

Result run(const Setup& s, Stream kind, int odd_only) {
  std::vector<double> with, without, rate;
  int blocks = 0, inside = 0;
  for (int launch = 0; launch < 11; ++launch) {
    if (kind != kNone) {
      const unsigned long long init[3] = {0, ~0ull, 0};
      CK(cudaMemcpyAsync(s.res, init, sizeof(init), cudaMemcpyHostToDevice, s.side));
      CK(cudaMemsetAsync(s.done, 0, sizeof(int), s.side));
      if (kind == kBulk)
        bulk_stream_kernel<<<kBulkCtas * s.sms + 1, 32, kBulkSmem, s.side>>>(s.bytes, int64_t(s.n / kChunk),
                                                                                  s.done, s.res);
      else if (kind == kBulkRows)
        bulk_rows_stream_kernel<<<kBulkCtas * s.sms, 32, kBulkSmem, s.side>>>(s.bytes, int64_t(s.n / kChunk),
                                                                                   s.done, s.res);
      else if (kind == kCpAsync)
        cp_async_stream_kernel<<<kCpCtas * s.sms, kThreads, kCpSmem, s.side>>>(
            reinterpret_cast<const uint4*>(s.bytes), int64_t(s.n / 16), s.done, s.res);
      else
        load_stream_kernel<<<kLoadCtas * s.sms, kThreads, 0, s.side>>>(
            reinterpret_cast<const uint4*>(s.bytes), int64_t(s.n / 16), s.done, odd_only, s.res, s.sink_u);
      CK(cudaGetLastError());
      const auto t = std::chrono::steady_clock::now();  // (let the stream fill)
      while (std::chrono::steady_clock::now() - t < std::chrono::microseconds(300)) {
      }
    }
    work_kernel<<<s.sms, kThreads, 0, s.main>>>(s.ns, s.sm, s.sink_f);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s.main));
    if (kind != kNone) {
      const int one = 1;
      CK(cudaMemcpyAsync(s.done, &one, sizeof(int), cudaMemcpyHostToDevice, s.main));
    }
    CK(cudaDeviceSynchronize());
    std::vector<unsigned long long> ns(size_t(2 * s.sms));
    std::vector<unsigned> sm(size_t(s.sms));
    CK(cudaMemcpy(ns.data(), s.ns, ns.size() * sizeof(ns[0]), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sm.data(), s.sm, sm.size() * sizeof(sm[0]), cudaMemcpyDeviceToHost));
    unsigned long long res[3] = {0, 0, ~0ull};
    if (kind != kNone) {
      CK(cudaMemcpy(res, s.res, sizeof(res), cudaMemcpyDeviceToHost));
      if (res[2] > res[1]) rate.push_back(double(res[0]) / double(res[2] - res[1]));  // bytes/ns = GB/s
    }
    std::vector<double> a, b;
    for (int i = 0; i < s.sms; ++i) {
      const unsigned long long t0 = ns[size_t(2 * i)], t1 = ns[size_t(2 * i + 1)];
      const bool in = kind == kNone || (t0 >= res[1] && t1 <= res[2]);
      ++blocks;
      if (!in) continue;  // (ran beside no stream, or only part of the time)
      ++inside;
      const bool streamed = kind != kNone && (!odd_only || sm[size_t(i)] % 2 == 1);
      (streamed ? a : b).push_back(double(t1 - t0) / kRounds);
    }
    if (!a.empty()) with.push_back(median(a));
    if (!b.empty()) without.push_back(median(b));
  }
  Result r;
  r.stream_sm = with.empty() ? 0 : median(with);
  r.quiet_sm = without.empty() ? 0 : median(without);
  r.gbps = rate.empty() ? 0 : median(rate);
  r.inside = blocks ? double(inside) / blocks : 0;
  return r;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // (every line out as it is printed)
  Setup s;
  s.sms = rill::probe::device_sms(prop);
  std::printf("smem work probe: %s, %d SMs; one work block an SM, %d rounds of the span walk's arithmetic\n", prop.name,
              s.sms, kRounds);
  s.n = size_t(4) << 30;
  CK(cudaMalloc(&s.bytes, s.n));
  CK(cudaMemset(s.bytes, 1, s.n));
  CK(cudaMalloc(&s.done, sizeof(int)));
  CK(cudaMalloc(&s.res, 3 * sizeof(unsigned long long)));
  CK(cudaMalloc(&s.sink_u, sizeof(unsigned)));
  CK(cudaMalloc(&s.sink_f, sizeof(float)));
  CK(cudaMalloc(&s.ns, size_t(2 * s.sms) * sizeof(unsigned long long)));
  CK(cudaMalloc(&s.sm, size_t(s.sms) * sizeof(unsigned)));
  CK(cudaFuncSetAttribute(bulk_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBulkSmem)));
  // Every kernel asks for the largest shared memory carveout: an SM configured for the stream's two CTAs
  // alone would have no room left for a work block, which would then wait for the stream to end.
  CK(cudaFuncSetAttribute(bulk_stream_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CK(cudaFuncSetAttribute(load_stream_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CK(cudaFuncSetAttribute(work_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CK(cudaFuncSetAttribute(bulk_rows_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBulkSmem)));
  CK(cudaFuncSetAttribute(bulk_rows_stream_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CK(cudaFuncSetAttribute(cp_async_stream_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CK(cudaStreamCreateWithFlags(&s.side, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s.main, cudaStreamNonBlocking));
  std::printf("%-58s %14s %14s %10s %8s\n", "stream beside the work", "SMs with it", "SMs without", "GB/s",
              "inside");
  const Result idle = run(s, kNone, 0);
  std::printf("%-58s %14s %11.0f ns %10s\n", "none (GPU idle)", "-", idle.quiet_sm, "-");
  const struct {
    Stream kind;
    int odd_only;
    const char* name;
  } cases[] = {
      {kBulk, 0, "bulk copies into shared memory, every SM"},
      {kBulkRows, 0, "bulk copies of 256-byte rows 2 KB apart, every SM"},
      {kCpAsync, 0, "cp.async 16 B a thread into shared memory, every SM"},
      {kLoads, 0, "loads into registers (no L1 allocation), every SM"},
      {kLoads, 1, "loads into registers (no L1 allocation), odd SMs"},
  };
  for (const auto& c : cases) {
    const Result r = run(s, c.kind, c.odd_only);
    char with[32] = "-", without[32] = "-";
    if (r.stream_sm > 0) std::snprintf(with, sizeof(with), "%11.0f ns", r.stream_sm);
    if (r.quiet_sm > 0) std::snprintf(without, sizeof(without), "%11.0f ns", r.quiet_sm);
    std::printf("%-58s %14s %14s %10.0f %7.0f%%\n", c.name, with, without, r.gbps, 100 * r.inside);
  }
  CK(cudaFree(s.bytes));
  CK(cudaFree(s.done));
  CK(cudaFree(s.res));
  CK(cudaFree(s.sink_u));
  CK(cudaFree(s.sink_f));
  CK(cudaFree(s.ns));
  CK(cudaFree(s.sm));
  return 0;
}
