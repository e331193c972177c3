// model/weights.cpp — shape checks, dtype conversion and upload of weights.
#include "model/weights.h"

#include <cstring>

#include "core/error.h"

namespace rill {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const bf16_t*>(data)[i]);
    case DType::f16: return f16_to_f32(static_cast<const f16_t*>(data)[i]);
    default: return 0;
  }
}

// Host conversion of n elements from `src` (dtype s) into `dst` (dtype d).
void convert_host(const void* src, DType s, void* dst, DType d, size_t n) {
  if (s == d) {
    std::memcpy(dst, src, n * dtype_size(d));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    float v = load_as_f32(src, s, i);
    switch (d) {
      case DType::f32: static_cast<float*>(dst)[i] = v; break;
      case DType::bf16: static_cast<bf16_t*>(dst)[i] = f32_to_bf16(v); break;
      case DType::f16: static_cast<f16_t*>(dst)[i] = f32_to_f16(v); break;
      default: RILL_CHECK(false, "unsupported weight dtype {}", dtype_name(d));
    }
  }
}

}  // namespace

WeightLoader::WeightLoader(const WeightStore& store, Kernels& kernels, std::optional<DType> matrix_dtype)
    : store_(store), kernels_(kernels), matrix_dtype_(matrix_dtype) {}

DType WeightLoader::target_dtype(DType file_dtype) const {
  if (matrix_dtype_) return *matrix_dtype_;
  // GPU kernels compute on bf16 weights; the CPU keeps what the file has (f16 widened to f32).
  if (kernels_.device() != Device::cpu) return kernels_.activation_dtype();
  if (file_dtype == DType::f16) return kernels_.activation_dtype();
  return file_dtype;
}

void WeightLoader::check_shape(const TensorInfo& info, const std::vector<int64_t>& shape) const {
  if (info.shape != shape)
    fail("{}: weight '{}' has shape {} but the config implies {}", info.file.string(), info.name,
         shape_str(info.shape), shape_str(shape));
  if (info.dtype != DType::f32 && info.dtype != DType::bf16 && info.dtype != DType::f16)
    fail("{}: weight '{}' has dtype {}; rill reads f32, f16 and bf16 weights", info.file.string(), info.name,
         dtype_name(info.dtype));
}

Tensor WeightLoader::get(const std::string& name, std::vector<int64_t> shape) {
  const TensorInfo& info = store_.get(name);
  check_shape(info, shape);
  DType target = target_dtype(info.dtype);
  const size_t n = info.nbytes / dtype_size(info.dtype);
  device_bytes_ += n * dtype_size(target);
  if (kernels_.device() == Device::cpu && target == info.dtype)
    return Tensor(const_cast<void*>(info.data), info.dtype, shape);
  Buffer& buf = buffers_.emplace_back(kernels_.allocator(), n * dtype_size(target));
  Tensor t = buf.as(target, shape);
  if (kernels_.device() == Device::cpu) {
    convert_host(info.data, info.dtype, t.data(), target, n);
  } else {
    std::vector<char> staging(n * dtype_size(target));
    convert_host(info.data, info.dtype, staging.data(), target, n);
    kernels_.upload(staging.data(), t);
  }
  return t;
}

Tensor WeightLoader::linear(const std::string& name, std::vector<int64_t> shape) {
  Tensor t = get(name, std::move(shape));
  kernels_.prepare_linear_weight(t);
  return t;
}

Tensor WeightLoader::linear_rows(const std::vector<std::string>& names,
                                 const std::vector<std::vector<int64_t>>& shapes) {
  Tensor t = concat_rows(names, shapes);
  kernels_.prepare_linear_weight(t);
  return t;
}

Tensor WeightLoader::get_optional(const std::string& name, std::vector<int64_t> shape) {
  if (!store_.contains(name)) return Tensor();
  return get(name, std::move(shape));
}

Tensor WeightLoader::concat_rows(const std::vector<std::string>& names,
                                 const std::vector<std::vector<int64_t>>& shapes) {
  RILL_CHECK(names.size() == shapes.size() && !names.empty());
  int64_t rows = 0;
  std::vector<const TensorInfo*> infos;
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorInfo& info = store_.get(names[i]);
    check_shape(info, shapes[i]);
    RILL_CHECK(shapes[i].size() == shapes[0].size());
    rows += shapes[i][0];
    infos.push_back(&info);
  }
  std::vector<int64_t> shape = shapes[0];
  shape[0] = rows;
  DType target = target_dtype(infos[0]->dtype);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t bytes = size_t(numel) * dtype_size(target);
  device_bytes_ += bytes;
  Buffer& buf = buffers_.emplace_back(kernels_.allocator(), bytes);
  Tensor t = buf.as(target, shape);
  std::vector<char> staging;
  char* dst = static_cast<char*>(t.data());
  if (kernels_.device() != Device::cpu) {
    staging.resize(bytes);
    dst = staging.data();
  }
  for (const TensorInfo* info : infos) {
    size_t n = info->nbytes / dtype_size(info->dtype);
    convert_host(info->data, info->dtype, dst, target, n);
    dst += n * dtype_size(target);
  }
  if (kernels_.device() != Device::cpu) kernels_.upload(staging.data(), t);
  return t;
}

}  // namespace rill
