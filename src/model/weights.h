// model/weights.h — WeightLoader: fetches named weights from a WeightStore onto the kernels'
// device, checking each shape against what the config implies. On the CPU a weight whose file
// dtype is the wanted dtype is used in place (zero copy from the mapping); anything else is
// converted into a Buffer the loader owns.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/kernels.h"
#include "model/safetensors.h"

namespace rill {

class WeightLoader {
 public:
  /// `matrix_dtype`: dtype for 2-D weights (and their biases/norms); nullopt keeps the file dtype.
  WeightLoader(const WeightStore& store, Kernels& kernels, std::optional<DType> matrix_dtype);

  /// The weight `name`, which must have exactly `shape`.
  Tensor get(const std::string& name, std::vector<int64_t> shape);
  /// Like get(), or an undefined Tensor when the file lacks it.
  Tensor get_optional(const std::string& name, std::vector<int64_t> shape);
  /// Row-wise concatenation of several weights (e.g. gate and up projections) into one tensor.
  Tensor concat_rows(const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes);
  /// get() / concat_rows() for a linear layer's weight [out, in], read from then on only whole, as the
  /// weight operand of matmul ops: the backend may store it in a layout of its own
  /// (Kernels::prepare_linear_weight). Not for a table also read otherwise (a tied embedding).
  Tensor linear(const std::string& name, std::vector<int64_t> shape);
  Tensor linear_rows(const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes);

  size_t device_bytes() const { return device_bytes_; }
  /// Buffers backing converted weights; move them into the model.
  std::vector<Buffer> take_buffers() { return std::move(buffers_); }

 private:
  DType target_dtype(DType file_dtype) const;
  void check_shape(const TensorInfo& info, const std::vector<int64_t>& shape) const;

  const WeightStore& store_;
  Kernels& kernels_;
  std::optional<DType> matrix_dtype_;
  std::vector<Buffer> buffers_;
  size_t device_bytes_ = 0;
};

}  // namespace rill
