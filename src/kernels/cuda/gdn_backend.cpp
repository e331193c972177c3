// kernels/cuda/gdn_backend.cpp — CudaKernels' Gated DeltaNet ops (causal_conv1d, gated_delta_rule,
// l2_norm, gated_rms_norm, gdn_gates, sigmoid_mul): argument checks ("[op] ..." rill::Errors,
// before anything is enqueued) and dispatch to the launchers in ops.h. Activations are bf16 (the
// model's) or f32, one dtype per call; weights of the conv and the norm, gates and states are f32.
// The StateBatch lives on the device, so its contents (offsets, slots) are not read here: the
// kernels poison a row's outputs with NaN when its slot lies outside the state tensor.
#include <cstdlib>
#include <string_view>
#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

void on_device(const char* op, const char* name, const Tensor& t) {
  RILL_ENSURE(t.defined(), "[{}] {} is not set", op, name);
  RILL_ENSURE(t.device() == Device::cuda, "[{}] {} {} is not on the CUDA device", op, name, t.describe());
  RILL_ENSURE(t.is_contiguous(), "[{}] {} {} must be contiguous", op, name, t.describe());
}

void rank_is(const char* op, const char* name, const Tensor& t, int ndim) {
  RILL_ENSURE(t.ndim() == ndim, "[{}] {} {} must have {} dimensions", op, name, t.describe(), ndim);
}

void dtype_is(const char* op, const char* name, const Tensor& t, DType d) {
  RILL_ENSURE(t.dtype() == d, "[{}] {} {} must be {}", op, name, t.describe(), dtype_name(d));
}

void act_dtype_ok(const char* op, const char* name, const Tensor& t) {
  RILL_ENSURE(t.dtype() == DType::bf16 || t.dtype() == DType::f32, "[{}] {} {} must be bf16 or f32", op, name,
              t.describe());
}

void dim_is(const char* op, const char* name, const Tensor& t, int d, int64_t n) {
  RILL_ENSURE(t.size(d) == n, "[{}] {} {}: dimension {} must be {}", op, name, t.describe(), d, n);
}

bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int d = 0; d < a.ndim(); ++d)
    if (a.size(d) != b.size(d)) return false;
  return true;
}

void no_overlap(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  RILL_ENSURE(pa + a.nbytes() <= pb || pb + b.nbytes() <= pa, "[{}] {} and {} must not overlap", op, an, bn);
}

StateRowsArgs state_rows(const char* op, const StateBatch& b, int64_t num_slots) {
  on_device(op, "batch.cu_seqlens", b.cu_seqlens);
  on_device(op, "batch.slots", b.slots);
  on_device(op, "batch.has_state", b.has_state);
  dtype_is(op, "batch.cu_seqlens", b.cu_seqlens, DType::i32);
  dtype_is(op, "batch.slots", b.slots, DType::i32);
  dtype_is(op, "batch.has_state", b.has_state, DType::i32);
  RILL_ENSURE(b.num_rows >= 0 && b.cu_seqlens.numel() == b.num_rows + 1 && b.slots.numel() == b.num_rows &&
                  b.has_state.numel() == b.num_rows,
              "[{}] batch: {} rows need cu_seqlens [{}], slots and has_state [{}]", op, b.num_rows, b.num_rows + 1,
              b.num_rows);
  StateRowsArgs r;
  r.cu_seqlens = b.cu_seqlens.data_as<int32_t>();
  r.slots = b.slots.data_as<int32_t>();
  r.has_state = b.has_state.data_as<int32_t>();
  r.num_rows = b.num_rows;
  r.num_slots = num_slots;
  return r;
}

}  // namespace

void CudaKernels::causal_conv1d(const Tensor& x, const Tensor& w, const StateBatch& batch, Tensor& conv_state,
                                Tensor& y, bool silu) {
  settle();
  constexpr const char* op = "causal_conv1d";
  on_device(op, "x", x);
  on_device(op, "w", w);
  on_device(op, "conv_state", conv_state);
  on_device(op, "y", y);
  rank_is(op, "x", x, 2);
  rank_is(op, "w", w, 2);
  rank_is(op, "conv_state", conv_state, 3);
  act_dtype_ok(op, "x", x);
  dtype_is(op, "y", y, x.dtype());
  dtype_is(op, "w", w, DType::f32);
  dtype_is(op, "conv_state", conv_state, DType::f32);
  RILL_ENSURE(same_shape(x, y), "[causal_conv1d] y {} must match x {}", y.describe(), x.describe());
  no_overlap(op, "x", x, "y", y);
  const int64_t T = x.size(0), C = x.size(1), K = w.size(1);
  RILL_ENSURE(K >= 1 && K <= 8, "[causal_conv1d] w {}: kernel width must be in [1, 8]", w.describe());
  dim_is(op, "w", w, 0, C);
  dim_is(op, "conv_state", conv_state, 1, K - 1);
  dim_is(op, "conv_state", conv_state, 2, C);
  const StateRowsArgs rows = state_rows(op, batch, conv_state.size(0));
  RILL_ENSURE(T == 0 || batch.num_rows > 0, "[causal_conv1d] {} tokens but no rows", T);
  launch_causal_conv1d(x.data(), w.data_as<float>(), conv_state.data_as<float>(), y.data(), x.dtype(), rows, T, C,
                       int(K), silu, stream_.get());
}

void CudaKernels::gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                   const Tensor& beta, const StateBatch& batch, Tensor& state, Tensor& out,
                                   const DeltaRuleParams& p) {
  settle();
  constexpr const char* op = "gated_delta_rule";
  for (auto [name, t] : std::initializer_list<std::pair<const char*, const Tensor*>>{
           {"q", &q}, {"k", &k}, {"v", &v}, {"g", &g}, {"beta", &beta}, {"state", &state}, {"out", &out}})
    on_device(op, name, *t);
  rank_is(op, "q", q, 3);
  rank_is(op, "k", k, 3);
  rank_is(op, "v", v, 3);
  rank_is(op, "g", g, 2);
  rank_is(op, "beta", beta, 2);
  rank_is(op, "state", state, 4);
  rank_is(op, "out", out, 3);
  act_dtype_ok(op, "q", q);
  dtype_is(op, "k", k, q.dtype());
  dtype_is(op, "v", v, q.dtype());
  dtype_is(op, "out", out, q.dtype());
  dtype_is(op, "g", g, DType::f32);
  dtype_is(op, "beta", beta, DType::f32);
  dtype_is(op, "state", state, DType::f32);
  RILL_ENSURE(same_shape(q, k), "[gated_delta_rule] k {} must match q {}", k.describe(), q.describe());
  RILL_ENSURE(same_shape(v, out), "[gated_delta_rule] out {} must match v {}", out.describe(), v.describe());
  const int64_t T = q.size(0), Hk = q.size(1), dk = q.size(2), Hv = v.size(1), dv = v.size(2);
  dim_is(op, "v", v, 0, T);
  RILL_ENSURE(Hk > 0 && Hv % Hk == 0, "[gated_delta_rule] v: {} value heads is not a multiple of {} key heads", Hv, Hk);
  RILL_ENSURE(dk == 16 || dk == 32 || dk == 64 || dk == 128 || dk == 256,
              "[gated_delta_rule] q {}: key head dim {} is not supported (16, 32, 64, 128, 256)", q.describe(), dk);
  RILL_ENSURE(Hv <= 65535, "[gated_delta_rule] v {}: at most 65535 value heads", v.describe());
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"g", &g}, {"beta", &beta}}) {
    dim_is(op, name, *t, 0, T);
    dim_is(op, name, *t, 1, Hv);
  }
  dim_is(op, "state", state, 1, Hv);
  dim_is(op, "state", state, 2, dk);
  dim_is(op, "state", state, 3, dv);
  RILL_ENSURE(p.chunk_size > 0, "[gated_delta_rule] chunk_size must be positive, got {}", p.chunk_size);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"state", &state}})
    no_overlap(op, name, *t, "out", out);
  const StateRowsArgs rows = state_rows(op, batch, state.size(0));
  RILL_ENSURE(T == 0 || batch.num_rows > 0, "[gated_delta_rule] {} tokens but no rows", T);
  DeltaRuleArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.g = g.data_as<float>();
  a.beta = beta.data_as<float>();
  a.state = state.data_as<float>();
  a.out = out.data();
  a.act_dtype = q.dtype();
  a.rows = rows;
  a.tokens = T;
  a.hk = int(Hk);
  a.hv = int(Hv);
  a.dk = int(dk);
  a.dv = int(dv);
  a.scale = p.scale;
  // ::chunked runs the chunked kernel (gated_delta_chunked.cu, chunks of at most 64 tokens) on every
  // row, ::recurrent the recurrent one. ::automatic runs the recurrent kernel on every row until the
  // chunked kernel has passed its tests on hardware (CudaGatedDeltaChunked.*); RILL_GDN_CHUNKED=1
  // opts in to the split the CPU op makes: rows of ≤ 16 new tokens recurrent, longer rows chunked
  // (two launches, each skipping the other's rows on the device, so a row's arithmetic depends on
  // its own length only).
  a.chunk = int(std::min<int64_t>(p.chunk_size, 64));
  static const bool chunked_ok = [] {
    const char* e = std::getenv("RILL_GDN_CHUNKED");
    return e && std::string_view(e) == "1";
  }();
  if (p.form == DeltaRuleForm::chunked) {
    launch_gated_delta_rule_chunked(a, stream_.get());
  } else if (p.form == DeltaRuleForm::recurrent || !chunked_ok) {
    launch_gated_delta_rule(a, stream_.get());
  } else {
    DeltaRuleArgs shorter = a, longer = a;
    shorter.max_row_tokens = 16;
    longer.min_row_tokens = 17;
    launch_gated_delta_rule(shorter, stream_.get());
    launch_gated_delta_rule_chunked(longer, stream_.get());
  }
}

void CudaKernels::l2_norm(const Tensor& x, float eps, float scale, Tensor& y) {
  settle();
  constexpr const char* op = "l2_norm";
  on_device(op, "x", x);
  on_device(op, "y", y);
  rank_is(op, "x", x, 2);
  act_dtype_ok(op, "x", x);
  dtype_is(op, "y", y, x.dtype());
  RILL_ENSURE(same_shape(x, y), "[l2_norm] y {} must match x {}", y.describe(), x.describe());
  launch_l2_norm(x.data(), y.data(), x.dtype(), x.size(0), x.size(1), eps, scale, stream_.get());
}

void CudaKernels::gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  settle();
  constexpr const char* op = "gated_rms_norm";
  on_device(op, "x", x);
  on_device(op, "z", z);
  on_device(op, "w", w);
  on_device(op, "y", y);
  rank_is(op, "x", x, 2);
  rank_is(op, "w", w, 1);
  act_dtype_ok(op, "x", x);
  dtype_is(op, "z", z, x.dtype());
  dtype_is(op, "y", y, x.dtype());
  dtype_is(op, "w", w, DType::f32);
  RILL_ENSURE(same_shape(x, z) && same_shape(x, y), "[gated_rms_norm] x {}, z {}, y {} must have one shape",
              x.describe(), z.describe(), y.describe());
  dim_is(op, "w", w, 0, x.size(1));
  no_overlap(op, "z", z, "y", y);
  launch_gated_rms_norm(x.data(), z.data(), w.data_as<float>(), y.data(), x.dtype(), x.size(0), x.size(1), eps,
                        stream_.get());
}

void CudaKernels::gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias, Tensor& g,
                            Tensor& beta) {
  settle();
  constexpr const char* op = "gdn_gates";
  on_device(op, "a", a);
  on_device(op, "b", b);
  on_device(op, "A_log", a_log);
  on_device(op, "dt_bias", dt_bias);
  on_device(op, "g", g);
  on_device(op, "beta", beta);
  rank_is(op, "a", a, 2);
  rank_is(op, "A_log", a_log, 1);
  rank_is(op, "dt_bias", dt_bias, 1);
  act_dtype_ok(op, "a", a);
  dtype_is(op, "b", b, a.dtype());
  dtype_is(op, "A_log", a_log, DType::f32);
  dtype_is(op, "dt_bias", dt_bias, DType::f32);
  dtype_is(op, "g", g, DType::f32);
  dtype_is(op, "beta", beta, DType::f32);
  RILL_ENSURE(same_shape(a, b) && same_shape(a, g) && same_shape(a, beta),
              "[gdn_gates] a {}, b {}, g {}, beta {} must have one shape", a.describe(), b.describe(), g.describe(),
              beta.describe());
  const int64_t T = a.size(0), H = a.size(1);
  dim_is(op, "A_log", a_log, 0, H);
  dim_is(op, "dt_bias", dt_bias, 0, H);
  launch_gdn_gates(a.data(), b.data(), a.dtype(), a_log.data_as<float>(), dt_bias.data_as<float>(),
                   g.data_as<float>(), beta.data_as<float>(), T, H, stream_.get());
}

void CudaKernels::sigmoid_mul(const Tensor& x, const Tensor& gate, Tensor& out) {
  settle();
  constexpr const char* op = "sigmoid_mul";
  on_device(op, "x", x);
  on_device(op, "gate", gate);
  on_device(op, "out", out);
  act_dtype_ok(op, "x", x);
  dtype_is(op, "gate", gate, x.dtype());
  dtype_is(op, "out", out, x.dtype());
  RILL_ENSURE(x.numel() == gate.numel() && x.numel() == out.numel(),
              "[sigmoid_mul] x {}, gate {}, out {}: element counts differ", x.describe(), gate.describe(),
              out.describe());
  launch_sigmoid_mul(x.data(), gate.data(), out.data(), x.dtype(), x.numel(), stream_.get());
}

}  // namespace rill::cuda
