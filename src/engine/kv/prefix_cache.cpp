// engine/kv/prefix_cache.cpp — see prefix_cache.h.
#include "engine/kv/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace rill {

PrefixCache::PrefixCache(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), key_(size_t(num_blocks), 0), parent_(size_t(num_blocks), 0),
      tokens_(size_t(num_blocks) * size_t(block_size), 0), has_(size_t(num_blocks), 0) {
  by_key_.reserve(size_t(num_blocks));
}

uint64_t PrefixCache::namespace_key(std::string_view ns) {
  return XXH3_64bits_withSeed(ns.data(), ns.size(), 0x72696c6c6e73ull);  // "rillns"
}

BlockHash PrefixCache::block_key(BlockHash parent, uint64_t ns_key, std::span<const int32_t> tokens) {
  // The (parent, namespace) pair is hashed into the seed of the tokens' hash.
  const uint64_t head[2] = {parent, ns_key};
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), XXH3_64bits(head, sizeof head));
}

std::optional<BlockId> PrefixCache::lookup(BlockHash key, BlockHash parent, std::span<const int32_t> tokens) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  const BlockId b = it->second;
  if (parent_[size_t(b)] != parent || int32_t(tokens.size()) != block_size_ ||
      !std::equal(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(size_t(b) * size_t(block_size_))))
    return std::nullopt;
  return b;
}

bool PrefixCache::insert(BlockHash key, BlockHash parent, std::span<const int32_t> tokens, BlockId block) {
  RILL_CHECK(int32_t(tokens.size()) == block_size_, "prefix cache entries are full blocks");
  RILL_CHECK(!has_[size_t(block)], "block {} already holds a prefix-cache entry", block);
  if (!by_key_.emplace(key, block).second) return false;
  key_[size_t(block)] = key;
  parent_[size_t(block)] = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(size_t(block) * size_t(block_size_)));
  has_[size_t(block)] = 1;
  return true;
}

std::optional<BlockHash> PrefixCache::forget(BlockId block) {
  if (!has_[size_t(block)]) return std::nullopt;
  auto it = by_key_.find(key_[size_t(block)]);
  RILL_CHECK(it != by_key_.end() && it->second == block, "prefix cache entry of block {} is missing", block);
  by_key_.erase(it);
  has_[size_t(block)] = 0;
  return key_[size_t(block)];
}

std::vector<BlockId> PrefixCache::clear() {
  std::vector<BlockId> out;
  for (auto& [key, block] : by_key_) {
    out.push_back(block);
    has_[size_t(block)] = 0;
  }
  by_key_.clear();
  return out;
}

}  // namespace rill
