// engine/session.h — SessionPins: what the engine keeps for conversations (Request::session_id).
// When a request of a session ends (finished or cancelled), the session pins the last prompt
// boundary it reached: the prefix-cache blocks of its full blocks (prompt and the reply's computed
// tokens, which the next turn of a chat extends) and, for hybrid models, the state snapshot at the
// deepest pinned boundary that has one (the pin is cut back to it: a hybrid hit needs both). A pin
// is a reference on each block (refcount > 0, so LRU eviction skips it) and a pin on the snapshot.
// The next request of the session drops the old pin once it has matched its prefix; its own end
// pins again.
//
// Bounded: at most max_sessions pins (LRU over sessions) and at most max_pinned_fraction of the
// KV blocks pinned (distinct blocks; older sessions go first, a pin larger than the cap alone is
// cut to it). Under block pressure the scheduler unpins the least recently used sessions before it
// preempts a running sequence or leaves a waiting one waiting. Invariant: every pinned block is
// held by its session's table (counted in KvCache::check_invariants) and is in the prefix cache.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/state_pool.h"

namespace rill {

class SessionPins {
 public:
  /// `max_sessions` 0 or `max_pinned_fraction` 0: pins nothing.
  SessionPins(KvCache& kv, StateSnapshots& snapshots, bool hybrid, int32_t max_sessions, double max_pinned_fraction);
  ~SessionPins();
  SessionPins(const SessionPins&) = delete;
  SessionPins& operator=(const SessionPins&) = delete;

  bool enabled() const { return max_sessions_ > 0 && max_pinned_blocks_ > 0 && kv_.prefix_caching(); }
  /// Replaces `session`'s pin by the cached blocks under `keys` (a sequence's table keys, which
  /// the sequence still retains) and, for a hybrid model, the snapshot at the deepest of them.
  void pin(const std::string& session, std::span<const BlockHash> keys);
  /// Drops `session`'s pin, if any.
  void unpin(const std::string& session);
  /// Drops the least recently used session's pin; false when there is none.
  bool unpin_lru();
  /// Drops every pin (engine teardown).
  void clear();

  int32_t num_sessions() const { return int32_t(sessions_.size()); }
  /// Distinct blocks pinned by at least one session.
  int32_t num_pinned_blocks() const { return num_pinned_blocks_; }
  int32_t max_pinned_blocks() const { return max_pinned_blocks_; }
  int64_t num_unpinned_for_space() const { return num_unpinned_for_space_; }
  /// Pinned blocks of `session` (0 when it holds none).
  int32_t pinned_blocks(const std::string& session) const;
  /// The snapshot key `session` pins (hybrid models), if any.
  std::optional<BlockHash> pinned_snapshot(const std::string& session) const;
  /// Every session's table (for KvCache::check_invariants).
  void tables(std::vector<const BlockTable*>& out) const;
  /// RILL_CHECKs the bounds, the per-block counts and that pinned blocks/snapshots are cached.
  void check_invariants() const;

 private:
  struct Session {
    BlockTable table;
    std::optional<BlockHash> snapshot;
    std::list<std::string>::iterator lru;
  };
  void release(std::unordered_map<std::string, Session>::iterator it);
  /// Blocks of `blocks` that no session pins yet.
  int32_t new_blocks(std::span<const BlockId> blocks) const;

  KvCache& kv_;
  StateSnapshots& snapshots_;
  bool hybrid_;
  int32_t max_sessions_;
  int32_t max_pinned_blocks_;
  std::unordered_map<std::string, Session> sessions_;
  std::list<std::string> lru_;  // front: least recently used
  std::vector<int32_t> pins_;   // per block: sessions pinning it
  int32_t num_pinned_blocks_ = 0;
  int64_t num_unpinned_for_space_ = 0;
};

}  // namespace rill
