// kernels/cuda/matmul.cpp — per-shape plans for MatmulEngine: cuBLASLt descriptors and heuristic
// algorithms, the matvec alternative for M ≤ 8, and the timed choice between them.
// Row-major y[M,N] = x[M,K]·w[N,K]ᵀ is column-major yᵀ[N,M] = op(w)·xᵀ with op = transpose:
// A = w (K×N, ld K, transposed), B = x (K×M, ld K), C = D = yᵀ (N×M, ld N); the bias is
// per row of D, i.e. per output feature.
#include "kernels/cuda/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

namespace rill::cuda {

struct MatmulEngine::Plan {
  MatmulShape shape;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  bool chosen = false;
  MatmulChoice choice;

  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

std::string MatmulChoice::describe() const {
  if (path == Path::invariant) return "invariant";
  if (path == Path::matvec) return fmt::format("matvec(split={})", splits);
  return fmt::format("cublaslt(algo#{})", algo_index);
}

namespace {
int pointer_alignment(const void* p) {
  auto u = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && u % uintptr_t(align) != 0) align /= 2;
  return align;
}
}  // namespace

MatmulEngine::MatmulEngine(cublasLtHandle_t lt, cudaStream_t stream, void* lt_workspace, size_t lt_workspace_bytes,
                           float* splitk_workspace, size_t splitk_bytes, int num_sms)
    : lt_(lt),
      stream_(stream),
      lt_workspace_(lt_workspace),
      lt_workspace_bytes_(lt_workspace_bytes),
      splitk_workspace_(splitk_workspace),
      splitk_bytes_(splitk_bytes),
      num_sms_(num_sms) {}

MatmulEngine::~MatmulEngine() = default;

bool MatmulEngine::store_as_panels(void* w, int64_t n, int64_t k) {
  if (!gemm_wgmma_enabled() || !panels_fit(n, k) || pointer_alignment(w) < 16) return false;
  if (is_panels(w, n, k)) return true;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  RILL_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  if (status != cudaStreamCaptureStatusNone) throw_error("[matmul] store_as_panels while a graph is being recorded");
  const size_t bytes = size_t(n * k) * 2;
  void* scratch = nullptr;
  if (cudaMallocAsync(&scratch, bytes, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    if (!panels_warned_)
      logger().warn("k-panel weights: no room for a {} MB scratch copy of a [{}, {}] weight; it stays row-major "
                    "(decode reads it ~3% slower)",
                    bytes >> 20, n, k);
    panels_warned_ = true;
    return false;
  }
  launch_to_panels(w, scratch, n, k, stream_);
  RILL_CUDA_CHECK(cudaMemcpyAsync(w, scratch, bytes, cudaMemcpyDeviceToDevice, stream_));
  RILL_CUDA_CHECK(cudaFreeAsync(scratch, stream_));
  panels_[w] = {n, k};
  panel_bytes_ += bytes;
  return true;
}

bool MatmulEngine::is_panels(const void* w, int64_t n, int64_t k) const {
  if (panels_.empty()) return false;
  auto it = panels_.upper_bound(w);
  if (it == panels_.begin()) return false;
  --it;
  const auto [pn, pk] = it->second;
  const char* start = static_cast<const char*>(it->first);
  if (static_cast<const char*>(w) >= start + size_t(pn * pk) * 2) return false;
  if (it->first != w || pn != n || pk != k)
    fail("[matmul] w at {} [{}, {}] lies in a weight stored as k-panels ({} [{}, {}]): such a weight is read whole, "
         "by the warpgroup GEMM",
         w, n, k, it->first, pn, pk);
  return true;
}

void MatmulEngine::forget_weights(const void* p, size_t bytes) {
  if (panels_.empty()) return;
  const char* end = static_cast<const char*>(p) + bytes;
  for (auto it = panels_.lower_bound(p); it != panels_.end() && static_cast<const char*>(it->first) < end;) {
    panel_bytes_ -= size_t(it->second.first * it->second.second) * 2;
    it = panels_.erase(it);
  }
}

bool MatmulEngine::matvec_ok(const MatmulShape& s) const { return s.m <= 8 && s.k % 8 == 0 && s.align >= 16; }

MatmulEngine::Plan& MatmulEngine::plan_for(const MatmulShape& shape) {
  auto it = plans_.find(shape);
  if (it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  plan->shape = shape;
  RILL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  RILL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  RILL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (shape.bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_type = CUDA_R_16BF;
    RILL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    RILL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                     sizeof(bias_type)));
  }
  RILL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, uint64_t(shape.k), uint64_t(shape.n), shape.k));
  RILL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, uint64_t(shape.k), uint64_t(shape.m), shape.k));
  RILL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_16BF, uint64_t(shape.n), uint64_t(shape.m), shape.n));

  cublasLtMatmulPreference_t pref = nullptr;
  RILL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = lt_workspace_bytes_;
  uint32_t align = uint32_t(shape.align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align));
  constexpr int kMaxAlgos = 6;
  cublasLtMatmulHeuristicResult_t results[kMaxAlgos] = {};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref,
                                                     kMaxAlgos, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) RILL_CUBLAS_CHECK(st);
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->algos.push_back(results[i]);
  if (plan->algos.empty() && !matvec_ok(shape))
    fail("[matmul] cuBLASLt has no algorithm for M={} N={} K={} (bias {}, alignment {})", shape.m, shape.n, shape.k,
         shape.bias, shape.align);
  Plan& ref = *plan;
  plans_.emplace(shape, std::move(plan));
  return ref;
}

void MatmulEngine::run_plan(Plan& plan, const MatmulChoice& c, const void* x, const void* w, const void* bias,
                            void* y) {
  const MatmulShape& s = plan.shape;
  if (c.path == MatmulChoice::Path::matvec) {
    MatvecArgs a;
    a.x = x;
    a.w = w;
    a.bias = bias;
    a.y = y;
    a.m = int(s.m);
    a.n = s.n;
    a.k = s.k;
    a.splits = c.splits;
    a.workspace = splitk_workspace_;
    launch_matvec(a, stream_);
    return;
  }
  RILL_CHECK(c.algo_index < int(plan.algos.size()), "matmul algorithm index {} of {}", c.algo_index,
             plan.algos.size());
  if (s.bias)
    RILL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.f, beta = 0.f;
  RILL_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c,
                                   &plan.algos[size_t(c.algo_index)].algo, lt_workspace_, lt_workspace_bytes_,
                                   stream_));
}

std::vector<MatmulChoice> MatmulEngine::candidates(const void* x, const void* w, const void* bias, void* y, int64_t m,
                                                   int64_t n, int64_t k) {
  MatmulShape shape{m, n, k, bias != nullptr,
                    std::min({pointer_alignment(x), pointer_alignment(w), pointer_alignment(y)})};
  Plan& plan = plan_for(shape);
  std::vector<MatmulChoice> out;
  if (matvec_ok(shape)) {
    int max_splits = int(std::min<int64_t>(16, int64_t(splitk_bytes_ / sizeof(float)) / std::max<int64_t>(1, m * n)));
    int def = std::min(matvec_default_splits(n, k, num_sms_), std::max(1, max_splits));
    out.push_back({MatmulChoice::Path::matvec, 1, 0});
    if (def > 1) out.push_back({MatmulChoice::Path::matvec, def, 0});
    if (def * 2 <= max_splits && def > 1) out.push_back({MatmulChoice::Path::matvec, def * 2, 0});
  }
  for (int i = 0; i < int(plan.algos.size()); ++i) out.push_back({MatmulChoice::Path::cublaslt, 1, i});
  return out;
}

MatmulChoice MatmulEngine::choose(Plan& plan, const void* x, const void* w, const void* bias, void* y) {
  const MatmulShape& s = plan.shape;
  std::vector<MatmulChoice> cands = candidates(x, w, bias, y, s.m, s.n, s.k);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  RILL_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  if (!autotune_ || status != cudaStreamCaptureStatusNone || cands.size() == 1) {
    // Untimed rule (H200 measurements): the unsplit matvec for M ≤ 2 (1.0-1.1x cuBLASLt at M = 1),
    // cuBLASLt's first pick otherwise (the matvec is 0.65-0.9x at M = 4..8).
    if (matvec_ok(s) && s.m <= 2) return cands[0];
    for (const MatmulChoice& c : cands)
      if (c.path == MatmulChoice::Path::cublaslt) return c;
    return cands[0];
  }
  // Each timed run starts with L2 overwritten (when a flush buffer is set): a decode step
  // streams every weight from HBM, and small weights timed back to back would sit in L2 and
  // favour the compute-heavier cuBLASLt kernels.
  Event start = Event::create(), stop = Event::create();
  float best_ms = 1e30f;
  MatmulChoice best = cands[0];
  for (const MatmulChoice& c : cands) {
    run_plan(plan, c, x, w, bias, y);  // warm-up
    constexpr int kReps = 5;
    float total = 0.f;
    for (int r = 0; r < kReps; ++r) {
      if (flush_) RILL_CUDA_CHECK(cudaMemsetAsync(flush_, r, flush_bytes_, stream_));
      start.record(stream_);
      run_plan(plan, c, x, w, bias, y);
      stop.record(stream_);
      stop.synchronize();
      total += Event::elapsed_ms(start, stop);
    }
    float ms = total / kReps;
    if (ms < best_ms) best_ms = ms, best = c;
  }
  logger().debug("matmul M={} N={} K={} bias={}: {} ({:.1f} us)", s.m, s.n, s.k, s.bias, best.describe(),
                 best_ms * 1e3);
  return best;
}

void MatmulEngine::attach_workspaces(GemmArgs& a) const {
  a.workspace = splitk_workspace_;
  a.workspace_bytes = splitk_bytes_;
  a.num_sms = num_sms_;
  a.counters = counters_;
  a.num_counters = num_counters_;
}

GemmArgs MatmulEngine::gemm_args(const void* x, const void* w, const void* bias, int64_t m, int64_t n,
                                 int64_t k) const {
  GemmArgs a;
  a.x = x;
  a.w = w;
  a.bias = bias;
  a.m = m;
  a.n = n;
  a.k = k;
  a.w_panels = is_panels(w, n, k);
  attach_workspaces(a);
  return a;
}

std::vector<int> MatmulEngine::decode_configs() const {
  std::vector<int> c{1, 5, 6, 7, 8};
  if (bulk_copies_) c.insert(c.end(), {9, 10});
  if (gemm_wgmma_enabled()) c.insert(c.end(), {18, 19});
  return c;
}

std::vector<int> MatmulEngine::decode_candidates(int64_t m) const {
  const bool wgmma = gemm_wgmma_enabled();
  if (m <= 8) return wgmma ? std::vector<int>{18, 7, 8} : std::vector<int>{7, 8};
  if (m <= 16) return wgmma ? std::vector<int>{19, 1, 5, 6} : std::vector<int>{1, 5, 6};
  // M 17..64 (decode_rows with the warpgroup GEMM): 19 only. Timed alone, the split-ranges
  // configuration 15 (its partials folded by a reduction kernel) beat 19 by 6-35% on every 8B
  // projection at M = 64, but in the decode graph 19 defers its fold to the next op and 15 cannot:
  // batch-64 decode 9,131 tok/s with 19 against 7,813 with the timed choice (bench/RESULTS.md run R).
  return {19};
}

int64_t MatmulEngine::decode_rows() const { return gemm_wgmma_enabled() ? 64 : 16; }

std::vector<std::pair<int, double>> MatmulEngine::time_decode_configs(GemmArgs a, std::vector<int> configs) {
  if (configs.empty()) configs = decode_configs();
  a.defer = nullptr;  // the timed runs write the product
  a.rope = nullptr;   // ... and nothing else
  a.rope_ran = nullptr;
  // Each timed run starts with L2 overwritten, as in choose(): decode streams weights from HBM.
  attach_workspaces(a);
  Event start = Event::create(), stop = Event::create();
  std::vector<std::pair<int, double>> times;
  for (int config : configs) {
    a.config = config;
    launch_gemm(a, stream_);  // warm-up
    constexpr int kReps = 7;
    std::vector<float> ms;
    for (int r = 0; r < kReps; ++r) {
      if (flush_) RILL_CUDA_CHECK(cudaMemsetAsync(flush_, r, flush_bytes_, stream_));
      start.record(stream_);
      launch_gemm(a, stream_);
      stop.record(stream_);
      stop.synchronize();
      ms.push_back(Event::elapsed_ms(start, stop));
    }
    std::nth_element(ms.begin(), ms.begin() + kReps / 2, ms.end());
    times.emplace_back(config, double(ms[kReps / 2]) * 1e3);  // the median
  }
  return times;
}

// The decode configurations (1, 5, 6: tiled; 7, 8: streaming; 9, 10: bulk copies; 18, 19: warpgroup
// MMA, sm_90a; the warpgroup split configuration 15) give the same bits, so the fastest may be
// chosen per (N, K) and row bucket (M ≤ 8, 9..16; M 17..64 takes 19, see decode_candidates): timed
// once on the first eager call of a shape (never while a graph is recorded; the model's first decode
// step is eager), rewriting y with identical values.
int MatmulEngine::decode_config(const GemmArgs& a) {
  const int bucket = a.m <= 8 ? 0 : a.m <= 16 ? 1 : 2;
  // A forced configuration applies where it runs: 18 takes M ≤ 8, 19 M ≤ 64, the rest M ≤ 16.
  const int fc = forced_decode_config_;
  // k-panels: the warpgroup decode kernel, the only one reading them (18 at M ≤ 8, else 19, unless
  // 19 is forced).
  if (a.w_panels) return a.m <= 8 && fc != 19 ? 18 : 19;
  if (fc > 0 && (fc == 18 ? bucket == 0 : fc == 19 ? true : bucket <= 1)) return fc;
  const auto key = std::make_tuple(a.n, a.k, bucket);
  if (auto it = decode_configs_.find(key); it != decode_configs_.end()) return it->second;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  RILL_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  const std::vector<int> candidates = decode_candidates(a.m);
  if (!autotune_ || status != cudaStreamCaptureStatusNone || candidates.size() == 1) return candidates.front();
  // The first candidate unless another is at least 5% faster: timings of a few µs are noisy, and
  // a kernel timed alone (cold L2, no neighbours) ranks differently from the decode graph, where
  // the next kernel's weight loads overlap the previous kernel's tail (bench/RESULTS.md).
  auto times = time_decode_configs(a, candidates);
  auto best = times.begin();
  for (auto it = times.begin(); it != times.end(); ++it)
    if (it->second < 0.95 * times.front().second && it->second < best->second) best = it;
  logger().debug("invariant GEMM N={} K={} M={}: decode configuration {} ({:.1f} us; {}: {:.1f} us)", a.n, a.k,
                 a.m, best->first, best->second, times[0].first, times[0].second);
  decode_configs_[key] = best->first;
  return best->first;
}

void MatmulEngine::launch_invariant(GemmArgs& a) {
  a.prewait_stages = std::exchange(next_prewait_, -1);
  if (a.m <= decode_rows() && a.k % 8 == 0) a.config = decode_config(a);
  launch_gemm(a, stream_);
}

void MatmulEngine::run_invariant(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n,
                                 int64_t k, GemmPartials* defer) {
  GemmArgs a = gemm_args(x, w, bias, m, n, k);
  a.y = y;
  a.defer = defer;
  launch_invariant(a);
}

bool MatmulEngine::run_outputs(const void* x, const void* w, const void* bias, void* const* outs,
                               const int64_t* out_end, int num_outs, int64_t m, int64_t n, int64_t k,
                               GemmPartials* defer, const RopeArgs* rope, bool* rope_ran) {
  if (defer) *defer = GemmPartials{};
  if (rope_ran) *rope_ran = false;
  const bool ours = (batch_invariant_ && invariant_impl_ == InvariantImpl::ours) || is_panels(w, n, k);
  if (!ours || num_outs > GemmArgs::kMaxOuts) return false;
  int64_t begin = 0;
  for (int s = 0; s < num_outs; ++s) {
    if ((out_end[s] - begin) % 8 != 0 || pointer_alignment(outs[s]) < 16) return false;
    begin = out_end[s];
  }
  if (m == 0 || n == 0) return true;
  GemmArgs a = gemm_args(x, w, bias, m, n, k);
  for (int s = 0; s < num_outs; ++s) {
    a.outs[s] = outs[s];
    a.out_end[s] = out_end[s];
  }
  a.num_outs = num_outs;
  a.defer = defer;
  a.rope = rope_ran ? rope : nullptr;
  a.rope_ran = rope_ran;
  launch_invariant(a);
  return true;
}

// Prefill-sized M: the persistent kernel's fused epilogue where it runs. Decode rows: the warpgroup
// decode kernel's SwiGLU by `decode_mode` (RILL_DECODE_SWIGLU) — 1: its split schedule at M ≤ 8
// where configuration 18 is the shape's decode configuration; 2, 3: its fold schedule where
// decode_glu_fold_fits (M ≤ 64; one column tile a CTA in one wave) and the shape's configuration
// is 18 or 19, 3 launching the next kernel at the grid's completion. In a batch-1 decode step the
// SwiGLU kernel is a latency-bound link of the critical path (~3.9 µs a layer, bench/RESULTS.md
// run S); the split schedule's fold by the tile's last CTA cost more than it (run L), the fold
// schedule does not (run V). `scratch` ([m, 2·inter]) receives the unfused product while a
// shape's decode configurations are timed (its first eager call).
bool MatmulEngine::run_swiglu(const void* x, const void* w, const void* bias, void* y, void* scratch, int64_t m,
                              int64_t inter, int64_t k, int decode_mode) {
  const bool ours = (batch_invariant_ && invariant_impl_ == InvariantImpl::ours) || is_panels(w, 2 * inter, k);
  if (!ours || pointer_alignment(x) < 16 || pointer_alignment(w) < 16 || pointer_alignment(y) < 4) return false;
  GemmArgs a = gemm_args(x, w, bias, m, 2 * inter, k);
  a.prewait_stages = std::exchange(next_prewait_, -1);
  if (m <= decode_rows()) {
    if (decode_mode <= 0 || !scratch) return false;
    if (decode_mode == 1 && (m > 8 || inter % 32 != 0 || k % 8 != 0 || !gemm_wgmma_enabled())) return false;
    if (decode_mode >= 2 && !decode_glu_fold_fits(m, inter, k, num_sms_)) return false;
    a.y = scratch;
    const int config = decode_config(a);
    if (config != 18 && (config != 19 || decode_mode == 1)) return false;
    a.config = m <= 8 ? 18 : 19;
    a.glu_schedule = decode_mode == 1 ? 0 : decode_mode - 1;
  } else if (!gemm_swiglu_fits(m, inter, k, num_sms_)) {
    return false;
  }
  a.y = y;
  a.glu_inter = inter;
  launch_gemm(a, stream_);
  return true;
}

// One cuBLASLt algorithm per (N, K, bias) for every M: the heuristic's best pick for a
// prefill-sized M among the algorithms without split-K (no workspace, so no split reduction
// either) that also apply to M = 1, needing only 16-byte alignment. Each output element is then
// one CTA's k loop in the algorithm's fixed order whatever M is. Chosen outside any capture
// (the first call of a shape is eager), and kept.
const std::optional<cublasLtMatmulAlgo_t>& MatmulEngine::fixed_algo(int64_t n, int64_t k, bool bias) {
  auto key = std::make_tuple(n, k, bias);
  auto it = fixed_algos_.find(key);
  if (it != fixed_algos_.end()) return it->second;
  std::optional<cublasLtMatmulAlgo_t> chosen;
  constexpr int64_t kRefM = 2048;
  MatmulShape ref{kRefM, n, k, bias, 16};
  Plan& plan = plan_for(ref);
  cublasLtMatmulPreference_t pref = nullptr;
  RILL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = 0;
  uint32_t align = 16;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  constexpr int kMax = 8;
  cublasLtMatmulHeuristicResult_t results[kMax] = {};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, kMax,
                                                     results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS) {
    MatmulShape one{1, n, k, bias, 16};
    Plan& p1 = plan_for(one);
    for (int i = 0; i < found && !chosen; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize != 0) continue;
      int32_t splits = 1;
      size_t written = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits),
                                           &written);
      if (splits > 1) continue;
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(lt_, p1.desc, p1.a, p1.b, p1.c, p1.c, &results[i].algo, &check) !=
              CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize != 0)
        continue;
      chosen = results[i].algo;
    }
  }
  logger().debug("matmul N={} K={} bias={}: invariant path {}", n, k, bias,
                 chosen ? "a fixed cuBLASLt algorithm" : "our GEMM (no fixed cuBLASLt algorithm qualifies)");
  return fixed_algos_.emplace(key, chosen).first->second;
}

void MatmulEngine::run(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n, int64_t k,
                       GemmPartials* defer) {
  if (defer) *defer = GemmPartials{};
  if (m == 0 || n == 0) return;
  if (is_panels(w, n, k)) {  // only our warpgroup GEMM reads k-panels, in any mode
    run_invariant(x, w, bias, y, m, n, k, defer);
    return;
  }
  if (batch_invariant_) {
    const bool aligned = std::min({pointer_alignment(x), pointer_alignment(w), pointer_alignment(y)}) >= 16;
    if (invariant_impl_ == InvariantImpl::cublaslt && aligned) {
      if (const auto& algo = fixed_algo(n, k, bias != nullptr)) {
        Plan& plan = plan_for(MatmulShape{m, n, k, bias != nullptr, 16});
        if (bias)
          RILL_CUBLAS_CHECK(
              cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        const float alpha = 1.f, beta = 0.f;
        RILL_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c,
                                         &*algo, nullptr, 0, stream_));
        return;
      }
    }
    run_invariant(x, w, bias, y, m, n, k, defer);
    return;
  }
  MatmulShape shape{m, n, k, bias != nullptr,
                    std::min({pointer_alignment(x), pointer_alignment(w), pointer_alignment(y)})};
  Plan& plan = plan_for(shape);
  if (!plan.chosen) {
    plan.choice = choose(plan, x, w, bias, y);
    plan.chosen = true;
  }
  run_plan(plan, plan.choice, x, w, bias, y);
}

void MatmulEngine::run_with(const MatmulChoice& c, const void* x, const void* w, const void* bias, void* y, int64_t m,
                            int64_t n, int64_t k) {
  if (c.path == MatmulChoice::Path::invariant) {
    run_invariant(x, w, bias, y, m, n, k, nullptr);
    return;
  }
  if (is_panels(w, n, k)) fail("[matmul] {} cannot read a weight stored as k-panels", c.describe());
  MatmulShape shape{m, n, k, bias != nullptr,
                    std::min({pointer_alignment(x), pointer_alignment(w), pointer_alignment(y)})};
  Plan& plan = plan_for(shape);
  if (c.path == MatmulChoice::Path::matvec && !matvec_ok(shape)) fail("[matmul] matvec does not apply to M={}", m);
  if (c.path == MatmulChoice::Path::matvec &&
      c.splits > 1 && size_t(c.splits) * size_t(m * n) * sizeof(float) > splitk_bytes_)
    fail("[matmul] split {} exceeds the split-K workspace", c.splits);
  run_plan(plan, c, x, w, bias, y);
}

const MatmulChoice* MatmulEngine::cached_choice(int64_t m, int64_t n, int64_t k, bool bias) const {
  for (auto& [shape, plan] : plans_)
    if (shape.m == m && shape.n == n && shape.k == k && shape.bias == bias && plan->chosen) return &plan->choice;
  return nullptr;
}

}  // namespace rill::cuda
