// CUDA paged attention against a double-precision reference on the same bf16 inputs: rows of
// different lengths with prior context, shuffled block ids, GQA groups 1/2/4/8, head_dim
// 16/32/64/128/256, sliding window, softcap, decode with 1..16 query tokens per row, forced and
// automatic KV splits. Cache slots no row owns hold NaN, so a read through a wrong block id or
// past a row's context shows up as NaN; outputs are poisoned first (label cuda).
#include <algorithm>
#include <numeric>

#include "kernels/cuda/cuda_test_util.h"

namespace rill {
namespace {

using namespace cuda_test;

struct Row {
  int q_len;
  int ctx;
};

struct Case {
  const char* name;
  int hq, hkv, d;
  std::vector<Row> rows;
  int window = 0;
  float softcap = 0.f;
  int block_size = 16;
};

// A forced kernel variant; 0 fields are chosen automatically. invariant: the batch-invariant
// kernels (bn ignored; splits 1 = fold schedule, > 1 = split schedule).
struct Variant {
  int warps = 0, bn = 0, splits = 0;
  bool invariant = false;
};

// Builds the case once, then checks the kernel under each variant.
void run_case(const Case& c, std::mt19937_64& rng, std::vector<Variant> variants) {
  SCOPED_TRACE(c.name);
  const int rows = int(c.rows.size());
  const int bs = c.block_size, d = c.d, hq = c.hq, hkv = c.hkv, group = hq / hkv;
  std::vector<int32_t> cu{0}, ctx;
  int max_q = 0, max_ctx = 0, max_blocks = 0, total_blocks = 0;
  for (const Row& r : c.rows) {
    cu.push_back(cu.back() + r.q_len);
    ctx.push_back(r.ctx);
    max_q = std::max(max_q, r.q_len);
    max_ctx = std::max(max_ctx, r.ctx);
    max_blocks = std::max(max_blocks, (r.ctx + bs - 1) / bs);
    total_blocks += (r.ctx + bs - 1) / bs;
  }
  const int64_t tokens = cu.back();
  const int num_blocks = total_blocks + 5;  // a few blocks nobody owns
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(size_t(rows * max_blocks), -1);
  size_t next = 0;
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < (ctx[size_t(r)] + bs - 1) / bs; ++b) table[size_t(r * max_blocks + b)] = ids[next++];

  const int64_t row_elems = int64_t(hkv) * d;
  const int64_t slots = int64_t(num_blocks) * bs;
  std::vector<float> kc(size_t(slots * row_elems), NAN), vc(size_t(slots * row_elems), NAN);
  for (int r = 0; r < rows; ++r)
    for (int p = 0; p < ctx[size_t(r)]; ++p) {
      int64_t slot = int64_t(table[size_t(r * max_blocks + p / bs)]) * bs + p % bs;
      auto kv = random_bf16_values(rng, size_t(row_elems) * 2, -2.f, 2.f);
      std::copy(kv.begin(), kv.begin() + row_elems, kc.begin() + slot * row_elems);
      std::copy(kv.begin() + row_elems, kv.end(), vc.begin() + slot * row_elems);
    }
  auto q = random_bf16_values(rng, size_t(tokens * hq * d), -2.f, 2.f);
  const float scale = 1.f / std::sqrt(float(d));

  // Reference.
  std::vector<double> ref(q.size());
  std::vector<double> scores;
  for (int r = 0; r < rows; ++r) {
    int q_len = c.rows[size_t(r)].q_len, n = ctx[size_t(r)];
    for (int i = 0; i < q_len; ++i) {
      int64_t t = cu[size_t(r)] + i;
      int pos = n - q_len + i;
      int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      for (int h = 0; h < hq; ++h) {
        int kvh = h / group;
        const float* qv = &q[size_t((t * hq + h) * d)];
        scores.assign(size_t(pos - lo + 1), 0.0);
        double mx = -INFINITY;
        for (int j = lo; j <= pos; ++j) {
          int64_t slot = int64_t(table[size_t(r * max_blocks + j / bs)]) * bs + j % bs;
          const float* kv = &kc[size_t(slot * row_elems + kvh * d)];
          double s = 0;
          for (int e = 0; e < d; ++e) s += double(qv[e]) * kv[e];
          s *= scale;
          if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
          scores[size_t(j - lo)] = s;
          mx = std::max(mx, s);
        }
        double sum = 0;
        for (auto& s : scores) sum += (s = std::exp(s - mx));
        double* o = &ref[size_t((t * hq + h) * d)];
        for (int j = lo; j <= pos; ++j) {
          int64_t slot = int64_t(table[size_t(r * max_blocks + j / bs)]) * bs + j % bs;
          const float* vv = &vc[size_t(slot * row_elems + kvh * d)];
          double p = scores[size_t(j - lo)] / sum;
          for (int e = 0; e < d; ++e) o[e] += p * vv[e];
        }
      }
    }
  }

  DevTensor dq = upload_bf16(q, {tokens, hq, d}), dout(DType::bf16, {tokens, hq, d});
  DevTensor dk = upload_bf16(kc, {num_blocks, bs, hkv, d}), dv = upload_bf16(vc, {num_blocks, bs, hkv, d});
  DevTensor dcu = upload_i32(cu, {rows + 1}), dctx = upload_i32(ctx, {rows});
  DevTensor dtab = upload_i32(table, {rows, max_blocks});
  AttentionBatch batch;
  batch.cu_seqlens_q = dcu.t;
  batch.context_lens = dctx.t;
  batch.block_tables = dtab.t;
  batch.num_rows = rows;
  batch.max_seqlen_q = max_q;
  batch.max_context_len = max_ctx;
  AttentionParams p{scale, c.window, c.softcap};
  KvLayer cache{dk.t, dv.t};
  for (const Variant& v : variants) {
    SCOPED_TRACE(::testing::Message() << "warps " << v.warps << " bn " << v.bn << " splits " << v.splits
                                      << " invariant " << v.invariant);
    dout.poison();
    const bool saved = backend().batch_invariant();
    backend().set_batch_invariant(v.invariant);
    backend().set_attention_splits(v.splits);
    backend().set_attention_variant(v.warps, v.bn);
    backend().attention(dq.t, cache, batch, p, dout.t);
    backend().set_attention_splits(0);
    backend().set_attention_variant(0, 0);
    backend().set_batch_invariant(saved);
    auto out = download_bf16(dout);
    EXPECT_LT(rel_error(out, ref), 1e-2);
    // Per token too, so a wrong short row cannot hide behind long ones.
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<float> o(out.begin() + t * hq * d, out.begin() + (t + 1) * hq * d);
      std::vector<double> rr(ref.begin() + t * hq * d, ref.begin() + (t + 1) * hq * d);
      ASSERT_LT(rel_error(o, rr), 2e-2) << "token " << t;
    }
  }
}

TEST(CudaAttention, PrefillRaggedRowsGqaWindowSoftcap) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Case cases[] = {
      {"g4 d128 mixed", 8, 2, 128, {{37, 37}, {100, 300}, {1, 50}, {129, 129}, {17, 17}}},
      {"g1 d64", 4, 4, 64, {{70, 90}, {5, 1000}, {33, 33}}},
      {"g2 d128 window", 4, 2, 128, {{150, 150}, {40, 333}}, 32},
      {"g8 d128", 16, 2, 128, {{77, 200}, {64, 64}}},
      {"g2 d256 softcap window", 8, 4, 256, {{90, 120}, {31, 31}}, 64, 30.f},
      {"g4 d64 block 32 softcap", 8, 2, 64, {{65, 65}, {20, 700}}, 0, 50.f, 32},
      {"g2 d32 (tiny models)", 4, 2, 32, {{45, 45}, {9, 130}}},
      {"g4 d16 block 8 (tiny models)", 8, 2, 16, {{33, 60}, {70, 70}}, 0, 0.f, 8},
  };
  for (const Case& c : cases) {
    int wide = c.d == 256 ? 32 : 64;
    int many = c.d == 16 ? 4 : 8;  // head_dim 16 has no 8-warp variant (too few chunks per tile)
    run_case(c, rng,
             {{0, 0, 1}, {0, 0, 0}, {0, 0, 3}, {many, wide, 0}, {2, 32, 0}, {1, wide, 2}, {0, 0, 0, true},
              {0, 0, 1, true}, {1, 0, 2, true}, {4, 0, 0, true}});
  }
}

TEST(CudaAttention, DecodeOneToSixteenQueryTokens) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> qlen(1, 16), ctxlen(16, 3000);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<Row> rows;
    for (int r = 0; r < 6; ++r) {
      int q = qlen(rng);
      rows.push_back({q, std::max(q, ctxlen(rng))});
    }
    rows.push_back({1, 1});
    rows.push_back({16, 16});
    const Case cases[] = {
        {"decode g4 d128", 32, 8, 128, rows},
        {"decode g1 d64", 4, 4, 64, rows},
        {"decode g8 d128", 16, 2, 128, rows},
        {"decode g2 d256 window softcap", 8, 4, 256, rows, 100, 30.f},
        {"decode g2 d32", 4, 2, 32, rows},
        {"decode g4 d16 block 8", 8, 2, 16, rows, 0, 0.f, 8},
    };
    for (const Case& c : cases) {
      int wide = c.d == 256 ? 32 : 64;
      run_case(c, rng,
               {{0, 0, 1}, {0, 0, 7}, {0, 0, 0}, {1, wide, 0}, {2, 32, 3}, {4, wide, 0}, {0, 0, 0, true},
                {0, 0, 1, true}, {2, 0, 2, true}});
    }
  }
  // Batch of one: single token, long context (the flash-decoding split case).
  Case one{"decode single row", 32, 8, 128, {{1, 8191}}};
  run_case(one, rng, {{0, 0, 0}, {0, 0, 1}, {1, 64, 0}, {0, 0, 0, true}, {0, 0, 1, true}});
}

}  // namespace
}  // namespace rill
