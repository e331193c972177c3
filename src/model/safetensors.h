// model/safetensors.h — read-only, memory-mapped safetensors files (single or sharded).
// Invariant: every TensorInfo's byte range was validated against the file size and its
// dtype/shape at open; tensors are views into the mapping and live as long as the reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rill {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;                ///< inside the mapping
  size_t nbytes;
  std::filesystem::path file;      ///< for error messages
};

/// One mapped file.
class SafetensorsFile {
 public:
  /// Maps and validates `path`; throws rill::Error naming the file and the problem.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// All weights of a model directory: model.safetensors, or the shards named by
/// model.safetensors.index.json (every name in the index must be found in its shard).
class WeightStore {
 public:
  explicit WeightStore(const std::filesystem::path& model_dir);

  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  /// Throws rill::Error "missing weight NAME in DIR" when absent.
  const TensorInfo& get(const std::string& name) const;
  /// A CPU view of the tensor (read-only by contract; the mapping is private copy-on-write).
  Tensor view(const std::string& name) const;
  std::vector<std::string> names() const;
  size_t total_bytes() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

/// Writes tensors to a .safetensors file (used by `rill make-model` and the tests).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace rill
