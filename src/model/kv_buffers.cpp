// model/kv_buffers.cpp — allocation of the per-layer block pools.
#include "model/kv_buffers.h"

#include "core/error.h"

namespace rill {

KvBuffers::KvBuffers(Kernels& kernels, const KvSpec& spec, int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  RILL_ENSURE(num_blocks > 0 && block_size > 0, "KV cache: need at least one block (got {} blocks of {})",
              num_blocks, block_size);
  const std::vector<int64_t> shape{num_blocks, block_size, spec.num_kv_heads, spec.head_dim};
  const size_t bytes = size_t(num_blocks) * block_size * spec.num_kv_heads * spec.head_dim * dtype_size(spec.dtype);
  storage_.reserve(size_t(spec.num_layers) * 2);
  for (int32_t l = 0; l < spec.num_layers; ++l) {
    storage_.emplace_back(kernels.allocator(), bytes);
    storage_.emplace_back(kernels.allocator(), bytes);
    layers_.push_back(KvLayer{storage_[storage_.size() - 2].as(spec.dtype, shape),
                              storage_.back().as(spec.dtype, shape)});
  }
}

SimpleBlockAllocator::SimpleBlockAllocator(int32_t num_blocks) {
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> SimpleBlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void SimpleBlockAllocator::release(int32_t block) { free_.push_back(block); }

}  // namespace rill
