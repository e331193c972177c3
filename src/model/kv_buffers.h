// model/kv_buffers.h — the memory of the paged KV cache: per attention layer, K and V block pools
// [num_blocks, block_size, kv_heads, head_dim] on the kernels' device. Which block belongs to
// which sequence is decided above (engine/KvCache); this class only owns storage, and
// SimpleBlockAllocator is the minimal free list used by tools and tests that run one model
// directly.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "kernels/kernels.h"

namespace rill {

/// What one model needs per KV block (filled by the model; the same for every attention layer here).
struct KvSpec {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::f32;
  /// Bytes one block of `block_size` tokens takes over all layers (K and V).
  size_t bytes_per_block(int32_t block_size) const {
    return size_t(2) * num_layers * block_size * num_kv_heads * head_dim * dtype_size(dtype);
  }
};

class KvBuffers {
 public:
  KvBuffers(Kernels& kernels, const KvSpec& spec, int32_t num_blocks, int32_t block_size);
  std::span<KvLayer> layers() { return layers_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }

 private:
  std::vector<Buffer> storage_;
  std::vector<KvLayer> layers_;
  int32_t num_blocks_;
  int32_t block_size_;
};

/// A LIFO free list of block ids [0, num_blocks).
class SimpleBlockAllocator {
 public:
  explicit SimpleBlockAllocator(int32_t num_blocks);
  std::optional<int32_t> allocate();
  void release(int32_t block);
  int32_t num_free() const { return int32_t(free_.size()); }

 private:
  std::vector<int32_t> free_;
};

}  // namespace rill
