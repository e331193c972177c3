// kernels/cuda/rope.cu — rotary embedding (rotate-half pairing, partial rotary), the paged KV
// store, their fusion (rope_store_kv), and whole-block KV copies (copy-on-write). Numerics follow HF: angle = float(pos) * inv_freq[j]
// in f32, cos/sin scaled by attention_factor and rounded to bf16, then
// q' = bf16(bf16(q * cos) + bf16(rotate_half(q) * sin)) — three bf16 ops as torch runs them.
// Cache layout [num_blocks, block_size, hkv, head_dim] is linear in slot = block * block_size +
// offset, so a token's k row lands at slot * hkv * head_dim. Slots outside the cache (negative: padding) are skipped.
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/partials.cuh"
#include "kernels/cuda/rope_common.cuh"

namespace rill::cuda {
namespace {

using namespace rope_detail;

constexpr int kThreads = 256;
constexpr int kMaxHalf = 512;  // rotary_dim / 2 bound (head_dim ≤ 1024)

// Copies one token's row of `elems` bf16 to the cache row at `slot` (16-byte units when possible).
__device__ __forceinline__ void copy_row(const bf16* src, bf16* dst, int64_t elems, bool vec) {
  if (vec) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < elems / 8; i += blockDim.x) d[i] = s[i];
  } else {
    for (int64_t i = threadIdx.x; i < elems; i += blockDim.x) dst[i] = src[i];
  }
}

// Grid (tokens, q-head groups + 1): block y < groups rotates q heads [8y, 8y + 8); the last
// block of a token rotates its k heads and then writes the token's K and V rows to the cache.
// One token's 40 heads thus run on 5 blocks in parallel (a decode step has one token a row).
// With q_norm set, each block first normalizes its heads (Qwen3's q/k norms: two launches fewer
// a layer).
constexpr int kQHeadsPerBlock = 8;

// The token's rotation table into shared memory (the caller syncs): cos / sin of pos · inv_freq[j]
// (rope_common.cuh's rotation_at) for j < half.
__device__ __forceinline__ void fill_rotation(const RopeArgs& a, float pos, int half, float* cos_s, float* sin_s) {
  for (int j = threadIdx.x; j < half; j += blockDim.x) rotation_at(a, pos, j, cos_s[j], sin_s[j]);
}

__global__ void rope_kernel(RopeArgs a, bool vec, bool vec_rotate) {
  pdl_wait();
  pdl_trigger();
  __shared__ float cos_s[kMaxHalf], sin_s[kMaxHalf];
  const int64_t t = blockIdx.x;
  const int q_groups = int(gridDim.y) - 1;
  const bool k_block = int(blockIdx.y) == q_groups;
  const int half = a.rotary_dim / 2;
  fill_rotation(a, float(a.positions[t]), half, cos_s, sin_s);
  __syncthreads();
  bf16* heads;
  int count;
  if (k_block) {
    heads = static_cast<bf16*>(a.k) + t * a.hkv * a.head_dim;
    count = a.hkv;
  } else {
    const int h0 = int(blockIdx.y) * kQHeadsPerBlock;
    heads = static_cast<bf16*>(a.q) + (t * a.hq + h0) * a.head_dim;
    count = min(kQHeadsPerBlock, a.hq - h0);
  }
  if (a.q_norm) {
    // Per-head RMSNorm, a warp a head: the arithmetic of rms_norm_kernel<W, 8, 32> (each lane
    // sums the squares of its 8-wide chunks in order, then a butterfly over the warp; x̂ rounded
    // to bf16 before the weight unless norm_fp32_scale).
    const void* w = k_block ? a.k_norm : a.q_norm;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int h = warp; h < count; h += blockDim.x / 32) {
      bf16* x = heads + h * a.head_dim;
      float ss = 0.f;
      for (int c = lane * 8; c < a.head_dim; c += 256) {
        bf16 v[8];
        *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(x + c);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float f = __bfloat162float(v[i]);
          ss += f * f;
        }
      }
      ss = warp_sum(ss);
      const float inv = rsqrtf(ss / float(a.head_dim) + a.norm_eps);
      for (int c = lane * 8; c < a.head_dim; c += 256) {
        bf16 v[8];
        *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(x + c);
        normalize8(a, w, c, v, inv);
        *reinterpret_cast<uint4*>(x + c) = *reinterpret_cast<uint4*>(v);
      }
    }
    __syncthreads();  // the normalized heads are read by other threads below
  }
  auto rotate = [&](bf16& e1, bf16& e2, int j) {
    const float x1 = __bfloat162float(e1), x2 = __bfloat162float(e2);
    const float c = cos_s[j], s = sin_s[j];
    e1 = rotated_first(x1, x2, c, s);
    e2 = rotated_second(x1, x2, c, s);
  };
  if (vec_rotate) {  // 8 pairs a thread: 16-byte loads and stores of both halves
    const int chunks = half / 8;
    for (int i = threadIdx.x; i < count * chunks; i += blockDim.x) {
      const int h = i / chunks, j0 = (i - h * chunks) * 8;
      bf16* base = heads + h * a.head_dim;
      uint4 v1 = *reinterpret_cast<const uint4*>(base + j0), v2 = *reinterpret_cast<const uint4*>(base + j0 + half);
      bf16* x1 = reinterpret_cast<bf16*>(&v1);
      bf16* x2 = reinterpret_cast<bf16*>(&v2);
#pragma unroll
      for (int e = 0; e < 8; ++e) rotate(x1[e], x2[e], j0 + e);
      *reinterpret_cast<uint4*>(base + j0) = v1;
      *reinterpret_cast<uint4*>(base + j0 + half) = v2;
    }
  } else {
    for (int i = threadIdx.x; i < count * half; i += blockDim.x) {
      const int h = i / half, j = i - h * half;
      bf16* base = heads + h * a.head_dim;
      rotate(base[j], base[j + half], j);
    }
  }
  if (!k_block || !a.k_cache) return;
  __syncthreads();  // the rotated k row is written by other threads of this block
  int32_t slot = a.slot_mapping[t];
  if (slot < 0 || slot >= a.num_slots) return;
  int64_t row = int64_t(a.hkv) * a.head_dim;
  copy_row(heads, static_cast<bf16*>(a.k_cache) + slot * row, row, vec);
  copy_row(static_cast<const bf16*>(a.v) + t * row, static_cast<bf16*>(a.v_cache) + slot * row, row, vec);
}

// Full rotary at head_dim 64 / 128 / 256 (the common case): kC = head_dim / 8 lanes a head, each
// holding one 16-byte chunk in registers from load to store — the norm, the rotation (a chunk's
// partner, head_dim / 2 further, sits kC / 2 lanes away: one shuffle) and, for k heads, the cache
// writes of the token's k and v chunks. Grid (tokens, head groups of 256 / kC heads over the q
// heads, then the k heads). The general kernel above ran a block a token and 8 heads, most of its
// threads idle in each of its three phases, with two block barriers between them (~3x its memory
// time in a 4096-token prefill). Same arithmetic as the general kernel: the norm's sum of squares
// is each lane's 8 values in order, then a butterfly over the head's lanes (the warp-wide
// butterfly there adds only zeros in its first steps); the table, the weighting and the rotation
// are the helpers both kernels call. Everything that does not come from the previous kernel — the
// step's position and slot (uploaded before the step's first kernel), the rotation table, the
// norm weights — is read before the wait (launch.h); after it, the head chunk and the v chunk are
// requested together: one dependent memory round trip (a batch-1 decode step waits on it).
template <int kC>
__global__ void __launch_bounds__(kThreads) rope_heads_kernel(const __grid_constant__ RopeArgs a) {
  constexpr int kHalf = kC * 4, kHeadsPerBlock = kThreads / kC, kD = kC * 8;
  __shared__ float cos_s[kHalf], sin_s[kHalf];
  const int64_t t = blockIdx.x;
  warm_params(a);
  fill_rotation(a, float(a.positions[t]), kHalf, cos_s, sin_s);
  const int hh = int(blockIdx.y) * kHeadsPerBlock + int(threadIdx.x) / kC, c = int(threadIdx.x) % kC;
  const bool live = hh < a.hq + a.hkv;
  const bool is_k = hh >= a.hq;
  const int kh = hh - a.hq;
  const int32_t slot = live && is_k && a.k_cache ? a.slot_mapping[t] : -1;
  const bool store = slot >= 0 && slot < a.num_slots;
  float nw[8];
  if (live && a.q_norm) norm_weights8(a, is_k ? a.k_norm : a.q_norm, c * 8, nw);
  __syncthreads();
  pdl_wait_trigger(a.early_trigger);
  if (!live) return;  // whole heads leave: a head's lanes stay together
  const unsigned group = head_lanes<kC>();
  bf16* x = is_k ? static_cast<bf16*>(a.k) + (t * a.hkv + kh) * kD + c * 8
                 : static_cast<bf16*>(a.q) + (t * a.hq + hh) * kD + c * 8;
  const int64_t row = int64_t(a.hkv) * kD, off = int64_t(kh) * kD + c * 8;
  // q, k, v still as one GEMM's partials (launch_rope checked partials_vec8): the fold on load, and
  // the v row written where the GEMM would have written it (q and k are written below, rotated).
  const PartialsIn& xp = is_k ? a.k_partials : a.q_partials;
  uint4 raw = xp.ws ? folded8(xp, t, (is_k ? kh : hh) * kD + c * 8) : *reinterpret_cast<const uint4*>(x);
  uint4 vraw = make_uint4(0u, 0u, 0u, 0u);
  if (is_k && a.v_partials.ws) {
    vraw = folded8(a.v_partials, t, off);
    *reinterpret_cast<uint4*>(const_cast<bf16*>(static_cast<const bf16*>(a.v)) + t * row + off) = vraw;
  } else if (store) {
    vraw = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(a.v) + t * row + off);
  }
  const int j0 = (c % (kC / 2)) * 8;
  float cs[8], sn[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) cs[e] = cos_s[j0 + e], sn[e] = sin_s[j0 + e];
  norm_rotate_chunk<kC>(a, a.q_norm != nullptr, raw, nw, cs, sn, c, group);
  *reinterpret_cast<uint4*>(x) = raw;
  pdl_trace_done();
  if (!store) return;
  *reinterpret_cast<uint4*>(static_cast<bf16*>(a.k_cache) + slot * row + off) = raw;
  *reinterpret_cast<uint4*>(static_cast<bf16*>(a.v_cache) + slot * row + off) = vraw;
}

__global__ void store_kv_kernel(const bf16* k, const bf16* v, const int32_t* slot_mapping, bf16* k_cache,
                                bf16* v_cache, int64_t row, int64_t num_slots, bool vec) {
  pdl_wait();
  pdl_trigger();
  int64_t t = blockIdx.x;
  int32_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  copy_row(k + t * row, k_cache + slot * row, row, vec);
  copy_row(v + t * row, v_cache + slot * row, row, vec);
}

// One block per (pair, k or v): 16-byte copies of a whole KV block.
__global__ void copy_blocks_kernel(uint4* k_cache, uint4* v_cache, const int32_t* src_dst, int64_t block_vecs,
                                   int64_t num_blocks) {
  int32_t src = src_dst[2 * blockIdx.x], dst = src_dst[2 * blockIdx.x + 1];
  if (src < 0 || dst < 0 || src >= num_blocks || dst >= num_blocks) return;
  uint4* base = blockIdx.y == 0 ? k_cache : v_cache;
  for (int64_t i = threadIdx.x; i < block_vecs; i += blockDim.x)
    base[int64_t(dst) * block_vecs + i] = base[int64_t(src) * block_vecs + i];
}

}  // namespace

namespace {
// The chunk kernel's layout: full rotary at head_dim 64 / 128 / 256, 16-byte aligned heads and cache rows.
bool heads_layout(const RopeArgs& a) {
  const int d = a.head_dim;
  const bool vec = (int64_t(a.hkv) * d) % 8 == 0 && aligned16(a.k) && aligned16(a.v) && aligned16(a.k_cache) &&
                   aligned16(a.v_cache);
  return a.rotary_dim == d && (d == 64 || d == 128 || d == 256) && aligned16(a.q) && aligned16(a.k) &&
         (!a.k_cache || vec);
}

// Deferred q / k / v that the chunk layout folds on load (v's lanes are the k heads': v deferred
// only with a v tensor and a cache).
bool folds_on_load(const RopeArgs& a) {
  return (!a.q_partials.ws || partials_vec8(a.q_partials)) && (!a.k_partials.ws || partials_vec8(a.k_partials)) &&
         (!a.v_partials.ws || (partials_vec8(a.v_partials) && a.v && a.k_cache));
}
}  // namespace

bool rope_fits_decode_attention(const RopeArgs& a, int head_dim) {
  return a.head_dim == head_dim && (head_dim == 64 || head_dim == 128) && a.k_cache && a.v && a.slot_mapping &&
         heads_layout(a) && folds_on_load(a);
}

void launch_rope(const RopeArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return;
  RopeArgs a = args;
  a.early_trigger = pdl_rope_early_trigger();
  if (a.rotary_dim / 2 > kMaxHalf) throw_error("[rope] rotary_dim above 1024 is not supported");
  int64_t row = int64_t(a.hkv) * a.head_dim;
  bool vec = row % 8 == 0 && aligned16(a.k) && aligned16(a.v) && aligned16(a.k_cache) && aligned16(a.v_cache);
  const unsigned q_groups = unsigned((a.hq + kQHeadsPerBlock - 1) / kQHeadsPerBlock);
  // 8 rotation pairs a thread where the halves are 16-byte aligned runs of 8.
  const bool vec_rotate = (a.rotary_dim / 2) % 8 == 0 && a.head_dim % 8 == 0 && aligned16(a.q) && aligned16(a.k);
  const int d = a.head_dim;
  const bool heads_kernel = heads_layout(a);
  // Deferred GEMM products (q, k, v of one projection): folded on load by the heads kernel,
  // otherwise folded into the tensors first.
  const bool deferred = a.q_partials.ws || a.k_partials.ws || a.v_partials.ws;
  if (deferred && !(heads_kernel && folds_on_load(a))) {
    launch_fold_into(a.q_partials, a.q, a.tokens, int64_t(a.hq) * d, stream);
    launch_fold_into(a.k_partials, a.k, a.tokens, int64_t(a.hkv) * d, stream);
    if (a.v) launch_fold_into(a.v_partials, const_cast<void*>(a.v), a.tokens, int64_t(a.hkv) * d, stream);
    a.q_partials = a.k_partials = a.v_partials = PartialsIn{};
  }
  if (heads_kernel) {
    const unsigned groups = unsigned((a.hq + a.hkv + kThreads / (d / 8) - 1) / (kThreads / (d / 8)));
    const dim3 grid(unsigned(a.tokens), groups);
    if (d == 64) launch_pdl(rope_heads_kernel<8>, grid, dim3(kThreads), 0, stream, a);
    else if (d == 128) launch_pdl(rope_heads_kernel<16>, grid, dim3(kThreads), 0, stream, a);
    else launch_pdl(rope_heads_kernel<32>, grid, dim3(kThreads), 0, stream, a);
#if defined(RILL_PDL_TRACE)
    if (d == 128 && pdl_trace_twice("rope"))  // trace builds: the same launch again, its code warm (launch.h)
      launch_pdl(rope_heads_kernel<16>, grid, dim3(kThreads), 0, stream, a);
#endif
  } else {
    launch_pdl(rope_kernel, dim3(unsigned(a.tokens), q_groups + 1), dim3(kThreads), 0, stream, a, vec, vec_rotate);
  }
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_copy_kv_blocks(void* k_cache, void* v_cache, const int32_t* src_dst, int64_t n, int64_t block_bytes,
                           int64_t num_blocks, cudaStream_t stream) {
  if (n == 0) return;
  if (block_bytes % 16 != 0 || !aligned16(k_cache) || !aligned16(v_cache))
    throw_error("[copy_kv_blocks] KV blocks must be multiples of 16 bytes, 16-byte aligned");
  copy_blocks_kernel<<<dim3(unsigned(n), 2), 256, 0, stream>>>(static_cast<uint4*>(k_cache), static_cast<uint4*>(v_cache),
                                                              src_dst, block_bytes / 16, num_blocks);
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_store_kv(const void* k, const void* v, const int32_t* slot_mapping, void* k_cache, void* v_cache,
                     int64_t tokens, int64_t row_elems, int64_t num_slots, cudaStream_t stream) {
  if (tokens == 0) return;
  bool vec = row_elems % 8 == 0 && aligned16(k) && aligned16(v) && aligned16(k_cache) && aligned16(v_cache);
  launch_pdl(store_kv_kernel, dim3(unsigned(tokens)), dim3(128), 0, stream, static_cast<const bf16*>(k), static_cast<const bf16*>(v),
                                                         slot_mapping, static_cast<bf16*>(k_cache),
                                                         static_cast<bf16*>(v_cache), row_elems, num_slots, vec);
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace rill::cuda
