// kernels/cpu/check.h — up-front argument checks shared by the CPU ops.
// Every failure throws rill::Error with a message "[op] name: ..." naming the offending argument;
// nothing here inspects tensor contents (ops that read indices check those themselves).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/error.h"
#include "core/tensor.h"

namespace rill::cpu {

/// Defined, on the CPU, contiguous and of the given rank.
void check_tensor(const char* op, const char* name, const Tensor& t, int rank);
/// The dtype is one of `allowed`.
void check_dtype(const char* op, const char* name, const Tensor& t, std::initializer_list<DType> allowed);
/// Dimension d of t equals `expected`.
void check_dim(const char* op, const char* name, const Tensor& t, int d, int64_t expected);
/// a and b have identical shapes.
void check_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b);
/// The memory of a and b does not overlap (for outputs that must not alias an input).
void check_no_overlap(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b);

}  // namespace rill::cpu
