// BlockPool, PrefixCache and KvCache: the three-state block invariant, LRU eviction order,
// all-or-nothing reserve, copy-on-write of shared partial blocks (checked on the KV contents),
// prefix keys that chain and separate namespaces, and hash collisions that miss instead of hit.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/prefix_cache.h"

namespace rill {
namespace {

TEST(BlockPool, AllocateReleaseAndExhaustion) {
  BlockPool pool(4);
  std::optional<BlockId> evicted;
  std::vector<BlockId> got;
  for (int i = 0; i < 4; ++i) {
    auto b = pool.allocate(evicted);
    ASSERT_TRUE(b);
    EXPECT_FALSE(evicted);
    got.push_back(*b);
  }
  EXPECT_FALSE(pool.allocate(evicted).has_value());
  EXPECT_EQ(pool.num_available(), 0);
  std::vector<BlockId> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<BlockId>{0, 1, 2, 3}));
  pool.retain(got[0]);
  pool.release(got[0]);
  EXPECT_EQ(pool.ref_count(got[0]), 1);
  EXPECT_EQ(pool.num_available(), 0);
  pool.release(got[0]);
  EXPECT_EQ(pool.num_available(), 1);
  pool.check_invariants();
  for (int i = 1; i < 4; ++i) pool.release(got[size_t(i)]);
  EXPECT_EQ(pool.num_available(), 4);
  pool.check_invariants();
}

TEST(BlockPool, CachedBlocksAreEvictedLeastRecentlyReleasedFirst) {
  BlockPool pool(3);
  std::optional<BlockId> evicted;
  BlockId a = *pool.allocate(evicted), b = *pool.allocate(evicted), c = *pool.allocate(evicted);
  pool.set_cached(a, true);
  pool.set_cached(b, true);
  pool.release(b);  // b released before a: b is the least recently used
  pool.release(a);
  pool.release(c);  // not cached: straight to the free list
  EXPECT_EQ(pool.num_available(), 3);
  EXPECT_EQ(pool.num_evictable(), 2);
  pool.check_invariants();
  // The free block goes first, then b, then a.
  EXPECT_EQ(*pool.allocate(evicted), c);
  EXPECT_FALSE(evicted);
  EXPECT_EQ(*pool.allocate(evicted), b);
  ASSERT_TRUE(evicted);
  EXPECT_EQ(*evicted, b);
  EXPECT_FALSE(pool.is_cached(b));
  // Reviving a cached block takes it off the LRU list.
  pool.retain(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.num_available(), 0);
  EXPECT_FALSE(pool.allocate(evicted).has_value());
  pool.check_invariants();
}

TEST(PrefixCache, KeysChainAndSeparateNamespaces) {
  std::vector<int32_t> t1(16), t2(16);
  std::iota(t1.begin(), t1.end(), 0);
  std::iota(t2.begin(), t2.end(), 100);
  const uint64_t ns_a = PrefixCache::namespace_key("model-a|"), ns_b = PrefixCache::namespace_key("model-b|");
  EXPECT_NE(ns_a, ns_b);
  EXPECT_NE(PrefixCache::block_key(ns_a, ns_a, t1), PrefixCache::block_key(ns_b, ns_b, t1));
  const BlockHash k1 = PrefixCache::block_key(ns_a, ns_a, t1);
  // Same tokens after a different parent: a different key.
  EXPECT_NE(PrefixCache::block_key(k1, ns_a, t2), PrefixCache::block_key(ns_a, ns_a, t2));
  PrefixCache cache(8, 16);
  ASSERT_TRUE(cache.insert(k1, ns_a, t1, 3));
  EXPECT_EQ(cache.lookup(k1, ns_a, t1), std::optional<BlockId>(3));
  // A colliding key with other tokens or another parent is a miss, not a wrong hit.
  EXPECT_FALSE(cache.lookup(k1, ns_a, t2).has_value());
  EXPECT_FALSE(cache.lookup(k1, ns_b, t1).has_value());
  EXPECT_FALSE(cache.insert(k1, ns_a, t1, 4));  // first one wins
  cache.forget(3);
  EXPECT_FALSE(cache.lookup(k1, ns_a, t1).has_value());
  EXPECT_EQ(cache.num_entries(), 0);
}

class KvCacheTest : public ::testing::Test {
 protected:
  KvCacheTest() : kernels_(make_cpu_kernels()) {
    spec_.num_layers = 2;
    spec_.num_kv_heads = 1;
    spec_.head_dim = 4;
    spec_.dtype = DType::f32;
  }
  // Fills block b of every layer with the value `v` (K) and -v (V).
  void fill(KvCache& kv, BlockId b, float v) {
    for (KvLayer& l : kv.layers()) {
      const int64_t per_block = l.k.numel() / l.k.size(0);
      std::fill_n(l.k.data_as<float>() + b * per_block, per_block, v);
      std::fill_n(l.v.data_as<float>() + b * per_block, per_block, -v);
    }
  }
  float k_at(KvCache& kv, BlockId b, int layer) {
    KvLayer& l = kv.layers()[size_t(layer)];
    return l.k.data_as<float>()[b * (l.k.numel() / l.k.size(0))];
  }
  float v_at(KvCache& kv, BlockId b, int layer) {
    KvLayer& l = kv.layers()[size_t(layer)];
    return l.v.data_as<float>()[b * (l.v.numel() / l.v.size(0)) + 3];
  }
  std::unique_ptr<Kernels> kernels_;
  KvSpec spec_;
};

TEST_F(KvCacheTest, BudgetToBlocks) {
  // 2 layers * (K + V) * 16 tokens * 1 head * 4 dims * 4 bytes = 1024 bytes a block.
  EXPECT_EQ(spec_.bytes_per_block(16), 1024u);
  EXPECT_EQ(KvCache::blocks_for_budget(spec_, 16, 10 * 1024 + 1023), 10);
  EXPECT_EQ(KvCache::blocks_for_budget(spec_, 16, 1000), 0);
}

TEST_F(KvCacheTest, ReserveIsAllOrNothing) {
  KvCache kv(*kernels_, spec_, 4, 4, false);
  BlockTable a, b;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.reserve(a, 0, 9, copies));  // 3 blocks
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_FALSE(kv.reserve(b, 0, 8, copies));  // needs 2, 1 left
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(kv.num_available(), 1);
  ASSERT_TRUE(kv.reserve(a, 9, 12, copies));  // still fits the third block
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_TRUE(copies.empty());
  const BlockTable* tables[] = {&a, &b};
  kv.check_invariants(tables);
  kv.free(a);
  EXPECT_EQ(kv.num_available(), 4);
  kv.check_invariants(tables);
}

TEST_F(KvCacheTest, ForkSharesBlocksAndCopiesOnWrite) {
  KvCache kv(*kernels_, spec_, 8, 4, false);
  BlockTable parent, child;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.reserve(parent, 0, 6, copies));  // blocks for tokens 0..5: one full, one partial
  fill(kv, parent.blocks[0], 1.f);
  fill(kv, parent.blocks[1], 2.f);
  kv.fork(parent, child);
  EXPECT_EQ(kv.pool().ref_count(parent.blocks[0]), 2);
  EXPECT_EQ(kv.pool().ref_count(parent.blocks[1]), 2);
  // The child writes token 6 (in the shared partial block): it gets a private copy.
  ASSERT_TRUE(kv.reserve(child, 6, 7, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, parent.blocks[1]);
  EXPECT_EQ(copies[0].dst, child.blocks[1]);
  EXPECT_NE(child.blocks[1], parent.blocks[1]);
  EXPECT_EQ(child.blocks[0], parent.blocks[0]);  // the full block stays shared
  kv.copy_blocks(copies);
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(k_at(kv, child.blocks[1], layer), 2.f);
    EXPECT_EQ(v_at(kv, child.blocks[1], layer), -2.f);
  }
  // Now the parent is the only holder of its partial block: no copy.
  copies.clear();
  ASSERT_TRUE(kv.reserve(parent, 6, 7, copies));
  EXPECT_TRUE(copies.empty());
  const BlockTable* tables[] = {&parent, &child};
  kv.check_invariants(tables);
  kv.free(parent);
  kv.free(child);
  EXPECT_EQ(kv.num_available(), 8);
  kv.check_invariants({});
}

TEST_F(KvCacheTest, PrefixMatchReusesFullBlocksOnly) {
  KvCache kv(*kernels_, spec_, 8, 4, true);
  const uint64_t ns = PrefixCache::namespace_key("m|");
  std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  BlockTable a;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.reserve(a, 0, 10, copies));
  kv.commit(a, tokens, 10, ns);
  EXPECT_EQ(a.keys.size(), 2u);  // two full blocks keyed; the third (2 tokens) is not
  EXPECT_EQ(kv.prefix_cache().num_entries(), 2);
  // Same first 9 tokens: two full blocks hit.
  std::vector<int32_t> other{1, 2, 3, 4, 5, 6, 7, 8, 99, 100, 101};
  BlockTable b;
  EXPECT_EQ(kv.match_prefix(other, int32_t(other.size()) - 1, ns, b), 8);
  EXPECT_EQ(b.blocks, std::vector<BlockId>(a.blocks.begin(), a.blocks.begin() + 2));
  // Another namespace: no hit.
  BlockTable c;
  EXPECT_EQ(kv.match_prefix(other, 10, PrefixCache::namespace_key("other|"), c), 0);
  // A limit inside the second block stops at the first.
  BlockTable d;
  EXPECT_EQ(kv.match_prefix(other, 7, ns, d), 4);
  const BlockTable* tables[] = {&a, &b, &c, &d};
  kv.check_invariants(tables);
  kv.free(a);
  kv.free(b);
  kv.free(d);
  // Freed but cached: still matchable, and counted as available.
  EXPECT_EQ(kv.num_available(), 8);
  EXPECT_EQ(kv.pool().num_evictable(), 2);
  BlockTable e;
  EXPECT_EQ(kv.match_prefix(tokens, 9, ns, e), 8);
  kv.free(e);
  // Filling the pool evicts the cached blocks, and their entries go with them.
  BlockTable big;
  ASSERT_TRUE(kv.reserve(big, 0, 32, copies));
  EXPECT_EQ(kv.prefix_cache().num_entries(), 0);
  BlockTable f;
  EXPECT_EQ(kv.match_prefix(tokens, 9, ns, f), 0);
  const BlockTable* tables2[] = {&big, &f};
  kv.check_invariants(tables2);
}

}  // namespace
}  // namespace rill
