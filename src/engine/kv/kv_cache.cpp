// engine/kv/kv_cache.cpp — see kv_cache.h.
#include "engine/kv/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace rill {

KvCache::KvCache(Kernels& kernels, const KvSpec& spec, int32_t num_blocks, int32_t block_size, bool prefix_caching)
    : kernels_(kernels),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      buffers_(kernels, spec, num_blocks, block_size),
      pool_(num_blocks),
      prefix_(num_blocks, block_size) {}

int32_t KvCache::blocks_for_budget(const KvSpec& spec, int32_t block_size, size_t bytes) {
  const size_t per_block = spec.bytes_per_block(block_size);
  RILL_CHECK(per_block > 0, "KV spec with zero bytes per block");
  return int32_t(std::min<size_t>(bytes / per_block, size_t(INT32_MAX / block_size)));
}

int32_t KvCache::match_prefix(std::span<const int32_t> tokens, int32_t limit, uint64_t ns_key, BlockTable& table) {
  RILL_CHECK(table.empty(), "match_prefix on a table that holds blocks");
  table.keys.clear();
  if (!prefix_caching_) return 0;
  const int32_t bs = block_size_;
  BlockHash parent = ns_key;
  for (int32_t b = 0; (b + 1) * bs <= limit; ++b) {
    std::span<const int32_t> block_tokens = tokens.subspan(size_t(b) * size_t(bs), size_t(bs));
    const BlockHash key = PrefixCache::block_key(parent, ns_key, block_tokens);
    std::optional<BlockId> hit = prefix_.lookup(key, parent, block_tokens);
    if (!hit) break;
    pool_.retain(*hit);
    table.blocks.push_back(*hit);
    table.keys.push_back(key);
    parent = key;
  }
  return int32_t(table.blocks.size()) * bs;
}

BlockId KvCache::allocate_or_die() {
  std::optional<BlockId> evicted;
  std::optional<BlockId> b = pool_.allocate(evicted);
  RILL_CHECK(b.has_value(), "KV pool exhausted after its capacity was checked");
  if (evicted)
    if (std::optional<BlockHash> key = prefix_.forget(*evicted)) evicted_keys_.push_back(*key);
  return *b;
}

bool KvCache::reserve(BlockTable& table, int32_t write_begin, int32_t num_tokens, std::vector<BlockCopy>& copies) {
  const int32_t have = int32_t(table.blocks.size());
  const int32_t want = blocks_for_tokens(num_tokens);
  const int32_t first_written = write_begin / block_size_;
  int32_t shared = 0;
  for (int32_t b = first_written; b < std::min(have, want); ++b)
    if (pool_.ref_count(table.blocks[size_t(b)]) > 1) ++shared;
  const int32_t needed = std::max(0, want - have) + shared;
  if (needed > pool_.num_available()) return false;
  for (int32_t b = first_written; b < std::min(have, want); ++b) {
    BlockId& slot = table.blocks[size_t(b)];
    if (pool_.ref_count(slot) <= 1) continue;
    // Copy-on-write: another table still holds the block, so it keeps its reference (and the
    // old contents stay valid until the copy ran, since nothing else writes a shared block).
    const BlockId fresh = allocate_or_die();
    copies.push_back({slot, fresh});
    pool_.release(slot);
    slot = fresh;
  }
  while (int32_t(table.blocks.size()) < want) table.blocks.push_back(allocate_or_die());
  return true;
}

void KvCache::commit(BlockTable& table, std::span<const int32_t> tokens, int32_t num_computed, uint64_t ns_key) {
  if (!prefix_caching_) return;
  const int32_t bs = block_size_;
  const int32_t full = std::min<int32_t>(num_computed / bs, int32_t(table.blocks.size()));
  while (int32_t(table.keys.size()) < full) {
    const size_t b = table.keys.size();
    const BlockHash parent = b == 0 ? ns_key : table.keys[b - 1];
    std::span<const int32_t> block_tokens = tokens.subspan(b * size_t(bs), size_t(bs));
    const BlockHash key = PrefixCache::block_key(parent, ns_key, block_tokens);
    const BlockId block = table.blocks[b];
    if (!prefix_.holds(block) && prefix_.insert(key, parent, block_tokens, block)) pool_.set_cached(block, true);
    table.keys.push_back(key);
  }
}

int32_t KvCache::retain_cached(std::span<const BlockHash> keys, BlockTable& to) {
  RILL_CHECK(to.empty(), "retain_cached into a table that holds blocks");
  to.keys.clear();
  for (BlockHash key : keys) {
    std::optional<BlockId> block = prefix_.find(key);
    if (!block) break;
    pool_.retain(*block);
    to.blocks.push_back(*block);
    to.keys.push_back(key);
  }
  return int32_t(to.blocks.size());
}

void KvCache::fork(const BlockTable& from, BlockTable& to) {
  RILL_CHECK(to.empty(), "fork into a table that holds blocks");
  for (BlockId b : from.blocks) pool_.retain(b);
  to.blocks = from.blocks;
  to.keys = from.keys;
}

void KvCache::truncate(BlockTable& table, int32_t num_blocks) {
  RILL_CHECK(num_blocks >= 0, "truncate to {} blocks", num_blocks);
  while (int32_t(table.blocks.size()) > num_blocks) {
    pool_.release(table.blocks.back());
    table.blocks.pop_back();
  }
  if (int32_t(table.keys.size()) > num_blocks) table.keys.resize(size_t(num_blocks));
}

void KvCache::free(BlockTable& table) {
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) pool_.release(*it);
  table.blocks.clear();
  table.keys.clear();
}

void KvCache::copy_blocks(std::span<const BlockCopy> copies) {
  if (copies.empty()) return;
  copy_host_.clear();
  for (const BlockCopy& c : copies) {
    copy_host_.push_back(c.src);
    copy_host_.push_back(c.dst);
  }
  const size_t bytes = copy_host_.size() * sizeof(int32_t);
  if (copy_buffer_.size() < bytes) copy_buffer_ = Buffer(kernels_.allocator(), std::max<size_t>(bytes, 4096));
  Tensor pairs = copy_buffer_.as(DType::i32, {int64_t(copies.size()), 2});
  kernels_.upload(copy_host_.data(), pairs);
  for (KvLayer& layer : buffers_.layers()) kernels_.copy_kv_blocks(layer, pairs);
}

void KvCache::clear_prefix_cache() {
  for (BlockId b : prefix_.clear()) {
    pool_.set_cached(b, false);
    evicted_keys_.push_back(prefix_.key_of(b));
  }
}

void KvCache::check_invariants(std::span<const BlockTable* const> tables) const {
  pool_.check_invariants();
  std::vector<int32_t> refs(size_t(num_blocks()), 0);
  for (const BlockTable* t : tables) {
    RILL_CHECK(t->keys.size() <= t->blocks.size(), "table has more keys than blocks");
    for (BlockId b : t->blocks) ++refs[size_t(b)];
  }
  for (BlockId b = 0; b < num_blocks(); ++b) {
    RILL_CHECK(refs[size_t(b)] == pool_.ref_count(b), "block {}: refcount {} but {} tables hold it", b,
               pool_.ref_count(b), refs[size_t(b)]);
    RILL_CHECK(prefix_.holds(b) == pool_.is_cached(b), "block {}: prefix index and pool disagree", b);
  }
}

}  // namespace rill
