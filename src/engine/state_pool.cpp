// engine/state_pool.cpp — see state_pool.h.
#include "engine/state_pool.h"

#include <algorithm>

#include "core/error.h"

namespace rill {

StatePool::StatePool(Model& model, int32_t num_slots) : model_(model), bytes_per_slot_(model.state_bytes_per_sequence()) {
  if (bytes_per_slot_ == 0) return;
  RILL_ENSURE(num_slots > 0, "max_state_slots: a hybrid model needs at least one state slot, got {}", num_slots);
  model_.reserve_state_slots(num_slots);
  used_.assign(size_t(num_slots), 0);
  for (SlotId s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

std::optional<SlotId> StatePool::allocate() {
  if (free_.empty()) return std::nullopt;
  const SlotId s = free_.back();
  free_.pop_back();
  used_[size_t(s)] = 1;
  model_.release_state(s);  // no state held: the next row must start at 0 or be restored
  return s;
}

void StatePool::release(SlotId slot) {
  RILL_CHECK(slot >= 0 && slot < num_slots() && used_[size_t(slot)], "state slot {} released twice or never taken",
             slot);
  used_[size_t(slot)] = 0;
  model_.release_state(slot);
  free_.push_back(slot);
}

void StatePool::copy(SlotId from, SlotId to) {
  RILL_CHECK(is_used(from) && is_used(to), "state copy {} -> {} between slots not taken", from, to);
  model_.copy_state(from, to);
}

int64_t StatePool::save(SlotId slot, Tensor& snapshot) {
  RILL_CHECK(is_used(slot), "saving state slot {} that is not taken", slot);
  return model_.save_state(slot, snapshot);
}

void StatePool::restore(SlotId slot, const Tensor& snapshot, int64_t position) {
  RILL_CHECK(is_used(slot), "restoring into state slot {} that is not taken", slot);
  model_.restore_state(slot, snapshot, position);
}

void StatePool::check_invariants(const std::vector<SlotId>& held) const {
  std::vector<int32_t> count(used_.size(), 0);
  for (SlotId s : held) {
    RILL_CHECK(s >= 0 && s < num_slots(), "a sequence holds state slot {} outside [0, {})", s, num_slots());
    RILL_CHECK(++count[size_t(s)] == 1, "state slot {} is held by two sequences", s);
  }
  int32_t used = 0;
  for (size_t s = 0; s < used_.size(); ++s) {
    RILL_CHECK(bool(count[s]) == bool(used_[s]), "state slot {}: used {} but held by {} sequences", s, int(used_[s]),
               count[s]);
    used += used_[s];
  }
  RILL_CHECK(used + num_free() == num_slots(), "state slots: {} used + {} free != {}", used, num_free(), num_slots());
}

StateSnapshots::StateSnapshots(Kernels& kernels, size_t bytes_per_snapshot, size_t budget_bytes)
    : kernels_(kernels), bytes_per_snapshot_(bytes_per_snapshot) {
  if (bytes_per_snapshot > 0) capacity_ = int32_t(std::min<size_t>(budget_bytes / bytes_per_snapshot, 1 << 30));
}

const StateSnapshot* StateSnapshots::find(BlockHash key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return &it->second.snapshot;
}

StateSnapshot& StateSnapshots::insert(BlockHash key) {
  RILL_CHECK(enabled(), "state snapshot inserted with no snapshot budget");
  RILL_CHECK(!contains(key), "state snapshot {:x} inserted twice", key);
  Buffer memory;
  if (count() >= capacity_) {
    // The least recently used unpinned one (pin() keeps pinned ones below capacity).
    auto victim = entries_.end();
    for (BlockHash k : lru_)
      if ((victim = entries_.find(k))->second.pins == 0) break;
    RILL_CHECK(victim != entries_.end() && victim->second.pins == 0, "every state snapshot is pinned");
    memory = std::move(victim->second.snapshot.buffer);
    lru_.erase(victim->second.lru);
    entries_.erase(victim);
    ++num_evicted_;
  } else if (!spare_.empty()) {
    memory = std::move(spare_.back());
    spare_.pop_back();
  } else {
    memory = Buffer(kernels_.allocator(), bytes_per_snapshot_);
  }
  Entry& e = entries_[key];
  e.snapshot.buffer = std::move(memory);
  e.snapshot.state = e.snapshot.buffer.as(DType::f32, {int64_t(bytes_per_snapshot_ / sizeof(float))});
  e.snapshot.position = 0;
  e.lru = lru_.insert(lru_.end(), key);
  return e.snapshot;
}

void StateSnapshots::erase(BlockHash key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  lru_.erase(it->second.lru);
  if (it->second.pins > 0) --num_pinned_;
  spare_.push_back(std::move(it->second.snapshot.buffer));
  entries_.erase(it);
}

bool StateSnapshots::pin(BlockHash key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  if (it->second.pins == 0) {
    if (num_pinned_ + 1 > capacity_ / 2) return false;
    ++num_pinned_;
  }
  ++it->second.pins;
  return true;
}

void StateSnapshots::unpin(BlockHash key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  RILL_CHECK(it->second.pins > 0, "state snapshot {:x} unpinned more often than pinned", key);
  if (--it->second.pins == 0) --num_pinned_;
}

bool StateSnapshots::is_pinned(BlockHash key) const {
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.pins > 0;
}

void StateSnapshots::check_invariants() const {
  RILL_CHECK(lru_.size() == entries_.size(), "snapshot LRU holds {} keys for {} snapshots", lru_.size(),
             entries_.size());
  RILL_CHECK(count() <= capacity_, "{} snapshots exceed the budget of {}", count(), capacity_);
  for (BlockHash k : lru_) RILL_CHECK(entries_.count(k) == 1, "snapshot LRU key {:x} has no snapshot", k);
  int32_t pinned = 0;
  for (const auto& [k, e] : entries_) pinned += e.pins > 0;
  RILL_CHECK(pinned == num_pinned_ && pinned <= capacity_ / 2, "{} pinned snapshots, counter {}, capacity {}", pinned,
             num_pinned_, capacity_);
}

}  // namespace rill
