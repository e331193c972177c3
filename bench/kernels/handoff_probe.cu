// bench/kernels/handoff_probe.cu — a standalone lab file: what does a kernel boundary cost inside a
// replayed CUDA graph on this GPU, with programmatic dependent launch and without? A batch-1 decode
// step is ~290 kernels; the latency-bound ones (norms, RoPE, attention, the span combine) each span
// 3.5-11 µs of the step's critical path (bench/RESULTS.md's traces) for one or two memory round
// trips of work. This probe separates the part of a span that no kernel's work can remove: from the
// moment a kernel's last block is done to the moment the next kernel's wait releases.
//
// Each kernel of a chain: every block waits (griddepcontrol.wait), lets the next kernel launch, and
// block 0 makes one dependent load of what the previous kernel stored and stores the next value (a
// chain of data, so the order is real); every block then records the time it was done (an atomic
// max). Block 0 records when it reached its wait and when the wait released it. Chains of 48 kernels
// are captured once into a graph and replayed; per boundary (the middle 32 kernels, medians over 9
// replays): span = release to the next release, handoff = the kernel's last block done to the next
// release, lead = arrival at the wait to release. Grids: one block of 32 threads (a batch-1 norm),
// 132 blocks, 396 blocks of 72 KB shared memory (three an SM: a decode GEMM's grid), and the last two
// alternating with one block (GEMM → norm → GEMM).
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/handoff_probe.cu -o handoff_probe; run alone on an H100 / H200 (~1 s).
// Not part of the library or of any test: a measurement (bench/RESULTS.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_util.cuh"

namespace {

constexpr int kChain = 48, kFrom = 8, kCount = 32, kReps = 9;

struct Rec {
  unsigned long long arrive, release, done;
};

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__global__ void hop_kernel(Rec* rec, int idx, int* data) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool lead = blockIdx.x == 0 && threadIdx.x == 0;
  const unsigned long long arrive = lead ? now_ns() : 0;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (lead) {
    rec[idx].arrive = arrive;
    rec[idx].release = now_ns();
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (lead) {
    int v;
    asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(data + idx) : "memory");
    data[idx + 1] = v + 1;
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&rec[idx].done, now_ns());
#endif
}

struct Shape {
  const char* name;
  unsigned grid, threads;
  size_t smem;
};

// Median µs of each quantity over the middle boundaries and the replays.
void run_chain(const char* label, const Shape* shapes, int n_shapes, bool pdl, Rec* rec, int* data) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kChain; ++i) {
    const Shape& sh = shapes[i % n_shapes];
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(sh.grid);
    cfg.blockDim = dim3(sh.threads);
    cfg.dynamicSmemBytes = sh.smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, hop_kernel, rec, i, data));
  }
  CK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  // Per boundary kind (the shape the boundary leaves: alternating chains have two).
  std::vector<std::vector<double>> span(n_shapes), handoff(n_shapes), lead(n_shapes);
  std::vector<Rec> host(kChain);
  for (int rep = 0; rep <= kReps; ++rep) {
    CK(cudaMemsetAsync(rec, 0, sizeof(Rec) * kChain, s));
    CK(cudaMemsetAsync(data, 0, sizeof(int) * (kChain + 1), s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    CK(cudaMemcpy(host.data(), rec, sizeof(Rec) * kChain, cudaMemcpyDeviceToHost));
    if (rep == 0) continue;  // warm-up
    for (int i = kFrom; i < kFrom + kCount; ++i) {
      const int k = i % n_shapes;
      span[k].push_back(double(host[i + 1].release - host[i].release) / 1e3);
      handoff[k].push_back(double(host[i + 1].release) / 1e3 - double(host[i].done) / 1e3);
      lead[k].push_back(double(host[i].release - host[i].arrive) / 1e3);
    }
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int k = 0; k < n_shapes; ++k) {
    char row[96];
    const bool alt = n_shapes > 1;
    std::snprintf(row, sizeof(row), "%s%s%s", label, alt ? ": after " : "", alt ? shapes[k].name : "");
    std::printf("%-60s %-4s %10.2f %10.2f %10.2f\n", row, pdl ? "pdl" : "off", med(span[k]), med(handoff[k]),
                med(lead[k]));
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(s));
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  std::printf("device %s, %d SMs; µs, medians over %d boundaries x %d replays of a %d-kernel graph\n", prop.name,
              sms, kCount, kReps, kChain);
  Rec* rec;
  int* data;
  CK(cudaMalloc(&rec, sizeof(Rec) * kChain));
  CK(cudaMalloc(&data, sizeof(int) * (kChain + 1)));
  const size_t big = 72 * 1024;
  CK(cudaFuncSetAttribute(hop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(big)));
  const Shape one{"1 block", 1, 32, 0}, wave{"one block an SM", unsigned(sms), 128, 0},
      gemm{"3 blocks an SM, 72 KB each", unsigned(3 * sms), 128, big};
  std::printf("%-60s %-4s %10s %10s %10s\n", "chain", "", "span", "handoff", "lead");
  for (bool pdl : {true, false}) {
    run_chain("1 block of 32 threads", &one, 1, pdl, rec, data);
    run_chain("one block of 128 an SM", &wave, 1, pdl, rec, data);
    run_chain("three blocks of 128 an SM, 72 KB each", &gemm, 1, pdl, rec, data);
    const Shape alt[2] = {gemm, one};
    run_chain("alternating", alt, 2, pdl, rec, data);
    const Shape alt2[2] = {wave, one};
    run_chain("alternating", alt2, 2, pdl, rec, data);
  }
  return 0;
}
