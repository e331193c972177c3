// kernels/cuda/backend.cpp — CudaKernels: argument checking ("[op] ..." rill::Errors, before
// anything is enqueued) and dispatch to the launchers in ops.h / MatmulEngine. Activations are
// bf16; tensors must be contiguous and on this backend's device.
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace rill {
namespace cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
constexpr size_t kSplitKBytes = size_t(32) << 20;  // split-K partials (the invariant GEMM up to M ≈ 256)
constexpr size_t kAttentionWorkspaceBytes = size_t(64) << 20;
constexpr int64_t kGemmCounters = 8192;  // output tiles of one split GEMM launch (≥ 151936 / 64)

void expect_on_device(const Tensor& t, const char* op, const char* name) {
  RILL_ENSURE(t.defined(), "[{}] {} is not set", op, name);
  RILL_ENSURE(t.device() == Device::cuda, "[{}] {} {} is not on the CUDA device", op, name, t.describe());
  RILL_ENSURE(t.is_contiguous(), "[{}] {} {} must be contiguous", op, name, t.describe());
}

void expect_dtype(const Tensor& t, DType d, const char* op, const char* name) {
  RILL_ENSURE(t.dtype() == d, "[{}] {} {} must be {}", op, name, t.describe(), dtype_name(d));
}

void expect_rank(const Tensor& t, int ndim, const char* op, const char* name) {
  RILL_ENSURE(t.ndim() == ndim, "[{}] {} {} must have {} dimensions", op, name, t.describe(), ndim);
}

bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int d = 0; d < a.ndim(); ++d)
    if (a.size(d) != b.size(d)) return false;
  return true;
}

}  // namespace

CudaKernels::CudaKernels(int device_ordinal)
    : info_(open_device(device_ordinal)), allocator_(device_ordinal), stream_(Stream::create()), lt_(CublasLtHandle::create()) {
  lt_workspace_ = Buffer(allocator_, kLtWorkspaceBytes);
  splitk_workspace_ = Buffer(allocator_, kSplitKBytes);
  attention_workspace_ = Buffer(allocator_, kAttentionWorkspaceBytes);
  matmul_ = std::make_unique<MatmulEngine>(lt_.get(), stream_.get(), lt_workspace_.data(), kLtWorkspaceBytes,
                                           static_cast<float*>(splitk_workspace_.data()), kSplitKBytes, info_.num_sms);
  // The attention workspace is per-call scratch, larger than L2 on current GPUs (H200: 60 MB).
  matmul_->set_l2_flush_buffer(attention_workspace_.data(), attention_workspace_.size());
  gemm_counters_ = Buffer(allocator_, size_t(kGemmCounters) * sizeof(unsigned));
  RILL_CUDA_CHECK(cudaMemsetAsync(gemm_counters_.data(), 0, gemm_counters_.size(), stream_.get()));
  RILL_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  matmul_->set_gemm_counters(static_cast<unsigned*>(gemm_counters_.data()), kGemmCounters);
  configure_from_environment();
  logger().info("CUDA backend on device {} ({}, sm_{}{}, {} SMs, {:.1f} GiB)", info_.ordinal, info_.name,
                info_.cc_major, info_.cc_minor, info_.num_sms, double(info_.total_memory) / double(1 << 30));
  if (info_.cc_major == 9 && info_.cc_minor == 0 && !gemm_wgmma_supported())
    logger().warn("this build has no sm_90a code: prefill and large batches run the mma.sync GEMM (~3x slower than "
                  "the warpgroup GEMM); build with RILL_CUDA_ARCHITECTURES=90a-real;90-virtual (the default)");
  else
    logger().debug("batch-invariant GEMM for M > 16: {}; prefill attention at head_dim 128: {}",
                   gemm_wgmma_enabled() ? "warpgroup (wgmma) kernel" : "mma.sync kernel",
                   attention_wgmma_enabled() ? "warpgroup (wgmma) kernel" : "mma.sync kernel");
}

CudaKernels::~CudaKernels() {
  if (stream_) cudaStreamSynchronize(stream_.get());
}

void CudaKernels::upload(const void* host, Tensor dst) {
  settle();
  expect_on_device(dst, "upload", "dst");
  if (dst.nbytes() == 0) return;
  RILL_ENSURE(!stream_.capturing(), "[upload] not allowed while a step graph is being captured");
  RILL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host, dst.nbytes(), cudaMemcpyHostToDevice, stream_.get()));
  // The host buffer may be reused as soon as we return. From pageable memory (the usual case:
  // a step's metadata) the driver has staged the bytes before cudaMemcpyAsync returns, so the
  // device need not be waited for; from pinned memory the copy is truly asynchronous: wait.
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) {
    (void)cudaGetLastError();  // unregistered host pointer on old drivers: pageable
    return;
  }
  if (attr.type == cudaMemoryTypeHost) stream_.synchronize();
}

void CudaKernels::download(const Tensor& src, void* host) {
  settle();
  expect_on_device(src, "download", "src");
  if (src.nbytes() == 0) return;
  RILL_CUDA_CHECK(cudaMemcpyAsync(host, src.data(), src.nbytes(), cudaMemcpyDeviceToHost, stream_.get()));
  stream_.synchronize();
}

void CudaKernels::copy(const Tensor& src, Tensor& dst) {
  settle();
  expect_on_device(src, "copy", "src");
  expect_on_device(dst, "copy", "dst");
  RILL_ENSURE(src.is_contiguous() && dst.is_contiguous() && src.dtype() == dst.dtype() && src.numel() == dst.numel(),
              "[copy] src {} and dst {} must be contiguous and alike", src.describe(), dst.describe());
  if (src.nbytes() == 0) return;
  RILL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_.get()));
}

void CudaKernels::synchronize() {
  settle();
  stream_.synchronize();
}

void CudaKernels::set_batch_invariant(bool on) {
  batch_invariant_ = on;
  matmul_->set_batch_invariant(on);
}

namespace {
class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(Graph graph, cudaStream_t stream) : graph_(std::move(graph)), exec_(graph_.instantiate()), stream_(stream) {}
  void replay() override { exec_.replay(stream_); }

 private:
  Graph graph_;
  GraphExec exec_;
  cudaStream_t stream_;
};
}  // namespace

void CudaKernels::begin_capture() {
  settle();
  RILL_ENSURE(!stream_.capturing(), "[begin_capture] a capture is already in progress");
  Graph::begin_capture(stream_.get());
}

std::unique_ptr<StepGraph> CudaKernels::end_capture() {
  RILL_ENSURE(stream_.capturing(), "[end_capture] no capture in progress");
  settle();  // into the graph: its replay leaves every output written
  Graph g = Graph::end_capture(stream_.get());
  return std::make_unique<CudaStepGraph>(std::move(g), stream_.get());
}

void CudaKernels::abort_capture() noexcept {
  pending_ = GemmPartials{};  // its GEMM was recorded, never run
  rope_pending_ = false;
  glu_pending_ = false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_.get(), &status) != cudaSuccess || status == cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    return;
  }
  cudaGraph_t g = nullptr;
  if (cudaStreamEndCapture(stream_.get(), &g) == cudaSuccess && g) cudaGraphDestroy(g);
  (void)cudaGetLastError();
}

GemmPartials* CudaKernels::deferral() {
  if (defer_fold_ == 0 || !batch_invariant_) return nullptr;
  return defer_fold_ == 2 || stream_.capturing() ? &pending_ : nullptr;
}

void CudaKernels::settle() {
  if (rope_pending_) {
    rope_pending_ = false;
    launch_rope(pending_rope_, stream_.get());
  }
  if (glu_pending_) {
    glu_pending_ = false;
    const GluInput& g = pending_glu_;
    launch_swiglu(g.gate_up, g.act, 1, g.inter, stream_.get(), g.gu);
  }
  if (!pending_.active()) return;
  const GemmPartials p = pending_;
  pending_ = GemmPartials{};
  launch_gemm_fold(p, stream_.get());
}

PartialsIn CudaKernels::take_pending(const Tensor& t) {
  if (pending_.active() && pending_.num_outs == 1 && pending_.outs[0] == t.data() && t.is_contiguous() &&
      t.numel() == pending_.m * pending_.n) {
    const PartialsIn p = pending_.input(0);
    pending_ = GemmPartials{};
    return p;
  }
  settle();
  return {};
}

void CudaKernels::take_pending_qkv(RopeArgs& a, const Tensor& k, const Tensor& v) {
  const GemmPartials& p = pending_;
  const int64_t qw = int64_t(a.hq) * a.head_dim, kw = int64_t(a.hkv) * a.head_dim;
  if (p.active() && p.num_outs == 3 && p.m == a.tokens && p.outs[0] == a.q && p.outs[1] == k.data() &&
      p.outs[2] == v.data() && p.out_end[0] == qw && p.out_end[1] == qw + kw && p.out_end[2] == qw + 2 * kw &&
      k.is_contiguous() && v.is_contiguous()) {
    a.q_partials = p.input(0);
    a.k_partials = p.input(1);
    a.v_partials = p.input(2);
    pending_ = GemmPartials{};
    return;
  }
  settle();
}

void CudaKernels::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  expect_on_device(x, "matmul", "x");
  expect_on_device(w, "matmul", "w");
  expect_on_device(y, "matmul", "y");
  expect_dtype(x, DType::bf16, "matmul", "x");
  expect_dtype(w, DType::bf16, "matmul", "w (CUDA supports bf16 weights)");
  expect_dtype(y, DType::bf16, "matmul", "y");
  expect_rank(w, 2, "matmul", "w");
  const int64_t n = w.size(0), k = w.size(1);
  RILL_ENSURE(x.ndim() >= 1 && x.size(-1) == k, "[matmul] x {} does not match w {} (K = {})", x.describe(),
              w.describe(), k);
  const int64_t m = k ? x.numel() / k : 0;
  RILL_ENSURE(y.ndim() >= 1 && y.size(-1) == n && y.numel() == m * n, "[matmul] y {} must be [{}, {}]", y.describe(),
              m, n);
  if (bias) {
    expect_on_device(*bias, "matmul", "bias");
    expect_dtype(*bias, DType::bf16, "matmul", "bias");
    RILL_ENSURE(bias->numel() == n, "[matmul] bias {} must have {} elements", bias->describe(), n);
  }
  // x the output of a pending SwiGLU: the GEMM takes it over (GemmArgs::glu_x); anything else
  // pending runs first.
  GluInput glu;
  const bool glu_x = glu_pending_ && x.data() == pending_glu_.act && x.numel() == pending_glu_.inter &&
                     x.is_contiguous();
  if (glu_x) glu = pending_glu_, glu_pending_ = false;
  settle();
  matmul_->run(x.data(), w.data(), bias ? bias->data() : nullptr, y.data(), m, n, k, deferral(),
               glu_x ? &glu : nullptr);
}

void CudaKernels::matmul_outputs(const Tensor& x, const Tensor& w, const Tensor* bias, std::span<Tensor* const> ys) {
  settle();
  void* outs[GemmArgs::kMaxOuts] = {};
  int64_t ends[GemmArgs::kMaxOuts] = {};
  bool fused = ys.size() <= size_t(GemmArgs::kMaxOuts) && w.ndim() == 2 && x.is_contiguous() && w.is_contiguous() &&
               x.dtype() == DType::bf16 && w.dtype() == DType::bf16 && x.device() == Device::cuda &&
               w.device() == Device::cuda && (!bias || bias->device() == Device::cuda);
  const int64_t n = w.ndim() == 2 ? w.size(0) : 0, k = w.ndim() == 2 ? w.size(1) : 0;
  const int64_t m = fused && k && x.size(-1) == k ? x.numel() / k : -1;
  int64_t end = 0;
  for (size_t s = 0; fused && s < ys.size(); ++s) {
    const Tensor* y = ys[s];
    fused = y && y->device() == Device::cuda && y->dtype() == DType::bf16 && y->is_contiguous() && m >= 0 &&
            y->numel() == m * y->size(-1);
    if (!fused) break;
    end += y->size(-1);
    outs[s] = y->data();
    ends[s] = end;
  }
  fused = fused && end == n && (!bias || (bias->dtype() == DType::bf16 && bias->numel() == n));
  if (fused && matmul_->run_outputs(x.data(), w.data(), bias ? bias->data() : nullptr, outs, ends, int(ys.size()), m,
                                    n, k, deferral()))
    return;
  Kernels::matmul_outputs(x, w, bias, ys);  // one checked matmul a range
}

void CudaKernels::matmul_swiglu(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& gate_up, Tensor& y) {
  settle();
  const bool on_device = x.device() == Device::cuda && w.device() == Device::cuda && y.device() == Device::cuda &&
                         (!bias || bias->device() == Device::cuda);
  const bool bf16s = x.dtype() == DType::bf16 && w.dtype() == DType::bf16 && y.dtype() == DType::bf16 &&
                     (!bias || bias->dtype() == DType::bf16);
  const int64_t k = w.ndim() == 2 ? w.size(1) : 0, inter = w.ndim() == 2 ? w.size(0) / 2 : 0;
  const int64_t m = k && x.size(-1) == k ? x.numel() / k : -1;
  const bool shapes = m >= 0 && w.size(0) == 2 * inter && y.size(-1) == inter && y.numel() == m * inter &&
                      (!bias || bias->numel() == 2 * inter);
  if (fuse_swiglu_ && on_device && bf16s && shapes && x.is_contiguous() && w.is_contiguous() && y.is_contiguous() &&
      matmul_->run_swiglu(x.data(), w.data(), bias ? bias->data() : nullptr, y.data(),
                          fuse_decode_swiglu_ && gate_up.device() == Device::cuda && gate_up.is_contiguous() &&
                                  gate_up.dtype() == DType::bf16 && gate_up.numel() == 2 * m * inter
                              ? gate_up.data()
                              : nullptr,
                          m, inter, k))
    return;
  Kernels::matmul_swiglu(x, w, bias, gate_up, y);  // the two checked ops
}

void CudaKernels::o_proj_mlp(const Tensor& attn, const Tensor& o, const Tensor* o_bias, const Tensor& post_norm,
                             const NormParams& p, const Tensor& gate_up_w, const Tensor* gate_up_bias,
                             const Tensor& down, const Tensor* down_bias, Tensor& residual, Tensor& delta, Tensor& h,
                             Tensor& gate_up, Tensor& mlp_in) {
  settle();
  // One row in the batch-invariant mode with our GEMM: the fused block (decode_mlp.cu), same bits.
  auto dev_bf16 = [](const Tensor& t) {
    return t.device() == Device::cuda && t.dtype() == DType::bf16 && t.is_contiguous();
  };
  const bool shapes = o.ndim() == 2 && gate_up_w.ndim() == 2 && down.ndim() == 2 && attn.numel() == o.size(1) &&
                      gate_up_w.size(1) == o.size(0) && gate_up_w.size(0) == 2 * down.size(1) &&
                      down.size(0) == o.size(0) && post_norm.numel() == o.size(0) && residual.numel() == o.size(0) &&
                      delta.numel() == o.size(0) && mlp_in.numel() == down.size(1) && residual.data() != delta.data();
  if (fuse_decode_mlp_ && batch_invariant_ && matmul_->invariant_impl() == MatmulEngine::InvariantImpl::ours &&
      !o_bias && !gate_up_bias && !down_bias && shapes && dev_bf16(attn) && dev_bf16(o) && dev_bf16(gate_up_w) &&
      dev_bf16(down) && dev_bf16(post_norm) && dev_bf16(residual) && dev_bf16(delta) && dev_bf16(mlp_in)) {
    DecodeMlpArgs a;
    a.attn = attn.data();
    a.o = o.data();
    a.gate_up = gate_up_w.data();
    a.down = down.data();
    a.norm_w = post_norm.data();
    a.residual = residual.data();
    a.delta = delta.data();
    a.act = mlp_in.data();
    a.hidden = o.size(0);
    a.k_attn = o.size(1);
    a.inter = down.size(1);
    a.eps = p.eps;
    a.one_plus_weight = p.one_plus_weight;
    a.scale_in_fp32 = p.scale_in_fp32;
    a.workspace = static_cast<float*>(splitk_workspace_.data());
    a.workspace_bytes = kSplitKBytes;
    a.counters = static_cast<unsigned*>(gemm_counters_.data());
    a.num_counters = kGemmCounters;
    a.num_sms = info_.num_sms;
    if (try_launch_decode_mlp(a, stream_.get())) return;
  }
  Kernels::o_proj_mlp(attn, o, o_bias, post_norm, p, gate_up_w, gate_up_bias, down, down_bias, residual, delta, h,
                      gate_up, mlp_in);
}

void CudaKernels::rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) {
  settle();
  expect_on_device(x, "rms_norm", "x");
  expect_on_device(w, "rms_norm", "w");
  expect_on_device(y, "rms_norm", "y");
  expect_dtype(x, DType::bf16, "rms_norm", "x");
  expect_dtype(y, DType::bf16, "rms_norm", "y");
  const int64_t d = w.numel();
  RILL_ENSURE(w.ndim() == 1 && (w.dtype() == DType::bf16 || w.dtype() == DType::f32),
              "[rms_norm] w {} must be a bf16 or f32 vector", w.describe());
  RILL_ENSURE(x.size(-1) == d && same_shape(x, y), "[rms_norm] x {} / y {} must end in {} (w)", x.describe(),
              y.describe(), d);
  RmsNormArgs a;
  a.x = x.data();
  a.w = w.data();
  a.w_dtype = w.dtype();
  a.y = y.data();
  a.rows = d ? x.numel() / d : 0;
  a.dim = d;
  a.eps = p.eps;
  a.one_plus_weight = p.one_plus_weight;
  a.scale_in_fp32 = p.scale_in_fp32;
  launch_rms_norm(a, stream_.get());
}

void CudaKernels::add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) {
  expect_on_device(residual, "add_rms_norm", "residual");
  expect_on_device(x, "add_rms_norm", "x");
  expect_on_device(w, "add_rms_norm", "w");
  expect_on_device(y, "add_rms_norm", "y");
  expect_dtype(residual, DType::bf16, "add_rms_norm", "residual");
  expect_dtype(x, DType::bf16, "add_rms_norm", "x");
  expect_dtype(y, DType::bf16, "add_rms_norm", "y");
  const int64_t d = w.numel();
  RILL_ENSURE(w.ndim() == 1 && (w.dtype() == DType::bf16 || w.dtype() == DType::f32),
              "[add_rms_norm] w {} must be a bf16 or f32 vector", w.describe());
  RILL_ENSURE(residual.size(-1) == d && same_shape(residual, x) && same_shape(residual, y),
              "[add_rms_norm] residual {}, x {}, y {} must have one shape ending in {}", residual.describe(),
              x.describe(), y.describe(), d);
  RILL_ENSURE(residual.data() != x.data(), "[add_rms_norm] residual and x must not alias");
  RmsNormArgs a;
  a.x_partials = take_pending(x);
  a.x = x.data();
  a.residual = residual.data();
  a.w = w.data();
  a.w_dtype = w.dtype();
  a.y = y.data();
  a.rows = d ? x.numel() / d : 0;
  a.dim = d;
  a.eps = p.eps;
  a.one_plus_weight = p.one_plus_weight;
  a.scale_in_fp32 = p.scale_in_fp32;
  launch_rms_norm(a, stream_.get());
}

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
  rope_store_kv_launch(a, k, v, batch, cache);
}

void CudaKernels::rope_store_kv_launch(RopeArgs& a, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                                       KvLayer& cache) {
  expect_on_device(v, "rope_store_kv", "v");
  expect_dtype(v, DType::bf16, "rope_store_kv", "v");
  expect_on_device(batch.slot_mapping, "rope_store_kv", "slot_mapping");
  expect_dtype(batch.slot_mapping, DType::i32, "rope_store_kv", "slot_mapping");
  RILL_ENSURE(same_shape(k, v) && batch.slot_mapping.numel() == k.size(0),
              "[rope_store_kv] k {}, v {}, slot_mapping {} disagree", k.describe(), v.describe(),
              batch.slot_mapping.describe());
  check_cache("rope_store_kv", cache, k.size(1), k.size(2));
  take_pending_qkv(a, k, v);
  a.v = v.data();
  a.slot_mapping = batch.slot_mapping.data_as<int32_t>();
  a.k_cache = cache.k.data();
  a.v_cache = cache.v.data();
  a.num_slots = cache.k.size(0) * cache.k.size(1);
  if (a.q_partials.ws && a.k_partials.ws && a.v_partials.ws && attention_rope_enabled()) {
    pending_rope_ = a;  // for the attention reading q (a step graph's decode attention runs it inside)
    rope_pending_ = true;
    return;
  }
  launch_rope(a, stream_.get());
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
}

void CudaKernels::swiglu(const Tensor& x, Tensor& y) {
  expect_on_device(x, "swiglu", "x");
  expect_on_device(y, "swiglu", "y");
  expect_dtype(x, DType::bf16, "swiglu", "x");
  expect_dtype(y, DType::bf16, "swiglu", "y");
  const int64_t inter = y.size(-1);
  RILL_ENSURE(x.size(-1) == 2 * inter && x.numel() == 2 * y.numel(), "[swiglu] x {} must be [M, 2 * {}] for y {}",
              x.describe(), inter, y.describe());
  const PartialsIn xp = take_pending(x);
  const int64_t m = inter ? y.numel() / inter : 0;
  if (xp.ws && m == 1 && decode_glu_x_enabled() && xp.splits <= 4 && y.is_contiguous()) {
    pending_glu_ = GluInput{xp, inter, x.data(), y.data()};  // for the GEMM reading y (matmul)
    glu_pending_ = true;
    return;
  }
  launch_swiglu(x.data(), y.data(), m, inter, stream_.get(), xp);
}

void CudaKernels::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  settle();
  expect_on_device(ids, "embedding", "ids");
  expect_on_device(table, "embedding", "table");
  expect_on_device(out, "embedding", "out");
  expect_dtype(ids, DType::i32, "embedding", "ids");
  expect_dtype(out, DType::bf16, "embedding", "out");
  expect_rank(table, 2, "embedding", "table");
  RILL_ENSURE(table.dtype() == DType::bf16 || table.dtype() == DType::f32, "[embedding] table {} must be bf16 or f32",
              table.describe());
  const int64_t h = table.size(1);
  RILL_ENSURE(out.numel() == ids.numel() * h && out.size(-1) == h, "[embedding] out {} must be [{}, {}]",
              out.describe(), ids.numel(), h);
  launch_embedding(ids.data_as<int32_t>(), table.data(), table.dtype(), out.data(), ids.numel(), h, table.size(0),
                   stream_.get());
}

void CudaKernels::add(const Tensor& a, const Tensor& b, Tensor& out) {
  settle();
  expect_on_device(a, "add", "a");
  expect_on_device(b, "add", "b");
  expect_on_device(out, "add", "out");
  RILL_ENSURE(same_shape(a, b) && same_shape(a, out), "[add] a {}, b {}, out {} must have one shape", a.describe(),
              b.describe(), out.describe());
  RILL_ENSURE(a.dtype() == b.dtype() && a.dtype() == out.dtype() && (a.dtype() == DType::bf16 || a.dtype() == DType::f32),
              "[add] a {}, b {}, out {} must share dtype bf16 or f32", a.describe(), b.describe(), out.describe());
  launch_add(a.data(), b.data(), out.data(), a.numel(), a.dtype(), stream_.get());
}

void CudaKernels::gather_rows(const Tensor& x, const Tensor& index, Tensor& out) {
  settle();
  expect_on_device(x, "gather_rows", "x");
  expect_on_device(index, "gather_rows", "index");
  expect_on_device(out, "gather_rows", "out");
  expect_dtype(index, DType::i32, "gather_rows", "index");
  RILL_ENSURE(x.ndim() >= 1 && out.ndim() == x.ndim() && out.dtype() == x.dtype() && out.size(0) == index.numel(),
              "[gather_rows] out {} must be [{}, ...] like x {}", out.describe(), index.numel(), x.describe());
  for (int d = 1; d < x.ndim(); ++d)
    RILL_ENSURE(out.size(d) == x.size(d), "[gather_rows] out {} and x {} differ past dim 0", out.describe(),
                x.describe());
  const int64_t src_rows = x.size(0);
  const int64_t row_bytes = src_rows ? int64_t(x.nbytes()) / src_rows : 0;
  launch_gather_rows(x.data(), index.data_as<int32_t>(), out.data(), index.numel(), row_bytes, src_rows,
                     stream_.get());
}

void CudaKernels::argmax(const Tensor& x, Tensor& out) {
  settle();
  expect_on_device(x, "argmax", "x");
  expect_on_device(out, "argmax", "out");
  expect_dtype(out, DType::i32, "argmax", "out");
  expect_rank(x, 2, "argmax", "x");
  RILL_ENSURE(out.numel() == x.size(0) && x.size(1) > 0, "[argmax] out {} must have one entry per row of x {}",
              out.describe(), x.describe());
  launch_argmax(x.data(), x.dtype(), out.data_as<int32_t>(), x.size(0), x.size(1), stream_.get());
}

void CudaKernels::softmax(const Tensor& x, Tensor& out) {
  settle();
  expect_on_device(x, "softmax", "x");
  expect_on_device(out, "softmax", "out");
  expect_dtype(out, DType::f32, "softmax", "out");
  RILL_ENSURE(same_shape(x, out) && x.ndim() >= 1, "[softmax] out {} must match x {}", out.describe(), x.describe());
  const int64_t cols = x.size(-1);
  launch_softmax(x.data(), x.dtype(), out.data_as<float>(), cols ? x.numel() / cols : 0, cols, stream_.get());
}

void CudaKernels::convert(const Tensor& x, Tensor& out) {
  settle();
  expect_on_device(x, "convert", "x");
  expect_on_device(out, "convert", "out");
  RILL_ENSURE(same_shape(x, out), "[convert] out {} must match x {}", out.describe(), x.describe());
  launch_convert(x.data(), x.dtype(), out.data(), out.dtype(), x.numel(), stream_.get());
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

size_t CudaKernels::free_memory() {
  size_t free_bytes = 0, total = 0;
  RILL_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes + allocator_.bytes_cached();
}


}  // namespace cuda

std::unique_ptr<Kernels> make_cuda_kernels(int device_ordinal) {
  return std::make_unique<cuda::CudaKernels>(device_ordinal);
}

}  // namespace rill
