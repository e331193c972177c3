// engine/kv/block_pool.h — BlockPool: the reference counts of the KV blocks of one block-id space.
// Invariant: every block is in exactly one of three states — used (refcount > 0), free (refcount 0,
// on the free list) or cached (refcount 0, holds a prefix-cache entry, on the LRU list). It owns
// no memory (model/KvBuffers does) and knows nothing about hashes (kv/PrefixCache does).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace rill {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return int32_t(ref_.size()); }
  /// Blocks allocate() can hand out: free ones plus cached ones with refcount 0 (evictable).
  int32_t num_available() const { return int32_t(free_.size()) + num_evictable_; }
  int32_t num_evictable() const { return num_evictable_; }
  int32_t num_used() const { return num_blocks() - num_available(); }

  /// A block with refcount 1: from the free list, else the least recently released cached block,
  /// whose eviction is reported in `evicted` (the caller drops its prefix-cache entry).
  /// nullopt when every block is in use: the caller preempts.
  std::optional<BlockId> allocate(std::optional<BlockId>& evicted);
  /// One more reference; revives a cached block with refcount 0 (takes it off the LRU list).
  void retain(BlockId id);
  /// One reference less; at zero the block goes to the LRU list if cached, else to the free list.
  void release(BlockId id);
  int32_t ref_count(BlockId id) const { return ref_[size_t(id)]; }

  /// Marks a block as holding (or no longer holding) a prefix-cache entry.
  void set_cached(BlockId id, bool cached);
  bool is_cached(BlockId id) const { return cached_[size_t(id)] != 0; }

  /// RILL_CHECKs the three-state invariant and the list links (tests call it after every step).
  void check_invariants() const;

 private:
  void lru_push_back(BlockId id);
  void lru_unlink(BlockId id);

  std::vector<int32_t> ref_;
  std::vector<uint8_t> cached_;
  std::vector<BlockId> free_;              // LIFO
  std::vector<BlockId> prev_, next_;       // intrusive LRU list of evictable blocks (-1 ends)
  BlockId lru_head_ = -1, lru_tail_ = -1;  // head: least recently released
  int32_t num_evictable_ = 0;
};

}  // namespace rill
