// bench/kernels/gpc_probe.cu — a standalone lab file: which GPU this is and how its 132 SMs group into
// GPCs. Machines of the same kind decode the same code 2-4% apart at batch 1 (bench/RESULTS.md runs AK,
// AO), while their copy rates agree within 1%. Dies of one product differ in which TPCs were fused off,
// so their GPCs hold different numbers of SMs, and a thread-block cluster must sit inside one GPC: the
// decode step's clustered kernels (the 8- and 16-block attention clusters, the norm's and the argmax's
// 8-block clusters) may be placed differently on each. This probe names the die's layout so that a
// figure can be set next to it.
//
// What it prints:
//   - the device's UUID, PCI bus id, SM count, L2 size and clocks;
//   - its copy rate as cuda_kernels_bench times it (a 2 GiB device-to-device copy, read + write bytes,
//     median of 9), the bound's denominator in bench/RESULTS.md;
//   - for cluster sizes 1-16, how many clusters of one block an SM (the largest shared-memory carveout)
//     can be resident at once (cudaOccupancyMaxActiveClusters): with g_i SMs in GPC i that is
//     sum_i floor(g_i / size);
//   - the groups of SMs that clusters span: every size is launched as a full wave of such clusters whose
//     blocks record their SM and then wait until every block of the launch has started, so the clusters
//     are placed side by side. The SMs of one cluster share a GPC; joining them over every size and a
//     few launches gives the groups (sizes 7, 8 and 9 tile groups of 14, 16 and 18 SMs exactly, so every
//     SM is joined to its group's others). A group is a GPC or part of one: on the H200s measured so far
//     132 SMs formed 7 groups of 16-18 and 16 SMs that clusters join only as 8 + 2 + 2 + 2 + 2 (run AO).
//     Printed as each group's SM count and SM ids.
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/gpc_probe.cu -o gpc_probe; runs in well under a second on an H100 / H200
// (tools/gpu_run.sh runs it at the start of every call). Not part of the library or of any test.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "probe_util.cuh"

namespace {

using rill::probe::now_ns;
using rill::probe::smid;

constexpr int kMaxSize = 16;
constexpr int kLaunches = 4;  // launches a size: placements may differ between them

// Each block records its SM, counts itself in, and waits until every block of the grid has (or 20 ms
// passed: a grid that is not one wave must not hang the probe).
__global__ void place_kernel(int* sm_of_block, unsigned* started, unsigned blocks) {
  // (its dynamic shared memory, never touched, keeps one block an SM)
  if (threadIdx.x != 0) return;
  sm_of_block[blockIdx.x] = int(smid());
  atomicAdd(started, 1u);
  const unsigned long long t0 = now_ns();
  while (atomicAdd(started, 0u) < blocks && now_ns() - t0 < 20'000'000ull) {
  }
}

struct Gpcs {  // union-find over the SM ids
  std::vector<int> parent;
  explicit Gpcs(int n) : parent(size_t(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[size_t(x)] == x ? x : parent[size_t(x)] = find(parent[size_t(x)]); }
  void join(int a, int b) { parent[size_t(find(a))] = find(b); }
};

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  std::string uuid;
  for (int i = 0; i < 16; ++i) {
    char b[4];
    std::snprintf(b, sizeof b, "%02x", unsigned(static_cast<unsigned char>(prop.uuid.bytes[i])));
    uuid += b;
    if (i == 3 || i == 5 || i == 7 || i == 9) uuid += '-';
  }
  int sm_khz = 0, mem_khz = 0;
  CK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, 0));
  CK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0));
  std::printf("gpu %s, GPU-%s, pci %04x:%02x:%02x, %d SMs, L2 %d KB, SM %d MHz, memory %d MHz\n", prop.name,
              uuid.c_str(), unsigned(prop.pciDomainID), unsigned(prop.pciBusID), unsigned(prop.pciDeviceID), sms,
              prop.l2CacheSize / 1024, sm_khz / 1000, mem_khz / 1000);

  {  // The copy rate (cuda_kernels_bench's "HBM copy D2D 2 GiB"): read + write bytes over the median time.
    const size_t bytes = size_t(2) << 30;
    void *a = nullptr, *b = nullptr;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 0x3c, bytes));
    // (probe_util's timing; its L2 flush, here a small one outside the timed copy, does not matter at 2 GiB)
    const double med = rill::probe::median_us([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); },
                                              b, size_t(1) << 20, 9) / 1e3;
    std::printf("copy rate: 2 GiB device-to-device in %.4f ms (median of 9), %.0f GB/s read + write\n", med,
                2.0 * double(bytes) / (med * 1e-3) / 1e9);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }

  // One block an SM: the largest dynamic shared memory a block may have.
  const size_t smem = prop.sharedMemPerBlockOptin;
  CK(cudaFuncSetAttribute(place_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CK(cudaFuncSetAttribute(place_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CK(cudaFuncSetAttribute(place_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));

  int* d_sm = nullptr;
  unsigned* d_started = nullptr;
  CK(cudaMalloc(&d_sm, sizeof(int) * size_t(sms)));
  CK(cudaMalloc(&d_started, sizeof(unsigned)));
  Gpcs gpcs(sms);
  std::vector<bool> seen(size_t(sms), false);
  std::string fits;
  for (int size = 1; size <= kMaxSize; ++size) {
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = rill::probe::cluster_launch(1, size, 32, smem, attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, place_kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      clusters = 0;
    }
    fits += (size > 1 ? " " : "") + std::to_string(size) + ":" + std::to_string(clusters);
    if (clusters == 0 || size == 1) continue;
    cfg = rill::probe::cluster_launch(clusters, size, 32, smem, attr);
    const unsigned blocks = unsigned(clusters * size);
    for (int l = 0; l < kLaunches; ++l) {
      CK(cudaMemset(d_started, 0, sizeof(unsigned)));
      CK(cudaLaunchKernelEx(&cfg, place_kernel, d_sm, d_started, blocks));
      CK(cudaDeviceSynchronize());
      std::vector<int> sm(blocks);
      CK(cudaMemcpy(sm.data(), d_sm, sizeof(int) * blocks, cudaMemcpyDeviceToHost));
      for (unsigned b = 0; b < blocks; ++b) {
        seen[size_t(sm[b])] = true;
        if (b % unsigned(size) != 0) gpcs.join(sm[b], sm[b - b % unsigned(size)]);
      }
    }
  }
  std::printf("clusters of one block an SM resident at once (size:clusters): %s\n", fits.c_str());

  std::map<int, std::vector<int>> groups;
  for (int s = 0; s < sms; ++s)
    if (seen[size_t(s)]) groups[gpcs.find(s)].push_back(s);
  std::vector<std::vector<int>> list;
  for (auto& [root, members] : groups) list.push_back(members);
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() > b.size() : a.front() < b.front();
  });
  std::string counts;
  int placed = 0;
  for (const auto& g : list) {
    counts += (counts.empty() ? "" : " ") + std::to_string(g.size());
    placed += int(g.size());
  }
  std::printf("gpc layout: %zu groups of SMs that clusters span, %s SMs (%d of %d SMs placed in a cluster)\n",
              list.size(), counts.c_str(),
              placed, sms);
  for (const auto& g : list) {
    std::string ids;
    for (int s : g) ids += (ids.empty() ? "" : ",") + std::to_string(s);
    std::printf("  %2zu SMs: %s\n", g.size(), ids.c_str());
  }
  CK(cudaFree(d_sm));
  CK(cudaFree(d_started));
  return 0;
}
