// engine/kv/prefix_cache.h — PrefixCache: full KV blocks found by content. A block's key is
// xxh3(parent key, namespace key, its tokens); the first block's parent is the namespace key, so
// a key names the whole prefix up to the block's end. Entries also keep their parent key and
// tokens, and a lookup compares them, so a 64-bit hash collision is a miss, never a wrong hit.
// Invariant: an entry exists iff BlockPool::is_cached(block). Eviction order is BlockPool's LRU.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"

namespace rill {

using BlockHash = uint64_t;

class PrefixCache {
 public:
  PrefixCache(int32_t num_blocks, int32_t block_size);

  /// The key of a namespace string (model identity, KV layout, adapter, the caller's namespace).
  static uint64_t namespace_key(std::string_view ns);
  /// Key of a full block of `block_size` tokens following the block keyed `parent`
  /// (the namespace key for the first block).
  static BlockHash block_key(BlockHash parent, uint64_t ns_key, std::span<const int32_t> tokens);

  /// The cached block for (key, parent, tokens), if any.
  std::optional<BlockId> lookup(BlockHash key, BlockHash parent, std::span<const int32_t> tokens) const;
  /// Registers `block` (which holds `tokens` after `parent`) under `key`. Returns false and does
  /// nothing when the key is already cached by another block (both stay valid; the first wins).
  bool insert(BlockHash key, BlockHash parent, std::span<const int32_t> tokens, BlockId block);
  /// Drops the entry of an evicted block; returns its key (nullopt when it held none).
  std::optional<BlockHash> forget(BlockId block);
  /// True when some block is cached under `key`.
  bool has_key(BlockHash key) const { return by_key_.count(key) != 0; }
  /// The block cached under `key` (the key names the whole prefix), if any.
  std::optional<BlockId> find(BlockHash key) const {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? std::nullopt : std::optional<BlockId>(it->second);
  }
  /// Drops every entry (the caller clears BlockPool's cached marks).
  std::vector<BlockId> clear();

  int32_t num_entries() const { return int32_t(by_key_.size()); }
  bool holds(BlockId block) const { return has_[size_t(block)] != 0; }
  /// The key `block` was last registered under (meaningful while holds(block), and right after clear()).
  BlockHash key_of(BlockId block) const { return key_[size_t(block)]; }

 private:
  int32_t block_size_;
  std::unordered_map<BlockHash, BlockId> by_key_;
  std::vector<BlockHash> key_, parent_;  // per block
  std::vector<int32_t> tokens_;          // [num_blocks * block_size]
  std::vector<uint8_t> has_;
};

}  // namespace rill
