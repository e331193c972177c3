// kernels/cuda/matmul.h — MatmulEngine: y[M,N] = x[M,K] · w[N,K]ᵀ (+ bias) in bf16 with f32
// accumulation. In batch-invariant mode (the default) every shape runs our tensor-core GEMM
// (gemm.cu), whose bits for a row do not depend on M. Otherwise through cuBLASLt or, for M ≤ 8,
// the hand-written matvec. The path (and the
// cuBLASLt algorithm, and the matvec split-K factor) is chosen once per shape and cached: by
// timing the candidates on the first call when autotuning is on and the stream is not capturing
// a graph, else by the cuBLASLt heuristic and a fixed rule. Not thread-safe (one stream).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/ops.h"

namespace rill::cuda {

struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  bool bias = false;
  int align = 256;  ///< smallest pointer alignment of x, w, y (bytes, power of two ≤ 256)
  auto tie() const { return std::tie(m, n, k, bias, align); }
  bool operator<(const MatmulShape& o) const { return tie() < o.tie(); }
};

/// One way of computing a shape.
struct MatmulChoice {
  enum class Path { cublaslt, matvec, invariant } path = Path::cublaslt;
  int splits = 1;             ///< matvec split-K factor
  int algo_index = 0;         ///< index into the plan's heuristic results (cublaslt)
  std::string describe() const;
};

class MatmulEngine {
 public:
  /// The workspaces stay owned by the caller and must outlive the engine.
  MatmulEngine(cublasLtHandle_t lt, cudaStream_t stream, void* lt_workspace, size_t lt_workspace_bytes,
               float* splitk_workspace, size_t splitk_bytes, int num_sms);
  ~MatmulEngine();
  MatmulEngine(const MatmulEngine&) = delete;
  MatmulEngine& operator=(const MatmulEngine&) = delete;

  /// Computes y; all pointers are device pointers to contiguous bf16 data.
  /// `defer` (may be null): where the batch-invariant decode GEMM (configurations 18, 19) runs its
  /// split schedule, the fold is left to the op reading y and *defer describes the partials
  /// (GemmArgs::defer; they stay valid until the next GEMM); else *defer is left inactive.
  void run(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n, int64_t k,
           GemmPartials* defer = nullptr);
  /// Batch-invariant mode with our GEMM: one launch writing consecutive column ranges of the
  /// product to separate outputs (outs[s] holds columns [out_end[s - 1], out_end[s])). Returns
  /// false, doing nothing, when another path is in use (the caller then runs one matmul a range).
  /// `rope` (q, k, v the three outputs): the RoPE op in the GEMM's epilogue where it fits
  /// (GemmArgs::rope); *rope_ran tells whether it ran.
  bool run_outputs(const void* x, const void* w, const void* bias, void* const* outs, const int64_t* out_end,
                   int num_outs, int64_t m, int64_t n, int64_t k, GemmPartials* defer = nullptr,
                   const RopeArgs* rope = nullptr, bool* rope_ran = nullptr);
  /// Batch-invariant mode with our GEMM: y[M, inter] = SwiGLU of x · wᵀ (w [2·inter, K]: gate rows,
  /// then up rows) in one launch, the bits of run() then launch_swiglu: prefill-sized M where
  /// gemm_swiglu_fits; decode rows by decode_mode (RILL_DECODE_SWIGLU: 0 never; 1 the split
  /// schedule at M ≤ 8 where the shape's decode configuration is 18; 2, 3 the fold schedule where
  /// decode_glu_fold_fits and the configuration is 18 or 19; scratch, [M, 2·inter] or null, takes
  /// the unfused product while that configuration is timed). Returns false, doing nothing, where it
  /// does not apply (another path, no scratch): the caller then runs the two ops.
  bool run_swiglu(const void* x, const void* w, const void* bias, void* y, void* scratch, int64_t m, int64_t inter,
                  int64_t k, int decode_mode);
  /// The decode configuration of `a`'s shape (m ≤ decode_rows()): timed on its first eager call.
  int decode_config_for(const GemmArgs& a) { return decode_config(a); }
  /// GEMM arguments with this engine's workspaces and counters (no output set).
  GemmArgs gemm_args(const void* x, const void* w, const void* bias, int64_t m, int64_t n, int64_t k) const;
  /// Times the invariant GEMM's decode configurations (decode_configs(); same bits) on `a` (m ≤ 16):
  /// (configuration, µs) each, L2 flushed before every run. `a` gets this engine's workspaces.
  /// `configs` empty: every one of decode_configs().
  std::vector<std::pair<int, double>> time_decode_configs(GemmArgs a, std::vector<int> configs = {});
  /// Zeroed per-tile counters for the invariant GEMM's in-kernel split reduction (owned by the
  /// caller; every launch leaves them zero).
  void set_gemm_counters(unsigned* counters, int64_t count) {
    counters_ = counters;
    num_counters_ = count;
  }
  /// Computes y with a given choice (benchmarks, tests); throws when the choice does not apply.
  void run_with(const MatmulChoice& c, const void* x, const void* w, const void* bias, void* y, int64_t m,
                int64_t n, int64_t k);
  /// The choice cached for a shape after run() (tests, benchmarks); nullptr when none.
  const MatmulChoice* cached_choice(int64_t m, int64_t n, int64_t k, bool bias) const;
  /// The candidates run() considers for a shape.
  std::vector<MatmulChoice> candidates(const void* x, const void* w, const void* bias, void* y, int64_t m,
                                       int64_t n, int64_t k);
  void set_autotune(bool on) { autotune_ = on; }
  /// Stores the weight `w` ([n, k] bf16, constant from now on) as k-panels in place (launch_to_panels,
  /// through a scratch copy made and freed here; stream-ordered): the layout the warpgroup GEMMs
  /// stream fastest (bench/RESULTS.md run AP). From then on every GEMM on `w` runs the warpgroup
  /// kernels whatever the mode (decode configurations 18 and 19, prefill 11-17), and a pointer into
  /// `w` other than its start is refused. Returns false, leaving `w` as it is, where the layout does
  /// not apply (no warpgroup GEMM, N or K not a multiple of 64) or the scratch copy does not fit.
  bool store_as_panels(void* w, int64_t n, int64_t k);
  /// Whether `w` starts a weight stored as k-panels of shape [n, k]; throws for a pointer inside one
  /// or a shape other than its own.
  bool is_panels(const void* w, int64_t n, int64_t k) const;
  /// Memory [p, p + bytes) was freed or is being overwritten: weights stored as k-panels that start
  /// there are forgotten (their memory holds something else now).
  void forget_weights(const void* p, size_t bytes);
  /// Device bytes of the weights stored as k-panels.
  size_t panel_bytes() const { return panel_bytes_; }
  /// The invariant GEMM's decode configuration for every shape (1, 5, 6 tiled; 7, 8 streaming; 9,
  /// 10 tiled through the bulk copy engine; 18, 19 warpgroup; same bits), or 0: timed per (N, K)
  /// on the first eager call (RILL_DECODE_GEMM_CONFIG). Applies to the M it takes (decode_config).
  void set_decode_config(int config) { forced_decode_config_ = config; }
  /// Whether the device has the bulk copy engine (sm_90+): decode configurations 9 and 10 use it.
  void set_bulk_copies(bool on) { bulk_copies_ = on; }
  /// The decode configurations this device can run (timed, or forced by set_decode_config).
  std::vector<int> decode_configs() const;
  /// The candidates of the automatic choice for m rows, the preferred first (H200, in the decode
  /// graph): with the warpgroup GEMM (sm_90a) its decode configurations first — m ≤ 8: 18 (batch-1
  /// 182.7 tok/s against 160.2 / 152.7 for the streaming 8 / 7), m 9..64: 19; without it m ≤ 8
  /// the streaming kernels, m 9..16 the tiled ones (1, 5, 6: batch 16 at 1,985 tok/s against 1,512
  /// with the streaming kernels, whose rows 9-16 of x are read chunk by chunk).
  std::vector<int> decode_candidates(int64_t m) const;
  /// The largest M the decode configurations take: 64 with the warpgroup GEMM, else 16.
  int64_t decode_rows() const;
  /// Batch-invariant mode: run() always takes the invariant GEMM (no timing, no per-M choice).
  void set_batch_invariant(bool on) { batch_invariant_ = on; }
  /// Which kernel the batch-invariant mode runs: our GEMM (gemm.cu), or one cuBLASLt algorithm
  /// fixed per (N, K, bias) for every M (split-K off, so a row's k order is the algorithm's
  /// alone). The environment variable RILL_INVARIANT_GEMM=ours|cublaslt sets it at creation.
  enum class InvariantImpl { ours, cublaslt };
  void set_invariant_impl(InvariantImpl impl) { invariant_impl_ = impl; }
  InvariantImpl invariant_impl() const { return invariant_impl_; }
  bool batch_invariant() const { return batch_invariant_; }
  /// The weight stages the next invariant decode GEMM requests before its wait (GemmArgs::prewait_stages;
  /// -1: the backend's setting). Taken by that launch.
  void set_next_prewait(int stages) { next_prewait_ = stages; }
  /// Scratch memory larger than L2 that the timed choice overwrites before each timed run, so
  /// weights are read from HBM as in a real step (not from L2). Contents are destroyed.
  void set_l2_flush_buffer(void* buffer, size_t bytes) {
    flush_ = buffer;
    flush_bytes_ = bytes;
  }

 private:
  struct Plan;
  Plan& plan_for(const MatmulShape& shape);
  void run_invariant(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n, int64_t k,
                     GemmPartials* defer);
  void launch_invariant(GemmArgs& a);
  void attach_workspaces(GemmArgs& a) const;  // split workspace, SM count, tile counters
  int decode_config(const GemmArgs& a);
  void run_plan(Plan& plan, const MatmulChoice& c, const void* x, const void* w, const void* bias, void* y);
  MatmulChoice choose(Plan& plan, const void* x, const void* w, const void* bias, void* y);
  bool matvec_ok(const MatmulShape& s) const;

  cublasLtHandle_t lt_;
  cudaStream_t stream_;
  void* lt_workspace_;
  size_t lt_workspace_bytes_;
  float* splitk_workspace_;
  size_t splitk_bytes_;
  int num_sms_;
  unsigned* counters_ = nullptr;
  int64_t num_counters_ = 0;
  bool autotune_ = true;
  int forced_decode_config_ = 0;
  bool bulk_copies_ = false;
  bool batch_invariant_ = false;
  int next_prewait_ = -1;  // set_next_prewait
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
  std::map<MatmulShape, std::unique_ptr<Plan>> plans_;
  // (N, K, rows bucket: M ≤ 8, 9..16, 17..64) → fastest decode configuration, each bucket timed
  // apart (the streaming kernel reads rows 9-16 of x chunk by chunk; picked at M = 1 it ran batch
  // 16 at half speed).
  std::map<std::tuple<int64_t, int64_t, int>, int> decode_configs_;
  InvariantImpl invariant_impl_ = InvariantImpl::ours;
  // The fixed cuBLASLt algorithm of each (N, K, bias) in invariant mode; nullopt: none qualifies
  // (our GEMM then runs that shape for every M).
  std::map<std::tuple<int64_t, int64_t, bool>, std::optional<cublasLtMatmulAlgo_t>> fixed_algos_;
  const std::optional<cublasLtMatmulAlgo_t>& fixed_algo(int64_t n, int64_t k, bool bias);
  // Weights stored as k-panels: start → [n, k].
  std::map<const void*, std::pair<int64_t, int64_t>> panels_;
  size_t panel_bytes_ = 0;
  bool panels_warned_ = false;
};

}  // namespace rill::cuda
