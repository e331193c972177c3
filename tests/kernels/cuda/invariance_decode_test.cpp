// The decode step's fused and deferred ops against the ops they replace, bit for bit (label cuda):
// the fused decode MLP block, deferred GEMM folds read by the next op, the RoPE op inside the decode
// attention; and a printed timeline of the fused MLP block (DISABLED_).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/invariance_util.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

namespace rill {
namespace {

using namespace cuda_test;

// Two runs' outputs, output i named names[i], compared bit for bit; a size mismatch is fatal (call it
// under ASSERT_NO_FATAL_FAILURE so that the test stops there).
void expect_same_bits(const std::vector<std::vector<float>>& want, const std::vector<std::vector<float>>& got,
                      const char* const* names) {
  ASSERT_EQ(want.size(), got.size()) << "number of outputs";
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].size(), got[i].size()) << names[i];
    EXPECT_EQ(differing_bits(want[i], got[i]), 0u) << names[i];
  }
}

// The fused decode MLP block (CudaKernels::o_proj_mlp at one row: o, add + RMSNorm, gate/up +
// SwiGLU and down in one persistent kernel) against the four ops of the default Kernels::o_proj_mlp:
// the new residual, the SwiGLU output and the final delta bitwise, on fresh random inputs, for the
// 8B shape, shapes with other split ranges and tile counts, each norm rounding, and launch after
// launch (its counters and flags reset themselves). The fused path leaves h (and gate_up) untouched,
// which shows it ran; a hidden size of 1024 (the norm's warp path) must run the four ops instead.
TEST(CudaInvariance, DecodeMlpEqualsOps) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  struct FusedOn {  // the fused block is opt-in (RILL_DECODE_MLP): on for this test only
    bool was = backend().decode_mlp();
    FusedOn() { backend().set_decode_mlp(true); }
    ~FusedOn() { backend().set_decode_mlp(was); }
  } fused_on;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct S {
    int64_t hidden, k_attn, inter;
  };
  const S shapes[] = {
      {4096, 4096, 12288}, {2048, 2048, 5632}, {1088, 2112, 1344}, {8192, 1024, 2048}, {1024, 1024, 2048}};
  for (const S& sh : shapes) {
    const int64_t H = sh.hidden, I = sh.inter;
    SCOPED_TRACE(::testing::Message() << "hidden=" << H << " attention=" << sh.k_attn << " inter=" << I);
    DevTensor attn = upload_bf16(random_bf16_values(rng, size_t(sh.k_attn), -2.f, 2.f), {1, sh.k_attn});
    DevTensor o = upload_bf16(random_bf16_values(rng, size_t(H * sh.k_attn), -0.05f, 0.05f), {H, sh.k_attn});
    DevTensor gu = upload_bf16(random_bf16_values(rng, size_t(2 * I * H), -0.05f, 0.05f), {2 * I, H});
    DevTensor dn = upload_bf16(random_bf16_values(rng, size_t(H * I), -0.05f, 0.05f), {H, I});
    DevTensor nw = upload_bf16(random_bf16_values(rng, size_t(H), 0.5f, 1.5f), {H});
    const std::vector<float> residual0 = random_bf16_values(rng, size_t(H), -4.f, 4.f);
    const bool fusable = H > 1024;
    NormParams params[3];
    params[1].scale_in_fp32 = true;
    params[2].one_plus_weight = true;
    for (int pi = 0; pi < (H == 4096 ? 3 : 1); ++pi) {
      const NormParams& np = params[pi];
      SCOPED_TRACE(::testing::Message() << "norm " << pi);
      struct Out {
        std::vector<float> residual, delta, act, h;
      };
      auto run = [&](bool fused) {
        DevTensor res = upload_bf16(residual0, {1, H}), delta(DType::bf16, {1, H}), h(DType::bf16, {1, H});
        DevTensor gate_up(DType::bf16, {1, 2 * I}), act(DType::bf16, {1, I});
        for (DevTensor* t : {&delta, &h, &gate_up, &act}) t->poison();
        if (fused)
          backend().o_proj_mlp(attn.t, o.t, nullptr, nw.t, np, gu.t, nullptr, dn.t, nullptr, res.t, delta.t, h.t,
                               gate_up.t, act.t);
        else
          backend().Kernels::o_proj_mlp(attn.t, o.t, nullptr, nw.t, np, gu.t, nullptr, dn.t, nullptr, res.t, delta.t,
                                        h.t, gate_up.t, act.t);
        return Out{download_bf16(res), download_bf16(delta), download_bf16(act), download_bf16(h)};
      };
      const Out want = run(false);
      for (float v : want.delta) ASSERT_TRUE(std::isfinite(v)) << "the reference overflowed: rescale the inputs";
      for (int rep = 0; rep < 3; ++rep) {
        const Out got = run(true);
        EXPECT_EQ(differing_bits(want.residual, got.residual), 0u) << "residual, launch " << rep;
        EXPECT_EQ(differing_bits(want.act, got.act), 0u) << "SwiGLU output, launch " << rep;
        EXPECT_EQ(differing_bits(want.delta, got.delta), 0u) << "delta, launch " << rep;
        size_t untouched = 0;
        for (float v : got.h) untouched += std::isnan(v);
        EXPECT_EQ(untouched, fusable ? got.h.size() : 0u) << "h left as poisoned: the fused path ran";
      }
    }
  }
}

// Random q / k norm weights around 1 and a RoPE table (base 1e6) for head_dim d.
struct QkNormRope {
  DevTensor qn, kn, dinv;
  RopeTable table;
  QkNormRope(std::mt19937_64& rng, int64_t d)
      : qn(upload_bf16(random_bf16_values(rng, size_t(d), 0.5f, 1.5f), {d})),
        kn(upload_bf16(random_bf16_values(rng, size_t(d), 0.5f, 1.5f), {d})),
        dinv(upload_f32(inv_freq(d), {d / 2})),
        table{dinv.t, int(d), 1.f} {}
  static std::vector<float> inv_freq(int64_t d) {
    std::vector<float> inv(size_t(d / 2));
    for (int64_t j = 0; j < d / 2; ++j) inv[size_t(j)] = float(std::pow(1e6, -2.0 * double(j) / double(d)));
    return inv;
  }
};

// Deferred folds (CudaKernels::deferral, on in captured decode graphs): a decode GEMM leaves its
// product as split-K partials and the op reading it folds them on load — the q/k/v of
// norm_rope_store_kv, add_rms_norm's x, swiglu's x — or any other op (here add, download) settles
// it first. Everything each op writes, and the GEMM outputs the consumers store for it, must be
// bitwise what the same ops give with the fold in the GEMM; rows 1, 3 and 8 (configuration 18), 24
// (19), 100 and 200 (configuration 15, split ranges across CTAs: at 200 rows q/k/v's 128 × 128 tiles
// fill the GPU and it runs the persistent fold schedule, so four of the five GEMMs defer), with and
// without biases, on fresh random inputs; each GEMM that can must really have deferred.
TEST(CudaInvariance, DeferredFoldEqualsFold) {
  RILL_REQUIRE_GPU();
  (void)backend();
  if (!cuda::gemm_wgmma_enabled()) GTEST_SKIP() << "the warpgroup decode GEMM (sm_90a) is not in use";
  struct Restore {
    int defer = backend().decode_defer();
    bool split = cuda::decode_defer_split();
    ~Restore() {
      backend().set_decode_defer(defer);
      backend().matmul_engine().set_decode_config(0);
      cuda::set_decode_defer_split(split);
    }
  } restore;
  cuda::set_decode_defer_split(true);
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t H = 4096, hq = 32, hkv = 8, D = 128, I = 1536, nqkv = (hq + 2 * hkv) * D;
  DevTensor wqkv = upload_bf16(random_bf16_values(rng, size_t(nqkv * H), -0.05f, 0.05f), {nqkv, H});
  DevTensor bqkv = upload_bf16(random_bf16_values(rng, size_t(nqkv)), {nqkv});
  DevTensor wo = upload_bf16(random_bf16_values(rng, size_t(H * H), -0.05f, 0.05f), {H, H});
  DevTensor wgu = upload_bf16(random_bf16_values(rng, size_t(2 * I * H), -0.05f, 0.05f), {2 * I, H});
  DevTensor bgu = upload_bf16(random_bf16_values(rng, size_t(2 * I)), {2 * I});
  DevTensor wdn = upload_bf16(random_bf16_values(rng, size_t(H * I), -0.05f, 0.05f), {H, I});
  DevTensor nw = upload_bf16(random_bf16_values(rng, size_t(H), 0.5f, 1.5f), {H});
  const QkNormRope qk(rng, D);
  const DevTensor &qn = qk.qn, &kn = qk.kn;
  const RopeTable& table = qk.table;
  NormParams np;
  for (int64_t m : {1, 3, 8, 24, 100, 200}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "M=" << m << " bias " << bias);
      backend().matmul_engine().set_decode_config(m <= 8 ? 18 : 19);
      const std::vector<float> x0 = random_bf16_values(rng, size_t(m * H), -2.f, 2.f);
      const std::vector<float> res0 = random_bf16_values(rng, size_t(m * H), -4.f, 4.f);
      std::vector<int32_t> pos(static_cast<size_t>(m)), slot(static_cast<size_t>(m));
      for (int64_t t = 0; t < m; ++t) pos[size_t(t)] = int32_t(100 + 7 * t), slot[size_t(t)] = int32_t(2 * t + 1);
      if (m > 1) slot[1] = -1;  // a padding row: its k and v are not stored, v must still be written
      DevTensor dpos = upload_i32(pos, {m}), dslot = upload_i32(slot, {m});
      AttentionBatch batch;
      batch.positions = dpos.t;
      batch.slot_mapping = dslot.t;
      // Split schedules only: the stream schedule (q/k/v at 65-128 rows) leaves a whole product, no
      // partials, and its bits are WgmmaGemmEqualsTiled's to check.
      const StreamMode split_only(0);
      auto run = [&](int mode) {
        backend().set_decode_defer(mode);
        int deferred = 0;
        auto count = [&] { deferred += backend().pending().active(); };
        DevTensor x = upload_bf16(x0, {m, H}), res = upload_bf16(res0, {m, H});
        DevTensor q(DType::bf16, {m, hq, D}), k(DType::bf16, {m, hkv, D}), v(DType::bf16, {m, hkv, D});
        const int64_t blocks = (2 * m + 16) / 16;  // slots up to 2m - 1
        DevTensor kc(DType::bf16, {blocks, 16, hkv, D}), vc(DType::bf16, {blocks, 16, hkv, D});
        DevTensor o(DType::bf16, {m, H}), h(DType::bf16, {m, H}), gu(DType::bf16, {m, 2 * I}), act(DType::bf16, {m, I});
        DevTensor dn(DType::bf16, {m, H}), sum(DType::bf16, {m, H}), gu2(DType::bf16, {m, 2 * I});
        for (DevTensor* t : {&q, &k, &v, &kc, &vc, &o, &h, &gu, &act, &dn, &sum, &gu2}) t->poison();
        Tensor q2 = q.t.view({m, hq * D}), k2 = k.t.view({m, hkv * D}), v2 = v.t.view({m, hkv * D});
        Tensor* const qkv[] = {&q2, &k2, &v2};
        backend().matmul_outputs(x.t, wqkv.t, bias ? &bqkv.t : nullptr, qkv);
        count();
        KvLayer cache{kc.t, vc.t};
        backend().norm_rope_store_kv(q.t, k.t, v.t, qn.t, kn.t, np, batch, table, cache);
        backend().matmul(x.t, wo.t, nullptr, o.t);
        count();
        backend().add_rms_norm(res.t, o.t, nw.t, np, h.t);
        backend().matmul(h.t, wgu.t, bias ? &bgu.t : nullptr, gu.t);
        count();
        backend().swiglu(gu.t, act.t);
        backend().matmul(act.t, wdn.t, nullptr, dn.t);
        count();
        backend().add(dn.t, res.t, sum.t);  // not a reader of deferred partials: settles first
        backend().matmul(h.t, wgu.t, nullptr, gu2.t);
        count();
        std::vector<std::vector<float>> out;
        for (DevTensor* t : {&q, &k, &v, &kc, &vc, &o, &res, &h, &gu, &act, &dn, &sum, &gu2})
          out.push_back(download_bf16(*t));  // (the first download settles gu2)
        EXPECT_FALSE(backend().pending().active());
        return std::make_pair(out, deferred);
      };
      const auto [want, none] = run(0);
      EXPECT_EQ(none, 0);
      const char* names[] = {"q", "k", "v", "k cache", "v cache", "o", "residual", "h", "gate_up", "act",
                             "down", "sum", "gate_up (settled by download)"};
      const auto [got, deferred] = run(2);
      EXPECT_EQ(deferred, m == 200 ? 4 : 5) << "every split GEMM of the sequence left its partials";
      ASSERT_NO_FATAL_FAILURE(expect_same_bits(want, got, names));
      for (float e : want[9]) ASSERT_TRUE(std::isfinite(e)) << "the reference overflowed: rescale the inputs";
    }
  }
}

// The RoPE op run inside the decode attention (norm_rope_store_kv on the q/k/v GEMM's pending
// partials, then attention: the decode split / cluster kernels fold, normalize and rotate q into
// their blocks and store the step's K/V themselves) must give the bits of the RoPE kernel first:
// the attention output, q, k, v and both caches. Rows of 1 and 3 query tokens (the 3 crossing a
// span boundary in one row: two blocks store them), block tables of ≤ 16 spans (the cluster kernel,
// and with it off the two kernels) and of long contexts (the split kernel walking its spans: one
// wave, a block walking all, 3 blocks), head_dim 128 (8 ranges of partials) and 64, with a bias,
// a sliding window, and a padding token (slot -1: its K/V not stored).
TEST(CudaInvariance, RopeInsideAttentionEqualsRopeFirst) {
  RILL_REQUIRE_GPU();
  (void)backend();
  if (!cuda::gemm_wgmma_enabled()) GTEST_SKIP() << "the warpgroup decode GEMM (sm_90a) is not in use";
  ASSERT_TRUE(backend().batch_invariant());
  struct Restore {
    int defer = backend().decode_defer();
    bool rope = cuda::attention_rope_enabled(), cluster = cuda::attention_cluster_enabled();
    ~Restore() {
      backend().set_decode_defer(defer);
      backend().matmul_engine().set_decode_config(0);
      backend().set_attention_span_blocks(0);
      cuda::set_attention_rope(rope);
      cuda::set_attention_cluster(cluster);
    }
  } restore;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct Shape {
    int64_t H, hq, hkv, D;
    bool bias;
    int window;
  };
  for (const Shape& sh : {Shape{4096, 32, 8, 128, false, 0}, Shape{1024, 8, 2, 64, true, 300}}) {
    const int64_t H = sh.H, hq = sh.hq, hkv = sh.hkv, D = sh.D, nqkv = (hq + 2 * hkv) * D, bs = 16;
    SCOPED_TRACE(::testing::Message() << "head_dim " << D);
    DevTensor wqkv = upload_bf16(random_bf16_values(rng, size_t(nqkv * H), -0.05f, 0.05f), {nqkv, H});
    DevTensor bqkv = upload_bf16(random_bf16_values(rng, size_t(nqkv)), {nqkv});
    const QkNormRope qk(rng, D);
    const DevTensor &qn = qk.qn, &kn = qk.kn;
    const RopeTable& table = qk.table;
    NormParams np;
    AttentionParams ap{1.f / std::sqrt(float(D)), sh.window, 0.f};
    struct Case {
      std::vector<int> lens;  // context lengths after the step
      int n;                  // new tokens a row
      int span_blocks;        // the walk (0: one wave)
      bool cluster;
    };
    const Case cases[] = {
        {{700}, 1, 0, true},          {{700}, 1, 0, false},         {{130, 1000, 66}, 3, 0, true},
        {{130, 1000, 66}, 3, 0, false}, {{9001}, 1, 0, true},         {{9001, 4098}, 3, 0, true},
        {{9001, 4098}, 3, 1, true},   {{9001, 4098}, 3, 3, true},   {{17000, 2}, 1, 0, true},
    };
    for (const Case& cs : cases) {
      const int rows = int(cs.lens.size());
      const int64_t m = int64_t(rows) * cs.n;
      SCOPED_TRACE(::testing::Message() << rows << " rows of " << cs.n << " tokens, " << cs.lens[0]
                                        << " keys in the first; span blocks " << cs.span_blocks << ", cluster "
                                        << cs.cluster);
      // Each row its own shuffled blocks; the table as wide as the longest row's.
      int width = 0, total = 0;
      for (int l : cs.lens) width = std::max(width, (l + int(bs) - 1) / int(bs)), total += (l + int(bs) - 1) / int(bs);
      std::vector<int32_t> ids(size_t(total) + 2);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      const int64_t nblocks = int64_t(ids.size());
      std::vector<int32_t> tab(size_t(rows) * size_t(width), -1), cu{0}, ctx, pos, slot;
      size_t next = 0;
      for (int r = 0; r < rows; ++r) {
        const int l = cs.lens[size_t(r)];
        for (int b = 0; b < (l + int(bs) - 1) / int(bs); ++b) tab[size_t(r * width + b)] = ids[next++];
        cu.push_back(cu.back() + cs.n);
        ctx.push_back(l);
        for (int i = 0; i < cs.n; ++i) {
          const int p = l - cs.n + i;
          pos.push_back(p);
          slot.push_back(tab[size_t(r * width + p / int(bs))] * int32_t(bs) + p % int(bs));
        }
      }
      if (m > 1) slot[1] = -1;  // a padding token: nothing stored (the attention reads the old slot)
      const std::vector<float> x0 = random_bf16_values(rng, size_t(m * H), -2.f, 2.f);
      const std::vector<float> k0 = random_bf16_values(rng, size_t(nblocks * bs * hkv * D), -2.f, 2.f);
      const std::vector<float> v0 = random_bf16_values(rng, size_t(nblocks * bs * hkv * D), -2.f, 2.f);
      DevTensor dpos = upload_i32(pos, {m}), dslot = upload_i32(slot, {m}), dcu = upload_i32(cu, {rows + 1});
      DevTensor dctx = upload_i32(ctx, {rows}), dtab = upload_i32(tab, {rows, width});
      AttentionBatch batch;
      batch.positions = dpos.t;
      batch.slot_mapping = dslot.t;
      batch.cu_seqlens_q = dcu.t;
      batch.context_lens = dctx.t;
      batch.block_tables = dtab.t;
      batch.num_rows = rows;
      batch.max_seqlen_q = cs.n;
      batch.max_context_len = *std::max_element(ctx.begin(), ctx.end());
      backend().matmul_engine().set_decode_config(m <= 8 ? 18 : 19);
      backend().set_decode_defer(2);
      backend().set_attention_span_blocks(cs.span_blocks);
      cuda::set_attention_cluster(cs.cluster);
      auto run = [&](bool inside) {
        cuda::set_attention_rope(inside);
        DevTensor x = upload_bf16(x0, {m, H});
        DevTensor q(DType::bf16, {m, hq, D}), k(DType::bf16, {m, hkv, D}), v(DType::bf16, {m, hkv, D});
        DevTensor out(DType::bf16, {m, hq, D});
        DevTensor kc = upload_bf16(k0, {nblocks, bs, hkv, D}), vc = upload_bf16(v0, {nblocks, bs, hkv, D});
        for (DevTensor* t : {&q, &k, &v, &out}) t->poison();
        Tensor q2 = q.t.view({m, hq * D}), k2 = k.t.view({m, hkv * D}), v2 = v.t.view({m, hkv * D});
        Tensor* const qkv[] = {&q2, &k2, &v2};
        backend().matmul_outputs(x.t, wqkv.t, sh.bias ? &bqkv.t : nullptr, qkv);
        EXPECT_TRUE(backend().pending().active()) << "the q/k/v GEMM left its partials";
        KvLayer cache{kc.t, vc.t};
        backend().norm_rope_store_kv(q.t, k.t, v.t, qn.t, kn.t, np, batch, table, cache);
        EXPECT_EQ(backend().rope_pending(), inside);
        const uint64_t before = cuda::attention_rope_launches();
        backend().attention(q.t, cache, batch, ap, out.t);
        EXPECT_EQ(cuda::attention_rope_launches() > before, inside) << "where the RoPE op ran";
        EXPECT_FALSE(backend().rope_pending());
        std::vector<std::vector<float>> res;
        for (DevTensor* t : {&out, &q, &k, &v, &kc, &vc}) res.push_back(download_bf16(*t));
        return res;
      };
      const auto want = run(false), got = run(true);
      const char* names[] = {"attention output", "q", "k", "v", "k cache", "v cache"};
      ASSERT_NO_FATAL_FAILURE(expect_same_bits(want, got, names));
      for (float e : want[0]) ASSERT_TRUE(std::isfinite(e)) << "attention output not finite";
    }
  }
}


// The RoPE op in the q/k/v GEMM's epilogue (qkv_rope_store_kv at 1-2 rows, RILL_QKV_ROPE): q, k, v
// and the cache rows must be bitwise what the GEMM and the RoPE kernel give (its partials deferred,
// as in a decode graph) — with and without Qwen3's q/k norms, 8 split ranges (the 8B shape) and 4
// (a smaller one, with a bias), a padding token (slot -1) at 2 rows; and the fused kernel must have run.
TEST(CudaInvariance, QkvRopeEpilogueEqualsRopeKernel) {
  RILL_REQUIRE_GPU();
  (void)backend();
  if (!cuda::gemm_wgmma_enabled()) GTEST_SKIP() << "the warpgroup decode GEMM (sm_90a) is not in use";
  ASSERT_TRUE(backend().batch_invariant());
  struct Restore {
    int defer = backend().decode_defer();
    int mode = cuda::qkv_rope_mode();
    ~Restore() {
      backend().set_decode_defer(defer);
      backend().matmul_engine().set_decode_config(0);
      cuda::set_qkv_rope(mode);
    }
  } restore;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct Shape {
    int64_t H, hq, hkv;
    bool bias;
  };
  constexpr int64_t D = 128, bs = 16, nblocks = 8;
  for (const Shape& sh : {Shape{4096, 32, 8, false}, Shape{2048, 16, 4, true}}) {
    const int64_t H = sh.H, hq = sh.hq, hkv = sh.hkv, nqkv = (hq + 2 * hkv) * D;
    SCOPED_TRACE(::testing::Message() << "hidden " << H << ", split ranges "
                                      << cuda::gemm_split(nqkv, H, backend().info().num_sms).splits);
    DevTensor wqkv = upload_bf16(random_bf16_values(rng, size_t(nqkv * H), -0.05f, 0.05f), {nqkv, H});
    DevTensor bqkv = upload_bf16(random_bf16_values(rng, size_t(nqkv)), {nqkv});
    const QkNormRope qk(rng, D);
    NormParams np;
    for (int64_t m : {1, 2}) {
      for (bool norm : {true, false}) {
        SCOPED_TRACE(::testing::Message() << m << " rows, q/k norms " << norm);
        std::vector<int32_t> pos, slot;
        for (int64_t i = 0; i < m; ++i) pos.push_back(int32_t(std::uniform_int_distribution<int>(0, 30000)(rng)));
        for (int64_t i = 0; i < m; ++i) slot.push_back(int32_t(3 + 17 * i));
        if (m > 1) slot[1] = -1;  // a padding token: nothing stored
        DevTensor dpos = upload_i32(pos, {m}), dslot = upload_i32(slot, {m});
        AttentionBatch batch;
        batch.positions = dpos.t;
        batch.slot_mapping = dslot.t;
        const std::vector<float> x0 = random_bf16_values(rng, size_t(m * H), -2.f, 2.f);
        const std::vector<float> c0 = random_bf16_values(rng, size_t(nblocks * bs * hkv * D), -2.f, 2.f);
        backend().matmul_engine().set_decode_config(18);
        backend().set_decode_defer(2);
        auto run = [&](bool fused) {
          cuda::set_qkv_rope(fused ? 1 : 0);
          DevTensor x = upload_bf16(x0, {m, H});
          DevTensor q(DType::bf16, {m, hq, D}), k(DType::bf16, {m, hkv, D}), v(DType::bf16, {m, hkv, D});
          DevTensor kc = upload_bf16(c0, {nblocks, bs, hkv, D}), vc = upload_bf16(c0, {nblocks, bs, hkv, D});
          for (DevTensor* t : {&q, &k, &v}) t->poison();
          KvLayer cache{kc.t, vc.t};
          const uint64_t before = cuda::qkv_rope_launches();
          backend().qkv_rope_store_kv(x.t, wqkv.t, sh.bias ? &bqkv.t : nullptr, q.t, k.t, v.t,
                                      norm ? &qk.qn.t : nullptr, norm ? &qk.kn.t : nullptr, np, batch, qk.table,
                                      cache);
          EXPECT_EQ(cuda::qkv_rope_launches() > before, fused) << "where the RoPE op ran";
          EXPECT_FALSE(backend().pending().active());
          std::vector<std::vector<float>> res;
          for (DevTensor* t : {&q, &k, &v, &kc, &vc}) res.push_back(download_bf16(*t));
          return res;
        };
        const auto want = run(false), got = run(true);
        const char* names[] = {"q", "k", "v", "k cache", "v cache"};
        ASSERT_NO_FATAL_FAILURE(expect_same_bits(want, got, names));
        EXPECT_NE(differing_bits(want[3], c0), 0u) << "the step's k row was stored";
      }
    }
  }
}

// A measurement, printed (not an assertion): the fused decode MLP block alone against the four ops on
// the 8B shapes (median of 15 launches, L2 overwritten first), and one launch's timeline from the
// kernel's trace stamps: when each projection's items ran, how many CTAs were busy over time, and
// when the CTAs finished.
TEST(CudaInvariance, DISABLED_DecodeMlpTimeline) {
  RILL_REQUIRE_GPU();
  (void)backend();  // its creation turns the warpgroup GEMM on where supported
  if (!cuda::gemm_wgmma_enabled()) GTEST_SKIP() << "no sm_90a warpgroup GEMM on this GPU / build";
  std::mt19937_64 rng(fresh_seed());
  const int64_t H = 4096, KA = 4096, I = 12288;
  DevTensor attn = upload_bf16(random_bf16_values(rng, size_t(KA), -2.f, 2.f), {1, KA});
  DevTensor o = upload_bf16(random_bf16_values(rng, size_t(H * KA), -0.05f, 0.05f), {H, KA});
  DevTensor gu = upload_bf16(random_bf16_values(rng, size_t(2 * I * H), -0.05f, 0.05f), {2 * I, H});
  DevTensor dn = upload_bf16(random_bf16_values(rng, size_t(H * I), -0.05f, 0.05f), {H, I});
  DevTensor nw = upload_bf16(random_bf16_values(rng, size_t(H), 0.5f, 1.5f), {H});
  DevTensor res = upload_bf16(random_bf16_values(rng, size_t(H), -4.f, 4.f), {1, H});
  DevTensor delta(DType::bf16, {1, H}), h(DType::bf16, {1, H});
  DevTensor gate_up(DType::bf16, {1, 2 * I}), act(DType::bf16, {1, I});
  DevTensor ws(DType::f32, {int64_t(1) << 22}), counters(DType::i32, {8192});
  const int max_ctas = 4 * backend().info().num_sms;
  DevTensor trace(DType::f32, {int64_t(max_ctas) * 128 * 2});
  ASSERT_EQ(cudaMemsetAsync(counters.t.data(), 0, counters.t.nbytes(), backend().stream()), cudaSuccess);
  cuda::DecodeMlpArgs a;
  a.attn = attn.t.data();
  a.o = o.t.data();
  a.gate_up = gu.t.data();
  a.down = dn.t.data();
  a.norm_w = nw.t.data();
  a.residual = res.t.data();
  a.delta = delta.t.data();
  a.act = act.t.data();
  a.hidden = H;
  a.k_attn = KA;
  a.inter = I;
  a.workspace = static_cast<float*>(ws.t.data());
  a.workspace_bytes = ws.t.nbytes();
  a.counters = static_cast<unsigned*>(counters.t.data());
  a.num_counters = 8192;
  a.num_sms = backend().info().num_sms;
  ASSERT_EQ(cuda::decode_mlp_unsupported(a), "");
  ColdTimer time_us;
  const double fused = time_us([&] { cuda::launch_decode_mlp(a, backend().stream()); });
  const double ops = time_us([&] {
    backend().Kernels::o_proj_mlp(attn.t, o.t, nullptr, nw.t, NormParams{}, gu.t, nullptr, dn.t, nullptr, res.t,
                                  delta.t, h.t, gate_up.t, act.t);
  });
  const double mb = double(H * KA + 3 * I * H) * 2 / 1e6;
  std::printf("decode MLP block, %.1f MB of weights: fused %.1f us (%.0f GB/s), four ops %.1f us (%.0f GB/s)\n", mb,
              fused, mb / fused * 1e3, ops, mb / ops * 1e3);
  // One traced launch.
  ASSERT_EQ(cudaMemsetAsync(trace.t.data(), 0, trace.t.nbytes(), backend().stream()), cudaSuccess);
  cudaMemsetAsync(time_us.flush_data(), 7, time_us.flush_bytes(), backend().stream());
  a.trace = static_cast<unsigned long long*>(trace.t.data());
  cuda::launch_decode_mlp(a, backend().stream());
  backend().synchronize();
  std::vector<unsigned long long> tr(size_t(max_ctas) * 128);
  ASSERT_EQ(cudaMemcpy(tr.data(), trace.t.data(), tr.size() * 8, cudaMemcpyDeviceToHost), cudaSuccess);
  unsigned long long t0 = ~0ull;
  int ctas = 0;
  for (int b = 0; b < max_ctas; ++b)
    if (tr[size_t(b) * 128]) t0 = std::min(t0, tr[size_t(b) * 128]), ctas = b + 1;
  const int n_o = int(H / 64) * cuda::gemm_split(H, KA, a.num_sms).splits;
  const int n_gu = int(2 * I / 64) * cuda::gemm_split(2 * I, H, a.num_sms).splits;
  auto us = [&](unsigned long long t) { return double(int64_t(t - t0)) / 1e3; };
  struct Span {
    double begin, end, x;
    int proj, cta;
  };
  std::vector<Span> spans;
  std::vector<double> cta_end;
  for (int b = 0; b < ctas; ++b) {
    double last = 0;
    for (int i = 0; i < 30; ++i) {
      const unsigned long long* c = tr.data() + size_t(b) * 128;
      const unsigned long long sb = c[2 + 3 * i], se = c[3 + 3 * i];
      if (!sb || !se) break;
      const int g = int(c[1 + 3 * i]);
      spans.push_back({us(sb), us(se), us(c[96 + i]), g < n_o ? 0 : g < n_o + n_gu ? 1 : 2, b});
      last = us(se);
    }
    cta_end.push_back(last);
  }
  std::sort(cta_end.begin(), cta_end.end());
  std::printf("%d CTAs; their last item ended at min %.1f / median %.1f / max %.1f us\n", ctas, cta_end.front(),
              cta_end[cta_end.size() / 2], cta_end.back());
  const char* names[] = {"o", "gate/up", "down"};
  for (int p = 0; p < 3; ++p) {
    std::vector<double> b, e, x, d;
    for (const Span& sp : spans)
      if (sp.proj == p) b.push_back(sp.begin), e.push_back(sp.end), x.push_back(sp.x), d.push_back(sp.end - sp.begin);
    if (b.empty()) continue;
    for (auto* v : {&b, &e, &x, &d}) std::sort(v->begin(), v->end());
    std::printf("%-8s %4zu items: began %.1f..%.1f (median %.1f), input ready median %.1f max %.1f, ended %.1f..%.1f "
                "(median %.1f), an item takes median %.1f max %.1f us\n",
                names[p], b.size(), b.front(), b.back(), b[b.size() / 2], x[x.size() / 2], x.back(), e.front(),
                e.back(), e[e.size() / 2], d[d.size() / 2], d.back());
  }
  std::printf("busy CTAs (an item between its start and end) by 4 us:");
  for (double t = 0; t < cta_end.back() + 4; t += 4) {
    int busy = 0;
    for (const Span& sp : spans) busy += sp.begin < t + 4 && sp.end > t;
    std::printf(" %d", busy);
  }
  std::printf("\n");
}

}  // namespace
}  // namespace rill
