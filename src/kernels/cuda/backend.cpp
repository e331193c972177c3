// kernels/cuda/backend.cpp — CudaKernels: argument checking ("[op] ..." rill::Errors, before
// anything is enqueued) and dispatch to the launchers in ops.h / MatmulEngine. Activations are
// bf16; tensors must be contiguous and on this backend's device. The RoPE, K/V-cache and attention
// ops are in backend_attention.cpp, the Gated DeltaNet ops in gdn_backend.cpp, the RILL_* settings
// in environment.cpp.
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/arg_checks.h"
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
  // Weights stored as k-panels go with their memory: freed or overwritten (upload, copy), they are forgotten.
  allocator_.set_free_listener([this](void* p, size_t bytes) { matmul_->forget_weights(p, bytes); });
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
  allocator_.set_free_listener(nullptr);
  if (stream_) cudaStreamSynchronize(stream_.get());
}

void CudaKernels::prepare_linear_weight(const Tensor& w) {
  settle();
  if (!panel_weights_ || w.device() != Device::cuda || w.dtype() != DType::bf16 || w.ndim() != 2 ||
      !w.is_contiguous())
    return;
  if (!matmul_->store_as_panels(const_cast<void*>(w.data()), w.size(0), w.size(1))) return;
  if (!panels_logged_)
    logger().info("linear weights stored as k-panels for the warpgroup GEMM (RILL_WEIGHT_LAYOUT=rows keeps them "
                  "row-major)");
  panels_logged_ = true;
}

void CudaKernels::upload(const void* host, Tensor dst) {
  settle();
  expect_on_device(dst, "upload", "dst");
  if (dst.nbytes() == 0) return;
  RILL_ENSURE(!stream_.capturing(), "[upload] not allowed while a step graph is being captured");
  matmul_->forget_weights(dst.data(), dst.nbytes());
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
  matmul_->forget_weights(dst.data(), dst.nbytes());
  RILL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_.get()));
}

void CudaKernels::synchronize() {
  settle();
  stream_.synchronize();
}

bool CudaKernels::left_out(char op) const {
  return !leave_out_.empty() && leave_out_.find(op) != std::string::npos && stream_.capturing();
}

cudaStream_t CudaKernels::settled_stream() {
  settle();
  RILL_ENSURE(!stream_.capturing(), "[readback] not allowed while a step graph is being captured");
  return stream_.get();
}

namespace {
// Pinned host bytes and a side stream: start() makes the side stream wait for the ops queued so
// far (an event) and copies there, so the main stream goes straight on to the next step's upload
// and launch instead of queueing them behind the copy.
class CudaReadback final : public Readback {
 public:
  CudaReadback(CudaKernels& kernels, size_t bytes)
      : kernels_(kernels), bytes_(std::max<size_t>(bytes, 1)), side_(Stream::create()),
        queued_(Event::create(false)), arrived_(Event::create(false)) {
    RILL_CUDA_CHECK(cudaHostAlloc(&host_, bytes_, cudaHostAllocDefault));
  }
  ~CudaReadback() override {
    if (started_) cudaEventSynchronize(arrived_.get());
    cudaFreeHost(host_);
  }
  void start(const Tensor& src) override {
    RILL_ENSURE(src.device() == Device::cuda && src.is_contiguous(), "[readback] {} must be a contiguous CUDA tensor",
                src.describe());
    RILL_ENSURE(src.nbytes() <= bytes_, "[readback] {} is {} bytes, more than the {} it was made for",
                src.describe(), src.nbytes(), bytes_);
    // The previous copy may still be in flight into the same bytes: the side stream runs in order.
    queued_.record(kernels_.settled_stream());
    RILL_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), queued_.get(), 0));
    if (src.nbytes() > 0)
      RILL_CUDA_CHECK(cudaMemcpyAsync(host_, src.data(), src.nbytes(), cudaMemcpyDeviceToHost, side_.get()));
    arrived_.record(side_.get());
    started_ = true;
  }
  const void* wait() override {
    RILL_ENSURE(started_, "[readback] wait() without start()");
    arrived_.synchronize();
    return host_;
  }
  size_t capacity() const override { return bytes_; }

 private:
  CudaKernels& kernels_;
  size_t bytes_;
  void* host_ = nullptr;
  Stream side_;
  Event queued_, arrived_;
  bool started_ = false;
};
}  // namespace

std::unique_ptr<Readback> CudaKernels::make_readback(size_t bytes) {
  return std::make_unique<CudaReadback>(*this, bytes);
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

// The decode GEMM after an attention op is the o projection: it launches as the attention's last
// kernel passes its wait, and its pre-wait weight requests land while that kernel runs, where the
// weight stream is otherwise idle. After a span combine kernel (the split schedule: long contexts)
// it requests every stage of a few-item CTA, 9 (batch-1 decode +1.1-1.4% at 8,192 keys, bench/RESULTS.md
// run AB); after the cluster kernel (short contexts, where the burst slows that kernel's own round
// trips: -0.35% at 512 keys) the decode GEMM's usual depth. RILL_DECODE_PREWAIT_AFTER_ATTENTION sets
// one depth for both.
void CudaKernels::next_gemm_prewait() {
  constexpr int kAfterCombine = 9;
  const int set = decode_prewait_after_attention();
  int stages = -1;
  if (std::exchange(after_attention_, false)) stages = set >= 0 ? set : after_combine_ ? kAfterCombine : -1;
  matmul_->set_next_prewait(stages);
}

void CudaKernels::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  settle();
  next_gemm_prewait();
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
  matmul_->run(x.data(), w.data(), bias ? bias->data() : nullptr, y.data(), m, n, k, deferral());
}

void CudaKernels::matmul_outputs(const Tensor& x, const Tensor& w, const Tensor* bias, std::span<Tensor* const> ys) {
  matmul_outputs_rope(x, w, bias, ys, nullptr, nullptr);
}

void CudaKernels::matmul_outputs_rope(const Tensor& x, const Tensor& w, const Tensor* bias,
                                      std::span<Tensor* const> ys, const RopeArgs* rope, bool* rope_ran) {
  if (rope_ran) *rope_ran = false;
  settle();
  next_gemm_prewait();
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
                                    n, k, deferral(), rope, rope_ran))
    return;
  Kernels::matmul_outputs(x, w, bias, ys);  // one checked matmul a range
}

void CudaKernels::matmul_swiglu(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& gate_up, Tensor& y) {
  settle();
  next_gemm_prewait();
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
                          gate_up.device() == Device::cuda && gate_up.is_contiguous() &&
                                  gate_up.dtype() == DType::bf16 && gate_up.numel() == 2 * m * inter
                              ? gate_up.data()
                              : nullptr,
                          m, inter, k, decode_swiglu_))
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
  // (The fused block reads row-major weights only; the sizes are read once `shapes` holds.)
  const bool row_major = shapes && !matmul_->is_panels(o.data(), o.size(0), o.size(1)) &&
                         !matmul_->is_panels(gate_up_w.data(), gate_up_w.size(0), gate_up_w.size(1)) &&
                         !matmul_->is_panels(down.data(), down.size(0), down.size(1));
  if (fuse_decode_mlp_ && row_major && batch_invariant_ &&
      matmul_->invariant_impl() == MatmulEngine::InvariantImpl::ours &&
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
  if (left_out('n')) return;  // a measurement build (RILL_LEAVE_OUT): the deferred product dropped too
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

void CudaKernels::swiglu(const Tensor& x, Tensor& y) {
  expect_on_device(x, "swiglu", "x");
  expect_on_device(y, "swiglu", "y");
  expect_dtype(x, DType::bf16, "swiglu", "x");
  expect_dtype(y, DType::bf16, "swiglu", "y");
  const int64_t inter = y.size(-1);
  RILL_ENSURE(x.size(-1) == 2 * inter && x.numel() == 2 * y.numel(), "[swiglu] x {} must be [M, 2 * {}] for y {}",
              x.describe(), inter, y.describe());
  const PartialsIn xp = take_pending(x);
  launch_swiglu(x.data(), y.data(), inter ? y.numel() / inter : 0, inter, stream_.get(), xp);
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
