// kernels/cpu/attention.cpp — causal GQA attention over the paged KV cache (f32, Highway dispatch).
// One work unit is (kv head, query token): its Hq/Hkv query heads share every K/V row they read.
// Two passes in f32 (scores and their max, then exp-weighted sum of V), so the result does not
// depend on how the key range is split. Units are ordered kv-head-major so consecutive units of a
// prefill chunk reuse the same K/V rows from cache. The cache must already hold the step's K/V.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cmath>
#include <cstdint>

#ifndef RILL_KERNELS_CPU_ATTENTION_ARGS
#define RILL_KERNELS_CPU_ATTENTION_ARGS
namespace rill::cpu {
struct AttentionArgs {
  const float* q = nullptr;  // [T, Hq, D]
  const float* k = nullptr;  // [num_blocks, block_size, Hkv, D]
  const float* v = nullptr;
  float* out = nullptr;  // [T, Hq, D]
  const int32_t* cu_seqlens = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;  // [rows, max_blocks]
  int64_t rows = 0, max_blocks = 0, block_size = 0;
  int64_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 1.f, softcap = 0.f;
  int64_t window = 0;
};
}  // namespace rill::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace rill::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

HWY_INLINE float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + lanes), hn::LoadU(df, b + i + lanes), acc1);
  }
  for (; i + lanes <= n; i += lanes) acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// acc[0..n) += p * v[0..n)
HWY_INLINE void Axpy(float p, const float* HWY_RESTRICT v, float* HWY_RESTRICT acc, int64_t n) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const VF pv = hn::Set(df, p);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(pv, hn::LoadU(df, v + i), hn::LoadU(df, acc + i)), df, acc + i);
  for (; i < n; ++i) acc[i] += p * v[i];
}

// Units [u0, u1) of the kv-head-major order u = g * T + t. `scratch` holds
// (Hq / Hkv) * (max_context_len + D) floats.
void AttendUnits(const AttentionArgs& a, int64_t u0, int64_t u1, float* HWY_RESTRICT scratch) {
  const int64_t G = a.Hq / a.Hkv;
  const int64_t D = a.D;
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t g = u / a.T;
    const int64_t t = u % a.T;
    // The row owning token t: the first r with t < cu_seqlens[r + 1] (empty rows are skipped).
    int64_t r = 0;
    for (int64_t hi = a.rows - 1; r < hi;) {
      const int64_t mid = (r + hi) / 2;
      if (a.cu_seqlens[mid + 1] <= t) {
        r = mid + 1;
      } else {
        hi = mid;
      }
    }
    const int64_t q_len = a.cu_seqlens[r + 1] - a.cu_seqlens[r];
    const int64_t pos = int64_t(a.context_lens[r]) - q_len + (t - a.cu_seqlens[r]);
    const int64_t first = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    const int64_t n = pos - first + 1;
    const int32_t* table = a.block_tables + r * a.max_blocks;
    float* scores = scratch;         // [G, n]
    float* acc = scratch + G * n;    // [G, D]
    const float* q = a.q + (t * a.Hq + g * G) * D;

    float max_s[64];
    float* maxes = G <= 64 ? max_s : acc + G * D;  // G > 64 never occurs in practice; scratch has room
    for (int64_t h = 0; h < G; ++h) maxes[h] = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = first + j;
      const int64_t slot = int64_t(table[key / a.block_size]) * a.block_size + key % a.block_size;
      const float* kr = a.k + (slot * a.Hkv + g) * D;
      for (int64_t h = 0; h < G; ++h) {
        float s = Dot(q + h * D, kr, D) * a.scale;
        if (a.softcap > 0.f) s = a.softcap * std::tanh(s / a.softcap);
        scores[h * n + j] = s;
        if (s > maxes[h]) maxes[h] = s;
      }
    }
    float sums[64];
    float* sum = G <= 64 ? sums : maxes + G;
    for (int64_t h = 0; h < G; ++h) {
      double total = 0.0;  // long contexts: keep the normalizer exact to f32 precision
      float* sh = scores + h * n;
      for (int64_t j = 0; j < n; ++j) {
        sh[j] = std::exp(sh[j] - maxes[h]);
        total += sh[j];
      }
      sum[h] = float(total);
      for (int64_t d = 0; d < D; ++d) acc[h * D + d] = 0.f;
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = first + j;
      const int64_t slot = int64_t(table[key / a.block_size]) * a.block_size + key % a.block_size;
      const float* vr = a.v + (slot * a.Hkv + g) * D;
      for (int64_t h = 0; h < G; ++h) Axpy(scores[h * n + j], vr, acc + h * D, D);
    }
    for (int64_t h = 0; h < G; ++h) {
      const float inv = 1.f / sum[h];
      float* o = a.out + (t * a.Hq + g * G + h) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = acc[h * D + d] * inv;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace rill::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/ops.h"

namespace rill::cpu {

HWY_EXPORT(AttendUnits);

namespace {

// Checks the batch tensors and their contents against q and the cache; returns the longest context.
int64_t check_batch(const AttentionBatch& b, int64_t T, int64_t num_blocks, int64_t block_size) {
  constexpr const char* op = "attention";
  check_tensor(op, "batch.cu_seqlens_q", b.cu_seqlens_q, 1);
  check_tensor(op, "batch.context_lens", b.context_lens, 1);
  check_tensor(op, "batch.block_tables", b.block_tables, 2);
  check_dtype(op, "batch.cu_seqlens_q", b.cu_seqlens_q, {DType::i32});
  check_dtype(op, "batch.context_lens", b.context_lens, {DType::i32});
  check_dtype(op, "batch.block_tables", b.block_tables, {DType::i32});
  const int64_t rows = b.num_rows;
  RILL_ENSURE(rows >= 0, "[attention] batch.num_rows must be >= 0, got {}", rows);
  check_dim(op, "batch.cu_seqlens_q", b.cu_seqlens_q, 0, rows + 1);
  check_dim(op, "batch.context_lens", b.context_lens, 0, rows);
  check_dim(op, "batch.block_tables", b.block_tables, 0, rows);
  const int64_t max_blocks = b.block_tables.size(1);
  const int32_t* cu = b.cu_seqlens_q.data_as<const int32_t>();
  const int32_t* ctx = b.context_lens.data_as<const int32_t>();
  const int32_t* tables = b.block_tables.data_as<const int32_t>();
  RILL_ENSURE(cu[0] == 0, "[attention] batch.cu_seqlens_q[0] must be 0, got {}", cu[0]);
  RILL_ENSURE(cu[rows] == T, "[attention] batch.cu_seqlens_q[{}] = {} must equal the {} query tokens", rows,
              cu[rows], T);
  int64_t longest = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t q_len = int64_t(cu[r + 1]) - cu[r];
    RILL_ENSURE(q_len >= 0, "[attention] batch.cu_seqlens_q decreases at row {}", r);
    RILL_ENSURE(ctx[r] >= q_len && ctx[r] <= max_blocks * block_size,
                "[attention] batch.context_lens[{}] = {} must be in [{} new tokens, {} blocks * {}]", r, ctx[r],
                q_len, max_blocks, block_size);
    if (q_len == 0) continue;
    for (int64_t i = 0; i < (ctx[r] + block_size - 1) / block_size; ++i) {
      const int32_t blk = tables[r * max_blocks + i];
      RILL_ENSURE(blk >= 0 && blk < num_blocks, "[attention] batch.block_tables[{}, {}] = {} is outside [0, {})", r,
                  i, blk, num_blocks);
    }
    longest = std::max<int64_t>(longest, ctx[r]);
  }
  return longest;
}

}  // namespace

void attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, const AttentionParams& p,
               Tensor& out) {
  constexpr const char* op = "attention";
  check_tensor(op, "q", q, 3);
  check_tensor(op, "out", out, 3);
  check_tensor(op, "cache.k", cache.k, 4);
  check_tensor(op, "cache.v", cache.v, 4);
  check_dtype(op, "q", q, {DType::f32});
  check_dtype(op, "out", out, {DType::f32});
  check_dtype(op, "cache.k", cache.k, {DType::f32});
  check_dtype(op, "cache.v", cache.v, {DType::f32});
  check_same_shape(op, "q", q, "out", out);
  check_same_shape(op, "cache.k", cache.k, "cache.v", cache.v);
  check_no_overlap(op, "out", out, "q", q);
  const int64_t T = q.size(0), Hq = q.size(1), D = q.size(2);
  const int64_t Hkv = cache.k.size(2);
  check_dim(op, "cache.k", cache.k, 3, D);
  RILL_ENSURE(Hkv > 0 && Hq % Hkv == 0, "[attention] q heads ({}) must be a multiple of the kv heads ({})", Hq, Hkv);
  RILL_ENSURE(std::isfinite(p.scale), "[attention] scale must be finite, got {}", p.scale);
  RILL_ENSURE(std::isfinite(p.softcap) && p.softcap >= 0.f, "[attention] softcap must be >= 0, got {}", p.softcap);
  RILL_ENSURE(p.sliding_window >= 0, "[attention] sliding_window must be >= 0, got {}", p.sliding_window);
  const int64_t block_size = cache.k.size(1);
  RILL_ENSURE(block_size > 0, "[attention] cache block_size must be > 0, got {}", cache.k.describe());
  const int64_t longest = check_batch(batch, T, cache.k.size(0), block_size);
  if (T == 0 || Hq == 0) return;

  AttentionArgs a;
  a.q = q.data_as<const float>();
  a.k = cache.k.data_as<const float>();
  a.v = cache.v.data_as<const float>();
  a.out = out.data_as<float>();
  a.cu_seqlens = batch.cu_seqlens_q.data_as<const int32_t>();
  a.context_lens = batch.context_lens.data_as<const int32_t>();
  a.block_tables = batch.block_tables.data_as<const int32_t>();
  a.rows = batch.num_rows;
  a.max_blocks = batch.block_tables.size(1);
  a.block_size = block_size;
  a.T = T;
  a.Hq = Hq;
  a.Hkv = Hkv;
  a.D = D;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.window = p.sliding_window;

  const int64_t G = Hq / Hkv;
  const size_t scratch_floats = size_t(G * (longest + D) + 2 * G);
  ThreadPool::global().parallel_for(Hkv * T, 1, [&](int64_t u0, int64_t u1) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
    HWY_DYNAMIC_DISPATCH(AttendUnits)(a, u0, u1, scratch.data());
  });
}

}  // namespace rill::cpu
#endif  // HWY_ONCE
