// engine/kv/block_pool.cpp — see block_pool.h. All operations are O(1) and allocation-free.
#include "engine/kv/block_pool.h"

#include "core/error.h"

namespace rill {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_(size_t(num_blocks), 0), cached_(size_t(num_blocks), 0), prev_(size_t(num_blocks), -1),
      next_(size_t(num_blocks), -1) {
  RILL_ENSURE(num_blocks > 0, "KV cache: need at least one block, got {}", num_blocks);
  free_.reserve(size_t(num_blocks));
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hands out 0, 1, 2, ... first
}

std::optional<BlockId> BlockPool::allocate(std::optional<BlockId>& evicted) {
  evicted.reset();
  BlockId id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    id = lru_head_;
    lru_unlink(id);
    cached_[size_t(id)] = 0;
    evicted = id;
  } else {
    return std::nullopt;
  }
  RILL_DCHECK(ref_[size_t(id)] == 0);
  ref_[size_t(id)] = 1;
  return id;
}

void BlockPool::retain(BlockId id) {
  RILL_DCHECK(id >= 0 && id < num_blocks());
  int32_t& r = ref_[size_t(id)];
  if (r == 0) {
    // Only a cached block can be revived: a free block is handed out by allocate() alone.
    RILL_CHECK(cached_[size_t(id)], "retain of free block {}", id);
    lru_unlink(id);
  }
  ++r;
}

void BlockPool::release(BlockId id) {
  RILL_DCHECK(id >= 0 && id < num_blocks());
  int32_t& r = ref_[size_t(id)];
  RILL_CHECK(r > 0, "release of block {} with refcount 0", id);
  if (--r > 0) return;
  if (cached_[size_t(id)])
    lru_push_back(id);
  else
    free_.push_back(id);
}

void BlockPool::set_cached(BlockId id, bool cached) {
  uint8_t& c = cached_[size_t(id)];
  if (bool(c) == cached) return;
  if (ref_[size_t(id)] == 0) {
    // A refcount-0 block moves between the free list and the LRU list.
    if (cached) {
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i] == id) {
          free_[i] = free_.back();
          free_.pop_back();
          break;
        }
      c = 1;
      lru_push_back(id);
      return;
    }
    lru_unlink(id);
    free_.push_back(id);
  }
  c = cached ? 1 : 0;
}

void BlockPool::lru_push_back(BlockId id) {
  prev_[size_t(id)] = lru_tail_;
  next_[size_t(id)] = -1;
  if (lru_tail_ >= 0)
    next_[size_t(lru_tail_)] = id;
  else
    lru_head_ = id;
  lru_tail_ = id;
  ++num_evictable_;
}

void BlockPool::lru_unlink(BlockId id) {
  BlockId p = prev_[size_t(id)], n = next_[size_t(id)];
  if (p >= 0)
    next_[size_t(p)] = n;
  else
    lru_head_ = n;
  if (n >= 0)
    prev_[size_t(n)] = p;
  else
    lru_tail_ = p;
  prev_[size_t(id)] = next_[size_t(id)] = -1;
  --num_evictable_;
}

void BlockPool::check_invariants() const {
  const int32_t n = num_blocks();
  std::vector<uint8_t> seen(size_t(n), 0);
  for (BlockId b : free_) {
    RILL_CHECK(b >= 0 && b < n, "free list holds bad id {}", b);
    RILL_CHECK(!seen[size_t(b)], "block {} twice on the free list", b);
    seen[size_t(b)] = 1;
    RILL_CHECK(ref_[size_t(b)] == 0 && !cached_[size_t(b)], "free block {} has refcount {} cached {}", b,
               ref_[size_t(b)], cached_[size_t(b)]);
  }
  int32_t lru = 0;
  for (BlockId b = lru_head_, p = -1; b >= 0; p = b, b = next_[size_t(b)]) {
    RILL_CHECK(prev_[size_t(b)] == p, "LRU link of block {} broken", b);
    RILL_CHECK(!seen[size_t(b)], "block {} both free and on the LRU list (or a cycle)", b);
    seen[size_t(b)] = 2;
    RILL_CHECK(ref_[size_t(b)] == 0 && cached_[size_t(b)], "LRU block {} has refcount {} cached {}", b,
               ref_[size_t(b)], cached_[size_t(b)]);
    ++lru;
  }
  RILL_CHECK(lru == num_evictable_, "LRU list has {} blocks, counter says {}", lru, num_evictable_);
  for (BlockId b = 0; b < n; ++b)
    if (!seen[size_t(b)]) RILL_CHECK(ref_[size_t(b)] > 0, "block {} is lost: refcount 0 on no list", b);
}

}  // namespace rill
