// bench/kernels/burst_onset_probe.cu — a standalone lab file: what does the decode GEMM's arrival cost
// the kernel it launches beside? In a batch-1 decode step the cluster attention triggers the o
// projection as it passes its wait; the GEMM's CTAs are placed on the attention's SMs, issue their
// pre-wait weight burst and wait. Run AD measured the attention's span walk 1.2 µs slower with the GEMM
// behind it; run AN ruled out the GEMM's waiting warps (AN3) and a copy stream's bytes landing beside
// the walk in steady state (AN4-AN6, smem_work_probe.cu). What is left of the GEMM's arrival is its
// onset: the CTAs' placement and prologue (barrier init, fence) and the burst's first requests.
//
// One work block an SM (128 threads) runs kRounds rounds of the span walk's arithmetic on shared memory
// alone (smem_work_probe's rounds), recording the time of every round's end. After round kTrigger every
// block triggers its programmatic dependents (griddepcontrol.launch_dependents), which were launched
// behind it on the same stream with programmatic serialization, exactly as the decode step's kernels:
//   none       no dependent launch (the baseline);
//   placed     2 CTAs an SM of 256 threads with 91 KB of shared memory (the o projection's 9-stage CTAs):
//              9 mbarriers initialized, the init fence, then griddepcontrol.wait;
//   placed2k   the same with 2 KB of shared memory;
//   burst      the same, thread 0 first requesting 5 stages of 8 KB bulk copies (the pre-wait burst);
//   stream     the same, thread 0 streaming 8 KB copies, 8 in flight, 96 of them, before its wait.
// Per round, the median over the blocks of the round's duration, then the median over 11 launches; ns.
//
// Run AN (H200; the GPU's timer ticks every 32 ns): 512 ns a round throughout with no dependents; placed
// (91 KB or 2 KB) one round at 544; with the burst four rounds at 544, streaming three: the arrival costs
// the work beside it ~0.1 µs in all, a tenth of run AD's 1.2 µs.
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/burst_onset_probe.cu -o burst_onset_probe; run alone on an H100 / H200 (~1 s,
// 1 GB; tools/gpu_run.sh OUT probes with RILL_PROBES=burst_onset). Not part of the library or of any
// test: a measurement (bench/RESULTS.md, run AN).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_util.cuh"

namespace {

using rill::probe::kChunk;
using rill::probe::kMaxDepth;
using rill::probe::median;
using rill::probe::now_ns;

constexpr int kThreads = rill::probe::WalkWork::kThreads;
constexpr int kRounds = 48, kTrigger = 12;

// The walk's rounds (probe_util.cuh's WalkWork), every round's end time in times[block][1 + r].
__global__ void __launch_bounds__(kThreads) work_kernel(unsigned long long* times, float* sink) {
  __shared__ __align__(16) rill::probe::WalkWork w;
  w.fill();
  __syncthreads();
  unsigned long long* my = times + size_t(blockIdx.x) * (kRounds + 1);
  if (threadIdx.x == 0) my[0] = now_ns();
  float o[4][4] = {};
  for (int r = 0; r < kRounds; ++r) {
    if (r == kTrigger) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    w.round(o);
    if (threadIdx.x == 0) my[1 + r] = now_ns();
  }
  w.keep(o, sink);
}

enum Mode { kNone, kPlaced, kPlacedSmall, kBurst, kStream };
constexpr int kDepCtas = 2, kDepThreads = 256, kStages = 9, kBurstStages = 5, kStreamCopies = 96;
constexpr size_t kDepSmem = 91 * 1024;  // the o projection's 9-stage CTAs (two an SM)

template <Mode kMode>
__global__ void __launch_bounds__(kDepThreads) dependent_kernel(const unsigned char* src, int64_t chunks) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages];
  unsigned char* stage = smem_raw + ((1024 - (rill::cuda::smem_addr(smem_raw) & 1023u)) & 1023u);
  if (threadIdx.x == 0) {
    for (int d = 0; d < kStages; ++d) rill::cuda::mbar_init(&full[d], 1);
    rill::cuda::mbar_init_fence();
  }
  __syncthreads();
  int issued = 0;
  if (threadIdx.x == 0 && kMode != kPlaced) {
    const uint64_t policy = rill::cuda::l2_evict_first_policy();
    const int total = kMode == kBurst ? kBurstStages : kStreamCopies;
    const int depth = kMode == kBurst ? kBurstStages : kMaxDepth;
    int64_t chunk = blockIdx.x;
    for (; issued < total; ++issued) {
      const int d = issued % depth;
      if (issued >= depth) rill::cuda::mbar_wait(&full[d], unsigned(issued / depth - 1) & 1u);
      rill::cuda::mbar_arrive_expect_tx(&full[d], kChunk);
      rill::probe::bulk_load(stage + d * kChunk, src + chunk * kChunk, kChunk, &full[d], policy);
      chunk += gridDim.x;
      if (chunk >= chunks) chunk -= chunks;
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && issued > 0) {  // the copies still in flight
    const int depth = kMode == kBurst ? kBurstStages : kMaxDepth;
    for (int i = issued > depth ? issued - depth : 0; i < issued; ++i)
      rill::cuda::mbar_wait(&full[i % depth], unsigned(i / depth) & 1u);
  }
}

template <Mode kMode>
void launch_dependent(const unsigned char* src, int64_t chunks, int sms, cudaStream_t stream, size_t smem = kDepSmem) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(kDepCtas * sms));
  cfg.blockDim = dim3(kDepThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, dependent_kernel<kMode>, src, chunks));
}

// Per round, the median over blocks of its duration, then the median over launches.
std::vector<double> run(Mode mode, const unsigned char* src, int64_t chunks, int sms, unsigned long long* d_times,
                        float* d_sink, cudaStream_t stream) {
  std::vector<std::vector<double>> per_round(kRounds);
  std::vector<unsigned long long> times(size_t(sms) * (kRounds + 1));
  for (int launch = 0; launch <= 11; ++launch) {
    work_kernel<<<sms, kThreads, 0, stream>>>(d_times, d_sink);
    CK(cudaGetLastError());
    if (mode == kPlaced) launch_dependent<kPlaced>(src, chunks, sms, stream);
    if (mode == kPlacedSmall) launch_dependent<kPlaced>(src, chunks, sms, stream, 2048);
    if (mode == kBurst) launch_dependent<kBurst>(src, chunks, sms, stream);
    if (mode == kStream) launch_dependent<kStream>(src, chunks, sms, stream);
    CK(cudaStreamSynchronize(stream));
    if (launch == 0) continue;  // (untimed: module load, first placement)
    CK(cudaMemcpy(times.data(), d_times, times.size() * sizeof(times[0]), cudaMemcpyDeviceToHost));
    for (int r = 0; r < kRounds; ++r) {
      std::vector<double> d;
      for (int b = 0; b < sms; ++b) {
        const unsigned long long* my = times.data() + size_t(b) * (kRounds + 1);
        d.push_back(double(my[1 + r] - my[r]));
      }
      per_round[size_t(r)].push_back(median(d));
    }
  }
  std::vector<double> out;
  for (const auto& v : per_round) out.push_back(median(v));
  return out;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  cudaDeviceProp prop;
  const int sms = rill::probe::device_sms(prop);
  std::printf("burst onset probe: %s, %d SMs; one work block an SM, %d rounds of the span walk's arithmetic, its "
              "dependents triggered after round %d\n",
              prop.name, sms, kRounds, kTrigger);
  const size_t bytes = size_t(1) << 30;
  unsigned char* src = nullptr;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMemset(src, 1, bytes));
  unsigned long long* d_times = nullptr;
  float* d_sink = nullptr;
  CK(cudaMalloc(&d_times, size_t(sms) * (kRounds + 1) * sizeof(unsigned long long)));
  CK(cudaMalloc(&d_sink, sizeof(float)));
  for (auto k : {dependent_kernel<kPlaced>, dependent_kernel<kBurst>, dependent_kernel<kStream>}) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kDepSmem)));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  }
  CK(cudaFuncSetAttribute(work_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  cudaStream_t stream = nullptr;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int64_t chunks = int64_t(bytes / kChunk);
  const struct {
    Mode mode;
    const char* name;
  } modes[] = {{kNone, "none"},     {kPlaced, "placed"}, {kPlacedSmall, "placed2k"},
               {kBurst, "burst"},    {kStream, "stream"}};
  // Rounds shown: three before the trigger, then each of the next eight, then the means of later windows.
  std::printf("%-8s %8s %8s %8s | %7s %7s %7s %7s %7s %7s %7s %7s | %9s %9s\n", "ns/round", "r9", "r10", "r11",
              "r12", "r13", "r14", "r15", "r16", "r17", "r18", "r19", "r20-31", "r32-47");
  for (const auto& m : modes) {
    const std::vector<double> d = run(m.mode, src, chunks, sms, d_times, d_sink, stream);
    auto mean = [&](int a, int b) {
      double s = 0;
      for (int r = a; r <= b; ++r) s += d[size_t(r)];
      return s / (b - a + 1);
    };
    std::printf("%-8s %8.0f %8.0f %8.0f | %7.0f %7.0f %7.0f %7.0f %7.0f %7.0f %7.0f %7.0f | %9.0f %9.0f\n",
                m.name, d[9], d[10], d[11], d[12], d[13], d[14], d[15], d[16], d[17], d[18], d[19], mean(20, 31),
                mean(32, 47));
  }
  CK(cudaFree(src));
  CK(cudaFree(d_times));
  CK(cudaFree(d_sink));
  return 0;
}
