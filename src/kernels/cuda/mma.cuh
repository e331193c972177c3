// kernels/cuda/mma.cuh — thin wrappers over the Ampere+ warp-level tensor-core instructions used
// by the attention kernels: cp.async (16-byte, zero-fill), ldmatrix (plain and transposed),
// mma.sync m16n8k16 bf16 → f32, and (sm_90+) loads from a cluster peer's shared memory. Fragment
// layouts are the PTX ISA's (groupID = lane / 4, tid_in_group = lane % 4); see the comments at each use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rill::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Loads from block `rank` of this thread-block cluster's shared memory at this block's shared
// address `at` (mapa + ld.shared::cluster: 32-bit addresses, where map_shared_rank's generic
// pointers take two registers each; sm_90+). Volatile: kept after the cluster barrier before them.
// This block's shared address `at` in block `rank` of the cluster.
__device__ __forceinline__ uint32_t map_cluster(uint32_t at, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(at), "r"(rank));
  return remote;
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t at, int rank) {
  const uint32_t remote = map_cluster(at, rank);
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
__device__ __forceinline__ float2 ld_cluster_f32x2(uint32_t at, int rank) {
  const uint32_t remote = map_cluster(at, rank);
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
  return v;
}

// Stores into block `rank` of this cluster's shared memory at this block's shared address `at`,
// completing on that block's mbarrier at this block's address `bar` with their bytes (st.async, sm_90+:
// the receiver's wait on its mbarrier orders them — no release fence, which behind a weight stream
// waits for the SM's copies in flight: bench/RESULTS.md run AE).
__device__ __forceinline__ void st_async_cluster(uint32_t at, uint32_t bar, int rank, float4 v) {
  const uint32_t remote = map_cluster(at, rank), remote_bar = map_cluster(bar, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
               ::"r"(remote), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(remote_bar)
               : "memory");
}
__device__ __forceinline__ void st_async_cluster(uint32_t at, uint32_t bar, int rank, float v) {
  const uint32_t remote = map_cluster(at, rank), remote_bar = map_cluster(bar, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(remote), "f"(v),
               "r"(remote_bar)
               : "memory");
}
__device__ __forceinline__ void st_async_cluster(uint32_t at, uint32_t bar, int rank, float2 v) {
  const uint32_t remote = map_cluster(at, rank), remote_bar = map_cluster(bar, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(remote),
               "f"(v.x), "f"(v.y), "r"(remote_bar)
               : "memory");
}

/// 16 bytes global → shared, asynchronously; when !valid the destination is zero-filled.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
// The same with an L2 policy (l2_evict_first_policy: data read once a step).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid, uint64_t policy) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes), "l"(policy));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

/// c[16x8] += a[16x16] · b[16x8] (a row-major, b column-major), bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace rill::cuda
