// CUDA rope / store_kv / fused rope_store_kv against host references: rope emulates HF's bf16
// arithmetic (f32 angle, bf16 cos/sin, three bf16 ops) and must agree bit-for-bit on ≥ 99% of
// elements with relative error < 1e-2 against the exact rotation; the cache writes are exact,
// slots not written keep their poison (label cuda).
#include "kernels/cuda/cuda_test_util.h"

namespace rill {
namespace {

using namespace cuda_test;

struct RopeCase {
  int hq, hkv, head_dim, rotary_dim;
  float factor;
};

// Rotates x [T, H, D] in place the way HF does; also returns the exact (double) rotation.
std::vector<double> rope_reference(std::vector<float>& x, const std::vector<int32_t>& pos,
                                   const std::vector<float>& inv_freq, int64_t tokens, int heads, int d, int rot,
                                   float factor) {
  std::vector<double> exact(x.begin(), x.end());
  int half = rot / 2;
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < half; ++j) {
        float ang = float(pos[size_t(t)]) * inv_freq[size_t(j)];  // f32 product, as HF
        float c = round_bf16(float(std::cos(double(ang)) * factor));
        float s = round_bf16(float(std::sin(double(ang)) * factor));
        size_t i1 = size_t((t * heads + h) * d + j), i2 = i1 + size_t(half);
        float x1 = x[i1], x2 = x[i2];
        exact[i1] = double(x1) * std::cos(double(ang)) * factor - double(x2) * std::sin(double(ang)) * factor;
        exact[i2] = double(x2) * std::cos(double(ang)) * factor + double(x1) * std::sin(double(ang)) * factor;
        x[i1] = round_bf16(round_bf16(x1 * c) + round_bf16(-x2 * s));
        x[i2] = round_bf16(round_bf16(x2 * c) + round_bf16(x1 * s));
      }
  return exact;
}

std::vector<float> make_inv_freq(int d, int rot, double theta) {
  std::vector<float> f(static_cast<size_t>(rot / 2));
  for (int j = 0; j < rot / 2; ++j) f[size_t(j)] = float(1.0 / std::pow(theta, double(2 * j) / double(d)));
  return f;
}

TEST(CudaRope, MatchesHfArithmetic) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // (The last case, halves of 18, takes the per-pair path; the others 8 pairs a thread.)
  const RopeCase cases[] = {
      {8, 2, 128, 128, 1.f}, {4, 4, 64, 32, 1.f}, {16, 8, 256, 256, 1.1386f}, {6, 1, 80, 80, 1.f}, {4, 2, 72, 36, 1.f}};
  for (const RopeCase& rc : cases) {
    SCOPED_TRACE(::testing::Message() << "hq " << rc.hq << " hkv " << rc.hkv << " d " << rc.head_dim << " rot "
                                      << rc.rotary_dim);
    const int64_t tokens = 37;
    std::vector<int32_t> pos(tokens);
    std::uniform_int_distribution<int32_t> pick(0, 131071);
    for (auto& p : pos) p = pick(rng);
    pos[0] = 0;
    pos[1] = 1;
    auto q = random_bf16_values(rng, size_t(tokens * rc.hq * rc.head_dim), -2.f, 2.f);
    auto k = random_bf16_values(rng, size_t(tokens * rc.hkv * rc.head_dim), -2.f, 2.f);
    auto inv = make_inv_freq(rc.head_dim, rc.rotary_dim, 1e6);
    DevTensor dq = upload_bf16(q, {tokens, rc.hq, rc.head_dim}), dk = upload_bf16(k, {tokens, rc.hkv, rc.head_dim});
    DevTensor dpos = upload_i32(pos, {tokens}), dinv = upload_f32(inv, {rc.rotary_dim / 2});
    RopeTable table{dinv.t, rc.rotary_dim, rc.factor};
    backend().rope(dq.t, dk.t, dpos.t, table);
    auto q_exact = rope_reference(q, pos, inv, tokens, rc.hq, rc.head_dim, rc.rotary_dim, rc.factor);
    auto k_exact = rope_reference(k, pos, inv, tokens, rc.hkv, rc.head_dim, rc.rotary_dim, rc.factor);
    auto qo = download_bf16(dq), ko = download_bf16(dk);
    EXPECT_LT(rel_error(qo, q_exact), 1e-2);
    EXPECT_LT(rel_error(ko, k_exact), 1e-2);
    EXPECT_GT(exact_fraction(qo, q), 0.99);
    EXPECT_GT(exact_fraction(ko, k), 0.99);
    // Dims past rotary_dim pass through untouched.
    for (int64_t t = 0; t < tokens; ++t)
      for (int h = 0; h < rc.hq; ++h)
        for (int c = rc.rotary_dim; c < rc.head_dim; ++c) {
          size_t i = size_t((t * rc.hq + h) * rc.head_dim + c);
          ASSERT_EQ(qo[i], q[i]);
        }
  }
}

TEST(CudaRope, StoreKvAndFusedRopeStoreKv) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t tokens = 29, blocks = 9, block_size = 16;
  const int hq = 8, hkv = 2, d = 128;
  const int64_t slots = blocks * block_size, row = hkv * d;
  // Distinct random slots; one token is padding (slot -1).
  std::vector<int32_t> all(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) all[size_t(i)] = int32_t(i);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int32_t> slot(all.begin(), all.begin() + tokens);
  slot[5] = -1;
  std::vector<int32_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[size_t(t)] = int32_t(100 + 3 * t);
  auto q = random_bf16_values(rng, size_t(tokens * hq * d)), k = random_bf16_values(rng, size_t(tokens * row));
  auto v = random_bf16_values(rng, size_t(tokens * row));
  auto inv = make_inv_freq(d, d, 10000.0);
  DevTensor dslot = upload_i32(slot, {tokens}), dpos = upload_i32(pos, {tokens}), dinv = upload_f32(inv, {d / 2});
  RopeTable table{dinv.t, d, 1.f};

  // Unfused: rope then store_kv.
  DevTensor q1 = upload_bf16(q, {tokens, hq, d}), k1 = upload_bf16(k, {tokens, hkv, d}), v1 = upload_bf16(v, {tokens, hkv, d});
  DevTensor kc1(DType::bf16, {blocks, block_size, hkv, d}), vc1(DType::bf16, {blocks, block_size, hkv, d});
  kc1.poison();
  vc1.poison();
  backend().rope(q1.t, k1.t, dpos.t, table);
  KvLayer cache1{kc1.t, vc1.t};
  backend().store_kv(k1.t, v1.t, dslot.t, cache1);
  auto k_rot = download_bf16(k1);
  auto kc = download_bf16(kc1), vc = download_bf16(vc1);
  std::vector<bool> written(size_t(slots), false);
  for (int64_t t = 0; t < tokens; ++t) {
    if (slot[size_t(t)] < 0) continue;
    written[size_t(slot[size_t(t)])] = true;
    for (int64_t c = 0; c < row; ++c) {
      ASSERT_EQ(kc[size_t(slot[size_t(t)] * row + c)], k_rot[size_t(t * row + c)]);
      ASSERT_EQ(vc[size_t(slot[size_t(t)] * row + c)], v[size_t(t * row + c)]);
    }
  }
  for (int64_t s = 0; s < slots; ++s) {
    if (!written[size_t(s)]) {
      ASSERT_TRUE(std::isnan(kc[size_t(s * row)]) && std::isnan(vc[size_t(s * row)])) << s;
    }
  }

  // Fused: identical q, k and caches.
  DevTensor q2 = upload_bf16(q, {tokens, hq, d}), k2 = upload_bf16(k, {tokens, hkv, d}), v2 = upload_bf16(v, {tokens, hkv, d});
  DevTensor kc2(DType::bf16, {blocks, block_size, hkv, d}), vc2(DType::bf16, {blocks, block_size, hkv, d});
  kc2.poison();
  vc2.poison();
  AttentionBatch batch;
  batch.positions = dpos.t;
  batch.slot_mapping = dslot.t;
  KvLayer cache2{kc2.t, vc2.t};
  backend().rope_store_kv(q2.t, k2.t, v2.t, batch, table, cache2);
  EXPECT_EQ(download_bf16(q2), download_bf16(q1));
  EXPECT_EQ(download_bf16(k2), k_rot);
  auto kc2h = download_bf16(kc2), vc2h = download_bf16(vc2);
  for (size_t i = 0; i < kc.size(); ++i) {
    ASSERT_EQ(std::isnan(kc2h[i]), std::isnan(kc[i])) << i;
    if (!std::isnan(kc[i])) {
      ASSERT_EQ(kc2h[i], kc[i]) << i;
    }
    if (!std::isnan(vc[i])) {
      ASSERT_EQ(vc2h[i], vc[i]) << i;
    }
  }
}

// The fused per-head q/k RMSNorm + rope + cache write (norm_rope_store_kv) gives the bits of
// the three ops run in turn (Kernels' default), for f32 and bf16 norm weights, (1 + w) and the
// f32-scale variant, more kv heads than a block's warps, partial rotary, a padding slot.
TEST(CudaRope, NormRopeStoreKvEqualsUnfused) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct Case {
    int hq, hkv, d, rot;
    DType w;
    bool one_plus, fp32_scale;
  };
  const Case cases[] = {{32, 8, 128, 128, DType::f32, false, false},
                        {40, 10, 128, 64, DType::bf16, true, false},
                        {8, 2, 64, 64, DType::f32, false, true},
                        {16, 16, 256, 256, DType::bf16, false, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "hq " << c.hq << " hkv " << c.hkv << " d " << c.d);
    const int64_t tokens = 13, blocks = 4, block_size = 16, row = int64_t(c.hkv) * c.d;
    std::vector<int32_t> slot(tokens), pos(tokens);
    for (int64_t t = 0; t < tokens; ++t) slot[size_t(t)] = int32_t(3 * t + 1), pos[size_t(t)] = int32_t(7 + 5 * t);
    slot[4] = -1;
    auto q = random_bf16_values(rng, size_t(tokens * c.hq * c.d), -3.f, 3.f);
    auto k = random_bf16_values(rng, size_t(tokens * row), -3.f, 3.f), v = random_bf16_values(rng, size_t(tokens * row));
    auto qw = random_bf16_values(rng, size_t(c.d), 0.5f, 1.5f), kw = random_bf16_values(rng, size_t(c.d), 0.5f, 1.5f);
    auto inv = make_inv_freq(c.d, c.rot, 10000.0);
    DevTensor dslot = upload_i32(slot, {tokens}), dpos = upload_i32(pos, {tokens}), dinv = upload_f32(inv, {c.rot / 2});
    DevTensor dqw = c.w == DType::f32 ? upload_f32(qw, {c.d}) : upload_bf16(qw, {c.d});
    DevTensor dkw = c.w == DType::f32 ? upload_f32(kw, {c.d}) : upload_bf16(kw, {c.d});
    RopeTable table{dinv.t, c.rot, 1.f};
    NormParams np;
    np.eps = 1e-6f;
    np.one_plus_weight = c.one_plus;
    np.scale_in_fp32 = c.fp32_scale;
    AttentionBatch batch;
    batch.positions = dpos.t;
    batch.slot_mapping = dslot.t;
    std::vector<float> out[2][4];
    for (int fused = 0; fused < 2; ++fused) {
      DevTensor dq = upload_bf16(q, {tokens, c.hq, c.d}), dk = upload_bf16(k, {tokens, c.hkv, c.d});
      DevTensor dv = upload_bf16(v, {tokens, c.hkv, c.d});
      DevTensor kc(DType::bf16, {blocks, block_size, c.hkv, c.d}), vc(DType::bf16, {blocks, block_size, c.hkv, c.d});
      kc.poison();
      vc.poison();
      KvLayer cache{kc.t, vc.t};
      if (fused) backend().norm_rope_store_kv(dq.t, dk.t, dv.t, dqw.t, dkw.t, np, batch, table, cache);
      else backend().Kernels::norm_rope_store_kv(dq.t, dk.t, dv.t, dqw.t, dkw.t, np, batch, table, cache);
      out[fused][0] = download_bf16(dq);
      out[fused][1] = download_bf16(dk);
      out[fused][2] = download_bf16(kc);
      out[fused][3] = download_bf16(vc);
    }
    const char* names[] = {"q", "k", "k cache", "v cache"};
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(out[0][i].size(), out[1][i].size());
      size_t differ = 0;
      for (size_t e = 0; e < out[0][i].size(); ++e) {
        const float a = out[0][i][e], b = out[1][i][e];
        differ += !(a == b || (std::isnan(a) && std::isnan(b)));
      }
      EXPECT_EQ(differ, 0u) << names[i] << ": " << differ << " elements differ";
    }
    // The norm did something: q is not merely rotated.
    EXPECT_NE(out[1][0], q);
  }
}

}  // namespace
}  // namespace rill
