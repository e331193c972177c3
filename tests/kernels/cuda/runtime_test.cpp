// CUDA runtime pieces: the caching allocator (reuse, out-of-memory error naming the bytes),
// upload/download round trip, shape errors, and graph capture/replay of backend ops (label cuda).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/split_schedule.h"
#include "kernels/cuda/stream_walk.h"
#include "kernels/cuda/cuda_test_util.h"

namespace rill {
namespace {

using namespace cuda_test;

// Every value in `bad` is refused with an error naming the variable.
template <class Parse>
void expect_rejects(Parse parse, std::initializer_list<const char*> bad, const char* variable) {
  for (const char* value : bad) {
    try {
      parse(value);
      ADD_FAILURE() << variable << " accepted '" << value << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
    }
  }
}

// The decode split attention's blocks a (row, kv head) (split_schedule.h). Needs no GPU: runs in CI too.
TEST(CudaRuntime, SplitSpanStepRule) {
  using cuda::attention_detail::split_span_step;
  const int64_t slots = 132 * 5;  // an H100's / H200's SMs, five split blocks an SM; the 8B shape's 8 kv heads
  struct Case {
    int64_t spans, units, step;  // spans: the block table's (a decode graph's width class: 16, 64, 128, 256)
  };
  for (const Case& c : {
           Case{256, 8, 82},   // batch 1, 8,192 keys: one wave (82 blocks, not the 65 that walk as far)
           Case{128, 8, 82},   // batch 1, 4,096 keys
           Case{65, 8, 65},    // a table of 65 spans: a block a span
           Case{512, 8, 82},   // batch 1, 16,384 keys
           Case{256, 16, 41},  // batch 2, 8,192 keys
           Case{256, 32, 20},  // batch 4
           Case{256, 64, 10},  // batch 8 (two waves of 20: 2% shorter in the estimate, under the margin)
           Case{16, 64, 10},   // batch 8, 512 keys
           Case{16, 128, 5},   // batch 16, 512 keys: one wave of 5, not two of 10
           Case{128, 128, 5},  // batch 16, 4,096 keys
           Case{256, 128, 5},
           Case{16, 256, 2},   // batch 32, 512 keys: the table's 16 spans do not pay for two waves
           Case{64, 256, 5},   // batch 32, 2,048 keys: two waves of 5, not one of 2 (the rule before)
           Case{128, 256, 5},  // batch 32, 4,096 keys
           Case{256, 256, 5},
           Case{16, 512, 1},   // batch 64: a wave holds one block a (row, kv head): the fold kernel
           Case{256, 2048, 1},
           Case{1, 8, 1},      // one span
       }) {
    EXPECT_EQ(split_span_step(c.spans, c.units, slots), c.step) << c.spans << " spans, " << c.units << " units";
  }
  // Over a grid of shapes: 1 exactly where a wave holds fewer than two blocks a unit (or one span); else the
  // largest step of one wave (the rule before) or of two, never more than two waves, and the two-wave step only
  // where the estimate (waves times the walk plus half a span) is at least 10% shorter.
  for (int64_t units = 1; units <= 4096; units = units * 3 / 2 + 1) {
    for (int64_t spans = 1; spans <= 2100; spans = spans * 5 / 4 + 1) {
      const int64_t step = split_span_step(spans, units, slots);
      if (spans == 1 || slots < 2 * units) {
        EXPECT_EQ(step, 1) << spans << " spans, " << units << " units";
        continue;
      }
      const int64_t one = std::min(spans, slots / units), two = std::min(spans, 2 * slots / units);
      ASSERT_TRUE(step == one || step == two) << spans << " spans, " << units << " units: " << step;
      EXPECT_LE(units * step, 2 * slots);
      const auto walk = [&](int64_t s) { return (spans + s - 1) / s; };
      if (step != one) {
        EXPECT_LE(10 * 2 * (2 * walk(two) + 1), 9 * (2 * walk(one) + 1)) << spans << " spans, " << units;
      }
    }
  }
}

// Needs no GPU: runs in CI too.
TEST(CudaRuntime, AttentionSpanKeysFromEnvironment) {
  EXPECT_EQ(cuda::parse_attention_span_keys(nullptr), 0);
  EXPECT_EQ(cuda::parse_attention_span_keys("64"), 64);
  EXPECT_EQ(cuda::parse_attention_span_keys("256"), 256);
  expect_rejects(cuda::parse_attention_span_keys, {"", "0", "-64", "100", "64x", "16384", "abc"},
                 "RILL_ATTENTION_SPAN_KEYS");
  EXPECT_TRUE(cuda::parse_attention_cluster(nullptr));
  EXPECT_TRUE(cuda::parse_attention_cluster("1"));
  EXPECT_FALSE(cuda::parse_attention_cluster("0"));
  expect_rejects(cuda::parse_attention_cluster, {"", "2", "on", " 1"}, "RILL_ATTENTION_CLUSTER");
  EXPECT_TRUE(cuda::parse_attention_cluster_push(nullptr));
  EXPECT_TRUE(cuda::parse_attention_cluster_push("1"));
  EXPECT_FALSE(cuda::parse_attention_cluster_push("0"));
  expect_rejects(cuda::parse_attention_cluster_push, {"", "2", "yes", "0 "}, "RILL_ATTENTION_CLUSTER_PUSH");
  EXPECT_EQ(cuda::parse_attention_decode_fold(nullptr), 2);
  EXPECT_EQ(cuda::parse_attention_decode_fold("0"), 0);
  EXPECT_EQ(cuda::parse_attention_decode_fold("1"), 1);
  expect_rejects(cuda::parse_attention_decode_fold, {"", "3", "-1", "on", "1 "}, "RILL_ATTENTION_DECODE_FOLD");
  EXPECT_EQ(cuda::parse_attention_combine_spans(nullptr), 0);
  EXPECT_EQ(cuda::parse_attention_combine_spans("32"), 32);
  EXPECT_EQ(cuda::parse_attention_combine_spans("128"), 128);
  EXPECT_EQ(cuda::parse_attention_combine_spans("256"), 256);
  expect_rejects(cuda::parse_attention_combine_spans, {"", "64", "-32", "1", "32 "}, "RILL_ATTENTION_COMBINE_SPANS");
  EXPECT_FALSE(cuda::parse_attention_rope(nullptr));
  EXPECT_TRUE(cuda::parse_attention_rope("1"));
  EXPECT_FALSE(cuda::parse_attention_rope("0"));
  expect_rejects(cuda::parse_attention_rope, {"", "2", "yes", "1 "}, "RILL_ATTENTION_ROPE");
  EXPECT_EQ(cuda::parse_qkv_rope(nullptr), -1);
  EXPECT_EQ(cuda::parse_qkv_rope("1"), 1);
  EXPECT_EQ(cuda::parse_qkv_rope("0"), 0);
  expect_rejects(cuda::parse_qkv_rope, {"", "2", "on", "0 ", "-1"}, "RILL_QKV_ROPE");
  EXPECT_EQ(cuda::parse_attention_span_blocks(nullptr), 0);
  EXPECT_EQ(cuda::parse_attention_span_blocks("0"), 0);
  EXPECT_EQ(cuda::parse_attention_span_blocks("256"), 256);
  expect_rejects(cuda::parse_attention_span_blocks, {"", "-1", "65536", "8x", " 8", "08"},
                 "RILL_ATTENTION_SPAN_BLOCKS");
}

// Needs no GPU: runs in CI too.
TEST(CudaRuntime, PdlSettingFromEnvironment) {
  EXPECT_TRUE(cuda::parse_pdl_setting(nullptr));
  EXPECT_TRUE(cuda::parse_pdl_setting("1"));
  EXPECT_FALSE(cuda::parse_pdl_setting("0"));
  expect_rejects(cuda::parse_pdl_setting, {"", "2", "yes", "0x", " 1"}, "RILL_PDL");
  EXPECT_EQ(cuda::parse_pdl_trigger(nullptr), -1);
  EXPECT_EQ(cuda::parse_pdl_trigger("wait"), 0);
  EXPECT_EQ(cuda::parse_pdl_trigger("early"), 1);
  EXPECT_EQ(cuda::parse_pdl_trigger("rope"), 2);
  EXPECT_EQ(cuda::parse_pdl_trigger("attention"), 3);
  EXPECT_EQ(cuda::parse_pdl_trigger("norm"), 4);
  expect_rejects(cuda::parse_pdl_trigger, {"", "late", "Early", "early ", "rope,attention", "norms"},
                 "RILL_PDL_TRIGGER");
}

// Needs no GPU: runs in CI too.
TEST(CudaRuntime, GemmTuningFromEnvironment) {
  EXPECT_EQ(cuda::parse_decode_gemm_config(nullptr), 0);
  EXPECT_EQ(cuda::parse_decode_gemm_config("7"), 7);
  EXPECT_EQ(cuda::parse_gemm_split_ctas(nullptr), 2);
  EXPECT_EQ(cuda::parse_gemm_split_ctas("4"), 4);
  EXPECT_EQ(cuda::parse_decode_gemm_config("10"), 10);
  EXPECT_EQ(cuda::parse_decode_gemm_config("19"), 19);
  expect_rejects(cuda::parse_decode_gemm_config, {"", "0", "2", "11", "15", "17", "20", "1x", "-1"},
                 "RILL_DECODE_GEMM_CONFIG");
  EXPECT_EQ(cuda::parse_gemm_l2_prefetch("0"), 0);
  EXPECT_EQ(cuda::parse_gemm_l2_prefetch("8"), 8);
  expect_rejects(cuda::parse_gemm_l2_prefetch, {"", "33", "-1", "8x"}, "RILL_GEMM_L2_PREFETCH");
  expect_rejects(cuda::parse_gemm_split_ctas, {"", "0", "9", "2x", "-1"}, "RILL_GEMM_SPLIT_CTAS");
  EXPECT_EQ(cuda::parse_gemm_wgmma(nullptr), -1);
  EXPECT_EQ(cuda::parse_gemm_wgmma("0"), 0);
  EXPECT_EQ(cuda::parse_gemm_wgmma("1"), 1);
  expect_rejects(cuda::parse_gemm_wgmma, {"", "2", "on", "1x", "-1"}, "RILL_GEMM_WGMMA");
  EXPECT_EQ(cuda::parse_gemm_wide_tile(nullptr), 0);
  EXPECT_EQ(cuda::parse_gemm_wide_tile("0"), 0);
  EXPECT_EQ(cuda::parse_gemm_wide_tile("1"), 1);
  expect_rejects(cuda::parse_gemm_wide_tile, {"", "2", "on", "0x"}, "RILL_GEMM_WIDE_TILE");
  EXPECT_EQ(cuda::parse_gemm_swiglu(nullptr), 1);
  EXPECT_EQ(cuda::parse_gemm_swiglu("0"), 0);
  EXPECT_EQ(cuda::parse_gemm_swiglu("1"), 1);
  expect_rejects(cuda::parse_gemm_swiglu, {"", "2", "off", "1x"}, "RILL_GEMM_SWIGLU");
  EXPECT_EQ(cuda::parse_gemm_multicast(nullptr), -1);
  EXPECT_EQ(cuda::parse_gemm_multicast("0"), 0);
  EXPECT_EQ(cuda::parse_gemm_multicast("1"), 1);
  expect_rejects(cuda::parse_gemm_multicast, {"", "2", "on", "1x"}, "RILL_GEMM_MULTICAST");
  EXPECT_EQ(cuda::parse_gemm_stream(nullptr), -1);
  EXPECT_EQ(cuda::parse_gemm_stream("0"), 0);
  EXPECT_EQ(cuda::parse_gemm_stream("1"), 1);
  expect_rejects(cuda::parse_gemm_stream, {"", "2", "auto", "0 "}, "RILL_GEMM_STREAM");
  EXPECT_EQ(cuda::parse_decode_prewait(nullptr), 5);
  EXPECT_EQ(cuda::parse_decode_prewait("0"), 0);
  EXPECT_EQ(cuda::parse_decode_prewait("8"), 8);
  expect_rejects(cuda::parse_decode_prewait, {"", "9", "-1", "4x"}, "RILL_DECODE_PREWAIT");
  EXPECT_EQ(cuda::parse_decode_prewait_fill(nullptr), 0);
  EXPECT_EQ(cuda::parse_decode_prewait_fill("9"), 9);
  EXPECT_EQ(cuda::parse_decode_prewait_fill("12"), 12);
  expect_rejects(cuda::parse_decode_prewait_fill, {"", "13", "-1", "9x"}, "RILL_DECODE_PREWAIT_FILL");
  EXPECT_EQ(cuda::parse_decode_prewait_after_attention(nullptr), -1);
  EXPECT_EQ(cuda::parse_decode_prewait_after_attention("0"), 0);
  EXPECT_EQ(cuda::parse_decode_prewait_after_attention("9"), 9);
  expect_rejects(cuda::parse_decode_prewait_after_attention, {"", "13", "-1", "5 "},
                 "RILL_DECODE_PREWAIT_AFTER_ATTENTION");
  EXPECT_EQ(cuda::parse_norm_cluster(nullptr), -1);
  EXPECT_EQ(cuda::parse_norm_cluster("8"), 8);
  EXPECT_EQ(cuda::parse_norm_cluster("16"), 16);
  EXPECT_EQ(cuda::parse_norm_cluster("0"), 0);
  expect_rejects(cuda::parse_norm_cluster, {"", "1", "3", "32", "-1", "-2", "4 ", "auto"}, "RILL_NORM_CLUSTER");
  // The clusters-while-rows-are-few rule of the add + RMSNorm and the argmax, on 132 SMs.
  const int rule[][2] = {{1, 8}, {16, 8}, {17, 4}, {33, 4}, {34, 2}, {66, 2}, {67, 0}, {256, 0}};
  for (const auto& [rows, blocks] : rule) EXPECT_EQ(cuda::row_cluster_blocks(rows, 132), blocks) << rows << " rows";
  EXPECT_EQ(cuda::argmax_cluster_for(1, -1, 132), 8);
  EXPECT_EQ(cuda::argmax_cluster_for(67, -1, 132), 1);
  EXPECT_EQ(cuda::argmax_cluster_for(1, 0, 132), 1);
  EXPECT_EQ(cuda::argmax_cluster_for(100, 4, 132), 4);
  EXPECT_EQ(cuda::parse_argmax_cluster(nullptr), -1);
  EXPECT_EQ(cuda::parse_argmax_cluster("0"), 0);
  EXPECT_EQ(cuda::parse_argmax_cluster("8"), 8);
  expect_rejects(cuda::parse_argmax_cluster, {"", "1", "3", "16", "-1", "2 ", "auto"}, "RILL_ARGMAX_CLUSTER");
  EXPECT_EQ(cuda::parse_decode_l2_promotion(nullptr), 0);
  EXPECT_EQ(cuda::parse_decode_l2_promotion("128"), 128);
  EXPECT_EQ(cuda::parse_decode_l2_promotion("256"), 256);
  expect_rejects(cuda::parse_decode_l2_promotion, {"", "32", "512", "-1", "128B"}, "RILL_DECODE_L2_PROMOTION");
  EXPECT_EQ(cuda::parse_decode_few_item_stages(nullptr), 9);
  EXPECT_EQ(cuda::parse_decode_few_item_stages("0"), 0);
  EXPECT_EQ(cuda::parse_decode_few_item_stages("12"), 12);
  expect_rejects(cuda::parse_decode_few_item_stages, {"", "8", "10", "9x"}, "RILL_DECODE_FEW_ITEM_STAGES");
  EXPECT_TRUE(cuda::parse_weight_layout(nullptr));
  EXPECT_TRUE(cuda::parse_weight_layout("panels"));
  EXPECT_FALSE(cuda::parse_weight_layout("rows"));
  expect_rejects(cuda::parse_weight_layout, {"", "row", "1", "Panels"}, "RILL_WEIGHT_LAYOUT");
  EXPECT_EQ(cuda::parse_decode_ctas(nullptr), 0);
  EXPECT_EQ(cuda::parse_decode_ctas("1"), 1);
  EXPECT_EQ(cuda::parse_decode_ctas("3"), 3);
  expect_rejects(cuda::parse_decode_ctas, {"", "0", "4", "2x", "02"}, "RILL_DECODE_CTAS");
  EXPECT_EQ(cuda::parse_decode_x_rows(nullptr), 16);
  EXPECT_EQ(cuda::parse_decode_x_rows("16"), 16);
  EXPECT_EQ(cuda::parse_decode_x_rows("32"), 32);
  EXPECT_EQ(cuda::parse_decode_x_rows("64"), 64);
  expect_rejects(cuda::parse_decode_x_rows, {"", "8", "24", "128", "-16", "32 "}, "RILL_DECODE_X_ROWS");
  EXPECT_EQ(cuda::parse_decode_defer_split(nullptr), 1);
  EXPECT_EQ(cuda::parse_decode_defer_split("0"), 0);
  EXPECT_EQ(cuda::parse_decode_defer_split("1"), 1);
  expect_rejects(cuda::parse_decode_defer_split, {"", "2", "on", " 1"}, "RILL_DECODE_DEFER_SPLIT");
  EXPECT_EQ(cuda::parse_decode_swiglu(nullptr), 2);
  EXPECT_EQ(cuda::parse_decode_swiglu("0"), 0);
  EXPECT_EQ(cuda::parse_decode_swiglu("1"), 1);
  EXPECT_EQ(cuda::parse_decode_swiglu("3"), 3);
  expect_rejects(cuda::parse_decode_swiglu, {"", "4", "-1", "on", "1x"}, "RILL_DECODE_SWIGLU");
  EXPECT_EQ(cuda::parse_leave_out(nullptr), "");
  EXPECT_EQ(cuda::parse_leave_out("none"), "");
  EXPECT_EQ(cuda::parse_leave_out("nra"), "nra");
  expect_rejects(cuda::parse_leave_out, {"x", "n,r", "all", "N"}, "RILL_LEAVE_OUT");
  EXPECT_EQ(cuda::parse_decode_mlp(nullptr), 0);
  EXPECT_EQ(cuda::parse_decode_mlp("0"), 0);
  EXPECT_EQ(cuda::parse_decode_mlp("1"), 1);
  expect_rejects(cuda::parse_decode_mlp, {"", "2", "off", "1 "}, "RILL_DECODE_MLP");
  EXPECT_EQ(cuda::parse_decode_defer(nullptr), 1);
  EXPECT_EQ(cuda::parse_decode_defer("0"), 0);
  EXPECT_EQ(cuda::parse_decode_defer("1"), 1);
  expect_rejects(cuda::parse_decode_defer, {"", "2", "no", " 0"}, "RILL_DECODE_DEFER");
  EXPECT_EQ(cuda::parse_decode_trigger(nullptr), -1);
  EXPECT_EQ(cuda::parse_decode_trigger("early"), 0);
  EXPECT_EQ(cuda::parse_decode_trigger("late"), 1);
  expect_rejects(cuda::parse_decode_trigger, {"", "0", "Late", "late "}, "RILL_DECODE_TRIGGER");
  EXPECT_EQ(cuda::parse_attention_wgmma(nullptr), -1);
  EXPECT_EQ(cuda::parse_attention_wgmma("0"), 0);
  EXPECT_EQ(cuda::parse_attention_wgmma("1"), 1);
  expect_rejects(cuda::parse_attention_wgmma, {"", "2", "yes", "0x"}, "RILL_ATTENTION_WGMMA");
  EXPECT_EQ(cuda::parse_attention_warps(nullptr), 0);
  EXPECT_EQ(cuda::parse_attention_warps("8"), 8);
  expect_rejects(cuda::parse_attention_warps, {"", "0", "3", "16", "4x"}, "RILL_ATTENTION_WARPS");
}

TEST(CudaRuntime, AllocatorReusesFreedBlocks) {
  RILL_REQUIRE_GPU();
  auto& alloc = backend().caching_allocator();
  // Earlier tests of the binary share this backend and may have left blocks of the same size class
  // cached (the oldest cached block is handed out first): start from an empty cache.
  alloc.release_cached();
  void* p = alloc.allocate(3 << 20);
  ASSERT_NE(p, nullptr);
  alloc.deallocate(p, 3 << 20);
  void* q = alloc.allocate(3 << 20);
  EXPECT_EQ(p, q);
  alloc.deallocate(q, 3 << 20);
}

TEST(CudaRuntime, OutOfMemoryNamesTheBytes) {
  RILL_REQUIRE_GPU();
  const size_t huge = size_t(1) << 50;  // 1 PiB
  try {
    backend().allocator().allocate(huge);
    FAIL() << "expected rill::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(huge)), std::string::npos) << msg;
    EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  }
  // The backend still works afterwards.
  DevTensor d = upload_i32({1, 2, 3}, {3});
  EXPECT_EQ(download_i32(d), (std::vector<int32_t>{1, 2, 3}));
}

TEST(CudaRuntime, ShapeErrorsAreRillErrors) {
  RILL_REQUIRE_GPU();
  DevTensor x(DType::bf16, {4, 64}), w(DType::bf16, {32, 65}), y(DType::bf16, {4, 32});
  EXPECT_THROW(backend().matmul(x.t, w.t, nullptr, y.t), Error);
  DevTensor xf(DType::f32, {4, 64});
  DevTensor w2(DType::bf16, {32, 64});
  EXPECT_THROW(backend().matmul(xf.t, w2.t, nullptr, y.t), Error);
  std::vector<float> host(4);
  Tensor host_t(host.data(), DType::f32, {4});
  DevTensor out(DType::f32, {4});
  EXPECT_THROW(backend().add(host_t, out.t, out.t), Error);
}

TEST(CudaRuntime, GraphReplayRecomputes) {
  RILL_REQUIRE_GPU();
  const int64_t n = 4099;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  auto a = random_bf16_values(rng, size_t(n)), b = random_bf16_values(rng, size_t(n));
  DevTensor da = upload_bf16(a, {n}), db = upload_bf16(b, {n}), dout(DType::bf16, {n});
  dout.poison();
  backend().synchronize();
  cudaStream_t s = backend().stream();
  cuda::Graph::begin_capture(s);
  backend().add(da.t, db.t, dout.t);
  cuda::Graph g = cuda::Graph::end_capture(s);
  cuda::GraphExec exec = g.instantiate();
  backend().synchronize();
  // Nothing ran during capture: out is still poison.
  auto before = download_bf16(dout);
  EXPECT_TRUE(std::isnan(before[0]));
  exec.replay(s);
  auto after = download_bf16(dout);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after[size_t(i)], round_bf16(a[size_t(i)] + b[size_t(i)])) << i;
  // New inputs in the same buffers: a replay sees them.
  auto a2 = random_bf16_values(rng, size_t(n));
  auto h = to_bf16(a2);
  backend().upload(h.data(), da.t);
  exec.replay(s);
  auto after2 = download_bf16(dout);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(after2[size_t(i)], round_bf16(a2[size_t(i)] + b[size_t(i)])) << i;
}

// A matmul shape seen for the first time inside a capture must not synchronise (no timing then),
// and replays must equal eager runs bit for bit.
TEST(CudaRuntime, MatmulInsideGraphCapture) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t m = 1, n = 333, k = 520;
  auto x = random_bf16_values(rng, size_t(m * k)), w = random_bf16_values(rng, size_t(n * k));
  DevTensor dx = upload_bf16(x, {m, k}), dw = upload_bf16(w, {n, k}), dy(DType::bf16, {m, n}), dy2(DType::bf16, {m, n});
  dy.poison();
  backend().synchronize();
  cudaStream_t s = backend().stream();
  cuda::Graph::begin_capture(s);
  backend().matmul(dx.t, dw.t, nullptr, dy.t);
  cuda::Graph g = cuda::Graph::end_capture(s);
  cuda::GraphExec exec = g.instantiate();
  exec.replay(s);
  auto y = download_bf16(dy);
  std::vector<double> ref(static_cast<size_t>(n), 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t l = 0; l < k; ++l) ref[size_t(j)] += double(x[size_t(l)]) * w[size_t(j * k + l)];
  EXPECT_LT(rel_error(y, ref), 1e-2);
  dy2.poison();
  backend().matmul(dx.t, dw.t, nullptr, dy2.t);
  EXPECT_EQ(download_bf16(dy2), y);
}

// A readback waits for the ops queued before its start(), not for those queued after: two
// alternating readbacks of a buffer that each step rewrites give every step's values, while the
// next step is already queued; an oversized source, a capture and wait() before start() are
// refused.
TEST(CudaRuntime, ReadbackBehindQueuedWork) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t n = 1 << 20;
  std::unique_ptr<Readback> rb[2] = {backend().make_readback(2 * size_t(n)), backend().make_readback(2 * size_t(n))};
  EXPECT_THROW(rb[0]->wait(), Error);
  auto a = random_bf16_values(rng, size_t(n)), b = random_bf16_values(rng, size_t(n));
  DevTensor da = upload_bf16(a, {n}), db = upload_bf16(b, {n}), acc[2] = {DevTensor(DType::bf16, {n}),
                                                                            DevTensor(DType::bf16, {n})};
  backend().copy(da.t, acc[0].t);
  std::vector<float> expect(a.begin(), a.end());
  std::vector<std::vector<float>> expected;
  for (int step = 0; step < 6; ++step) {
    // acc[next] = acc[cur] + b, then read acc[next] back while later steps are queued.
    DevTensor& cur = acc[step % 2];
    DevTensor& next = acc[(step + 1) % 2];
    backend().add(cur.t, db.t, next.t);
    for (size_t i = 0; i < expect.size(); ++i) expect[i] = round_bf16(expect[i] + b[i]);
    expected.push_back(expect);
    rb[step % 2]->start(next.t);
    if (step == 0) continue;
    // The previous step's values, read while this step's add may still run.
    const auto* got = static_cast<const bf16_t*>(rb[(step - 1) % 2]->wait());
    const std::vector<float>& want = expected[size_t(step - 1)];
    for (int64_t i = 0; i < n; i += 997)
      ASSERT_EQ(bf16_to_f32(got[i]), want[size_t(i)]) << "step " << step - 1 << " i " << i;
  }
  const auto* last = static_cast<const bf16_t*>(rb[1]->wait());
  for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(bf16_to_f32(last[i]), expected[5][size_t(i)]) << i;
  DevTensor big(DType::bf16, {n + 1});
  EXPECT_THROW(rb[0]->start(big.t), Error);
  backend().synchronize();
  backend().begin_capture();
  EXPECT_THROW(rb[0]->start(da.t), Error);
  backend().abort_capture();
}


// The warpgroup GEMM's stream schedule (no GPU needed): CTA c of G takes units [c·U/G, (c+1)·U/G) of
// the tiles' split ranges; every unit is taken once, each tile's ranges are walked in order by
// consecutive CTAs — the first from 0 and publishing, each next one waiting for its predecessor's
// total, the last writing the outputs — a CTA publishes at most once (its first segment) and waits at
// most once (its first segment inside one tile, else its last), and the shares differ by one unit at most.
TEST(CudaRuntime, StreamScheduleSharesEveryRangeOnceInOrder) {
  struct Piece {
    int64_t cta;
    int ra, rb;
    bool wait, publish;
  };
  for (int64_t tiles : {1, 5, 48, 96, 128, 192, 384, 1000})
    for (int ranges : {2, 3, 4, 5, 8})
      for (int64_t g : {1, 7, 66, 131, 132, 256}) {
        if (tiles * ranges < g) continue;  // (the launch takes min(units, SMs) CTAs)
        SCOPED_TRACE(::testing::Message() << "tiles " << tiles << ", ranges " << ranges << ", CTAs " << g);
        std::vector<std::vector<Piece>> by_tile(static_cast<size_t>(tiles));
        int64_t least = tiles * ranges, most = 0;
        for (int64_t c = 0; c < g; ++c) {
          cuda::gemm_detail::StreamWalk w{};
          w.init(c, g, tiles, ranges);
          int64_t units = 0;
          int waits = 0, publishes = 0;
          for (int i = 0; i < w.count(); ++i) {
            int64_t tile;
            int ra, rb;
            bool wait, publish;
            w.at(i, tile, ra, rb, wait, publish);
            ASSERT_GE(tile, 0);
            ASSERT_LT(tile, tiles);
            ASSERT_LT(ra, rb);
            units += rb - ra;
            waits += wait;
            publishes += publish;
            if (publish) {
              EXPECT_EQ(i, 0) << "CTA " << c << " publishes late";
            }
            if (wait) {
              EXPECT_TRUE(i == w.count() - 1 || (i == 0 && publish)) << "CTA " << c << " waits mid-walk";
            }
            by_tile[size_t(tile)].push_back(Piece{c, ra, rb, wait, publish});
          }
          EXPECT_LE(waits, 1);
          EXPECT_LE(publishes, 1);
          EXPECT_EQ(w.waits(), waits == 1);
          least = std::min(least, units), most = std::max(most, units);
        }
        EXPECT_LE(most - least, 1);
        for (int64_t t = 0; t < tiles; ++t) {
          auto& p = by_tile[size_t(t)];
          std::sort(p.begin(), p.end(), [](const Piece& a, const Piece& b) { return a.ra < b.ra; });
          ASSERT_FALSE(p.empty()) << "tile " << t;
          EXPECT_EQ(p.front().ra, 0) << "tile " << t;
          EXPECT_FALSE(p.front().wait) << "tile " << t;
          EXPECT_EQ(p.back().rb, ranges) << "tile " << t;
          EXPECT_FALSE(p.back().publish) << "tile " << t;
          for (size_t i = 1; i < p.size(); ++i) {
            EXPECT_EQ(p[i].ra, p[i - 1].rb) << "tile " << t;
            EXPECT_EQ(p[i].cta, p[i - 1].cta + 1) << "tile " << t;
            EXPECT_TRUE(p[i].wait) << "tile " << t;
            EXPECT_TRUE(p[i - 1].publish) << "tile " << t;
          }
        }
      }
}

}  // namespace
}  // namespace rill
