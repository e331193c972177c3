// kernels/cpu/check.cpp — argument checks for the CPU ops (messages start with "[op]").
#include "kernels/cpu/check.h"

#include <string>

namespace rill::cpu {

void check_tensor(const char* op, const char* name, const Tensor& t, int rank) {
  RILL_ENSURE(t.defined(), "[{}] {}: tensor is undefined", op, name);
  RILL_ENSURE(t.device() == Device::cpu, "[{}] {}: expected a CPU tensor, got {}", op, name, t.describe());
  RILL_ENSURE(t.ndim() == rank, "[{}] {}: expected rank {}, got {}", op, name, rank, t.describe());
  RILL_ENSURE(t.is_contiguous(), "[{}] {}: expected a contiguous tensor, got {}", op, name, t.describe());
  RILL_ENSURE(t.numel() == 0 || t.data() != nullptr, "[{}] {}: null data for {}", op, name, t.describe());
}

void check_dtype(const char* op, const char* name, const Tensor& t, std::initializer_list<DType> allowed) {
  std::string names;
  for (DType d : allowed) {
    if (t.dtype() == d) return;
    names += names.empty() ? "" : " or ";
    names += dtype_name(d);
  }
  fail("[{}] {}: expected dtype {}, got {}", op, name, names, t.describe());
}

void check_dim(const char* op, const char* name, const Tensor& t, int d, int64_t expected) {
  RILL_ENSURE(t.size(d) == expected, "[{}] {}: dimension {} must be {}, got {}", op, name, d, expected,
              t.describe());
}

void check_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  bool same = a.ndim() == b.ndim();
  for (int d = 0; same && d < a.ndim(); ++d) same = a.size(d) == b.size(d);
  RILL_ENSURE(same, "[{}] {} and {} must have the same shape, got {} and {}", op, name_a, name_b, a.describe(),
              b.describe());
}

void check_no_overlap(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  auto a0 = reinterpret_cast<uintptr_t>(a.data());
  auto b0 = reinterpret_cast<uintptr_t>(b.data());
  bool disjoint = a0 + a.nbytes() <= b0 || b0 + b.nbytes() <= a0;
  RILL_ENSURE(a.nbytes() == 0 || b.nbytes() == 0 || disjoint, "[{}] {} must not overlap {} ({} and {})", op,
              name_a, name_b, a.describe(), b.describe());
}

}  // namespace rill::cpu
