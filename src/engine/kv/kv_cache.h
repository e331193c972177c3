// engine/kv/kv_cache.h — KvCache: the paged KV cache of the engine. Owns the per-layer block
// storage (model/KvBuffers), the reference counts (BlockPool) and the content index
// (PrefixCache); sequences own BlockTables. Invariant: a table's blocks are retained once by the
// table; a block referenced by two tables is never written (reserve() copies it first).
//
// Layer groups: all attention layers of the supported models share one block-id space and one
// table per sequence (one group, full attention). Layouts that differ per layer (a sliding-window
// group that releases blocks behind its window, a KV-sharing group that owns no blocks, another
// dtype) become more groups with a table each; every operation here takes the table it works on,
// so the scheduler's calls do not change when groups are added. Not implemented yet: groups > 1.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/prefix_cache.h"
#include "model/kv_buffers.h"

namespace rill {

/// One sequence's blocks in one layer group: blocks[i] holds tokens [i * bs, (i + 1) * bs).
struct BlockTable {
  std::vector<BlockId> blocks;
  /// Prefix keys of the first keys.size() blocks (each full, and found in or offered to the cache).
  std::vector<BlockHash> keys;
  bool empty() const { return blocks.empty(); }
};

/// A pending copy-on-write: block `src`'s contents go to `dst` before the step's forward.
struct BlockCopy {
  BlockId src, dst;
};

class KvCache {
 public:
  KvCache(Kernels& kernels, const KvSpec& spec, int32_t num_blocks, int32_t block_size, bool prefix_caching);

  /// How many blocks `bytes` of KV memory hold (at least 0).
  static int32_t blocks_for_budget(const KvSpec& spec, int32_t block_size, size_t bytes);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  int32_t num_available() const { return pool_.num_available(); }
  int32_t blocks_for_tokens(int32_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  std::span<KvLayer> layers() { return buffers_.layers(); }
  const BlockPool& pool() const { return pool_; }
  const PrefixCache& prefix_cache() const { return prefix_; }

  /// Appends to the empty `table` the cached blocks of the longest prefix of tokens[0, limit) in
  /// whole blocks (retaining them) and records their keys. Returns the tokens covered.
  int32_t match_prefix(std::span<const int32_t> tokens, int32_t limit, uint64_t ns_key, BlockTable& table);
  /// Makes `table` cover `num_tokens` tokens and makes the blocks written by tokens
  /// [write_begin, num_tokens) private to it, queueing their copies in `copies`.
  /// All or nothing: returns false (and changes nothing) when the pool cannot supply the blocks.
  bool reserve(BlockTable& table, int32_t write_begin, int32_t num_tokens, std::vector<BlockCopy>& copies);
  /// Offers the full blocks of tokens[0, num_computed) not yet keyed to the prefix cache.
  void commit(BlockTable& table, std::span<const int32_t> tokens, int32_t num_computed, uint64_t ns_key);
  /// Appends to the empty `to` the blocks the prefix cache holds under `keys` (a chain of prefix
  /// keys, e.g. a finished sequence's), retaining them, up to the first key it no longer holds.
  /// Session pins (engine/session.h). Returns the blocks taken.
  int32_t retain_cached(std::span<const BlockHash> keys, BlockTable& to);
  /// `to` (empty) shares every block of `from` (n > 1 sequences of one request).
  void fork(const BlockTable& from, BlockTable& to);
  /// Releases the table's blocks from index `num_blocks` on (the last first), keeping the first ones.
  void truncate(BlockTable& table, int32_t num_blocks);
  /// Releases every block of the table, the last first (the first blocks of a prompt are the most
  /// shared, so they are the last to be evicted), and empties it.
  void free(BlockTable& table);
  /// Runs queued copies on the device (before the forward that writes the new blocks).
  void copy_blocks(std::span<const BlockCopy> copies);
  /// Drops every prefix-cache entry whose block is not in use.
  void clear_prefix_cache();
  /// Keys whose blocks left the prefix cache since the last call (state snapshots keyed by them
  /// are dropped by the engine).
  std::vector<BlockHash> take_evicted_keys() { return std::exchange(evicted_keys_, {}); }

  /// RILL_CHECKs pool and index consistency; `tables` (all live tables) must account for every
  /// reference: a block's refcount equals the number of tables that hold it.
  void check_invariants(std::span<const BlockTable* const> tables) const;

 private:
  BlockId allocate_or_die();

  Kernels& kernels_;
  int32_t block_size_;
  bool prefix_caching_;
  KvBuffers buffers_;
  BlockPool pool_;
  PrefixCache prefix_;
  Buffer copy_buffer_;  // device i32 [pairs, 2] for copy_blocks
  std::vector<int32_t> copy_host_;
  std::vector<BlockHash> evicted_keys_;
};

}  // namespace rill
