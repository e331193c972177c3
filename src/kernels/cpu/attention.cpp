// kernels/cpu/attention.cpp — causal GQA attention over the paged KV cache (f32, Highway dispatch).
// A work unit is (row, a tile of up to kQueryTile consecutive query tokens, a range of kv heads):
// every K/V row it loads serves all of the tile's queries and their Hq/Hkv query heads. Exact
// softmax in three passes per unit (scores and max, exp and a double-precision sum, weighted sum
// of V), so a query's result does not depend on the tiling or on the other rows of the batch.
// The cache must already hold the step's own K/V (store_kv runs first).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/cpu/simd-inl.h"

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
  int64_t max_blocks = 0, block_size = 0;
  int64_t Hq = 0, Hkv = 0, D = 0;
  float scale = 1.f, softcap = 0.f;
  int64_t window = 0;
};
// Query tokens [t0, t1) of one row (flattened token indices) against kv heads [g0, g1).
struct AttentionUnit {
  int32_t row, t0, t1, g0, g1;
};
constexpr int64_t kQueryTile = 16;
}  // namespace rill::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace rill::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Keys per block: their K (or V) rows of one head stay in L1 while every query of the tile uses them.
constexpr int64_t kKeyBlock = 32;

// out[e] = q · k[e] for four key rows of length D (SumOfLanes4 keeps each result independent of
// which keys share the call).
HWY_INLINE void Dot4(const float* HWY_RESTRICT q, const float* const* k, int64_t D, float* HWY_RESTRICT out) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  VF a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  int64_t i = 0;
  for (; i + 2 * lanes <= D; i += 2 * lanes) {
    const VF q0 = hn::LoadU(df, q + i), q1 = hn::LoadU(df, q + i + lanes);
    a0 = hn::MulAdd(q0, hn::LoadU(df, k[0] + i), a0);
    a1 = hn::MulAdd(q0, hn::LoadU(df, k[1] + i), a1);
    a2 = hn::MulAdd(q0, hn::LoadU(df, k[2] + i), a2);
    a3 = hn::MulAdd(q0, hn::LoadU(df, k[3] + i), a3);
    b0 = hn::MulAdd(q1, hn::LoadU(df, k[0] + i + lanes), b0);
    b1 = hn::MulAdd(q1, hn::LoadU(df, k[1] + i + lanes), b1);
    b2 = hn::MulAdd(q1, hn::LoadU(df, k[2] + i + lanes), b2);
    b3 = hn::MulAdd(q1, hn::LoadU(df, k[3] + i + lanes), b3);
  }
  if (i + lanes <= D) {
    const VF q0 = hn::LoadU(df, q + i);
    a0 = hn::MulAdd(q0, hn::LoadU(df, k[0] + i), a0);
    a1 = hn::MulAdd(q0, hn::LoadU(df, k[1] + i), a1);
    a2 = hn::MulAdd(q0, hn::LoadU(df, k[2] + i), a2);
    a3 = hn::MulAdd(q0, hn::LoadU(df, k[3] + i), a3);
    i += lanes;
  }
  SumOfLanes4(df, hn::Add(a0, b0), hn::Add(a1, b1), hn::Add(a2, b2), hn::Add(a3, b3), out);
  for (; i < D; ++i)
    for (int e = 0; e < 4; ++e) out[e] += q[i] * k[e][i];
}

// acc[0..D) += Σ_e p[e] * v[e][0..D) for n keys in order, with NV vectors of acc held in registers
// per sweep over the keys (each lane still sums its keys in key order).
template <int NV>
HWY_INLINE int64_t AccumulateChunks(const float* HWY_RESTRICT p, const float* const* v, int64_t n, int64_t d0,
                                    int64_t D, float* HWY_RESTRICT acc) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  for (; d0 + NV * lanes <= D; d0 += NV * lanes) {
    VF c[NV];
    for (int i = 0; i < NV; ++i) c[i] = hn::LoadU(df, acc + d0 + i * lanes);
    for (int64_t e = 0; e < n; ++e) {
      const VF pe = hn::Set(df, p[e]);
      const float* ve = v[e] + d0;
      for (int i = 0; i < NV; ++i) c[i] = hn::MulAdd(pe, hn::LoadU(df, ve + i * lanes), c[i]);
    }
    for (int i = 0; i < NV; ++i) hn::StoreU(c[i], df, acc + d0 + i * lanes);
  }
  return d0;
}

HWY_INLINE void AccumulateV(const float* HWY_RESTRICT p, const float* const* v, int64_t n, int64_t D,
                            float* HWY_RESTRICT acc) {
  // Eight independent FMA chains hide the FMA latency (one chain per vector of acc).
  int64_t d = AccumulateChunks<8>(p, v, n, 0, D, acc);
  d = AccumulateChunks<4>(p, v, n, d, D, acc);
  d = AccumulateChunks<1>(p, v, n, d, D, acc);
  for (; d < D; ++d)
    for (int64_t e = 0; e < n; ++e) acc[d] = hn::GetLane(hn::MulAdd(hn::Set(DF(), p[e]), hn::Set(DF(), v[e][d]), hn::Set(DF(), acc[d])));
}

// x[0..n) = exp(x - m); returns the sum in double (a long row of small terms).
HWY_INLINE double ExpSub(float* HWY_RESTRICT x, int64_t n, float m) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const VF mv = hn::Set(df, m);
  double total = 0.0;
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), mv)), df, x + i);
  for (; i < n; ++i) x[i] = std::exp(x[i] - m);
  for (i = 0; i < n; ++i) total += x[i];
  return total;
}

// Runs one unit. `scratch` holds tile * heads * (keys + D + 2) floats, where heads = (g1 - g0) * G
// and keys = the tile's key span.
void AttendUnit(const AttentionArgs& a, const AttentionUnit& u, float* HWY_RESTRICT scratch) {
  const int64_t G = a.Hq / a.Hkv;
  const int64_t D = a.D;
  const int64_t q_len = a.cu_seqlens[u.row + 1] - a.cu_seqlens[u.row];
  const int64_t first_pos = int64_t(a.context_lens[u.row]) - q_len - a.cu_seqlens[u.row];  // token t: first_pos + t
  const int64_t nq = u.t1 - u.t0;
  const int64_t nh = int64_t(u.g1 - u.g0) * G;  // query heads per token in this unit
  const int64_t hi = first_pos + u.t1 - 1;       // last key any query of the tile sees
  const int64_t lo_first = a.window > 0 && first_pos + u.t0 - a.window + 1 > 0 ? first_pos + u.t0 - a.window + 1 : 0;
  const int64_t span = hi - lo_first + 1;
  const int32_t* table = a.block_tables + int64_t(u.row) * a.max_blocks;
  const int64_t slot_stride = a.Hkv * D;

  float* scores = scratch;               // [nq, nh, span], key j at index j - lo_first
  float* acc = scores + nq * nh * span;  // [nq, nh, D]
  float* maxes = acc + nq * nh * D;      // [nq, nh]
  float* inv_sums = maxes + nq * nh;     // [nq, nh]
  for (int64_t i = 0; i < nq * nh; ++i) maxes[i] = -INFINITY;
  for (int64_t i = 0; i < nq * nh * D; ++i) acc[i] = 0.f;

  // Query qi sees keys [lo_of(qi), pos_of(qi)].
  auto pos_of = [&](int64_t qi) { return first_pos + u.t0 + qi; };
  auto lo_of = [&](int64_t qi) {
    const int64_t p = pos_of(qi);
    return a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
  };
  // Row pointers (all kv heads of a slot) of the keys [jb, jb + n) of the block.
  const float* rows[kKeyBlock];
  const float* head_rows[kKeyBlock];
  auto slot_rows = [&](const float* base, int64_t jb, int64_t n) {
    for (int64_t e = 0; e < n; ++e) {
      const int64_t j = jb + e;
      rows[e] = base + (int64_t(table[j / a.block_size]) * a.block_size + j % a.block_size) * slot_stride;
    }
  };

  // Pass 1: scores and per-query maxima.
  for (int64_t jb = lo_first; jb <= hi; jb += kKeyBlock) {
    const int64_t je = jb + kKeyBlock - 1 < hi ? jb + kKeyBlock - 1 : hi;
    slot_rows(a.k, jb, je - jb + 1);
    for (int64_t qi = 0; qi < nq; ++qi) {
      const int64_t j0 = jb > lo_of(qi) ? jb : lo_of(qi);
      const int64_t j1 = je < pos_of(qi) ? je : pos_of(qi);
      if (j0 > j1) continue;
      const float* q_tok = a.q + ((u.t0 + qi) * a.Hq + int64_t(u.g0) * G) * D;
      for (int64_t hh = 0; hh < nh; ++hh) {
        const int64_t head_off = (u.g0 + hh / G) * D;
        float* srow = scores + (qi * nh + hh) * span - lo_first;
        float& mx = maxes[qi * nh + hh];
        for (int64_t j = j0; j <= j1; j += 4) {
          const float* k4[4];
          for (int e = 0; e < 4; ++e) k4[e] = rows[(j + e <= j1 ? j + e : j1) - jb] + head_off;
          float dots[4];
          Dot4(q_tok + hh * D, k4, D, dots);
          for (int e = 0; e < 4 && j + e <= j1; ++e) {
            float s = dots[e] * a.scale;
            if (a.softcap > 0.f) s = a.softcap * std::tanh(s / a.softcap);
            srow[j + e] = s;
            if (s > mx) mx = s;
          }
        }
      }
    }
  }
  // Pass 2: exp and normalizer over each query's own key range.
  for (int64_t qi = 0; qi < nq; ++qi) {
    const int64_t lo = lo_of(qi), n = pos_of(qi) - lo + 1;
    for (int64_t hh = 0; hh < nh; ++hh) {
      float* row = scores + (qi * nh + hh) * span + (lo - lo_first);
      inv_sums[qi * nh + hh] = float(1.0 / ExpSub(row, n, maxes[qi * nh + hh]));
    }
  }
  // Pass 3: probability-weighted sum of V, key blocks in order.
  for (int64_t jb = lo_first; jb <= hi; jb += kKeyBlock) {
    const int64_t je = jb + kKeyBlock - 1 < hi ? jb + kKeyBlock - 1 : hi;
    slot_rows(a.v, jb, je - jb + 1);
    for (int64_t qi = 0; qi < nq; ++qi) {
      const int64_t j0 = jb > lo_of(qi) ? jb : lo_of(qi);
      const int64_t j1 = je < pos_of(qi) ? je : pos_of(qi);
      if (j0 > j1) continue;
      for (int64_t hh = 0; hh < nh; ++hh) {
        const int64_t head_off = (u.g0 + hh / G) * D;
        for (int64_t j = j0; j <= j1; ++j) head_rows[j - j0] = rows[j - jb] + head_off;
        AccumulateV(scores + (qi * nh + hh) * span + (j0 - lo_first), head_rows, j1 - j0 + 1, D,
                    acc + (qi * nh + hh) * D);
      }
    }
  }
  for (int64_t qi = 0; qi < nq; ++qi) {
    float* o = a.out + ((u.t0 + qi) * a.Hq + int64_t(u.g0) * G) * D;
    for (int64_t hh = 0; hh < nh; ++hh) {
      const float inv = inv_sums[qi * nh + hh];
      for (int64_t d = 0; d < D; ++d) o[hh * D + d] = acc[(qi * nh + hh) * D + d] * inv;
    }
  }
}

void AttendUnits(const AttentionArgs& a, const AttentionUnit* units, int64_t u0, int64_t u1, float* scratch) {
  for (int64_t u = u0; u < u1; ++u) AttendUnit(a, units[u], scratch);
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

// Checks the batch tensors and their contents against q and the cache.
void check_batch(const AttentionBatch& b, int64_t T, int64_t num_blocks, int64_t block_size) {
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
  }
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
  check_batch(batch, T, cache.k.size(0), block_size);
  if (T == 0 || Hq == 0) return;

  AttentionArgs a;
  a.q = q.data_as<const float>();
  a.k = cache.k.data_as<const float>();
  a.v = cache.v.data_as<const float>();
  a.out = out.data_as<float>();
  a.cu_seqlens = batch.cu_seqlens_q.data_as<const int32_t>();
  a.context_lens = batch.context_lens.data_as<const int32_t>();
  a.block_tables = batch.block_tables.data_as<const int32_t>();
  a.max_blocks = batch.block_tables.size(1);
  a.block_size = block_size;
  a.Hq = Hq;
  a.Hkv = Hkv;
  a.D = D;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.window = p.sliding_window;

  // Tiles of query tokens per row; kv heads split into `splits` ranges when there are too few tiles
  // to occupy the threads, or when a tile's accumulators would not stay in L1/L2.
  const int64_t G = Hq / Hkv;
  const int64_t threads = ThreadPool::global().num_threads();
  int64_t num_tiles = 0, widest_tile = 0;
  for (int64_t r = 0; r < batch.num_rows; ++r) {
    const int64_t q_len = a.cu_seqlens[r + 1] - a.cu_seqlens[r];
    num_tiles += (q_len + kQueryTile - 1) / kQueryTile;
    widest_tile = std::max(widest_tile, std::min(q_len, kQueryTile));
  }
  int64_t splits = 1;
  auto next_divisor = [&](int64_t s) {
    do ++s;
    while (Hkv % s != 0);
    return s;
  };
  while (splits < Hkv && num_tiles * splits < threads) splits = next_divisor(splits);
  while (splits < Hkv && widest_tile * (Hkv / splits) * G * D * 4 > (int64_t(64) << 10)) splits = next_divisor(splits);
  const int64_t heads_per_unit = Hkv / splits;

  thread_local std::vector<AttentionUnit> units;
  units.clear();
  int64_t scratch_floats = 0;
  for (int64_t r = 0; r < batch.num_rows; ++r) {
    const int64_t q_len = a.cu_seqlens[r + 1] - a.cu_seqlens[r];
    for (int64_t i = 0; i < q_len; i += kQueryTile) {
      const int64_t nq = std::min(kQueryTile, q_len - i);
      const int64_t t0 = a.cu_seqlens[r] + i;
      for (int64_t g = 0; g < Hkv; g += heads_per_unit)
        units.push_back({int32_t(r), int32_t(t0), int32_t(t0 + nq), int32_t(g), int32_t(g + heads_per_unit)});
      // Key span of the tile: at most the row's context, or window + tile - 1 keys.
      int64_t span = a.context_lens[r];
      if (a.window > 0) span = std::min(span, a.window + nq - 1);
      scratch_floats = std::max(scratch_floats, nq * heads_per_unit * G * (span + D + 2));
    }
  }
  const AttentionUnit* unit_data = units.data();
  ThreadPool::global().parallel_for(int64_t(units.size()), 1, [&](int64_t u0, int64_t u1) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < size_t(scratch_floats)) scratch.resize(size_t(scratch_floats));
    HWY_DYNAMIC_DISPATCH(AttendUnits)(a, unit_data, u0, u1, scratch.data());
  });
}

}  // namespace rill::cpu
#endif  // HWY_ONCE
