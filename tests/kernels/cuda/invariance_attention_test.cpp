// Batch invariance of the CUDA attention (the backend default): a row's output is bitwise the same
// alone or among 63 other rows of other lengths (prefill and decode), its prompt's queries the same
// in one chunk or in chunks of 37 / 128 tokens, and the schedules agree — split and fold, the decode
// cluster and four-warp fold kernels, the warpgroup and mma.sync kernels. Fresh random inputs
// (label cuda).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
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

// A paged KV cache with random keys/values for a set of rows (each row its own shuffled blocks).
struct Cache {
  int hq, hkv, d, bs;
  int window = 0;
  float softcap = 0.f;
  std::vector<int> lens;                    // keys per row
  std::vector<int> qbase;                   // first position with a query (random_queries)
  std::vector<std::vector<int32_t>> table;  // block ids per row
  DevTensor k, v;

  // poison_tail: the slots past each row's length in its last block hold NaN (cache memory never
  // written), which a kernel must not let into any output (a masked key's weight 0 times NaN).
  Cache(std::mt19937_64& rng, int hq_, int hkv_, int d_, int bs_, std::vector<int> lens_, int window_ = 0,
        float softcap_ = 0.f, bool poison_tail = false)
      : hq(hq_), hkv(hkv_), d(d_), bs(bs_), window(window_), softcap(softcap_), lens(std::move(lens_)) {
    int total = 0;
    for (int l : lens) total += (l + bs - 1) / bs;
    std::vector<int32_t> ids(size_t(total) + 3);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (int l : lens) {
      table.emplace_back();
      for (int b = 0; b < (l + bs - 1) / bs; ++b) table.back().push_back(ids[next++]);
    }
    const int64_t elems = int64_t(ids.size()) * bs * hkv * d;
    auto kv = random_bf16_values(rng, size_t(elems), -2.f, 2.f), vv = random_bf16_values(rng, size_t(elems), -2.f, 2.f);
    if (poison_tail)
      for (size_t r = 0; r < lens.size(); ++r)
        for (int pos = lens[r]; pos % bs != 0; ++pos) {
          const int64_t at = (int64_t(table[r].back()) * bs + pos % bs) * hkv * d;
          std::fill(kv.begin() + at, kv.begin() + at + int64_t(hkv) * d, std::nanf(""));
          std::fill(vv.begin() + at, vv.begin() + at + int64_t(hkv) * d, std::nanf(""));
        }
    k = upload_bf16(kv, {int64_t(ids.size()), bs, hkv, d});
    v = upload_bf16(vv, {int64_t(ids.size()), bs, hkv, d});
  }

  // Block-table columns of the longest row.
  int max_blocks() const {
    int width = 0;
    for (const auto& t : table) width = std::max(width, int(t.size()));
    return width;
  }

  struct Part {
    int row;    // cache row
    int begin;  // first query position
    int end;    // one past the last query position (= context length)
  };
  // The device inputs of one attention call over `parts` (q holds each cache row's queries for positions
  // qbase..len: [len - qbase, hq, d] per row; table_width: block-table columns) and its output.
  struct Launch {
    DevTensor dq, dout, dcu, dctx, dtab;
    AttentionBatch batch;
  };
  Launch prepare(const std::vector<Part>& parts, const std::vector<std::vector<float>>& q, int table_width) const {
    std::vector<int32_t> cu{0}, ctx, tab;
    std::vector<float> qs;
    int max_q = 0, max_ctx = 0;
    for (const Part& p : parts) {
      cu.push_back(cu.back() + p.end - p.begin);
      ctx.push_back(p.end);
      max_q = std::max(max_q, p.end - p.begin);
      max_ctx = std::max(max_ctx, p.end);
      const auto& qr = q[size_t(p.row)];
      const int64_t base = qbase[size_t(p.row)];
      qs.insert(qs.end(), qr.begin() + (p.begin - base) * hq * d, qr.begin() + (p.end - base) * hq * d);
      std::vector<int32_t> t = table[size_t(p.row)];
      t.resize(size_t(table_width), -1);
      tab.insert(tab.end(), t.begin(), t.end());
    }
    const int rows = int(parts.size());
    const int64_t tokens = cu.back();
    Launch l{upload_bf16(qs, {tokens, hq, d}), DevTensor(DType::bf16, {tokens, hq, d}), upload_i32(cu, {rows + 1}),
             upload_i32(ctx, {rows}), upload_i32(tab, {rows, table_width}), {}};
    l.batch.cu_seqlens_q = l.dcu.t;
    l.batch.context_lens = l.dctx.t;
    l.batch.block_tables = l.dtab.t;
    l.batch.num_rows = rows;
    l.batch.max_seqlen_q = max_q;
    l.batch.max_context_len = max_ctx;
    return l;
  }
  void launch(Launch& l, int force_splits = 0, int span_blocks = 0) {
    AttentionParams p{1.f / std::sqrt(float(d)), window, softcap};
    KvLayer cache{k.t, v.t};
    backend().set_attention_splits(force_splits);
    backend().set_attention_span_blocks(span_blocks);
    backend().attention(l.dq.t, cache, l.batch, p, l.dout.t);
    backend().set_attention_splits(0);
    backend().set_attention_span_blocks(0);
  }
  // Attention outputs [tokens, hq, d] for the queries of `parts`.
  std::vector<float> run(const std::vector<Part>& parts, const std::vector<std::vector<float>>& q, int table_width,
                         int force_splits = 0, int span_blocks = 0) {
    Launch l = prepare(parts, q, table_width);
    l.dout.poison();
    launch(l, force_splits, span_blocks);
    return download_bf16(l.dout);
  }
};

struct AttnCase {
  const char* name;
  int hq, hkv, d, bs;
  int window = 0;
  float softcap = 0.f;
};
const AttnCase kAttnCases[] = {
    {"g4 d128", 32, 8, 128, 16},
    {"g4 d64 block 32", 8, 2, 64, 32},
    {"g2 d256 window softcap", 8, 4, 256, 16, 300, 30.f},
    {"g4 d16 block 8", 8, 2, 16, 8},
    {"g4 d128 window softcap", 16, 4, 128, 16, 200, 50.f},  // the four-warp decode kernel's masking
};

// Queries for the last max_q positions of every row.
std::vector<std::vector<float>> random_queries(std::mt19937_64& rng, Cache& c, int max_q) {
  std::vector<std::vector<float>> q;
  c.qbase.clear();
  for (int l : c.lens) {
    c.qbase.push_back(std::max(0, l - max_q));
    q.push_back(random_bf16_values(rng, size_t(l - c.qbase.back()) * c.hq * c.d, -2.f, 2.f));
  }
  return q;
}

TEST(CudaInvariance, AttentionRowAloneEqualsRowAmong63Others) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(1, 1200), qlen(1, 40);
  for (const AttnCase& ac : kAttnCases) {
    SCOPED_TRACE(ac.name);
    std::vector<int> lens(64);
    for (int& l : lens) l = len(rng);
    lens[5] = 1;
    lens[17] = 2047;
    Cache c(rng, ac.hq, ac.hkv, ac.d, ac.bs, lens, ac.window, ac.softcap);
    auto q = random_queries(rng, c, 40);
    const int width = c.max_blocks();
    for (bool decode : {true, false}) {
      SCOPED_TRACE(decode ? "decode" : "prefill");
      std::vector<Cache::Part> parts;
      for (int r = 0; r < 64; ++r) {
        int n = decode ? 1 : std::min(lens[size_t(r)], qlen(rng));
        parts.push_back({r, lens[size_t(r)] - n, lens[size_t(r)]});
      }
      auto all = c.run(parts, q, width + 3);
      int64_t at = 0;
      int differ = 0;
      for (int r = 0; r < 64; ++r) {
        const int64_t n = parts[size_t(r)].end - parts[size_t(r)].begin, elems = n * ac.hq * ac.d;
        if (r % 9 == 5 || r == 17) {
          auto alone = c.run({parts[size_t(r)]}, q, int(c.table[size_t(r)].size()));
          differ += !same_bits(alone.data(), all.data() + at, size_t(elems));
        }
        at += elems;
      }
      EXPECT_EQ(differ, 0) << differ << " rows differ alone vs among 64";
      // The split and fold schedules give the same bits.
      auto fold = c.run(parts, q, width + 3, 1), split = c.run(parts, q, width + 3, 2);
      EXPECT_TRUE(same_bits(fold.data(), all.data(), all.size())) << "fold schedule differs";
      EXPECT_TRUE(same_bits(split.data(), all.data(), all.size())) << "split schedule differs";
    }
  }
}

// Decode over long contexts: the split schedule's combine kernel folds more spans than it has
// threads (chunks of 32, 128 or 256 spans with the running max carried across them, a span of 64 or 256
// keys) and must give the fold schedule's bits; 1 and 3 query tokens a row. The decode split kernel's
// blocks walk every n-th span of their row: one wave (the default), one block walking them all,
// 3 and 7 (a walk crossing the sliding window's start and the rows' ends at every phase), and a
// block a span.
TEST(CudaInvariance, AttentionLongContextSplitEqualsFold) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (const AttnCase& ac : kAttnCases) {
    SCOPED_TRACE(ac.name);
    // 266 spans of 64 keys in the longest row; split partials within the 64 MB workspace (4 rows
    // of up to 3 query tokens: 200 KB a span at 32 heads of 128).
    const std::vector<int> lens = {9001, 130, 17000, 4100};
    Cache c(rng, ac.hq, ac.hkv, ac.d, ac.bs, lens, ac.window, ac.softcap);
    auto q = random_queries(rng, c, 4);
    const int width = c.max_blocks();
    for (int n : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << n << " query tokens a row");
      std::vector<Cache::Part> parts;
      for (int r = 0; r < int(lens.size()); ++r) parts.push_back({r, lens[size_t(r)] - n, lens[size_t(r)]});
      auto fold = c.run(parts, q, width, 1);
      for (int blocks : {0, 1, 3, 7, 65535}) {
        SCOPED_TRACE(::testing::Message() << "span blocks " << blocks);
        auto split = c.run(parts, q, width, 2, blocks);
        for (float v : split) ASSERT_FALSE(std::isnan(v)) << "unwritten output";
        EXPECT_TRUE(same_bits(fold.data(), split.data(), split.size())) << "split schedule differs from the fold";
      }
      // The span combine's chunk by the rule (the smallest of 32, 128, 256 holding the table's spans: 266 of 64
      // keys, 67 of 256 at head_dim 256), then forced to 32 and 128 spans (RILL_ATTENTION_COMBINE_SPANS): the
      // running max carried across up to 9 chunks.
      const int span_keys = ac.d > 128 ? 256 : 64, spans = (width * ac.bs + span_keys - 1) / span_keys;
      const int forced = cuda::attention_combine_spans();  // (0 unless RILL_ATTENTION_COMBINE_SPANS is set)
      if (forced == 0) {
        EXPECT_EQ(cuda::attention_last_combine_spans(), spans <= 128 ? 128 : 256) << "the combine's chunk";
      }
      for (int chunk : {32, 128}) {
        cuda::set_attention_combine_spans(chunk);
        auto chunked = c.run(parts, q, width, 2);
        cuda::set_attention_combine_spans(forced);
        EXPECT_EQ(cuda::attention_last_combine_spans(), chunk) << "the combine's chunk";
        EXPECT_TRUE(same_bits(fold.data(), chunked.data(), chunked.size()))
            << "the combine on chunks of " << chunk << " spans differs from the fold";
      }
    }
  }
}

// Decode over short block tables (≤ 16 spans of 64 keys at head_dim 64 / 128) and few rows (one
// wave of clusters): the split attention and its span combine run as one cluster kernel (a cluster
// a row and kv head; the partials pushed into the folding blocks or read after a barrier, both run)
// and must give the fold schedule's bits, and the two-kernel split schedule's; tables of 4, 8 and
// 16 spans (clusters of 4, 8, 16), rows of 1-1024 keys two at a time (spans past a row's keys:
// blocks with no span), 1 and 3 query tokens a row, a sliding window (spans before it). 7 rows at
// once over 16 spans take the two kernels (more than a wave).
TEST(CudaInvariance, AttentionShortContextClusterEqualsFold) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (const AttnCase& ac : kAttnCases) {
    SCOPED_TRACE(ac.name);
    const bool cluster_kernel = cuda::attention_cluster_enabled() && (ac.d == 64 || ac.d == 128);
    for (int keys : {256, 512, 1024}) {
      SCOPED_TRACE(::testing::Message() << "block table of " << keys << " keys");
      std::uniform_int_distribution<int> len(1, keys);
      std::vector<int> lens = {keys, 1, 64, 65, len(rng), len(rng), len(rng)};
      Cache c(rng, ac.hq, ac.hkv, ac.d, ac.bs, lens, ac.window, ac.softcap);
      auto q = random_queries(rng, c, 3);
      const int width = keys / ac.bs;
      for (int n : {1, 3}) {
        for (int r0 = 0; r0 < int(lens.size()); r0 += 2) {
          SCOPED_TRACE(::testing::Message() << n << " query tokens a row, rows from " << r0);
          std::vector<Cache::Part> parts;
          for (int r = r0; r < std::min(r0 + 2, int(lens.size())); ++r) {
            const int l = lens[size_t(r)];
            parts.push_back({r, std::max(0, l - n), l});
          }
          auto fold = c.run(parts, q, width, 1);
          EXPECT_FALSE(cuda::attention_ended_with_combine()) << "the fold schedule has no span combine";
          const uint64_t before = cuda::attention_cluster_launches();
          auto cluster = c.run(parts, q, width, 2);
          EXPECT_EQ(cuda::attention_cluster_launches() > before, cluster_kernel) << "which kernel ran";
          // Whether a span combine kernel ran (the backend sizes the o projection's pre-wait burst by it:
          // CudaKernels::next_gemm_prewait): not after the cluster kernel; after the split kernels (at
          // head_dim 64 / 128 every table here has 4+ spans).
          if (cluster_kernel) {
            EXPECT_FALSE(cuda::attention_ended_with_combine()) << "the cluster kernel combines";
          }
          for (float v : cluster) ASSERT_FALSE(std::isnan(v)) << "unwritten output";
          EXPECT_TRUE(same_bits(fold.data(), cluster.data(), cluster.size())) << "cluster kernel differs from the fold";
          // The other hand-off of the partials (pushed into the folding blocks, or read after a barrier).
          const bool push = cuda::attention_cluster_push();
          cuda::set_attention_cluster_push(!push);
          auto other = c.run(parts, q, width, 2);
          cuda::set_attention_cluster_push(push);
          EXPECT_TRUE(same_bits(fold.data(), other.data(), other.size()))
              << "cluster kernel with " << (push ? "the barrier" : "pushes") << " differs from the fold";
          cuda::set_attention_cluster(false);
          auto split = c.run(parts, q, width, 2);
          if (cluster_kernel) {
            EXPECT_TRUE(cuda::attention_ended_with_combine()) << "the split kernels' span combine";
          }
          // ≤ 32 spans: the one-warp combine by default, wherever a span combine ran.
          const int forced = cuda::attention_combine_spans();  // (0 unless RILL_ATTENTION_COMBINE_SPANS is set)
          if (forced == 0 && cuda::attention_ended_with_combine()) {
            EXPECT_EQ(cuda::attention_last_combine_spans(), 32) << "the combine's chunk for a short table";
          }
          EXPECT_TRUE(same_bits(fold.data(), split.data(), split.size())) << "split schedule differs from the fold";
          // And the 256-span chunk over the same partials.
          cuda::set_attention_combine_spans(256);
          auto wide = c.run(parts, q, width, 2);
          cuda::set_attention_combine_spans(forced);
          cuda::set_attention_cluster(true);
          EXPECT_TRUE(same_bits(fold.data(), wide.data(), wide.size())) << "256-span combine differs from the fold";
        }
      }
      if (ac.d == 128 && ac.hkv == 8) {  // 7 rows × 8 kv heads × 16 blocks: more than a wave on 132 SMs
        std::vector<Cache::Part> parts;
        for (int r = 0; r < int(lens.size()); ++r) parts.push_back({r, lens[size_t(r)] - 1, lens[size_t(r)]});
        auto fold = c.run(parts, q, width, 1);
        const uint64_t before = cuda::attention_cluster_launches();
        auto split = c.run(parts, q, width, 2);
        if (keys == 1024 && backend().info().num_sms <= 132) {
          EXPECT_EQ(cuda::attention_cluster_launches(), before) << "a grid over a wave of clusters";
        }
        EXPECT_TRUE(same_bits(fold.data(), split.data(), split.size())) << "split schedule differs from the fold";
      }
    }
  }
}

// Decode rows beyond a wave of split blocks: the fold schedule at one m-tile runs on the four-warp
// fold kernel (RILL_ATTENTION_DECODE_FOLD 1 and 2: a block a row and kv head merging its spans as it
// walks them) and must give the one-warp fold kernel's bits (mode 0); 64 and 200 rows of 1-3000
// keys (a row of 1, spans before a sliding window), 1 and 3 query tokens a row; mode 2 also takes
// the split schedules whose blocks would each walk every span.
TEST(CudaInvariance, AttentionDecodeFoldFourWarpsEqualsOneWarp) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int mode = cuda::attention_decode_fold();
  for (const AttnCase& ac : kAttnCases) {
    SCOPED_TRACE(ac.name);
    const bool four_warps = ac.d == 64 || ac.d == 128;
    for (int rows : {64, 200}) {
      std::uniform_int_distribution<int> len(1, 3000);
      std::vector<int> lens(static_cast<size_t>(rows), 0);
      for (int& l : lens) l = len(rng);
      lens[5] = 1;
      Cache c(rng, ac.hq, ac.hkv, ac.d, ac.bs, lens, ac.window, ac.softcap);
      auto q = random_queries(rng, c, 3);
      const int width = c.max_blocks();
      for (int n : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << rows << " rows, " << n << " query tokens a row");
        std::vector<Cache::Part> parts;
        for (int r = 0; r < rows; ++r) parts.push_back({r, std::max(0, lens[size_t(r)] - n), lens[size_t(r)]});
        cuda::set_attention_decode_fold(0);
        auto one_warp = c.run(parts, q, width, 1);
        cuda::set_attention_decode_fold(1);
        const uint64_t before = cuda::attention_decode_fold_launches();
        auto four = c.run(parts, q, width, 1);
        EXPECT_EQ(cuda::attention_decode_fold_launches() > before, four_warps) << "which kernel ran";
        cuda::set_attention_decode_fold(2);
        auto chosen = c.run(parts, q, width);
        cuda::set_attention_decode_fold(mode);
        for (float v : four) ASSERT_FALSE(std::isnan(v)) << "unwritten output";
        EXPECT_TRUE(same_bits(one_warp.data(), four.data(), four.size())) << "four-warp fold differs from one warp";
        EXPECT_TRUE(same_bits(one_warp.data(), chosen.data(), chosen.size())) << "mode 2's schedule differs";
      }
    }
  }
}

TEST(CudaInvariance, AttentionPromptInOneChunkEqualsChunks) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (const AttnCase& ac : kAttnCases) {
    SCOPED_TRACE(ac.name);
    Cache c(rng, ac.hq, ac.hkv, ac.d, ac.bs, {700, 300}, ac.window, ac.softcap);
    auto q = random_queries(rng, c, 700);
    const int64_t tok = int64_t(ac.hq) * ac.d;
    // Row 0 in one chunk, alongside row 1 (prefill of the whole prompt).
    auto whole = c.run({{0, 0, 700}, {1, 0, 300}}, q, int(c.table[0].size()) + 3);
    for (int chunk : {37, 128}) {
      SCOPED_TRACE(::testing::Message() << "chunks of " << chunk);
      int differ = 0;
      for (int b = 0; b < 700; b += chunk) {
        const int e = std::min(700, b + chunk);
        auto part = c.run({{0, b, e}}, q, int(c.table[0].size()), b % 2 ? 1 : 0);
        differ += !same_bits(part.data(), whole.data() + b * tok, size_t((e - b) * tok));
      }
      EXPECT_EQ(differ, 0) << differ << " chunks differ from the one-chunk prefill";
    }
    // Decode of the last position equals its query inside the prefill.
    auto last = c.run({{0, 699, 700}}, q, int(c.table[0].size()));
    EXPECT_TRUE(same_bits(last.data(), whole.data() + 699 * tok, size_t(tok)));
  }
}

// The warpgroup attention kernel (the fold schedule at head_dim 128, 128-row blocks) gives the bits
// of the mma.sync kernel's fold and split schedules: prompts of 1-1500 tokens, some over a cached
// prefix (queries only for the last positions), GQA 2, 4 and 8, block sizes 8, 16, 32 and 128 (the
// tensor copies' pages: 8 a tile to part of a block), a sliding window, a softcap and a span of 256
// keys; unwritten cache slots are poisoned (NaN) where the Cache leaves them so.
TEST(CudaInvariance, WgmmaAttentionEqualsMmaSync) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  if (!cuda::attention_wgmma_supported()) GTEST_SKIP() << "no sm_90a code for this GPU";
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct Case {
    const char* name;
    int hq, hkv, bs, window;
    float softcap;
    int span_keys;
  };
  const Case cases[] = {{"g4 block 16", 32, 8, 16, 0, 0.f, 0},
                        {"g8 block 32 window 300", 16, 2, 32, 300, 0.f, 0},
                        {"g4 softcap, 256-key spans", 8, 2, 16, 0, 30.f, 256},
                        {"g4 block 128 (a tile is part of a block)", 8, 2, 128, 0, 0.f, 0},
                        {"g2 block 8 (eight pages a tile)", 4, 2, 8, 0, 0.f, 0}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    std::uniform_int_distribution<int> len(1, 1500);
    std::vector<int> lens = {1500, 777, 64, 65, 1};
    for (int i = 0; i < 3; ++i) lens.push_back(len(rng));
    Cache c(rng, cs.hq, cs.hkv, 128, cs.bs, lens, cs.window, cs.softcap, /*poison_tail=*/true);
    auto q = random_queries(rng, c, 1500);
    std::vector<Cache::Part> parts;
    for (size_t r = 0; r < lens.size(); ++r) {  // whole prompts, or the last 1..600 positions over a prefix
      const int l = lens[r];
      const int n = r % 2 ? std::min(l, 1 + int(rng() % 600)) : l;
      parts.push_back({int(r), l - n, l});
    }
    const int width = c.max_blocks();
    const int span_before = backend().attention_span_keys();
    backend().set_attention_span_keys(cs.span_keys);
    backend().set_attention_variant(8, 0);  // 128-row blocks: the warpgroup kernel's shape
    cuda::set_attention_wgmma(true);
    const uint64_t launches = cuda::attention_wgmma_launches();
    auto wg = c.run(parts, q, width + 2, 1);
    EXPECT_GT(cuda::attention_wgmma_launches(), launches) << "the warpgroup kernel did not run";
    cuda::set_attention_wgmma(false);
    auto mma_fold = c.run(parts, q, width + 2, 1), mma_split = c.run(parts, q, width + 2, 2);
    cuda::set_attention_wgmma(true);
    backend().set_attention_variant(0, 0);
    backend().set_attention_span_keys(span_before);
    size_t differ = 0, nan = 0;
    for (size_t i = 0; i < wg.size(); ++i) {
      differ += std::memcmp(&wg[i], &mma_fold[i], sizeof(float)) != 0;
      nan += std::isnan(wg[i]);
    }
    EXPECT_EQ(nan, 0u) << "outputs left unwritten (poisoned)";
    EXPECT_EQ(differ, 0u) << differ << " of " << wg.size() << " outputs differ from the mma.sync fold schedule";
    // (The split schedule where every span's partials fit the workspace; the fold one otherwise.)
    EXPECT_TRUE(same_bits(wg.data(), mma_split.data(), wg.size())) << "differs from the split schedule";
  }
}

// Timing, printed (DISABLED_: run with --gtest_also_run_disabled_tests): the decode attention alone at batched
// shapes of the 8B model (32 / 8 heads of 128, blocks of 16 keys, shuffled tables, one query a row) under the
// default schedule, the four-warp fold kernel and the split kernel at 2, 5 and 10 blocks a (row, kv head), L2
// overwritten before every run. GB/s: the K/V bytes the rows read over the time — the kernel against the HBM
// read rate outside the decode graph (bench/kernels/kv_read_probe.cu reads the same bytes with no arithmetic).
TEST(CudaInvariance, DISABLED_AttentionDecodeTiming) {
  RILL_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  ColdTimer time_us;
  struct Shape {
    int rows, keys;
  };
  struct Setting {
    const char* name;
    int fold, splits, blocks;  // set_attention_decode_fold, force_splits, span blocks
  };
  const int mode = cuda::attention_decode_fold();
  // RILL_ATTENTION_TIMING="ROWS:KEYS,...": those shapes instead (e.g. one shape under a profiler).
  std::vector<Shape> shapes = {{16, 2048}, {64, 512}, {64, 2048}, {256, 512}};
  if (const char* env = std::getenv("RILL_ATTENTION_TIMING"); env && *env) {
    shapes.clear();
    for (const char* p = env; *p;) {
      char* end = nullptr;
      const long rows = std::strtol(p, &end, 10);
      long keys = 0;
      if (end != p && *end == ':') keys = std::strtol(end + 1, &end, 10);
      ASSERT_TRUE(rows > 0 && keys > 0 && (*end == ',' || *end == '\0'))
          << "RILL_ATTENTION_TIMING: expected ROWS:KEYS pairs joined by commas, got '" << env << "'";
      shapes.push_back({int(rows), int(keys)});
      p = *end == ',' ? end + 1 : end;
    }
  }
  for (Shape sh : shapes) {
    Cache c(rng, 32, 8, 128, 16, std::vector<int>(size_t(sh.rows), sh.keys));
    auto q = random_queries(rng, c, 1);
    std::vector<Cache::Part> parts;
    for (int r = 0; r < sh.rows; ++r) parts.push_back({r, sh.keys - 1, sh.keys});
    Cache::Launch l = c.prepare(parts, q, c.max_blocks());
    const double bytes = double(sh.rows) * sh.keys * c.hkv * c.d * 2 * 2;
    for (Setting st : {Setting{"default", mode, 0, 0}, Setting{"fold kernel", 1, 1, 0}, Setting{"split, 2 blocks", mode, 2, 2},
                       Setting{"split, 5 blocks", mode, 2, 5}, Setting{"split, 10 blocks", mode, 2, 10}}) {
      cuda::set_attention_decode_fold(st.fold);
      const double us = time_us([&] { c.launch(l, st.splits, st.blocks); });
      cuda::set_attention_decode_fold(mode);
      std::printf("attention decode %3d rows x %5d keys (%4.0f MB of K/V), %-16s %8.1f us %6.0f GB/s\n", sh.rows,
                  sh.keys, bytes / 1e6, st.name, us, bytes / us / 1e3);
    }
  }
}

}  // namespace
}  // namespace rill
