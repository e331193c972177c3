// kernels/cuda/runtime.cpp — device query and the RAII wrappers' factories.
#include "kernels/cuda/runtime.h"

#include <atomic>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace rill::cuda {

namespace {
std::atomic<bool> g_pdl{false};
}

bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

bool parse_pdl_setting(const char* value) {
  if (!value) return true;
  const std::string_view v(value);
  if (v == "1") return true;
  if (v == "0") return false;
  fail("RILL_PDL: must be 0 (kernels never overlap) or 1 (the default), got '{}'", v);
}

DeviceInfo open_device(int ordinal) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA device {}: no usable CUDA driver/device ({})", ordinal, cudaGetErrorString(err));
  }
  if (ordinal < 0 || ordinal >= count)
    fail("CUDA device {} does not exist ({} device(s) present)", ordinal, count);
  RILL_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  RILL_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.max_smem_per_block = prop.sharedMemPerBlockOptin;
  info.l2_bytes = size_t(prop.l2CacheSize);
  if (prop.major < 8)
    fail("CUDA device {} ({}) has compute capability {}.{}; rill's CUDA backend needs sm_80 or newer "
         "(bf16 tensor cores); use --device cpu",
         ordinal, prop.name, prop.major, prop.minor);
  return info;
}

Stream Stream::create() {
  cudaStream_t s = nullptr;
  RILL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

void Stream::synchronize() const { RILL_CUDA_CHECK(cudaStreamSynchronize(get())); }

bool Stream::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  RILL_CUDA_CHECK(cudaStreamIsCapturing(get(), &status));
  return status != cudaStreamCaptureStatusNone;
}

Event Event::create(bool timing) {
  cudaEvent_t e = nullptr;
  RILL_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

void Event::record(cudaStream_t stream) const { RILL_CUDA_CHECK(cudaEventRecord(get(), stream)); }
void Event::synchronize() const { RILL_CUDA_CHECK(cudaEventSynchronize(get())); }

float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.f;
  RILL_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

CublasHandle CublasHandle::create(cudaStream_t stream) {
  cublasHandle_t h = nullptr;
  RILL_CUBLAS_CHECK(cublasCreate(&h));
  CublasHandle owned(h);
  RILL_CUBLAS_CHECK(cublasSetStream(h, stream));
  return owned;
}

CublasLtHandle CublasLtHandle::create() {
  cublasLtHandle_t h = nullptr;
  RILL_CUBLAS_CHECK(cublasLtCreate(&h));
  return CublasLtHandle(h);
}

void GraphExec::replay(cudaStream_t stream) const { RILL_CUDA_CHECK(cudaGraphLaunch(get(), stream)); }

void Graph::begin_capture(cudaStream_t stream) {
  RILL_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

Graph Graph::end_capture(cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  RILL_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  return Graph(g);
}

GraphExec Graph::instantiate() const {
  cudaGraphExec_t e = nullptr;
  RILL_CUDA_CHECK(cudaGraphInstantiate(&e, get(), 0));
  return GraphExec(e);
}

}  // namespace rill::cuda
