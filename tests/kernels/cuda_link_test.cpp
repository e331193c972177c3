// The kernels library links in every build, with or without CUDA, and answers cuda_available().
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

TEST(CudaLink, AvailabilityIsQueryable) {
  bool available = cuda_available();
#ifndef RILL_HAVE_CUDA
  EXPECT_FALSE(available);
  EXPECT_THROW(make_cuda_kernels(0), Error);
#else
  SUCCEED() << "CUDA build; GPU present: " << available;
#endif
}

}  // namespace
}  // namespace rill
