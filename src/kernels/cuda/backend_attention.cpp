// kernels/cuda/backend_attention.cpp — CudaKernels' RoPE, K/V-cache and attention ops: argument
// checks ("[op] ..." rill::Errors, before anything is enqueued) and dispatch to the launchers in
// ops.h, with the deferred q/k/v GEMM product and the pending RoPE op of a captured decode step
// (cuda_kernels.h). Split from backend.cpp.
#include "core/error.h"
#include "kernels/cuda/arg_checks.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops.h"

namespace rill::cuda {

namespace {
RopeArgs rope_args(const char* op, Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) {
  expect_on_device(q, op, "q");
  expect_on_device(k, op, "k");
  expect_on_device(positions, op, "positions");
  expect_on_device(table.inv_freq, op, "inv_freq");
  expect_dtype(q, DType::bf16, op, "q");
  expect_dtype(k, DType::bf16, op, "k");
  expect_dtype(positions, DType::i32, op, "positions");
  expect_dtype(table.inv_freq, DType::f32, op, "inv_freq");
  expect_rank(q, 3, op, "q");
  expect_rank(k, 3, op, "k");
  const int64_t t = q.size(0), d = q.size(2);
  RILL_ENSURE(k.size(0) == t && k.size(2) == d && positions.numel() == t,
              "[{}] q {}, k {}, positions {} disagree on tokens / head_dim", op, q.describe(), k.describe(),
              positions.describe());
  RILL_ENSURE(table.rotary_dim > 0 && table.rotary_dim % 2 == 0 && table.rotary_dim <= d &&
                  table.inv_freq.numel() == table.rotary_dim / 2,
              "[{}] rotary_dim {} must be even, ≤ head_dim {}, and inv_freq {} must hold rotary_dim / 2", op,
              table.rotary_dim, d, table.inv_freq.describe());
  RopeArgs a;
  a.q = q.data();
  a.k = k.data();
  a.positions = positions.data_as<int32_t>();
  a.inv_freq = table.inv_freq.data_as<float>();
  a.tokens = t;
  a.hq = int(q.size(1));
  a.hkv = int(k.size(1));
  a.head_dim = int(d);
  a.rotary_dim = table.rotary_dim;
  a.attention_factor = table.attention_factor;
  return a;
}

void check_cache(const char* op, const KvLayer& cache, int64_t hkv, int64_t d) {
  expect_on_device(cache.k, op, "cache.k");
  expect_on_device(cache.v, op, "cache.v");
  expect_dtype(cache.k, DType::bf16, op, "cache.k");
  expect_dtype(cache.v, DType::bf16, op, "cache.v");
  expect_rank(cache.k, 4, op, "cache.k");
  RILL_ENSURE(same_shape(cache.k, cache.v) && cache.k.size(2) == hkv && cache.k.size(3) == d,
              "[{}] cache k {} / v {} must be [num_blocks, block_size, {}, {}]", op, cache.k.describe(),
              cache.v.describe(), hkv, d);
}
}  // namespace

void CudaKernels::rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) {
  settle();
  RopeArgs a = rope_args("rope", q, k, positions, table);
  launch_rope(a, stream_.get());
}

void CudaKernels::store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache) {
  settle();
  expect_on_device(k, "store_kv", "k");
  expect_on_device(v, "store_kv", "v");
  expect_on_device(slot_mapping, "store_kv", "slot_mapping");
  expect_dtype(k, DType::bf16, "store_kv", "k");
  expect_dtype(v, DType::bf16, "store_kv", "v");
  expect_dtype(slot_mapping, DType::i32, "store_kv", "slot_mapping");
  expect_rank(k, 3, "store_kv", "k");
  RILL_ENSURE(same_shape(k, v) && slot_mapping.numel() == k.size(0), "[store_kv] k {}, v {}, slot_mapping {} disagree",
              k.describe(), v.describe(), slot_mapping.describe());
  check_cache("store_kv", cache, k.size(1), k.size(2));
  launch_store_kv(k.data(), v.data(), slot_mapping.data_as<int32_t>(), cache.k.data(), cache.v.data(), k.size(0),
                  k.size(1) * k.size(2), cache.k.size(0) * cache.k.size(1), stream_.get());
}

void CudaKernels::rope_store_kv(Tensor& q, Tensor& k, const Tensor& v, const AttentionBatch& batch,
                                const RopeTable& table, KvLayer& cache) {
  RopeArgs a = rope_args("rope_store_kv", q, k, batch.positions, table);
  rope_store_kv_launch(a, k, v, batch, cache);
}

void CudaKernels::norm_rope_store_kv(Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                     const Tensor& k_norm, const NormParams& np, const AttentionBatch& batch,
                                     const RopeTable& table, KvLayer& cache) {
  auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; };
  const int64_t d = q.ndim() == 3 ? q.size(2) : 0;
  if (d % 8 != 0 || d == 0 || !aligned(q) || !aligned(k)) {  // the unfused ops handle every layout
    settle();
    Kernels::norm_rope_store_kv(q, k, v, q_norm, k_norm, np, batch, table, cache);
    return;
  }
  RopeArgs a = rope_args("norm_rope_store_kv", q, k, batch.positions, table);
  rope_norm_args(a, q_norm, k_norm, np);
  rope_store_kv_launch(a, k, v, batch, cache);
}

void CudaKernels::rope_norm_args(RopeArgs& a, const Tensor& q_norm, const Tensor& k_norm, const NormParams& np) {
  const int64_t d = a.head_dim;
  for (const Tensor* w : {&q_norm, &k_norm}) {
    expect_on_device(*w, "norm_rope_store_kv", "norm weight");
    RILL_ENSURE((w->dtype() == DType::f32 || w->dtype() == DType::bf16) && w->numel() == d &&
                    w->dtype() == q_norm.dtype(),
                "[norm_rope_store_kv] norm weight {} must be f32 or bf16 [{}] like q_norm {}", w->describe(), d,
                q_norm.describe());
  }
  a.q_norm = q_norm.data();
  a.k_norm = k_norm.data();
  a.norm_f32 = q_norm.dtype() == DType::f32;
  a.norm_one_plus = np.one_plus_weight;
  a.norm_fp32_scale = np.scale_in_fp32;
  a.norm_eps = np.eps;
}

void CudaKernels::rope_store_kv_args(RopeArgs& a, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                                     KvLayer& cache) {
  expect_on_device(v, "rope_store_kv", "v");
  expect_dtype(v, DType::bf16, "rope_store_kv", "v");
  expect_on_device(batch.slot_mapping, "rope_store_kv", "slot_mapping");
  expect_dtype(batch.slot_mapping, DType::i32, "rope_store_kv", "slot_mapping");
  RILL_ENSURE(same_shape(k, v) && batch.slot_mapping.numel() == k.size(0),
              "[rope_store_kv] k {}, v {}, slot_mapping {} disagree", k.describe(), v.describe(),
              batch.slot_mapping.describe());
  check_cache("rope_store_kv", cache, k.size(1), k.size(2));
  a.v = v.data();
  a.slot_mapping = batch.slot_mapping.data_as<int32_t>();
  a.k_cache = cache.k.data();
  a.v_cache = cache.v.data();
  a.num_slots = cache.k.size(0) * cache.k.size(1);
}

void CudaKernels::rope_store_kv_launch(RopeArgs& a, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                                       KvLayer& cache) {
  rope_store_kv_args(a, k, v, batch, cache);
  take_pending_qkv(a, k, v);
  if (a.q_partials.ws && a.k_partials.ws && a.v_partials.ws && attention_rope_enabled()) {
    pending_rope_ = a;  // for the attention reading q (a step graph's decode attention runs it inside)
    rope_pending_ = true;
    return;
  }
  if (left_out('r')) return;  // a measurement build (RILL_LEAVE_OUT)
  launch_rope(a, stream_.get());
}

// The fused launch where it may fit (decode rows, head_dim 128 at full rotary, the layout the RoPE
// heads kernel takes); the GEMM then decides (launch_gemm_wgmma_decode_rope). Where it did not run,
// the GEMM ran as matmul_outputs would have (its product possibly deferred) and the RoPE op follows.
// The rule (RILL_QKV_ROPE unset): only where the attention after it runs the split schedule — a block
// table wider than the cluster kernel's 16 spans of 64 keys (bench/RESULTS.md run AI: +0.5% at 8,192
// keys; before the cluster attention of short tables −1.9% at 512 keys, the fused GEMM's 192 CTAs of
// 4-CTA clusters delaying the attention's clusters). A function of the tensors' shapes, so a captured
// graph replays the same choice.
void CudaKernels::qkv_rope_store_kv(const Tensor& h, const Tensor& qkv_w, const Tensor* qkv_bias, Tensor& q,
                                    Tensor& k, Tensor& v, const Tensor* q_norm, const Tensor* k_norm,
                                    const NormParams& np, const AttentionBatch& batch, const RopeTable& table,
                                    KvLayer& cache) {
  auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; };
  const bool norm = q_norm && k_norm;
  const int mode = qkv_rope_mode();
  const bool long_table = batch.block_tables.ndim() == 2 && cache.k.ndim() == 4 &&
                          batch.block_tables.size(1) * cache.k.size(1) > 16 * 64;
  // (A measurement build leaving the RoPE op out runs the unfused ops: RILL_LEAVE_OUT.)
  const bool may_fuse = (mode == 1 || (mode < 0 && long_table)) && batch_invariant_ && !attention_rope_enabled() &&
                        !left_out('r') &&
                        q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3 && q.size(0) <= 2 && q.size(2) == 128 &&
                        table.rotary_dim == 128 && aligned(q) && aligned(k) && aligned(v) && q.is_contiguous() &&
                        k.is_contiguous() && v.is_contiguous() && (norm || (!q_norm && !k_norm));
  if (!may_fuse) {
    Kernels::qkv_rope_store_kv(h, qkv_w, qkv_bias, q, k, v, q_norm, k_norm, np, batch, table, cache);
    return;
  }
  RopeArgs a = rope_args(norm ? "norm_rope_store_kv" : "rope_store_kv", q, k, batch.positions, table);
  if (norm) rope_norm_args(a, *q_norm, *k_norm, np);
  rope_store_kv_args(a, k, v, batch, cache);
  Tensor q2 = q.view({q.size(0), q.size(1) * q.size(2)}), k2 = k.view({k.size(0), k.size(1) * k.size(2)});
  Tensor v2 = v.view({v.size(0), v.size(1) * v.size(2)});
  Tensor* const outs[] = {&q2, &k2, &v2};
  bool ran = false;
  matmul_outputs_rope(h, qkv_w, qkv_bias, outs, &a, &ran);
  if (ran) return;
  rope_store_kv_launch(a, k, v, batch, cache);
}

void CudaKernels::attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch,
                            const AttentionParams& p, Tensor& out) {
  expect_on_device(q, "attention", "q");
  expect_on_device(out, "attention", "out");
  expect_dtype(q, DType::bf16, "attention", "q");
  expect_dtype(out, DType::bf16, "attention", "out");
  expect_rank(q, 3, "attention", "q");
  RILL_ENSURE(same_shape(q, out), "[attention] out {} must match q {}", out.describe(), q.describe());
  const int64_t t = q.size(0), hq = q.size(1), d = q.size(2);
  RILL_ENSURE(cache.k.ndim() == 4, "[attention] cache.k {} must be [num_blocks, block_size, kv_heads, head_dim]",
              cache.k.describe());
  const int64_t hkv = cache.k.size(2);
  check_cache("attention", cache, hkv, d);
  if (!rope_pending_ && left_out('a')) return;  // a measurement build (RILL_LEAVE_OUT)
  RILL_ENSURE(hkv > 0 && hq % hkv == 0, "[attention] {} query heads are not a multiple of {} kv heads", hq, hkv);
  RILL_ENSURE(d == 16 || d == 32 || d == 64 || d == 128 || d == 256,
              "[attention] head_dim {} is not supported (16, 32, 64, 128, 256)", d);
  const int rows = batch.num_rows;
  expect_on_device(batch.cu_seqlens_q, "attention", "cu_seqlens_q");
  expect_on_device(batch.context_lens, "attention", "context_lens");
  expect_on_device(batch.block_tables, "attention", "block_tables");
  expect_dtype(batch.cu_seqlens_q, DType::i32, "attention", "cu_seqlens_q");
  expect_dtype(batch.context_lens, DType::i32, "attention", "context_lens");
  expect_dtype(batch.block_tables, DType::i32, "attention", "block_tables");
  RILL_ENSURE(rows >= 0 && batch.cu_seqlens_q.numel() == rows + 1 && batch.context_lens.numel() == rows,
              "[attention] num_rows {} disagrees with cu_seqlens_q {} / context_lens {}", rows,
              batch.cu_seqlens_q.describe(), batch.context_lens.describe());
  RILL_ENSURE(batch.block_tables.ndim() == 2 && batch.block_tables.size(0) == rows,
              "[attention] block_tables {} must be [{}, max_blocks_per_row]", batch.block_tables.describe(), rows);
  RILL_ENSURE(t == 0 || (batch.max_seqlen_q >= 1 && batch.max_context_len >= 1),
              "[attention] max_seqlen_q {} / max_context_len {} hints must be set", batch.max_seqlen_q,
              batch.max_context_len);
  RILL_ENSURE(p.sliding_window >= 0 && p.softcap >= 0.f, "[attention] sliding_window {} / softcap {} must be ≥ 0",
              p.sliding_window, p.softcap);
  AttentionArgs a;
  a.q = q.data();
  a.k_cache = cache.k.data();
  a.v_cache = cache.v.data();
  a.out = out.data();
  a.cu_seqlens_q = batch.cu_seqlens_q.data_as<int32_t>();
  a.context_lens = batch.context_lens.data_as<int32_t>();
  a.block_tables = batch.block_tables.data_as<int32_t>();
  a.tokens = t;
  a.num_rows = rows;
  a.max_blocks_per_row = int(batch.block_tables.size(1));
  a.block_size = int(cache.k.size(1));
  a.num_slots = cache.k.size(0) * cache.k.size(1);
  a.max_seqlen_q = batch.max_seqlen_q;
  a.max_context_len = batch.max_context_len;
  a.hq = int(hq);
  a.hkv = int(hkv);
  a.head_dim = int(d);
  a.scale = p.scale;
  a.sliding_window = p.sliding_window;
  a.softcap = p.softcap;
  a.workspace = static_cast<float*>(attention_workspace_.data());
  a.workspace_bytes = attention_workspace_.size();
  a.num_sms = info_.num_sms;
  a.force_splits = attention_splits_;
  a.force_warps = attention_warps_;
  a.force_bn = attention_bn_;
  a.invariant = batch_invariant_;
  a.span_keys = attention_span_keys_;
  a.span_blocks = attention_span_blocks_;
  // The RoPE op waiting for this attention (of its q, into its cache): handed to the launch, which
  // runs it inside the decode kernels or first. Anything else pending is settled first.
  if (rope_pending_ && pending_rope_.q == q.data() && pending_rope_.k_cache == cache.k.data() &&
      pending_rope_.v_cache == cache.v.data() && pending_rope_.tokens == t && pending_rope_.head_dim == d) {
    a.rope = &pending_rope_;
    rope_pending_ = false;
  }
  settle();
  launch_attention(a, stream_.get());
  after_attention_ = true;
  after_combine_ = attention_ended_with_combine();
}

void CudaKernels::copy_kv_blocks(KvLayer& cache, const Tensor& src_dst) {
  settle();
  expect_on_device(src_dst, "copy_kv_blocks", "src_dst");
  expect_dtype(src_dst, DType::i32, "copy_kv_blocks", "src_dst");
  RILL_ENSURE(src_dst.ndim() == 2 && src_dst.size(1) == 2, "[copy_kv_blocks] src_dst {} must be [n, 2]",
              src_dst.describe());
  RILL_ENSURE(cache.k.ndim() == 4, "[copy_kv_blocks] cache.k {} must be [num_blocks, block_size, kv_heads, head_dim]",
              cache.k.describe());
  check_cache("copy_kv_blocks", cache, cache.k.size(2), cache.k.size(3));
  const int64_t num_blocks = cache.k.size(0);
  const int64_t block_bytes = num_blocks ? int64_t(cache.k.nbytes()) / num_blocks : 0;
  launch_copy_kv_blocks(cache.k.data(), cache.v.data(), src_dst.data_as<int32_t>(), src_dst.size(0), block_bytes,
                        num_blocks, stream_.get());
}

}  // namespace rill::cuda
