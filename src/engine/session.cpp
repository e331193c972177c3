// engine/session.cpp — see session.h.
#include "engine/session.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace rill {

SessionPins::SessionPins(KvCache& kv, StateSnapshots& snapshots, bool hybrid, int32_t max_sessions,
                         double max_pinned_fraction)
    : kv_(kv), snapshots_(snapshots), hybrid_(hybrid), max_sessions_(max_sessions),
      pins_(size_t(kv.num_blocks()), 0) {
  RILL_ENSURE(max_sessions >= 0, "max_sessions: must be >= 0, got {}", max_sessions);
  RILL_ENSURE(std::isfinite(max_pinned_fraction) && max_pinned_fraction >= 0 && max_pinned_fraction <= 1,
              "session_pinned_fraction: must be in [0, 1], got {}", max_pinned_fraction);
  max_pinned_blocks_ = int32_t(std::floor(max_pinned_fraction * kv.num_blocks()));
}

SessionPins::~SessionPins() { clear(); }

int32_t SessionPins::new_blocks(std::span<const BlockId> blocks) const {
  int32_t n = 0;
  for (BlockId b : blocks) n += pins_[size_t(b)] == 0;
  return n;
}

void SessionPins::pin(const std::string& session, std::span<const BlockHash> keys) {
  if (!enabled() || session.empty()) return;
  unpin(session);
  BlockTable table;
  kv_.retain_cached(keys, table);
  std::optional<BlockHash> snapshot;
  if (hybrid_) {
    // A hybrid prefix hit resumes only at a boundary with a snapshot: pin up to the deepest one.
    int32_t blocks = int32_t(table.blocks.size());
    while (blocks > 0 && !snapshots_.contains(table.keys[size_t(blocks - 1)])) --blocks;
    kv_.truncate(table, blocks);
    if (blocks > 0) snapshot = table.keys[size_t(blocks - 1)];
  }
  // Make room: older sessions first, then cut this pin to what the caps allow.
  while (!lru_.empty() && (num_sessions() >= max_sessions_ ||
                           num_pinned_blocks_ + new_blocks(table.blocks) > max_pinned_blocks_)) {
    release(sessions_.find(lru_.front()));
    ++num_unpinned_for_space_;
  }
  if (num_pinned_blocks_ + new_blocks(table.blocks) > max_pinned_blocks_) {  // no other pin left: cut to the cap
    const int32_t fit = max_pinned_blocks_ - num_pinned_blocks_;
    kv_.truncate(table, fit);
    if (hybrid_) {  // the snapshot must end where the pinned blocks end
      int32_t blocks = fit;
      while (blocks > 0 && !snapshots_.contains(table.keys[size_t(blocks - 1)])) --blocks;
      kv_.truncate(table, blocks);
      snapshot = blocks > 0 ? std::optional<BlockHash>(table.keys[size_t(blocks - 1)]) : std::nullopt;
    }
  }
  if (table.empty()) return;
  if (snapshot && !snapshots_.pin(*snapshot)) snapshot.reset();  // half the snapshots are pinned already
  for (BlockId b : table.blocks)
    if (pins_[size_t(b)]++ == 0) ++num_pinned_blocks_;
  Session& s = sessions_[session];
  s.table = std::move(table);
  s.snapshot = snapshot;
  s.lru = lru_.insert(lru_.end(), session);
}

void SessionPins::release(std::unordered_map<std::string, Session>::iterator it) {
  Session& s = it->second;
  for (BlockId b : s.table.blocks)
    if (--pins_[size_t(b)] == 0) --num_pinned_blocks_;
  kv_.free(s.table);
  if (s.snapshot) snapshots_.unpin(*s.snapshot);
  lru_.erase(s.lru);
  sessions_.erase(it);
}

void SessionPins::unpin(const std::string& session) {
  auto it = sessions_.find(session);
  if (it != sessions_.end()) release(it);
}

bool SessionPins::unpin_lru() {
  if (lru_.empty()) return false;
  release(sessions_.find(lru_.front()));
  ++num_unpinned_for_space_;
  return true;
}

void SessionPins::clear() {
  while (!lru_.empty()) release(sessions_.find(lru_.front()));
}

int32_t SessionPins::pinned_blocks(const std::string& session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? 0 : int32_t(it->second.table.blocks.size());
}

std::optional<BlockHash> SessionPins::pinned_snapshot(const std::string& session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? std::nullopt : it->second.snapshot;
}

void SessionPins::tables(std::vector<const BlockTable*>& out) const {
  for (const auto& [name, s] : sessions_) out.push_back(&s.table);
}

void SessionPins::check_invariants() const {
  RILL_CHECK(lru_.size() == sessions_.size(), "session LRU holds {} names for {} sessions", lru_.size(),
             sessions_.size());
  RILL_CHECK(num_sessions() <= max_sessions_, "{} pinned sessions exceed max_sessions {}", num_sessions(),
             max_sessions_);
  std::vector<int32_t> pins(pins_.size(), 0);
  for (const auto& [name, s] : sessions_) {
    RILL_CHECK(!s.table.empty() && s.table.keys.size() == s.table.blocks.size(),
               "session '{}': pin of {} blocks with {} keys", name, s.table.blocks.size(), s.table.keys.size());
    for (size_t i = 0; i < s.table.blocks.size(); ++i) {
      const BlockId b = s.table.blocks[i];
      ++pins[size_t(b)];
      RILL_CHECK(kv_.pool().ref_count(b) > 0 && kv_.prefix_cache().holds(b) &&
                     kv_.prefix_cache().key_of(b) == s.table.keys[i],
                 "session '{}': pinned block {} is not cached under its key", name, b);
    }
    if (s.snapshot) {
      RILL_CHECK(*s.snapshot == s.table.keys.back(), "session '{}': snapshot pinned off its last block", name);
      RILL_CHECK(snapshots_.is_pinned(*s.snapshot), "session '{}': its snapshot is gone or unpinned", name);
    }
  }
  int32_t distinct = 0;
  for (size_t b = 0; b < pins.size(); ++b) {
    RILL_CHECK(pins[b] == pins_[b], "block {}: pinned by {} sessions, counter {}", b, pins[b], pins_[b]);
    distinct += pins[b] > 0;
  }
  RILL_CHECK(distinct == num_pinned_blocks_ && distinct <= max_pinned_blocks_,
             "{} pinned blocks (counter {}) against a cap of {}", distinct, num_pinned_blocks_, max_pinned_blocks_);
}

}  // namespace rill
