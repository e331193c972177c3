// kernels/cuda/attention_decode.cu — the batch-invariant decode attention at one m-tile (≤ 16
// packed query rows: decode steps and short speculative steps of GQA models; head_dim 64 and 128)
// and the span combine every split schedule ends with. Split from attention.cu (the mma.sync
// kernels of every schedule and the dispatch), whose header describes the invariant mode's spans
// and schedules; the span walk these kernels share is attention_decode.cuh, the per-tile
// arithmetic attention_common.cuh. Three kernels for one m-tile, the same bits:
//   - the four-warp split kernel: one block a (row, kv head) walking every step-th span, each
//     span's partial to the workspace, then the span combine;
//   - the cluster kernel: ≤ 16 spans and one wave of clusters, a cluster a (row, kv head), the
//     combine inside (the partials pushed between its blocks' shared memory);
//   - the four-warp fold kernel: a block a (row, kv head) merging every span as it goes, where a
//     split block would walk every span of its row anyway (batch ≥ 64 at 512 keys on the 8B shape).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/split_schedule.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_rope.cuh"

namespace rill::cuda {
namespace attention_detail {
namespace {

bool g_attention_cluster = true;  // set_attention_cluster (RILL_ATTENTION_CLUSTER)
bool g_attention_cluster_push = true;  // set_attention_cluster_push (RILL_ATTENTION_CLUSTER_PUSH)
std::atomic<uint64_t> g_attention_cluster_launches{0};  // (several devices may launch at once)
int g_attention_decode_fold = 2;  // set_attention_decode_fold (RILL_ATTENTION_DECODE_FOLD)
int g_attention_combine_spans = 0;  // set_attention_combine_spans (RILL_ATTENTION_COMBINE_SPANS)
std::atomic<uint64_t> g_attention_decode_fold_launches{0};
// Whether this thread's last launch_attention ended with the span combine as a kernel of its own
// (attention_ended_with_combine; each backend launches from its own thread).
thread_local bool g_ended_with_combine = false;
thread_local int g_last_combine_spans = 0;  // that combine's chunk (attention_last_combine_spans)

template <int D, bool kRope = false>
__global__ void __launch_bounds__(128) attention_decode_split_kernel(const __grid_constant__ AttnKernelArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  decode_split_spans<D, false, kRope>(a, smem_raw, int(blockIdx.z) / a.span_step, int(blockIdx.z) % a.span_step);
  pdl_trace_done();
}

// The fold schedule for one m-tile (decode rows beyond a wave of split blocks: batch 64+ of the 8B
// shape): a block a (row, kv head) walking its spans in order on four warps, merging them as it
// goes (decode_split_spans' kFold) — attention_kernel<D, 1, 64, true>'s bits, whose one warp ran
// each tile as one latency-bound chain (~1 TB/s of K/V). Grid (1, kv heads, rows).
template <int D>
__global__ void __launch_bounds__(128, 5) attention_decode_fold_kernel(const __grid_constant__ AttnKernelArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  decode_split_spans<D, false, false, true>(a, smem_raw, int(blockIdx.z), 0);
}

// Short contexts (a row's spans ≤ the cluster's kMaxCluster blocks): the split attention and its
// span combine as one kernel. A thread-block cluster a (row, kv head), block r of it computing span
// r into its own shared memory; then each block folds a 1/C share of the (packed row, dim) outputs
// that exist over the C blocks' partials in span order with attention_combine_spans_kernel's
// operations — the same bits, without the combine's launch, hand-off and partials' round trips
// through L2 (a batch-1 decode step at 512 keys: ~3.8 µs a layer of critical path for the combine
// kernel, run P). How the partials reach the folding blocks:
//   - kPush (the default, RILL_ATTENTION_CLUSTER_PUSH): each block pushes every block its share of its
//     partial and its rows' (m, l) with st.async into a receive area of that block's shared memory,
//     completing on the receiver's mbarrier; a block folds once its mbarrier has every block's bytes.
//     No release fence anywhere: behind the o projection's weight burst a cluster barrier's release
//     waits for the SM's copies in flight (~1 µs at 512 keys in run AE's trace; 5-8 µs beside a probe's
//     stream: bench/kernels/cluster_barrier_probe.cu), and the kernel needed two. The receivers'
//     mbarriers are initialized first thing and published by a relaxed cluster arrive, waited for only
//     after the walk (an acquire: no drain).
//   - else: the cluster barrier, the fold reading every block's partial through distributed shared
//     memory, and a second barrier so that no block leaves while another reads its shared memory.
constexpr int kMaxCluster = 16;

template <int D>
struct ClusterPushCfg {
  using C = DecodeSplitCfg<D>;
  // The receive area after the walk's shared memory: [C][share] o (C shares of the rows' C · share
  // outputs: at most kBM · D floats), then [kMaxCluster][kBM] (m, l).
  static constexpr size_t kOBytes = size_t(C::kBM) * D * sizeof(float);
  static constexpr size_t kMlBytes = size_t(kMaxCluster) * C::kBM * sizeof(float2);
  static constexpr size_t kSmemBytes = C::kSmemBytes + kOBytes + kMlBytes;
  static_assert(C::kSmemBytes % 16 == 0, "a 16-byte aligned receive area");
};

template <int D, bool kRope = false, bool kPush = true>
__global__ void __launch_bounds__(128, kPush ? 4 : 5)
    attention_decode_cluster_kernel(const __grid_constant__ AttnKernelArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters: sm_90+ (cluster_fits keeps older GPUs off it)
  using C = DecodeSplitCfg<D>;
  constexpr int kBM = C::kBM;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int n_blocks = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int row = int(blockIdx.z) / n_blocks;
  float* part_s = reinterpret_cast<float*>(smem_raw + C::kQBytes);  // [kBM][D] o, then [kBM] (m, l)
  float2* ml_s = reinterpret_cast<float2*>(part_s + kBM * D);
  __shared__ int rows_s[3];  // the block's (m0, packed, q_begin), read by the span walk before its wait
  __shared__ __align__(8) uint64_t recv_bar;  // kPush: every block's share of this block's outputs landed
  float* recv_o = reinterpret_cast<float*>(smem_raw + C::kSmemBytes);
  float2* recv_ml = reinterpret_cast<float2*>(smem_raw + C::kSmemBytes + ClusterPushCfg<D>::kOBytes);
  if constexpr (kPush) {
    if (threadIdx.x == 0) {
      mbar_init(&recv_bar, 1);
      mbar_init_fence();  // (the lightweight fence for mbarrier.init, then the relaxed arrive publishes it)
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  }
#if defined(RILL_PDL_TRACE)
  if (threadIdx.x == 0) g_cluster_trace_times[0] = g_cluster_trace_times[1] = 0;
#endif
  if (!decode_split_spans<D, true, kRope>(a, smem_raw, row, rank, rows_s) && threadIdx.x < kBM)
    ml_s[threadIdx.x] = make_float2(-INFINITY, 0.f);  // no span here: every row skips this block
  pdl_trace_mark(2);  // (trace builds: this block's span is done)
#if defined(RILL_PDL_TRACE)
  if (threadIdx.x == 0 && g_cluster_trace_times[0]) g_cluster_trace_times[1] = global_ns();
#endif
  __syncthreads();  // rows_s (a block without a span returned with no barrier after thread 0 wrote it)
  const int m0 = rows_s[0], packed = rows_s[1], q_begin = rows_s[2];
  // A 1/C share of the block's packed rows that exist: a batch-1 row of the 8B shape packs 4 of the
  // 16 (its GQA group), so each block folds 4·D / C outputs, a thread at most one (shares of all 16
  // rows left 12 of 16 blocks idle, and with C = 8 gave two blocks two outputs a thread, a distributed
  // round trip and a merge chain after the other). rows · D / C is exact and a multiple of 4 (D 64 or
  // 128, C a power of two ≤ 16).
  const int rows = m0 >= 0 ? min(kBM, packed - m0) : 0, total = rows * D, per = total / n_blocks;
  if constexpr (kPush) {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every block's mbarrier is initialized
    if (rows > 0) {  // (the barrier above: this block's partial and (m, l) are in its shared memory)
      // Block j gets outputs [j · per, (j + 1) · per) of this block's partial at recv_o[rank · per ...]
      // and the rows' (m, l) at recv_ml[rank · kBM ...].
      const int vecs = per / 4, items = vecs + rows;
      const uint32_t bar = smem_addr(&recv_bar);
      for (int i = int(threadIdx.x); i < n_blocks * items; i += C::kThreads) {
        const int j = i / items, k = i % items;
        if (k < vecs)
          st_async_cluster(smem_addr(recv_o + rank * per + 4 * k), bar, j,
                           *reinterpret_cast<const float4*>(part_s + j * per + 4 * k));
        else
          st_async_cluster(smem_addr(recv_ml + rank * kBM + (k - vecs)), bar, j, ml_s[k - vecs]);
      }
      if (threadIdx.x == 0) mbar_arrive_expect_tx(&recv_bar, unsigned(n_blocks * (vecs * 16 + rows * 8)));
      mbar_wait(&recv_bar, 0);
    }
  } else {
    cluster.sync();  // every block's partial is in its shared memory (and rows_s)
  }
  pdl_trace_mark(3);  // (every block's partial has reached this block)
#if defined(RILL_PDL_TRACE)
  // Trace builds: which of the cluster's blocks the barrier waited for — marks 5 and 6 the latest Q /
  // first tile landing and span end over the blocks with a span, 7 the span end of the last of them
  // (the span holding the step's new keys, whose tile is copied after the wait). (Not with kPush: the
  // other blocks' times would be read through distributed shared memory after they may have left.)
  if (!kPush && pdl_trace_block0()) {
    unsigned long long m1 = 0, m2 = 0, last = 0;
    for (int j = 0; j < n_blocks; ++j) {
      const float2 v0 = ld_cluster_f32x2(smem_addr(&g_cluster_trace_times[0]), j);
      const float2 v1 = ld_cluster_f32x2(smem_addr(&g_cluster_trace_times[1]), j);
      const unsigned long long t1 = (uint64_t(__float_as_uint(v0.y)) << 32) | __float_as_uint(v0.x);
      const unsigned long long t2 = (uint64_t(__float_as_uint(v1.y)) << 32) | __float_as_uint(v1.x);
      if (t1 == 0) continue;
      m1 = max(m1, t1), m2 = max(m2, t2), last = t2;
    }
    pdl_trace_mark_at(5, m1);
    pdl_trace_mark_at(6, m2);
    pdl_trace_mark_at(7, last);
  }
#endif
  if (rows > 0) {
    for (int e = rank * per + int(threadIdx.x); e < (rank + 1) * per; e += C::kThreads) {
      const int r = e / D, d = e % D, m = m0 + r;
      // Every block's value and (m, l): from the receive area (kPush), else requested through
      // distributed shared memory before the fold (one round trip).
      float o[kMaxCluster];
      float2 ml[kMaxCluster];
      const uint32_t o_at = smem_addr(part_s + r * D + d), ml_at = smem_addr(ml_s + r);
#pragma unroll
      for (int j = 0; j < kMaxCluster; ++j)
        if (j < n_blocks) {
          if constexpr (kPush) {
            o[j] = recv_o[j * per + (e - rank * per)];
            ml[j] = recv_ml[j * kBM + r];
          } else {
            o[j] = ld_cluster_f32(o_at, j);
            ml[j] = ld_cluster_f32x2(ml_at, j);
          }
        }
      float acc = 0.f, acc_l = 0.f, acc_m = -INFINITY;  // SpanMerge over the spans in order
#pragma unroll
      for (int j = 0; j < kMaxCluster; ++j) {
        if (j >= n_blocks) break;
        if (ml[j].x == -INFINITY) continue;  // the span saw no key of this row
        const float m_new = fmaxf(acc_m, ml[j].x);
        const float wa = exp2_ftz(acc_m - m_new), wb = exp2_ftz(ml[j].x - m_new);
        acc = __fmaf_rn(acc, wa, __fmul_rn(o[j], wb));
        acc_l = __fmaf_rn(acc_l, wa, __fmul_rn(ml[j].y, wb));
        acc_m = m_new;
      }
      const int64_t idx = (q_begin + m / a.group) * int64_t(a.hq) + int(blockIdx.y) * a.group + m % a.group;
      a.out[idx * D + d] = __float2bfloat16_rn(span_result(acc, acc_l));
    }
  }
  pdl_trace_mark(4);  // (the fold is done)
  // kPush: a block leaves once its own share has landed — every push into it has — and no block reads
  // another's shared memory. Else the last barrier: no block leaves while another reads its partial.
  if constexpr (!kPush) cluster.sync();
  pdl_trace_done();
#endif
}

// Invariant mode, split schedule: one block per (row, head, query token, 32 output dims) folds
// the spans the token sees, in order, with SpanMerge's operations — the bits of the fold
// schedule. The grid depends on num_rows, max_seqlen_q and D only; positions come from
// cu_seqlens_q / context_lens. A span's merge weights (a, b) depend on the spans' (m, l) only:
// the running max before span j is the max of the m of the spans before it (skipped spans have
// m = -inf), so a block-wide prefix max gives every span's weights at once. A chunk of up to 256
// spans costs one memory round trip: every thread requests one span's (m, l) and its share of the
// chunk's partials (straight into shared memory) before the scan; then one warp folds, lane d
// running output d's FMA chain over the chunk's spans in order. (Before: one block per head, a
// thread a dim, the partials through registers — 32 blocks at batch 1, 11.9 µs a layer at 8k
// context alone on the H200, 0.42 ms of a 5.3 ms step in the graph; each output's operations are
// unchanged, only who loads what.)
//
// The chunk is kChunk spans on kChunk threads: the smallest of 32 (one warp), 128 and 256 that holds the
// block table's spans (so a captured graph replays the same kernel at any context that fits), fewer
// where RILL_ATTENTION_COMBINE_SPANS forces it (more chunks, each one more round trip). Several rows over
// short tables were the 256-thread block's worst case: batch 16 at 512 keys launches 2,048 blocks of 37 KB
// of shared memory for 9-10 spans each — over two waves — and the o projection's CTAs find no room until
// the last has left (an H100 trace: the combine's span 13.7 µs a layer for 1.6 µs of block 0's work). One
// warp with 5 KB is one wave up to 4,224 blocks. The chunk changes no bit: a span's weights come from the
// running max before it (exact in any order) and the fold is one FMA chain in span order either way.
template <int D, int kChunk>
struct CombineCfg {
  static constexpr int kThreads = kChunk;            // spans a chunk: a thread a span's (m, l)
  static constexpr int kDims = D < 32 ? D : 32;      // output dims a block: one folding warp
  static constexpr int kVec = kDims / 4;             // float4s of a span's slice
  static_assert(D % kDims == 0 && kDims % 4 == 0, "head_dim a multiple of 4 (32 above 32)");
  static_assert(kChunk % 32 == 0 && kChunk >= kDims, "whole warps; the folding warp's lanes");
};

template <int D, int kChunk>
__global__ void __launch_bounds__(kChunk)
    attention_combine_spans_kernel(const float* part_o, const float* part_ml, bf16* out, const int32_t* cu_seqlens_q,
                                   const int32_t* context_lens, int64_t tokens, int hq, int window, int span_keys,
                                   bool early_trigger) {
  using C = CombineCfg<D, kChunk>;
  constexpr int kThreads = C::kThreads, kDims = C::kDims, kVec = C::kVec, kWarps = kThreads / 32;
  __shared__ __align__(16) float o_s[kThreads * kDims];  // the chunk's partials: span j's slice at j·kDims
  __shared__ float4 w_s[kThreads];                     // span c0 + j: (a, b, l, -), a = -1 when skipped
  __shared__ float incl_s[kThreads];                   // prefix max of m through span c0 + j
  __shared__ float warp_s[kWarps];
  const int row = int(blockIdx.x / unsigned(hq)), head = int(blockIdx.x % unsigned(hq));
  const int i = int(blockIdx.y), d0 = int(blockIdx.z) * kDims;
  // The step's lengths were uploaded before its first kernel: read before the wait (launch.h).
  const int q_begin = cu_seqlens_q[row], q_len = cu_seqlens_q[row + 1] - q_begin, ctx_len = context_lens[row];
  pdl_wait_trigger(early_trigger);
  if (i >= q_len) return;
  const int pos = ctx_len - q_len + i;
  const int kv_lo = window > 0 ? max(0, pos - window + 1) : 0;
  const int js = kv_lo / span_keys, je = pos / span_keys + 1;
  const int64_t idx = int64_t(q_begin + i) * hq + head, stride = tokens * hq;
  const int t = int(threadIdx.x), lane = t % 32, wid = t / 32;
  float acc = 0.f, acc_l = 0.f, carry = -INFINITY;  // carry: the max of every earlier chunk's m
  for (int c0 = js; c0 < je; c0 += kThreads) {
    const int n = min(kThreads, je - c0);
    // The chunk's partials (a skipped span's slot is copied but never used), then its (m, l).
    for (int e = t; e < n * kVec; e += kThreads) {
      const int j = e / kVec, v = e % kVec;
      cp_async16(o_s + j * kDims + v * 4, part_o + ((c0 + j) * stride + idx) * D + d0 + v * 4, true);
    }
    cp_async_commit();
    const float2 ml = t < n ? *reinterpret_cast<const float2*>(part_ml + ((c0 + t) * stride + idx) * 2)
                            : make_float2(-INFINITY, 0.f);
    float incl = ml.x;  // max is exact: any order of the fmaxf gives the sequential running max
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const float v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl = fmaxf(incl, v);
    }
    if (lane == 31) warp_s[wid] = incl;
    __syncthreads();
    for (int w = 0; w < wid; ++w) incl = fmaxf(incl, warp_s[w]);
    incl = fmaxf(incl, carry);
    incl_s[t] = incl;
    __syncthreads();
    if (t < n) {
      const float acc_m = t == 0 ? carry : incl_s[t - 1];  // SpanMerge::make's operations
      const float m_new = fmaxf(acc_m, ml.x);
      w_s[t] = ml.x == -INFINITY ? make_float4(-1.f, 0.f, 0.f, 0.f)  // the span saw no key
                                 : make_float4(exp2_ftz(acc_m - m_new), exp2_ftz(ml.x - m_new), ml.y, 0.f);
    }
    carry = incl_s[n - 1];
    cp_async_wait<0>();
    __syncthreads();  // the weights and every thread's partials are in shared memory
    if (t < kDims) {
#pragma unroll 8
      for (int j = 0; j < n; ++j) {
        const float4 w = w_s[j];
        if (w.x < 0.f) continue;
        acc = __fmaf_rn(acc, w.x, __fmul_rn(o_s[j * kDims + t], w.y));
        acc_l = __fmaf_rn(acc_l, w.x, __fmul_rn(w.z, w.y));
      }
    }
    __syncthreads();  // o_s, w_s, incl_s and warp_s are rewritten by the next chunk
  }
  if (t < kDims) out[idx * D + d0 + t] = __float2bfloat16_rn(span_result(acc, acc_l));
  pdl_trace_done();
}

// The cluster kernel's blocks for a row's spans: the next power of two (the fold's shares divide).
unsigned cluster_blocks(int64_t spans) {
  unsigned n = 2;
  while (n < unsigned(spans)) n *= 2;
  return n;
}

// The cluster kernel's dynamic shared memory (kPush: with the receive area).
template <int D, bool kPush>
constexpr size_t cluster_smem() {
  return kPush ? ClusterPushCfg<D>::kSmemBytes : DecodeSplitCfg<D>::kSmemBytes;
}

// Whether clusters of the blocks `spans` needs can be resident (sm_90+, the non-portable 16).
template <int D, bool kRope, bool kPush>
bool cluster_fits(int64_t spans) {
  using DC = DecodeSplitCfg<D>;
  constexpr auto kernel = attention_decode_cluster_kernel<D, kRope, kPush>;
  constexpr size_t kSmem = cluster_smem<D, kPush>();
  static const int max_blocks = [] {
    int dev = 0, major = 0;
    RILL_CUDA_CHECK(cudaGetDevice(&dev));
    RILL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) return 0;
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (int n = kMaxCluster; n >= 2; n /= 2) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1, 1, unsigned(n));
      cfg.blockDim = dim3(DC::kThreads);
      cfg.dynamicSmemBytes = kSmem;
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 1;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = unsigned(n);
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess &&
          clusters > 0)
        return n;
      (void)cudaGetLastError();  // an unsupported size: try the next smaller
    }
    return 0;
  }();
  return int(cluster_blocks(spans)) <= max_blocks;
}

// Resident blocks an SM of the decode split kernel (sets its shared-memory attribute once).
template <int D, bool kRope>
int split_resident() {
  using DC = DecodeSplitCfg<D>;
  static const int resident = [] {
    constexpr auto kernel = attention_decode_split_kernel<D, kRope>;
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(DC::kSmemBytes)));
    int n = 0;
    RILL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, DC::kThreads, DC::kSmemBytes));
    return std::max(n, 1);
  }();
  return resident;
}

// The four-warp fold kernel: a block a (row, kv head), every span in order.
template <int D>
void launch_fold(AttnKernelArgs k, const AttentionArgs& a, cudaStream_t stream) {
  using DC = DecodeSplitCfg<D>;
  static const bool attr = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(attention_decode_fold_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(DC::kSmemBytes)));
    return true;
  }();
  (void)attr;
  k.splits = 1;
  k.span_step = 1;
  launch_pdl(attention_decode_fold_kernel<D>, dim3(1, unsigned(a.hkv), unsigned(a.num_rows)), dim3(DC::kThreads),
             DC::kSmemBytes, stream, k);
  RILL_CUDA_CHECK_LAUNCH();
  g_attention_decode_fold_launches.fetch_add(1, std::memory_order_relaxed);
}

// The span combine of a split schedule (grid: a block a (row, head), query token and kDims outputs) on
// chunks of 32, 128 or 256 spans (CombineCfg).
template <int D>
void launch_combine(const AttnKernelArgs& k, const AttentionArgs& a, int64_t spans, int span_keys,
                    cudaStream_t stream) {
  const int chunk =
      g_attention_combine_spans > 0 ? g_attention_combine_spans : spans <= 32 ? 32 : spans <= 128 ? 128 : 256;
  auto launch = [&](auto kernel) {
    const dim3 grid(unsigned(a.num_rows) * unsigned(a.hq), unsigned(a.max_seqlen_q),
                    unsigned(D / CombineCfg<D, 256>::kDims));
    launch_pdl(kernel, grid, dim3(unsigned(chunk)), 0, stream, k.part_o, k.part_ml, k.out, a.cu_seqlens_q,
               a.context_lens, a.tokens, a.hq, a.sliding_window, span_keys, k.early_trigger);
  };
  if (chunk == 32) launch(attention_combine_spans_kernel<D, 32>);
  else if (chunk == 128) launch(attention_combine_spans_kernel<D, 128>);
  else launch(attention_combine_spans_kernel<D, 256>);
  RILL_CUDA_CHECK_LAUNCH();
  g_ended_with_combine = true;
  g_last_combine_spans = chunk;
}

// The invariant split schedule at one m-tile: the cluster kernel (≤ 16 spans, the block-table
// width, so a captured graph replays it for any context that fits, and one wave of clusters), else
// blocks a (row, kv head) walking every step-th span — or, where each would walk every span of its
// row, the fold kernel — then the span combine.
template <int D>
void launch_split_or_fold(AttnKernelArgs k, const AttentionArgs& a, dim3 grid, int64_t spans, int span_keys,
                          cudaStream_t stream) {
  using DC = DecodeSplitCfg<D>;
  const unsigned m_tiles = grid.x;
  const bool rope = k.rope_fused;
  const int resident = rope ? split_resident<D, true>() : split_resident<D, false>();
  // The cluster kernel: a cluster a (row, kv head), the combine inside. (Beyond a wave it loses:
  // batch 16 / 64 at 512 keys decoded 2,383 / 5,498 tok/s with it against 2,565 / 6,853 without —
  // most blocks then hold no span, and every cluster waits for all of them; batch 1: 222.9, 221.8
  // against 220.0, 220.7. Run P.)
  const int64_t cluster_ctas = int64_t(m_tiles) * a.hkv * a.num_rows * cluster_blocks(spans);
  const bool push = g_attention_cluster_push;
  auto fits = [&] {
    return rope ? (push ? cluster_fits<D, true, true>(spans) : cluster_fits<D, true, false>(spans))
                : (push ? cluster_fits<D, false, true>(spans) : cluster_fits<D, false, false>(spans));
  };
  if (spans <= kMaxCluster && g_attention_cluster && cluster_ctas <= int64_t(a.num_sms) * resident && fits()) {
    const unsigned n = cluster_blocks(spans);
    k.span_step = int(n);
    grid.z = unsigned(a.num_rows) * n;
    const auto kernel = rope ? (push ? attention_decode_cluster_kernel<D, true, true>
                                     : attention_decode_cluster_kernel<D, true, false>)
                             : (push ? attention_decode_cluster_kernel<D, false, true>
                                     : attention_decode_cluster_kernel<D, false, false>);
    const size_t smem = push ? cluster_smem<D, true>() : cluster_smem<D, false>();
    launch_pdl_cluster(kernel, dim3(grid), dim3(DC::kThreads), smem, stream, dim3(1, 1, n), k);
    RILL_CUDA_CHECK_LAUNCH();
#if defined(RILL_PDL_TRACE)
    if (pdl_trace_twice("attention")) {  // trace builds: the same launch again, its code warm (launch.h)
      launch_pdl_cluster(kernel, dim3(grid), dim3(DC::kThreads), smem, stream, dim3(1, 1, n), k);
      RILL_CUDA_CHECK_LAUNCH();
    }
#endif
    g_attention_cluster_launches.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Else blocks a (row, kv head), each walking every step-th span: split_span_step's rule (one wave,
  // or two where their walks are clearly shorter; a block a span left half a batch-1 grid at 8k
  // context in a second and third wave, and every span a block starts cold: its table, K and V
  // round trips unhidden). Depends on the batch shape and the table's spans only, so a captured
  // graph replays it for any context that fits the table.
  const int64_t units = int64_t(m_tiles) * a.hkv * a.num_rows;
  const int64_t step = a.span_blocks > 0 ? std::min<int64_t>(spans, a.span_blocks)
                                         : split_span_step(spans, units, int64_t(a.num_sms) * resident);
  if (step == 1 && g_attention_decode_fold >= 2 && !rope && a.force_splits == 0) {
    // Each block would walk every span of its row: the same walk merging as it goes, without
    // the partials' round trip and the combine kernel (same bits).
    launch_fold<D>(k, a, stream);
    return;
  }
  k.span_step = int(step);
  grid.z = unsigned(a.num_rows) * unsigned(step);
  launch_pdl(rope ? attention_decode_split_kernel<D, true> : attention_decode_split_kernel<D, false>, dim3(grid),
             dim3(DC::kThreads), DC::kSmemBytes, stream, k);
  RILL_CUDA_CHECK_LAUNCH();
  launch_combine<D>(k, a, spans, span_keys, stream);
}

}  // namespace

template <int D>
void launch_decode_split(const AttnKernelArgs& k, const AttentionArgs& a, dim3 grid, int64_t spans, int span_keys,
                         cudaStream_t stream) {
  launch_split_or_fold<D>(k, a, grid, spans, span_keys, stream);
}
template <int D>
void launch_decode_fold(const AttnKernelArgs& k, const AttentionArgs& a, cudaStream_t stream) {
  launch_fold<D>(k, a, stream);
}
template <int D>
void launch_combine_spans(const AttnKernelArgs& k, const AttentionArgs& a, int64_t spans, int span_keys,
                          cudaStream_t stream) {
  launch_combine<D>(k, a, spans, span_keys, stream);
}

void clear_ended_with_combine() { g_ended_with_combine = false; }

template void launch_decode_split<64>(const AttnKernelArgs&, const AttentionArgs&, dim3, int64_t, int, cudaStream_t);
template void launch_decode_split<128>(const AttnKernelArgs&, const AttentionArgs&, dim3, int64_t, int, cudaStream_t);
template void launch_decode_fold<64>(const AttnKernelArgs&, const AttentionArgs&, cudaStream_t);
template void launch_decode_fold<128>(const AttnKernelArgs&, const AttentionArgs&, cudaStream_t);
template void launch_combine_spans<16>(const AttnKernelArgs&, const AttentionArgs&, int64_t, int, cudaStream_t);
template void launch_combine_spans<32>(const AttnKernelArgs&, const AttentionArgs&, int64_t, int, cudaStream_t);
template void launch_combine_spans<64>(const AttnKernelArgs&, const AttentionArgs&, int64_t, int, cudaStream_t);
template void launch_combine_spans<128>(const AttnKernelArgs&, const AttentionArgs&, int64_t, int, cudaStream_t);
template void launch_combine_spans<256>(const AttnKernelArgs&, const AttentionArgs&, int64_t, int, cudaStream_t);

}  // namespace attention_detail

void set_attention_cluster(bool on) { attention_detail::g_attention_cluster = on; }
void set_attention_cluster_push(bool on) { attention_detail::g_attention_cluster_push = on; }
bool attention_cluster_push() { return attention_detail::g_attention_cluster_push; }
bool attention_ended_with_combine() { return attention_detail::g_ended_with_combine; }
bool attention_cluster_enabled() { return attention_detail::g_attention_cluster; }
uint64_t attention_cluster_launches() { return attention_detail::g_attention_cluster_launches.load(); }
void set_attention_decode_fold(int mode) { attention_detail::g_attention_decode_fold = mode; }
void set_attention_combine_spans(int chunk) { attention_detail::g_attention_combine_spans = chunk; }
int attention_combine_spans() { return attention_detail::g_attention_combine_spans; }
int attention_last_combine_spans() { return attention_detail::g_last_combine_spans; }
int attention_decode_fold() { return attention_detail::g_attention_decode_fold; }
uint64_t attention_decode_fold_launches() { return attention_detail::g_attention_decode_fold_launches.load(); }

}  // namespace rill::cuda
