// kernels/cuda/smoke.cu — toolchain smoke kernel (saxpy) and device discovery.
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/smoke.h"
#include "kernels/kernels.h"

namespace rill {
namespace {
__global__ void saxpy_kernel(int64_t n, float a, const float* x, float* y) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
}  // namespace

bool cuda_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

namespace cuda {
void smoke_saxpy(int64_t n, float a, const float* x, float* y) {
  float *dx = nullptr, *dy = nullptr;
  size_t bytes = size_t(n) * sizeof(float);
  RILL_CUDA_CHECK(cudaMalloc(&dx, bytes));
  RILL_CUDA_CHECK(cudaMalloc(&dy, bytes));
  RILL_CUDA_CHECK(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
  RILL_CUDA_CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
  saxpy_kernel<<<unsigned((n + 255) / 256), 256>>>(n, a, dx, dy);
  RILL_CUDA_CHECK(cudaGetLastError());
  RILL_CUDA_CHECK(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost));
  RILL_CUDA_CHECK(cudaFree(dx));
  RILL_CUDA_CHECK(cudaFree(dy));
}
}  // namespace cuda
}  // namespace rill
