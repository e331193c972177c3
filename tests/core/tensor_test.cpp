// Tensor views, Buffer ownership, Arena bounds and the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace rill {
namespace {

TEST(Tensor, ShapeStridesAndViews) {
  std::vector<float> data(24);
  Tensor t(data.data(), DType::f32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.size(0), 6);
  Tensor s = v.slice(2, 5);
  EXPECT_EQ(s.size(0), 3);
  EXPECT_EQ(s.data_as<float>(), data.data() + 8);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4]");
}

TEST(Buffer, MoveTransfersOwnership) {
  Buffer a(cpu_allocator(), 1000);
  void* p = a.data();
  Buffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
}

TEST(Buffer, HostOutOfMemoryNamesBytesAndAvailable) {
  // An allocation no machine has: refused with the bytes asked for and what the machine has left.
  const size_t huge = size_t(1) << 60;
  try {
    Buffer b(cpu_allocator(), huge);
    FAIL() << "a 2^60-byte host buffer was allocated";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(huge) + " bytes requested"), std::string::npos) << what;
    EXPECT_NE(what.find("available of"), std::string::npos) << what;
  }
}

TEST(Arena, ExhaustionIsAnError) {
  Arena arena(cpu_allocator(), 4096);
  Tensor x = arena.tensor(DType::f32, {256});
  EXPECT_EQ(arena.used(), 1024u);
  EXPECT_THROW(arena.tensor(DType::f32, {1024}), Error);
  arena.reset();
  Tensor y = arena.tensor(DType::f32, {1024});
  EXPECT_EQ(y.data(), x.data());
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 7, 1000, 4099}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
      // Nested calls run serially on the calling thread.
      std::atomic<int> inner{0};
      pool.parallel_for(10, 1, [&](int64_t ib, int64_t ie) { inner += int(ie - ib); });
      EXPECT_EQ(inner.load(), 10);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

}  // namespace
}  // namespace rill
