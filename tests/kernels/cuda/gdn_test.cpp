// CUDA Gated DeltaNet ops against the CPU backend's ops (themselves tested against per-token
// double references in tests/kernels/cpu_gated_delta_test.cpp) on fresh random inputs (label cuda):
// the gated delta rule and the causal conv1d over ragged rows (1, 2, 15, 16, 17, 63, 64, 65, 300
// tokens) with non-contiguous state slots and a mix of rows that start from zeros and rows that
// continue a stored state, the states written back, and slots outside the batch left untouched;
// l2_norm, gated_rms_norm, gdn_gates and sigmoid_mul. Each op runs with f32 activations (checked
// to f32 rounding against the CPU op) and with bf16 activations, the model's.
//
// Tolerances: inputs are bf16-exact, so the GPU and the CPU see the same numbers. With f32
// activations only the summation order differs (≤ 1e-6 relative seen; 2e-5 allowed, 1e-4 against
// the CPU's chunked form, which reassociates whole chunks). The recurrent state is f32 in both
// backends and never sees an activation rounding, so it is held to the same bound even in the
// bf16 runs. bf16 outputs are rounded once per op (8 mantissa bits: ≤ 2^-9 relative per value):
// 1e-2 relative as TESTING.md sets for bf16 paths, plus bit-exactness against an emulation where
// the op's roundings are known.
#include <algorithm>
#include <numeric>

#include "kernels/cuda/cuda_test_util.h"

namespace rill {
namespace {

using namespace cuda_test;

Kernels& cpu() {
  static std::unique_ptr<Kernels> k = make_cpu_kernels();
  return *k;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

Tensor host(std::vector<float>& v, std::vector<int64_t> shape) {
  return Tensor(v.data(), DType::f32, std::span<const int64_t>(shape));
}
Tensor host_i32(std::vector<int32_t>& v) { return Tensor(v.data(), DType::i32, {int64_t(v.size())}); }

DevTensor upload_act(const std::vector<float>& v, std::vector<int64_t> shape, DType dt) {
  return dt == DType::bf16 ? upload_bf16(v, std::move(shape)) : upload_f32(v, std::move(shape));
}
std::vector<float> download_act(const DevTensor& d) {
  return d.t.dtype() == DType::bf16 ? download_bf16(d) : download_f32(d);
}

// Rows of a StateBatch, kept on the host (CPU backend) and uploaded (CUDA backend).
struct Rows {
  std::vector<int32_t> cu{0}, slots, has;
  DevTensor d_cu, d_slots, d_has;
  void add(int32_t len, int32_t slot, bool has_state) {
    cu.push_back(cu.back() + len);
    slots.push_back(slot);
    has.push_back(has_state ? 1 : 0);
  }
  int64_t tokens() const { return cu.back(); }
  StateBatch host_batch() {
    StateBatch b;
    b.num_rows = int32_t(slots.size());
    b.cu_seqlens = host_i32(cu);
    b.slots = host_i32(slots);
    b.has_state = host_i32(has);
    return b;
  }
  StateBatch dev_batch() {
    d_cu = upload_i32(cu, {int64_t(cu.size())});
    d_slots = upload_i32(slots, {int64_t(slots.size())});
    d_has = upload_i32(has, {int64_t(has.size())});
    StateBatch b;
    b.num_rows = int32_t(slots.size());
    b.cu_seqlens = d_cu.t;
    b.slots = d_slots.t;
    b.has_state = d_has.t;
    return b;
  }
};

constexpr int64_t kSlots = 12;

// The ragged rows the brief names, on shuffled, non-contiguous slots (3 of the 12 stay unused),
// alternately fresh and continuing.
Rows ragged_rows(std::mt19937_64& rng, std::initializer_list<int32_t> lens = {1, 2, 15, 16, 17, 63, 64, 65, 300}) {
  std::vector<int32_t> slots(kSlots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  Rows r;
  int i = 0;
  for (int32_t len : lens) {
    r.add(len, slots[size_t(i)], i % 3 != 1);
    ++i;
  }
  return r;
}

struct DeltaCase {
  int64_t Hk, Hv, dk, dv;
  std::vector<float> q, k, v, g, beta, state0;
};

DeltaCase make_delta_case(std::mt19937_64& rng, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
  DeltaCase c{Hk, Hv, dk, dv, {}, {}, {}, {}, {}, {}};
  c.q = random_bf16_values(rng, size_t(T * Hk * dk));
  // Unit-norm keys, as the model feeds them (l2_norm), rounded to bf16.
  std::vector<float> k = random_bf16_values(rng, size_t(T * Hk * dk));
  for (int64_t i = 0; i < T * Hk; ++i) {
    double ss = 0;
    for (int64_t a = 0; a < dk; ++a) ss += double(k[size_t(i * dk + a)]) * k[size_t(i * dk + a)];
    for (int64_t a = 0; a < dk; ++a) k[size_t(i * dk + a)] = round_bf16(float(k[size_t(i * dk + a)] / std::sqrt(ss)));
  }
  c.k = k;
  c.v = random_bf16_values(rng, size_t(T * Hv * dv), -2.f, 2.f);
  c.g = random_bf16_values(rng, size_t(T * Hv), -1.5f, 0.f);
  c.beta = random_bf16_values(rng, size_t(T * Hv), 0.f, 1.f);
  c.state0 = random_bf16_values(rng, size_t(kSlots * Hv * dk * dv));
  return c;
}

struct DeltaResult {
  std::vector<float> out, state;
};

DeltaResult cpu_delta(DeltaCase c, Rows& rows, DeltaRuleForm form, float scale) {
  const int64_t T = rows.tokens();
  DeltaResult r{std::vector<float>(c.v.size(), NAN), c.state0};
  Tensor out = host(r.out, {T, c.Hv, c.dv}), state = host(r.state, {kSlots, c.Hv, c.dk, c.dv});
  DeltaRuleParams p;
  p.scale = scale;
  p.form = form;
  cpu().gated_delta_rule(host(c.q, {T, c.Hk, c.dk}), host(c.k, {T, c.Hk, c.dk}), host(c.v, {T, c.Hv, c.dv}),
                         host(c.g, {T, c.Hv}), host(c.beta, {T, c.Hv}), rows.host_batch(), state, out, p);
  return r;
}

DeltaResult gpu_delta(const DeltaCase& c, Rows& rows, DType dt, float scale,
                      DeltaRuleForm form = DeltaRuleForm::automatic, int32_t chunk_size = 64) {
  const int64_t T = rows.tokens();
  DevTensor q = upload_act(c.q, {T, c.Hk, c.dk}, dt), k = upload_act(c.k, {T, c.Hk, c.dk}, dt);
  DevTensor v = upload_act(c.v, {T, c.Hv, c.dv}, dt), g = upload_f32(c.g, {T, c.Hv}), b = upload_f32(c.beta, {T, c.Hv});
  DevTensor state = upload_f32(c.state0, {kSlots, c.Hv, c.dk, c.dv}), out(dt, {T, c.Hv, c.dv});
  out.poison();
  DeltaRuleParams p;
  p.scale = scale;
  p.form = form;
  p.chunk_size = chunk_size;
  backend().gated_delta_rule(q.t, k.t, v.t, g.t, b.t, rows.dev_batch(), state.t, out.t, p);
  return {download_act(out), download_f32(state)};
}

TEST(CudaGatedDelta, MatchesCpuOnRaggedRowsAndSlots) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct Shape {
    int64_t Hk, Hv, dk, dv;
  };
  // The model's head dims (128/128, two value heads per key head) and an odd dv (a partial
  // 16-column slice) with a smaller dk.
  for (Shape s : {Shape{2, 4, 128, 128}, Shape{1, 3, 64, 40}}) {
    SCOPED_TRACE(testing::Message() << "Hk " << s.Hk << " Hv " << s.Hv << " dk " << s.dk << " dv " << s.dv);
    Rows rows = ragged_rows(rng);
    const DeltaCase c = make_delta_case(rng, rows.tokens(), s.Hk, s.Hv, s.dk, s.dv);
    const float scale = 1.f / std::sqrt(float(s.dk));
    const DeltaResult rec = cpu_delta(c, rows, DeltaRuleForm::recurrent, scale);
    const DeltaResult chk = cpu_delta(c, rows, DeltaRuleForm::chunked, scale);
    const DeltaResult f32 = gpu_delta(c, rows, DType::f32, scale);
    EXPECT_LT(rel_error(f32.out, to_double(rec.out)), 2e-5);
    EXPECT_LT(rel_error(f32.out, to_double(chk.out)), 1e-4);
    EXPECT_LT(rel_error(f32.state, to_double(rec.state)), 2e-5);
    EXPECT_LT(rel_error(f32.state, to_double(chk.state)), 1e-4);
    const DeltaResult b16 = gpu_delta(c, rows, DType::bf16, scale);
    EXPECT_LT(rel_error(b16.out, to_double(rec.out)), 1e-2);
    EXPECT_LT(rel_error(b16.state, to_double(rec.state)), 2e-5);
    // Per row: every row's output and state (a wrong slot or a skipped has_state shows here even
    // when the whole-tensor error is small), and unused slots untouched.
    const int64_t per_slot = s.Hv * s.dk * s.dv;
    for (size_t r = 0; r < rows.slots.size(); ++r) {
      const int64_t t0 = rows.cu[r], t1 = rows.cu[r + 1], o0 = t0 * s.Hv * s.dv, o1 = t1 * s.Hv * s.dv;
      std::vector<float> got(f32.out.begin() + o0, f32.out.begin() + o1);
      std::vector<double> want(rec.out.begin() + o0, rec.out.begin() + o1);
      EXPECT_LT(rel_error(got, want), 2e-5) << "row " << r << " (" << t1 - t0 << " tokens)";
      const int64_t s0 = rows.slots[r] * per_slot;
      std::vector<float> gs(f32.state.begin() + s0, f32.state.begin() + s0 + per_slot);
      std::vector<double> ws(rec.state.begin() + s0, rec.state.begin() + s0 + per_slot);
      EXPECT_LT(rel_error(gs, ws), 2e-5) << "state of row " << r;
    }
    for (int64_t slot = 0; slot < kSlots; ++slot) {
      if (std::find(rows.slots.begin(), rows.slots.end(), int32_t(slot)) != rows.slots.end()) continue;
      EXPECT_TRUE(std::equal(f32.state.begin() + slot * per_slot, f32.state.begin() + (slot + 1) * per_slot,
                             c.state0.begin() + slot * per_slot))
          << "unused slot " << slot << " was written";
    }
  }
}

// A row split over two calls (the second continuing the state the first stored) equals one call:
// the f32 state round trip through memory is exact, so bit for bit.
TEST(CudaGatedDelta, SplitRowEqualsOneCall) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t T = 70, Hk = 2, Hv = 4, dk = 128, dv = 128;
  const DeltaCase c = make_delta_case(rng, T, Hk, Hv, dk, dv);
  Rows whole;
  whole.add(int32_t(T), 5, false);
  const DeltaResult one = gpu_delta(c, whole, DType::f32, 0.5f);
  DevTensor q = upload_f32(c.q, {T, Hk, dk}), k = upload_f32(c.k, {T, Hk, dk}), v = upload_f32(c.v, {T, Hv, dv});
  DevTensor g = upload_f32(c.g, {T, Hv}), b = upload_f32(c.beta, {T, Hv});
  DevTensor state = upload_f32(c.state0, {kSlots, Hv, dk, dv}), out(DType::f32, {T, Hv, dv});
  out.poison();
  DeltaRuleParams p;
  p.scale = 0.5f;
  int64_t done = 0;
  for (int64_t len : {1, 16, 1, 52}) {
    Rows part;
    part.add(int32_t(len), 5, done > 0);
    auto sl = [&](DevTensor& t) { return t.t.slice(done, done + len); };
    Tensor o = sl(out);
    backend().gated_delta_rule(sl(q), sl(k), sl(v), sl(g), sl(b), part.dev_batch(), state.t, o, p);
    done += len;
  }
  ASSERT_EQ(done, T);
  const std::vector<float> split_out = download_f32(out), split_state = download_f32(state);
  EXPECT_EQ(split_out, one.out);
  EXPECT_EQ(split_state, one.state);
}

TEST(CudaGatedDelta, RejectsBadArguments) {
  RILL_REQUIRE_GPU();
  DevTensor q(DType::bf16, {4, 2, 128}), v(DType::bf16, {4, 4, 128}), g(DType::f32, {4, 4}), out(DType::bf16, {4, 4, 128});
  DevTensor state_bf16(DType::bf16, {2, 4, 128, 128}), state(DType::f32, {2, 4, 128, 128});
  Rows rows;
  rows.add(4, 0, false);
  const StateBatch b = rows.dev_batch();
  auto message = [&](Tensor& st, const Tensor& qq) {
    try {
      backend().gated_delta_rule(qq, qq, v.t, g.t, g.t, b, st, out.t, DeltaRuleParams{});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(state_bf16.t, q.t).find("[gated_delta_rule] state"), std::string::npos) << message(state_bf16.t, q.t);
  DevTensor q96(DType::bf16, {4, 2, 96});
  DevTensor st96(DType::f32, {2, 4, 96, 128});
  EXPECT_NE(message(st96.t, q96.t).find("key head dim 96"), std::string::npos) << message(st96.t, q96.t);
}

// ---- The chunked kernel (gated_delta_chunked.cu, DeltaRuleForm::chunked). Written without a GPU:
// these tests are what validates it. Tolerances: with f32 activations the chunked form reassociates
// whole chunks (k·S and the triangular solve in another order than the CPU's U − W·S), so it is
// held to 1e-4 against the CPU's recurrent and chunked forms and the GPU's recurrent kernel (the
// CPU chunked form itself agrees with a double reference to 2e-5). The state never sees an
// activation rounding, so it is held to 1e-4 in the bf16 runs too; bf16 outputs to 1e-2.

// Output and state of every row (a wrong slot, a skipped has_state or a broken chunk boundary shows
// here even when the whole-tensor error is small), and the slots no row names left untouched.
void expect_rows_close(const DeltaResult& got, const DeltaResult& want, const Rows& rows, const DeltaCase& c,
                       double out_tol, double state_tol, const char* what) {
  const int64_t per_slot = c.Hv * c.dk * c.dv;
  for (size_t r = 0; r < rows.slots.size(); ++r) {
    const int64_t t0 = rows.cu[r], t1 = rows.cu[r + 1], o0 = t0 * c.Hv * c.dv, o1 = t1 * c.Hv * c.dv;
    std::vector<float> go(got.out.begin() + o0, got.out.begin() + o1);
    std::vector<double> wo(want.out.begin() + o0, want.out.begin() + o1);
    EXPECT_LT(rel_error(go, wo), out_tol) << what << ": output of row " << r << " (" << t1 - t0 << " tokens)";
    const int64_t s0 = rows.slots[r] * per_slot;
    std::vector<float> gs(got.state.begin() + s0, got.state.begin() + s0 + per_slot);
    std::vector<double> ws(want.state.begin() + s0, want.state.begin() + s0 + per_slot);
    EXPECT_LT(rel_error(gs, ws), state_tol) << what << ": state of row " << r << " (" << t1 - t0 << " tokens)";
  }
  for (int64_t slot = 0; slot < kSlots; ++slot) {
    if (std::find(rows.slots.begin(), rows.slots.end(), int32_t(slot)) != rows.slots.end()) continue;
    EXPECT_TRUE(std::equal(got.state.begin() + slot * per_slot, got.state.begin() + (slot + 1) * per_slot,
                           c.state0.begin() + slot * per_slot))
        << what << ": unused slot " << slot << " was written";
  }
}

TEST(CudaGatedDeltaChunked, MatchesRecurrentAndCpuOnRaggedRows) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct Shape {
    int64_t Hk, Hv, dk, dv;
  };
  // The model's head dims; dk = 256 (16-column slices); a partial dv slice with a smaller dk; dk = 16.
  for (Shape s : {Shape{2, 4, 128, 128}, Shape{1, 2, 256, 64}, Shape{1, 3, 64, 40}, Shape{1, 1, 16, 20}}) {
    SCOPED_TRACE(testing::Message() << "Hk " << s.Hk << " Hv " << s.Hv << " dk " << s.dk << " dv " << s.dv);
    // Rows of 1, 63, 64, 65, 300 and 1000 tokens, fresh and continuing ones mixed.
    Rows rows = ragged_rows(rng, {1, 63, 64, 65, 300, 1000});
    const DeltaCase c = make_delta_case(rng, rows.tokens(), s.Hk, s.Hv, s.dk, s.dv);
    const float scale = 1.f / std::sqrt(float(s.dk));
    const DeltaResult rec = cpu_delta(c, rows, DeltaRuleForm::recurrent, scale);
    const DeltaResult chk = cpu_delta(c, rows, DeltaRuleForm::chunked, scale);
    const DeltaResult gpu_rec = gpu_delta(c, rows, DType::f32, scale, DeltaRuleForm::recurrent);
    const DeltaResult f32 = gpu_delta(c, rows, DType::f32, scale, DeltaRuleForm::chunked);
    EXPECT_LT(rel_error(f32.out, to_double(chk.out)), 1e-4);
    EXPECT_LT(rel_error(f32.state, to_double(chk.state)), 1e-4);
    EXPECT_LT(rel_error(f32.out, to_double(rec.out)), 1e-4);
    EXPECT_LT(rel_error(f32.state, to_double(rec.state)), 1e-4);
    EXPECT_LT(rel_error(f32.out, to_double(gpu_rec.out)), 1e-4);
    EXPECT_LT(rel_error(f32.state, to_double(gpu_rec.state)), 1e-4);
    expect_rows_close(f32, rec, rows, c, 1e-4, 1e-4, "f32 chunked vs CPU recurrent");
    expect_rows_close(f32, chk, rows, c, 1e-4, 1e-4, "f32 chunked vs CPU chunked");
    const DeltaResult b16 = gpu_delta(c, rows, DType::bf16, scale, DeltaRuleForm::chunked);
    EXPECT_LT(rel_error(b16.out, to_double(rec.out)), 1e-2);
    EXPECT_LT(rel_error(b16.state, to_double(rec.state)), 1e-4);
    expect_rows_close(b16, rec, rows, c, 1e-2, 1e-4, "bf16 chunked vs CPU recurrent");
    // The bf16 output is the f32 one rounded once: against the GPU recurrent kernel's bf16 output
    // the two differ only where an f32 difference crosses a rounding boundary.
    const DeltaResult b16_rec = gpu_delta(c, rows, DType::bf16, scale, DeltaRuleForm::recurrent);
    EXPECT_GT(exact_fraction(b16.out, b16_rec.out), 0.9);
  }
}

// Smaller chunks (the chunk_size parameter, clamped to 64 on the GPU) give the same result.
TEST(CudaGatedDeltaChunked, ChunkSizesAgree) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  Rows rows = ragged_rows(rng, {5, 64, 130, 257});
  const DeltaCase c = make_delta_case(rng, rows.tokens(), 2, 4, 128, 128);
  const DeltaResult rec = cpu_delta(c, rows, DeltaRuleForm::recurrent, 0.25f);
  for (int32_t chunk : {1, 16, 37, 64, 1000}) {
    SCOPED_TRACE(testing::Message() << "chunk_size " << chunk);
    const DeltaResult r = gpu_delta(c, rows, DType::f32, 0.25f, DeltaRuleForm::chunked, chunk);
    expect_rows_close(r, rec, rows, c, 1e-4, 1e-4, "f32 chunked vs CPU recurrent");
  }
}

// A row split over several calls (prefill, then continuations of odd lengths from the stored
// state) equals one call to the chunked tolerance (the chunk boundaries move).
TEST(CudaGatedDeltaChunked, SplitRowMatchesOneCall) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t T = 400, Hk = 2, Hv = 4, dk = 128, dv = 128;
  const DeltaCase c = make_delta_case(rng, T, Hk, Hv, dk, dv);
  Rows whole;
  whole.add(int32_t(T), 7, true);
  const DeltaResult one = gpu_delta(c, whole, DType::f32, 0.5f, DeltaRuleForm::recurrent);
  DevTensor q = upload_f32(c.q, {T, Hk, dk}), k = upload_f32(c.k, {T, Hk, dk}), v = upload_f32(c.v, {T, Hv, dv});
  DevTensor g = upload_f32(c.g, {T, Hv}), b = upload_f32(c.beta, {T, Hv});
  DevTensor state = upload_f32(c.state0, {kSlots, Hv, dk, dv}), out(DType::f32, {T, Hv, dv});
  out.poison();
  DeltaRuleParams p;
  p.scale = 0.5f;
  p.form = DeltaRuleForm::chunked;
  int64_t done = 0;
  for (int64_t len : {64, 1, 200, 0, 135}) {
    Rows part;
    part.add(int32_t(len), 7, true);
    auto sl = [&](DevTensor& t) { return t.t.slice(done, done + len); };
    Tensor o = sl(out);
    backend().gated_delta_rule(sl(q), sl(k), sl(v), sl(g), sl(b), part.dev_batch(), state.t, o, p);
    done += len;
  }
  ASSERT_EQ(done, T);
  const DeltaResult split{download_f32(out), download_f32(state)};
  EXPECT_LT(rel_error(split.out, to_double(one.out)), 1e-4);
  EXPECT_LT(rel_error(split.state, to_double(one.state)), 1e-4);
  // Only slot 7 changed.
  const int64_t per_slot = Hv * dk * dv;
  for (int64_t slot = 0; slot < kSlots; ++slot) {
    if (slot == 7) continue;
    EXPECT_TRUE(std::equal(split.state.begin() + slot * per_slot, split.state.begin() + (slot + 1) * per_slot,
                           c.state0.begin() + slot * per_slot))
        << "slot " << slot << " was written";
  }
}

// A row whose slot lies outside the state tensor gets NaN outputs and touches no state; the other
// rows of the call are unaffected.
TEST(CudaGatedDeltaChunked, BadSlotPoisonsOnlyItsRow) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  Rows rows;
  rows.add(70, 2, true);
  rows.add(33, int32_t(kSlots), true);
  rows.add(65, -1, false);
  Rows good;
  good.add(70, 2, true);
  const DeltaCase c = make_delta_case(rng, rows.tokens(), 1, 2, 64, 48);
  const DeltaResult r = gpu_delta(c, rows, DType::f32, 0.125f, DeltaRuleForm::chunked);
  const DeltaResult ref = cpu_delta(c, good, DeltaRuleForm::recurrent, 0.125f);
  const int64_t split = 70 * c.Hv * c.dv;
  std::vector<float> head(r.out.begin(), r.out.begin() + split);
  std::vector<double> want(ref.out.begin(), ref.out.begin() + split);
  EXPECT_LT(rel_error(head, want), 1e-4);
  EXPECT_TRUE(std::all_of(r.out.begin() + split, r.out.end(), [](float x) { return std::isnan(x); }))
      << "rows with a slot outside the state must be NaN";
  EXPECT_LT(rel_error(r.state, to_double(ref.state)), 1e-4);
}

TEST(CudaCausalConv1d, MatchesCpuWithRollingState) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t C : {300, 2048}) {
    for (bool silu : {true, false}) {
      SCOPED_TRACE(testing::Message() << "C " << C << " silu " << silu);
      const int64_t K = 4;
      Rows rows = ragged_rows(rng);
      const int64_t T = rows.tokens();
      std::vector<float> x = random_bf16_values(rng, size_t(T * C), -2.f, 2.f);
      std::vector<float> w = random_bf16_values(rng, size_t(C * K), -0.7f, 0.7f);
      std::vector<float> st0 = random_bf16_values(rng, size_t(kSlots * (K - 1) * C), -2.f, 2.f);
      // CPU: with and without SiLU (the pre-activation feeds the bf16 emulation).
      std::vector<float> y_ref(size_t(T * C)), st_ref = st0, y_pre(size_t(T * C)), st_pre = st0;
      Tensor st_ref_t = host(st_ref, {kSlots, K - 1, C}), y_ref_t = host(y_ref, {T, C});
      cpu().causal_conv1d(host(x, {T, C}), host(w, {C, K}), rows.host_batch(), st_ref_t, y_ref_t, silu);
      Tensor st_pre_t = host(st_pre, {kSlots, K - 1, C}), y_pre_t = host(y_pre, {T, C});
      cpu().causal_conv1d(host(x, {T, C}), host(w, {C, K}), rows.host_batch(), st_pre_t, y_pre_t, false);
      for (DType dt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dt));
        DevTensor dx = upload_act(x, {T, C}, dt), dw = upload_f32(w, {C, K});
        DevTensor dst = upload_f32(st0, {kSlots, K - 1, C}), dy(dt, {T, C});
        dy.poison();
        backend().causal_conv1d(dx.t, dw.t, rows.dev_batch(), dst.t, dy.t, silu);
        const std::vector<float> y = download_act(dy), st = download_f32(dst);
        // The state holds copies of (bf16-exact) inputs: exact, and unused slots untouched.
        EXPECT_EQ(st, st_ref);
        if (dt == DType::f32) {
          EXPECT_LT(rel_error(y, to_double(y_ref)), 1e-6);
        } else {
          EXPECT_LT(rel_error(y, to_double(y_ref)), 1e-2);
          std::vector<float> emul(y_pre.size());
          for (size_t i = 0; i < emul.size(); ++i) {
            const float a = round_bf16(y_pre[i]);
            emul[i] = round_bf16(silu ? a / (1.f + std::exp(-a)) : a);
          }
          EXPECT_GT(exact_fraction(y, emul), 0.99);
        }
      }
    }
  }
}

// A decode loop (one token per call per row) leaves the same state and outputs as one prefill.
TEST(CudaCausalConv1d, DecodeStepsEqualPrefill) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t T = 9, C = 260, K = 4;
  std::vector<float> x = random_bf16_values(rng, size_t(T * C)), w = random_bf16_values(rng, size_t(C * K));
  std::vector<float> st0(size_t(kSlots * (K - 1) * C), 0.f);
  DevTensor dx = upload_f32(x, {T, C}), dw = upload_f32(w, {C, K});
  DevTensor s1 = upload_f32(st0, {kSlots, K - 1, C}), y1(DType::f32, {T, C});
  Rows one;
  one.add(int32_t(T), 3, false);
  backend().causal_conv1d(dx.t, dw.t, one.dev_batch(), s1.t, y1.t, true);
  DevTensor s2 = upload_f32(st0, {kSlots, K - 1, C}), y2(DType::f32, {T, C});
  y2.poison();
  for (int64_t t = 0; t < T; ++t) {
    Rows step;
    step.add(1, 3, t > 0);
    Tensor yt = y2.t.slice(t, t + 1);
    backend().causal_conv1d(dx.t.slice(t, t + 1), dw.t, step.dev_batch(), s2.t, yt, true);
  }
  EXPECT_EQ(download_f32(y2), download_f32(y1));
  EXPECT_EQ(download_f32(s2), download_f32(s1));
}

TEST(CudaGdnElementwise, MatchCpuOps) {
  RILL_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t M = 37, D = 128, H = 6, N = 4099;
  std::vector<float> x = random_bf16_values(rng, size_t(M * D), -3.f, 3.f);
  std::vector<float> z = random_bf16_values(rng, size_t(M * D), -4.f, 4.f);
  std::vector<float> w = random_bf16_values(rng, size_t(D), 0.5f, 1.5f);
  std::vector<float> a = random_bf16_values(rng, size_t(M * H), -8.f, 25.f);  // past softplus' threshold too
  std::vector<float> b = random_bf16_values(rng, size_t(M * H), -6.f, 6.f);
  std::vector<float> a_log = random_bf16_values(rng, size_t(H), -2.f, 1.f), dt_bias = random_bf16_values(rng, size_t(H));
  std::vector<float> sx = random_bf16_values(rng, size_t(N), -4.f, 4.f), sg = random_bf16_values(rng, size_t(N), -6.f, 6.f);
  const float scale = 1.f / std::sqrt(float(D));
  // CPU references.
  std::vector<float> l2_ref(x.size()), rms_ref(x.size()), g_ref(a.size()), beta_ref(a.size()), sm_ref(sx.size());
  {
    Tensor y = host(l2_ref, {M, D}), yr = host(rms_ref, {M, D}), g = host(g_ref, {M, H}), be = host(beta_ref, {M, H});
    Tensor so = host(sm_ref, {N});
    cpu().l2_norm(host(x, {M, D}), 1e-6f, scale, y);
    cpu().gated_rms_norm(host(x, {M, D}), host(z, {M, D}), host(w, {D}), 1e-6f, yr);
    cpu().gdn_gates(host(a, {M, H}), host(b, {M, H}), host(a_log, {H}), host(dt_bias, {H}), g, be);
    cpu().sigmoid_mul(host(sx, {N}), host(sg, {N}), so);
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::f32 ? 2e-6 : 1e-2;
    // l2_norm and gated_rms_norm in place, as the model calls them.
    DevTensor dx = upload_act(x, {M, D}, dt);
    backend().l2_norm(dx.t, 1e-6f, scale, dx.t);
    EXPECT_LT(rel_error(download_act(dx), to_double(l2_ref)), tol) << "l2_norm";
    DevTensor dx2 = upload_act(x, {M, D}, dt), dz = upload_act(z, {M, D}, dt), dw = upload_f32(w, {D});
    backend().gated_rms_norm(dx2.t, dz.t, dw.t, 1e-6f, dx2.t);
    const std::vector<float> rms = download_act(dx2);
    EXPECT_LT(rel_error(rms, to_double(rms_ref)), tol) << "gated_rms_norm";
    DevTensor da = upload_act(a, {M, H}, dt), db = upload_act(b, {M, H}, dt);
    DevTensor dal = upload_f32(a_log, {H}), ddt = upload_f32(dt_bias, {H}), dg(DType::f32, {M, H}), dbeta(DType::f32, {M, H});
    dg.poison();
    dbeta.poison();
    backend().gdn_gates(da.t, db.t, dal.t, ddt.t, dg.t, dbeta.t);
    EXPECT_LT(rel_error(download_f32(dg), to_double(g_ref)), 2e-6) << "gdn_gates g (f32 maths in both dtypes)";
    EXPECT_LT(rel_error(download_f32(dbeta), to_double(beta_ref)), tol) << "gdn_gates beta";
    DevTensor dsx = upload_act(sx, {N}, dt), dsg = upload_act(sg, {N}, dt);
    backend().sigmoid_mul(dsx.t, dsg.t, dsx.t);
    const std::vector<float> sm = download_act(dsx);
    EXPECT_LT(rel_error(sm, to_double(sm_ref)), tol) << "sigmoid_mul";
    if (dt == DType::bf16) {
      // transformers' bf16 roundings: bf16(x·bf16(sigmoid(gate))); bf16(bf16(bf16(x̂)·w)·silu(z)).
      std::vector<float> emul(sm.size());
      for (size_t i = 0; i < emul.size(); ++i) emul[i] = round_bf16(sx[i] * round_bf16(1.f / (1.f + std::exp(-sg[i]))));
      EXPECT_GT(exact_fraction(sm, emul), 0.99) << "sigmoid_mul roundings";
      std::vector<float> remul(rms.size());
      for (int64_t m = 0; m < M; ++m) {
        double ss = 0;
        for (int64_t d = 0; d < D; ++d) ss += double(x[size_t(m * D + d)]) * x[size_t(m * D + d)];
        const float inv = float(1.0 / std::sqrt(ss / double(D) + 1e-6));
        for (int64_t d = 0; d < D; ++d) {
          const float zz = z[size_t(m * D + d)];
          const float n = round_bf16(round_bf16(x[size_t(m * D + d)] * inv) * w[size_t(d)]);
          remul[size_t(m * D + d)] = round_bf16(n * (zz / (1.f + std::exp(-zz))));
        }
      }
      EXPECT_GT(exact_fraction(rms, remul), 0.98) << "gated_rms_norm roundings";
    }
  }
}

}  // namespace
}  // namespace rill
