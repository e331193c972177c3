// engine/state_pool.h — StatePool: fixed-size per-sequence state for hybrid models (the conv and
// recurrent state of Gated DeltaNet layers), and StateSnapshots: copies of that state at block
// boundaries for the prefix cache.
//
// The state itself lives in the model (Model::reserve_state_slots, save/restore/copy_state); the
// pool hands its slot ids to sequences. A running sequence of a hybrid model holds one slot from
// admission until it finishes, is cancelled or is preempted (a preempted sequence's state is
// simply dropped: it is recomputed, or restored from a snapshot, when it is admitted again).
// Invariant: a slot is either free or held by exactly one live sequence.
//
// A snapshot is the state after the tokens of a whole-block prefix, keyed by the prefix-cache key
// of the block that ends at that boundary (the key names the whole prefix). Snapshots are bounded
// by a byte budget and evicted least recently used; the engine drops a snapshot as soon as its key
// leaves the prefix cache, so a snapshot is only ever restored together with the KV blocks of the
// same prefix (a restore needs both). Sessions (engine/session.h) pin the snapshot of their
// last prompt boundary: a pinned snapshot is never the LRU victim, and at most half of the
// capacity can be pinned so that an insert always finds a victim.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "engine/kv/prefix_cache.h"
#include "model/model.h"

namespace rill {

using SlotId = int32_t;

class StatePool {
 public:
  /// `num_slots` slots of `model`'s state (reserved in the model now); none when the model has no
  /// recurrent state.
  StatePool(Model& model, int32_t num_slots);

  /// Bytes of state one slot holds over all layers (0: the model has no recurrent state).
  size_t bytes_per_slot() const { return bytes_per_slot_; }
  /// True for a hybrid model: sequences need a slot to run.
  bool enabled() const { return num_slots() > 0; }
  int32_t num_slots() const { return int32_t(used_.size()); }
  int32_t num_free() const { return int32_t(free_.size()); }
  /// A slot whose next row must start at position 0 (or be restored); nullopt when all are taken.
  std::optional<SlotId> allocate();
  void release(SlotId slot);
  /// Copies `from`'s state into `to` (n > 1 sequences forked from one prompt).
  void copy(SlotId from, SlotId to);
  /// Copies the slot's state into `snapshot`; returns the tokens that state has consumed.
  int64_t save(SlotId slot, Tensor& snapshot);
  /// Makes `snapshot` (the state after `position` tokens) the slot's state.
  void restore(SlotId slot, const Tensor& snapshot, int64_t position);
  bool is_used(SlotId slot) const { return used_[size_t(slot)] != 0; }
  /// RILL_CHECKs that `held` (every live sequence's slots) are exactly the used slots, once each.
  void check_invariants(const std::vector<SlotId>& held) const;

 private:
  Model& model_;
  size_t bytes_per_slot_ = 0;
  std::vector<uint8_t> used_;
  std::vector<SlotId> free_;  // LIFO, lowest id on top at start
};

/// One stored state: the state after `position` tokens.
struct StateSnapshot {
  Buffer buffer;
  Tensor state;  ///< f32 view of buffer
  int64_t position = 0;
};

class StateSnapshots {
 public:
  /// Holds at most budget_bytes / bytes_per_snapshot snapshots (none when either is 0).
  StateSnapshots(Kernels& kernels, size_t bytes_per_snapshot, size_t budget_bytes);

  bool enabled() const { return capacity_ > 0; }
  int32_t capacity() const { return capacity_; }
  int32_t count() const { return int32_t(entries_.size()); }
  /// Device bytes held by stored snapshots.
  size_t bytes() const { return size_t(count()) * bytes_per_snapshot_; }
  size_t budget_bytes() const { return size_t(capacity_) * bytes_per_snapshot_; }
  int64_t num_evicted() const { return num_evicted_; }
  bool contains(BlockHash key) const { return entries_.count(key) != 0; }
  /// Keys of the stored snapshots, least recently used first.
  const std::list<BlockHash>& keys() const { return lru_; }
  /// The snapshot under `key`, now the most recently used; nullptr when there is none.
  const StateSnapshot* find(BlockHash key);
  /// A snapshot to fill under `key` (new, or the least recently used one's memory when full).
  StateSnapshot& insert(BlockHash key);
  /// Drops the snapshot under `key`, if any (its prefix left the prefix cache), pinned or not.
  void erase(BlockHash key);
  /// One more pin on the snapshot under `key` (not evicted by insert() while pinned). False, and
  /// no pin, when there is none or when half of the capacity is pinned already.
  bool pin(BlockHash key);
  /// One pin less on the snapshot under `key` (nothing when it was erased meanwhile).
  void unpin(BlockHash key);
  bool is_pinned(BlockHash key) const;
  /// Snapshots with at least one pin.
  int32_t num_pinned() const { return num_pinned_; }
  /// RILL_CHECKs the LRU list against the index and the byte bound.
  void check_invariants() const;

 private:
  struct Entry {
    StateSnapshot snapshot;
    std::list<BlockHash>::iterator lru;
    int32_t pins = 0;
  };
  Kernels& kernels_;
  size_t bytes_per_snapshot_;
  int32_t capacity_ = 0;
  std::unordered_map<BlockHash, Entry> entries_;
  std::list<BlockHash> lru_;  // front: least recently used
  std::vector<Buffer> spare_;  // memory of erased snapshots, reused before allocating
  int64_t num_evicted_ = 0;
  int32_t num_pinned_ = 0;
};

}  // namespace rill
