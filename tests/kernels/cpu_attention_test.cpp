// CPU store_kv + paged attention against a double-precision reference that reads each row's K/V
// history from plain arrays (not the cache): rows of different lengths in one batch, prior context
// already cached, shuffled non-contiguous block ids, GQA 1/2/4, sliding window, softcap, block
// sizes 16 and 4. Unused cache memory is NaN, so reading a wrong slot cannot pass.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

using test::rel_error;

struct RowSpec {
  int32_t q_len;
  int32_t context_len;
};

struct AttnCase {
  const char* name;
  int64_t block_size, Hq, Hkv, D;
  int32_t window;
  float softcap;
  std::vector<RowSpec> rows;
};

// Everything one batch needs, owned by vectors so the tensors stay valid.
struct Batch {
  AttnCase c;
  int64_t T = 0, num_blocks = 0, max_blocks = 0;
  std::vector<std::vector<float>> k_hist, v_hist;  // per row [context_len, Hkv, D]
  std::vector<float> q, out, k_new, v_new, k_cache, v_cache;
  std::vector<int32_t> cu, ctx, tables, slots, positions;
  std::vector<double> ref;
};

Batch build(const AttnCase& c, std::mt19937& rng) {
  Batch b;
  b.c = c;
  const int64_t rows = int64_t(c.rows.size());
  const int64_t row_elems = c.Hkv * c.D;
  b.cu.push_back(0);
  int64_t needed = 0;
  for (const RowSpec& r : c.rows) {
    b.cu.push_back(b.cu.back() + r.q_len);
    b.ctx.push_back(r.context_len);
    const int64_t blocks = (r.context_len + c.block_size - 1) / c.block_size;
    needed += blocks;
    b.max_blocks = std::max(b.max_blocks, blocks + 1);  // one spare column of padding
  }
  b.T = b.cu.back();
  b.num_blocks = needed + 3;  // a few blocks nobody owns
  std::vector<int32_t> ids(size_t(b.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.tables.assign(size_t(rows * b.max_blocks), -5);  // padding that must never be read
  size_t next = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t blocks = (c.rows[r].context_len + c.block_size - 1) / c.block_size;
    for (int64_t i = 0; i < blocks; ++i) b.tables[size_t(r * b.max_blocks + i)] = ids[next++];
  }
  const size_t cache_elems = size_t(b.num_blocks * c.block_size * row_elems);
  b.k_cache.assign(cache_elems, NAN);
  b.v_cache.assign(cache_elems, NAN);
  b.q = test::random_floats(rng, size_t(b.T * c.Hq * c.D), -2.f, 2.f);
  b.out.assign(b.q.size(), -3.f);
  b.k_new.resize(size_t(b.T * row_elems));
  b.v_new.resize(size_t(b.T * row_elems));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = c.rows[r].context_len, q_len = c.rows[r].q_len;
    b.k_hist.push_back(test::random_floats(rng, size_t(n * row_elems), -2.f, 2.f));
    b.v_hist.push_back(test::random_floats(rng, size_t(n * row_elems)));
    for (int64_t p = 0; p < n; ++p) {
      const int64_t slot = int64_t(b.tables[size_t(r * b.max_blocks + p / c.block_size)]) * c.block_size +
                           p % c.block_size;
      const float* ks = b.k_hist[r].data() + p * row_elems;
      const float* vs = b.v_hist[r].data() + p * row_elems;
      if (p < n - q_len) {  // prior context: already in the cache
        std::copy(ks, ks + row_elems, b.k_cache.begin() + slot * row_elems);
        std::copy(vs, vs + row_elems, b.v_cache.begin() + slot * row_elems);
      } else {  // this step's tokens: written by store_kv
        const int64_t t = b.cu[r] + (p - (n - q_len));
        std::copy(ks, ks + row_elems, b.k_new.begin() + t * row_elems);
        std::copy(vs, vs + row_elems, b.v_new.begin() + t * row_elems);
        b.slots.push_back(int32_t(slot));
        b.positions.push_back(int32_t(p));
      }
    }
  }
  return b;
}

void compute_reference(Batch& b, float scale) {
  const AttnCase& c = b.c;
  const int64_t G = c.Hq / c.Hkv;
  b.ref.assign(b.q.size(), 0.0);
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const int64_t n = c.rows[r].context_len, q_len = c.rows[r].q_len;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t t = b.cu[r] + i, pos = n - q_len + i;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      for (int64_t h = 0; h < c.Hq; ++h) {
        const int64_t g = h / G;
        const float* q = b.q.data() + (t * c.Hq + h) * c.D;
        std::vector<double> s;
        for (int64_t j = lo; j <= pos; ++j) {
          const float* k = b.k_hist[r].data() + (j * c.Hkv + g) * c.D;
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += double(q[d]) * k[d];
          dot *= scale;
          if (c.softcap > 0) dot = c.softcap * std::tanh(dot / c.softcap);
          s.push_back(dot);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double total = 0;
        for (double& x : s) total += (x = std::exp(x - mx));
        double* o = b.ref.data() + (t * c.Hq + h) * c.D;
        for (int64_t j = lo; j <= pos; ++j) {
          const float* v = b.v_hist[r].data() + (j * c.Hkv + g) * c.D;
          for (int64_t d = 0; d < c.D; ++d) o[d] += s[size_t(j - lo)] / total * v[d];
        }
      }
    }
  }
}

void run(Kernels& kern, Batch& b, float scale) {
  const AttnCase& c = b.c;
  const int64_t rows = int64_t(c.rows.size());
  Tensor q(b.q.data(), DType::f32, {b.T, c.Hq, c.D});
  Tensor out(b.out.data(), DType::f32, {b.T, c.Hq, c.D});
  Tensor k_new(b.k_new.data(), DType::f32, {b.T, c.Hkv, c.D});
  Tensor v_new(b.v_new.data(), DType::f32, {b.T, c.Hkv, c.D});
  KvLayer cache{Tensor(b.k_cache.data(), DType::f32, {b.num_blocks, c.block_size, c.Hkv, c.D}),
                Tensor(b.v_cache.data(), DType::f32, {b.num_blocks, c.block_size, c.Hkv, c.D})};
  AttentionBatch batch;
  batch.cu_seqlens_q = Tensor(b.cu.data(), DType::i32, {rows + 1});
  batch.context_lens = Tensor(b.ctx.data(), DType::i32, {rows});
  batch.block_tables = Tensor(b.tables.data(), DType::i32, {rows, b.max_blocks});
  batch.slot_mapping = Tensor(b.slots.data(), DType::i32, {b.T});
  batch.positions = Tensor(b.positions.data(), DType::i32, {b.T});
  batch.num_rows = int32_t(rows);
  kern.store_kv(k_new, v_new, batch.slot_mapping, cache);
  AttentionParams p;
  p.scale = scale;
  p.sliding_window = c.window;
  p.softcap = c.softcap;
  kern.attention(q, cache, batch, p, out);
}

std::vector<AttnCase> cases() {
  return {
      {"mha bs16", 16, 4, 4, 64, 0, 0.f, {{1, 37}, {20, 20}, {5, 50}, {1, 1}}},
      {"gqa2 bs4", 4, 8, 4, 128, 0, 0.f, {{3, 3}, {1, 130}, {11, 29}}},
      {"gqa4 bs16 window", 16, 16, 4, 128, 8, 0.f, {{1, 70}, {24, 40}, {6, 6}}},
      {"gqa2 bs4 softcap", 4, 4, 2, 80, 0, 20.f, {{7, 19}, {1, 64}}},
      {"gqa4 bs4 window softcap odd D", 4, 8, 2, 72, 5, 30.f, {{9, 33}, {1, 2}, {4, 4}}},
      {"empty row", 16, 2, 1, 64, 0, 0.f, {{2, 18}, {0, 9}, {1, 1}}},
  };
}

TEST(CpuAttention, MatchesReferenceOverPagedCache) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(30);
  std::mt19937 rng(seed);
  for (const AttnCase& c : cases()) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " case " << c.name);
    Batch b = build(c, rng);
    const float scale = 1.f / std::sqrt(float(c.D));
    compute_reference(b, scale);
    run(*kern, b, scale);
    // f32 dot products of length D and sums over ≤ 130 keys: ~1e-7 relative expected.
    EXPECT_LE(rel_error(b.out, b.ref), 2e-6);
  }
}

TEST(CpuAttention, EveryTargetAndLongContext) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(31);
  std::mt19937 rng(seed);
  AttnCase c{"long", 16, 16, 8, 128, 0, 0.f, {{1, 1500}, {33, 600}}};
  Batch b = build(c, rng);
  const float scale = 1.f / std::sqrt(float(c.D));
  compute_reference(b, scale);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(testing::Message() << "seed " << seed << " target " << hwy::TargetName(target));
    std::fill(b.out.begin(), b.out.end(), -3.f);
    run(*kern, b, scale);
    EXPECT_LE(rel_error(b.out, b.ref), 2e-6);
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(CpuStoreKv, WritesSlotsAndSkipsPadding) {
  auto kern = make_cpu_kernels();
  const int64_t blocks = 3, bs = 4, H = 2, D = 3, row = H * D;
  std::vector<float> k(3 * row), v(3 * row), kc(blocks * bs * row, 0.f), vc(blocks * bs * row, 0.f);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = float(i + 1);
    v[i] = -float(i + 1);
  }
  std::vector<int32_t> slots = {9, -1, 0};
  KvLayer cache{Tensor(kc.data(), DType::f32, {blocks, bs, H, D}), Tensor(vc.data(), DType::f32, {blocks, bs, H, D})};
  kern->store_kv(Tensor(k.data(), DType::f32, {3, H, D}), Tensor(v.data(), DType::f32, {3, H, D}),
                 Tensor(slots.data(), DType::i32, {3}), cache);
  for (int64_t s = 0; s < blocks * bs; ++s)
    for (int64_t e = 0; e < row; ++e) {
      const float expect_k = s == 9 ? k[e] : s == 0 ? k[2 * row + e] : 0.f;
      ASSERT_EQ(kc[s * row + e], expect_k) << "slot " << s;
      ASSERT_EQ(vc[s * row + e], -expect_k) << "slot " << s;
    }
  std::vector<int32_t> bad = {12, 0, 1};
  test::expect_op_error("store_kv", [&] {
    kern->store_kv(Tensor(k.data(), DType::f32, {3, H, D}), Tensor(v.data(), DType::f32, {3, H, D}),
                   Tensor(bad.data(), DType::i32, {3}), cache);
  });
  test::expect_op_error("store_kv", [&] {
    kern->store_kv(Tensor(k.data(), DType::f32, {3, H, D}), Tensor(v.data(), DType::f32, {3, H, 2}),
                   Tensor(slots.data(), DType::i32, {3}), cache);
  });
}

TEST(CpuAttention, RejectsBadArguments) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(32));
  Batch b = build({"base", 4, 4, 2, 8, 0, 0.f, {{2, 6}, {1, 3}}}, rng);
  auto attempt = [&](auto mutate) {
    Batch m = b;
    const int64_t rows = 2;
    Tensor q(m.q.data(), DType::f32, {m.T, 4, 8});
    Tensor out(m.out.data(), DType::f32, {m.T, 4, 8});
    KvLayer cache{Tensor(m.k_cache.data(), DType::f32, {m.num_blocks, 4, 2, 8}),
                  Tensor(m.v_cache.data(), DType::f32, {m.num_blocks, 4, 2, 8})};
    AttentionBatch batch;
    batch.cu_seqlens_q = Tensor(m.cu.data(), DType::i32, {rows + 1});
    batch.context_lens = Tensor(m.ctx.data(), DType::i32, {rows});
    batch.block_tables = Tensor(m.tables.data(), DType::i32, {rows, m.max_blocks});
    batch.num_rows = int32_t(rows);
    AttentionParams p;
    mutate(m, q, out, cache, batch, p);
    test::expect_op_error("attention", [&] { kern->attention(q, cache, batch, p, out); });
  };
  attempt([](Batch&, Tensor& q, Tensor&, KvLayer&, AttentionBatch&, AttentionParams&) {
    q = q.view({q.size(0), 2, 16});  // head_dim differs from the cache
  });
  attempt([](Batch& m, Tensor& q, Tensor& out, KvLayer&, AttentionBatch&, AttentionParams&) {
    q = Tensor(m.q.data(), DType::f32, {m.T, 3, 8});  // 3 q heads over 2 kv heads
    out = Tensor(m.out.data(), DType::f32, {m.T, 3, 8});
  });
  attempt([](Batch& m, Tensor&, Tensor&, KvLayer&, AttentionBatch&, AttentionParams&) { m.cu[2] = 2; });
  attempt([](Batch& m, Tensor&, Tensor&, KvLayer&, AttentionBatch&, AttentionParams&) { m.ctx[0] = 1; });
  attempt([](Batch& m, Tensor&, Tensor&, KvLayer&, AttentionBatch&, AttentionParams&) { m.tables[0] = 999; });
  attempt([](Batch& m, Tensor&, Tensor&, KvLayer&, AttentionBatch&, AttentionParams&) { m.ctx[1] = 100; });
  attempt([](Batch&, Tensor&, Tensor&, KvLayer&, AttentionBatch& batch, AttentionParams&) { batch.num_rows = 3; });
  attempt([](Batch&, Tensor&, Tensor&, KvLayer&, AttentionBatch&, AttentionParams& p) { p.sliding_window = -2; });
  attempt([](Batch&, Tensor& q, Tensor& out, KvLayer&, AttentionBatch&, AttentionParams&) { out = q; });
}

}  // namespace
}  // namespace rill
